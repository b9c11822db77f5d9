/*
 * samzamp._ring: the CPython binding of ring.c. Only samzamp.ipc imports it; its typed face is
 * samzamp/ipc/ring.py and its stub samzamp/_ring.pyi.
 *
 * Errors are samzamp.ipc.errors' classes (imported at module init): WouldBlock, QueueClosed, PeerGone,
 * EndOfQueue, IpcError; plus ValueError (oversize record, bad argument), TypeError (not bytes-like)
 * and OSError (a system call failed).
 *
 * Threads: the push and pop calls hold the GIL (they only copy memory); wait_* release it while
 * they sleep. One thread per end; a handle's producer and consumer state are disjoint, so two threads
 * may drive the two ends of one handle.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <stdint.h>
#include <unistd.h>

#include "ring.h"

static PyObject *IpcError, *WouldBlock, *QueueClosed, *PeerGone, *EndOfQueue;

enum { WAIT_READY = 0, WAIT_TIMEOUT = 1, WAIT_PEER_GONE = 2, WAIT_CLOSED = 3 };

typedef struct {
    PyObject_HEAD ring_t ring;
    int open;
    pid_t producer_owner; /* pid that took the producer end through this handle, 0 if none */
    pid_t consumer_owner;
    int waiting; /* threads sleeping in wait_* with the GIL released */
} RingObject;

static PyTypeObject RingType;

static int check_open(RingObject *self) {
    if (self->open) return 0;
    PyErr_SetString(QueueClosed, "this ring was closed in this process (its memory is unmapped)");
    return -1;
}

static int check_producer(RingObject *self) {
    if (check_open(self) < 0) return -1;
    if (self->producer_owner != 0) return 0;
    PyErr_SetString(PyExc_RuntimeError, "call take_producer() on this handle before using the producer end");
    return -1;
}

static int check_consumer(RingObject *self) {
    if (check_open(self) < 0) return -1;
    if (self->consumer_owner != 0) return 0;
    PyErr_SetString(PyExc_RuntimeError, "call take_consumer() on this handle before using the consumer end");
    return -1;
}

static PyObject *raise_rc(RingObject *self, int rc, int producer, unsigned long long len) {
    ring_t *r = &self->ring;
    switch (rc) {
    case RING_FULL:
        PyErr_Format(WouldBlock, "the ring is full: %llu of %llu bytes in use",
                     (unsigned long long)ring_bytes_used(r), (unsigned long long)r->capacity);
        break;
    case RING_EMPTY:
        PyErr_SetString(WouldBlock, "the ring is empty");
        break;
    case RING_EOQ:
        PyErr_SetString(EndOfQueue, "the producer closed the ring and every record has been received");
        break;
    case RING_PEERGONE:
        if (producer)
            PyErr_Format(PeerGone, "the consumer (pid %d) closed its end of the ring or exited",
                         (int)atomic_load(&r->hdr->consumer_pid));
        else
            PyErr_Format(PeerGone,
                         "the producer (pid %d) exited without closing its end of the ring; "
                         "every record it published has been received",
                         (int)atomic_load(&r->hdr->producer_pid));
        break;
    case RING_CLOSED:
        PyErr_Format(QueueClosed, "this %s end of the ring was closed", producer ? "producer" : "consumer");
        break;
    case RING_ETOOBIG:
        PyErr_Format(PyExc_ValueError,
                     "record of %llu bytes is larger than the ring's limit of %llu bytes (capacity %llu / 2); "
                     "split it into smaller records or create a bigger ring",
                     len, (unsigned long long)RING_MAX_RECORD(r->capacity), (unsigned long long)r->capacity);
        break;
    case RING_ECORRUPT:
        PyErr_Format(IpcError,
                     "the ring's memory is corrupt: a record header at read position %llu points outside the "
                     "published data (was the ring written by more than one producer?)",
                     (unsigned long long)r->c_read);
        break;
    default:
        PyErr_SetFromErrno(PyExc_OSError);
        break;
    }
    return NULL;
}

