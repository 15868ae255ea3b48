/* store.c — the persistent cache on LMDB: open and its safety checks,
 * transactions, lookups, stores, eviction, hit batching, claims, statistics.
 * store_admin.c has the whole-cache operations (verify, compact, export).
 *
 * Invariants (store.h lists them; store_check_invariants() checks them):
 * every function that adds or removes an entry does it through
 * store_put_encoded() / store_del_entry(), which change the entry, its
 * "access" and "atime" records and the totals in one write transaction.
 */
#include "cache/store.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "cache/entry.h"
#include "cache/sign.h"
#include "cache/store_int.h"
#include "common/error.h"
#include "common/log.h"

#define WRITE_ATTEMPTS 64

static uint64_t (*test_clock)(void);

void store_set_clock_for_test(uint64_t (*now_s)(void)) { test_clock = now_s; }

uint64_t store_now(void) { return test_clock ? test_clock() : (uint64_t)time(NULL); }

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

uint64_t store_get64(const void *p)
{
    const unsigned char *b = p;
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | b[i];
    return v;
}

void store_put64(void *p, uint64_t v)
{
    unsigned char *b = p;
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
}

static void put_be64(unsigned char *b, uint64_t v)
{
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (56 - 8 * i));
}
static uint64_t get_be64(const unsigned char *b)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = v << 8 | b[i];
    return v;
}
uint64_t store_get_be64(const void *p) { return get_be64(p); }
void store_put_be64(void *p, uint64_t v) { put_be64(p, v); }

void store_hash_key(struct cache_hash h, unsigned char key[STORE_KEY_LEN])
{
    put_be64(key, h.hi);
    put_be64(key + 8, h.lo);
}

struct cache_hash store_key_hash(const unsigned char key[STORE_KEY_LEN])
{
    return (struct cache_hash){get_be64(key + 8), get_be64(key)};
}

int store_map_err(int rc)
{
    switch (rc) {
    case 0: return CLSHIM_OK;
    case MDB_NOTFOUND: return CLSHIM_ENOTFOUND;
    case MDB_MAP_FULL: return CLSHIM_EFULL;
    case ENOSPC: case EDQUOT: return CLSHIM_ENOSPC;
    case MDB_CORRUPTED: case MDB_PAGE_NOTFOUND: case MDB_INVALID: case MDB_VERSION_MISMATCH:
        return CLSHIM_ECORRUPT;
    case ENOMEM: return CLSHIM_ENOMEM;
    case EACCES: case EPERM: return CLSHIM_EPERM;
    case EROFS: return CLSHIM_EREADONLY;
    case MDB_READERS_FULL: case EBUSY: case EAGAIN: return CLSHIM_EBUSY;
    }
    if (rc <= CLSHIM_ENOTFOUND && rc >= CLSHIM_EUNTRUSTED) return rc; /* already ours */
    return CLSHIM_EIO;
}

/* ---- transactions and the map ---- */

static void adopt_mapsize(store *s)
{
    pthread_rwlock_wrlock(&s->maplock);
    mdb_env_set_mapsize(s->env, 0); /* take the size another process set */
    pthread_rwlock_unlock(&s->maplock);
}

/* Doubles the map; CLSHIM_EFULL at the cap. */
static int grow_map(store *s)
{
    int rc = CLSHIM_EFULL;
    pthread_rwlock_wrlock(&s->maplock);
    MDB_envinfo info;
    if (mdb_env_info(s->env, &info) == 0 && (uint64_t)info.me_mapsize < STORE_MAP_CAP) {
        uint64_t n = (uint64_t)info.me_mapsize * 2;
        if (n > STORE_MAP_CAP) n = STORE_MAP_CAP;
        if (mdb_env_set_mapsize(s->env, (size_t)n) == 0) {
            rc = CLSHIM_OK;
            log_msg(LOG_DEBUG, "cache map grown to %llu MiB", (unsigned long long)(n >> 20));
        }
    }
    pthread_rwlock_unlock(&s->maplock);
    return rc;
}

/* mdb_txn_begin for reading, guarded (it reads the meta pages): an LMDB
 * code, or CLSHIM_EIO when the map faulted. */
static int guarded_read_txn(store *s, MDB_txn **txn)
{
    struct store_guard g;
    store_guard_arm(&g);
    if (sigsetjmp(g.jb, 0)) return CLSHIM_EIO;
    int rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, txn);
    store_guard_disarm(&g);
    return rc;
}

int store_read_begin(store *s, MDB_txn **txn)
{
    if (__atomic_load_n(&s->faulted, __ATOMIC_RELAXED)) return CLSHIM_EIO;
    for (int i = 0; i < 4; i++) {
        pthread_rwlock_rdlock(&s->maplock);
        int rc = guarded_read_txn(s, txn);
        if (rc == 0) return CLSHIM_OK;
        pthread_rwlock_unlock(&s->maplock);
        if (rc == CLSHIM_EIO) { /* the meta pages are gone */
            store_fault_noted(s);
            return CLSHIM_EIO;
        }
        if (rc != MDB_MAP_RESIZED) return store_map_err(rc);
        adopt_mapsize(s);
    }
    return CLSHIM_EBUSY;
}

void store_read_end(store *s, MDB_txn *txn)
{
    mdb_txn_abort(txn);
    pthread_rwlock_unlock(&s->maplock);
}

/* After a fault inside a transaction: abort it (it holds the writer lock
 * or a reader slot, both in lock.mdb) under a guard of its own, and drop
 * maplock. A second fault leaves the transaction to mdb_env_close. */
static void abort_after_fault(store *s, MDB_txn *txn)
{
    if (txn) {
        struct store_guard g;
        store_guard_arm(&g);
        if (sigsetjmp(g.jb, 0) == 0) {
            mdb_txn_abort(txn);
            store_guard_disarm(&g);
        }
    }
    pthread_rwlock_unlock(&s->maplock);
    store_fault_noted(s);
}

void store_read_fault(store *s, MDB_txn *txn) { abort_after_fault(s, txn); }

static int evict_fn(store *s, MDB_txn *txn, void *ctx);

/* One write transaction: fn, then commit. An LMDB code, or
 * CLSHIM_EREADONLY when the map faulted: the handle is set aside, and from
 * then on refuses writes as a read-only one does (quietly: the fault has
 * had its one warning). */
