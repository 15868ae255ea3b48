/* test_store.c — the persistent store on a real LMDB in a temp directory:
 * lookups, collisions, corruption, eviction, the invariants under random
 * operations, access-time batching, limits, claims, statistics, map growth,
 * verify, export/import and compaction. Safety of store_open (permissions,
 * links, damaged files, read-only) is in test_store_safety.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tests/unit/store_util.h"

/* a stored entry comes back with the same binary, log, device, origin */
static void put_then_get_returns_the_same_record(void **state)
{
    struct fixture *fx = *state;
    store *s = open_default(fx, 3);
    for (int i = 0; i < 5; i++) assert_int_equal(put_key(s, i, 1000 + 997 * i), CLSHIM_OK);
    for (int i = 0; i < 5; i++) {
        struct store_record r;
        void *arena;
        char key[128];
        size_t kl = make_key(i, key);
        assert_int_equal(store_get(s, key_hash_of(i), key, kl, &r, &arena), CLSHIM_OK);
        check_binary(&r, i, 1000 + 997 * i);
        assert_string_equal(r.build_log, "build ok");
        assert_string_equal(r.device_name, "pthread-test-device");
        assert_int_equal(r.origin, ENTRY_ORIGIN_SOURCE);
        assert_int_equal(r.compile_ns, 5000000 + i);
        store_record_free(arena);
    }
    assert_true(store_check_invariants(s));
    store_close(s);
}

/* an absent key is ENOTFOUND, and a deleted one too */
static void absent_and_deleted_keys_are_not_found(void **state)
{
    struct fixture *fx = *state;
    store *s = open_default(fx, 3);
    assert_int_equal(get_key(s, 1), CLSHIM_ENOTFOUND);
    assert_int_equal(put_key(s, 1, 100), CLSHIM_OK);
    assert_int_equal(store_delete(s, key_hash_of(1)), CLSHIM_OK);
    assert_int_equal(get_key(s, 1), CLSHIM_ENOTFOUND);
    assert_int_equal(store_delete(s, key_hash_of(1)), CLSHIM_ENOTFOUND);
    assert_true(store_check_invariants(s));
    store_close(s);
}

/* same hash, other key material: ECOLLISION, never served, and counted */
static void collision_is_detected_and_counted(void **state)
{
    struct fixture *fx = *state;
    store *s = open_default(fx, 3);
    assert_int_equal(put_key(s, 7, 500), CLSHIM_OK);
    char other[128];
    size_t ol = make_key(8, other);
    struct store_record r;
    void *arena = (void *)1;
    assert_int_equal(store_get(s, key_hash_of(7), other, ol, &r, &arena), CLSHIM_ECOLLISION);
    assert_null(arena);
    assert_null(r.binary);
    /* a prefix of the material is a different key too */
    char key[128];
    size_t kl = make_key(7, key);
    assert_int_equal(store_get(s, key_hash_of(7), key, kl - 1, &r, &arena), CLSHIM_ECOLLISION);
    assert_int_equal(store_flush(s), CLSHIM_OK);
    struct store_stats st;
    assert_int_equal(store_stats_get(s, &st), CLSHIM_OK);
    assert_int_equal(st.collisions, 2);
    assert_int_equal(get_key(s, 7), CLSHIM_OK);
    store_close(s);
}

/* bits flipped in a stored value (raw LMDB write) make the entry ECORRUPT;
 * a fresh store over it heals it */
static void corrupted_value_is_detected(void **state)
{
    struct fixture *fx = *state;
    store *s = open_default(fx, 3);
    for (int i = 0; i < 3; i++) assert_int_equal(put_key(s, i, 3000), CLSHIM_OK);
    store_close(s);
    raw_flip(fx->dir, key_hash_of(1), 200); /* in the key material */
    raw_flip(fx->dir, key_hash_of(2), -5);  /* in the payload */
    s = open_default(fx, 3);
    assert_int_equal(get_key(s, 0), CLSHIM_OK);
    assert_int_equal(get_key(s, 1), CLSHIM_ECORRUPT);
    assert_int_equal(get_key(s, 2), CLSHIM_ECORRUPT);
    assert_int_equal(store_flush(s), CLSHIM_OK);
    struct store_stats st;
    assert_int_equal(store_stats_get(s, &st), CLSHIM_OK);
    assert_int_equal(st.corrupt, 2);
    assert_int_equal(put_key(s, 1, 3000), CLSHIM_OK);
    assert_int_equal(get_key(s, 1), CLSHIM_OK);
    assert_true(store_check_invariants(s));
    store_close(s);
}

