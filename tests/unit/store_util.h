/* store_util.h — helpers of the store tests (test_store*.c,
 * test_cache_cmd.c): a temp cache per test, deterministic keys and binaries,
 * a fake clock, raw LMDB edits, child processes. Included by one test file
 * each, so everything here is static. Include after <cmocka.h>. */
#ifndef CLSHIM_TEST_STORE_UTIL_H
#define CLSHIM_TEST_STORE_UTIL_H

#include <lmdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cache/entry.h"
#include "cache/store.h"
#include "common/error.h"

struct fixture {
    char root[4096]; /* private temp dir */
    char dir[4200];  /* the cache dir inside it (not created) */
};

static uint64_t fake_now; /* 0: the real clock */
static inline uint64_t test_clock(void) { return fake_now ? fake_now : (uint64_t)time(NULL); }

static inline int fx_setup(void **state)
{
    struct fixture *fx = calloc(1, sizeof *fx);
    const char *tmp = getenv("TEST_TMP");
    snprintf(fx->root, sizeof fx->root, "%s/storeXXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(fx->root)) return -1;
    snprintf(fx->dir, sizeof fx->dir, "%s/cache", fx->root);
    fake_now = 0;
    store_set_clock_for_test(test_clock);
    store_set_mapsize_for_test(0);
    *state = fx;
    return 0;
}

static inline int fx_teardown(void **state)
{
    struct fixture *fx = *state;
    char cmd[8400];
    snprintf(cmd, sizeof cmd, "chmod -R u+rwx '%s' 2>/dev/null; rm -rf '%s'", fx->root, fx->root);
    int rc = system(cmd);
    (void)rc;
    free(fx);
    return 0;
}

static inline struct store_options default_options(struct fixture *fx, int level)
{
    struct store_options o = {0};
    o.dir = fx->dir;
    o.compress_level = level;
    return o;
}

static inline store *open_default(struct fixture *fx, int level)
{
    struct store_options o = default_options(fx, level);
    store *s = NULL;
    assert_int_equal(store_open(&o, &s), CLSHIM_OK);
    return s;
}
static inline store *open_raw(struct fixture *fx, int level) { return open_default(fx, level); }

/* Key material of test key `id`: fixed width, so every key has one length. */
static inline size_t make_key(int id, char buf[128])
{
    return (size_t)snprintf(buf, 128, "clshim-key 1\nkind=source\noptions=-O2\ndevice=pthread\ninput=%04d\n", id);
}

static inline int key_id_of(const void *key, size_t len)
{
    const char *p = memmem(key, len, "input=", 6);
    return p ? atoi(p + 6) : -1;
}

static inline struct cache_hash key_hash_of(int id)
{
    char key[128];
    size_t n = make_key(id, key);
    return entry_xxh3_128(key, n);
}

/* A binary that compresses somewhat, different per id. */
static inline void fill_bin(unsigned char *p, size_t n, int id)
{
    uint64_t x = 0x2545F4914F6CDD1Dull * (uint64_t)(id + 1);
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        p[i] = (i & 8) ? (unsigned char)(i * 7 + (size_t)id) : (unsigned char)x;
    }
}

static inline int put_key(store *s, int id, size_t size)
{
    char key[128];
    size_t kl = make_key(id, key);
    unsigned char *bin = malloc(size ? size : 1);
    fill_bin(bin, size, id);
    struct store_record r = {bin, size, "build ok", 5000000 + (uint64_t)id, ENTRY_ORIGIN_SOURCE,
                             "pthread-test-device", NULL};
    int rc = store_put(s, entry_xxh3_128(key, kl), key, kl, &r);
    free(bin);
    return rc;
}

static inline void check_binary(const struct store_record *r, int id, size_t size)
{
    assert_int_equal(r->binary_size, size);
    unsigned char *want = malloc(size ? size : 1);
    fill_bin(want, size, id);
    assert_memory_equal(r->binary, want, size);
    free(want);
}

static inline int get_key(store *s, int id)
{
    char key[128];
    size_t kl = make_key(id, key);
    struct store_record r;
    void *arena;
    int rc = store_get(s, entry_xxh3_128(key, kl), key, kl, &r, &arena);
    store_record_free(arena);
    return rc;
}

/* The stored size of an uncompressed entry made by put_key. */
static inline uint64_t record_size(int id, size_t size)
{
    char key[128];
    return ENTRY_HEADER_SIZE + make_key(id, key) + strlen("pthread-test-device") + strlen("build ok") + size;
}

struct entry_probe {
    uint64_t hits, last_access, created, stored;
    int found, want;
};
static inline int probe_fn(const struct store_entry_info *e, void *ctx)
{
    struct entry_probe *p = ctx;
    if (key_id_of(e->key, e->key_len) != p->want) return 0;
    p->hits = e->hits, p->last_access = e->last_access, p->created = e->created;
    p->stored = e->stored_size, p->found = 1;
    return 1;
}
static inline struct entry_probe probe(store *s, int id)
{
    struct entry_probe p = {.want = id};
    assert_int_equal(store_foreach(s, probe_fn, &p), CLSHIM_OK);
    assert_true(p.found);
    return p;
}

/* ---- raw LMDB edits (the store must be closed) ---- */

static inline void raw_begin(const char *dir, MDB_env **env, MDB_txn **txn)
{
    assert_int_equal(mdb_env_create(env), 0);
    mdb_env_set_maxdbs(*env, 8);
    assert_int_equal(mdb_env_open(*env, dir, 0, 0600), 0);
    assert_int_equal(mdb_txn_begin(*env, NULL, 0, txn), 0);
}

static inline void raw_end(MDB_env *env, MDB_txn *txn)
{
    assert_int_equal(mdb_txn_commit(txn), 0);
    mdb_env_close(env);
}

