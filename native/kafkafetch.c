/*
 * samzamp._kafkafetch: a confluent-kafka Consumer's fetched batch read from librdkafka in C and packed
 * into worker runs (native/packruns.h), with no Python object per message. Only
 * samzamp.systems.kafka.consumer imports it; its stub is samzamp/_kafkafetch.pyi.
 *
 * confluent-kafka's consume() makes a Message per message (a topic str, key and value bytes, an error
 * object); what the runs need is the key and value bytes, read here where librdkafka holds them. The
 * same librdkafka call serves the batch (rd_kafka_consume_batch_queue on the consumer's queue, which
 * also moves the consumer's position as it does under consume()), the same way:
 *
 * - librdkafka serves the log and error callbacks confluent-kafka installed from inside that call, and
 *   they find the calling thread's CallState through the Handle's thread-local key, to take the GIL
 *   again. read_batch sets a CallState there exactly as consume() does (CallState_begin/_end), so a
 *   log line is logged and a callback's exception raised as under consume(). attach refuses a consumer
 *   with any other callback set (stats, throttle, OAuth, rebalance, commit): samzamp sets none, and
 *   these alone are not proven here.
 * - consume() is serialized with the Consumer's other calls (close() above all) by its gate
 *   (Handle_serialize_enter/_exit: the owning thread's id in gate_owner, a depth); read_batch takes the
 *   same gate the same way.
 * - Errors (partition EOF among them) come back as (code, reason), as Message.error() gives them;
 *   every message is destroyed before the call returns; the GIL is released while librdkafka waits.
 *
 * Nothing of this is librdkafka's or confluent-kafka's public API in C: librdkafka's functions are
 * found in the library confluent-kafka's own extension loaded (dlopen RTLD_NOLOAD of its file, dlsym),
 * with the few stable prototypes of rdkafka.h declared here and rd_kafka_message_t as rdkafka.h has it
 * since 0.9; confluent-kafka's Handle and CallState are its 2.16 layouts, checked at attach (the
 * type's size, the consumer type, the logger where the Handle says it is, librdkafka's opaque pointing
 * back at the Handle) and on the Python side by version. Any check failing: attach raises, and the
 * consumer is read through consume() as before.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "packruns.h"

/* rdkafka.h's rd_kafka_message_t (unchanged since librdkafka 0.9). */
typedef struct {
    int err; /* rd_kafka_resp_err_t */
    void *rkt;
    int32_t partition;
    void *payload;
    size_t len;
    void *key;
    size_t key_len;
    int64_t offset;
    void *private_;
} rdk_message_t;

/* confluent-kafka 2.16's CallState (src/confluent_kafka/src/confluent_kafka.h). */
typedef struct {
    PyThreadState *thread_state;
    int crashed;
    PyObject *exception_value;
} cfl_call_state_t;

/* confluent-kafka 2.16's Handle, on a platform with C11 atomics (atomic_int_t is int, atomic_ulong_t
 * unsigned long) and Py_tss_t (Python 3.7 and later). */
typedef struct {
    PyObject_HEAD void *rk;
    PyObject *error_cb;
    PyObject *throttle_cb;
    PyObject *stats_cb;
    int initiated;
    Py_tss_t tlskey;
    int type; /* rd_kafka_type_t */
    PyObject *logger;
    PyObject *oauth_cb;
    int oauth_token_set;
    int active_calls;
    int closing;
    unsigned long closing_thread;
    union {
        struct {
            PyObject *default_dr_cb;
            int dr_only_error;
        } Producer;
        struct {
            int rebalance_assigned;
            int rebalance_incremental_assigned;
            int rebalance_incremental_unassigned;
            PyObject *on_assign;
            PyObject *on_revoke;
            PyObject *on_lost;
            PyObject *on_commit;
            void *rkqu;
            unsigned long gate_owner;
            int gate_depth;
        } Consumer;
        struct {
            PyObject *on_share_acknowledgement_commit;
        } ShareConsumer;
    } u;
} cfl_handle_t;

#define RDK_CONSUMER 1
#define RDK_TIMESTAMP_NOT_AVAILABLE 0

