/*
 * samzamp._checksum: the checksum every value of an LMDB store carries on disk. Only
 * samzamp.storage.checksum imports it; its stub is samzamp/_checksum.pyi, and the pure-Python
 * reference it must agree with bit for bit is crc32c_reference in samzamp/storage/checksum.py
 * (tests/unit/test_store_checksum.py compares them).
 *
 * The checksum (stable forever: stores on disk depend on it) is CRC32C (Castagnoli, reflected
 * polynomial 0x82F63B78, initial value and final xor 0xFFFFFFFF: the one iSCSI, ext4 and RocksDB
 * use) over the key bytes followed by the value bytes, so that a value found under another key
 * (a damaged key, a misdirected write) fails too. A sealed value is the checksum, 4 bytes little
 * endian, followed by the value.
 *
 * x86-64 computes it with SSE 4.2's crc32 instruction where the CPU has it (checked once, at
 * import); elsewhere with slicing-by-8 tables. The GIL stays held: a store's values are mostly
 * short, where releasing it would cost more than the work.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#define POLY 0x82F63B78u

static uint32_t table[8][256];

static void build_tables(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (POLY & (0u - (c & 1u)));
        table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        for (int t = 1; t < 8; t++) table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xff];
    }
}

/* crc is the running (inverted) state: start at 0xFFFFFFFF, finish with ^ 0xFFFFFFFF. */
static uint32_t crc_soft(uint32_t crc, const unsigned char *p, size_t n) {
    while (n && ((uintptr_t)p & 7)) {
        crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xff];
        n--;
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        w = __builtin_bswap64(w);
#endif
        w ^= crc;
        crc = table[7][w & 0xff] ^ table[6][(w >> 8) & 0xff] ^ table[5][(w >> 16) & 0xff] ^
              table[4][(w >> 24) & 0xff] ^ table[3][(w >> 32) & 0xff] ^ table[2][(w >> 40) & 0xff] ^
              table[1][(w >> 48) & 0xff] ^ table[0][w >> 56];
        p += 8;
        n -= 8;
    }
    while (n--) crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xff];
    return crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_HW 1
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t crc, const unsigned char *p, size_t n) {
    uint64_t c = crc;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = __builtin_ia32_crc32di(c, w);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n--) c32 = __builtin_ia32_crc32qi(c32, *p++);
    return c32;
}
#else
#define HAVE_HW 0
#endif

static uint32_t (*crc_update)(uint32_t, const unsigned char *, size_t) = crc_soft;

static uint32_t crc_of(const unsigned char *key, size_t klen, const unsigned char *value, size_t vlen) {
    return crc_update(crc_update(0xFFFFFFFFu, key, klen), value, vlen) ^ 0xFFFFFFFFu;
}

static inline void put_le32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

static inline uint32_t get_le32(const unsigned char *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* crc32c(data, crc=0): the CRC32C of data; crc continues an earlier one (as zlib.crc32 does). */
static PyObject *mod_crc32c(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "crc32c(data, crc=0)");
        return NULL;
    }
    uint32_t start = 0;
    if (nargs == 2) {
        unsigned long v = PyLong_AsUnsignedLongMask(args[1]);
        if (v == (unsigned long)-1 && PyErr_Occurred()) return NULL;
        start = (uint32_t)v;
    }
    Py_buffer b;
    if (PyObject_GetBuffer(args[0], &b, PyBUF_SIMPLE) < 0) return NULL;
    uint32_t crc = crc_update(start ^ 0xFFFFFFFFu, b.buf, (size_t)b.len) ^ 0xFFFFFFFFu;
    PyBuffer_Release(&b);
    return PyLong_FromUnsignedLong(crc);
}

/* seal(key, value) -> bytes: the checksum of key + value (4 bytes, little endian), then value. */
static PyObject *mod_seal(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "seal(key, value) takes 2 arguments");
        return NULL;
    }
    Py_buffer k, v;
    if (PyObject_GetBuffer(args[0], &k, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(args[1], &v, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&k);
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, v.len + 4);
    if (out != NULL) {
        unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
        put_le32(p, crc_of(k.buf, (size_t)k.len, v.buf, (size_t)v.len));
        memcpy(p + 4, v.buf, (size_t)v.len);
    }
    PyBuffer_Release(&v);
    PyBuffer_Release(&k);
    return out;
}

/* unseal(key, sealed) -> bytes | None: the value when the checksum holds; None when it does not
 * (or sealed is shorter than a checksum). sealed may be any buffer (an LMDB memoryview). */
static PyObject *mod_unseal(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "unseal(key, sealed) takes 2 arguments");
        return NULL;
    }
    Py_buffer k, s;
    if (PyObject_GetBuffer(args[0], &k, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(args[1], &s, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&k);
        return NULL;
    }
    PyObject *out;
    const unsigned char *p = s.buf;
    if (s.len >= 4 && get_le32(p) == crc_of(k.buf, (size_t)k.len, p + 4, (size_t)(s.len - 4))) {
        out = PyBytes_FromStringAndSize((const char *)p + 4, s.len - 4);
    } else {
        out = Py_NewRef(Py_None);
    }
    PyBuffer_Release(&s);
    PyBuffer_Release(&k);
    return out;
}

static PyObject *mod_accelerated(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    return PyBool_FromLong(crc_update != crc_soft);
}

static PyMethodDef module_methods[] = {
    {"crc32c", (PyCFunction)(void (*)(void))mod_crc32c, METH_FASTCALL,
     "crc32c(data, crc=0) -> int: CRC32C of data, continuing crc."},
    {"seal", (PyCFunction)(void (*)(void))mod_seal, METH_FASTCALL,
     "seal(key, value) -> bytes: CRC32C(key + value), 4 bytes little endian, then value."},
    {"unseal", (PyCFunction)(void (*)(void))mod_unseal, METH_FASTCALL,
     "unseal(key, sealed) -> bytes | None: the value if its checksum holds, else None."},
    {"accelerated", mod_accelerated, METH_NOARGS, "accelerated() -> bool: whether the CPU's crc32 instruction is used."},
    {NULL, NULL, 0, NULL},
};

static int checksum_exec(PyObject *m) {
    (void)m;
    build_tables();
#if HAVE_HW
    __builtin_cpu_init();
    if (__builtin_cpu_supports("sse4.2")) crc_update = crc_hw;
#endif
    return 0;
}

static PyModuleDef_Slot checksum_slots[] = {
    {Py_mod_exec, checksum_exec},
    {0, NULL},
};

static struct PyModuleDef checksummodule = {
    PyModuleDef_HEAD_INIT,
    .m_name = "samzamp._checksum",
    .m_doc = "CRC32C checksums of store values (see native/checksum.c).",
    .m_size = 0,
    .m_methods = module_methods,
    .m_slots = checksum_slots,
};

PyMODINIT_FUNC PyInit__checksum(void) { return PyModuleDef_Init(&checksummodule); }
