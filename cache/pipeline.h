/* pipeline.h — the one lookup -> build -> store sequence of every cached program.
 *
 * Builds, compiles, links and derived (fused) programs all go through the
 * same steps, one flight per device (an array of flights per call), so single
 * flight, failure sharing, the tiers, logging and accounting exist once:
 *
 *   pipeline_key()      the key: the caller's fields first (kind, options,
 *                       device, ...), then — for source — the headers the
 *                       program includes (cache/preproc.h), then the input;
 *                       its hash. The one place a key is finished.
 *   pipeline_key_start() / pipeline_key_finish()
 *                       the same for a compile whose key may be finished
 *                       after it: the preprocessor runs beside the driver
 *                       (a late key, below).
 *   pipeline_begin()    per flight: the in-process tier (single flight: one
 *                       thread fills a key, the others wait for its result,
 *                       a shared failure included), then the store, then the
 *                       remote tier (cache/remote.h); on a miss this process
 *                       claims the key so other processes wait for it
 *                       (CLSHIM_BUILD_WAIT_MS) instead of compiling too.
 *                       PIPELINE_HIT when every flight hit, PIPELINE_FAILED
 *                       when every flight hit and one of them is a failed
 *                       build of this process, else PIPELINE_BUILD: the
 *                       caller builds (the driver's work stays with it).
 *   pipeline_hit()      the caller used the cached binaries: counted, logged.
 *   pipeline_rejected() the driver refused them: the entries are dropped
 *                       and the flights refill from the caller's rebuild.
 *   pipeline_built()    the caller built: a success with its binaries is
 *                       stored (memory, disk, remote); a success whose
 *                       binaries come later (PoCL: after first use) fills
 *                       the in-process tier with the program the caller
 *                       attached and keeps the claim for a grace, until
 *                       pipeline_store_late(); a failure is shared with the
 *                       waiting threads, with its log (builds only).
 *   pipeline_end()      pins and claims let go.
 *
 * Accounting: the counters of this process (pipeline_stats()), flushed to
 * the store by pipeline_exit() unless the cache is read-only (a read-only
 * run writes nothing, its counters included: see docs/cache.md); compile
 * time is the compile's CPU time (pipeline_clock), so "compile time saved"
 * is CPU time saved. Thread-safe; the tiers open on first need.
 */
#ifndef CLSHIM_PIPELINE_H
#define CLSHIM_PIPELINE_H

#include <stddef.h>
#include <stdint.h>

#include "cache/key.h"
#include "cache/memtier.h"
#include "cache/store.h"

struct preproc_job; /* cache/preproc.h */

enum pipeline_result {
    PIPELINE_BUILD = 0,  /* the caller builds, then pipeline_built() */
    PIPELINE_HIT = 1,    /* every flight has a binary (pipeline_binary()) */
    PIPELINE_FAILED = 2, /* a build of this key failed here: shared (pipeline_failure()) */
};

enum pipeline_source { PIPELINE_FROM_MEMORY, PIPELINE_FROM_DISK, PIPELINE_FROM_REMOTE };

/* One key on one device. The caller zeroes it, sets `device` (a name for
 * logs and records; it must outlive the flight) and `kind`, and finishes
 * the key with pipeline_key(); the rest is the pipeline's. A flight without
 * a key (not cacheable) takes part in nothing: it is always built. */
struct pipeline_flight {
    const char *device;
    enum key_kind kind;
    char *key; /* key material (owned; pipeline_flight_free) */
    size_t key_len;
    struct cache_hash hash;
    uint64_t compile_ns;  /* the compile's CPU time: a hit's recorded one, or this build's */
    size_t stored_size;   /* bytes last stored or found (0: none yet) */
    enum pipeline_source from;
    /* the pipeline's, from pipeline_begin() to pipeline_end(): */
    memtier_entry *entry; /* pinned */
    int filling;          /* this thread fills the key */
    int claimed;          /* this process holds the cross-process claim */
    int failed;           /* the key's build failed in this process */
    int owes_store;       /* built, binary to be stored late: the claim is held */
    uint64_t t0, cpu0;    /* when the lookup began: wall, this thread's CPU */
    /* The bytes of the files the key names, as read for it (cache/snapshot.h;
     * owned; NULL for keys of no files). A build of them is stored only when
     * `exact`: the caller ran it under cache/sandbox.h and it read exactly
     * those bytes, or the key names no file present (names_files: any file
     * or absent place; the sandbox's verdict replaces `exact` where it can
     * see the build's reads). */
    struct key_snapshot *snap;
    int names_files;
    int exact;
    /* a late key (pipeline_key_start), until pipeline_key_finish(): */
    struct preproc_job *pending; /* the preprocessor, running */
    struct key_buf pending_key;  /* the fields before the headers */
    const void *pending_input;   /* the caller's; must outlive the finish */
    size_t pending_input_len;
};