/* librdkafka's functions, from the library confluent-kafka loaded. */
static struct {
    ssize_t (*consume_batch_queue)(void *rkqu, int timeout_ms, rdk_message_t **out, size_t size);
    void (*message_destroy)(rdk_message_t *m);
    int64_t (*message_timestamp)(const rdk_message_t *m, int *tstype);
    const char *(*message_errstr)(const rdk_message_t *m);
    const char *(*topic_name)(const void *rkt);
    void *(*opaque)(const void *rk);
    int (*last_error)(void);
    const char *(*err2str)(int err);
    int loaded;
} rdk;

static int load_librdkafka(const char *cimpl_path) {
    if (rdk.loaded) return 0;
    void *lib = dlopen(cimpl_path, RTLD_NOW | RTLD_NOLOAD);
    if (lib == NULL) {
        PyErr_Format(PyExc_RuntimeError, "confluent-kafka's extension %s is not loaded: %s", cimpl_path, dlerror());
        return -1;
    }
    /* dlsym on the extension's handle searches the libraries it was linked with: the wheel's
     * librdkafka or the system's, whichever confluent-kafka itself calls */
    struct {
        const char *name;
        void **slot;
    } wanted[] = {
        {"rd_kafka_consume_batch_queue", (void **)&rdk.consume_batch_queue},
        {"rd_kafka_message_destroy", (void **)&rdk.message_destroy},
        {"rd_kafka_message_timestamp", (void **)&rdk.message_timestamp},
        {"rd_kafka_message_errstr", (void **)&rdk.message_errstr},
        {"rd_kafka_topic_name", (void **)&rdk.topic_name},
        {"rd_kafka_opaque", (void **)&rdk.opaque},
        {"rd_kafka_last_error", (void **)&rdk.last_error},
        {"rd_kafka_err2str", (void **)&rdk.err2str},
    };
    for (size_t i = 0; i < sizeof wanted / sizeof wanted[0]; i++) {
        void *f = dlsym(lib, wanted[i].name);
        if (f == NULL) {
            PyErr_Format(PyExc_RuntimeError, "librdkafka has no %s", wanted[i].name);
            dlclose(lib);
            return -1;
        }
        *wanted[i].slot = f;
    }
    /* lib stays open (a reference to a library loaded anyway): the pointers must stay valid */
    rdk.loaded = 1;
    return 0;
}

/* A reader of one Consumer: attach()'s checks passed on it. */
typedef struct {
    PyObject_HEAD cfl_handle_t *handle; /* the Consumer, owned */
} Reader;

/* Handle_serialize_enter: the gate consume() and the Consumer's other calls pass. 0, or -1 with an
 * exception set (a signal while waiting for it). */
static int gate_enter(cfl_handle_t *h) {
    unsigned long self = PyThread_get_thread_ident();
    for (;;) {
        unsigned long owner = __atomic_load_n(&h->u.Consumer.gate_owner, __ATOMIC_SEQ_CST);
        if (owner == self) {
            __atomic_add_fetch(&h->u.Consumer.gate_depth, 1, __ATOMIC_SEQ_CST);
            return 0;
        }
        unsigned long expected = 0;
        if (owner == 0 && __atomic_compare_exchange_n(&h->u.Consumer.gate_owner, &expected, self, 0, __ATOMIC_SEQ_CST,
                                                      __ATOMIC_SEQ_CST)) {
            __atomic_store_n(&h->u.Consumer.gate_depth, 1, __ATOMIC_SEQ_CST);
            return 0;
        }
        Py_BEGIN_ALLOW_THREADS usleep(1000);
        Py_END_ALLOW_THREADS if (PyErr_CheckSignals() < 0) return -1;
    }
}

static void gate_exit(cfl_handle_t *h) {
    if (__atomic_sub_fetch(&h->u.Consumer.gate_depth, 1, __ATOMIC_SEQ_CST) == 0) {
        __atomic_store_n(&h->u.Consumer.gate_owner, 0, __ATOMIC_SEQ_CST);
    }
}

/* One rd_kafka_consume_batch_queue as consume() makes it: the GIL released, a CallState where the
 * callbacks look for it, then signals and a callback's exception raised. The count of messages taken
 * into ``out`` (destroyed again on failure), or -1 with an exception set. */
