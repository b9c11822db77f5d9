/*
 * A single-producer single-consumer ring queue of variable-length byte records in shared memory.
 *
 * Plain C11, no Python: ringmodule.c binds it as samzamp._ring, test_ring.c tests it directly.
 *
 * Memory: one memfd (so nothing is left behind when a process dies, even by SIGKILL), mapped
 * MAP_SHARED, RING_HEADER_SIZE bytes of header followed by `capacity` bytes of data; capacity is a power
 * of two in [RING_MIN_CAPACITY, RING_MAX_CAPACITY]. Two eventfds wake a sleeping side: data_fd (the
 * producer signals the consumer: data or close) and space_fd (the consumer signals the producer: space
 * or close).
 *
 * Indices: write_idx and read_idx are 64-bit byte positions that only grow (they never wrap in
 * practice: 2^64 bytes); the offset in the data area is idx & (capacity - 1). Bytes in use are
 * write_idx - read_idx. The producer publishes write_idx with a release store after writing the
 * records; the consumer reads it with an acquire load before reading them, and publishes read_idx with a
 * release store after it has copied them out; the producer reads read_idx with an acquire load before it
 * overwrites that space.
 *
 * Records: an 8-byte frame header (u32 payload length, u32 flags) then the payload, padded to 8 bytes.
 * Every position is 8-aligned, so at least 8 bytes always remain before the end of the data area and a
 * frame header always fits. When the payload does not fit before the end, the header is written where
 * it is with RING_F_WRAPPED ("my payload starts at offset 0 of the next lap": a wrap marker that also
 * carries the length) and the record's space runs to the end of the area plus the padded payload. So
 * a payload of up to capacity / 2 bytes always fits in an empty ring (tail + padded payload <= padded
 * payload * 2 <= capacity), and RING_MAX_RECORD(capacity) = capacity / 2 is the limit: bigger records
 * are rejected (RING_ETOOBIG), never split. Zero-length records are allowed.
 *
 * Sleeping without lost wake-ups: a side that finds nothing to do announces it (consumer_waiting = 1, or
 * producer_waiting = the read position it needs) with a sequentially consistent store, checks again with
 * a sequentially consistent load, and only then sleeps in poll(). The other side publishes its index
 * with a sequentially consistent store (a full barrier: xchg on x86), then loads the flag and signals
 * the eventfd only if it is set (clearing it). All four are in one total order (Dekker), so either the
 * waiter sees the new index or the publisher sees the flag. While both sides are busy the hot path
 * makes no system call. (Seq_cst operations rather than fences: ThreadSanitizer understands them.)
 *
 * Threads: one thread at a time per end (producer calls from one thread, consumer calls from one
 * thread; the two may be the same process or two processes). A ring_t is a process-local view; its
 * producer-side and consumer-side fields are disjoint, so one process may hold both ends.
 */
#ifndef SAMZAMP_RING_H
#define SAMZAMP_RING_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define RING_MAGIC 0x474e49525a4d4153ULL /* "SAMZRING" little-endian */
#define RING_VERSION 1u
#define RING_MIN_CAPACITY 4096ULL
#define RING_MAX_CAPACITY (1ULL << 30)
#define RING_MAX_RECORD(capacity) ((capacity) / 2)
#define RING_FRAME_HEADER 8u
#define RING_F_WRAPPED 1u

/* Lines are 128 bytes apart: x86's adjacent-line prefetcher pulls 64-byte lines in pairs. */
#define RING_LINE 128

/*
 * The shared header. Each waiting flag sits on the line its *reader* polls in the hot path (the
 * publisher checks it after every publish; the waiter writes it only when it is about to sleep), so a
 * busy producer and consumer each touch the other's line only to refresh the other's index.
 */