static int write_once(store *s, int (*fn)(store *, MDB_txn *, void *), void *ctx)
{
    if (__atomic_load_n(&s->faulted, __ATOMIC_RELAXED)) return CLSHIM_EREADONLY;
    MDB_txn *txn, *volatile open_txn = NULL;
    pthread_rwlock_rdlock(&s->maplock);
    struct store_guard g;
    store_guard_arm(&g);
    if (sigsetjmp(g.jb, 0)) {
        abort_after_fault(s, open_txn);
        return CLSHIM_EREADONLY;
    }
    int rc = mdb_txn_begin(s->env, NULL, 0, &txn);
    if (rc == 0) {
        open_txn = txn;
        rc = fn(s, txn, ctx);
        if (rc == 0) rc = mdb_txn_commit(txn);
        else mdb_txn_abort(txn);
        open_txn = NULL;
    }
    store_guard_disarm(&g);
    pthread_rwlock_unlock(&s->maplock);
    return rc;
}

/* LMDB reports a short write as EIO: on a regular file that is a full file
 * system (or quota), which the user can act on, so say so. */
static int write_err(store *s, int rc)
{
    struct statvfs fs;
    if (rc == EIO && fstatvfs(s->dir_fd, &fs) == 0 && (uint64_t)fs.f_bavail * fs.f_frsize < (16u << 20))
        return CLSHIM_ENOSPC;
    return store_map_err(rc);
}

int store_write(store *s, int (*fn)(store *, MDB_txn *, void *), void *ctx)
{
    if (s->readonly) return CLSHIM_EREADONLY;
    int evicted_at_cap = 0;
    for (int attempt = 0; attempt < WRITE_ATTEMPTS; attempt++) {
        int rc = write_once(s, fn, ctx);
        if (rc == CLSHIM_EREADONLY) return rc;
        if (rc == MDB_MAP_RESIZED) {
            adopt_mapsize(s);
            continue;
        }
        if (rc != MDB_MAP_FULL) return write_err(s, rc);
        if (grow_map(s) == CLSHIM_OK) continue;
        /* At the cap: free a tenth by LRU once, then give up. */
        if (evicted_at_cap++ || fn == evict_fn) break;
        struct store_stats st;
        if (store_stats_get(s, &st) != CLSHIM_OK) break;
        uint64_t target[3] = {0, st.stored_bytes / 10 * 9, 0};
        if (store_write(s, evict_fn, target) != CLSHIM_OK) break;
    }
    LOG_ONCE(LOG_WARN, "cache %s is full (the map cannot grow); entries are not stored", s->dir);
    return CLSHIM_EFULL;
}

/* ---- meta ---- */

