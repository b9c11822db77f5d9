/*
 * samzamp._deliveries: a producer's delivery reports kept in C. Only samzamp.systems.kafka.changelog
 * imports it; its stub is samzamp/_deliveries.pyi.
 *
 * A changelog producer learns the offset of every record it sends from that record's delivery report:
 * a store's checkpoint marker is the newest acknowledged offset of its changelog partition, and a
 * commit tells its task's own records from records another process wrote there by the runs of
 * offsets its records got. confluent-kafka calls the ``on_delivery`` callable once per record, with
 * (error or None, Message). A Python function there cost about a microsecond per record, on the
 * thread that serves reports, holding the GIL the task's thread needs; ``Deliveries`` is that
 * callable as a C type: it reads the Message's topic, partition and offset through its methods
 * (public API: no layout of confluent-kafka's is assumed) and keeps, per (topic, partition):
 *
 * - the newest acknowledged offset (never forgotten);
 * - the acknowledged offsets not yet taken, as runs [first, last] of consecutive offsets (a
 *   partition's reports come in offset order, so a new offset mostly extends the last run);
 * - the failure messages not yet taken, "topic[partition]: reason".
 *
 * Concurrency: the callback runs on whichever thread serves reports (poll or flush), the methods on
 * any thread, always holding the GIL, and nothing here releases it or runs Python code while the
 * state is being changed: the GIL is the lock. Python objects that could start a garbage collection
 * (and with it a finaliser that lets another thread run) are allocated before the state is touched,
 * or after a taken part was detached from it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

typedef struct {
    PyObject *topic; /* str, owned */
    long partition;
    long long newest; /* -1: none yet */
    long long *runs;  /* pairs: first, last */
    Py_ssize_t nruns, cap;
    PyObject *errors; /* list of str not yet taken, or NULL */
} entry_t;

typedef struct {
    PyObject_HEAD entry_t *entries;
    Py_ssize_t n, cap;
    Py_ssize_t last; /* the entry the last report went to: the next one mostly goes there too */
} Deliveries;

static PyObject *str_topic, *str_partition, *str_offset, *str_str;

/* The entry of (topic, partition); NULL if none (or on an error, with an exception set). */
static entry_t *find(Deliveries *self, PyObject *topic, long partition) {
    for (Py_ssize_t k = 0; k < self->n; k++) {
        Py_ssize_t i = (self->last + k) % self->n;
        entry_t *e = &self->entries[i];
        if (e->partition != partition) continue;
        if (e->topic != topic) {
            int eq = PyUnicode_Compare(e->topic, topic);
            if (eq == -1 && PyErr_Occurred()) return NULL;
            if (eq != 0) continue;
        }
        self->last = i;
        return e;
    }
    return NULL;
}

/* The entry of (topic, partition), made if there is none; NULL with an exception set on failure. No
 * Python object is allocated here. */
static entry_t *entry(Deliveries *self, PyObject *topic, long partition) {
    entry_t *e = find(self, topic, partition);
    if (e != NULL || PyErr_Occurred()) return e;
    if (self->n == self->cap) {
        Py_ssize_t cap = self->cap ? self->cap * 2 : 4;
        entry_t *grown = PyMem_Realloc(self->entries, (size_t)cap * sizeof(entry_t));
        if (grown == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        self->entries = grown;
        self->cap = cap;
    }
    e = &self->entries[self->n];
    memset(e, 0, sizeof(*e));
    Py_INCREF(topic);
    e->topic = topic;
    e->partition = partition;
    e->newest = -1;
    self->last = self->n++;
    return e;
}

static int add_offset(entry_t *e, long long offset) {
    if (offset > e->newest) e->newest = offset;
    if (e->nruns > 0 && e->runs[2 * e->nruns - 1] + 1 == offset) {
        e->runs[2 * e->nruns - 1] = offset;
        return 0;
    }
    if (e->nruns == e->cap) {
        Py_ssize_t cap = e->cap ? e->cap * 2 : 8;
        long long *grown = PyMem_Realloc(e->runs, (size_t)cap * 2 * sizeof(long long));
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        e->runs = grown;
        e->cap = cap;
    }
    e->runs[2 * e->nruns] = offset;
    e->runs[2 * e->nruns + 1] = offset;
    e->nruns++;
    return 0;
}

/* The entry of method ``name``'s (topic, partition) arguments: NULL with no exception set if there is
 * none, NULL with an exception set if the arguments are not a str and an int. */
static entry_t *find_args(Deliveries *self, PyObject *const *args, Py_ssize_t nargs, const char *name) {
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "%s() takes 2 arguments (topic, partition), %zd given", name, nargs);
        return NULL;
    }
    if (!PyUnicode_Check(args[0])) {
        PyErr_Format(PyExc_TypeError, "%s(): topic must be str", name);
        return NULL;
    }
    long partition = PyLong_AsLong(args[1]);
    if (partition == -1 && PyErr_Occurred()) return NULL;
    return find(self, args[0], partition);
}

