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
 *   "access"   16-byte hash -> {last access, hits, uncompressed size}: the
 *              live, mutable part of an entry, kept apart so that a hit
 *              rewrites 24 bytes rather than the whole binary (LMDB copies
 *              a value on any change)
 *   "evicted", "evicted-order"  the record of evicted keys (below)
 * Hash keys are the canonical XXH128 bytes (hi then lo, big-endian), so the
 * hex of a key is the hash as key_hash_hex() prints it. Times are seconds.
 *
 * Eviction. When a store takes the total past max_size, the least recently
 * used entries are deleted, oldest first along "atime", down to
 * STORE_LOW_WATER_PCT % of max_size, in the same write transaction (cost:
 * O(evicted * log n), never a scan). Entries unused for max_age_days are
 * deleted by the age sweep, which runs at most once per STORE_SWEEP_INTERVAL_S
 * (its time is kept in "meta"), at open or at a store.
 *
 * Access times. A hit queues (hash, now, +1 hit) in memory; store_flush()
 * or store_close() writes the queue in one transaction, moving an entry in
 * "atime" at most once per STORE_ATIME_GRANULARITY_S. The queue flushes
 * itself when it holds STORE_QUEUE_MAX hashes.
 *
 * Evicted keys. Every eviction (size, age, by hand) also notes the key's
 * hash, the entry's stored size and why in two more databases, "evicted"
 * (16-byte hash -> seq, size, evicted bytes so far, why) and
 * "evicted-order" (8-byte big-endian seq -> hash), in the same
 * transaction: the last STORE_EVICTED_MAX evictions, the oldest dropped
 * first. Storing a key again takes it out; store_clear() empties it.
 * store_was_evicted() tells a caller whose lookup missed whether that key
 * was evicted, and which size limit would have kept it (see there).
 *
 * Statistics. The store counts what only it sees: evictions_size and
 * evictions_age (in the transaction that does them), collisions and corrupt
 * (found by store_get, queued and written by store_flush). Callers count
 * hits, misses (misses_evicted among them), stores, rejected, uncacheable
 * and compile_ns_saved and add them with store_stats_add(); they must not
 * add the store's own counters again.
 *
 * Files and safety. The directory is opened by walking its path from "/"
 * one component at a time by descriptor (openat with O_NOFOLLOW), each
 * directory on the way owned by root or us and writable by no one else
 * unless sticky; symbolic links on the way are followed by hand, only when
 * owned by root or us. Every file is then opened relative to the directory
 * descriptor, and LMDB opens the environment through /proc/self/fd/N, so
 * no path is resolved twice. The directory must be ours and not writable by
 * group or others; data.mdb and lock.mdb must be regular files we own,
 * never symlinks (store_open). Every open handle holds a shared flock on "compact.lock";
 * store_compact() needs it exclusive (see there). The map starts at
 * max(256 MiB, 2 * max_size + 64 MiB), at most 64 GiB (the file is sparse),
 * and doubles when LMDB reports it full.
 *
 * Faults in the map. If data.mdb shrinks while mapped (truncated by someone
 * else), touching a page past its end raises SIGBUS. Every operation that
 * reads the map does so under a guard (store_guard.c: a SIGBUS handler
 * chained to the application's, scoped to clshim's own accesses by a
 * thread-local guard), so the fault is caught: the handle is set aside with
 * one warning, lookups return CLSHIM_EIO and writes CLSHIM_EREADONLY from
 * then on, and the next store_open moves the short file aside (unless all
 * it lacks are free pages: LMDB never writes a page that the transaction
 * which allocated it freed again, so a whole file may end before its last
 * page number).
 *
 * Read-only (opt->readonly, or a shared directory): nothing is created or
 * written except the reader slot in lock.mdb; when lock.mdb cannot be
 * written the environment is opened without locking (MDB_NOLOCK).
 * Size accounting lives in "meta" and changes in the same write transaction
 * as the entries, so it never drifts. Readers never block writers (LMDB MVCC);
 * write transactions are short (one store, one batch of access times).
 *
 * Invariants (checked by store_check_invariants() in tests and `verify`):
 *  1. every entry has exactly one atime-index record and vice versa (and
 *     exactly one "access" record, whose time is the atime record's);
 *  2. meta's total bytes == sum of the stored value sizes, meta's count ==
 *     the number of entries;
 *  3. after a store with a size limit, total bytes <= the limit;
 *  4. every "evicted" record has exactly one "evicted-order" record and
 *     vice versa, at most STORE_EVICTED_MAX of them, and no key is both
 *     stored and in the record.
 *
 * Thread safety: a store handle may be used by many threads at once.
 * Errors: functions return CLSHIM_OK or a clshim_err (common/error.h).
 */
#ifndef CLSHIM_STORE_H
#define CLSHIM_STORE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <stdio.h>

typedef struct store store;

/* Eviction for size stops at this percentage of max_size. */
#define STORE_LOW_WATER_PCT 90
/* The age sweep runs at most this often (seconds). */
#define STORE_SWEEP_INTERVAL_S 86400
/* An entry moves in the LRU index at most this often (seconds). */
#define STORE_ATIME_GRANULARITY_S 60
/* Queued access updates that trigger a flush from store_get(). */
#define STORE_QUEUE_MAX 1024
/* Evicted keys remembered ("Evicted keys" above): about 1 MiB of records. */
#define STORE_EVICTED_MAX 8192

/* A 128-bit key hash (XXH3-128 of the key material). */
struct cache_hash {
    uint64_t lo, hi;
};

struct sign_trust;
struct store_options {
    const char *dir;        /* cache directory; created 0700 if missing */
    uint64_t max_size;      /* stored bytes limit; 0 = unlimited */
    uint64_t max_age_days;  /* 0 = no age eviction */
    uint64_t min_entry;     /* binaries below this are not stored */
    uint64_t max_entry;     /* binaries above this are not stored; 0 = no limit */
    int readonly;           /* open read-only; every write returns CLSHIM_EREADONLY */
    int allow_shared;       /* read a directory owned by others / group-writable (then read-only) */
    int compress_level;     /* zstd level; 0 = store uncompressed */
    /* CLSHIM_SIGN_KEY: an ed25519 secret key (64 bytes, copied at open)
     * that seals every entry built here that store_put() writes; NULL: none. */
    const unsigned char *seal_key;
    /* CLSHIM_TRUST: store_get() serves only entries sealed by one of these
     * keys (CLSHIM_EUNTRUSTED otherwise); NULL: any. Must outlive the store. */
    const struct sign_trust *trust;
};

/* A run whose stores evict its own entries (CLSHIM_CACHE_MAX_SIZE below its
 * working set) is warned once, and the next open of the cache warns again
 * while the limit stays that small (a meta record "thrash"). The capture
 * helper calls store_quiet_open_warnings(): the application's own open has
 * given that warning. */
void store_quiet_open_warnings(void);

/* Opens (creating if needed) the cache. Refuses with CLSHIM_EPERM when the
 * directory or its files are owned by another user or writable by group or
 * others (unless allow_shared), when a directory on the way to it is owned
 * by another user than root or us or writable by others and not sticky
 * (even with allow_shared), or when data.mdb/lock.mdb are symlinks. Logs
 * one warning saying which.
 * A database file that is not a valid LMDB environment is renamed aside
 * (data.mdb.corrupt-<time>) and recreated, with one warning. Runs the age
 * sweep when the last one is more than a day old. */
int store_open(const struct store_options *opt, store **out);
/* More errors of store_open: CLSHIM_ENOTFOUND when read-only and no cache
 * exists; CLSHIM_EBUSY when a compaction holds the cache for more than a few
 * seconds; CLSHIM_ECORRUPT when read-only and data.mdb is not valid;
 * CLSHIM_EUNSUPPORTED for a cache written by a newer format; CLSHIM_EIO,
 * CLSHIM_ENOMEM. A writable open of a directory we may not write falls back
 * to read-only with one warning. */

/* 1 when the handle is read-only (asked for, or fallen back to, or set
 * aside after a fault: see "Faults in the map" above). */
int store_is_readonly(const store *s);

/* Flushes pending access times and statistics, then closes. NULL is a no-op. */
void store_close(store *s);

/* Where an entry came from when this machine did not build it (its
 * provenance, entry.h): kept with the entry, shown by `clshim cache
 * list/show`, and checked against CLSHIM_REMOTE_TRUST at every lookup.
 * And its seal (cache/sign.h, CLSHIM_SIGN_KEY): the builder's signature of
 * what the entry serves, which travels with it (to the remote tier, into
 * a reader's copy, through export) and is checked against CLSHIM_TRUST at
 * every lookup. An entry built here and sealed has a source of kind
 * STORE_SOURCE_HERE that holds only the seal. */
#define STORE_SOURCE_HERE 0u        /* built here (or by the sealer): only a seal */
#define STORE_SOURCE_REMOTE 1u      /* copied from the remote tier */
#define STORE_SOURCE_SIGNED 0x1u    /* flags: signer holds the key that signed the remote value */
#define STORE_SOURCE_SEALED 0x2u    /* flags: seal_signer and seal hold the entry's seal */
#define STORE_SOURCE_WHERE_MAX 255  /* bytes of `where`, without the NUL */
struct store_source {
    uint32_t kind;                  /* STORE_SOURCE_HERE or STORE_SOURCE_REMOTE */
    uint32_t flags;                 /* STORE_SOURCE_SIGNED, STORE_SOURCE_SEALED */
    unsigned char signer[32];       /* the remote value's ed25519 public key (when signed) */
    unsigned char seal_signer[32];  /* who sealed the entry (when sealed) */
    unsigned char seal[64];         /* the seal: ed25519 of sign_seal_digest() */
    char where[STORE_SOURCE_WHERE_MAX + 1]; /* the server and namespace, as logs name them ("" when here) */
};

/* What a build produced, as stored and returned. */
struct store_record {
    const void *binary;       /* the device binary (uncompressed) */
    size_t binary_size;
    const char *build_log;    /* NUL-terminated; may be "" */
    uint64_t compile_ns;      /* what the compile took: the time a hit saves */
    uint32_t origin;          /* caller-defined kind (source, IL, link, ...) */
    const char *device_name;  /* for `clshim cache list`; NUL-terminated */
    const struct store_source *source; /* NULL: built here; else where it came from */
};

/* Looks up `hash`; returns CLSHIM_OK only when the stored key material equals
 * key[0..key_len) byte for byte and the binary's binding to that key
 * material verifies (entry.h). CLSHIM_ENOTFOUND: absent, or an entry of an
 * older format (never trusted; the next store replaces it). CLSHIM_ECOLLISION: same hash, other material
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
/* store_claim_build() that also takes over a live claim of process `from`:
 * the capture helper takes the application's claim of a key it captures,
 * so processes wait for the capture, not for the application; a waited-for
 * mark on the application's claim stays. */
int store_take_claim(store *s, struct cache_hash hash, pid_t from, uint64_t stale_ms);
/* Demand for a claimed key: a process that waits for another's claim says
 * so at each look (store_want_build(); a no-op when the claim is gone or
 * marked),
 * and the holder asks store_build_wanted(): 1 when its own claim of `hash`
 * has been waited for. The capture helper captures such keys first and at
 * normal priority, so a run started right after a cold one hits however
 * busy the machine is. */
int store_want_build(store *s, struct cache_hash hash);
int store_build_wanted(store *s, struct cache_hash hash);

/* Entries that load slower than they compile (a hit must never cost more
 * than the compile it replaces): store_note_slow_load() records, for a key,
 * the CPU time its first hit took and the compile's; store_slow_load()
 * returns CLSHIM_OK with both when recorded (the caller then lets the
 * driver compile), CLSHIM_ENOTFOUND when not. Kept in "meta" under the key,
 * so a record outlives its entry (the same key loads as slowly again). */
int store_note_slow_load(store *s, struct cache_hash hash, uint64_t load_ns, uint64_t compile_ns);
int store_slow_load(store *s, struct cache_hash hash, uint64_t *load_ns, uint64_t *compile_ns);

/* Statistics, kept in "meta". Callers accumulate a delta per process and
 * add it with store_stats_add() (one write transaction). */
/* Why a late capture (a binary stored after its build: PoCL's, by the
 * capture helper or in the application) was not made. Append only. */
enum capture_lost {
    CAPTURE_LOST_INPUTS,  /* a file the key names changed before or during the capture's build */
    CAPTURE_LOST_BUILD,   /* the helper's build failed */
    CAPTURE_LOST_READ,    /* the binary could not be read */
    CAPTURE_LOST_DEVICE,  /* the helper found no device of that identity */
    CAPTURE_LOST_BUDGET,  /* CLSHIM_CAPTURE_HELPER_BUDGET spent after the application exited */
    CAPTURE_LOST_EXIT,    /* CLSHIM_CAPTURE_EXIT_BUDGET spent (captures in the application) */
    CAPTURE_LOST_STORE,   /* the store refused it (full disk, too big, read-only) */
    CAPTURE_LOST_REQUEST, /* a request the helper could not read */
    CAPTURE_LOST_COST,    /* it would have cost more CPU than twice the application's build */
    CAPTURE_LOST_COUNT
};
/* A short name of each ("inputs_changed", ...), for stats and JSON. */
const char *capture_lost_name(enum capture_lost why);

struct store_stats {
    uint64_t hits, misses, stores, evictions_size, evictions_age;
    uint64_t rejected;        /* binaries the driver refused */
    uint64_t collisions, corrupt;
    uint64_t compile_ns_saved;
    uint64_t uncacheable;     /* programs not cached (the total), of which: */
    uint64_t uncacheable_headers, uncacheable_time_macros; /* headers no route could list; __DATE__ & co. */
    /* the remote tier (cache/remote.h), counted by its caller: lookups it
     * answered, lookups it did not, failed or timed-out commands, values
     * that failed verification (ignored), values pushed */
    uint64_t remote_hits, remote_misses, remote_errors, remote_corrupt, remote_pushes;
    /* late captures: handed to the capture helper, stored late (by the
     * helper or in the application), and not made, by reason */
    uint64_t captures_handed, captures_stored;
    uint64_t capture_lost[CAPTURE_LOST_COUNT];
    /* remote failures by kind (remote_errors is their sum; cache/remote.h
     * says what each is), values ignored as untrusted, and local copies of
     * remote values dropped because their signer is no longer trusted */
    uint64_t remote_timeouts, remote_lost, remote_garbage, remote_oversize, remote_refused;
    uint64_t remote_untrusted, remote_distrusted;
    /* misses of evicted keys (store_was_evicted(), counted by the caller
     * with its misses), of which evicted for age; and the largest
     * keep_limit of those evicted otherwise: the size limit that would
     * have kept them all (a maximum: store_stats_add() keeps the larger) */
    uint64_t misses_evicted, misses_evicted_age, evicted_keep_limit;
    /* hits by where the binary came from: the store's entries (each of
     * these is one hit on the entry: `cache list`'s DISK HITS) and the
     * process's memory tier (cache/memtier.h); the remote tier's are
     * remote_hits. Counted by the caller with its hits; a store's older
     * record did not split them: its hits are in hits only. */
    uint64_t disk_hits, memory_hits;
    uint64_t remote_pushes_refused; /* pushes the server answered with an error (refused counts them too) */
    uint64_t untrusted;       /* entries not served: not sealed by a key in CLSHIM_TRUST */
    /* read-only figures filled by store_stats_get(): */
    uint64_t entries, stored_bytes, uncompressed_bytes, max_size;
};
int store_stats_add(store *s, const struct store_stats *delta);
int store_stats_get(store *s, struct store_stats *out);
int store_stats_zero(store *s);

/* Why an entry was evicted. */
enum store_evicted_why {
    STORE_EVICTED_SIZE = 1, /* for the size limit (or `cache evict --to-size`, or a full map) */
    STORE_EVICTED_AGE = 2   /* unused for max_age_days (or `cache evict --older-than`) */
};
struct store_evicted {
    uint64_t size;        /* its stored (compressed) size when evicted */
    uint32_t why;         /* enum store_evicted_why */
    uint64_t keep_limit;  /* the size limit that would have kept it until now */
};
/* Whether `hash` is in the record of evicted keys: CLSHIM_OK with *out,
 * CLSHIM_ENOTFOUND when not (never evicted, stored again since, or dropped
 * as one of the oldest), or an error of a read transaction. A caller whose
 * lookup missed calls it before storing the key again.
 *
 * keep_limit, an estimate: with least-recently-used eviction an entry
 * survives while the bytes of the entries used after it, plus its own, fit
 * in what eviction leaves (STORE_LOW_WATER_PCT % of the limit). Those are
 * every entry stored now (each was used after it: it was the oldest when
 * it went, the rest came later) and every entry evicted after it (each was
 * newer than it), so keep_limit = (stored bytes now + bytes evicted since
 * + its size) * 100 / STORE_LOW_WATER_PCT, rounded up. An entry evicted
 * after it and stored again since counts twice, so the estimate errs on
 * the large side: a limit that large would have kept it. */
int store_was_evicted(store *s, struct cache_hash hash, struct store_evicted *out);

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
    const struct store_source *source; /* NULL: built here */
};
/* Calls fn for every entry (read transaction); stops when fn returns nonzero.
 * The info and what it points to are valid during the call only; fn must
 * not call other store functions. Entries that fail to decode are skipped
 * (store_verify reports them). */