static int meta_get(store *s, MDB_txn *txn, const char *name, void *buf, size_t len)
{
    MDB_val k = {strlen(name), (void *)name}, v;
    memset(buf, 0, len);
    int rc = mdb_get(txn, s->db_meta, &k, &v);
    if (rc == 0) memcpy(buf, v.mv_data, v.mv_size < len ? v.mv_size : len);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

static int meta_put(store *s, MDB_txn *txn, const char *name, const void *buf, size_t len)
{
    MDB_val k = {strlen(name), (void *)name}, v = {len, (void *)buf};
    return mdb_put(txn, s->db_meta, &k, &v, 0);
}

int store_meta_get(store *s, MDB_txn *txn, const char *name, uint64_t *out, int n)
{
    unsigned char buf[8 * ST_COUNT];
    int rc = meta_get(s, txn, name, buf, 8 * (size_t)n);
    for (int i = 0; i < n; i++) out[i] = store_get64(buf + 8 * i);
    return rc;
}

int store_meta_put(store *s, MDB_txn *txn, const char *name, const uint64_t *in, int n)
{
    unsigned char buf[8 * ST_COUNT];
    for (int i = 0; i < n; i++) store_put64(buf + 8 * i, in[i]);
    return meta_put(s, txn, name, buf, 8 * (size_t)n);
}

int store_acct_load(store *s, MDB_txn *txn, struct store_acct *a)
{
    uint64_t t[3];
    int rc = store_meta_get(s, txn, "totals", t, 3);
    if (rc == 0) rc = store_meta_get(s, txn, "stats", a->stat, ST_COUNT);
    a->count = t[0], a->bytes = t[1], a->ubytes = t[2];
    return rc;
}

int store_acct_save(store *s, MDB_txn *txn, const struct store_acct *a)
{
    uint64_t t[3] = {a->count, a->bytes, a->ubytes};
    int rc = store_meta_put(s, txn, "totals", t, 3);
    return rc ? rc : store_meta_put(s, txn, "stats", a->stat, ST_COUNT);
}

/* ---- entries and their index records ---- */

static int index_put(store *s, MDB_txn *txn, const unsigned char *key, uint64_t atime, uint64_t hits,
                     uint64_t ubytes)
{
    unsigned char acc[STORE_ACCESS_LEN], ak[STORE_ATIME_KEY_LEN];
    store_put64(acc, atime);
    store_put64(acc + 8, hits);
    store_put64(acc + 16, ubytes);
    put_be64(ak, atime);
    memcpy(ak + 8, key, STORE_KEY_LEN);
    MDB_val k = {STORE_KEY_LEN, (void *)key}, v = {sizeof acc, acc};
    int rc = mdb_put(txn, s->db_access, &k, &v, 0);
    if (rc) return rc;
    MDB_val k2 = {sizeof ak, ak}, v2 = {0, NULL};
    return mdb_put(txn, s->db_atime, &k2, &v2, 0);
}

int store_del_entry(store *s, MDB_txn *txn, const unsigned char *key, struct store_acct *a)
{
    MDB_val k = {STORE_KEY_LEN, (void *)key}, v, acc;
    int rc = mdb_get(txn, s->db_entries, &k, &v);
    if (rc) return rc;
    uint64_t size = v.mv_size, ubytes = 0;
    rc = mdb_get(txn, s->db_access, &k, &acc);
    if (rc == 0 && acc.mv_size == STORE_ACCESS_LEN) {
        unsigned char ak[STORE_ATIME_KEY_LEN];
        put_be64(ak, store_get64(acc.mv_data));
        memcpy(ak + 8, key, STORE_KEY_LEN);
        ubytes = store_get64((const char *)acc.mv_data + 16);
        MDB_val k2 = {sizeof ak, ak};
        rc = mdb_del(txn, s->db_atime, &k2, NULL);
        if (rc && rc != MDB_NOTFOUND) return rc;
    }
    if (rc == 0 || rc == MDB_NOTFOUND) rc = mdb_del(txn, s->db_access, &k, NULL);
    if (rc && rc != MDB_NOTFOUND) return rc;
    if ((rc = mdb_del(txn, s->db_entries, &k, NULL)) != 0) return rc;
    a->count = a->count ? a->count - 1 : 0;
    a->bytes = a->bytes >= size ? a->bytes - size : 0;
    a->ubytes = a->ubytes >= ubytes ? a->ubytes - ubytes : 0;
    return 0;
}

/* Deletes entries along "atime", oldest first, while `more` says so.
 * `cutoff`: only entries last used before it (0: any); `target`: stop at
 * this many bytes (UINT64_MAX: no size goal); `skip`: never this key.
 * Each one evicted goes into the record of evicted keys, as `why`. */
static int evict_walk(store *s, MDB_txn *txn, struct store_acct *a, uint64_t cutoff, uint64_t target,
                      const unsigned char *skip, unsigned why, uint64_t *n)
{
    MDB_cursor *c;
    int rc = mdb_cursor_open(txn, s->db_atime, &c);
    if (rc) return rc;
    unsigned char from[STORE_ATIME_KEY_LEN];
    MDB_val k, v;
    MDB_cursor_op op = MDB_FIRST;
    while (target == UINT64_MAX || a->bytes > target) {
        rc = mdb_cursor_get(c, &k, &v, op);
        if (rc) break;
        if (k.mv_size != STORE_ATIME_KEY_LEN) { rc = MDB_CORRUPTED; break; }
        memcpy(from, k.mv_data, sizeof from);
        if (cutoff && get_be64(from) >= cutoff) break;
        if (skip && memcmp(from + 8, skip, STORE_KEY_LEN) == 0) {
            op = MDB_NEXT;
            continue;
        }
        uint64_t had = a->bytes;
        rc = store_del_entry(s, txn, from + 8, a);
        if (rc == 0) rc = store_evicted_note(s, txn, from + 8, had - a->bytes, why);
        else if (rc == MDB_NOTFOUND) rc = mdb_del(txn, s->db_atime, &k, NULL); /* orphan: drop it */
        if (rc) break;
        ++*n;
        k.mv_size = sizeof from, k.mv_data = from;
        op = MDB_SET_RANGE; /* the next record after the deleted one */
    }
    mdb_cursor_close(c);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

static int sweep_age(store *s, MDB_txn *txn, struct store_acct *a, uint64_t now)
{
    uint64_t n = 0, age = s->opt.max_age_days * 86400;
    int rc = 0;
    if (s->opt.max_age_days && now > age)
        rc = evict_walk(s, txn, a, now - age, UINT64_MAX, NULL, STORE_EVICTED_AGE, &n);
    a->stat[ST_EVICT_AGE] += n;
    if (rc == 0) {
        uint64_t t = now;
        rc = store_meta_put(s, txn, "sweep", &t, 1);
    }
    if (rc == 0 && n) log_msg(LOG_INFO, "cache: %llu entries unused for %llu days evicted",
                              (unsigned long long)n, (unsigned long long)s->opt.max_age_days);
    return rc;
}

static int sweep_due(store *s, uint64_t now)
{
    return s->opt.max_age_days && now >= __atomic_load_n(&s->next_sweep, __ATOMIC_RELAXED);
}

static void sweep_done(store *s, uint64_t now)
{
    __atomic_store_n(&s->next_sweep, now + STORE_SWEEP_INTERVAL_S, __ATOMIC_RELAXED);
}

static int sweep_fn(store *s, MDB_txn *txn, void *arg)
{
    (void)arg;
    struct store_acct a;
    int rc = store_acct_load(s, txn, &a);
    if (rc == 0) rc = sweep_age(s, txn, &a, store_now());
    return rc ? rc : store_acct_save(s, txn, &a);
}

struct put_ctx {
    const unsigned char *key;
    const void *rec;
    size_t len;
    uint64_t ubytes, atime, hits;
    int swept;
    int has_family; /* the key's family record takes the entry (store_miss.c) */
    struct store_family_ref family;
};

/* The size-limit warning: a limit below what one run stores evicts that
 * run's own entries, so no later run finds them (every run stays cold). */
static void thrash_message(store *s, uint64_t working_set, const char *when)
{
    log_msg(LOG_WARN, "cache %s: CLSHIM_CACHE_MAX_SIZE=%llu is below %s working set (%llu bytes stored): its "
                      "entries are evicted before a later run can use them, so every run compiles; raise "
                      "CLSHIM_CACHE_MAX_SIZE above %llu", s->dir, (unsigned long long)s->opt.max_size, when,
            (unsigned long long)working_set, (unsigned long long)working_set);
}

/* Whether the least recently used entry (key skip aside) was used since this
 * handle opened: evicting it evicts this run's own work. */
static int evicts_own(store *s, MDB_txn *txn, const unsigned char *skip)
{
    MDB_cursor *c;
    if (mdb_cursor_open(txn, s->db_atime, &c) != 0) return 0;
    MDB_val k, v;
    int own = 0;
    for (MDB_cursor_op op = MDB_FIRST; mdb_cursor_get(c, &k, &v, op) == 0; op = MDB_NEXT) {
        if (k.mv_size != STORE_ATIME_KEY_LEN) break;
        if (memcmp((unsigned char *)k.mv_data + 8, skip, STORE_KEY_LEN) == 0) continue;
        own = get_be64(k.mv_data) >= s->opened_at;
        break;
    }
    mdb_cursor_close(c);
    return own;
}

static int put_fn(store *s, MDB_txn *txn, void *arg)
{
    struct put_ctx *c = arg;
    struct store_acct a;
    uint64_t now = store_now();
    if (s->opt.trust && !s->opt.seal_key) {
        /* A process that trusts some keys and seals nothing keeps what it
         * found, whoever wrote it: it may be another reader's trusted entry
         * (`clshim cache verify --trust` is for removing). */
        MDB_val k = {STORE_KEY_LEN, (void *)c->key}, v;
        if (mdb_get(txn, s->db_entries, &k, &v) == 0) return CLSHIM_EUNTRUSTED;
    }
    int rc = store_acct_load(s, txn, &a);
    c->swept = 0;
    if (rc == 0 && sweep_due(s, now)) {
        rc = sweep_age(s, txn, &a, now);
        c->swept = 1;
    }
    if (rc == 0) rc = store_del_entry(s, txn, c->key, &a);
    if (rc == MDB_NOTFOUND) rc = 0;
    if (rc == 0) rc = store_evicted_forget(s, txn, c->key); /* stored again: no longer evicted */
    if (rc) return rc;
    MDB_val k = {STORE_KEY_LEN, (void *)c->key}, v = {c->len, NULL};
    if ((rc = mdb_put(txn, s->db_entries, &k, &v, MDB_RESERVE)) != 0) return rc;
    memcpy(v.mv_data, c->rec, c->len);
    if ((rc = index_put(s, txn, c->key, c->atime, c->hits, c->ubytes)) != 0) return rc;
    if (c->has_family && (rc = store_family_add(s, txn, &c->family, c->key)) != 0) return rc;
    a.count++, a.bytes += c->len, a.ubytes += c->ubytes;
    if (s->opt.max_size && a.bytes > s->opt.max_size) {
        uint64_t n = 0, target = s->opt.max_size / 100 * STORE_LOW_WATER_PCT;
        /* Only when this handle alone stored more than the limit: other
         * processes filling a shared cache evict this run's entries too,
         * and that is no limit below this run's working set. */
        if (!s->thrash_warned && s->put_bytes + c->len > s->opt.max_size && evicts_own(s, txn, c->key)) {
            /* Kept for the next run's open, which warns where this one's
             * line may not be seen (the capture helper's). */
            uint64_t t[2] = {s->put_bytes + c->len, s->opt.max_size};
            if ((rc = store_meta_put(s, txn, "thrash", t, 2)) != 0) return rc;
            s->thrash_warned = 1;
            thrash_message(s, t[0], "this run's");
        }
        rc = evict_walk(s, txn, &a, 0, target, c->key, STORE_EVICTED_SIZE, &n);
        a.stat[ST_EVICT_SIZE] += n;
        if (rc) return rc;
    }
    return store_acct_save(s, txn, &a);
}

static int thrash_quiet;
void store_quiet_open_warnings(void) { thrash_quiet = 1; }

void store_warn_thrash(store *s)
{
    if (thrash_quiet || !s->have_dbs || !s->opt.max_size) return;
    MDB_txn *txn;
    uint64_t t[2] = {0, 0};
    if (store_read_begin(s, &txn) != CLSHIM_OK) return;
    int rc = store_meta_get(s, txn, "thrash", t, 2);
    store_read_end(s, txn);
    /* Only while the limit is the one that was too small (or smaller). */
    if (rc == 0 && t[0] && s->opt.max_size <= t[1] && s->opt.max_size < t[0]) {
        s->thrash_warned = 1;
        thrash_message(s, t[0], "a run's");
    }
}

int store_put_encoded(store *s, struct cache_hash hash, const void *rec, size_t len, uint64_t ubytes,
                      uint64_t atime, uint64_t hits)
{
    if (s->opt.max_size && len > s->opt.max_size) return CLSHIM_ETOOBIG;
    unsigned char key[STORE_KEY_LEN];
    store_hash_key(hash, key);
    struct put_ctx c = {key, rec, len, ubytes, atime, hits, 0, 0, {{0, 0}, 0}};
    c.has_family = store_family_of(rec, len, &c.family);
    int rc = store_write(s, put_fn, &c);
    if (rc == CLSHIM_OK) __atomic_add_fetch(&s->put_bytes, len, __ATOMIC_RELAXED);
    if (rc == CLSHIM_OK && c.swept) sweep_done(s, store_now());
    return rc;
}

int store_put(store *s, struct cache_hash hash, const void *key, size_t key_len,
              const struct store_record *rec)
{
    if (!s || !rec || (!key && key_len) || (!rec->binary && rec->binary_size)) return CLSHIM_EINVAL;
    if (store_is_readonly(s)) return CLSHIM_EREADONLY;
    if (rec->binary_size < s->opt.min_entry || (s->opt.max_entry && rec->binary_size > s->opt.max_entry) ||
        rec->binary_size > ENTRY_MAX_BINARY)
        return CLSHIM_ETOOBIG;
    uint64_t now = store_now();
    void *buf;
    size_t len;
    /* Sealed where it was built: a copy from elsewhere keeps its own seal
     * or none (sealing it here would vouch for what another machine built). */
    struct store_record sealed;
    struct store_source here = {.kind = STORE_SOURCE_HERE};
    if (s->opt.seal_key && !rec->source) {
        sealed = *rec;
        sign_seal(key, key_len, rec, s->opt.seal_key, &here);
        sealed.source = &here;
        rec = &sealed;
    }
    int rc = entry_encode_record(hash, key, key_len, rec, s->opt.compress_level, now, &buf, &len);
    if (rc) return rc;
    rc = store_put_encoded(s, hash, buf, len, rec->binary_size, now, 0);
    free(buf);
    return rc;
}

/* ---- lookups and the hit queue ---- */

static size_t slot_of(struct cache_hash h) { return (size_t)(h.lo ^ (h.hi >> 7)) & (2 * STORE_QUEUE_MAX - 1); }

/* Queues a hit; returns 1 when the queue is due for a flush. */
static int queue_hit(store *s, struct cache_hash h, uint64_t now)
{
    pthread_mutex_lock(&s->qlock);
    int full = 0;
    if (s->queue) {
        size_t i = slot_of(h);
        while (s->queue[i].used && (s->queue[i].hash.lo != h.lo || s->queue[i].hash.hi != h.hi))
            i = (i + 1) & (2 * STORE_QUEUE_MAX - 1);
        if (!s->queue[i].used) {
            s->queue[i] = (struct store_hit){h, now, 0, 1};
            s->qcount++;
        }
        s->queue[i].atime = now;
        s->queue[i].hits++;
        full = s->qcount >= STORE_QUEUE_MAX;
    }
    pthread_mutex_unlock(&s->qlock);
    return full;
}

static void count_bad(store *s, int rc)
{
    if (s->readonly) return;
    pthread_mutex_lock(&s->qlock);
    if (rc == CLSHIM_ECOLLISION) s->q_collisions++;
    else s->q_corrupt++;
    pthread_mutex_unlock(&s->qlock);
}

int store_get(store *s, struct cache_hash hash, const void *key, size_t key_len,
              struct store_record *out, void **arena)
{
    if (arena) *arena = NULL;
    if (!s || !out || !arena || (!key && key_len)) return CLSHIM_EINVAL;
    memset(out, 0, sizeof *out);
    if (!s->have_dbs) return CLSHIM_ENOTFOUND;
    MDB_txn *txn;
    int rc = store_read_begin(s, &txn);
    if (rc) return rc;
    struct store_guard g;
    store_guard_arm(&g);
    if (sigsetjmp(g.jb, 0)) { /* a page of the entry or the tree is past the end of data.mdb */
        store_record_free(*arena);
        *arena = NULL;
        memset(out, 0, sizeof *out);
        abort_after_fault(s, txn);
        return CLSHIM_EIO;
    }
    unsigned char k16[STORE_KEY_LEN];
    store_hash_key(hash, k16);
    MDB_val k = {sizeof k16, k16}, v;
    rc = mdb_get(txn, s->db_entries, &k, &v);
    if (rc) {
        store_guard_disarm(&g);
        store_read_end(s, txn);
        return store_map_err(rc);
    }
    /* *arena owns the copy from its malloc on, so a fault part way frees it */
    rc = entry_open_record(v.mv_data, v.mv_size, hash, key, key_len, out, arena);
    store_guard_disarm(&g);
    store_read_end(s, txn);
    if (rc != CLSHIM_OK) {
        if (rc == CLSHIM_ECOLLISION || rc == CLSHIM_ECORRUPT) {
            count_bad(s, rc);
            log_msg(LOG_INFO, "cache: entry %016llx: %s", (unsigned long long)hash.hi, clshim_strerror(rc));
        }
        return rc;
    }
    const char *why = s->opt.trust ? sign_check_seal(key, key_len, out, s->opt.trust) : NULL;
    if (why) { /* served to nobody, deleted by nobody: `clshim cache verify --trust` lists it */
        log_msg(LOG_DEBUG, "cache: entry %016llx not used: %s", (unsigned long long)hash.hi, why);
        store_record_free(*arena);
        *arena = NULL;
        memset(out, 0, sizeof *out);
        return CLSHIM_EUNTRUSTED;
    }
    if (!s->readonly && queue_hit(s, hash, store_now())) store_flush(s);
    return CLSHIM_OK;
}

void store_record_free(void *arena) { free(arena); }

struct flush_ctx {
    struct store_hit *hits;
    size_t n;
    uint64_t collisions, corrupt;
};

static int flush_fn(store *s, MDB_txn *txn, void *arg)
{
    struct flush_ctx *c = arg;
    struct store_acct a;
    int rc = store_acct_load(s, txn, &a);
    for (size_t i = 0; rc == 0 && i < c->n; i++) {
        unsigned char key[STORE_KEY_LEN];
        store_hash_key(c->hits[i].hash, key);
        MDB_val k = {STORE_KEY_LEN, key}, acc;
        if (mdb_get(txn, s->db_access, &k, &acc) != 0 || acc.mv_size != STORE_ACCESS_LEN) continue;
        uint64_t old = store_get64(acc.mv_data), hits = store_get64((char *)acc.mv_data + 8);
        uint64_t ub = store_get64((char *)acc.mv_data + 16), t = old;
        if (c->hits[i].atime >= old + STORE_ATIME_GRANULARITY_S) {
            unsigned char ak[STORE_ATIME_KEY_LEN];
            put_be64(ak, old);
            memcpy(ak + 8, key, STORE_KEY_LEN);
            MDB_val k2 = {sizeof ak, ak};
            rc = mdb_del(txn, s->db_atime, &k2, NULL);
            if (rc == MDB_NOTFOUND) rc = 0;
            t = c->hits[i].atime;
        }
        if (rc == 0) rc = index_put(s, txn, key, t, hits + c->hits[i].hits, ub);
    }
    a.stat[ST_COLLISIONS] += c->collisions;
    a.stat[ST_CORRUPT] += c->corrupt;
    return rc ? rc : store_acct_save(s, txn, &a);
}

int store_flush(store *s)
{
    if (!s || s->readonly) return CLSHIM_OK;
    struct flush_ctx c = {0};
    pthread_mutex_lock(&s->qlock);
    if (s->qcount) {
        c.hits = malloc(s->qcount * sizeof *c.hits);
        for (size_t i = 0; c.hits && i < 2 * STORE_QUEUE_MAX; i++)
            if (s->queue[i].used) c.hits[c.n++] = s->queue[i];
        memset(s->queue, 0, 2 * STORE_QUEUE_MAX * sizeof *s->queue);
        s->qcount = 0;
    }
    c.collisions = s->q_collisions, c.corrupt = s->q_corrupt;
    s->q_collisions = s->q_corrupt = 0;
    pthread_mutex_unlock(&s->qlock);
    int rc = CLSHIM_OK;
    if (c.n || c.collisions || c.corrupt) rc = store_write(s, flush_fn, &c);
    free(c.hits);
    return rc; /* access times are advisory: a failed batch is dropped */
}

/* ---- delete, evict, clear ---- */

static int delete_fn(store *s, MDB_txn *txn, void *arg)
{
    struct store_acct a;
    int rc = store_acct_load(s, txn, &a);
    if (rc == 0) rc = store_del_entry(s, txn, arg, &a);
    return rc ? rc : store_acct_save(s, txn, &a);
}

int store_delete(store *s, struct cache_hash hash)
{
    if (!s) return CLSHIM_EINVAL;
    if (s->readonly) return CLSHIM_EREADONLY;
    unsigned char key[STORE_KEY_LEN];
    store_hash_key(hash, key);
    return store_write(s, delete_fn, key);
}

/* ctx: {older_than_s, to_size, out: evicted} */
static int evict_fn(store *s, MDB_txn *txn, void *ctx)
{
    uint64_t *arg = ctx, now = store_now(), n = 0;
    struct store_acct a;
    int rc = store_acct_load(s, txn, &a);
    if (rc == 0 && arg[0] && now > arg[0]) {
        rc = evict_walk(s, txn, &a, now - arg[0], UINT64_MAX, NULL, STORE_EVICTED_AGE, &n);
        a.stat[ST_EVICT_AGE] += n;
        arg[2] = n;
    }
    if (rc == 0 && arg[1] != UINT64_MAX) {
        n = 0;
        rc = evict_walk(s, txn, &a, 0, arg[1], NULL, STORE_EVICTED_SIZE, &n);
        a.stat[ST_EVICT_SIZE] += n;
        arg[2] += n;
    }
    return rc ? rc : store_acct_save(s, txn, &a);
}

int store_evict(store *s, uint64_t older_than_s, uint64_t to_size, uint64_t *evicted)
{
    if (evicted) *evicted = 0;
    if (!s) return CLSHIM_EINVAL;
    if (s->readonly) return CLSHIM_EREADONLY;
    uint64_t arg[3] = {older_than_s, to_size, 0};
    int rc = store_write(s, evict_fn, arg);
    if (rc == CLSHIM_OK && evicted) *evicted = arg[2];
    return rc;
}

static int clear_fn(store *s, MDB_txn *txn, void *ctx)
{
    (void)ctx;
    struct store_acct a;
    int rc = store_acct_load(s, txn, &a);
    if (rc == 0) rc = mdb_drop(txn, s->db_entries, 0);
    if (rc == 0) rc = mdb_drop(txn, s->db_access, 0);
    if (rc == 0) rc = mdb_drop(txn, s->db_atime, 0);
    if (rc == 0) rc = store_evicted_drop(s, txn); /* what was evicted before says nothing now */
    a.count = a.bytes = a.ubytes = 0;
    return rc ? rc : store_acct_save(s, txn, &a);
}

int store_clear(store *s)
{
    if (!s) return CLSHIM_EINVAL;
    if (s->readonly) return CLSHIM_EREADONLY;
    pthread_mutex_lock(&s->qlock); /* queued hits are for entries now gone */
    if (s->queue) memset(s->queue, 0, 2 * STORE_QUEUE_MAX * sizeof *s->queue);
    s->qcount = 0;
    pthread_mutex_unlock(&s->qlock);
    return store_write(s, clear_fn, NULL);
}

/* ---- entries that load slower than they compile ---- */

static void slow_load_name(struct cache_hash hash, char name[48])
{
    snprintf(name, 48, "slow-load %016llx%016llx", (unsigned long long)hash.hi, (unsigned long long)hash.lo);
}

struct slow_load { char name[48]; uint64_t v[2]; };

static int slow_load_put_fn(store *s, MDB_txn *txn, void *arg)
{
    struct slow_load *sl = arg;
    return store_meta_put(s, txn, sl->name, sl->v, 2);
}

int store_note_slow_load(store *s, struct cache_hash hash, uint64_t load_ns, uint64_t compile_ns)
{
    if (!s) return CLSHIM_EINVAL;
    if (s->readonly) return CLSHIM_EREADONLY;
    struct slow_load sl = {.v = {load_ns, compile_ns}};
    slow_load_name(hash, sl.name);
    return store_write(s, slow_load_put_fn, &sl);
}

int store_slow_load(store *s, struct cache_hash hash, uint64_t *load_ns, uint64_t *compile_ns)
{
    if (!s) return CLSHIM_EINVAL;
    if (!s->have_dbs) return CLSHIM_ENOTFOUND;
    char name[48];
    slow_load_name(hash, name);
    MDB_txn *txn;
    int rc = store_read_begin(s, &txn);
    if (rc) return rc;
    uint64_t v[2];
    struct store_guard g; /* the map may be cut short under us (store_guard.c) */
    store_guard_arm(&g);
    if (sigsetjmp(g.jb, 0)) {
        abort_after_fault(s, txn);
        return CLSHIM_EIO;
    }
    rc = meta_get(s, txn, name, v, sizeof v);
    store_guard_disarm(&g);
    store_read_end(s, txn);
    if (rc) return store_map_err(rc);
    *load_ns = store_get64((const char *)v);
    *compile_ns = store_get64((const char *)v + 8);
    return *load_ns ? CLSHIM_OK : CLSHIM_ENOTFOUND;
}

int store_was_evicted(store *s, struct cache_hash hash, struct store_evicted *out)
{
    if (!s || !out) return CLSHIM_EINVAL;
    memset(out, 0, sizeof *out);
    if (!s->have_dbs || !s->have_evicted) return CLSHIM_ENOTFOUND;
    unsigned char key[STORE_KEY_LEN];
    store_hash_key(hash, key);
    MDB_txn *txn;
    int rc = store_read_begin(s, &txn);
    if (rc) return rc;
    struct store_guard g; /* the map may be cut short under us (store_guard.c) */
    store_guard_arm(&g);
    if (sigsetjmp(g.jb, 0)) {
        abort_after_fault(s, txn);
        return CLSHIM_EIO;
    }
    rc = store_evicted_get(s, txn, key, out);
    store_guard_disarm(&g);
    store_read_end(s, txn);
    return store_map_err(rc);
}

/* ---- statistics ---- */

const char *capture_lost_name(enum capture_lost why)
{
    static const char *const names[CAPTURE_LOST_COUNT] = {
        [CAPTURE_LOST_INPUTS] = "inputs_changed", [CAPTURE_LOST_BUILD] = "build_failed",
        [CAPTURE_LOST_READ] = "binary_unreadable", [CAPTURE_LOST_DEVICE] = "no_device",
        [CAPTURE_LOST_BUDGET] = "helper_budget", [CAPTURE_LOST_EXIT] = "exit_budget",
        [CAPTURE_LOST_STORE] = "store_failed", [CAPTURE_LOST_REQUEST] = "bad_request",
        [CAPTURE_LOST_COST] = "over_cost"};
    return (unsigned)why < CAPTURE_LOST_COUNT ? names[why] : "?";
}

static int stats_add_fn(store *s, MDB_txn *txn, void *arg)
{
    const struct store_stats *d = arg;
    struct store_acct a;
    int rc = store_acct_load(s, txn, &a);
    const uint64_t add[ST_COUNT] = {d->hits, d->misses, d->stores, d->evictions_size, d->evictions_age,
                                    d->rejected, d->collisions, d->corrupt, d->compile_ns_saved,
                                    d->uncacheable, d->remote_hits, d->remote_misses, d->remote_errors,
                                    d->remote_corrupt, d->remote_pushes, d->uncacheable_headers,
                                    d->uncacheable_time_macros, d->captures_handed, d->captures_stored};
    for (int i = 0; i < ST_CAPTURE_LOST; i++) a.stat[i] += add[i];
    for (int i = 0; i < CAPTURE_LOST_COUNT; i++) a.stat[ST_CAPTURE_LOST + i] += d->capture_lost[i];
    const uint64_t remote[] = {d->remote_timeouts, d->remote_lost, d->remote_garbage, d->remote_oversize,
                               d->remote_refused, d->remote_untrusted, d->remote_distrusted};
    for (size_t i = 0; i < sizeof remote / sizeof *remote; i++) a.stat[ST_REMOTE_TIMEOUTS + i] += remote[i];
    a.stat[ST_MISSES_EVICTED] += d->misses_evicted;
    a.stat[ST_MISSES_EVICTED_AGE] += d->misses_evicted_age;
    a.stat[ST_DISK_HITS] += d->disk_hits;
    a.stat[ST_MEMORY_HITS] += d->memory_hits;
    a.stat[ST_REMOTE_PUSHES_REFUSED] += d->remote_pushes_refused;
    a.stat[ST_UNTRUSTED] += d->untrusted;
    if (d->evicted_keep_limit > a.stat[ST_EVICTED_KEEP_LIMIT]) a.stat[ST_EVICTED_KEEP_LIMIT] = d->evicted_keep_limit;
    return rc ? rc : store_acct_save(s, txn, &a);
}

int store_stats_add(store *s, const struct store_stats *delta)
{
    if (!s || !delta) return CLSHIM_EINVAL;
    if (s->readonly) return CLSHIM_EREADONLY;
    return store_write(s, stats_add_fn, (void *)delta);
}

static int stats_zero_fn(store *s, MDB_txn *txn, void *arg)
{
    (void)arg;
    struct store_acct a;
    int rc = store_acct_load(s, txn, &a);
    memset(a.stat, 0, sizeof a.stat);
    return rc ? rc : store_acct_save(s, txn, &a);
}

int store_stats_zero(store *s)
{
    if (!s) return CLSHIM_EINVAL;
    if (s->readonly) return CLSHIM_EREADONLY;
    pthread_mutex_lock(&s->qlock);
    s->q_collisions = s->q_corrupt = 0;
    pthread_mutex_unlock(&s->qlock);
    return store_write(s, stats_zero_fn, NULL);
}

int store_stats_get(store *s, struct store_stats *out)
{
    if (!s || !out) return CLSHIM_EINVAL;
    memset(out, 0, sizeof *out);
    out->max_size = s->opt.max_size;
    if (!s->have_dbs) return CLSHIM_OK;
    MDB_txn *txn;
    int rc = store_read_begin(s, &txn);
    if (rc) return rc;
    struct store_acct a;
    struct store_guard g;
    store_guard_arm(&g);
    if (sigsetjmp(g.jb, 0)) {
        abort_after_fault(s, txn);
        return CLSHIM_EIO;
    }
    rc = store_acct_load(s, txn, &a);
    store_guard_disarm(&g);
    store_read_end(s, txn);
    if (rc) return store_map_err(rc);
    *out = (struct store_stats){.hits = a.stat[ST_HITS], .misses = a.stat[ST_MISSES],
                                .stores = a.stat[ST_STORES], .evictions_size = a.stat[ST_EVICT_SIZE],
                                .evictions_age = a.stat[ST_EVICT_AGE], .rejected = a.stat[ST_REJECTED],
                                .collisions = a.stat[ST_COLLISIONS], .corrupt = a.stat[ST_CORRUPT],
                                .compile_ns_saved = a.stat[ST_SAVED],
                                .uncacheable = a.stat[ST_UNCACHEABLE],
                                .uncacheable_headers = a.stat[ST_UNCACHEABLE_HEADERS],
                                .uncacheable_time_macros = a.stat[ST_UNCACHEABLE_TIME], .remote_hits = a.stat[ST_REMOTE_HITS],
                                .remote_misses = a.stat[ST_REMOTE_MISSES],
                                .remote_errors = a.stat[ST_REMOTE_ERRORS],
                                .remote_corrupt = a.stat[ST_REMOTE_CORRUPT],
                                .remote_pushes = a.stat[ST_REMOTE_PUSHES], .entries = a.count,
                                .stored_bytes = a.bytes, .uncompressed_bytes = a.ubytes,
                                .max_size = s->opt.max_size,
                                .captures_handed = a.stat[ST_CAPTURES_HANDED],
                                .captures_stored = a.stat[ST_CAPTURES_STORED]};
    for (int i = 0; i < CAPTURE_LOST_COUNT; i++) out->capture_lost[i] = a.stat[ST_CAPTURE_LOST + i];
    out->remote_timeouts = a.stat[ST_REMOTE_TIMEOUTS], out->remote_lost = a.stat[ST_REMOTE_LOST];
    out->remote_garbage = a.stat[ST_REMOTE_GARBAGE], out->remote_oversize = a.stat[ST_REMOTE_OVERSIZE];
    out->remote_refused = a.stat[ST_REMOTE_REFUSED], out->remote_untrusted = a.stat[ST_REMOTE_UNTRUSTED];
    out->remote_distrusted = a.stat[ST_REMOTE_DISTRUSTED];
    out->misses_evicted = a.stat[ST_MISSES_EVICTED], out->misses_evicted_age = a.stat[ST_MISSES_EVICTED_AGE];
    out->evicted_keep_limit = a.stat[ST_EVICTED_KEEP_LIMIT];
    out->disk_hits = a.stat[ST_DISK_HITS];
    out->memory_hits = a.stat[ST_MEMORY_HITS];
    out->remote_pushes_refused = a.stat[ST_REMOTE_PUSHES_REFUSED];
    out->untrusted = a.stat[ST_UNTRUSTED];
    return CLSHIM_OK;
}

/* ---- build claims ---- */

#define CLAIM_LEN (8 + 8 + 36) /* pid, start ms, boot id */
#define CLAIM_WANTED_LEN (CLAIM_LEN + 8) /* and when a process first waited for it (store_want_build) */

static int claim_live(store *s, const MDB_val *v, uint64_t stale_ms)
{
    if (v->mv_size != CLAIM_LEN && v->mv_size != CLAIM_WANTED_LEN) return 0;
    const unsigned char *p = v->mv_data;
    uint64_t pid = store_get64(p), start = store_get64(p + 8), now = now_ms();
    if (memcmp(p + 16, s->boot_id, 36) != 0) return 0; /* rebooted since: pids mean nothing */
    if (pid == 0 || pid > INT32_MAX || (pid_t)pid == getpid()) return 0;
    if (now >= start && now - start >= stale_ms) return 0;
    return kill((pid_t)pid, 0) == 0 || errno == EPERM;
}

struct claim_ctx {
    const unsigned char *key;
    uint64_t stale_ms;
    int release;
    uint64_t from_pid; /* a live claim of this process is taken over (0: none) */
};

static int claim_fn(store *s, MDB_txn *txn, void *arg)
{
    struct claim_ctx *c = arg;
    MDB_val k = {STORE_KEY_LEN, (void *)c->key}, v;
    int rc = mdb_get(txn, s->db_building, &k, &v);
    if (rc && rc != MDB_NOTFOUND) return rc;
    if (c->release) {
        if (rc == 0 && v.mv_size >= CLAIM_LEN && store_get64(v.mv_data) == (uint64_t)getpid())
            return mdb_del(txn, s->db_building, &k, NULL);
        return 0;
    }
    int taken = rc == 0 && c->from_pid && v.mv_size >= CLAIM_LEN && store_get64(v.mv_data) == c->from_pid;
    if (rc == 0 && claim_live(s, &v, c->stale_ms) && !taken) return CLSHIM_EBUSY;
    /* A claim taken over keeps its waited-for mark: the waiter marked the
     * application's claim, and now waits for the helper's. */
    unsigned char buf[CLAIM_WANTED_LEN];
    store_put64(buf, (uint64_t)getpid());
    store_put64(buf + 8, now_ms());
    memcpy(buf + 16, s->boot_id, 36);
    int keep_mark = taken && v.mv_size == CLAIM_WANTED_LEN;
    if (keep_mark) memcpy(buf + CLAIM_LEN, (const unsigned char *)v.mv_data + CLAIM_LEN, 8);
    MDB_val nv = {keep_mark ? CLAIM_WANTED_LEN : CLAIM_LEN, buf};
    return mdb_put(txn, s->db_building, &k, &nv, 0);
}

int store_claim_build(store *s, struct cache_hash hash, uint64_t stale_ms)
{
    if (!s) return CLSHIM_EINVAL;
    if (s->readonly) return CLSHIM_OK;
    unsigned char key[STORE_KEY_LEN];
    store_hash_key(hash, key);
    struct claim_ctx c = {key, stale_ms, 0, 0};
    return store_write(s, claim_fn, &c);
}

int store_take_claim(store *s, struct cache_hash hash, pid_t from, uint64_t stale_ms)
{
    if (!s) return CLSHIM_EINVAL;
    if (s->readonly) return CLSHIM_OK;
    unsigned char key[STORE_KEY_LEN];
    store_hash_key(hash, key);
    struct claim_ctx c = {key, stale_ms, 0, from > 0 ? (uint64_t)from : 0};
    return store_write(s, claim_fn, &c);
}

/* Marks a live claim of another process as waited for; the mark goes with
 * the claim (a new claim is written without it). */
static int want_fn(store *s, MDB_txn *txn, void *arg)
{
    MDB_val k = {STORE_KEY_LEN, arg}, v;
    int rc = mdb_get(txn, s->db_building, &k, &v);
    if (rc) return rc == MDB_NOTFOUND ? 0 : rc;
    if (v.mv_size != CLAIM_LEN || !claim_live(s, &v, UINT64_MAX)) return 0; /* marked already, or nobody's */
    unsigned char buf[CLAIM_WANTED_LEN];
    memcpy(buf, v.mv_data, CLAIM_LEN);
    store_put64(buf + CLAIM_LEN, now_ms());
    MDB_val nv = {sizeof buf, buf};
    return mdb_put(txn, s->db_building, &k, &nv, 0);
}

int store_want_build(store *s, struct cache_hash hash)
{
    if (!s) return CLSHIM_EINVAL;
    if (s->readonly) return CLSHIM_OK;
    unsigned char key[STORE_KEY_LEN];
    store_hash_key(hash, key);
    return store_write(s, want_fn, key);
}

int store_build_wanted(store *s, struct cache_hash hash)
{
    if (!s || !s->have_dbs) return 0;
    unsigned char key[STORE_KEY_LEN];
    store_hash_key(hash, key);
    MDB_txn *txn;
    if (store_read_begin(s, &txn)) return 0;
    struct store_guard g; /* the map may be cut short under us (store_guard.c) */
    store_guard_arm(&g);
    if (sigsetjmp(g.jb, 0)) {
        abort_after_fault(s, txn);
        return 0;
    }
    MDB_val k = {STORE_KEY_LEN, key}, v;
    int wanted = mdb_get(txn, s->db_building, &k, &v) == 0 && v.mv_size == CLAIM_WANTED_LEN &&
                 store_get64(v.mv_data) == (uint64_t)getpid();
    store_guard_disarm(&g);
    store_read_end(s, txn);
    return wanted;
}

int store_release_build(store *s, struct cache_hash hash)
{
    if (!s) return CLSHIM_EINVAL;
    if (s->readonly) return CLSHIM_OK;
    unsigned char key[STORE_KEY_LEN];
    store_hash_key(hash, key);
    struct claim_ctx c = {key, 0, 1, 0};
    return store_write(s, claim_fn, &c);
}

/* The age sweep store_open runs when the last one is a day old. */
void store_sweep_if_due(store *s)
{
    uint64_t now = store_now();
    if (!s->readonly && sweep_due(s, now) && store_write(s, sweep_fn, NULL) == CLSHIM_OK) sweep_done(s, now);
}
