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

/*
 * verify_lmdb(data, name) -> (entries, failed_key | None): every value of the LMDB database `name`
 * in `data` (the bytes of an LMDB data.mdb, e.g. a read-only mmap of it) checked against its seal, by
 * walking the database's B-tree from the current meta page over the raw pages, in key order: what
 * iterating an LMDB cursor and calling unseal per value does, without a Python object per entry.
 * Returns how many entries it checked and the first key (in key order) whose value fails, or None.
 * Raises ValueError when the pages are not what LMDB 0.9 writes on a 64-bit little-endian host (the
 * caller then scans through LMDB itself): it decides nothing on a file it cannot read exactly.
 *
 * LMDB's layout (mdb.c): a page starts with a 16-byte header (pgno 8, pad 2, flags 2, lower 2, upper
 * 2; an overflow page has its page count where lower/upper are); lower - 16 bytes of 2-byte node
 * offsets follow. A node: lo 2, hi 2, flags 2, ksize 2, the key, then the data (a leaf: its size is
 * lo | hi << 16, or an overflow page number when flags has F_BIGDATA); a branch node's child page is
 * lo | hi << 16 | flags << 32. The meta pages (0 and 1; the one with the higher txnid is current)
 * hold the main database's MDB_db at byte 88 (depth at +6, entries at +32, root at +40), whose leaf
 * nodes of flag F_SUBDATA are the named databases, their data an MDB_db.
 */
#define L_HDR 16
#define L_P_BRANCH 0x01
#define L_P_LEAF 0x02
#define L_P_OVERFLOW 0x04
#define L_F_BIGDATA 0x01
#define L_F_SUBDATA 0x02
#define L_MAX_DEPTH 64
#define L_INVALID (~(uint64_t)0)

struct lwalk {
    const unsigned char *base;
    size_t len;
    size_t psize;
    uint64_t last_pg;
    uint64_t visited;
    uint64_t entries;
    const char *error;
    /* find mode: the named database's MDB_db */
    const unsigned char *name;
    size_t name_len;
    const unsigned char *found;
    /* verify mode: the first key that fails */
    int verify;
    const unsigned char *bad_key;
    size_t bad_len;
};