int store_foreach(store *s, int (*fn)(const struct store_entry_info *, void *), void *ctx);

/* ---- explaining a miss (cache/keydiff.h, docs/cache.md "Why a key missed")
 * Families. Every store of an entry whose key has a family (cache/key.h
 * key_family(): its main input, so one program built with other options,
 * headers, devices or drivers) puts the entry's hash first in the family's
 * "meta" record ("family <hex>": at most STORE_FAMILY_MAX hashes, newest
 * first), in the store's own write transaction: no commit of its own.
 * Entries gone since (evicted, removed) are dropped from the record at the
 * family's next store and skipped when it is read; records outlive
 * `cache clear` as slow-load records do (a few hundred bytes each). So the
 * entries of one program are found by one lookup and at most
 * STORE_FAMILY_MAX more, whatever the size of the store: never a scan. */
#define STORE_FAMILY_MAX 16
struct store_family_member {
    struct cache_hash hash;
    uint64_t created; /* seconds since the epoch */
    void *key;        /* malloc'd: the key material before its input field */
    size_t key_len;
};
/* The family's stored entries, newest first, into out[0..*n) (at most
 * max), their key material bounds-checked only (entry_peek_key(): for
 * showing, never serving). Free with store_family_free(). CLSHIM_OK (*n
 * may be 0), CLSHIM_EIO (the map faulted), CLSHIM_ENOMEM. */
