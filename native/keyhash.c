/*
 * samzamp._keyhash: the key-bucket hash of virtual tasks (job.elasticity.factor) in C. Only
 * samzamp.consume.key_bucket imports it; its stub is samzamp/_keyhash.pyi, and the pure-Python
 * reference it must agree with bit for bit is key_hash_reference / split_by_key_bucket_reference in
 * samzamp/consume/key_bucket.py (tests/unit/test_key_bucket.py compares them).
 *
 * The hash (stable forever: checkpoints, changelog re-bucketing and every container depend on it):
 * 64-bit FNV-1a over the serialized key bytes, then MurmurHash3's 64-bit finalizer fmix64. A key's
 * bucket is that hash modulo the factor F; a null key's bucket is its offset modulo F.
 *
 * With control_to_all (an application's intermediate partition), a null-keyed record whose value
 * starts with type byte 1-3 (end of stream, drain, watermark) goes into every list, as a marker does.
 *
 * split_by_key_bucket runs on the fetch thread for every polled batch, holding the GIL: it reads the
 * batch's offsets and keys in one pass, hashes the keys four at a time, then fills F lists allocated
 * at their final sizes (no append, no regrowth).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

#include "keyhash.h"

/* A bytes key of a batch whose hash is still to be taken, and the message it belongs to. */
typedef struct {
    const unsigned char *p;
    Py_ssize_t len;
    Py_ssize_t index;
} pending_t;

static inline Py_ssize_t min_len(Py_ssize_t a, Py_ssize_t b) { return a < b ? a : b; }

/*
 * The buckets of the pending keys, four keys at a time: FNV-1a is one long chain of dependent
 * multiplies per key, so four independent chains side by side keep the multiplier busy where one
 * would wait on each step.
 */
static void hash_pending(const pending_t *k, Py_ssize_t n, Py_ssize_t *buckets, uint64_t factor) {
    Py_ssize_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const pending_t *a = &k[i], *b = &k[i + 1], *c = &k[i + 2], *d = &k[i + 3];
        Py_ssize_t common = min_len(min_len(a->len, b->len), min_len(c->len, d->len));
        uint64_t ha = FNV_OFFSET, hb = FNV_OFFSET, hc = FNV_OFFSET, hd = FNV_OFFSET;
        for (Py_ssize_t j = 0; j < common; j++) {
            ha = (ha ^ a->p[j]) * FNV_PRIME;
            hb = (hb ^ b->p[j]) * FNV_PRIME;
            hc = (hc ^ c->p[j]) * FNV_PRIME;
            hd = (hd ^ d->p[j]) * FNV_PRIME;
        }
        buckets[a->index] = (Py_ssize_t)(fmix64(fnv1a_more(ha, a->p, common, a->len)) % factor);
        buckets[b->index] = (Py_ssize_t)(fmix64(fnv1a_more(hb, b->p, common, b->len)) % factor);
        buckets[c->index] = (Py_ssize_t)(fmix64(fnv1a_more(hc, c->p, common, c->len)) % factor);
        buckets[d->index] = (Py_ssize_t)(fmix64(fnv1a_more(hd, d->p, common, d->len)) % factor);
    }
    for (; i < n; i++) buckets[k[i].index] = (Py_ssize_t)(key_hash_bytes(k[i].p, k[i].len) % factor);
}

/* The hash of a bytes-like key; -1 with an exception set if ``key`` is not bytes-like. */
static int hash_key_object(PyObject *key, uint64_t *out) {
    if (PyBytes_Check(key)) {
        *out = key_hash_bytes((const unsigned char *)PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key));
        return 0;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(key, &view, PyBUF_SIMPLE) < 0) return -1;
    *out = key_hash_bytes((const unsigned char *)view.buf, view.len);
    PyBuffer_Release(&view);
    return 0;
}

static PyObject *mod_key_hash(PyObject *Py_UNUSED(module), PyObject *key) {
    uint64_t h;
    if (hash_key_object(key, &h) < 0) return NULL;
    return PyLong_FromUnsignedLongLong(h);
}

