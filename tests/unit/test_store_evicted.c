/* test_store_evicted.c — the record of evicted keys (cache/store.h,
 * "Evicted keys"): bounded to the last evictions, oldest dropped; a key
 * stored again leaves it; why each was evicted; the size limit it suggests
 * keeps the entry when the same accesses run under it; and a miss of an
 * evicted key through the pipeline is counted, with that limit, into the
 * cache's statistics. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "common/clapi.h"
#include "tests/unit/pipeline_util.h"
#include "tests/unit/store_util.h"

static int was_evicted(store *s, int id, struct store_evicted *ev)
{
    return store_was_evicted(s, key_hash_of(id), ev);
}

/* Stores keys from..to-1 a minute and more apart: LRU order is store order. */
static void put_in_order(store *s, int from, int to, size_t size)
{
    for (int i = from; i < to; i++) {
        fake_now += 100;
        assert_int_equal(put_key(s, i, size), CLSHIM_OK);
    }
}

static store *open_limited(struct fixture *fx, uint64_t max_size)
{
    struct store_options o = default_options(fx, 0);
    o.max_size = max_size;
    store *s;
    assert_int_equal(store_open(&o, &s), CLSHIM_OK);
    return s;
}

static uint64_t keep_for(uint64_t bytes) { return (bytes * 100 + STORE_LOW_WATER_PCT - 1) / STORE_LOW_WATER_PCT; }

/* the record keeps the last evictions only, across transactions, the oldest
 * dropped first; each one has the entry's stored size */
static void record_is_bounded_oldest_dropped(void **state)
{
    struct fixture *fx = *state;
    store_set_evicted_max_for_test(8);
    fake_now = 1000000;
    store *s = open_raw(fx, 0);
    put_in_order(s, 0, 20, 500);
    uint64_t n = 0;
    uint64_t one = record_size(0, 500);
    assert_int_equal(store_evict(s, 0, 15 * one, &n), CLSHIM_OK); /* 0..4 */
    assert_int_equal(n, 5);
    assert_int_equal(store_evict(s, 0, 6 * one, &n), CLSHIM_OK); /* 5..13 */
    assert_int_equal(n, 9);
    assert_true(store_check_invariants(s));
    struct store_evicted ev;
    for (int i = 0; i < 6; i++) assert_int_equal(was_evicted(s, i, &ev), CLSHIM_ENOTFOUND);
    for (int i = 6; i < 14; i++) {
        assert_int_equal(was_evicted(s, i, &ev), CLSHIM_OK);
        assert_int_equal(ev.size, one);
        assert_int_equal(ev.why, STORE_EVICTED_SIZE);
    }
    for (int i = 14; i < 20; i++) assert_int_equal(was_evicted(s, i, &ev), CLSHIM_ENOTFOUND); /* stored */
    /* a key never stored is not in it either */
    assert_int_equal(was_evicted(s, 99, &ev), CLSHIM_ENOTFOUND);
    store_close(s);
    /* it is kept with the cache: another handle (read-only) sees it */
    struct store_options o = default_options(fx, 0);
    o.readonly = 1;
    assert_int_equal(store_open(&o, &s), CLSHIM_OK);
    assert_int_equal(was_evicted(s, 13, &ev), CLSHIM_OK);
    assert_int_equal(was_evicted(s, 5, &ev), CLSHIM_ENOTFOUND);
    store_close(s);
    store_set_evicted_max_for_test(0);
}

/* a key stored again leaves the record; clear empties it; an age eviction
 * says so */
static void restored_key_leaves_the_record(void **state)
{
    struct fixture *fx = *state;
    fake_now = 1000000;
    uint64_t one = record_size(0, 700);
    store *s = open_limited(fx, 2 * one + one / 2);
    put_in_order(s, 0, 3, 700); /* the third evicts 0 */
    struct store_evicted ev;
    assert_int_equal(get_key(s, 0), CLSHIM_ENOTFOUND);
    assert_int_equal(was_evicted(s, 0, &ev), CLSHIM_OK);
    put_in_order(s, 0, 1, 700); /* evicts 1 */
    assert_int_equal(was_evicted(s, 0, &ev), CLSHIM_ENOTFOUND);
    assert_int_equal(was_evicted(s, 1, &ev), CLSHIM_OK);
    assert_true(store_check_invariants(s));
    /* an import stores too */
    char path[4400];
    snprintf(path, sizeof path, "%s/export", fx->root);
    FILE *f = fopen(path, "w+");
    assert_non_null(f);
    assert_int_equal(store_export(s, f, NULL), CLSHIM_OK);
    assert_int_equal(store_evict(s, 0, 0, NULL), CLSHIM_OK); /* every entry */
    assert_int_equal(was_evicted(s, 2, &ev), CLSHIM_OK);
    rewind(f);
    assert_int_equal(store_import(s, f, NULL, NULL), CLSHIM_OK);
    fclose(f);
    assert_int_equal(was_evicted(s, 2, &ev), CLSHIM_ENOTFOUND);
    assert_int_equal(was_evicted(s, 1, &ev), CLSHIM_OK); /* not in the export */
    assert_true(store_check_invariants(s));
    assert_int_equal(store_clear(s), CLSHIM_OK);
    assert_int_equal(was_evicted(s, 1, &ev), CLSHIM_ENOTFOUND);
    /* age: entries unused for a day and more */
    put_in_order(s, 5, 6, 700);
    fake_now += 3 * 86400;
    assert_int_equal(store_evict(s, 86400, UINT64_MAX, NULL), CLSHIM_OK);
    assert_int_equal(was_evicted(s, 5, &ev), CLSHIM_OK);
    assert_int_equal(ev.why, STORE_EVICTED_AGE);
    assert_true(store_check_invariants(s));
    store_close(s);
}