/* Finishes the key of f from the caller's key_buf k (taken over, freed on
 * failure). For source programs `src` names the source and options (the
 * headers are listed through cache/preproc.h; `identity` is the device's);
 * NULL for the other kinds. The input blob is added when `input` is not
 * NULL. Returns 0, or -1 when the program cannot be cached (logged once
 * with `handle`; counted as uncacheable when the headers are the cause). */
int pipeline_key(struct pipeline_flight *f, struct key_buf *k, const struct key_source *src, const char *identity,
                 const void *input, size_t input_len, const void *handle);

/* A late key: the preprocessor beside the driver's compile
 * (clCompileProgram; cache/preproc.h preproc_start()).
 *
 * pipeline_key_start() is pipeline_key(), except that when the headers
 * need the preprocessor and the source was never seen (no manifest at all:
 * a compile is then all but certain), it leaves clang running on a thread
 * of its own, keeps k and `input` (which must stay valid until the finish)
 * and leaves the flight without a key. Only where a missing manifest means
 * a missing binary: CLSHIM_PREPROC_OVERLAP on, no CLSHIM_CACHE_MIN_ENTRY
 * (manifests may be refused), no remote tier (another runner may hold the
 * binary), a writable store. Returns as pipeline_key() does (0 with a late
 * key pending).
 *
 * Such a flight cannot be looked up — there is no key yet, that is the
 * point: pipeline_begin() treats it as keyless (PIPELINE_BUILD) and the
 * caller builds. pipeline_key_finish(), after the build and before
 * pipeline_built(), waits for the preprocessor and finishes each pending
 * key (the headers, the input, the hash; logged with the time clang ran).
 * The flight then joins the in-process tier without waiting: it fills
 * (pipeline_built() stores it like any miss) unless another thread fills
 * or has filled that key already — then it stores nothing, the other's
 * result stands. It is not looked up in the store (the compile is done: a
 * key stored meanwhile, or one whose manifest alone was evicted, is stored
 * again, harmless) and takes no cross-process claim: a claim exists to make
 * other processes wait instead of compiling, and this compile is over, so
 * processes that start the same program meanwhile compile it too. A
 * failing preprocessor leaves the flight keyless (one line; counted as
 * uncacheable). pipeline_end() and pipeline_flight_free() discard a key
 * still pending. */
int pipeline_key_start(struct pipeline_flight *f, struct key_buf *k, const struct key_source *src,
                       const char *identity, const void *input, size_t input_len, const void *handle);
void pipeline_key_finish(struct pipeline_flight *f, size_t n, const void *handle);

/* The flags of pipeline_begin(). */
#define PIPELINE_SHARE_FAILURE 1u /* a failed build is shared (builds; not compile, link, derived) */
#define PIPELINE_FLEET_CLAIM 2u   /* take part in the remote tier's single flight (builds) */
#define PIPELINE_NO_CLAIM 4u      /* a look only: a miss neither waits for another process's claim
                                   * nor takes one (a derived program the capture helper makes) */

enum pipeline_result pipeline_begin(struct pipeline_flight *f, size_t n, unsigned flags);

/* A hit flight's binary (valid until pipeline_end()); NULL when the tier
 * holds only an attached object (pipeline_serve() then gives it, and
 * pipeline_refill() keeps its bytes). */
const void *pipeline_binary(const struct pipeline_flight *f, size_t *size);
const char *pipeline_build_log(const struct pipeline_flight *f);
/* PIPELINE_FAILED: the shared failure's error code (0 for a flight whose
 * key did not fail). */
int pipeline_failure(const struct pipeline_flight *f);

/* The binaries were used: counted as hits, "hit" logged per flight (the
 * line names the kind: "hit <key> on '<device>' (disk)" for a build,
 * "(disk, compiled object)", "(disk, linked program)", and "hit derived
 * program <key> ..."). */
void pipeline_hit(struct pipeline_flight *f, size_t n);
/* The shared failure was answered: counted, logged. */
void pipeline_failure_shared(struct pipeline_flight *f, size_t n);
/* The driver refused the cached binaries: entries deleted and discarded;
 * each flight refills from the caller's rebuild where nobody else does. */