static inline uint16_t get16(const unsigned char *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

static inline uint64_t get64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

static const unsigned char *lpage(struct lwalk *w, uint64_t pgno) {
    if (pgno > w->last_pg || pgno >= w->len / w->psize) {
        w->error = "a page number past the file's last page";
        return NULL;
    }
    const unsigned char *p = w->base + pgno * w->psize;
    if (get64(p) != pgno) {
        w->error = "a page that does not carry its own page number";
        return NULL;
    }
    return p;
}

/* 0: walked; 1: stop (found, or a bad value); -1: w->error says why it cannot be read */
static int lwalk_page(struct lwalk *w, uint64_t pgno, int depth, int levels) {
    if (depth >= levels || depth >= L_MAX_DEPTH || ++w->visited > w->last_pg + 1) {
        w->error = "a tree deeper than its database says";
        return -1;
    }
    const unsigned char *p = lpage(w, pgno);
    if (p == NULL) return -1;
    uint16_t flags = get16(p + 10), lower = get16(p + 12), upper = get16(p + 14);
    if (lower < L_HDR || lower > upper || upper > w->psize || (lower & 1)) {
        w->error = "a page header out of bounds";
        return -1;
    }
    size_t n = (size_t)(lower - L_HDR) >> 1;
    int leaf = (flags & (L_P_BRANCH | L_P_LEAF | L_P_OVERFLOW | 0x20)) == L_P_LEAF;
    int branch = (flags & (L_P_BRANCH | L_P_LEAF | L_P_OVERFLOW | 0x20)) == L_P_BRANCH;
    if ((depth == levels - 1 && !leaf) || (depth < levels - 1 && !branch)) {
        w->error = "a page of the wrong kind for its depth";
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        size_t off = get16(p + L_HDR + 2 * i);
        if (off < lower || off + 8 > w->psize) {
            w->error = "a node outside its page";
            return -1;
        }
        const unsigned char *node = p + off;
        uint16_t lo = get16(node), hi = get16(node + 2), nflags = get16(node + 4), ksize = get16(node + 6);
        if (off + 8 + ksize > w->psize) {
            w->error = "a key outside its page";
            return -1;
        }
        if (branch) {
            uint64_t child = (uint64_t)lo | ((uint64_t)hi << 16) | ((uint64_t)nflags << 32);
            int r = lwalk_page(w, child, depth + 1, levels);
            if (r != 0) return r;
            continue;
        }
        const unsigned char *key = node + 8;
        size_t dsize = (size_t)lo | ((size_t)hi << 16);
        const unsigned char *data;
        if (nflags & L_F_BIGDATA) {
            if (off + 8 + ksize + 8 > w->psize) {
                w->error = "an overflow page number outside its page";
                return -1;
            }
            uint64_t ov = get64(key + ksize);
            const unsigned char *op = lpage(w, ov);
            if (op == NULL) return -1;
            if ((get16(op + 10) & L_P_OVERFLOW) == 0 || ov * w->psize + L_HDR + dsize > w->len ||
                ov + (L_HDR + dsize + w->psize - 1) / w->psize > w->last_pg + 1) {
                w->error = "an overflow value out of bounds";
                return -1;
            }
            data = op + L_HDR;
        } else {
            if (off + 8 + ksize + dsize > w->psize) {
                w->error = "a value outside its page";
                return -1;
            }
            data = key + ksize;
        }
        w->entries++;
        if (w->verify) {
            if (nflags & ~L_F_BIGDATA) {
                w->error = "a node of a kind a plain database does not hold";
                return -1;
            }
            if (dsize < 4 || get_le32(data) != crc_of(key, ksize, data + 4, dsize - 4)) {
                w->bad_key = key;
                w->bad_len = ksize;
                return 1;
            }
        } else if ((nflags & L_F_SUBDATA) && !(nflags & L_F_BIGDATA) && ksize == w->name_len &&
                   memcmp(key, w->name, ksize) == 0) {
            if (dsize != 48) {
                w->error = "a named database record of the wrong size";
                return -1;
            }
            w->found = data;
            return 1;
        }
    }
    return 0;
}

/* Walk the database described by the MDB_db at `db`: 0, 1 (stopped) or -1. */
static int lwalk_db(struct lwalk *w, const unsigned char *db) {
    uint16_t levels = get16(db + 6);
    uint64_t root = get64(db + 40);
    if (root == L_INVALID) return 0;
    if (levels == 0 || levels > L_MAX_DEPTH) {
        w->error = "a database depth out of range";
        return -1;
    }
    return lwalk_page(w, root, 0, levels);
}

static PyObject *mod_verify_lmdb(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "verify_lmdb(data, name) takes 2 arguments");
        return NULL;
    }
    Py_buffer b, nm;
    if (PyObject_GetBuffer(args[0], &b, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(args[1], &nm, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&b);
        return NULL;
    }
    struct lwalk w;
    memset(&w, 0, sizeof w);
    w.base = b.buf;
    w.len = (size_t)b.len;
    w.name = nm.buf;
    w.name_len = (size_t)nm.len;
    int r = -1;
    uint64_t want = 0;
    Py_BEGIN_ALLOW_THREADS
    /* the current meta page: the one of the two with the higher txnid */
    const unsigned char *meta = NULL;
    uint32_t psize = 0;
    if (w.len >= L_HDR + 152) {
        psize = get_le32(w.base + 40);
        if (psize >= 512 && psize <= 65536 && !(psize & (psize - 1)) && w.len >= 2 * (size_t)psize) {
            const unsigned char *m0 = w.base, *m1 = w.base + psize;
            int ok0 = get_le32(m0 + 16) == 0xBEEFC0DEu && get_le32(m0 + 20) == 1 && (get16(m0 + 10) & 0x08);
            int ok1 = get_le32(m1 + 16) == 0xBEEFC0DEu && get_le32(m1 + 20) == 1 && (get16(m1 + 10) & 0x08);
            if (ok0 && ok1) meta = get64(m1 + 144) > get64(m0 + 144) ? m1 : m0;
        }
    }
    if (meta == NULL) {
        w.error = "no LMDB meta page it can read";
    } else {
        w.psize = psize;
        w.last_pg = get64(meta + 136);
        r = lwalk_db(&w, meta + 88);
        if (r == 1 && w.found != NULL) {
            unsigned char db[48];
            memcpy(db, w.found, 48); /* the record, before the walk's state is reused */
            want = get64(db + 32);
            w.visited = 0;
            w.entries = 0;
            w.verify = 1;
            r = lwalk_db(&w, db);
            if (r == 0 && w.entries != want) {
                w.error = "a count of entries that differs from its database's";
                r = -1;
            }
        } else if (r == 0) {
            w.error = "no database of that name";
            r = -1;
        }
    }
    Py_END_ALLOW_THREADS
    PyObject *out = NULL;
    if (r < 0) {
        PyErr_Format(PyExc_ValueError, "cannot walk the LMDB file: %s", w.error ? w.error : "unknown");
    } else if (r == 1) {
        PyObject *key = PyBytes_FromStringAndSize((const char *)w.bad_key, (Py_ssize_t)w.bad_len);
        if (key != NULL) out = Py_BuildValue("(KN)", (unsigned long long)w.entries, key);
    } else {
        out = Py_BuildValue("(KO)", (unsigned long long)w.entries, Py_None);
    }
    PyBuffer_Release(&nm);
    PyBuffer_Release(&b);
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
    {"verify_lmdb", (PyCFunction)(void (*)(void))mod_verify_lmdb, METH_FASTCALL,
     "verify_lmdb(data, name) -> (entries, failed_key | None): every value of LMDB database name checked."},
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