/* Runs the accesses `ids` on a fresh cache in `dir` limited to max_size, as
 * runs of a program do: a lookup, and a store when it misses. With stop_at
 * < 0, returns the index of the first lookup that missed an evicted key
 * (*ev: what the record said), or -1; else stops after access stop_at and
 * returns stop_at when that one hit, or -1. */
static int replay(struct fixture *fx, const char *dir, uint64_t max_size, const int *ids, int n,
                  struct store_evicted *ev, int stop_at)
{
    struct store_options o = default_options(fx, 0);
    o.dir = dir;
    o.max_size = max_size;
    store *s;
    assert_int_equal(store_open(&o, &s), CLSHIM_OK);
    int first = -1;
    fake_now = 2000000;
    for (int i = 0; i < n && (stop_at < 0 || i <= stop_at); i++) {
        fake_now += 100; /* every access a new minute: each moves in the LRU order */
        if (get_key(s, ids[i]) == CLSHIM_OK) {
            if (i == stop_at) first = i;
            assert_int_equal(store_flush(s), CLSHIM_OK);
            continue;
        }
        if (first < 0 && stop_at < 0 && was_evicted(s, ids[i], ev) == CLSHIM_OK) first = i;
        assert_int_equal(put_key(s, ids[i], 900), CLSHIM_OK);
    }
    assert_true(store_check_invariants(s));
    store_close(s);
    return first;
}

/* the suggested limit: (stored now + evicted since + its size) / 90 %; the
 * same accesses under that limit keep the entry (a hit where it missed) */
static void suggested_limit_keeps_the_entry(void **state)
{
    struct fixture *fx = *state;
    uint64_t one = record_size(0, 900);
    /* a working set of 5 with a hot key (0) and a limit that holds about 3 */
    static const int ids[] = {0, 1, 2, 0, 3, 0, 4, 1, 0, 2, 3, 4};
    int n = (int)(sizeof ids / sizeof *ids);
    struct store_evicted ev;
    char small[4300], big[4300];
    snprintf(small, sizeof small, "%s/small", fx->root);
    snprintf(big, sizeof big, "%s/big", fx->root);
    int at = replay(fx, small, 3 * one + one / 2, ids, n, &ev, -1);
    assert_true(at > 0);
    assert_int_equal(ev.why, STORE_EVICTED_SIZE);
    assert_int_equal(ev.size, one);
    assert_true(ev.keep_limit > 3 * one + one / 2);
    assert_int_equal(replay(fx, big, ev.keep_limit, ids, n, &ev, at), at);

    /* the figure itself: 0, 1, 2 under a limit of 2.5 entries; 2's store
     * evicts 0; at 0's miss 1 and 2 are stored, nothing was evicted since */
    store *s = open_limited(fx, 2 * one + one / 2);
    put_in_order(s, 0, 3, 900);
    assert_int_equal(was_evicted(s, 0, &ev), CLSHIM_OK);
    assert_int_equal(ev.keep_limit, keep_for(3 * one));
    put_in_order(s, 3, 4, 900); /* evicts 1 */
    /* 0: stored now 2 and 3, evicted since 1, itself */
    assert_int_equal(was_evicted(s, 0, &ev), CLSHIM_OK);
    assert_int_equal(ev.keep_limit, keep_for(4 * one));
    assert_int_equal(was_evicted(s, 1, &ev), CLSHIM_OK);
    assert_int_equal(ev.keep_limit, keep_for(3 * one));
    store_close(s);
}