/* past max_size, least recently used entries go first, down to 90 % */
static void lru_eviction_goes_oldest_first_to_low_water(void **state)
{
    struct fixture *fx = *state;
    fake_now = 1000000;
    store *s = open_raw(fx, 0);
    store_close(s);
    /* Raw entries of a known size: 10 fit, the 11th overflows. */
    uint64_t one = record_size(0, 1000);
    struct store_options o = default_options(fx, 0);
    o.max_size = one * 10 + one / 2;
    assert_int_equal(store_open(&o, &s), CLSHIM_OK);
    for (int i = 0; i < 10; i++) {
        fake_now += 100;
        assert_int_equal(put_key(s, i, 1000), CLSHIM_OK);
    }
    /* Entry 0 is used now (a minute later), so entry 1 is the oldest. */
    fake_now += 100;
    assert_int_equal(get_key(s, 0), CLSHIM_OK);
    assert_int_equal(store_flush(s), CLSHIM_OK);
    fake_now += 100;
    assert_int_equal(put_key(s, 10, 1000), CLSHIM_OK);
    /* 11 entries > limit: evict to <= 90 % of 10.5 entries = 9.45 → 9 remain. */
    struct store_stats st;
    assert_int_equal(store_stats_get(s, &st), CLSHIM_OK);
    assert_int_equal(st.entries, 9);
    assert_true(st.stored_bytes <= o.max_size / 100 * STORE_LOW_WATER_PCT);
    assert_int_equal(st.evictions_size, 2);
    assert_int_equal(get_key(s, 1), CLSHIM_ENOTFOUND);
    assert_int_equal(get_key(s, 2), CLSHIM_ENOTFOUND);
    assert_int_equal(get_key(s, 0), CLSHIM_OK);
    for (int i = 3; i <= 10; i++) assert_int_equal(get_key(s, i), CLSHIM_OK);
    /* An entry larger than the whole limit is refused, nothing evicted. */
    assert_int_equal(put_key(s, 11, 20000), CLSHIM_ETOOBIG);
    assert_int_equal(store_stats_get(s, &st), CLSHIM_OK);
    assert_int_equal(st.entries, 9);
    assert_true(store_check_invariants(s));
    store_close(s);
}

/* an entry that alone is between 90 % and 100 % of the limit evicts all the
 * others but not itself */
static void big_entry_evicts_others_not_itself(void **state)
{
    struct fixture *fx = *state;
    struct store_options o = default_options(fx, 0);
    o.max_size = record_size(0, 9500) + 10;
    store *s;
    assert_int_equal(store_open(&o, &s), CLSHIM_OK);
    for (int i = 0; i < 5; i++) assert_int_equal(put_key(s, i, 1000), CLSHIM_OK);
    assert_int_equal(put_key(s, 9, 9500), CLSHIM_OK);
    assert_int_equal(get_key(s, 9), CLSHIM_OK);
    struct store_stats st;
    assert_int_equal(store_stats_get(s, &st), CLSHIM_OK);
    assert_int_equal(st.entries, 1);
    assert_true(st.stored_bytes <= o.max_size);
    assert_true(store_check_invariants(s));
    store_close(s);
}

struct sum_ctx {
    uint64_t n, bytes, ubytes;
    int present[64];
};
static int sum_fn(const struct store_entry_info *e, void *ctx)
{
    struct sum_ctx *c = ctx;
    c->n++, c->bytes += e->stored_size, c->ubytes += e->binary_size;
    int id = key_id_of(e->key, e->key_len);
    assert_true(id >= 0 && id < 64);
    c->present[id] = 1;
    return 0;
}