int store_family_get(store *s, struct cache_hash family, struct store_family_member *out, size_t max, size_t *n);
void store_family_free(struct store_family_member *m, size_t n);

/* The last miss: an opaque record (cache/keydiff.h writes and reads it) in
 * the file "last-miss" of the cache directory, with its length and XXH3-64
 * before it, rewritten in place at each miss under an exclusive flock (read
 * under a shared one), never synced: it is advisory, a crash may lose it.
 * store_note_last_miss(): CLSHIM_OK, CLSHIM_EREADONLY, CLSHIM_ETOOBIG (over
 * STORE_LAST_MISS_MAX), CLSHIM_EIO. store_last_miss(): *rec malloc'd and
 * NUL-terminated (*len without it); CLSHIM_ENOTFOUND when no miss was
 * recorded, CLSHIM_ECORRUPT when the file is not a whole record. */
#define STORE_LAST_MISS_MAX (4u << 20)
int store_note_last_miss(store *s, const void *rec, size_t len);
int store_last_miss(store *s, void **rec, size_t *len);

/* Evicts entries unused for `older_than_s` seconds (0: skip) and then least
 * recently used ones until the total is <= `to_size` (UINT64_MAX: skip).
 * *evicted (may be NULL) receives the count. */
int store_evict(store *s, uint64_t older_than_s, uint64_t to_size, uint64_t *evicted);
int store_clear(store *s);