/* statistics: the counts add, the limit is a maximum, zero resets them */
static void stats_add_keeps_the_largest_limit(void **state)
{
    struct fixture *fx = *state;
    store *s = open_default(fx, 0);
    struct store_stats d = {.misses = 4, .misses_evicted = 3, .misses_evicted_age = 1, .evicted_keep_limit = 5000};
    assert_int_equal(store_stats_add(s, &d), CLSHIM_OK);
    d.evicted_keep_limit = 3000;
    assert_int_equal(store_stats_add(s, &d), CLSHIM_OK);
    struct store_stats st;
    assert_int_equal(store_stats_get(s, &st), CLSHIM_OK);
    assert_int_equal(st.misses, 8);
    assert_int_equal(st.misses_evicted, 6);
    assert_int_equal(st.misses_evicted_age, 2);
    assert_int_equal(st.evicted_keep_limit, 5000);
    assert_int_equal(store_stats_zero(s), CLSHIM_OK);
    assert_int_equal(store_stats_get(s, &st), CLSHIM_OK);
    assert_int_equal(st.misses_evicted, 0);
    assert_int_equal(st.evicted_keep_limit, 0);
    store_close(s);
}

/* ---- through the pipeline: its store is CLSHIM_CACHE_DIR (main) ---- */

/* A miss built and stored, as program/run.c does it. */
static void miss_and_store(const char *input, const char *binary)
{
    struct pipeline_flight f = flight(KEY_SOURCE, input);
    assert_int_equal(pipeline_begin(&f, 1, 0), PIPELINE_BUILD);
    built_ok(&f, binary);
    assert_int_equal(f.stored_size, strlen(binary));
    pipeline_end(&f, 1);
    pipeline_flight_free(&f);
}

/* a miss of an evicted key is counted as one, with the limit that would
 * have kept it, and reaches the cache's statistics; a new key is not */
static void pipeline_counts_a_miss_of_an_evicted_key(void **state)
{
    (void)state;
    char bin[4][1200];
    for (int i = 0; i < 4; i++) {
        memset(bin[i], 'a' + i, sizeof bin[i] - 1);
        bin[i][sizeof bin[i] - 1] = 0;
    }
    static const char *const src[] = {"kernel void a() {}", "kernel void b() {}", "kernel void c() {}",
                                      "kernel void d() {}"};
    struct pipeline_stats before, after;
    pipeline_stats(&before);
    fake_now = 3000000;
    for (int i = 0; i < 3; i++) { /* CLSHIM_CACHE_MAX_SIZE holds two: the third evicts a */
        fake_now += 100;
        miss_and_store(src[i], bin[i]);
    }
    store *st = pipeline_store();
    assert_non_null(st);
    struct pipeline_flight fa = flight(KEY_SOURCE, src[0]);
    struct store_evicted ev;
    assert_int_equal(store_was_evicted(st, fa.hash, &ev), CLSHIM_OK);
    pipeline_flight_free(&fa);
    uint64_t want = ev.keep_limit;
    memtier_clear(); /* a later process: only the disk */
    fake_now += 100;
    miss_and_store(src[0], bin[0]); /* evicted: counted */
    fake_now += 100;
    miss_and_store(src[3], bin[3]); /* new: not */
    pipeline_stats(&after);
    assert_int_equal(after.store.misses - before.store.misses, 5);
    assert_int_equal(after.store.misses_evicted - before.store.misses_evicted, 1);
    assert_int_equal(after.store.misses_evicted_age, 0);
    assert_int_equal(after.store.evicted_keep_limit, want);
    pipeline_flush_stats();
    struct store_stats s;
    assert_int_equal(store_stats_get(st, &s), CLSHIM_OK);
    assert_int_equal(s.misses_evicted, 1);
    assert_int_equal(s.evicted_keep_limit, want);
    assert_true(store_check_invariants(st));
}

int main(void)
{
    char dir[] = "/tmp/clshim-test-evicted-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    char cache[64];
    snprintf(cache, sizeof cache, "%s/cache", dir);
    /* before the first config_get(): the pipeline's store, uncompressed,
     * with room for two of its entries */
    setenv("CLSHIM_CACHE_DIR", cache, 1);
    setenv("CLSHIM_CACHE_MAX_SIZE", "3600", 1);
    setenv("CLSHIM_CACHE_COMPRESS_LEVEL", "0", 1);
    setenv("CLSHIM_REMOTE", "", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(record_is_bounded_oldest_dropped, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(restored_key_leaves_the_record, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(suggested_limit_keeps_the_entry, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(stats_add_keeps_the_largest_limit, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(pipeline_counts_a_miss_of_an_evicted_key, fx_setup, fx_teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    pipeline_exit();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) rc = rc ? rc : 1;
    return rc;
}