static ssize_t consume_call(cfl_handle_t *h, int timeout_ms, rdk_message_t **out, size_t max) {
    cfl_call_state_t cs;
    cs.thread_state = PyEval_SaveThread();
    cs.crashed = 0;
    cs.exception_value = NULL;
    PyThread_tss_set(&h->tlskey, &cs);
    ssize_t n = rdk.consume_batch_queue(h->u.Consumer.rkqu, timeout_ms, out, max);
    int err = n < 0 ? rdk.last_error() : 0;
    PyThread_tss_set(&h->tlskey, NULL);
    PyEval_RestoreThread(cs.thread_state);
    int failed = PyErr_CheckSignals() < 0;
    if (!failed && cs.crashed) {
        failed = 1;
        if (cs.exception_value != NULL && PyExceptionInstance_Check(cs.exception_value)) {
            PyErr_SetObject(PyExceptionInstance_Class(cs.exception_value), cs.exception_value);
        } else if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_RuntimeError, "a librdkafka callback failed while consuming");
        }
    }
    Py_XDECREF(cs.exception_value);
    if (failed) {
        for (ssize_t i = 0; i < n; i++) rdk.message_destroy(out[i]);
        return -1;
    }
    if (n < 0) {
        PyErr_Format(PyExc_RuntimeError, "rd_kafka_consume_batch_queue failed: %s", rdk.err2str(err));
        return -1;
    }
    return n;
}

/*
 * Reader.read_batch(batch, timeout_s, lookup, single_topic, split, size, run_type, array_type)
 *   -> (dict[ssp, (last_offset, list[list[run]])], list[(code, reason)], dropped)
 */
