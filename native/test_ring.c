/*
 * Unit tests of ring.c without Python: `make native-test` builds them with AddressSanitizer and
 * UndefinedBehaviorSanitizer and runs them. Each test prints its name; any failure aborts with the line.
 */
#define _GNU_SOURCE
#include "ring.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                 \
        }                                                                            \
    } while (0)

/* Deterministic record contents: byte j of record i. */
static uint8_t pattern(uint64_t i, uint32_t j) { return (uint8_t)(i * 31u + j * 7u + (i >> 8)); }

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static uint64_t rnd(void) { /* xorshift64 */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void fill(uint8_t *buf, uint64_t i, uint32_t len) {
    for (uint32_t j = 0; j < len; j++) buf[j] = pattern(i, j);
}

static int matches(const uint8_t *buf, uint64_t i, uint32_t len) {
    for (uint32_t j = 0; j < len; j++)
        if (buf[j] != pattern(i, j)) return 0;
    return 1;
}

static void take_both(ring_t *r) {
    pid_t holder;
    CHECK(ring_take_producer(r, &holder) == RING_OK);
    CHECK(ring_take_consumer(r, &holder) == RING_OK);
}

static void test_capacity_rules(void) {
    puts("capacity_rules");
    ring_t r;
    CHECK(ring_create(&r, 2048) == RING_ETOOBIG);
    CHECK(ring_create(&r, 4096 + 8) == RING_ETOOBIG);
    CHECK(ring_create(&r, RING_MAX_CAPACITY * 2) == RING_ETOOBIG);
    CHECK(ring_create(&r, 4096) == RING_OK);
    CHECK(r.capacity == 4096);
    ring_destroy(&r);
}

static void test_roundtrip_and_limits(void) {
    puts("roundtrip_and_limits");
    ring_t r;
    CHECK(ring_create(&r, 4096) == RING_OK);
    take_both(&r);
    uint8_t buf[4096], out[4096];
    uint32_t len;
    CHECK(ring_pop(&r, out, sizeof(out), &len) == RING_EMPTY);
    CHECK(ring_push(&r, buf, 0) == RING_OK);
    CHECK(ring_pop(&r, out, sizeof(out), &len) == RING_OK && len == 0);
    CHECK(ring_push(&r, buf, 2049) == RING_ETOOBIG);
    /* Exactly half fits into an empty ring whatever the write position (8-byte steps). */
    for (uint64_t offset = 0; offset < 4096; offset += 8) {
        while ((r.p_write & r.mask) != offset) { /* zero-length records are 8 bytes each */
            CHECK(ring_push(&r, buf, 0) == RING_OK);
            CHECK(ring_pop(&r, out, sizeof(out), &len) == RING_OK && len == 0);
        }
        fill(buf, offset, 2048);
        CHECK(ring_push(&r, buf, 2048) == RING_OK);
        CHECK(ring_pop(&r, out, sizeof(out), &len) == RING_OK && len == 2048 && matches(out, offset, 2048));
        CHECK(ring_bytes_used(&r) == 0);
    }
    ring_close_producer(&r);
    CHECK(ring_pop(&r, out, sizeof(out), &len) == RING_EOQ);
    ring_destroy(&r);
}

/* Random sizes and batch lengths against a model of what must come out, many times round the ring. */
static void test_wraps_against_model(void) {
    puts("wraps_against_model");
    ring_t r;
    CHECK(ring_create(&r, 8192) == RING_OK);
    take_both(&r);
    enum { N = 200000 };
    static uint32_t sizes[N];
    for (int i = 0; i < N; i++) sizes[i] = (uint32_t)(rnd() % 9 == 0 ? rnd() % 4097 : rnd() % 300);
    uint64_t next_push = 0, next_pop = 0;
    while (next_pop < N) {
        uint64_t batch = 1 + rnd() % 40, pushed = 0;
        while (pushed < batch && next_push < N) {
            uint8_t *dst;
            int rc = ring_reserve(&r, sizes[next_push], &dst);
            if (rc == RING_FULL) break;
            CHECK(rc == RING_OK);
            fill(dst, next_push, sizes[next_push]);
            next_push++, pushed++;
        }
        ring_publish(&r, pushed);
        CHECK(ring_bytes_used(&r) <= r.capacity);
        uint64_t want = 1 + rnd() % 40, popped = 0, cursor = ring_peek_begin(&r);
        while (popped < want) {
            const uint8_t *src;
            uint32_t len;
            int rc = ring_peek(&r, &cursor, &src, &len);
            if (rc == RING_EMPTY) break;
            CHECK(rc == RING_OK);
            CHECK(len == sizes[next_pop] && matches(src, next_pop, len));
            next_pop++, popped++;
        }
        ring_release(&r, cursor, popped);
    }
    CHECK(ring_bytes_used(&r) == 0);
    CHECK(r.hdr->records_pushed == N && r.hdr->records_popped == N);
    ring_destroy(&r);
}

/* Producer and consumer threads with blocking waits: order, contents, and no lost wake-up (a lost one
 * would hang; the waits' 100 ms slices would hide it, so the test also checks the run is quick). */
typedef struct {
    ring_t *r;
    uint64_t n;
} job_t;

static uint32_t size_of(uint64_t i) { return (uint32_t)((i * 2654435761u) % 700); }

static void *producer_thread(void *arg) {
    job_t *job = arg;
    ring_t *r = job->r;
    for (uint64_t i = 0; i < job->n;) {
        uint8_t *dst;
        int rc = ring_reserve(r, size_of(i), &dst);
        if (rc == RING_FULL) {
            ring_publish(r, 0);
            CHECK(ring_wait_writable(r, size_of(i), -1) == RING_OK);
            continue;
        }
        CHECK(rc == RING_OK);
        fill(dst, i, size_of(i));
        i++;
        if (i % 16 == 0) ring_publish(r, 16);
    }
    ring_publish(r, job->n % 16);
    ring_close_producer(r);
    return NULL;
}

static void test_threads_blocking(void) {
    puts("threads_blocking");
    ring_t r;
    CHECK(ring_create(&r, 16384) == RING_OK);
    take_both(&r);
    job_t job = {&r, 300000};
    pthread_t t;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK(pthread_create(&t, NULL, producer_thread, &job) == 0);
    uint64_t i = 0;
    for (;;) {
        uint64_t cursor = ring_peek_begin(&r), popped = 0;
        const uint8_t *src;
        uint32_t len;
        int rc;
        while ((rc = ring_peek(&r, &cursor, &src, &len)) == RING_OK && popped < 64) {
            CHECK(len == size_of(i) && matches(src, i, len));
            i++, popped++;
        }
        ring_release(&r, cursor, popped);
        if (rc == RING_EOQ) break;
        if (rc == RING_EMPTY) CHECK(ring_wait_readable(&r, -1) == RING_OK);
    }
    CHECK(pthread_join(t, NULL) == 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    CHECK(i == job.n);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("  %llu records in %.3f s; producer slept %llu times, consumer %llu\n", (unsigned long long)i, secs,
           (unsigned long long)r.hdr->producer_blocked, (unsigned long long)r.hdr->consumer_blocked);
    ring_destroy(&r);
}

/* The consumer process dies (and stays a zombie: nobody reaps it yet) while the producer waits for room. */
static void test_dead_consumer_is_noticed(void) {
    puts("dead_consumer_is_noticed");
    ring_t r;
    CHECK(ring_create(&r, 4096) == RING_OK);
    pid_t holder;
    CHECK(ring_take_producer(&r, &holder) == RING_OK);
    uint8_t buf[2048] = {0};
    while (ring_push(&r, buf, sizeof(buf)) == RING_OK) {
    }
    int ready[2];
    CHECK(pipe(ready) == 0);
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        CHECK(ring_take_consumer(&r, &holder) == RING_OK);
        char c = 1;
        CHECK(write(ready[1], &c, 1) == 1);
        pause();
        _exit(0);
    }
    char c;
    CHECK(read(ready[0], &c, 1) == 1);
    CHECK(ring_wait_writable(&r, 2048, 50000000LL) == RING_TIMEOUT); /* alive: just a timeout */
    CHECK(kill(child, SIGKILL) == 0);
    CHECK(ring_wait_writable(&r, 2048, 5000000000LL) == RING_PEERGONE);
    CHECK(ring_pid_gone(child) == 1); /* a zombie counts as gone */
    int status;
    CHECK(waitpid(child, &status, 0) == child);
    CHECK(ring_pid_gone(child) == 1);
    close(ready[0]);
    close(ready[1]);
    ring_destroy(&r);
}

/* The consumer closes: the producer's wait ends at once with RING_PEERGONE, and so do pushes. */
static void test_consumer_close_wakes_producer(void) {
    puts("consumer_close_wakes_producer");
    ring_t r;
    CHECK(ring_create(&r, 4096) == RING_OK);
    take_both(&r);
    uint8_t buf[1024] = {0};
    while (ring_push(&r, buf, sizeof(buf)) == RING_OK) {
    }
    CHECK(ring_arm_writable(&r, 1024) == RING_FULL);
    ring_close_consumer(&r);
    CHECK(ring_wait_writable(&r, 1024, -1) == RING_PEERGONE);
    CHECK(ring_push(&r, buf, 8) == RING_PEERGONE);
    ring_destroy(&r);
}

int main(void) {
    test_capacity_rules();
    test_roundtrip_and_limits();
    test_wraps_against_model();
    test_threads_blocking();
    test_dead_consumer_is_noticed();
    test_consumer_close_wakes_producer();
    puts("all ring tests passed");
    return 0;
}
