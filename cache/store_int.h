/* store_int.h — what store.c and store_admin.c share. Not a public
 * interface: other modules use store.h only. */
#ifndef CLSHIM_STORE_INT_H
#define CLSHIM_STORE_INT_H

#include <lmdb.h>
#include <pthread.h>
#include <setjmp.h>

#include "cache/store.h"

#define STORE_FORMAT_VERSION 1
#define STORE_KEY_LEN 16
#define STORE_ATIME_KEY_LEN (8 + STORE_KEY_LEN)
#define STORE_ACCESS_LEN 24 /* last access, hits, uncompressed size */
#define STORE_MAP_CAP ((uint64_t)64 << 30)

/* One queued hit: store_get() fills, store_flush() writes. */
struct store_hit {
    struct cache_hash hash;
    uint64_t atime, hits;
    int used;
};

struct store {
    MDB_env *env;
    MDB_dbi db_entries, db_atime, db_meta, db_building, db_access;
    MDB_dbi db_evicted, db_evicted_order; /* the record of evicted keys (store_evicted.c) */
    int have_dbs;  /* 0: a read-only open of an environment we never wrote */
    int have_evicted; /* 0: a read-only open of a cache older than the record */
    int readonly;
    int nolock;    /* opened with MDB_NOLOCK (read-only, lock.mdb unwritable) */
    struct store_options opt;
    unsigned char seal_key[64]; /* opt.seal_key's copy (opt.seal_key points here) */
    char *dir;     /* as given: for messages only, never opened by name */
    int dir_fd;    /* the checked directory; every file is opened relative to it */
    char env_path[32]; /* "/proc/self/fd/<dir_fd>": what LMDB opens, so the
                        * directory is never resolved by name again */
    int lock_fd;   /* compact.lock, shared flock held; -1 when none */
    /* Every transaction holds maplock shared; resizing or replacing the map
     * (mdb_env_set_mapsize, compaction) needs it exclusive, because LMDB
     * forbids both while this process has a transaction open. */
    pthread_rwlock_t maplock;
    pthread_mutex_t qlock; /* guards the hit queue and the queued counters */
    struct store_hit *queue; /* 2 * STORE_QUEUE_MAX slots, open addressing */
    size_t qcount;
    uint64_t q_collisions, q_corrupt;
    uint64_t next_sweep; /* no age sweep before this time (seconds) */
    int faulted;   /* the map faulted (data.mdb shrank): every call fails with CLSHIM_EIO */
    char boot_id[36];
    uint64_t opened_at; /* store_now() at open: entries used since belong to this run */
    uint64_t put_bytes; /* stored bytes this handle put: the run's working set, near enough */
    int thrash_warned;  /* the size-limit warning (limit_thrashes) given */
};

/* At open: warns once when the meta record "thrash" says a run with the
 * current size limit evicted its own entries (store.c). */
void store_warn_thrash(store *s);

/* Totals and counters of "meta", loaded into a write transaction, changed,
 * and saved in it, so they move with the entries. */
enum { ST_HITS, ST_MISSES, ST_STORES, ST_EVICT_SIZE, ST_EVICT_AGE, ST_REJECTED, ST_COLLISIONS,
       ST_CORRUPT, ST_SAVED, ST_UNCACHEABLE, ST_REMOTE_HITS, ST_REMOTE_MISSES, ST_REMOTE_ERRORS,
       ST_REMOTE_CORRUPT, ST_REMOTE_PUSHES, ST_UNCACHEABLE_HEADERS, ST_UNCACHEABLE_TIME, ST_CAPTURES_HANDED,
       ST_CAPTURES_STORED, ST_CAPTURE_LOST,
       /* capture_lost reasons get a fixed range, so one appended there
        * never moves the counters after it */
       ST_CAPTURE_LOST_SLOTS = 16,
       ST_REMOTE_TIMEOUTS = ST_CAPTURE_LOST + ST_CAPTURE_LOST_SLOTS, ST_REMOTE_LOST, ST_REMOTE_GARBAGE,
       ST_REMOTE_OVERSIZE, ST_REMOTE_REFUSED, ST_REMOTE_UNTRUSTED, ST_REMOTE_DISTRUSTED,
       ST_MISSES_EVICTED, ST_MISSES_EVICTED_AGE, ST_EVICTED_KEEP_LIMIT /* a maximum, not a sum */,
       /* ST_HITS split by where the binary came from. Backward compatible:
        * a record written before them is shorter and reads 0 here, so its
        * hits (and those an older clshim adds) are in ST_HITS only, which
        * `cache stats` shows as not split, never as disk hits. */
       ST_DISK_HITS, ST_MEMORY_HITS,
       ST_REMOTE_PUSHES_REFUSED,
       ST_UNTRUSTED,
       ST_COUNT }; /* append only: older caches read 0 */