void pipeline_rejected(struct pipeline_flight *f, size_t n, int error, const void *handle);

/* A build's cost: wall time and CPU time around the driver's work: this
 * thread's (PoCL compiles on the calling thread) and that of the child
 * processes the process waited for meanwhile (PoCL links a kernel's code
 * with /usr/bin/ld, a child: thread CPU time alone missed it). Children's
 * CPU time is the process's (RUSAGE_CHILDREN), so it is counted only when
 * no other clock ran at the same time; cpu_ns is then the build's, else at
 * least its thread's (children_counted says which). A first use's code
 * generation in PoCL's worker threads at the same time would still count:
 * clocks only see clocks. */
struct pipeline_clock {
    uint64_t wall0, cpu0, children0, starts0, wall_ns, cpu_ns;
    int alone, children_counted;
};
void pipeline_clock_start(struct pipeline_clock *c);
void pipeline_clock_stop(struct pipeline_clock *c);

/* What the caller built, per flight (arrays of n). */
struct pipeline_output {
    int error;                   /* the driver's result (0: success) */
    const void *const *binaries; /* NULL: the binaries come later (late store) or cannot be read */
    const size_t *sizes;
    const char *const *logs;     /* build logs (NULL entries: "") */
    const struct pipeline_clock *clock;
    int late;                    /* binaries come later: pipeline_store_late() */
    int share_failure;           /* a compile error is shared with waiters (builds) */
};

/* Lends the built program to the in-process tier (late store), so waiting
 * threads wake to it: attached before the fill. 0 when attached (the tier
 * then owns the caller's reference and calls `release` when it drops it,
 * or at memtier_detach()); -1 when the flight does not fill. */
int pipeline_attach(struct pipeline_flight *f, void *object, const void *tag, void (*release)(void *object));
/* The owner of an object lent with pipeline_attach() takes it back (and
 * the tier releases it) before the object's own lifetime ends. */
void pipeline_detach(const struct pipeline_flight *f, void *object);
/* What a pinned hit flight serves, in one look (cache/memtier.h
 * memtier_serve()): its binary as pipeline_binary() gives it, else the
 * attached object retained through `retain` (*object; the caller owns the
 * reference), else NULL with *object NULL. pipeline_refill() then gives the
 * entry the bytes the caller read from the object. */
const void *pipeline_serve(struct pipeline_flight *f, size_t *size, int (*retain)(void *object), void **object);
void pipeline_refill(struct pipeline_flight *f, const void *binary, size_t size);

/* The in-process tier outside a flight. keep_bytes: the bytes of a program
 * lent to it, before the program goes, so later builds in this process
 * still hit (kept where the filled entry of `hash` has none). keep_stored:
 * a binary stored on this process's behalf (the capture helper): fills an
 * empty key, or gives a filled entry without bytes its bytes; a key being
 * filled is left to its filler. */
void pipeline_keep_bytes(struct cache_hash hash, const void *binary, size_t size);
void pipeline_keep_stored(struct cache_hash hash, const void *binary, size_t size, const char *log,
                          uint64_t compile_ns);
/* The tier's byte limit and keeping (cache/memtier.h: memtier_set_limit(),
 * memtier_set_keep()). */
void pipeline_memory_setup(uint64_t limit, int keep);
/* Drops every unpinned entry of the tier (a driver out of resources);
 * returns how many went. */
uint64_t pipeline_memory_clear(void);

void pipeline_built(struct pipeline_flight *f, size_t n, const struct pipeline_output *out);

/* The build's binaries must never be read (a driver quirk): the flights
 * stop filling and lose their keys; counted as uncacheable. */
void pipeline_uncacheable(struct pipeline_flight *f, size_t n);

/* A late binary of a built flight: stored (disk, remote) when it differs
 * from what was stored; its claim goes either way. `read_cpu_ns`: the CPU
 * time reading it took (PoCL generates the code again for the read, as it
 * did at first use on its own threads, where it cannot be measured): added
 * to the compile's, as a hit saves that code generation too. Returns 1
 * when stored. */
int pipeline_store_late(struct pipeline_flight *f, const void *binary, size_t size, const char *log,
                        uint64_t read_cpu_ns);
/* The flight owes no store any more (captured, given up): claims go. */
void pipeline_let_go(struct pipeline_flight *f);
/* The flight's store is another process's now (the capture helper's, which
 * takes the claim over: store_take_claim()): this process forgets its
 * claim without releasing it, so other processes wait for that store. */
void pipeline_pass_claim(struct pipeline_flight *f);