/* 2000 random store/get/delete/evict/flush/clock operations (fixed seed):
 * after each, the invariants hold, meta's totals are the sum over the
 * entries, the size limit holds, and every hit returns what was stored */
static void random_operations_keep_invariants(void **state)
{
    struct fixture *fx = *state;
    fake_now = 2000000;
    struct store_options o = default_options(fx, 1);
    o.max_size = 40000;
    store *s;
    assert_int_equal(store_open(&o, &s), CLSHIM_OK);
    int size_of[64] = {0}, model[64] = {0};
    uint64_t seed = 20240601;
    for (int op = 0; op < 2000; op++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t r = (uint32_t)(seed >> 33);
        int id = (int)(r % 64), what = (int)((r >> 8) % 100);
        if (what < 45) {
            int size = 1 + (int)((r >> 16) % 6000);
            int rc = put_key(s, id, size);
            assert_true(rc == CLSHIM_OK || rc == CLSHIM_ETOOBIG);
            if (rc == CLSHIM_OK) model[id] = 1, size_of[id] = size;
        } else if (what < 75) {
            char key[128];
            size_t kl = make_key(id, key);
            struct store_record rec;
            void *arena;
            int rc = store_get(s, key_hash_of(id), key, kl, &rec, &arena);
            if (rc == CLSHIM_OK) {
                assert_true(model[id]);
                check_binary(&rec, id, (size_t)size_of[id]);
                store_record_free(arena);
            } else {
                assert_int_equal(rc, CLSHIM_ENOTFOUND);
            }
        } else if (what < 85) {
            int rc = store_delete(s, key_hash_of(id));
            assert_true(rc == CLSHIM_OK || rc == CLSHIM_ENOTFOUND);
            if (rc == CLSHIM_OK) assert_true(model[id]);
            model[id] = 0;
        } else if (what < 90) {
            uint64_t n;
            assert_int_equal(store_evict(s, (r >> 4) % 3 * 86400, (r >> 12) % 2 ? 20000 : UINT64_MAX, &n), CLSHIM_OK);
        } else if (what < 95) {
            assert_int_equal(store_flush(s), CLSHIM_OK);
        } else {
            fake_now += (r >> 4) % 40000; /* up to half a day */
        }
        assert_true(store_check_invariants(s));
        struct sum_ctx c = {0};
        assert_int_equal(store_foreach(s, sum_fn, &c), CLSHIM_OK);
        struct store_stats st;
        assert_int_equal(store_stats_get(s, &st), CLSHIM_OK);
        assert_int_equal(st.entries, c.n);
        assert_int_equal(st.stored_bytes, c.bytes);
        assert_int_equal(st.uncompressed_bytes, c.ubytes);
        assert_true(st.stored_bytes <= o.max_size);
        for (int i = 0; i < 64; i++) {
            if (c.present[i]) assert_true(model[i]); /* nothing appears unbidden */
            model[i] = c.present[i];
        }
    }
    store_close(s);
}

/* hits are queued and written by store_flush: the count at once, the LRU
 * position at most once a minute */
static void access_times_are_batched(void **state)
{
    struct fixture *fx = *state;
    fake_now = 5000000;
    store *s = open_default(fx, 3);
    assert_int_equal(put_key(s, 1, 100), CLSHIM_OK);
    fake_now += 10;
    assert_int_equal(get_key(s, 1), CLSHIM_OK);
    assert_int_equal(get_key(s, 1), CLSHIM_OK);
    struct entry_probe p = probe(s, 1);
    assert_int_equal(p.hits, 0); /* not yet written */
    assert_int_equal(store_flush(s), CLSHIM_OK);
    p = probe(s, 1);
    assert_int_equal(p.hits, 2);
    assert_int_equal(p.last_access, 5000000); /* moved less than a minute: not moved */
    fake_now += 100;
    assert_int_equal(get_key(s, 1), CLSHIM_OK);
    store_close(s); /* close flushes */
    s = open_default(fx, 3);
    p = probe(s, 1);
    assert_int_equal(p.hits, 3);
    assert_int_equal(p.last_access, 5000110);
    assert_int_equal(p.created, 5000000);
    assert_true(store_check_invariants(s));
    store_close(s);
}