/* Borrow the bytes of a bytes-like object; view->obj is NULL when nothing needs releasing. */
static int borrow(PyObject *o, Py_buffer *view, const char **p, Py_ssize_t *n) {
    if (PyBytes_CheckExact(o)) {
        view->obj = NULL;
        *p = PyBytes_AS_STRING(o);
        *n = PyBytes_GET_SIZE(o);
        return 0;
    }
    if (PyObject_GetBuffer(o, view, PyBUF_SIMPLE) < 0) return -1;
    *p = (const char *)view->buf;
    *n = view->len;
    return 0;
}

static void unborrow(Py_buffer *view) {
    if (view->obj != NULL) PyBuffer_Release(view);
}

/* None -> -1 (forever), else seconds -> ns (negative -> 0). */
static int parse_timeout(PyObject *obj, int64_t *ns) {
    if (obj == Py_None) {
        *ns = -1;
        return 0;
    }
    double s = PyFloat_AsDouble(obj);
    if (s == -1.0 && PyErr_Occurred()) return -1;
    if (s != s) {
        PyErr_SetString(PyExc_ValueError, "timeout must be a number of seconds or None, not NaN");
        return -1;
    }
    if (s <= 0) *ns = 0;
    else if (s > 9.0e9) *ns = -1; /* beyond ~285 years: forever */
    else *ns = (int64_t)(s * 1e9);
    return 0;
}

static int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* ---- construction ---- */

static PyObject *wrap(ring_t *ring) {
    RingObject *self = PyObject_New(RingObject, &RingType);
    if (self == NULL) {
        ring_destroy(ring);
        return NULL;
    }
    self->ring = *ring;
    self->open = 1;
    self->producer_owner = 0;
    self->consumer_owner = 0;
    self->waiting = 0;
    return (PyObject *)self;
}

static PyObject *mod_create(PyObject *Py_UNUSED(m), PyObject *arg) {
    unsigned long long capacity = PyLong_AsUnsignedLongLong(arg);
    if (capacity == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    ring_t ring;
    int rc = ring_create(&ring, capacity);
    if (rc == RING_ETOOBIG) {
        PyErr_Format(PyExc_ValueError,
                     "ring capacity %llu is not a power of two between %llu and %llu bytes", capacity,
                     (unsigned long long)RING_MIN_CAPACITY, (unsigned long long)RING_MAX_CAPACITY);
        return NULL;
    }
    if (rc != RING_OK) return PyErr_SetFromErrno(PyExc_OSError);
    return wrap(&ring);
}

static PyObject *mod_attach(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"mem_fd", "data_fd", "space_fd", "capacity", NULL};
    int mem_fd, data_fd, space_fd;
    unsigned long long capacity = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "iii|K:attach", kwlist, &mem_fd, &data_fd, &space_fd,
                                     &capacity))
        return NULL;
    ring_t ring;
    int rc = ring_attach(&ring, mem_fd, data_fd, space_fd, capacity);
    if (rc == RING_ECORRUPT) {
        PyErr_Format(IpcError,
                     "fd %d is not a samzamp ring of version %u%s (wrong fd, or a ring from another "
                     "samzamp version)",
                     mem_fd, RING_VERSION, capacity ? " with the expected capacity" : "");
        return NULL;
    }
    if (rc != RING_OK) return PyErr_SetFromErrno(PyExc_OSError);
    return wrap(&ring);
}

static PyObject *mod_pid_gone(PyObject *Py_UNUSED(m), PyObject *arg) {
    long pid = PyLong_AsLong(arg);
    if (pid == -1 && PyErr_Occurred()) return NULL;
    return PyBool_FromLong(ring_pid_gone((pid_t)pid));
}

static void Ring_dealloc(RingObject *self) {
    if (self->open) {
        /* Only the process that took an end closes it: a forked copy of this handle must not. */
        pid_t me = getpid();
        if (self->producer_owner == me) ring_close_producer(&self->ring);
        if (self->consumer_owner == me) ring_close_consumer(&self->ring);
        ring_destroy(&self->ring);
    }
    PyObject_Free(self);
}

