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
 * record (value type byte 1-3) in every bucket.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#include "keyhash.h"

/* One data message of the batch, its key and value held until the runs are built. */
typedef struct {
    int64_t off;
    int64_t ts;
    PyObject *key;   /* bytes or None, owned */
    PyObject *value; /* bytes or None, owned */
    Py_ssize_t target;
    Py_ssize_t bucket; /* -1: every bucket of its target (a control record) */
} rec_t;

/* One partition that got messages in this batch. */
typedef struct {
    PyObject *ssp; /* owned */
    Py_ssize_t factor;
    int control_to_all;
    Py_ssize_t base; /* its first group: groups base .. base + factor - 1 are its buckets */
    int64_t last;    /* the newest offset of its messages */
} target_t;

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

/* msgpack sizes and writers, as msgspec encodes: the smallest form of each int, bin for bytes. */
static inline size_t int_len(int64_t x) {
    if (x >= 0) {
        if (x < 128) return 1;
        if (x < 256) return 2;
        if (x < 65536) return 3;
        if (x < 4294967296LL) return 5;
        return 9;
    }
    if (x >= -32) return 1;
    if (x >= -128) return 2;
    if (x >= -32768) return 3;
    if (x >= -2147483648LL) return 5;
    return 9;
}

static inline size_t bin_len(PyObject *b) {
    if (b == Py_None) return 1;
    Py_ssize_t n = PyBytes_GET_SIZE(b);
    return (size_t)n + (n < 256 ? 2 : n < 65536 ? 3 : 5);
}

static inline size_t array_header_len(Py_ssize_t n) { return n < 16 ? 1 : n < 65536 ? 3 : 5; }

static inline unsigned char *put_be(unsigned char *p, uint64_t v, int bytes) {
    for (int i = bytes - 1; i >= 0; i--) {
        p[i] = (unsigned char)(v & 0xff);
        v >>= 8;
    }
    return p + bytes;
}

static inline unsigned char *put_int(unsigned char *p, int64_t x) {
    if (x >= 0) {
        if (x < 128) {
            *p++ = (unsigned char)x;
        } else if (x < 256) {
            *p++ = 0xcc;
            p = put_be(p, (uint64_t)x, 1);
        } else if (x < 65536) {
            *p++ = 0xcd;
            p = put_be(p, (uint64_t)x, 2);
        } else if (x < 4294967296LL) {
            *p++ = 0xce;
            p = put_be(p, (uint64_t)x, 4);
        } else {
            *p++ = 0xcf;
            p = put_be(p, (uint64_t)x, 8);
        }
    } else if (x >= -32) {
        *p++ = (unsigned char)(int8_t)x;
    } else if (x >= -128) {
        *p++ = 0xd0;
        p = put_be(p, (uint64_t)x, 1);
    } else if (x >= -32768) {
        *p++ = 0xd1;
        p = put_be(p, (uint64_t)x, 2);
    } else if (x >= -2147483648LL) {
        *p++ = 0xd2;
        p = put_be(p, (uint64_t)x, 4);
    } else {
        *p++ = 0xd3;
        p = put_be(p, (uint64_t)x, 8);
    }
    return p;
}

static inline unsigned char *put_bin(unsigned char *p, PyObject *b) {
    if (b == Py_None) {
        *p++ = 0xc0;
        return p;
    }
    Py_ssize_t n = PyBytes_GET_SIZE(b);
    if (n < 256) {
        *p++ = 0xc4;
        p = put_be(p, (uint64_t)n, 1);
    } else if (n < 65536) {
        *p++ = 0xc5;
        p = put_be(p, (uint64_t)n, 2);
    } else {
        *p++ = 0xc6;
        p = put_be(p, (uint64_t)n, 4);
    }
    memcpy(p, PyBytes_AS_STRING(b), (size_t)n);
    return p + n;
}

static inline unsigned char *put_array_header(unsigned char *p, Py_ssize_t n) {
    if (n < 16) {
        *p++ = (unsigned char)(0x90 | n);
    } else if (n < 65536) {
        *p++ = 0xdc;
        p = put_be(p, (uint64_t)n, 2);
    } else {
        *p++ = 0xdd;
        p = put_be(p, (uint64_t)n, 4);
    }
    return p;
}