/* The callback: (err, msg). */
static PyObject *Deliveries_call(Deliveries *self, PyObject *args, PyObject *kwargs) {
    if (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0) {
        PyErr_SetString(PyExc_TypeError, "Deliveries takes no keyword arguments");
        return NULL;
    }
    if (!PyTuple_Check(args) || PyTuple_GET_SIZE(args) != 2) {
        PyErr_SetString(PyExc_TypeError, "Deliveries takes 2 arguments: (error or None, message)");
        return NULL;
    }
    PyObject *err = PyTuple_GET_ITEM(args, 0), *msg = PyTuple_GET_ITEM(args, 1);
    PyObject *topic = NULL, *po = NULL, *extra = NULL, *fresh = NULL;
    PyObject *result = NULL;
    long partition;
    topic = PyObject_CallMethodNoArgs(msg, str_topic);
    if (topic == NULL) goto done;
    if (!PyUnicode_Check(topic)) {
        PyErr_SetString(PyExc_TypeError, "a delivery report's message has no topic");
        goto done;
    }
    po = PyObject_CallMethodNoArgs(msg, str_partition);
    if (po == NULL) goto done;
    partition = PyLong_AsLong(po);
    if (partition == -1 && PyErr_Occurred()) goto done;
    if (err == Py_None) {
        extra = PyObject_CallMethodNoArgs(msg, str_offset);
        if (extra == NULL) goto done;
        if (extra == Py_None) { /* no offset known (acks=0): nothing to learn */
            result = Py_NewRef(Py_None);
            goto done;
        }
        long long offset = PyLong_AsLongLong(extra);
        if (offset == -1 && PyErr_Occurred()) goto done;
        entry_t *e = entry(self, topic, partition);
        if (e == NULL || add_offset(e, offset) < 0) goto done;
        result = Py_NewRef(Py_None);
        goto done;
    }
    PyObject *why = PyObject_CallMethodNoArgs(err, str_str);
    if (why == NULL) goto done;
    extra = PyUnicode_FromFormat("%U[%ld]: %S", topic, partition, why);
    Py_DECREF(why);
    if (extra == NULL) goto done;
    fresh = PyList_New(0); /* before the state is touched: see the concurrency note */
    if (fresh == NULL) goto done;
    entry_t *e = entry(self, topic, partition);
    if (e == NULL) goto done;
    if (e->errors == NULL) {
        e->errors = fresh;
        fresh = NULL;
    }
    if (PyList_Append(e->errors, extra) < 0) goto done;
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(topic);
    Py_XDECREF(po);
    Py_XDECREF(extra);
    Py_XDECREF(fresh);
    return result;
}

static PyObject *Deliveries_newest(Deliveries *self, PyObject *const *args, Py_ssize_t nargs) {
    entry_t *e = find_args(self, args, nargs, "newest");
    if (e == NULL) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    if (e->newest < 0) Py_RETURN_NONE;
    return PyLong_FromLongLong(e->newest);
}

static int cmp_runs(const void *a, const void *b) {
    long long x = ((const long long *)a)[0], y = ((const long long *)b)[0];
    if (x != y) return x < y ? -1 : 1;
    x = ((const long long *)a)[1];
    y = ((const long long *)b)[1];
    return x < y ? -1 : (x > y ? 1 : 0);
}

static PyObject *Deliveries_take_acked(Deliveries *self, PyObject *const *args, Py_ssize_t nargs) {
    entry_t *e = find_args(self, args, nargs, "take_acked");
    if (e == NULL) {
        if (PyErr_Occurred()) return NULL;
        return PyList_New(0);
    }
    /* Detach the runs first: building the list may let another thread report meanwhile. */
    long long *runs = e->runs;
    Py_ssize_t n = e->nruns;
    e->runs = NULL;
    e->nruns = e->cap = 0;
    qsort(runs, (size_t)n, 2 * sizeof(long long), cmp_runs);
    PyObject *out = PyList_New(n);
    for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
        PyObject *run = Py_BuildValue("(LL)", runs[2 * i], runs[2 * i + 1]);
        if (run == NULL) Py_CLEAR(out);
        else PyList_SET_ITEM(out, i, run);
    }
    PyMem_Free(runs);
    return out;
}

