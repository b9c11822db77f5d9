/*
 * samzamp._fetchpack: a consumed batch of Kafka messages straight to packed runs, in C. Only
 * samzamp.systems.kafka.consumer imports it; its stub is samzamp/_fetchpack.pyi.
 *
 * When every task runs in a worker process, what a poll fetched goes to the workers as packed runs
 * (samzamp/consume/packed.py): a run's first offset, every offset as an array('q'), and the msgpack
 * bytes a Process frame carries for it (the msgpack array of [offset, key, value, timestamp] arrays,
 * byte for byte what msgspec encodes for the list of RawMessage tuples: tests/unit/test_fetchpack.py
 * compares them). pack_consumed takes the list confluent-kafka's consume() returned and makes those
 * runs per partition, and per key bucket where the partition is read by key bucket, with no Python
 * tuple per message.
 *
 * A message is read through its public methods only (error(), partition(), topic(), offset(), key(),
 * value(), timestamp()), called as the type's method descriptors looked up once per type: nothing of
 * confluent-kafka's own struct layout is used, and any object with those methods works (the tests'
 * fakes do).
 *
 * The key bucket of a message is samzamp.consume.key_bucket's (native/keyhash.h): the key hash modulo
 * the factor, a null key's offset modulo the factor, and with control_to_all a null-keyed control
 * record (value type byte 1-3) in every bucket. The runs themselves are native/packruns.h's, which
 * samzamp._kafkafetch shares.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#include "packruns.h"

/* The message methods, looked up once per message type. */
enum { M_ERROR, M_PARTITION, M_TOPIC, M_OFFSET, M_KEY, M_VALUE, M_TIMESTAMP, M_COUNT };
static const char *const method_names[M_COUNT] = {"error", "partition", "topic", "offset", "key", "value", "timestamp"};
static PyObject *interned[M_COUNT];
static PyTypeObject *cached_type;
static PyObject *cached[M_COUNT];

static int cache_methods(PyTypeObject *type) {
    PyObject *found[M_COUNT] = {NULL};
    for (int i = 0; i < M_COUNT; i++) {
        found[i] = PyObject_GetAttr((PyObject *)type, interned[i]);
        if (found[i] == NULL) {
            for (int j = 0; j < i; j++) Py_DECREF(found[j]);
            return -1;
        }
    }
    for (int i = 0; i < M_COUNT; i++) {
        Py_XSETREF(cached[i], found[i]);
    }
    Py_INCREF(type);
    Py_XSETREF(cached_type, type);
    return 0;
}

static inline PyObject *call(int method, PyObject *m) { return PyObject_Vectorcall(cached[method], &m, 1, NULL); }