static PyObject *reader_read_batch(Reader *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 8) {
        PyErr_Format(PyExc_TypeError,
                     "read_batch(batch, timeout_s, lookup, single_topic, split, size, run_type, array_type) takes 8 "
                     "arguments, got %zd",
                     nargs);
        return NULL;
    }
    Py_ssize_t batch = PyLong_AsSsize_t(args[0]);
    if (batch == -1 && PyErr_Occurred()) return NULL;
    double timeout_s = PyFloat_AsDouble(args[1]);
    if (timeout_s == -1.0 && PyErr_Occurred()) return NULL;
    PyObject *lookup = args[2], *split = args[4], *run_type = args[6], *array_type = args[7];
    if (!PyDict_Check(lookup) || !PyDict_Check(split)) {
        PyErr_SetString(PyExc_TypeError, "read_batch: lookup and split must be dicts");
        return NULL;
    }
    int single_topic = PyObject_IsTrue(args[3]);
    if (single_topic < 0) return NULL;
    Py_ssize_t size = PyLong_AsSsize_t(args[5]);
    if (size == -1 && PyErr_Occurred()) return NULL;
    if (size < 1 || batch < 1 || batch > 1000000) {
        PyErr_Format(PyExc_ValueError, "read_batch: run size %zd or batch %zd out of range", size, batch);
        return NULL;
    }
    cfl_handle_t *h = self->handle;
    if (gate_enter(h) < 0) return NULL;
    if (h->rk == NULL || h->u.Consumer.rkqu == NULL) {
        gate_exit(h);
        PyErr_SetString(PyExc_RuntimeError, "Consumer closed");
        return NULL;
    }

    PyObject *result = NULL, *out = NULL, *errors = NULL, *part_key = NULL, *tuple_key = NULL;
    rdk_message_t **msgs = PyMem_New(rdk_message_t *, (size_t)batch);
    rec_t *recs = PyMem_New(rec_t, (size_t)batch);
    ssize_t n = 0;
    Py_ssize_t nrecs = 0, dropped = 0;
    targets_t targets;
    if (targets_init(&targets) < 0) {
        PyMem_Free(msgs);
        PyMem_Free(recs);
        gate_exit(h);
        return NULL;
    }
    if (msgs == NULL || recs == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    /* What librdkafka has queued, up to a batch; if that is nothing, wait up to timeout_s for the
     * first message only, then take what came with it (as KafkaSystemConsumer._consume does). */
    n = consume_call(h, 0, msgs, (size_t)batch);
    if (n < 0) {
        n = 0;
        goto done;
    }
    if (n == 0 && timeout_s > 0) {
        n = consume_call(h, (int)(timeout_s * 1000), msgs, 1);
        if (n < 0) {
            n = 0;
            goto done;
        }
        if (n == 1 && batch > 1) {
            ssize_t more = consume_call(h, 0, msgs + 1, (size_t)batch - 1);
            if (more < 0) goto done; /* the first is destroyed at done, as consume() drops a batch it raises on */
            n += more;
        }
    }
    errors = PyList_New(0);
    if (errors == NULL) goto done;

    /* Each message's fields; errors apart, unregistered partitions dropped. A batch comes in runs of
     * one partition: the SSP is looked up when the run changes. */
    Py_ssize_t current = -2; /* the target of the current run; -1: dropped */
    const void *last_rkt = NULL;
    int32_t last_partition = -1;
    for (ssize_t i = 0; i < n; i++) {
        const rdk_message_t *m = msgs[i];
        if (m->err) {
            PyObject *e = Py_BuildValue("(is)", m->err, rdk.message_errstr(m));
            if (e == NULL) goto done;
            int failed = PyList_Append(errors, e);
            Py_DECREF(e);
            if (failed < 0) goto done;
            continue;
        }
        if (current == -2 || m->partition != last_partition || m->rkt != last_rkt) {
            Py_XSETREF(part_key, PyLong_FromLong(m->partition));
            if (part_key == NULL) goto done;
            PyObject *ssp;
            if (single_topic) {
                ssp = PyDict_GetItemWithError(lookup, part_key);
            } else {
                const char *name = m->rkt == NULL ? NULL : rdk.topic_name(m->rkt);
                PyObject *topic = name == NULL ? Py_NewRef(Py_None) : PyUnicode_FromString(name);
                if (topic == NULL) goto done;
                Py_XSETREF(tuple_key, PyTuple_Pack(2, topic, part_key));
                Py_DECREF(topic);
                ssp = tuple_key == NULL ? NULL : PyDict_GetItemWithError(lookup, tuple_key);
            }
            if (ssp == NULL && PyErr_Occurred()) goto done;
            current = ssp == NULL ? -1 : target_of(ssp, split, &targets);
            if (ssp != NULL && current < 0) goto done;
            last_partition = m->partition;
            last_rkt = m->rkt;
        }
        if (current < 0) {
            dropped++;
            continue;
        }
        rec_t *r = &recs[nrecs];
        /* as Message.offset() (None below 0) and KafkaSystemConsumer.poll (None as 0) have it */
        r->off = m->offset >= 0 ? m->offset : 0;
        int tstype = RDK_TIMESTAMP_NOT_AVAILABLE;
        int64_t ts = rdk.message_timestamp(m, &tstype);
        r->ts = tstype == RDK_TIMESTAMP_NOT_AVAILABLE ? 0 : ts;
        /* a null pointer is None, as Message.key() and value() have it */
        r->key = (const char *)m->key;
        r->key_len = m->key == NULL ? -1 : (Py_ssize_t)m->key_len;
        r->value = (const char *)m->payload;
        r->value_len = m->payload == NULL ? -1 : (Py_ssize_t)m->len;
        r->target = current;
        file_record(r, &targets);
        nrecs++;
    }

    out = build_runs(recs, nrecs, &targets, size, run_type, array_type);
    if (out != NULL) result = Py_BuildValue("(OOn)", out, errors, dropped);

done:
    /* the records borrowed the messages' bytes: destroyed only now */
    for (ssize_t i = 0; i < n; i++) rdk.message_destroy(msgs[i]);
    gate_exit(h);
    PyMem_Free(msgs);
    PyMem_Free(recs);
    targets_free(&targets);
    Py_XDECREF(out);
    Py_XDECREF(errors);
    Py_XDECREF(part_key);
    Py_XDECREF(tuple_key);
    return result;
}

static void reader_dealloc(Reader *self) {
    Py_XDECREF((PyObject *)self->handle);
    PyObject_Free(self);
}

