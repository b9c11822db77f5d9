/*
 * The key-bucket hash (FNV-1a 64 over the serialized key bytes, then fmix64), shared by
 * samzamp._keyhash (native/keyhash.c) and samzamp._fetchpack (native/fetchpack.c), which must agree
 * on it bit for bit: see native/keyhash.c for what it promises.
 */
#ifndef SAMZAMP_KEYHASH_H
#define SAMZAMP_KEYHASH_H

#include <Python.h>
#include <stdint.h>

#define FNV_OFFSET 0xcbf29ce484222325ULL
#define FNV_PRIME 0x100000001b3ULL

static inline uint64_t fnv1a_more(uint64_t h, const unsigned char *p, Py_ssize_t from, Py_ssize_t to) {
    for (Py_ssize_t i = from; i < to; i++) {
        h ^= p[i];
        h *= FNV_PRIME;
    }
    return h;
}

/* fmix64: FNV-1a's low bits (the ones a small modulus keeps) mix poorly on their own */
static inline uint64_t fmix64(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
}

static inline uint64_t key_hash_bytes(const unsigned char *p, Py_ssize_t n) { return fmix64(fnv1a_more(FNV_OFFSET, p, 0, n)); }

#endif