/* One packed run of the records ``idx[0 .. n)``: run_type(first, array_type("q", offsets), encoded). */
static PyObject *make_run(const rec_t *recs, const Py_ssize_t *idx, Py_ssize_t n, PyObject *run_type,
                          PyObject *array_type, PyObject *typecode) {
    size_t total = array_header_len(n);
    for (Py_ssize_t i = 0; i < n; i++) {
        const rec_t *r = &recs[idx[i]];
        total += 1 + int_len(r->off) + bin_len(r->key) + bin_len(r->value) + int_len(r->ts);
    }
    PyObject *encoded = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    PyObject *raw_offsets = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(int64_t));
    if (encoded == NULL || raw_offsets == NULL) {
        Py_XDECREF(encoded);
        Py_XDECREF(raw_offsets);
        return NULL;
    }
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(encoded);
    int64_t *offs = (int64_t *)(void *)PyBytes_AS_STRING(raw_offsets);
    p = put_array_header(p, n);
    for (Py_ssize_t i = 0; i < n; i++) {
        const rec_t *r = &recs[idx[i]];
        *p++ = 0x94;
        p = put_int(p, r->off);
        p = put_bin(p, r->key);
        p = put_bin(p, r->value);
        p = put_int(p, r->ts);
        offs[i] = r->off;
    }
    PyObject *targs[2] = {typecode, raw_offsets};
    PyObject *offsets = PyObject_Vectorcall(array_type, targs, 2, NULL);
    Py_DECREF(raw_offsets);
    PyObject *first = offsets == NULL ? NULL : PyLong_FromLongLong(recs[idx[0]].off);
    PyObject *run = NULL;
    if (first != NULL) {
        PyObject *rargs[3] = {first, offsets, encoded};
        run = PyObject_Vectorcall(run_type, rargs, 3, NULL);
    }
    Py_XDECREF(first);
    Py_XDECREF(offsets);
    Py_DECREF(encoded);
    return run;
}

/* A null-keyed record whose value starts with type byte 1, 2 or 3 (samzamp/serde/intermediate.py). */
static inline int is_control_record(PyObject *key, PyObject *value) {
    if (key != Py_None || value == Py_None || PyBytes_GET_SIZE(value) < 1) return 0;
    unsigned char kind = (unsigned char)PyBytes_AS_STRING(value)[0];
    return kind >= 1 && kind <= 3;
}

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