static inline void hash_key(struct cache_hash h, unsigned char k[16])
{
    for (int i = 0; i < 8; i++) k[i] = (unsigned char)(h.hi >> (56 - 8 * i));
    for (int i = 0; i < 8; i++) k[8 + i] = (unsigned char)(h.lo >> (56 - 8 * i));
}

/* XORs one byte of the stored value at `at` (negative: from the end). */
static inline void raw_xor(const char *dir, struct cache_hash h, long at, unsigned char mask)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    raw_begin(dir, &env, &txn);
    assert_int_equal(mdb_dbi_open(txn, "entries", 0, &dbi), 0);
    unsigned char k16[16];
    hash_key(h, k16);
    MDB_val k = {16, k16}, v;
    assert_int_equal(mdb_get(txn, dbi, &k, &v), 0);
    unsigned char *copy = malloc(v.mv_size);
    memcpy(copy, v.mv_data, v.mv_size);
    size_t i = at >= 0 ? (size_t)at : v.mv_size - (size_t)-at;
    copy[i] ^= mask;
    MDB_val nv = {v.mv_size, copy};
    assert_int_equal(mdb_put(txn, dbi, &k, &nv, 0), 0);
    free(copy);
    raw_end(env, txn);
}

/* Flips one bit of the stored value at `at` (negative: from the end). */
static inline void raw_flip(const char *dir, struct cache_hash h, long at) { raw_xor(dir, h, at, 0x10); }

/* Adds an LRU index record that points at no entry. */
static inline void raw_add_stray_atime(const char *dir)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    raw_begin(dir, &env, &txn);
    assert_int_equal(mdb_dbi_open(txn, "atime", 0, &dbi), 0);
    unsigned char ak[24] = {0, 0, 0, 0, 0x10, 0x20, 0x30, 0x40, 0xAB};
    MDB_val k = {sizeof ak, ak}, v = {0, NULL};
    assert_int_equal(mdb_put(txn, dbi, &k, &v, 0), 0);
    raw_end(env, txn);
}

static inline uint64_t file_size(const char *dir, const char *name)
{
    char path[4300];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

/* ---- child processes (each opens its own handle; LMDB handles never
 * cross fork) ---- */

/* A child claims h (or, with want, marks another's claim of it waited for:
 * store_want_build) and exits without releasing; returns its result. */
static inline int child_claim_or_want(struct fixture *fx, struct cache_hash h, uint64_t stale_ms, int want)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct store_options o = default_options(fx, 3);
        store *s;
        if (store_open(&o, &s) != CLSHIM_OK) _exit(100);
        int rc = want ? store_want_build(s, h) : store_claim_build(s, h, stale_ms);
        _exit(rc == CLSHIM_OK ? 0 : rc == CLSHIM_EBUSY ? 1 : 2);
    }
    int status;
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) <= 1);
    return WEXITSTATUS(status) == 0 ? CLSHIM_OK : CLSHIM_EBUSY;
}
static inline int child_claim(struct fixture *fx, struct cache_hash h, uint64_t stale_ms, int unused)
{
    (void)unused;
    return child_claim_or_want(fx, h, stale_ms, 0);
}
static inline int child_want(struct fixture *fx, struct cache_hash h) { return child_claim_or_want(fx, h, 0, 1); }

/* A child opens the cache (claiming h unless NULL), signals, and waits
 * until the returned fd is closed. */
static inline int child_hold(struct fixture *fx, const struct cache_hash *h, pid_t *pid_out)
{
    int ready[2], release[2];
    assert_int_equal(pipe(ready), 0);
    assert_int_equal(pipe(release), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(ready[0]);
        close(release[1]);
        struct store_options o = default_options(fx, 3);
        store *s;
        if (store_open(&o, &s) != CLSHIM_OK) _exit(100);
        if (h && store_claim_build(s, *h, 60000) != CLSHIM_OK) _exit(101);
        char c = 1;
        if (write(ready[1], &c, 1) != 1) _exit(102);
        while (read(release[0], &c, 1) > 0) {}
        store_close(s);
        _exit(0);
    }
    close(ready[1]);
    close(release[0]);
    char c;
    assert_int_equal(read(ready[0], &c, 1), 1);
    close(ready[0]);
    *pid_out = pid;
    return release[1];
}
static inline int child_claim_and_wait(struct fixture *fx, struct cache_hash h, pid_t *pid)
{
    return child_hold(fx, &h, pid);
}
static inline int child_open_and_wait(struct fixture *fx, pid_t *pid) { return child_hold(fx, NULL, pid); }

/* ---- threads ---- */

struct thread_arg {
    store *s;
    int base, ops, errors;
};

static inline void *thread_main(void *p)
{
    struct thread_arg *a = p;
    for (int i = 0; i < a->ops; i++) {
        int id = a->base + i % 20;
        if (i % 3 == 0) {
            if (put_key(a->s, id, 500 + (size_t)(i % 7) * 300) != CLSHIM_OK) a->errors++;
        } else {
            int rc = get_key(a->s, id);
            if (rc != CLSHIM_OK && rc != CLSHIM_ENOTFOUND) a->errors++;
        }
        if (i % 50 == 0 && store_flush(a->s) != CLSHIM_OK) a->errors++;
    }
    return NULL;
}

static inline int run_threads(store *s, int n, int ops)
{
    pthread_t t[16];
    struct thread_arg a[16];
    for (int i = 0; i < n; i++) {
        a[i] = (struct thread_arg){s, i * 10, ops, 0}; /* overlapping key ranges */
        pthread_create(&t[i], NULL, thread_main, &a[i]);
    }
    int errors = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(t[i], NULL);
        errors += a[i].errors;
    }
    return errors;
}

#endif