static PyObject *Ring_destroy(RingObject *self, PyObject *Py_UNUSED(ignored)) {
    if (self->waiting > 0) {
        PyErr_SetString(PyExc_RuntimeError, "cannot unmap the ring while another thread waits on it");
        return NULL;
    }
    if (self->open) {
        ring_destroy(&self->ring);
        self->open = 0;
    }
    Py_RETURN_NONE;
}

static PyObject *take(RingObject *self, int producer) {
    if (check_open(self) < 0) return NULL;
    pid_t holder = 0;
    int rc = producer ? ring_take_producer(&self->ring, &holder) : ring_take_consumer(&self->ring, &holder);
    if (rc == RING_CLOSED) {
        PyErr_Format(QueueClosed, "the %s end of this ring was closed; a closed end cannot be taken again",
                     producer ? "producer" : "consumer");
        return NULL;
    }
    if (rc == RING_ESYS && errno == EBUSY) {
        PyErr_Format(IpcError,
                     "the %s end of this ring is held by live process %d; a ring has exactly one %s process",
                     producer ? "producer" : "consumer", (int)holder, producer ? "producer" : "consumer");
        return NULL;
    }
    if (rc != RING_OK) return raise_rc(self, rc, producer, 0);
    if (producer) self->producer_owner = getpid();
    else self->consumer_owner = getpid();
    Py_RETURN_NONE;
}

static PyObject *Ring_take_producer(RingObject *self, PyObject *Py_UNUSED(i)) { return take(self, 1); }
static PyObject *Ring_take_consumer(RingObject *self, PyObject *Py_UNUSED(i)) { return take(self, 0); }

/* ---- producer ---- */

static PyObject *Ring_push(RingObject *self, PyObject *obj) {
    if (check_producer(self) < 0) return NULL;
    Py_buffer view;
    const char *p;
    Py_ssize_t n;
    if (borrow(obj, &view, &p, &n) < 0) return NULL;
    int rc = RING_ETOOBIG;
    if ((unsigned long long)n <= RING_MAX_RECORD(self->ring.capacity)) rc = ring_push(&self->ring, p, (uint32_t)n);
    unborrow(&view);
    if (rc != RING_OK) return raise_rc(self, rc, 1, (unsigned long long)n);
    Py_RETURN_NONE;
}

static PyObject *Ring_push_many(RingObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "push_many(records, start=0)");
        return NULL;
    }
    if (check_producer(self) < 0) return NULL;
    Py_ssize_t start = 0;
    if (nargs == 2) {
        start = PyLong_AsSsize_t(args[1]);
        if (start == -1 && PyErr_Occurred()) return NULL;
    }
    PyObject *seq = PySequence_Fast(args[0], "push_many() takes a sequence of bytes-like objects");
    if (seq == NULL) return NULL;
    Py_ssize_t total = PySequence_Fast_GET_SIZE(seq);
    if (start < 0 || start > total) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "start %zd is outside the sequence of %zd records", start, total);
        return NULL;
    }
    int state = ring_producer_state(&self->ring);
    if (state != RING_OK) {
        Py_DECREF(seq);
        return raise_rc(self, state, 1, 0);
    }
    PyObject **items = PySequence_Fast_ITEMS(seq);
    ring_t *r = &self->ring;
    const unsigned long long limit = RING_MAX_RECORD(r->capacity);
    Py_ssize_t count = 0;
    int failed = 0; /* the first record could not be taken: raise */
    unsigned long long bad_len = 0;
    for (Py_ssize_t i = start; i < total; i++) {
        Py_buffer view;
        const char *p;
        Py_ssize_t n;
        if (borrow(items[i], &view, &p, &n) < 0) {
            if (count == 0) failed = -1; /* keep the TypeError / BufferError */
            else PyErr_Clear();           /* reported by the next call, which starts at this record */
            break;
        }
        int rc = RING_ETOOBIG;
        uint8_t *dst;
        if ((unsigned long long)n <= limit) rc = ring_reserve(r, (uint32_t)n, &dst);
        if (rc == RING_OK && n > 0) memcpy(dst, p, (size_t)n);
        unborrow(&view);
        if (rc != RING_OK) {
            if (rc == RING_ETOOBIG && count == 0) {
                failed = RING_ETOOBIG;
                bad_len = (unsigned long long)n;
            }
            break;
        }
        count++;
    }
    Py_DECREF(seq);
    if (count > 0) ring_publish(r, (uint64_t)count);
    if (failed == -1) return NULL;
    if (failed == RING_ETOOBIG) return raise_rc(self, RING_ETOOBIG, 1, bad_len);
    return PyLong_FromSsize_t(count);
}