/* The target index of ``ssp`` among ``targets`` (added if new), or -1 with an exception set. */
static Py_ssize_t target_of(PyObject *ssp, PyObject *split, target_t **targets, Py_ssize_t *ntargets,
                            Py_ssize_t *cap) {
    for (Py_ssize_t t = 0; t < *ntargets; t++) {
        if ((*targets)[t].ssp == ssp) return t;
    }
    Py_ssize_t factor = 1;
    int control_to_all = 0;
    PyObject *plan = PyDict_GetItemWithError(split, ssp);
    if (plan == NULL && PyErr_Occurred()) return -1;
    if (plan != NULL) {
        if (!PyTuple_Check(plan) || PyTuple_GET_SIZE(plan) != 2) {
            PyErr_SetString(PyExc_TypeError, "pack_consumed: a split entry must be (factor, control_to_all)");
            return -1;
        }
        factor = PyLong_AsSsize_t(PyTuple_GET_ITEM(plan, 0));
        if (factor == -1 && PyErr_Occurred()) return -1;
        if (factor < 1) {
            PyErr_Format(PyExc_ValueError, "pack_consumed: factor %zd is not >= 1 (job.elasticity.factor)", factor);
            return -1;
        }
        control_to_all = PyObject_IsTrue(PyTuple_GET_ITEM(plan, 1));
        if (control_to_all < 0) return -1;
    }
    if (*ntargets == *cap) {
        Py_ssize_t grown = *cap * 2;
        target_t *bigger = PyMem_Resize(*targets, target_t, (size_t)grown);
        if (bigger == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        *targets = bigger;
        *cap = grown;
    }
    target_t *t = &(*targets)[*ntargets];
    Py_INCREF(ssp);
    t->ssp = ssp;
    t->factor = factor;
    t->control_to_all = control_to_all;
    t->base = 0;
    t->last = -1;
    return (*ntargets)++;
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
    Py_ssize_t n = PyTuple_GET_SIZE(msgs), nrecs = 0, ntargets = 0, cap = 8, dropped = 0;
    PyObject *result = NULL, *out = NULL, *errors = NULL, *typecode = NULL, *last_topic = NULL, *tuple_key = NULL;
    Py_ssize_t *counts = NULL, *starts = NULL, *order = NULL;
    rec_t *recs = PyMem_New(rec_t, n > 0 ? (size_t)n : 1);
    target_t *targets = PyMem_New(target_t, (size_t)cap);
    errors = PyList_New(0);
    typecode = PyUnicode_FromString("q");
    if (recs == NULL || targets == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (errors == NULL || typecode == NULL) goto done;

    /* Pass 1: each message's fields; errors apart, unregistered partitions dropped. */
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
            current = ssp == NULL ? -1 : target_of(ssp, split, &targets, &ntargets, &cap);
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
        r->key = call(M_KEY, m);
        if (r->key == NULL) goto done;
        if (check_bytes(r->key, "key") < 0) {
            Py_DECREF(r->key);
            goto done;
        }
        r->value = call(M_VALUE, m);
        if (r->value == NULL || check_bytes(r->value, "value") < 0) {
            Py_DECREF(r->key);
            Py_XDECREF(r->value);
            goto done;
        }
        r->target = current;
        target_t *t = &targets[current];
        t->last = r->off;
        if (t->factor == 1) {
            r->bucket = 0;
        } else if (t->control_to_all && is_control_record(r->key, r->value)) {
            r->bucket = -1;
        } else if (r->key == Py_None) {
            r->bucket = (Py_ssize_t)((uint64_t)r->off % (uint64_t)t->factor);
        } else {
            uint64_t h = key_hash_bytes((const unsigned char *)PyBytes_AS_STRING(r->key), PyBytes_GET_SIZE(r->key));
            r->bucket = (Py_ssize_t)(h % (uint64_t)t->factor);
        }
        nrecs++;
    }

    /* Pass 2: the records of each (partition, bucket) group, in batch order. */
    Py_ssize_t ngroups = 0;
    for (Py_ssize_t t = 0; t < ntargets; t++) {
        targets[t].base = ngroups;
        ngroups += targets[t].factor;
    }
    counts = PyMem_Calloc(ngroups > 0 ? (size_t)ngroups : 1, sizeof(Py_ssize_t));
    starts = PyMem_New(Py_ssize_t, ngroups > 0 ? (size_t)ngroups : 1);
    if (counts == NULL || starts == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t placed = 0;
    for (Py_ssize_t i = 0; i < nrecs; i++) {
        const target_t *t = &targets[recs[i].target];
        if (recs[i].bucket < 0) {
            for (Py_ssize_t b = 0; b < t->factor; b++) counts[t->base + b]++;
            placed += t->factor;
        } else {
            counts[t->base + recs[i].bucket]++;
            placed++;
        }
    }
    order = PyMem_New(Py_ssize_t, placed > 0 ? (size_t)placed : 1);
    if (order == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t at = 0;
    for (Py_ssize_t g = 0; g < ngroups; g++) {
        starts[g] = at;
        at += counts[g];
        counts[g] = starts[g]; /* from here: the next free slot of group g */
    }
    for (Py_ssize_t i = 0; i < nrecs; i++) {
        const target_t *t = &targets[recs[i].target];
        if (recs[i].bucket < 0) {
            for (Py_ssize_t b = 0; b < t->factor; b++) order[counts[t->base + b]++] = i;
        } else {
            order[counts[t->base + recs[i].bucket]++] = i;
        }
    }
    /* counts[g] is now the end of group g */

    /* Pass 3: the runs. */
    out = PyDict_New();
    if (out == NULL) goto done;
    for (Py_ssize_t t = 0; t < ntargets; t++) {
        const target_t *tg = &targets[t];
        PyObject *buckets = PyList_New(tg->factor);
        if (buckets == NULL) goto done;
        for (Py_ssize_t b = 0; b < tg->factor; b++) {
            Py_ssize_t g = tg->base + b, from = starts[g], to = counts[g];
            Py_ssize_t nruns = (to - from + size - 1) / size;
            PyObject *runs = PyList_New(nruns);
            if (runs == NULL) {
                Py_DECREF(buckets);
                goto done;
            }
            PyList_SET_ITEM(buckets, b, runs);
            for (Py_ssize_t k = 0; k < nruns; k++) {
                Py_ssize_t a = from + k * size, len = to - a < size ? to - a : size;
                PyObject *run = make_run(recs, order + a, len, run_type, array_type, typecode);
                if (run == NULL) {
                    Py_DECREF(buckets);
                    goto done;
                }
                PyList_SET_ITEM(runs, k, run);
            }
        }
        PyObject *entry = Py_BuildValue("(LN)", (long long)tg->last, buckets);
        if (entry == NULL) goto done;
        int failed = PyDict_SetItem(out, tg->ssp, entry);
        Py_DECREF(entry);
        if (failed < 0) goto done;
    }
    result = Py_BuildValue("(OOn)", out, errors, dropped);

done:
    for (Py_ssize_t i = 0; i < nrecs; i++) {
        Py_DECREF(recs[i].key);
        Py_DECREF(recs[i].value);
    }
    PyMem_Free(recs);
    for (Py_ssize_t t = 0; t < ntargets; t++) Py_DECREF(targets[t].ssp);
    PyMem_Free(targets);
    PyMem_Free(counts);
    PyMem_Free(starts);
    PyMem_Free(order);
    Py_XDECREF(out);
    Py_XDECREF(errors);
    Py_XDECREF(typecode);
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