/* entries unused for max_age days go at the daily sweep (at open or a store) */
static void age_sweep_evicts_old_entries_once_a_day(void **state)
{
    struct fixture *fx = *state;
    fake_now = 10000000;
    struct store_options o = default_options(fx, 3);
    o.max_age_days = 1;
    store *s;
    assert_int_equal(store_open(&o, &s), CLSHIM_OK);
    assert_int_equal(put_key(s, 1, 100), CLSHIM_OK);
    fake_now += 43200;
    assert_int_equal(put_key(s, 2, 100), CLSHIM_OK);
    fake_now += 43200 + 3600; /* a day after the first sweep: the next store sweeps */
    assert_int_equal(put_key(s, 3, 100), CLSHIM_OK);
    assert_int_equal(get_key(s, 1), CLSHIM_ENOTFOUND);
    assert_int_equal(get_key(s, 2), CLSHIM_OK);
    struct store_stats st;
    assert_int_equal(store_stats_get(s, &st), CLSHIM_OK);
    assert_int_equal(st.evictions_age, 1);
    /* Within the day no second sweep, even though entry 2 is now old. */
    fake_now += 50000;
    assert_int_equal(put_key(s, 4, 100), CLSHIM_OK);
    store_close(s);
    s = NULL;
    assert_int_equal(store_open(&o, &s), CLSHIM_OK);
    assert_int_equal(probe(s, 2).last_access, 10090000); /* its last get; probing is not a use */
    assert_int_equal(store_stats_get(s, &st), CLSHIM_OK);
    assert_int_equal(st.evictions_age, 1);
    store_close(s);
    /* A day after that sweep, opening sweeps: 2 is gone (unused 1.7 days). */
    fake_now += 40000;
    assert_int_equal(store_open(&o, &s), CLSHIM_OK);
    assert_int_equal(get_key(s, 2), CLSHIM_ENOTFOUND);
    assert_int_equal(get_key(s, 4), CLSHIM_OK);
    assert_true(store_check_invariants(s));
    /* store_evict: by age on demand, then by size. */
    fake_now += 3 * 86400;
    uint64_t n;
    assert_int_equal(store_evict(s, 2 * 86400, UINT64_MAX, &n), CLSHIM_OK);
    assert_int_equal(n, 1); /* 4 (2 and 3 went at the open sweep) */
    assert_int_equal(get_key(s, 3), CLSHIM_ENOTFOUND);
    assert_int_equal(put_key(s, 5, 100), CLSHIM_OK);
    assert_int_equal(get_key(s, 5), CLSHIM_OK);
    assert_int_equal(store_evict(s, 0, 0, &n), CLSHIM_OK);
    assert_int_equal(n, 1);
    assert_int_equal(get_key(s, 5), CLSHIM_ENOTFOUND);
    store_close(s);
}

/* binaries outside min/max entry are refused with ETOOBIG */
static void entry_size_limits_are_enforced(void **state)
{
    struct fixture *fx = *state;
    struct store_options o = default_options(fx, 3);
    o.min_entry = 100;
    o.max_entry = 5000;
    store *s;
    assert_int_equal(store_open(&o, &s), CLSHIM_OK);
    assert_int_equal(put_key(s, 1, 99), CLSHIM_ETOOBIG);
    assert_int_equal(put_key(s, 2, 100), CLSHIM_OK);
    assert_int_equal(put_key(s, 3, 5000), CLSHIM_OK);
    assert_int_equal(put_key(s, 4, 5001), CLSHIM_ETOOBIG);
    assert_int_equal(get_key(s, 1), CLSHIM_ENOTFOUND);
    assert_int_equal(get_key(s, 4), CLSHIM_ENOTFOUND);
    store_close(s);
}

/* claims: a live claimer in another process makes it busy; a dead or stale
 * claim is taken over; release frees it */