static PyObject *Ring_arm_writable(RingObject *self, PyObject *arg) {
    if (check_producer(self) < 0) return NULL;
    unsigned long long n = PyLong_AsUnsignedLongLong(arg);
    if (n == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    int rc = ring_arm_writable(&self->ring, n);
    if (rc == RING_OK) Py_RETURN_TRUE;
    if (rc == RING_FULL) Py_RETURN_FALSE;
    return raise_rc(self, rc, 1, n);
}

static PyObject *wait_result(RingObject *self, int rc, int producer, unsigned long long n) {
    switch (rc) {
    case RING_OK:
        return PyLong_FromLong(WAIT_READY);
    case RING_TIMEOUT:
        return PyLong_FromLong(WAIT_TIMEOUT);
    case RING_PEERGONE:
        return PyLong_FromLong(WAIT_PEER_GONE);
    case RING_CLOSED:
        return PyLong_FromLong(WAIT_CLOSED);
    default:
        return raise_rc(self, rc, producer, n);
    }
}

/* Sleep with the GIL released; on a signal run the Python handlers, then go on with the time left. */
static PyObject *wait_common(RingObject *self, int producer, unsigned long long n, PyObject *timeout_obj) {
    int64_t timeout;
    if (parse_timeout(timeout_obj, &timeout) < 0) return NULL;
    int64_t deadline = timeout < 0 ? -1 : mono_ns() + timeout;
    int rc;
    for (;;) {
        self->waiting++;
        Py_BEGIN_ALLOW_THREADS;
        rc = producer ? ring_wait_writable(&self->ring, n, timeout) : ring_wait_readable(&self->ring, timeout);
        Py_END_ALLOW_THREADS;
        self->waiting--;
        if (rc != RING_EINTR) break;
        if (PyErr_CheckSignals() < 0) return NULL;
        if (deadline >= 0) {
            timeout = deadline - mono_ns();
            if (timeout < 0) timeout = 0;
        }
    }
    return wait_result(self, rc, producer, n);
}

static PyObject *Ring_wait_writable(RingObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "wait_writable(nbytes, timeout)");
        return NULL;
    }
    if (check_producer(self) < 0) return NULL;
    unsigned long long n = PyLong_AsUnsignedLongLong(args[0]);
    if (n == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    return wait_common(self, 1, n, args[1]);
}

static PyObject *Ring_close_producer(RingObject *self, PyObject *Py_UNUSED(i)) {
    if (check_producer(self) < 0) return NULL;
    ring_close_producer(&self->ring);
    Py_RETURN_NONE;
}

static PyObject *Ring_clear_space(RingObject *self, PyObject *Py_UNUSED(i)) {
    if (check_open(self) < 0) return NULL;
    ring_clear_fd(self->ring.space_fd);
    Py_RETURN_NONE;
}

/* ---- consumer ---- */

static PyObject *Ring_pop(RingObject *self, PyObject *Py_UNUSED(i)) {
    if (check_consumer(self) < 0) return NULL;
    ring_t *r = &self->ring;
    uint64_t cursor = ring_peek_begin(r);
    const uint8_t *src;
    uint32_t len;
    int rc = ring_peek(r, &cursor, &src, &len);
    if (rc != RING_OK) return raise_rc(self, rc, 0, 0);
    PyObject *out = PyBytes_FromStringAndSize((const char *)src, (Py_ssize_t)len);
    if (out == NULL) return NULL; /* nothing released: the record stays in the ring */
    ring_release(r, cursor, 1);
    return out;
}