static PyMethodDef reader_methods[] = {
    {"read_batch", (PyCFunction)(void (*)(void))reader_read_batch, METH_FASTCALL,
     "read_batch(batch, timeout_s, lookup, single_topic, split, size, run_type, array_type, /) -> "
     "(dict[ssp, (last_offset, list[list[run]])], list[(code, reason)], dropped)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "samzamp._kafkafetch.Reader",
    .tp_basicsize = sizeof(Reader),
    .tp_dealloc = (destructor)reader_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A confluent-kafka Consumer's batches read from librdkafka and packed, as attach() made it.",
    .tp_methods = reader_methods,
};

/* attach(consumer, consumer_type, cimpl_path, logger) -> Reader; RuntimeError saying why not. */
static PyObject *mod_attach(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError, "attach(consumer, consumer_type, cimpl_path, logger) takes 4 arguments, got %zd",
                     nargs);
        return NULL;
    }
    PyObject *consumer = args[0], *type = args[1], *logger = args[3];
    if (!PyType_Check(type) || Py_TYPE(consumer) != (PyTypeObject *)type) {
        PyErr_SetString(PyExc_RuntimeError, "not exactly confluent-kafka's Consumer (a subclass is not read natively)");
        return NULL;
    }
    if (((PyTypeObject *)type)->tp_basicsize != (Py_ssize_t)sizeof(cfl_handle_t)) {
        PyErr_Format(PyExc_RuntimeError, "confluent-kafka's Handle is %zd bytes, not the %zu of its 2.16 layout",
                     ((PyTypeObject *)type)->tp_basicsize, sizeof(cfl_handle_t));
        return NULL;
    }
    const char *path = PyUnicode_AsUTF8(args[2]);
    if (path == NULL || load_librdkafka(path) < 0) return NULL;
    cfl_handle_t *h = (cfl_handle_t *)consumer;
    if (h->type != RDK_CONSUMER || h->logger != logger || h->rk == NULL || h->u.Consumer.rkqu == NULL ||
        !h->initiated || !PyThread_tss_is_created(&h->tlskey)) {
        PyErr_SetString(PyExc_RuntimeError, "the Consumer's Handle is not where its 2.16 layout has it");
        return NULL;
    }
    if (rdk.opaque(h->rk) != (void *)h) {
        PyErr_SetString(PyExc_RuntimeError, "librdkafka's opaque of the Consumer is not its Handle");
        return NULL;
    }
    if (h->error_cb != NULL || h->throttle_cb != NULL || h->stats_cb != NULL || h->oauth_cb != NULL ||
        h->u.Consumer.on_assign != NULL || h->u.Consumer.on_revoke != NULL || h->u.Consumer.on_lost != NULL ||
        h->u.Consumer.on_commit != NULL) {
        PyErr_SetString(PyExc_RuntimeError,
                        "the Consumer has a callback (error, stats, throttle, OAuth, rebalance or commit) that "
                        "is served only under confluent-kafka's own calls");
        return NULL;
    }
    Reader *reader = PyObject_New(Reader, &ReaderType);
    if (reader == NULL) return NULL;
    Py_INCREF(consumer);
    reader->handle = h;
    return (PyObject *)reader;
}

static PyMethodDef module_methods[] = {
    {"attach", (PyCFunction)(void (*)(void))mod_attach, METH_FASTCALL,
     "attach(consumer, consumer_type, cimpl_path, logger, /) -> Reader: a reader of the Consumer's batches from "
     "librdkafka; RuntimeError saying why when its layout or callbacks are not the ones checked"},
    {NULL, NULL, 0, NULL},
};

static int module_exec(PyObject *Py_UNUSED(module)) { return PyType_Ready(&ReaderType); }

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
    {0, NULL},
};

static struct PyModuleDef kafkafetchmodule = {
    PyModuleDef_HEAD_INIT,
    .m_name = "samzamp._kafkafetch",
    .m_doc = "A Kafka consumer's batches read from librdkafka and packed (private: use samzamp.systems.kafka.consumer).",
    .m_size = 0,
    .m_methods = module_methods,
    .m_slots = module_slots,
};

PyMODINIT_FUNC PyInit__kafkafetch(void) { return PyModuleDef_Init(&kafkafetchmodule); }