#define MARKER ((Py_ssize_t)-1)
#define PENDING ((Py_ssize_t)-3)

/*
 * The bucket of one message (MARKER for a control marker, i.e. a negative offset), or -2 with an
 * exception set, or PENDING with ``*pending`` filled in: a bytes key of a tuple message, hashed later
 * by hash_pending (the batch's tuple keeps the key alive; bytes cannot change). ``i`` is the
 * message's index.
 */
/* A null-keyed message whose value starts with type byte 1, 2 or 3: a control record of an
 * application's intermediate stream (samzamp/serde/intermediate.py), which every virtual task of
 * the partition must see. */
static int is_control_record(PyObject *msg) {
    if (!PyTuple_Check(msg) || PyTuple_GET_SIZE(msg) < 3) return 0;
    PyObject *value = PyTuple_GET_ITEM(msg, 2);
    if (!PyBytes_Check(value) || PyBytes_GET_SIZE(value) < 1) return 0;
    unsigned char kind = (unsigned char)PyBytes_AS_STRING(value)[0];
    return kind >= 1 && kind <= 3;
}

static Py_ssize_t bucket_of(PyObject *msg, Py_ssize_t i, Py_ssize_t factor, int control_to_all,
                            pending_t *pending) {
    PyObject *offset, *key;
    int owned = 0;
    if (PyTuple_Check(msg) && PyTuple_GET_SIZE(msg) >= 2) {
        offset = PyTuple_GET_ITEM(msg, 0);
        key = PyTuple_GET_ITEM(msg, 1);
    } else {
        /* any other sequence, read as the reference reads it: m[0], m[1] */
        offset = PySequence_GetItem(msg, 0);
        if (offset == NULL) goto bad_shape;
        key = PySequence_GetItem(msg, 1);
        if (key == NULL) {
            Py_DECREF(offset);
            goto bad_shape;
        }
        owned = 1;
    }
    Py_ssize_t bucket = -2;
    int overflow = 0;
    long long off = PyLong_AsLongLongAndOverflow(offset, &overflow);
    if (off == -1 && !overflow && PyErr_Occurred()) {
        PyErr_Format(PyExc_TypeError, "split_by_key_bucket: message %zd: offset is %.100s, expected int", i,
                     Py_TYPE(offset)->tp_name);
        goto done;
    }
    if (overflow < 0 || (!overflow && off < 0)) {
        bucket = MARKER;
    } else if (factor == 1) {
        bucket = 0; /* every key's bucket; a wrong key type still raises below */
        if (key != Py_None && !PyObject_CheckBuffer(key)) goto bad_key;
    } else if (key == Py_None && control_to_all && is_control_record(msg)) {
        bucket = MARKER;
    } else if (key == Py_None) {
        if (!overflow) {
            bucket = (Py_ssize_t)((unsigned long long)off % (unsigned long long)factor);
        } else {
            /* an offset past 2^63 - 1: no broker writes one, but keep Python's arithmetic */
            PyObject *f = PyLong_FromSsize_t(factor);
            PyObject *r = f == NULL ? NULL : PyNumber_Remainder(offset, f);
            Py_XDECREF(f);
            if (r != NULL) {
                bucket = PyLong_AsSsize_t(r);
                Py_DECREF(r);
                if (bucket == -1 && PyErr_Occurred()) bucket = -2;
            }
        }
    } else if (!owned && PyBytes_Check(key)) {
        pending->p = (const unsigned char *)PyBytes_AS_STRING(key);
        pending->len = PyBytes_GET_SIZE(key);
        pending->index = i;
        bucket = PENDING;
    } else {
        uint64_t h;
        if (hash_key_object(key, &h) < 0) goto bad_key;
        bucket = (Py_ssize_t)(h % (uint64_t)factor);
    }
    goto done;
bad_key:
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError,
                 "split_by_key_bucket: message %zd (offset %lld): key is %.100s, expected bytes or None", i,
                 off, Py_TYPE(key)->tp_name);
    bucket = -2;
done:
    if (owned) {
        Py_DECREF(offset);
        Py_DECREF(key);
    }
    return bucket;
