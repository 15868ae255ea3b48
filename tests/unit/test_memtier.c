/* test_memtier.c — the in-process tier: single flight, failures, limits. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache/memtier.h"

static struct cache_hash H(uint64_t n) { return (struct cache_hash){n, ~n}; }

static int fills, hits, failures;
static pthread_mutex_t count_lock = PTHREAD_MUTEX_INITIALIZER;
static int fail_fill;

static void *builder(void *arg)
{
    struct cache_hash key = *(struct cache_hash *)arg;
    memtier_entry *e;
    enum memtier_result r = memtier_acquire(key, 1, &e);
    pthread_mutex_lock(&count_lock);
    if (r == MEMTIER_FILL) fills++;
    else if (r == MEMTIER_HIT) hits++;
    else if (r == MEMTIER_FAILED) failures++;
    pthread_mutex_unlock(&count_lock);
    if (r == MEMTIER_FILL) {
        usleep(50000); /* a slow build: everyone else arrives meanwhile */
        if (fail_fill) memtier_abandon(e);
        else {
            memtier_fill(e, "binary", 6, "log", 1000);
            memtier_release(e);
        }
    } else if (r == MEMTIER_HIT) {
        size_t n;
        const char *b = memtier_binary(e, &n);
        assert_int_equal(n, 6);
        assert_memory_equal(b, "binary", 6);
        assert_string_equal(memtier_build_log(e), "log");
        memtier_release(e);
    }
    return NULL;
}

static void run_threads(struct cache_hash key, int n)
{
    pthread_t t[16];
    fills = hits = failures = 0;
    for (int i = 0; i < n; i++) pthread_create(&t[i], NULL, builder, &key);
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
}

/* 8 threads acquiring one key: one fills, seven get its result */
static void single_flight(void **state)
{
    fail_fill = 0;
    run_threads(H(1), 8);
    assert_int_equal(fills, 1);
    assert_int_equal(hits, 7);
}

/* a failed fill wakes the waiters with MEMTIER_FAILED; the next try fills afresh */
static void failure_reaches_waiters(void **state)
{
    fail_fill = 1;
    run_threads(H(2), 8);
    assert_int_equal(fills, 1);
    assert_int_equal(failures, 7);
    memtier_entry *e;
    assert_int_equal(memtier_acquire(H(2), 1, &e), MEMTIER_FILL);
    memtier_abandon(e);
}

/* without waiting, a key being filled is reported busy */
static void busy_without_wait(void **state)
{
    memtier_entry *a, *b;
    assert_int_equal(memtier_acquire(H(3), 1, &a), MEMTIER_FILL);
    assert_int_equal(memtier_acquire(H(3), 0, &b), MEMTIER_BUSY);
    assert_null(b);
    memtier_abandon(a);
}

/* over the limit, least recently used unpinned entries go; pinned ones stay */
static void lru_limit_spares_pinned(void **state)
{
    memtier_clear();
    memtier_set_limit(3000);
    char blob[1000] = {0};
    memtier_entry *pinned;
    assert_int_equal(memtier_acquire(H(100), 1, &pinned), MEMTIER_FILL);
    memtier_fill(pinned, blob, sizeof blob, "", 0); /* stays pinned */
    for (uint64_t i = 101; i < 106; i++) {
        memtier_entry *e;
        assert_int_equal(memtier_acquire(H(i), 1, &e), MEMTIER_FILL);
        memtier_fill(e, blob, sizeof blob, "", 0);
        memtier_release(e);
    }
    uint64_t bytes, entries;
    memtier_usage(&bytes, &entries);
    assert_true(bytes <= 3000);
    memtier_entry *e;
    assert_int_equal(memtier_acquire(H(100), 1, &e), MEMTIER_HIT); /* pinned survived */
    memtier_release(e);
    memtier_release(pinned);
    assert_int_equal(memtier_acquire(H(101), 1, &e), MEMTIER_FILL); /* oldest went */
    memtier_abandon(e);
    assert_int_equal(memtier_acquire(H(105), 1, &e), MEMTIER_HIT); /* newest stayed */
    memtier_release(e);
    memtier_set_limit(0);
}

/* switched off, the tier holds nothing unpinned but still joins a fill in
 * flight (single flight); switched on again, it keeps entries */
static void keep_off_holds_nothing(void **state)
{
    (void)state;
    memtier_clear();
    memtier_set_keep(0);
    char blob[100] = {0};
    memtier_entry *e, *w;
    assert_int_equal(memtier_acquire(H(150), 1, &e), MEMTIER_FILL);
    assert_int_equal(memtier_acquire(H(150), 0, &w), MEMTIER_BUSY); /* a fill in flight is shared */
    memtier_fill(e, blob, sizeof blob, "", 0);
    assert_int_equal(memtier_acquire(H(150), 1, &w), MEMTIER_HIT); /* pinned: still there */
    memtier_release(w);
    memtier_release(e);
    uint64_t bytes, entries;
    memtier_usage(&bytes, &entries);
    assert_int_equal(bytes, 0);
    assert_int_equal(entries, 0);
    assert_int_equal(memtier_acquire(H(150), 1, &e), MEMTIER_FILL); /* nothing was kept */
    memtier_fill(e, blob, sizeof blob, "", 0);
    memtier_set_keep(1);
    memtier_release(e);
    memtier_usage(&bytes, &entries);
    assert_int_equal(entries, 1);
    assert_int_equal(memtier_clear(), 1); /* clear says how many it dropped */
    assert_int_equal(memtier_clear(), 0);
}