typedef struct ring_header {
    /* Written once by the creator, then read-only. */
    _Alignas(RING_LINE) uint64_t magic;
    uint32_t version;
    uint32_t header_size;
    uint64_t capacity;

    /* Producer's line: write_idx and its counters; consumer_waiting (set by a sleeping consumer,
     * cleared by the producer when it signals data_fd). */
    _Alignas(RING_LINE) _Atomic uint64_t write_idx;
    _Atomic uint32_t consumer_waiting;
    uint32_t pad0;
    _Atomic uint64_t records_pushed;
    _Atomic uint64_t producer_blocked;

    /* Consumer's line: read_idx and its counters; producer_waiting = the read_idx the sleeping
     * producer needs (0: not waiting), cleared by the consumer when it signals space_fd. */
    _Alignas(RING_LINE) _Atomic uint64_t read_idx;
    _Atomic uint64_t producer_waiting;
    _Atomic uint64_t records_popped;
    _Atomic uint64_t consumer_blocked;

    /* Control: written once or twice in a ring's life. */
    _Alignas(RING_LINE) _Atomic uint32_t producer_closed;
    _Atomic uint32_t consumer_closed;
    _Atomic int32_t producer_pid;
    _Atomic int32_t consumer_pid;
} ring_header_t;

#define RING_HEADER_SIZE ((size_t)(4 * RING_LINE))
_Static_assert(sizeof(ring_header_t) == RING_HEADER_SIZE, "ring header layout changed");

/* Process-local view of one ring. */
typedef struct ring {
    ring_header_t *hdr;
    uint8_t *data;
    size_t map_size;
    uint64_t capacity;
    uint64_t mask;
    int mem_fd;
    int data_fd;
    int space_fd;
    /* Producer-side (touched only by the producing thread). */
    uint64_t p_write;       /* == hdr->write_idx, kept locally */
    uint64_t p_read_cache;  /* last read_idx seen; refreshed only when space looks short */
    uint64_t p_pushed;
    uint64_t p_blocked;
    int p_closed;           /* this process closed the producer end */
    /* Consumer-side (touched only by the consuming thread). */
    uint64_t c_read;        /* == hdr->read_idx, kept locally */
    uint64_t c_write_cache; /* last write_idx seen */
    uint64_t c_popped;
    uint64_t c_blocked;
    int c_closed;
} ring_t;

/* Result codes. Functions returning int return one of these (0 on success). */
enum {
    RING_OK = 0,
    RING_EMPTY = 1,    /* nothing to pop */
    RING_FULL = 2,     /* no room for the record */
    RING_EOQ = 3,      /* consumer: producer closed and the ring is drained */
    RING_PEERGONE = 4, /* producer: consumer closed or died; consumer (waits): producer died, drained */
    RING_CLOSED = 5,   /* this end was closed */
    RING_ETOOBIG = 6,  /* record larger than RING_MAX_RECORD */
    RING_ECORRUPT = 7, /* a frame header points outside what was published */
    RING_EINTR = 8,    /* a wait was interrupted by a signal; call again with the remaining time */
    RING_TIMEOUT = 9,  /* a wait timed out */
    RING_ESYS = 10     /* a system call failed; errno says why */
};

/* Results of ring_wait_*: RING_OK (ready: pop/push will make progress, or pop will report EOQ),
 * RING_TIMEOUT, RING_PEERGONE, RING_CLOSED, RING_EINTR, RING_ESYS. */

/* Create a ring (memfd + mmap + two eventfds, all CLOEXEC). On failure returns RING_ESYS (errno set)
 * or RING_ETOOBIG (bad capacity, errno = EINVAL). */
int ring_create(ring_t *r, uint64_t capacity);
/* Attach to a ring made by ring_create in another process; takes ownership of the fds (sets CLOEXEC on
 * them). Checks magic, version, capacity (if expected_capacity != 0) and the memfd's size: RING_ECORRUPT
 * on mismatch. */
int ring_attach(ring_t *r, int mem_fd, int data_fd, int space_fd, uint64_t expected_capacity);
/* Unmap and close every fd. Does not close either end (use ring_close_producer/consumer first). */
void ring_destroy(ring_t *r);

/* Register this process as the producer / consumer (its pid in the header; the other side watches it
 * while it waits) and load that side's local state from the header. RING_CLOSED if that end was
 * closed already; RING_ESYS with errno = EBUSY and *holder = its pid if another live process holds it. */