bad_shape:
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError,
                 "split_by_key_bucket: message %zd is %.100s, expected a tuple (offset, key, value, timestamp)", i,
                 Py_TYPE(msg)->tp_name);
    return -2;
}

static PyObject *mod_split_by_key_bucket(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 && nargs != 3) {
        PyErr_Format(PyExc_TypeError, "split_by_key_bucket(msgs, factor, control_to_all=False) takes 2 or 3 arguments, got %zd",
                     nargs);
        return NULL;
    }
    int control_to_all = nargs == 3 ? PyObject_IsTrue(args[2]) : 0;
    if (control_to_all < 0) return NULL;
    Py_ssize_t factor = PyLong_AsSsize_t(args[1]);
    if (factor == -1 && PyErr_Occurred()) return NULL;
    if (factor < 1) {
        PyErr_Format(PyExc_ValueError, "split_by_key_bucket: factor %zd is not >= 1 (job.elasticity.factor)",
                     factor);
        return NULL;
    }
    /*
     * A tuple of the messages, so the batch cannot change under us: reading a key of a non-bytes type
     * or a non-tuple message may run Python code, which could mutate a list given here.
     */
    PyObject *msgs = PySequence_Tuple(args[0]);
    if (msgs == NULL) return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(msgs);
    PyObject *result = NULL;
    Py_ssize_t *buckets = PyMem_New(Py_ssize_t, n > 0 ? n : 1);
    Py_ssize_t *fill = PyMem_Calloc((size_t)factor, sizeof(Py_ssize_t));
    pending_t *pending = PyMem_New(pending_t, n > 0 ? n : 1);
    if (buckets == NULL || fill == NULL || pending == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    Py_ssize_t markers = 0, npending = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t b = bucket_of(PyTuple_GET_ITEM(msgs, i), i, factor, control_to_all, &pending[npending]);
        if (b == -2) goto out;
        buckets[i] = b;
        if (b == PENDING) npending++;
    }
    hash_pending(pending, npending, buckets, (uint64_t)factor);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (buckets[i] == MARKER)
            markers++;
        else
            fill[buckets[i]]++;
    }
    result = PyList_New(factor);
    if (result == NULL) goto out;
    for (Py_ssize_t b = 0; b < factor; b++) {
        PyObject *lst = PyList_New(fill[b] + markers);
        if (lst == NULL) {
            Py_CLEAR(result);
            goto out;
        }
        PyList_SET_ITEM(result, b, lst);
        fill[b] = 0; /* from here: the next free index of list b */
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *m = PyTuple_GET_ITEM(msgs, i);
        Py_ssize_t b = buckets[i];
        if (b == MARKER) {
            for (Py_ssize_t k = 0; k < factor; k++) {
                Py_INCREF(m);
                PyList_SET_ITEM(PyList_GET_ITEM(result, k), fill[k]++, m);
            }
        } else {
            Py_INCREF(m);
            PyList_SET_ITEM(PyList_GET_ITEM(result, b), fill[b]++, m);
        }
    }
out:
    PyMem_Free(buckets);
    PyMem_Free(fill);
    PyMem_Free(pending);
    Py_DECREF(msgs);
    return result;
}

static PyMethodDef module_methods[] = {
    {"key_hash", (PyCFunction)mod_key_hash, METH_O,
     "key_hash(key, /) -> int: FNV-1a 64 of the key bytes, then fmix64 (unsigned 64-bit)"},
    {"split_by_key_bucket", (PyCFunction)(void (*)(void))mod_split_by_key_bucket, METH_FASTCALL,
     "split_by_key_bucket(msgs, factor, control_to_all=False, /) -> list[list]: msgs split by key bucket, "
     "markers (and with control_to_all, null-keyed control records) in every list"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef keyhashmodule = {
    PyModuleDef_HEAD_INIT,
    .m_name = "samzamp._keyhash",
    .m_doc = "The key-bucket hash of virtual tasks (private: use samzamp.consume.key_bucket).",
    .m_size = 0,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__keyhash(void) { return PyModuleDef_Init(&keyhashmodule); }