/* Checks every entry (decode, key hash, checksum) and the invariants;
 * with fix, deletes bad entries and rebuilds the indexes and totals.
 * *bad receives how many entries and index records were bad. */
int store_verify(store *s, int fix, uint64_t *checked, uint64_t *bad);
/* The same, calling report (may be NULL) for each bad thing found: `what`
 * is an entry's key hex, or "index" or "totals"; `why` says what is wrong. */
int store_verify_report(store *s, int fix, uint64_t *checked, uint64_t *bad,
                        void (*report)(const char *what, const char *why, void *ctx), void *ctx);

/* Rewrites the environment compacted (mdb_env_copy2 with MDB_CP_COMPACT to a
 * temp file, then rename), safe while other processes use the cache.
 *
 * Safety. Renaming a new data.mdb under a process that has the old one
 * mapped is not safe for it (LMDB keeps writing the old inode and the lock
 * file's state no longer matches the file). So compaction runs only when no
 * other handle exists: every store_open holds a shared flock on
 * compact.lock for the life of the handle, and compaction converts this
 * handle's lock to exclusive without waiting. Another open handle (any
 * process) makes it fail with CLSHIM_EBUSY. Holding the exclusive lock, it
 * copies to data.mdb.compact (0600), fsyncs it, closes this handle's
 * environment, renames the copy over data.mdb, fsyncs the directory,
 * reopens and drops back to shared. A process opening meanwhile waits for
 * the shared lock (a few seconds at most, else CLSHIM_EBUSY), so it only
 * ever maps the finished file. A crash leaves either the old or the new
 * file, plus at worst a stray temp file that the next compaction replaces.
 * CLSHIM_EREADONLY on a read-only handle. */