_Static_assert((int)CAPTURE_LOST_COUNT <= (int)ST_CAPTURE_LOST_SLOTS, "capture_lost outgrew its counter range");
struct store_acct {
    uint64_t count, bytes, ubytes;
    uint64_t stat[ST_COUNT];
};

/* Guarded map access (store_guard.c): a SIGBUS raised while a guard is
 * armed in this thread jumps back to it (sigsetjmp(g.jb, 0) right after
 * store_guard_arm(&g)) instead of killing the process. Guards nest. */
struct store_guard {
    sigjmp_buf jb;
    struct store_guard *prev;
};
void store_guard_install(void); /* once per process; store_open calls it */
void store_guard_arm(struct store_guard *g);
void store_guard_disarm(struct store_guard *g);
/* Marks the handle faulted and logs one warning (once per handle). */
void store_fault_noted(store *s);

uint64_t store_now(void);
void store_hash_key(struct cache_hash h, unsigned char key[STORE_KEY_LEN]);
struct cache_hash store_key_hash(const unsigned char key[STORE_KEY_LEN]);
uint64_t store_get64(const void *p);
void store_put64(void *p, uint64_t v);
uint64_t store_get_be64(const void *p); /* big-endian: index keys that sort by number */
void store_put_be64(void *p, uint64_t v);

/* Maps an LMDB or errno code to a clshim_err; clshim codes pass through. */
int store_map_err(int rc);

/* A read transaction with maplock held shared; store_read_end releases both. */
int store_read_begin(store *s, MDB_txn **txn);
void store_read_end(store *s, MDB_txn *txn);
/* Runs fn in a write transaction and commits when it returns 0; retries on
 * MDB_MAP_RESIZED, grows the map (or evicts at the cap) on MDB_MAP_FULL.
 * Returns a clshim_err. */
int store_write(store *s, int (*fn)(store *, MDB_txn *, void *), void *ctx);

/* n little-endian u64s of a "meta" record (missing: zeros). */
int store_meta_get(store *s, MDB_txn *txn, const char *name, uint64_t *out, int n);
int store_meta_put(store *s, MDB_txn *txn, const char *name, const uint64_t *in, int n);
void store_sweep_if_due(store *s);

int store_acct_load(store *s, MDB_txn *txn, struct store_acct *a);
int store_acct_save(store *s, MDB_txn *txn, const struct store_acct *a);

/* Deletes the entry under key with its index records and accounting.
 * MDB_NOTFOUND when absent. */
int store_del_entry(store *s, MDB_txn *txn, const unsigned char *key, struct store_acct *a);

/* The record of evicted keys (store.h, "Evicted keys"; store_evicted.c),
 * changed in the write transaction that evicts, stores or clears.
 * store_evicted_open() opens its databases in open_dbs()'s transaction
 * (creating them unless read-only; an older cache read-only goes without).
 * store_evicted_note(): `key` was evicted, `size` stored bytes, `why` an
 * enum store_evicted_why. store_evicted_forget(): `key` is stored again.
 * store_evicted_drop(): every record gone. store_evicted_consistent():
 * invariant 4 (1 when it holds). LMDB codes. */
int store_evicted_open(store *s, MDB_txn *txn);
int store_evicted_note(store *s, MDB_txn *txn, const unsigned char *key, uint64_t size, unsigned why);
int store_evicted_forget(store *s, MDB_txn *txn, const unsigned char *key);
int store_evicted_drop(store *s, MDB_txn *txn);
int store_evicted_consistent(store *s, MDB_txn *txn);
/* key's record as store_was_evicted() returns it; MDB_NOTFOUND when none. */
int store_evicted_get(store *s, MDB_txn *txn, const unsigned char *key, struct store_evicted *out);

/* Stores an encoded record (already verified or just built) with its
 * access state, evicting for size. */
int store_put_encoded(store *s, struct cache_hash hash, const void *rec, size_t len, uint64_t ubytes,
                      uint64_t atime, uint64_t hits);

/* store_miss.c: whether an encoded record's key has a family (store.h,
 * "Explaining a miss") and where its input field starts, and the family
 * record's update, in put_fn's transaction. */
struct store_family_ref {
    struct cache_hash family;
    uint32_t input_at;
};
int store_family_of(const void *rec, size_t len, struct store_family_ref *ref);
int store_family_add(store *s, MDB_txn *txn, const struct store_family_ref *ref, const unsigned char key[STORE_KEY_LEN]);

/* After a fault inside a read transaction of store_read_begin(): aborts it
 * (guarded), drops maplock, sets the handle aside (store.c). */
void store_read_fault(store *s, MDB_txn *txn);

/* Opens the environment and its databases into s (used again after
 * compaction). */
int store_env_open(store *s);
void store_env_close(store *s);

#endif