void pipeline_end(struct pipeline_flight *f, size_t n);
void pipeline_flight_free(struct pipeline_flight *f);

/* Entries built before any run (`clshim cache warm`) on a driver that
 * generates code at a kernel's first enqueue (PoCL: device_info()'s
 * lazy_codegen) lack that code, which every run then generates again; such
 * an entry is noted provisional (a record beside it, on the remote tier
 * too), and the first run that hits it has it captured again after its
 * first use (program/capture_proc.h: `refresh`), which notes it done.
 * pipeline_provisional(): 1 while noted so; the local store only, unless
 * ask_remote (a value the remote tier served: its note is there). */
void pipeline_note_provisional(const void *key, size_t key_len, int provisional);
int pipeline_provisional(const void *key, size_t key_len, int ask_remote);

/* Keeps the remote tier closed for this process (`clshim cache warm`
 * without --push builds for the local cache only); before its first use. */
void pipeline_remote_off(void);
/* Queues an entry of the local store (its record as store_get() gave it)
 * for the remote tier, as a store would; -1 when there is no remote tier
 * (pipeline_remote_settle() tells what it refused). */
int pipeline_push_stored(struct cache_hash hash, const void *key, size_t key_len, const struct store_record *sr);

/* The store (opened on first need; NULL without a persistent cache). */
store *pipeline_store(void);

/* store_get() of an entry this process may use: a local copy of a remote
 * value whose signer CLSHIM_REMOTE_TRUST no longer lists is deleted
 * (counted, one info line) and reported CLSHIM_ENOTFOUND. */
int pipeline_local_get(store *st, struct cache_hash hash, const void *key, size_t key_len, struct store_record *sr,
                       void **arena);

/* Records that are not a build's binaries (a fused kernel's generated
 * text, kept apart from any device: program/origin.h): the same tiers
 * (store, then remote), no single flight, no claim. `k` is the finished
 * key material (key_begin() ... ). get: 0 with *value (malloc'd, the
 * caller frees), or -1 (absent, cache off, out of memory). put: best
 * effort, counted as a store. */
int pipeline_record_get(const struct key_buf *k, void **value, size_t *size);
void pipeline_record_put(const struct key_buf *k, const void *value, size_t size, enum key_kind kind,
                         const char *device, uint64_t make_ns);

/* A key whose capture was refused for its cost (the capture helper's CPU
 * budget: twice the build), with the budget it ran out of: noted so that
 * later runs do not hand it over again. pipeline_over_cost(): 1 (with the
 * helper's words in why) when a capture with budget_ns was refused so;
 * a budget twice the refused one (a build that cost that much more here)
 * is tried again. */
void pipeline_note_over_cost(const void *key, size_t key_len, uint64_t budget_ns, const char *why);
int pipeline_over_cost(const void *key, size_t key_len, uint64_t budget_ns, char *why, size_t why_len);

/* Counters of this process (the store's names; see store.h). */
struct pipeline_stats {
    struct store_stats store;
    uint64_t memory_hits, translations, failed, failed_shared;
    uint64_t slow_loads; /* lookups skipped: the key loads slower than it compiles */
};
void pipeline_stats(struct pipeline_stats *out);
void pipeline_count_translation(void);
void pipeline_count_uncacheable(void);
/* A late capture handed to the capture helper; one not made, and why. */
void pipeline_count_handed(void);
void pipeline_count_capture_lost(enum capture_lost why, uint64_t n);
/* Adds this process's counters so far to the store and zeroes them (the
 * capture helper, after each capture: `clshim cache stats` right after
 * `clshim cache wait` sees its work). Only while no other thread counts. */
void pipeline_flush_stats(void);
/* The capture helper, before the remote tier opens: a push the server
 * refuses is not logged (its standard error is gone once the application
 * exits) but held for pipeline_remote_settle(), which the journal tells. */
void pipeline_hold_remote_refusals(void);
/* Waits (at most REMOTE_DRAIN_MS) for the pushes queued so far, moves the
 * remote tier's counters into this process's (pipeline_flush_stats() adds
 * them), and returns the pushes refused since the last call, the first
 * one's line in line. 0 when the tier never opened. */
unsigned pipeline_remote_settle(char *line, size_t len);
/* The one summary line. */
void pipeline_print_summary(void);

/* At exit: claims let go, the remote tier drained (bounded), counters added
 * to the store (not for a read-only cache), the store closed. */
void pipeline_exit(void);
/* In a child of fork(): inherited handles dropped (not closed), counters
 * and claims are the parent's. */
void pipeline_after_fork_in_child(void);

#endif