static PyObject *Ring_pop_many(RingObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "pop_many(max_count, max_bytes)");
        return NULL;
    }
    if (check_consumer(self) < 0) return NULL;
    Py_ssize_t max_count = PyLong_AsSsize_t(args[0]);
    if (max_count == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t max_bytes = PyLong_AsSsize_t(args[1]);
    if (max_bytes == -1 && PyErr_Occurred()) return NULL;
    if (max_count < 1 || max_bytes < 0) {
        PyErr_Format(PyExc_ValueError, "max_count must be >= 1 and max_bytes >= 0, got %zd and %zd", max_count,
                     max_bytes);
        return NULL;
    }
    ring_t *r = &self->ring;
    PyObject *out = PyList_New(0);
    if (out == NULL) return NULL;
    uint64_t cursor = ring_peek_begin(r);
    Py_ssize_t count = 0, bytes = 0;
    int rc = RING_OK;
    while (count < max_count) {
        uint64_t at = cursor;
        const uint8_t *src;
        uint32_t len;
        rc = ring_peek(r, &cursor, &src, &len);
        if (rc != RING_OK) break;
        /* At least one record per call, however big: max_bytes bounds the batch, not the record. */
        if (count > 0 && bytes + (Py_ssize_t)len > max_bytes) {
            cursor = at;
            break;
        }
        PyObject *b = PyBytes_FromStringAndSize((const char *)src, (Py_ssize_t)len);
        if (b == NULL || PyList_Append(out, b) < 0) {
            /* Nothing released: every record of this call stays in the ring. */
            Py_XDECREF(b);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(b);
        count++;
        bytes += (Py_ssize_t)len;
    }
    if (count > 0) {
        ring_release(r, cursor, (uint64_t)count);
        return out; /* a close or a corrupt record is reported by the next call */
    }
    if (rc == RING_EMPTY || rc == RING_OK) return out;
    Py_DECREF(out);
    return raise_rc(self, rc, 0, 0);
}

static PyObject *Ring_arm_readable(RingObject *self, PyObject *Py_UNUSED(i)) {
    if (check_consumer(self) < 0) return NULL;
    int rc = ring_arm_readable(&self->ring);
    if (rc == RING_OK) Py_RETURN_TRUE;
    if (rc == RING_EMPTY) Py_RETURN_FALSE;
    return raise_rc(self, rc, 0, 0);
}

static PyObject *Ring_wait_readable(RingObject *self, PyObject *timeout) {
    if (check_consumer(self) < 0) return NULL;
    return wait_common(self, 0, 0, timeout);
}

static PyObject *Ring_close_consumer(RingObject *self, PyObject *Py_UNUSED(i)) {
    if (check_consumer(self) < 0) return NULL;
    ring_close_consumer(&self->ring);
    Py_RETURN_NONE;
}

static PyObject *Ring_clear_data(RingObject *self, PyObject *Py_UNUSED(i)) {
    if (check_open(self) < 0) return NULL;
    ring_clear_fd(self->ring.data_fd);
    Py_RETURN_NONE;
}

/* ---- both ---- */

static PyObject *Ring_stats(RingObject *self, PyObject *Py_UNUSED(i)) {
    if (check_open(self) < 0) return NULL;
    ring_header_t *h = self->ring.hdr;
    return Py_BuildValue(
        "(KKKKKKiiii)", (unsigned long long)self->ring.capacity, (unsigned long long)ring_bytes_used(&self->ring),
        (unsigned long long)atomic_load_explicit(&h->records_pushed, memory_order_relaxed),
        (unsigned long long)atomic_load_explicit(&h->records_popped, memory_order_relaxed),
        (unsigned long long)atomic_load_explicit(&h->producer_blocked, memory_order_relaxed),
        (unsigned long long)atomic_load_explicit(&h->consumer_blocked, memory_order_relaxed),
        (int)atomic_load_explicit(&h->producer_closed, memory_order_acquire),
        (int)atomic_load_explicit(&h->consumer_closed, memory_order_acquire),
        (int)atomic_load_explicit(&h->producer_pid, memory_order_acquire),
        (int)atomic_load_explicit(&h->consumer_pid, memory_order_acquire));
}

static PyObject *Ring_peer_gone(RingObject *self, PyObject *arg) {
    if (check_open(self) < 0) return NULL;
    int of_producer = PyObject_IsTrue(arg);
    if (of_producer < 0) return NULL;
    ring_header_t *h = self->ring.hdr;
    pid_t pid;
    int closed;
    if (of_producer) {
        closed = (int)atomic_load_explicit(&h->producer_closed, memory_order_acquire);
        pid = atomic_load_explicit(&h->producer_pid, memory_order_acquire);
    } else {
        closed = (int)atomic_load_explicit(&h->consumer_closed, memory_order_acquire);
        pid = atomic_load_explicit(&h->consumer_pid, memory_order_acquire);
    }
    return PyBool_FromLong(closed || ring_pid_gone(pid));
}

static PyObject *Ring_get_capacity(RingObject *self, void *Py_UNUSED(c)) {
    return PyLong_FromUnsignedLongLong(self->ring.capacity);
}
static PyObject *Ring_get_max_record(RingObject *self, void *Py_UNUSED(c)) {
    return PyLong_FromUnsignedLongLong(RING_MAX_RECORD(self->ring.capacity));
}
static PyObject *fd_or_closed(RingObject *self, int fd) {
    if (check_open(self) < 0) return NULL;
    return PyLong_FromLong(fd);
}
static PyObject *Ring_get_mem_fd(RingObject *self, void *Py_UNUSED(c)) {
    return fd_or_closed(self, self->ring.mem_fd);
}
static PyObject *Ring_get_data_fd(RingObject *self, void *Py_UNUSED(c)) {
    return fd_or_closed(self, self->ring.data_fd);
}
static PyObject *Ring_get_space_fd(RingObject *self, void *Py_UNUSED(c)) {
    return fd_or_closed(self, self->ring.space_fd);
}
static PyObject *Ring_get_closed(RingObject *self, void *Py_UNUSED(c)) { return PyBool_FromLong(!self->open); }

#define FASTCALL(f) (PyCFunction)(void (*)(void))(f), METH_FASTCALL

static PyMethodDef Ring_methods[] = {
    {"take_producer", (PyCFunction)Ring_take_producer, METH_NOARGS, "Register this process as the producer."},
    {"take_consumer", (PyCFunction)Ring_take_consumer, METH_NOARGS, "Register this process as the consumer."},
    {"push", (PyCFunction)Ring_push, METH_O, "Push one record; WouldBlock if it does not fit."},
    {"push_many", FASTCALL(Ring_push_many), "push_many(records, start=0) -> number pushed; never blocks."},
    {"arm_writable", (PyCFunction)Ring_arm_writable, METH_O, "True if nbytes fit now, False if armed."},
    {"wait_writable", FASTCALL(Ring_wait_writable), "wait_writable(nbytes, timeout) -> WAIT_*."},
    {"close_producer", (PyCFunction)Ring_close_producer, METH_NOARGS, "Close the producer end."},
    {"clear_space", (PyCFunction)Ring_clear_space, METH_NOARGS, "Reset space_fd's counter."},
    {"pop", (PyCFunction)Ring_pop, METH_NOARGS, "Pop one record; WouldBlock if empty."},
    {"pop_many", FASTCALL(Ring_pop_many), "pop_many(max_count, max_bytes) -> list[bytes]; never blocks."},
    {"arm_readable", (PyCFunction)Ring_arm_readable, METH_NOARGS, "True if data is there, False if armed."},
    {"wait_readable", (PyCFunction)Ring_wait_readable, METH_O, "wait_readable(timeout) -> WAIT_*."},
    {"close_consumer", (PyCFunction)Ring_close_consumer, METH_NOARGS, "Close the consumer end."},
    {"clear_data", (PyCFunction)Ring_clear_data, METH_NOARGS, "Reset data_fd's counter."},
    {"stats", (PyCFunction)Ring_stats, METH_NOARGS, "Counters and flags from the shared header."},
    {"peer_gone", (PyCFunction)Ring_peer_gone, METH_O, "peer_gone(of_producer) -> closed or exited."},
    {"destroy", (PyCFunction)Ring_destroy, METH_NOARGS, "Unmap the ring and close its fds."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Ring_getset[] = {
    {"capacity", (getter)Ring_get_capacity, NULL, "Data bytes.", NULL},
    {"max_record", (getter)Ring_get_max_record, NULL, "Largest record payload: capacity / 2.", NULL},
    {"mem_fd", (getter)Ring_get_mem_fd, NULL, "The memfd.", NULL},
    {"data_fd", (getter)Ring_get_data_fd, NULL, "Eventfd the producer signals.", NULL},
    {"space_fd", (getter)Ring_get_space_fd, NULL, "Eventfd the consumer signals.", NULL},
    {"closed", (getter)Ring_get_closed, NULL, "True once destroy() ran.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject RingType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "samzamp._ring.RingHandle",
    .tp_basicsize = sizeof(RingObject),
    .tp_dealloc = (destructor)Ring_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A process-local view of one shared-memory SPSC ring (see samzamp.ipc).",
    .tp_methods = Ring_methods,
    .tp_getset = Ring_getset,
};

static PyMethodDef module_methods[] = {
    {"create", (PyCFunction)mod_create, METH_O, "create(capacity) -> RingHandle"},
    {"attach", (PyCFunction)(void (*)(void))mod_attach, METH_VARARGS | METH_KEYWORDS,
     "attach(mem_fd, data_fd, space_fd, capacity=0) -> RingHandle (takes ownership of the fds)"},
    {"pid_gone", (PyCFunction)mod_pid_gone, METH_O, "pid_gone(pid) -> True if no such process or a zombie"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef ringmodule = {
    PyModuleDef_HEAD_INIT,
    .m_name = "samzamp._ring",
    .m_doc = "Shared-memory SPSC ring queues (private: use samzamp.ipc).",
    .m_size = -1,
    .m_methods = module_methods,
};

static int fetch(PyObject *errors, const char *name, PyObject **slot) {
    *slot = PyObject_GetAttrString(errors, name);
    return *slot == NULL ? -1 : 0;
}

PyMODINIT_FUNC PyInit__ring(void) {
    PyObject *errors = PyImport_ImportModule("samzamp.ipc.errors");
    if (errors == NULL) return NULL;
    int bad = fetch(errors, "IpcError", &IpcError) || fetch(errors, "WouldBlock", &WouldBlock) ||
              fetch(errors, "QueueClosed", &QueueClosed) || fetch(errors, "PeerGone", &PeerGone) ||
              fetch(errors, "EndOfQueue", &EndOfQueue);
    Py_DECREF(errors);
    if (bad) return NULL;
    if (PyType_Ready(&RingType) < 0) return NULL;
    PyObject *m = PyModule_Create(&ringmodule);
    if (m == NULL) return NULL;
    if (PyModule_AddIntConstant(m, "WAIT_READY", WAIT_READY) < 0 ||
        PyModule_AddIntConstant(m, "WAIT_TIMEOUT", WAIT_TIMEOUT) < 0 ||
        PyModule_AddIntConstant(m, "WAIT_PEER_GONE", WAIT_PEER_GONE) < 0 ||
        PyModule_AddIntConstant(m, "WAIT_CLOSED", WAIT_CLOSED) < 0 ||
        PyModule_AddIntConstant(m, "VERSION", RING_VERSION) < 0 ||
        PyModule_AddIntConstant(m, "HEADER_SIZE", (long)RING_HEADER_SIZE) < 0 ||
        PyModule_AddIntConstant(m, "MIN_CAPACITY", (long)RING_MIN_CAPACITY) < 0 ||
        PyModule_AddIntConstant(m, "MAX_CAPACITY", (long)RING_MAX_CAPACITY) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&RingType);
    if (PyModule_AddObject(m, "RingHandle", (PyObject *)&RingType) < 0) {
        Py_DECREF(&RingType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