/* ``*out`` = the int64 of ``obj`` (None: ``if_none``); -1 with an exception set if it is neither. */
static int as_int64(PyObject *obj, int64_t if_none, int64_t *out, const char *what) {
    if (obj == Py_None) {
        *out = if_none;
        return 0;
    }
    if (!PyLong_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "pack_consumed: a message's %s() is %.100s, expected int", what,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    /* AndOverflow: in CPython 3.11 the plain form goes through _PyLong_AsByteArray for any int past
     * 2^30 (a timestamp in ms), several times slower */
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (overflow) {
        PyErr_Format(PyExc_OverflowError, "pack_consumed: a message's %s() does not fit in 64 bits", what);
        return -1;
    }
    if (v == -1 && PyErr_Occurred()) return -1;
    *out = (int64_t)v;
    return 0;
}

static int check_bytes(PyObject *obj, const char *what) {
    if (obj == Py_None || PyBytes_CheckExact(obj)) return 0;
    PyErr_Format(PyExc_TypeError, "pack_consumed: a message's %s() is %.100s, expected bytes or None", what,
                 Py_TYPE(obj)->tp_name);
    return -1;
}

/*
 * pack_consumed(msgs, lookup, single_topic, split, size, run_type, array_type)
 *   -> (dict[ssp, (last_offset, list[list[run]])], list[error], dropped)
 */
static PyObject *mod_pack_consumed(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7) {
        PyErr_Format(PyExc_TypeError,
                     "pack_consumed(msgs, lookup, single_topic, split, size, run_type, array_type) takes 7 "
                     "arguments, got %zd",
                     nargs);
        return NULL;
    }
    PyObject *lookup = args[1], *split = args[3], *run_type = args[5], *array_type = args[6];
    if (!PyDict_Check(lookup) || !PyDict_Check(split)) {
        PyErr_SetString(PyExc_TypeError, "pack_consumed: lookup and split must be dicts");
        return NULL;
    }
    int single_topic = PyObject_IsTrue(args[2]);
    if (single_topic < 0) return NULL;
    Py_ssize_t size = PyLong_AsSsize_t(args[4]);
    if (size == -1 && PyErr_Occurred()) return NULL;
    if (size < 1) {
        PyErr_Format(PyExc_ValueError, "pack_consumed: run size %zd is not >= 1", size);
        return NULL;
    }
    /* A tuple of the messages: a fake message's Python method could otherwise change the list. */
    PyObject *msgs = PySequence_Tuple(args[0]);
    if (msgs == NULL) return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(msgs), nrecs = 0, dropped = 0;
    PyObject *result = NULL, *out = NULL, *errors = NULL, *last_topic = NULL, *tuple_key = NULL;
    rec_t *recs = PyMem_New(rec_t, n > 0 ? (size_t)n : 1);
    /* the key and value of recs[i], owned: held[2 i], held[2 i + 1]; recs borrow their bytes */
    PyObject **held = PyMem_New(PyObject *, n > 0 ? 2 * (size_t)n : 1);
    targets_t targets;
    if (targets_init(&targets) < 0) {
        PyMem_Free(recs);
        PyMem_Free(held);
        Py_DECREF(msgs);
        return NULL;
    }
    errors = PyList_New(0);
    if (recs == NULL || held == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (errors == NULL) goto done;

    /* Each message's fields; errors apart, unregistered partitions dropped. */
    Py_ssize_t current = -2; /* the target of the current run of one partition; -1: dropped */
    long long last_partition = 0;
    int have_last = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *m = PyTuple_GET_ITEM(msgs, i);
        if (Py_TYPE(m) != cached_type && cache_methods(Py_TYPE(m)) < 0) goto done;
        PyObject *err = call(M_ERROR, m);
        if (err == NULL) goto done;
        if (err != Py_None) {
            int failed = PyList_Append(errors, err);
            Py_DECREF(err);
            if (failed < 0) goto done;
            continue;
        }
        Py_DECREF(err);
        PyObject *part = call(M_PARTITION, m);
        if (part == NULL) goto done;
        int overflow = 0;
        long long p = PyLong_AsLongLongAndOverflow(part, &overflow);
        if (p == -1 && PyErr_Occurred()) {
            Py_DECREF(part);
            goto done;
        }
        PyObject *topic = NULL;
        int same = have_last && p == last_partition;
        if (!single_topic) {
            topic = call(M_TOPIC, m);
            if (topic == NULL) {
                Py_DECREF(part);
                goto done;
            }
            if (same) {
                int eq = PyObject_RichCompareBool(topic, last_topic, Py_EQ);
                if (eq < 0) {
                    Py_DECREF(part);
                    Py_DECREF(topic);
                    goto done;
                }
                same = eq;
            }
        }
        if (!same) {
            PyObject *ssp;
            if (single_topic) {
                ssp = PyDict_GetItemWithError(lookup, part);
            } else {
                Py_XSETREF(tuple_key, PyTuple_Pack(2, topic, part));
                ssp = tuple_key == NULL ? NULL : PyDict_GetItemWithError(lookup, tuple_key);
            }
            if (ssp == NULL && PyErr_Occurred()) {
                Py_DECREF(part);
                Py_XDECREF(topic);
                goto done;
            }
            current = ssp == NULL ? -1 : target_of(ssp, split, &targets);
            if (ssp != NULL && current < 0) {
                Py_DECREF(part);
                Py_XDECREF(topic);
                goto done;
            }
            last_partition = p;
            have_last = 1;
            if (!single_topic) {
                Py_INCREF(topic);
                Py_XSETREF(last_topic, topic);
            }
        }
        Py_DECREF(part);
        Py_XDECREF(topic);
        if (current < 0) {
            dropped++;
            continue;
        }
        rec_t *r = &recs[nrecs];
        PyObject *off = call(M_OFFSET, m);
        if (off == NULL) goto done;
        int bad = as_int64(off, 0, &r->off, "offset");
        Py_DECREF(off);
        if (bad < 0) goto done;
        PyObject *ts = call(M_TIMESTAMP, m);
        if (ts == NULL) goto done;
        if (!PyTuple_Check(ts) || PyTuple_GET_SIZE(ts) != 2) {
            PyErr_Format(PyExc_TypeError, "pack_consumed: a message's timestamp() is %.100s, expected (type, ms)",
                         Py_TYPE(ts)->tp_name);
            Py_DECREF(ts);
            goto done;
        }
        int64_t ts_type;
        bad = as_int64(PyTuple_GET_ITEM(ts, 0), 0, &ts_type, "timestamp type");
        if (bad == 0) bad = as_int64(PyTuple_GET_ITEM(ts, 1), 0, &r->ts, "timestamp");
        Py_DECREF(ts);
        if (bad < 0) goto done;
        if (!ts_type) r->ts = 0;
        PyObject *key = call(M_KEY, m);
        if (key == NULL) goto done;
        if (check_bytes(key, "key") < 0) {
            Py_DECREF(key);
            goto done;
        }
        PyObject *value = call(M_VALUE, m);
        if (value == NULL || check_bytes(value, "value") < 0) {
            Py_DECREF(key);
            Py_XDECREF(value);
            goto done;
        }
        held[2 * nrecs] = key;
        held[2 * nrecs + 1] = value;
        r->key = key == Py_None ? NULL : PyBytes_AS_STRING(key);
        r->key_len = key == Py_None ? -1 : PyBytes_GET_SIZE(key);
        r->value = value == Py_None ? NULL : PyBytes_AS_STRING(value);
        r->value_len = value == Py_None ? -1 : PyBytes_GET_SIZE(value);
        r->target = current;
        file_record(r, &targets);
        nrecs++;
    }

    out = build_runs(recs, nrecs, &targets, size, run_type, array_type);
    if (out != NULL) result = Py_BuildValue("(OOn)", out, errors, dropped);

done:
    for (Py_ssize_t i = 0; i < 2 * nrecs; i++) Py_DECREF(held[i]);
    PyMem_Free(recs);
    PyMem_Free(held);
    targets_free(&targets);
    Py_XDECREF(out);
    Py_XDECREF(errors);
    Py_XDECREF(last_topic);
    Py_XDECREF(tuple_key);
    Py_DECREF(msgs);
    return result;
}

static PyMethodDef module_methods[] = {
    {"pack_consumed", (PyCFunction)(void (*)(void))mod_pack_consumed, METH_FASTCALL,
     "pack_consumed(msgs, lookup, single_topic, split, size, run_type, array_type, /) -> "
     "(dict[ssp, (last_offset, list[list[run]])], list[error], dropped): a consumed batch as packed runs "
     "per partition and key bucket"},
    {NULL, NULL, 0, NULL},
};

static int module_exec(PyObject *Py_UNUSED(module)) {
    for (int i = 0; i < M_COUNT; i++) {
        if (interned[i] == NULL) {
            interned[i] = PyUnicode_InternFromString(method_names[i]);
            if (interned[i] == NULL) return -1;
        }
    }
    return 0;
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
    {0, NULL},
};

static struct PyModuleDef fetchpackmodule = {
    PyModuleDef_HEAD_INIT,
    .m_name = "samzamp._fetchpack",
    .m_doc = "A consumed Kafka batch as packed runs (private: use samzamp.systems.kafka.consumer).",
    .m_size = 0,
    .m_methods = module_methods,
    .m_slots = module_slots,
};

PyMODINIT_FUNC PyInit__fetchpack(void) { return PyModuleDef_Init(&fetchpackmodule); }
