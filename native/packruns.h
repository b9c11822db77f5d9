/*
 * Packed runs for the workers from a fetched batch, shared by samzamp._fetchpack (native/fetchpack.c:
 * confluent-kafka Message objects) and samzamp._kafkafetch (native/kafkafetch.c: librdkafka's own
 * messages). Both fill one rec_t per data message, in batch order, and one target_t per partition;
 * build_runs makes the runs, byte for byte what msgspec encodes (tests/unit/test_fetchpack.py).
 *
 * A run (samzamp/consume/packed.py) is run_type(first offset, array('q') of the offsets, msgpack bytes
 * of the [offset, key, value, timestamp] arrays), per partition and, where the partition is read by key
 * bucket, per bucket: the key hash modulo the factor, a null key's offset modulo the factor, and with
 * control_to_all a null-keyed control record (value type byte 1-3) in every bucket.
 */
#ifndef SAMZAMP_PACKRUNS_H
#define SAMZAMP_PACKRUNS_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "keyhash.h"

/* One data message of the batch. Its key and value bytes are borrowed: whoever fills the record keeps
 * them alive until the runs are built. A length of -1 is None. */
typedef struct {
    int64_t off;
    int64_t ts;
    const char *key;
    Py_ssize_t key_len;
    const char *value;
    Py_ssize_t value_len;
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

static inline size_t bin_len(Py_ssize_t n) {
    if (n < 0) return 1;
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

static inline unsigned char *put_bin(unsigned char *p, const char *b, Py_ssize_t n) {
    if (n < 0) {
        *p++ = 0xc0;
        return p;
    }
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
    if (n > 0) memcpy(p, b, (size_t)n);
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
        total += 1 + int_len(r->off) + bin_len(r->key_len) + bin_len(r->value_len) + int_len(r->ts);
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
        p = put_bin(p, r->key, r->key_len);
        p = put_bin(p, r->value, r->value_len);
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

/* The bucket of ``r`` in ``t``: a null-keyed record whose value starts with type byte 1, 2 or 3
 * (samzamp/serde/intermediate.py) goes to every bucket (-1) where the target says so. */
static inline Py_ssize_t bucket_of(const rec_t *r, const target_t *t) {
    if (t->factor == 1) return 0;
    if (r->key_len < 0) {
        if (t->control_to_all && r->value_len >= 1) {
            unsigned char kind = (unsigned char)r->value[0];
            if (kind >= 1 && kind <= 3) return -1;
        }
        return (Py_ssize_t)((uint64_t)r->off % (uint64_t)t->factor);
    }
    uint64_t h = key_hash_bytes((const unsigned char *)r->key, r->key_len);
    return (Py_ssize_t)(h % (uint64_t)t->factor);
}

/* The targets of one batch, grown as partitions appear. */
typedef struct {
    target_t *items;
    Py_ssize_t n;
    Py_ssize_t cap;
} targets_t;

static int targets_init(targets_t *ts) {
    ts->n = 0;
    ts->cap = 8;
    ts->items = PyMem_New(target_t, (size_t)ts->cap);
    if (ts->items == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void targets_free(targets_t *ts) {
    for (Py_ssize_t t = 0; t < ts->n; t++) Py_DECREF(ts->items[t].ssp);
    PyMem_Free(ts->items);
    ts->items = NULL;
    ts->n = 0;
}

/* The target index of ``ssp`` (added if new, with its ``split`` entry), or -1 with an exception set. */
static Py_ssize_t target_of(PyObject *ssp, PyObject *split, targets_t *ts) {
    for (Py_ssize_t t = 0; t < ts->n; t++) {
        if (ts->items[t].ssp == ssp) return t;
    }
    Py_ssize_t factor = 1;
    int control_to_all = 0;
    PyObject *plan = PyDict_GetItemWithError(split, ssp);
    if (plan == NULL && PyErr_Occurred()) return -1;
    if (plan != NULL) {
        if (!PyTuple_Check(plan) || PyTuple_GET_SIZE(plan) != 2) {
            PyErr_SetString(PyExc_TypeError, "packing runs: a split entry must be (factor, control_to_all)");
            return -1;
        }
        factor = PyLong_AsSsize_t(PyTuple_GET_ITEM(plan, 0));
        if (factor == -1 && PyErr_Occurred()) return -1;
        if (factor < 1) {
            PyErr_Format(PyExc_ValueError, "packing runs: factor %zd is not >= 1 (job.elasticity.factor)", factor);
            return -1;
        }
        control_to_all = PyObject_IsTrue(PyTuple_GET_ITEM(plan, 1));
        if (control_to_all < 0) return -1;
    }
    if (ts->n == ts->cap) {
        Py_ssize_t grown = ts->cap * 2;
        target_t *bigger = PyMem_Resize(ts->items, target_t, (size_t)grown);
        if (bigger == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        ts->items = bigger;
        ts->cap = grown;
    }
    target_t *t = &ts->items[ts->n];
    Py_INCREF(ssp);
    t->ssp = ssp;
    t->factor = factor;
    t->control_to_all = control_to_all;
    t->base = 0;
    t->last = -1;
    return ts->n++;
}

/* Files ``r`` (its target set) under its target: the target's newest offset, the record's bucket. */
static inline void file_record(rec_t *r, targets_t *ts) {
    target_t *t = &ts->items[r->target];
    t->last = r->off;
    r->bucket = bucket_of(r, t);
}

/* The runs of ``recs[0 .. nrecs)``: dict[ssp, (last offset, list[list[run]])], a list per bucket, each
 * of runs of at most ``size`` records in batch order; NULL with an exception set. */
static PyObject *build_runs(const rec_t *recs, Py_ssize_t nrecs, targets_t *ts, Py_ssize_t size, PyObject *run_type,
                            PyObject *array_type) {
    PyObject *out = NULL, *typecode = NULL;
    Py_ssize_t *counts = NULL, *starts = NULL, *order = NULL;
    target_t *targets = ts->items;
    Py_ssize_t ngroups = 0;
    for (Py_ssize_t t = 0; t < ts->n; t++) {
        targets[t].base = ngroups;
        ngroups += targets[t].factor;
    }
    counts = PyMem_Calloc(ngroups > 0 ? (size_t)ngroups : 1, sizeof(Py_ssize_t));
    starts = PyMem_New(Py_ssize_t, ngroups > 0 ? (size_t)ngroups : 1);
    if (counts == NULL || starts == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    /* The records of each (partition, bucket) group, in batch order. */
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
        goto fail;
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

    typecode = PyUnicode_FromString("q");
    out = typecode == NULL ? NULL : PyDict_New();
    if (out == NULL) goto fail;
    for (Py_ssize_t t = 0; t < ts->n; t++) {
        const target_t *tg = &targets[t];
        PyObject *buckets = PyList_New(tg->factor);
        if (buckets == NULL) goto fail;
        for (Py_ssize_t b = 0; b < tg->factor; b++) {
            Py_ssize_t g = tg->base + b, from = starts[g], to = counts[g];
            Py_ssize_t nruns = (to - from + size - 1) / size;
            PyObject *runs = PyList_New(nruns);
            if (runs == NULL) {
                Py_DECREF(buckets);
                goto fail;
            }
            PyList_SET_ITEM(buckets, b, runs);
            for (Py_ssize_t k = 0; k < nruns; k++) {
                Py_ssize_t a = from + k * size, len = to - a < size ? to - a : size;
                PyObject *run = make_run(recs, order + a, len, run_type, array_type, typecode);
                if (run == NULL) {
                    Py_DECREF(buckets);
                    goto fail;
                }
                PyList_SET_ITEM(runs, k, run);
            }
        }
        PyObject *entry = Py_BuildValue("(LN)", (long long)tg->last, buckets);
        if (entry == NULL) goto fail;
        int failed = PyDict_SetItem(out, tg->ssp, entry);
        Py_DECREF(entry);
        if (failed < 0) goto fail;
    }
    goto done;
fail:
    Py_CLEAR(out);
done:
    Py_XDECREF(typecode);
    PyMem_Free(counts);
    PyMem_Free(starts);
    PyMem_Free(order);
    return out;
}

#endif