static int released;
static void release_obj(void *o) { (void)o; released++; }
static int retain_obj(void *o) { return (void)o, 0; }

/* an attached object is served to its tag only, and detached by its owner */
static void attached_objects(void **state)
{
    memtier_entry *e, *w;
    int obj, ctx_a, ctx_b;
    released = 0;
    assert_int_equal(memtier_acquire(H(200), 1, &e), MEMTIER_FILL);
    memtier_attach(e, &obj, &ctx_a, release_obj);
    memtier_fill(e, NULL, 0, "log", 5);
    memtier_release(e);
    assert_int_equal(memtier_acquire(H(200), 1, &w), MEMTIER_HIT);
    assert_ptr_equal(memtier_object_retain(w, &ctx_a, retain_obj), &obj);
    assert_null(memtier_object_retain(w, &ctx_b, retain_obj));
    memtier_release(w);
    memtier_detach(H(200), &obj);
    assert_int_equal(released, 1);
    /* nothing left to serve: the next acquirer fills */
    assert_int_equal(memtier_acquire(H(200), 1, &w), MEMTIER_FILL);
    memtier_abandon(w);
}

/* A hit entry filled with its builder's object only, whose readers race
 * its owner: a reader that finds the object refills the entry from it (as
 * program/run.c entry_binary does), the owner keeps the bytes and then
 * detaches the object (program/late_capture.c capture, record.c
 * free_devs). Every reader must be served bytes or the object, never
 * neither: one look under the lock (memtier_serve). Looked at in two steps,
 * the bytes first and the object after, a reader between a refill and the
 * detach found neither, and the test_load reliability test saw "the driver
 * rejected a cached binary (error -42)" for an entry that had its bytes. */
#define SERVE_READERS 3
static struct cache_hash serve_key;
static int serve_obj, served_neither;

static void *serve_reader(void *arg)
{
    (void)arg;
    memtier_entry *e;
    if (memtier_acquire(serve_key, 1, &e) != MEMTIER_HIT) return NULL;
    size_t n;
    void *o;
    const void *b = memtier_serve(e, &n, retain_obj, &o);
    if (!b && o) {
        memtier_refill(e, "bytes", 5); /* read from the object */
        b = memtier_binary(e, &n);
    }
    if (!b || n != 5 || memcmp(b, "bytes", 5) != 0) __atomic_add_fetch(&served_neither, 1, __ATOMIC_RELAXED);
    memtier_release(e);
    return NULL;
}

static void *serve_owner(void *arg)
{
    (void)arg;
    memtier_entry *e;
    size_t n;
    if (memtier_acquire(serve_key, 0, &e) == MEMTIER_HIT) { /* pipeline_keep_bytes */
        if (!memtier_binary(e, &n)) memtier_refill(e, "bytes", 5);
        memtier_release(e);
    }
    memtier_detach(serve_key, &serve_obj);
    return NULL;
}

static void serve_bytes_or_object(void **state)
{
    (void)state;
    memtier_clear();
    served_neither = 0;
    for (uint64_t round = 0; round < 8000; round++) {
        serve_key = H(1000 + round);
        memtier_entry *e;
        assert_int_equal(memtier_acquire(serve_key, 1, &e), MEMTIER_FILL);
        memtier_attach(e, &serve_obj, NULL, release_obj);
        memtier_fill(e, NULL, 0, "", 0);
        pthread_t t[SERVE_READERS + 1];
        for (int i = 0; i < SERVE_READERS; i++) pthread_create(&t[i], NULL, serve_reader, NULL);
        pthread_create(&t[SERVE_READERS], NULL, serve_owner, NULL);
        memtier_release(e);
        for (int i = 0; i <= SERVE_READERS; i++) pthread_join(t[i], NULL);
    }
    assert_int_equal(served_neither, 0);
    /* One look: bytes when there are bytes, the object when only it is there. */
    memtier_entry *e, *w;
    size_t n;
    void *o;
    assert_int_equal(memtier_acquire(H(900), 1, &e), MEMTIER_FILL);
    memtier_attach(e, &serve_obj, NULL, release_obj);
    memtier_fill(e, NULL, 0, "", 0);
    assert_int_equal(memtier_acquire(H(900), 1, &w), MEMTIER_HIT);
    assert_null(memtier_serve(w, &n, retain_obj, &o));
    assert_ptr_equal(o, &serve_obj);
    assert_int_equal(n, 0);
    assert_int_equal(memtier_refill(w, "bytes", 5), 0);
    memtier_detach(H(900), &serve_obj);
    assert_memory_equal(memtier_serve(e, &n, retain_obj, &o), "bytes", 5);
    assert_null(o);
    assert_int_equal(n, 5);
    memtier_release(w);
    memtier_release(e);
    memtier_clear();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(single_flight),           cmocka_unit_test(failure_reaches_waiters),
        cmocka_unit_test(busy_without_wait),       cmocka_unit_test(lru_limit_spares_pinned),
        cmocka_unit_test(keep_off_holds_nothing),  cmocka_unit_test(attached_objects),
        cmocka_unit_test(serve_bytes_or_object),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