static void build_claims_across_processes(void **state)
{
    struct fixture *fx = *state;
    store *s = open_default(fx, 3);
    struct cache_hash h = key_hash_of(1);
    assert_int_equal(store_claim_build(s, h, 60000), CLSHIM_OK);
    assert_int_equal(store_claim_build(s, h, 60000), CLSHIM_OK); /* our own claim */
    /* A child sees the parent's live claim. */
    assert_int_equal(child_claim(fx, h, 60000, 0), CLSHIM_EBUSY);
    /* After release the child may claim. */
    assert_int_equal(store_release_build(s, h), CLSHIM_OK);
    assert_int_equal(child_claim(fx, h, 60000, 0), CLSHIM_OK);
    /* That child has exited without releasing: its claim is dead. */
    assert_int_equal(store_claim_build(s, h, 60000), CLSHIM_OK);
    assert_int_equal(store_release_build(s, h), CLSHIM_OK);
    /* A live child's claim older than stale_ms is taken over. */
    struct cache_hash h2 = key_hash_of(2);
    pid_t pid;
    int release_fd = child_claim_and_wait(fx, h2, &pid);
    assert_int_equal(store_claim_build(s, h2, 60000), CLSHIM_EBUSY);
    struct timespec ts = {0, 50 * 1000000};
    nanosleep(&ts, NULL);
    assert_int_equal(store_claim_build(s, h2, 20), CLSHIM_OK);
    close(release_fd);
    int status;
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    /* Releasing another process's claim is a no-op; a claim on another
     * boot (boot id differs) is dead: covered by claim_live's compare. */
    store_close(s);
}

/* demand: another process's want marks this process's live claim; the
 * mark leaves the claim live for others and goes with it */
static void build_claims_say_when_waited_for(void **state)
{
    struct fixture *fx = *state;
    store *s = open_default(fx, 3);
    struct cache_hash h = key_hash_of(7), other = key_hash_of(8);
    assert_false(store_build_wanted(s, h)); /* no claim */
    assert_int_equal(store_claim_build(s, h, 60000), CLSHIM_OK);
    assert_false(store_build_wanted(s, h));
    assert_int_equal(child_want(fx, h), CLSHIM_OK);
    assert_true(store_build_wanted(s, h));
    assert_false(store_build_wanted(s, other));
    assert_int_equal(child_want(fx, h), CLSHIM_OK); /* marked already: a no-op */
    assert_true(store_build_wanted(s, h));
    assert_int_equal(child_claim(fx, h, 60000, 0), CLSHIM_EBUSY); /* still held */
    assert_int_equal(store_release_build(s, h), CLSHIM_OK);
    assert_false(store_build_wanted(s, h));
    assert_int_equal(child_want(fx, other), CLSHIM_OK); /* nobody's claim: nothing marked */
    assert_int_equal(store_claim_build(s, other, 60000), CLSHIM_OK);
    assert_false(store_build_wanted(s, other));
    assert_int_equal(store_release_build(s, other), CLSHIM_OK);
    /* Taken over from a live holder (the capture helper takes the
     * application's claim), the claim keeps the mark its waiter made. */
    struct cache_hash h3 = key_hash_of(9);
    pid_t holder;
    int release_fd = child_claim_and_wait(fx, h3, &holder);
    assert_int_equal(child_want(fx, h3), CLSHIM_OK);
    assert_int_equal(store_take_claim(s, h3, holder, 60000), CLSHIM_OK);
    assert_true(store_build_wanted(s, h3));
    close(release_fd);
    int status;
    waitpid(holder, &status, 0);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_int_equal(store_release_build(s, h3), CLSHIM_OK);
    /* Taken from a holder nobody waited for: no mark. */
    release_fd = child_claim_and_wait(fx, h3, &holder);
    assert_int_equal(store_take_claim(s, h3, holder, 60000), CLSHIM_OK);
    assert_false(store_build_wanted(s, h3));
    close(release_fd);
    waitpid(holder, &status, 0);
    assert_int_equal(store_release_build(s, h3), CLSHIM_OK);
    store_close(s);
}

