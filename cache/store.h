/* store.h — the persistent cache: one LMDB environment per cache directory.
 *
 * Design. One LMDB environment (data.mdb, lock.mdb) in the cache directory is
 * shared by every process and thread of the user. Named databases:
 *   "entries"  16-byte key hash -> entry value (entry.h's format: header,
 *              full key material, build log, zstd-compressed binary)
 *   "atime"    8-byte big-endian last-access time + 16-byte hash -> nothing:
 *              the LRU index, so eviction walks oldest first without a scan
 *   "meta"     totals (entry count, stored bytes), statistics counters,
 *              the time of the last age sweep, the format version
 *   "building" 16-byte hash -> {pid, start time, host boot id}: a process
 *              compiling that key right now (single-flight across processes)
 * Size accounting lives in "meta" and changes in the same write transaction
 * as the entries, so it never drifts. Readers never block writers (LMDB MVCC);
 * write transactions are short (one store, one batch of access times).
 *
 * Invariants (checked by store_check_invariants() in tests and `verify`):
 *  1. every entry has exactly one atime-index record and vice versa;
 *  2. meta's total bytes == sum of the stored value sizes, meta's count ==
 *     the number of entries;
 *  3. after a store with a size limit, total bytes <= the limit.
 *
 * Thread safety: a store handle may be used by many threads at once.
 * Errors: functions return CLSHIM_OK or a clshim_err (common/error.h).
 */
#ifndef CLSHIM_STORE_H
#define CLSHIM_STORE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct store store;

/* A 128-bit key hash (XXH3-128 of the key material). */
struct cache_hash {
    uint64_t lo, hi;
};

struct store_options {
    const char *dir;        /* cache directory; created 0700 if missing */
    uint64_t max_size;      /* stored bytes limit; 0 = unlimited */
    uint64_t max_age_days;  /* 0 = no age eviction */
    uint64_t min_entry;     /* binaries below this are not stored */
    uint64_t max_entry;     /* binaries above this are not stored; 0 = no limit */
    int readonly;           /* open read-only; every write returns CLSHIM_EREADONLY */
    int allow_shared;       /* read a directory owned by others / group-writable (then read-only) */
    int compress_level;     /* zstd level; 0 = store uncompressed */
};

/* Opens (creating if needed) the cache. Refuses with CLSHIM_EPERM when the
 * directory or its files are owned by another user or writable by group or
 * others (unless allow_shared), or when data.mdb/lock.mdb are symlinks.
 * A database file that is not a valid LMDB environment is renamed aside
 * (data.mdb.corrupt-<time>) and recreated, with one warning. Runs the age
 * sweep when the last one is more than a day old. */
int store_open(const struct store_options *opt, store **out);

/* Flushes pending access times and statistics, then closes. NULL is a no-op. */
void store_close(store *s);

/* What a build produced, as stored and returned. */
struct store_record {
    const void *binary;       /* the device binary (uncompressed) */
    size_t binary_size;
    const char *build_log;    /* NUL-terminated; may be "" */
    uint64_t compile_ns;      /* what the compile took: the time a hit saves */
    uint32_t origin;          /* caller-defined kind (source, IL, link, ...) */
    const char *device_name;  /* for `clshim cache list`; NUL-terminated */
};

/* Looks up `hash`; returns CLSHIM_OK only when the stored key material equals
 * key[0..key_len) byte for byte and the binary's checksum verifies.
 * CLSHIM_ENOTFOUND: absent. CLSHIM_ECOLLISION: same hash, other material
 * (counted). CLSHIM_ECORRUPT: fails verification (counted; the caller may
 * store a fresh entry over it). On success *out points into `arena`, which
 * the caller frees with store_record_free(). The access time update is
 * queued, not written (at most once per entry per minute; flushed by
 * store_flush() or store_close()). */
int store_get(store *s, struct cache_hash hash, const void *key, size_t key_len,
              struct store_record *out, void **arena);
void store_record_free(void *arena);

/* Stores (or replaces) the entry for `hash`. Compresses, checks the entry
 * size limits (CLSHIM_ETOOBIG), evicts least recently used entries down to
 * 90 % of max_size when the new total would exceed it, grows the map when
 * LMDB reports it full. CLSHIM_EREADONLY on a read-only cache. */
int store_put(store *s, struct cache_hash hash, const void *key, size_t key_len,
              const struct store_record *rec);

/* Removes one entry (CLSHIM_ENOTFOUND if absent). */
int store_delete(store *s, struct cache_hash hash);

/* Cross-process single flight. store_claim_build() records this process as
 * the builder of `hash` and returns CLSHIM_OK, or returns CLSHIM_EBUSY when a
 * live process (same boot, pid alive, claimed less than `stale_ms` ago)
 * holds the claim. A dead or stale claim is taken over. store_release_build()
 * removes this process's claim. Both are no-ops returning CLSHIM_OK on a
 * read-only cache. */
int store_claim_build(store *s, struct cache_hash hash, uint64_t stale_ms);
int store_release_build(store *s, struct cache_hash hash);

/* Statistics, kept in "meta". Callers accumulate a delta per process and
 * add it with store_stats_add() (one write transaction). */
struct store_stats {
    uint64_t hits, misses, stores, evictions_size, evictions_age;
    uint64_t rejected;        /* binaries the driver refused */
    uint64_t collisions, corrupt;
    uint64_t compile_ns_saved;
    /* read-only figures filled by store_stats_get(): */
    uint64_t entries, stored_bytes, uncompressed_bytes, max_size;
};
int store_stats_add(store *s, const struct store_stats *delta);
int store_stats_get(store *s, struct store_stats *out);
int store_stats_zero(store *s);

/* Writes queued access times (one transaction). */
int store_flush(store *s);

/* One entry as `clshim cache list/show` sees it. */
struct store_entry_info {
    struct cache_hash hash;
    uint64_t stored_size, binary_size;
    uint64_t created, last_access; /* seconds since the epoch */
    uint64_t hits;
    uint32_t origin;
    const char *device_name;
    const void *key; size_t key_len; /* the full key material */
};
/* Calls fn for every entry (read transaction); stops when fn returns nonzero. */
int store_foreach(store *s, int (*fn)(const struct store_entry_info *, void *), void *ctx);

/* Evicts entries unused for `older_than_days` (0: skip) and then least
 * recently used ones until the total is <= `to_size` (UINT64_MAX: skip).
 * *evicted (may be NULL) receives the count. */
int store_evict(store *s, uint64_t older_than_days, uint64_t to_size, uint64_t *evicted);
int store_clear(store *s);

/* Checks every entry (decode, key hash, checksum) and the invariants;
 * with fix, deletes bad entries. *bad receives how many were bad. */
int store_verify(store *s, int fix, uint64_t *checked, uint64_t *bad);

/* Rewrites the environment compacted (mdb_env_copy2 with MDB_CP_COMPACT to a
 * temp file, then rename), safe while other processes use the cache. */
int store_compact(store *s);

/* Writes every entry to `out` in a portable, versioned format; import reads
 * it, verifies every entry (key hash and checksum) and stores the good ones. */
int store_export(store *s, FILE *out, uint64_t *count);
int store_import(store *s, FILE *in, uint64_t *count, uint64_t *rejected);

/* 1 when invariants 1-2 hold (for assert() in tests), else 0. */
int store_check_invariants(store *s);

#endif