int ring_take_producer(ring_t *r, pid_t *holder);
int ring_take_consumer(ring_t *r, pid_t *holder);

/* ---- producer ---- */

/* RING_OK if the producer may push, RING_CLOSED if this end closed, RING_PEERGONE if the consumer
 * closed its end (checked once per batch, so a push into an abandoned ring fails instead of vanishing). */
int ring_producer_state(const ring_t *r);
/* Space a record of `len` payload bytes would take at the current write position. */
uint64_t ring_space_needed(const ring_t *r, uint64_t len);
/* Reserve room for one record of `len` bytes; on RING_OK *dst is where to copy the payload. Several
 * reservations may be made before one ring_publish (which is what makes batches cheap). */
int ring_reserve(ring_t *r, uint32_t len, uint8_t **dst);
/* Make everything reserved so far visible to the consumer (one seq_cst store of write_idx, which is also
 * the release of the records), and wake it if it announced a wait. `records` is how many were reserved,
 * for the statistics. */
void ring_publish(ring_t *r, uint64_t records);
/* Push one record (reserve + copy + publish). */
int ring_push(ring_t *r, const void *buf, uint32_t len);
/* Announce the producer will wait for room for `len` bytes; RING_OK if it has room already (not
 * armed), RING_FULL if armed (safe to sleep on space_fd), RING_PEERGONE if the consumer closed,
 * RING_CLOSED, RING_ETOOBIG. Once armed, the consumer signals when max(room for `len`, capacity / 4)
 * is free, so a full ring does not cost a wake-up per consumer batch. */
int ring_arm_writable(ring_t *r, uint64_t len);
/* Block until a record of `len` bytes fits: poll() in <= 100 ms slices, checking between slices whether
 * the consumer's process is gone. timeout_ns < 0: forever. */
int ring_wait_writable(ring_t *r, uint64_t len, int64_t timeout_ns);
/* Close the producer end: the consumer drains what is left, then sees RING_EOQ. */
void ring_close_producer(ring_t *r);

/* ---- consumer ---- */

/* Peek at the next record without consuming it: RING_OK and *src, *len set, RING_EMPTY, RING_EOQ,
 * RING_CLOSED, RING_ECORRUPT. `*cursor` is the position to read at (start with ring_peek_begin) and is
 * advanced past the record; nothing is freed until ring_release. */
uint64_t ring_peek_begin(ring_t *r);
int ring_peek(ring_t *r, uint64_t *cursor, const uint8_t **src, uint32_t *len);
/* Free everything up to `cursor` (one seq_cst store of read_idx, also the release of the space) and wake
 * the producer if it announced a wait that this satisfies. */
void ring_release(ring_t *r, uint64_t cursor, uint64_t records);
/* Pop one record into buf (cap bytes); RING_ETOOBIG if cap is too small (*len says how much is needed). */
int ring_pop(ring_t *r, void *buf, uint32_t cap, uint32_t *len);
/* Announce the consumer will wait for data; RING_OK if data (or the producer's close) is already
 * there (not armed), RING_EMPTY if armed (safe to sleep on data_fd), RING_CLOSED. */
int ring_arm_readable(ring_t *r);
/* Block until there is data or the producer closed: a short spin (RING_CONSUMER_SPIN in ring.c), then
 * poll() in <= 100 ms slices, checking between slices whether the producer's process is gone. */
int ring_wait_readable(ring_t *r, int64_t timeout_ns);
/* Close the consumer end: the producer's pushes fail with RING_PEERGONE from then on. */
void ring_close_consumer(ring_t *r);

/* ---- both ---- */

/* Reset an eventfd's counter (after a wake-up from an event loop). Never blocks. */
void ring_clear_fd(int fd);
/* 1 if the process registered for the other end is known to be gone (no such pid, or a zombie); 0 if
 * alive or not registered yet. */
int ring_pid_gone(pid_t pid);
uint64_t ring_bytes_used(const ring_t *r);

#endif