/* counters add up, survive reopen, and zero keeps the entries */
static void stats_add_get_zero(void **state)
{
    struct fixture *fx = *state;
    store *s = open_default(fx, 3);
    assert_int_equal(put_key(s, 1, 100), CLSHIM_OK);
    struct store_stats d = {.hits = 5, .misses = 2, .stores = 1, .rejected = 1, .compile_ns_saved = 1000};
    assert_int_equal(store_stats_add(s, &d), CLSHIM_OK);
    assert_int_equal(store_stats_add(s, &d), CLSHIM_OK);
    store_close(s);
    s = open_default(fx, 3);
    struct store_stats st;
    assert_int_equal(store_stats_get(s, &st), CLSHIM_OK);
    assert_int_equal(st.hits, 10);
    assert_int_equal(st.misses, 4);
    assert_int_equal(st.rejected, 2);
    assert_int_equal(st.compile_ns_saved, 2000);
    assert_int_equal(st.stores, 2); /* callers count stores, not store_put */
    assert_int_equal(st.entries, 1);
    assert_true(st.stored_bytes > 0 && st.uncompressed_bytes == 100);
    assert_int_equal(store_stats_zero(s), CLSHIM_OK);
    assert_int_equal(store_stats_get(s, &st), CLSHIM_OK);
    assert_int_equal(st.hits + st.misses + st.stores + st.rejected + st.compile_ns_saved, 0);
    assert_int_equal(st.entries, 1);
    store_close(s);
}

/* a tiny initial map fills up; the store grows it and keeps storing */
static void map_grows_when_full(void **state)
{
    struct fixture *fx = *state;
    store_set_mapsize_for_test(64 * 1024);
    store *s = open_default(fx, 0);
    store_set_mapsize_for_test(0);
    for (int i = 0; i < 60; i++) assert_int_equal(put_key(s, i, 8000), CLSHIM_OK);
    for (int i = 0; i < 60; i++) assert_int_equal(get_key(s, i), CLSHIM_OK);
    assert_true(store_check_invariants(s));
    store_close(s);
    s = open_default(fx, 0);
    assert_int_equal(get_key(s, 59), CLSHIM_OK);
    store_close(s);
}

/* another process grows the map past this handle's: the handle adopts the
 * new size (MDB_MAP_RESIZED) and reads and writes on */
static void map_grown_by_another_process_is_adopted(void **state)
{
    struct fixture *fx = *state;
    store_set_mapsize_for_test(64 * 1024);
    store *s = open_default(fx, 0);
    assert_int_equal(put_key(s, 0, 100), CLSHIM_OK);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        store *c;
        struct store_options o = default_options(fx, 0);
        if (store_open(&o, &c) != CLSHIM_OK) _exit(1);
        for (int i = 1; i < 80; i++)
            if (put_key(c, i, 8000) != CLSHIM_OK) _exit(2);
        store_close(c);
        _exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    store_set_mapsize_for_test(0);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    for (int i = 0; i < 80; i++) assert_int_equal(get_key(s, i), CLSHIM_OK);
    assert_int_equal(put_key(s, 100, 8000), CLSHIM_OK);
    assert_true(store_check_invariants(s));
    store_close(s);
}

/* verify finds bad entries and stray index records; --fix removes them and
 * rebuilds the totals; the good entries stay */
static void verify_and_fix(void **state)
{
    struct fixture *fx = *state;
    store *s = open_default(fx, 3);
    for (int i = 0; i < 10; i++) assert_int_equal(put_key(s, i, 2000), CLSHIM_OK);
    /* An entry under a hash that is not its material's. */
    char key[128];
    size_t kl = make_key(20, key);
    struct store_record rec = {"x", 1, "", 0, 1, "d", NULL};
    assert_int_equal(store_put(s, key_hash_of(21), key, kl, &rec), CLSHIM_OK);
    store_close(s);
    raw_flip(fx->dir, key_hash_of(3), 150);
    raw_flip(fx->dir, key_hash_of(4), -1);
    raw_add_stray_atime(fx->dir);
    s = open_default(fx, 3);
    uint64_t checked, bad;
    assert_int_equal(store_verify(s, 0, &checked, &bad), CLSHIM_OK);
    assert_int_equal(checked, 11);
    assert_int_equal(bad, 4);
    assert_false(store_check_invariants(s));
    assert_int_equal(store_verify(s, 0, &checked, &bad), CLSHIM_OK); /* no fix: still there */
    assert_int_equal(bad, 4);
    assert_int_equal(store_verify(s, 1, &checked, &bad), CLSHIM_OK);
    assert_int_equal(bad, 4);
    assert_int_equal(store_verify(s, 0, &checked, &bad), CLSHIM_OK);
    assert_int_equal(checked, 8);
    assert_int_equal(bad, 0);
    assert_true(store_check_invariants(s));
    for (int i = 0; i < 10; i++) assert_int_equal(get_key(s, i), i == 3 || i == 4 ? CLSHIM_ENOTFOUND : CLSHIM_OK);
    store_close(s);
}