static PyObject *Deliveries_take_errors(Deliveries *self, PyObject *const *args, Py_ssize_t nargs) {
    entry_t *e = find_args(self, args, nargs, "take_errors");
    if (e == NULL || e->errors == NULL) {
        if (PyErr_Occurred()) return NULL;
        return PyList_New(0);
    }
    PyObject *errors = e->errors;
    e->errors = NULL;
    return errors;
}

static PyObject *Deliveries_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    if (PyTuple_GET_SIZE(args) != 0 || (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0)) {
        PyErr_SetString(PyExc_TypeError, "Deliveries() takes no arguments");
        return NULL;
    }
    Deliveries *self = (Deliveries *)type->tp_alloc(type, 0);
    return (PyObject *)self;
}

static int Deliveries_traverse(Deliveries *self, visitproc visit, void *arg) {
    for (Py_ssize_t i = 0; i < self->n; i++) Py_VISIT(self->entries[i].errors);
    Py_VISIT(Py_TYPE(self));
    return 0;
}

static int Deliveries_clear(Deliveries *self) {
    for (Py_ssize_t i = 0; i < self->n; i++) Py_CLEAR(self->entries[i].errors);
    return 0;
}

static void Deliveries_dealloc(Deliveries *self) {
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    for (Py_ssize_t i = 0; i < self->n; i++) {
        Py_CLEAR(self->entries[i].topic);
        Py_CLEAR(self->entries[i].errors);
        PyMem_Free(self->entries[i].runs);
    }
    PyMem_Free(self->entries);
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

static PyMethodDef Deliveries_methods[] = {
    {"newest", (PyCFunction)(void (*)(void))Deliveries_newest, METH_FASTCALL,
     "newest(topic, partition) -> int | None: the highest offset acknowledged there."},
    {"take_acked", (PyCFunction)(void (*)(void))Deliveries_take_acked, METH_FASTCALL,
     "take_acked(topic, partition) -> [(first, last)]: the offsets acknowledged since the last call, as sorted runs."},
    {"take_errors", (PyCFunction)(void (*)(void))Deliveries_take_errors, METH_FASTCALL,
     "take_errors(topic, partition) -> [str]: the delivery failures there since the last call."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot Deliveries_slots[] = {
    {Py_tp_doc, "Deliveries(): a producer's on_delivery callback that keeps, per (topic, partition), the newest "
                "acknowledged offset, the acknowledged offsets as runs and the failures (see native/deliveries.c)."},
    {Py_tp_new, Deliveries_new},
    {Py_tp_call, Deliveries_call},
    {Py_tp_methods, Deliveries_methods},
    {Py_tp_traverse, Deliveries_traverse},
    {Py_tp_clear, Deliveries_clear},
    {Py_tp_dealloc, Deliveries_dealloc},
    {0, NULL},
};

static PyType_Spec Deliveries_spec = {
    .name = "samzamp._deliveries.Deliveries",
    .basicsize = sizeof(Deliveries),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .slots = Deliveries_slots,
};

static int deliveries_exec(PyObject *m) {
    if (str_topic == NULL) {
        str_topic = PyUnicode_InternFromString("topic");
        str_partition = PyUnicode_InternFromString("partition");
        str_offset = PyUnicode_InternFromString("offset");
        str_str = PyUnicode_InternFromString("str");
        if (!str_topic || !str_partition || !str_offset || !str_str) return -1;
    }
    PyObject *type = PyType_FromModuleAndSpec(m, &Deliveries_spec, NULL);
    if (type == NULL) return -1;
    int rc = PyModule_AddObjectRef(m, "Deliveries", type);
    Py_DECREF(type);
    return rc;
}

static PyModuleDef_Slot deliveries_slots[] = {
    {Py_mod_exec, deliveries_exec},
    {0, NULL},
};

static struct PyModuleDef deliveriesmodule = {
    PyModuleDef_HEAD_INIT,
    .m_name = "samzamp._deliveries",
    .m_doc = "A producer's delivery reports kept in C (see native/deliveries.c).",
    .m_size = 0,
    .m_slots = deliveries_slots,
};

PyMODINIT_FUNC PyInit__deliveries(void) { return PyModuleDef_Init(&deliveriesmodule); }