int store_compact(store *s);

/* Writes every entry to `out` in a portable, versioned format; import reads
 * it, verifies every entry (key hash and checksum) and stores the good ones.
 * Stream: the 8 bytes "CLSHIMX1", then per entry a u64 little-endian length
 * and the entry value (entry.h, with its current last access and hits),
 * then a u64 zero and the u64 entry count. Import keeps created, last
 * access and hits, applies the size limits and eviction like store_put,
 * counts in *rejected the records that fail verification or the limits,
 * and returns CLSHIM_EINVAL for a stream that is not one (bad magic,
 * truncated: what came before it is kept). */
int store_export(store *s, FILE *out, uint64_t *count);
int store_import(store *s, FILE *in, uint64_t *count, uint64_t *rejected);

/* 1 when invariants 1, 2 and 4 hold (for assert() in tests), else 0. */
int store_check_invariants(store *s);

/* Tests only. The clock the store reads (seconds since the epoch); NULL
 * restores time(). Process-wide; set it before opening. */
void store_set_clock_for_test(uint64_t (*now_s)(void));
/* Tests only. The map size of the next store_open (0: the default), to
 * force MDB_MAP_FULL early. */
void store_set_mapsize_for_test(uint64_t bytes);
/* Tests and benchmarks only. Nonzero: the next store_open commits without
 * fsync (MDB_NOSYNC), to fill a large cache quickly; a machine crash may then
 * lose or damage it. Normal opens sync once per commit (MDB_NOMETASYNC). */
void store_set_nosync_for_test(int on);
/* Tests only. How many evicted keys the record keeps (0: STORE_EVICTED_MAX). */
void store_set_evicted_max_for_test(uint64_t n);

#endif