/* export, clear, import: the same lookups succeed, hits and times kept;
 * tampered and truncated streams are caught */
static void export_clear_import_round_trip(void **state)
{
    struct fixture *fx = *state;
    fake_now = 7000000;
    store *s = open_default(fx, 3);
    for (int i = 0; i < 20; i++) assert_int_equal(put_key(s, i, 500 + 100 * i), CLSHIM_OK);
    fake_now += 120;
    assert_int_equal(get_key(s, 5), CLSHIM_OK);
    char path[4300];
    snprintf(path, sizeof path, "%s/export.bin", fx->root);
    FILE *f = fopen(path, "w+b");
    uint64_t n, rejected;
    assert_int_equal(store_export(s, f, &n), CLSHIM_OK);
    assert_int_equal(n, 20);
    assert_int_equal(store_clear(s), CLSHIM_OK);
    assert_int_equal(get_key(s, 5), CLSHIM_ENOTFOUND);
    struct store_stats st;
    assert_int_equal(store_stats_get(s, &st), CLSHIM_OK);
    assert_int_equal(st.entries + st.stored_bytes + st.uncompressed_bytes, 0);
    rewind(f);
    assert_int_equal(store_import(s, f, &n, &rejected), CLSHIM_OK);
    assert_int_equal(n, 20);
    assert_int_equal(rejected, 0);
    for (int i = 0; i < 20; i++) assert_int_equal(get_key(s, i), CLSHIM_OK);
    struct entry_probe p = probe(s, 5);
    assert_int_equal(p.hits, 1);
    assert_int_equal(p.last_access, 7000120);
    assert_true(store_check_invariants(s));
    /* One byte changed inside the first record: that record is rejected. */
    fseek(f, 8 + 8 + 40, SEEK_SET);
    int c = fgetc(f);
    fseek(f, 8 + 8 + 40, SEEK_SET);
    fputc(c ^ 0x40, f);
    assert_int_equal(store_clear(s), CLSHIM_OK);
    rewind(f);
    assert_int_equal(store_import(s, f, &n, &rejected), CLSHIM_OK);
    assert_int_equal(n, 19);
    assert_int_equal(rejected, 1);
    /* Cut short: what came before is kept, the stream is reported bad. */
    fflush(f);
    fseek(f, 0, SEEK_END);
    assert_int_equal(ftruncate(fileno(f), ftell(f) / 2), 0);
    assert_int_equal(store_clear(s), CLSHIM_OK);
    rewind(f);
    assert_int_equal(store_import(s, f, &n, &rejected), CLSHIM_EINVAL);
    assert_true(n >= 5 && n < 19);
    /* Not an export at all. */
    rewind(f);
    fputs("NOTANEXPORT", f);
    rewind(f);
    assert_int_equal(store_import(s, f, &n, &rejected), CLSHIM_EINVAL);
    fclose(f);
    assert_true(store_check_invariants(s));
    store_close(s);
}

/* compaction: refused while another process has the cache open, otherwise
 * shrinks the file and keeps every entry */
static void compact_is_exclusive_and_keeps_entries(void **state)
{
    struct fixture *fx = *state;
    store *s = open_default(fx, 0);
    for (int i = 0; i < 60; i++) assert_int_equal(put_key(s, i, 20000), CLSHIM_OK);
    for (int i = 0; i < 55; i++) assert_int_equal(store_delete(s, key_hash_of(i)), CLSHIM_OK);
    pid_t pid;
    int release_fd = child_open_and_wait(fx, &pid);
    assert_int_equal(store_compact(s), CLSHIM_EBUSY);
    close(release_fd);
    int status;
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    uint64_t before = file_size(fx->dir, "data.mdb");
    assert_int_equal(store_compact(s), CLSHIM_OK);
    uint64_t after = file_size(fx->dir, "data.mdb");
    assert_true(after < before / 2);
    for (int i = 55; i < 60; i++) assert_int_equal(get_key(s, i), CLSHIM_OK);
    assert_int_equal(put_key(s, 0, 100), CLSHIM_OK);
    assert_true(store_check_invariants(s));
    store_close(s);
    s = open_default(fx, 0);
    for (int i = 55; i < 60; i++) assert_int_equal(get_key(s, i), CLSHIM_OK);
    assert_int_equal(get_key(s, 0), CLSHIM_OK);
    store_close(s);
}

/* threads share one handle: concurrent gets and puts, no errors */
static void threads_share_a_handle(void **state)
{
    struct fixture *fx = *state;
    store *s = open_default(fx, 1);
    assert_int_equal(run_threads(s, 4, 300), 0);
    assert_true(store_check_invariants(s));
    store_close(s);
}

/* Lines of the log file holding `what`. */
static int log_count(const char *what)
{
    FILE *f = fopen(getenv("CLSHIM_LOG_FILE"), "r");
    if (!f) return 0;
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f)) n += strstr(line, what) != NULL;
    fclose(f);
    return n;
}

/* a size limit below one run's working set (its stores evict its own
 * entries) is warned once in that run, with the size, and again at the next
 * open while the limit stays that small; not once the limit is raised */
static void limit_below_working_set_warns(void **state)
{
    struct fixture *fx = *state;
    fake_now = 20000000;
    struct store_options o = default_options(fx, 0);
    o.max_size = 20000;
    int run0 = log_count("is below this run's working set"), open0 = log_count("is below a run's working set");
    store *s;
    assert_int_equal(store_open(&o, &s), CLSHIM_OK);
    for (int i = 0; i < 8; i++, fake_now++) assert_int_equal(put_key(s, i, 5000), CLSHIM_OK);
    store_close(s);
    assert_int_equal(log_count("is below this run's working set") - run0, 1);
    assert_int_equal(log_count("CLSHIM_CACHE_MAX_SIZE=20000 is below this run's working set (2"), run0 + 1);
    assert_int_equal(log_count("is below a run's working set"), open0);
    fake_now += 100;
    assert_int_equal(store_open(&o, &s), CLSHIM_OK);
    store_close(s);
    assert_int_equal(log_count("is below a run's working set") - open0, 1);
    o.max_size = 1 << 20;
    assert_int_equal(store_open(&o, &s), CLSHIM_OK);
    store_close(s);
    assert_int_equal(log_count("is below a run's working set") - open0, 1);
}

int main(void)
{
    char log_path[] = "/tmp/clshim-test-store-log-XXXXXX";
    int log_fd = mkstemp(log_path);
    if (log_fd >= 0) close(log_fd);
    setenv("CLSHIM_LOG_FILE", log_path, 1); /* before the first log line reads the configuration */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(limit_below_working_set_warns, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(put_then_get_returns_the_same_record, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(absent_and_deleted_keys_are_not_found, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(collision_is_detected_and_counted, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(corrupted_value_is_detected, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(lru_eviction_goes_oldest_first_to_low_water, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(big_entry_evicts_others_not_itself, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(random_operations_keep_invariants, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(access_times_are_batched, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(age_sweep_evicts_old_entries_once_a_day, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(entry_size_limits_are_enforced, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(build_claims_across_processes, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(build_claims_say_when_waited_for, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(stats_add_get_zero, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(map_grows_when_full, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(map_grown_by_another_process_is_adopted, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(verify_and_fix, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(export_clear_import_round_trip, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(compact_is_exclusive_and_keeps_entries, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(threads_share_a_handle, fx_setup, fx_teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    unlink(log_path);
    return rc;
}
