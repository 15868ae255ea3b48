/* program.c — the program layer (see program.h for the design).
 *
 * Invariants:
 *  1. rec->refs mirrors the handle's reference count as the app and our
 *     substituted kernels hold it; the record dies with the handle.
 *  2. rec->effective, when set, is a built program holding one reference
 *     of ours; kernels created from it hold their own (driver) references.
 *  3. A memtier entry acquired with MEMTIER_FILL is filled or abandoned, and
 *     a cross-process claim released, before pc_build returns.
 */
#include "program/program.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cache/device.h"
#include "cache/key.h"
#include "cache/memtier.h"
#include "cache/quirks.h"
#include "cache/preproc.h"
#include "cache/remote.h"
#include "cache/spirv_scan.h"
#include "cache/store.h"
#include "common/config.h"
#include "common/error.h"
#include "common/log.h"
#include "common/objmap.h"
#include "fusion/llvmload.h"
#include "program/capture.h"

struct pc_dev {
    cl_device_id dev;
    struct cache_hash hash;
    char *key;              /* key material; NULL when the build is not cacheable */
    size_t key_len;
    char *log;              /* the original build's log when served from the cache */
    void *object;           /* a compile hit: the compiled object in hand (owned) */
    size_t object_size;
    size_t stored_size;     /* binary size last stored; capture compares */
    uint64_t compile_ns;
    int needs_capture;      /* built by the driver here: store (again) at release */
    int from_remote;        /* a compile or link hit served by the remote tier */
    cl_program attached;    /* the built program lent to the in-memory tier */
};

struct spec_value {
    cl_uint id;
    size_t size;
    unsigned char value[8];
};

struct pc_program {
    int ran;                /* a kernel of it was enqueued (late capture) */
    int pending;            /* on the pending-capture list */
    int queued;             /* with the capture worker (pending_lock; it holds a driver reference) */
    int orphaned;           /* released by the app while queued: the worker frees it (pending_lock) */
    cl_program handle;
    cl_context context;
    enum key_kind kind;     /* KEY_SOURCE or KEY_IL */
    int translated;         /* IL for a device without IL: the handle is a placeholder */
    char *input;            /* source (concatenated) or IL bytes */
    size_t input_len;
    struct spirv_scan *scan; /* translated IL: its spec ids */
    unsigned nkernels;      /* live kernels (atomic): a build or compile is refused then */
    pthread_mutex_t lock;   /* guards everything below */
    unsigned refs;
    struct spec_value *specs;
    size_t nspecs;
    cl_program effective;
    int answers_options;    /* a link served from the cache: options are ours to answer */
    int failed;             /* the last build's failure was shared: status is CL_BUILD_ERROR */
    char *options;
    struct pc_dev *devs;
    size_t ndevs;
};

static const struct cl_api *real;
static objmap *programs; /* app handle -> struct pc_program */
static objmap *kernels;  /* kernel from an effective program -> struct pc_kernel */

/* Per-process statistics, flushed to the store at exit. */
static struct store_stats proc_stats;
static uint64_t stat_memory_hits, stat_translations, stat_failed, stat_failed_shared;
#define STAT_ADD(field, n) __atomic_add_fetch(&(field), (n), __ATOMIC_RELAXED)

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- the persistent store, opened on first need -------------------------- */

static store *the_store;
static pthread_once_t store_once = PTHREAD_ONCE_INIT;

static void need_exit_handler(void);

static void open_store(void)
{
    const struct clshim_config *cfg = config_get();
    if (!cfg->cache) return;
    need_exit_handler(); /* opened during a build: the driver is loaded */
    char dir[4096];
    if (config_cache_dir(cfg, dir, sizeof dir) != 0) {
        log_msg(LOG_WARN, "no cache directory (set CLSHIM_CACHE_DIR, XDG_CACHE_HOME or HOME); "
                          "persistent cache off");
        return;
    }
    struct store_options opt = {
        .dir = dir,
        .max_size = cfg->cache_max_size,
        .max_age_days = cfg->cache_max_age_days,
        .min_entry = cfg->cache_min_entry,
        .max_entry = cfg->cache_max_entry,
        .readonly = cfg->cache_readonly,
        .allow_shared = cfg->cache_allow_shared,
        .compress_level = (int)cfg->cache_compress_level,
    };
    int rc = store_open(&opt, &the_store);
    if (rc != CLSHIM_OK) {
        /* The store has said why (one warning); this line only at info,
         * except for a read-only cache that does not exist yet. */
        log_msg(rc == CLSHIM_ENOTFOUND ? LOG_WARN : LOG_INFO, "cannot open the cache in %s (%s); persistent cache off",
                dir, clshim_strerror(rc));
        the_store = NULL;
    }
}

static store *get_store(void)
{
    pthread_once(&store_once, open_store);
    return the_store;
}

/* ---- claims held past the compile -----------------------------------------
 * A late capture stores the binary at the first use of the program, so the
 * cross-process claim is kept after the compile, for the processes waiting
 * for that binary — but only for CLAIM_GRACE_BUILDS times as long as the
 * build took: a process that keeps its program unused never makes others
 * wait much longer than compiling would (they then compile it themselves).
 * Compiling includes what a driver does at first use: PoCL generates the
 * work-group functions then, 1.2-1.6x the build's own time (bench_ttfr:
 * 690 ms build, 1,108 ms first run), so a grace of one build let waiters
 * give up just before the binary came, and compile it again. One thread,
 * started on first need, lets expired claims go. */
#define CLAIM_GRACE_BUILDS 3

struct held_claim {
    struct cache_hash hash;
    uint64_t deadline_ns;
};

static pthread_mutex_t claims_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t claims_changed = PTHREAD_COND_INITIALIZER;
static struct held_claim *claims;
static size_t nclaims, claims_cap;
static int reaper_running, reaper_stop;
static pthread_t reaper;

static void *reap_claims(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&claims_lock);
    while (!reaper_stop) {
        uint64_t now = now_ns(), next = 0;
        for (size_t i = 0; i < nclaims;) {
            if (claims[i].deadline_ns <= now) {
                store_release_build(the_store, claims[i].hash);
                claims[i] = claims[--nclaims];
                continue;
            }
            if (!next || claims[i].deadline_ns < next) next = claims[i].deadline_ns;
            i++;
        }
        if (!next) {
            pthread_cond_wait(&claims_changed, &claims_lock);
            continue;
        }
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        uint64_t wait = next - now;
        until.tv_sec += (time_t)(wait / 1000000000u);
        until.tv_nsec += (long)(wait % 1000000000u);
        if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&claims_changed, &claims_lock, &until);
    }
    pthread_mutex_unlock(&claims_lock);
    return NULL;
}

/* Keeps this process's claim of `hash` for `grace_ns` more; 0 when it is
 * held, -1 when the caller must release it now. */
static int hold_claim(struct cache_hash hash, uint64_t grace_ns)
{
    int rc = -1;
    pthread_mutex_lock(&claims_lock);
    if (!reaper_running) {
        pthread_condattr_t attr;
        pthread_condattr_init(&attr);
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
        pthread_cond_init(&claims_changed, &attr);
        pthread_condattr_destroy(&attr);
        reaper_stop = 0;
        reaper_running = pthread_create(&reaper, NULL, reap_claims, NULL) == 0;
    }
    if (reaper_running && nclaims == claims_cap) {
        size_t cap = claims_cap ? claims_cap * 2 : 8;
        struct held_claim *n = realloc(claims, cap * sizeof *n);
        if (n) claims = n, claims_cap = cap;
    }
    if (reaper_running && nclaims < claims_cap) {
        claims[nclaims++] = (struct held_claim){hash, now_ns() + grace_ns};
        pthread_cond_signal(&claims_changed);
        rc = 0;
    }
    pthread_mutex_unlock(&claims_lock);
    return rc;
}

/* Lets the claim of `hash` go now if this process still holds it. */
static void drop_claim(struct cache_hash hash)
{
    pthread_mutex_lock(&claims_lock);
    for (size_t i = 0; i < nclaims; i++)
        if (claims[i].hash.lo == hash.lo && claims[i].hash.hi == hash.hi) {
            store_release_build(the_store, hash);
            claims[i] = claims[--nclaims];
            break;
        }
    pthread_mutex_unlock(&claims_lock);
}

/* At exit: the thread stops and every held claim goes. */
static void drop_all_claims(void)
{
    pthread_mutex_lock(&claims_lock);
    int running = reaper_running;
    reaper_stop = 1;
    pthread_cond_signal(&claims_changed);
    pthread_mutex_unlock(&claims_lock);
    if (running) pthread_join(reaper, NULL);
    reaper_running = 0;
    for (size_t i = 0; i < nclaims; i++) store_release_build(the_store, claims[i].hash);
    nclaims = 0;
}

/* ---- the remote tier (cache/remote.h), behind the store ------------------
 * Every lookup of the program layer goes memory, store, then tier_get();
 * every store goes through tier_put(): builds, compiles, links and derived
 * programs alike. Only builds (lookup_all) take part in the fleet's single
 * flight (remote_fetch() claims the key); compile, link and derived lookups
 * only read (remote_get()), so no claim of theirs can outlive a failure.
 * Manifests (cache/preproc.h) stay local: see docs/cache.md. */

static remote *the_remote;
static pthread_once_t remote_once = PTHREAD_ONCE_INIT;

static void open_remote(void)
{
    const struct clshim_config *cfg = config_get();
    if (!cfg->cache || !*cfg->remote) return;
    struct remote_options opt = {
        .url = cfg->remote,
        .password_file = cfg->remote_password_file,
        .ns = cfg->remote_namespace,
        .timeout_ms = cfg->remote_timeout_ms,
        .max_value = cfg->remote_max_value,
        .expire_s = cfg->remote_expire_days * 86400,
        .readonly = cfg->remote_readonly,
        .compress_level = (int)cfg->cache_compress_level,
    };
    if (remote_open(&opt, &the_remote) != CLSHIM_OK) {
        char name[512];
        config_redact_url(cfg->remote, name, sizeof name);
        log_msg(LOG_WARN, "CLSHIM_REMOTE=%s: not a redis:// or unix:// URL, or its password file cannot be "
                          "read; remote tier off", name);
        the_remote = NULL;
    }
}

static remote *get_remote(void)
{
    pthread_once(&remote_once, open_remote);
    return the_remote;
}

/* The store, then (on a local miss) the remote tier; a remote hit is stored
 * locally. fleet_wait: wait for, or claim, another runner's build of the
 * key (remote_fetch()); the claim then goes with tier_put() or
 * remote_release(). *from_remote (may be NULL) says which tier answered. */
static int tier_get(store *st, struct cache_hash hash, const void *key, size_t key_len, int fleet_wait,
                    struct store_record *sr, void **arena, int *from_remote)
{
    if (from_remote) *from_remote = 0;
    int rc = store_get(st, hash, key, key_len, sr, arena);
    remote *rm = rc == CLSHIM_ENOTFOUND ? get_remote() : NULL;
    if (!rm) return rc;
    int got = fleet_wait ? remote_fetch(rm, hash, key, key_len, config_get()->build_wait_ms, sr, arena)
                         : remote_get(rm, hash, key, key_len, sr, arena);
    if (got != CLSHIM_OK) return CLSHIM_ENOTFOUND;
    if (store_put(st, hash, key, key_len, sr) == CLSHIM_OK) STAT_ADD(proc_stats.stores, 1);
    if (from_remote) *from_remote = 1;
    return CLSHIM_OK;
}

/* A local store, and the same record to the remote tier in the background
 * (which also gives up this process's fleet claim on it). */
static int tier_put(store *st, struct cache_hash hash, const void *key, size_t key_len,
                    const struct store_record *sr)
{
    int rc = store_put(st, hash, key, key_len, sr);
    remote *rm = get_remote();
    if (rm) remote_push(rm, hash, key, key_len, sr);
    return rc;
}

static void at_exit(void);
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;
static void register_exit(void) { atexit(at_exit); }

/* A child of fork() that has not built anything since: its exit handler
 * (inherited) prints and counts nothing. */
static int idle_child;

/* The exit handler stores late captures, which can make PoCL compile. exit()
 * runs handlers in reverse order of registration, and libLLVM (loaded with
 * PoCL) registers its static destructors when it loads: registering ours
 * only once a program has been built puts it before LLVM's teardown. */
static void need_exit_handler(void)
{
    idle_child = 0;
    pthread_once(&exit_once, register_exit);
}

static void pending_captures_reset(void);
static void run_capture(void *item);
static void capture_done(void *item);

/* In the child of fork(): LMDB forbids using an environment opened before
 * the fork, and the parent's statistics and pending captures are the
 * parent's. The inherited store handle is dropped (not closed: closing
 * touches the parent's lock file) and reopened if the child builds. */
static void after_fork_in_child(void)
{
    the_store = NULL;
    store_once = (pthread_once_t)PTHREAD_ONCE_INIT;
    memset(&proc_stats, 0, sizeof proc_stats);
    stat_memory_hits = stat_translations = stat_failed = stat_failed_shared = 0;
    pending_captures_reset();
    capture_after_fork_in_child();
    claims_lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    nclaims = 0; /* the parent's; its thread is not in this process */
    reaper_running = 0;
    idle_child = 1;
}

void pc_init(const struct cl_api *real_api)
{
    real = real_api;
    programs = objmap_new();
    kernels = objmap_new();
    memtier_set_limit(config_get()->mem_cache_max);
    pthread_atfork(NULL, NULL, after_fork_in_child);
    capture_init(&(struct capture_ops){run_capture, capture_done});
    capture_set_exit_budget(config_get()->capture_exit_budget);
}

/* ---- records ------------------------------------------------------------- */

static store *get_store(void);

/* ---- pending late captures (see progcache.h) ------------------------------ */

int pc_pending_captures;
static struct pc_program **pending;
static size_t npending, pending_cap;
static pthread_mutex_t pending_lock = PTHREAD_MUTEX_INITIALIZER;
static void capture(struct pc_program *rec);
static int capture_wanted(const struct pc_program *rec);

/* Called without rec->lock held (sync points take pending_lock, then it). */
static void add_pending(struct pc_program *rec)
{
    pthread_mutex_lock(&pending_lock);
    if (!rec->pending) {
        if (npending == pending_cap) {
            size_t cap = pending_cap ? pending_cap * 2 : 16;
            struct pc_program **np = realloc(pending, cap * sizeof *np);
            if (np) {
                pending = np;
                pending_cap = cap;
            }
        }
        if (npending < pending_cap) {
            pending[npending++] = rec;
            rec->pending = 1;
        }
    }
    __atomic_store_n(&pc_pending_captures, npending > 0, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&pending_lock);
}

/* The child of fork() forgets the parent's pending captures (it never
 * stores the parent's programs). Single-threaded there: the lock is
 * reinitialised, as another thread may have held it at the fork. */
static void pending_captures_reset(void)
{
    pending_lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    for (size_t i = 0; i < npending; i++) pending[i]->pending = 0;
    npending = 0;
    __atomic_store_n(&pc_pending_captures, 0, __ATOMIC_RELAXED);
}

static void remove_pending_locked(struct pc_program *rec)
{
    for (size_t i = 0; i < npending; i++)
        if (pending[i] == rec) {
            pending[i] = pending[--npending];
            break;
        }
    rec->pending = 0;
    __atomic_store_n(&pc_pending_captures, npending > 0, __ATOMIC_RELAXED);
}

static void remove_pending(struct pc_program *rec)
{
    if (!__atomic_load_n(&rec->pending, __ATOMIC_RELAXED)) return;
    pthread_mutex_lock(&pending_lock);
    remove_pending_locked(rec);
    pthread_mutex_unlock(&pending_lock);
}

struct pc_kernel_rec;
static struct pc_kernel_rec *kernel_record(cl_kernel k);
static struct pc_program *kernel_program(struct pc_kernel_rec *kr);

/* ---- the background capture (program/capture.h) ---------------------------
 * A queued record holds a driver reference on its handle, so the program
 * outlives an app release; a record released by the app meanwhile
 * ("orphaned") is freed by the worker when its capture is done. */

static void set_effective(struct pc_program *rec, cl_program p);
static void free_record(struct pc_program *rec);

static void run_capture(void *item)
{
    struct pc_program *rec = item;
    pthread_mutex_lock(&rec->lock);
    capture(rec);
    pthread_mutex_unlock(&rec->lock);
}

static void capture_done(void *item)
{
    struct pc_program *rec = item;
    cl_program handle = rec->handle; /* rec may be freed by the app once unqueued */
    pthread_mutex_lock(&pending_lock);
    rec->queued = 0;
    int orphaned = rec->orphaned;
    pthread_mutex_unlock(&pending_lock);
    real->clReleaseProgram(handle);
    if (orphaned) {
        set_effective(rec, NULL);
        free_record(rec);
    }
}

/* With pending_lock held: 0 when the worker took rec (or has it already). */
static int queue_capture_locked(struct pc_program *rec)
{
    if (rec->queued) return 0;
    if (!config_get()->capture_background) return -1;
    if (real->clRetainProgram(rec->handle) != CL_SUCCESS) return -1;
    rec->queued = 1;
    if (capture_submit(rec) == 0) {
        remove_pending_locked(rec);
        return 0;
    }
    rec->queued = 0;
    real->clReleaseProgram(rec->handle);
    return -1;
}

void pc_note_enqueue(cl_kernel kernel)
{
    struct pc_kernel_rec *kr = kernel_record(kernel);
    if (kr) __atomic_store_n(&kernel_program(kr)->ran, 1, __ATOMIC_RELAXED);
}

void pc_sync_point(void)
{
    /* Capture under pending_lock: a record cannot be freed meanwhile (its
     * last release removes it from this list first, under the same lock). */
    pthread_mutex_lock(&pending_lock);
    for (size_t i = 0; i < npending;) {
        struct pc_program *rec = pending[i];
        if (!__atomic_load_n(&rec->ran, __ATOMIC_RELAXED)) {
            i++;
            continue;
        }
        remove_pending_locked(rec);
        if (queue_capture_locked(rec) == 0) continue;
        pthread_mutex_lock(&rec->lock);
        capture(rec);
        pthread_mutex_unlock(&rec->lock);
    }
    pthread_mutex_unlock(&pending_lock);
}

static void free_devs(struct pc_program *rec)
{
    for (size_t i = 0; i < rec->ndevs; i++) {
        if (rec->devs[i].attached) memtier_detach(rec->devs[i].hash, rec->devs[i].attached);
        if (rec->devs[i].needs_capture) drop_claim(rec->devs[i].hash);
        free(rec->devs[i].key);
        free(rec->devs[i].log);
        free(rec->devs[i].object);
    }
    free(rec->devs);
    rec->devs = NULL;
    rec->ndevs = 0;
}

static void free_record(struct pc_program *rec)
{
    remove_pending(rec);
    free_devs(rec);
    free(rec->input);
    free(rec->scan);
    free(rec->specs);
    free(rec->options);
    pthread_mutex_destroy(&rec->lock);
    free(rec);
}

static struct pc_program *new_record(cl_program handle, cl_context ctx, enum key_kind kind, char *input,
                                     size_t len)
{
    struct pc_program *rec = calloc(1, sizeof *rec);
    if (!rec) return NULL;
    rec->handle = handle;
    rec->context = ctx;
    rec->kind = kind;
    rec->input = input;
    rec->input_len = len;
    rec->refs = 1;
    pthread_mutex_init(&rec->lock, NULL);
    if (objmap_put(programs, handle, rec) != 0) {
        rec->input = NULL;
        free_record(rec);
        return NULL;
    }
    return rec;
}

cl_program pc_create_with_source(cl_context ctx, cl_uint count, const char **strings, const size_t *lengths,
                                 cl_int *errcode_ret)
{
    cl_program prog = real->clCreateProgramWithSource(ctx, count, strings, lengths, errcode_ret);
    /* Recorded even with CLSHIM_CACHE=0: fusion needs the program's input. */
    if (!prog) return prog;
    size_t total = 0;
    for (cl_uint i = 0; i < count; i++)
        total += lengths && lengths[i] ? lengths[i] : strlen(strings[i]);
    char *src = malloc(total + 1);
    if (!src) return prog; /* untracked: builds go straight to the driver */
    size_t off = 0;
    for (cl_uint i = 0; i < count; i++) {
        size_t n = lengths && lengths[i] ? lengths[i] : strlen(strings[i]);
        memcpy(src + off, strings[i], n);
        off += n;
    }
    src[total] = 0;
    if (!new_record(prog, ctx, KEY_SOURCE, src, total)) free(src);
    return prog;
}

static int context_devices(cl_context ctx, cl_device_id **devs, cl_uint *n)
{
    size_t size = 0;
    if (real->clGetContextInfo(ctx, CL_CONTEXT_DEVICES, 0, NULL, &size) != CL_SUCCESS || !size) return -1;
    *devs = malloc(size);
    if (!*devs) return -1;
    if (real->clGetContextInfo(ctx, CL_CONTEXT_DEVICES, size, *devs, NULL) != CL_SUCCESS) {
        free(*devs);
        return -1;
    }
    *n = (cl_uint)(size / sizeof(cl_device_id));
    return 0;
}

cl_program pc_create_with_il(cl_context ctx, const void *il, size_t length, cl_int *errcode_ret)
{
    const struct clshim_config *cfg = config_get();
    cl_device_id *devs = NULL;
    cl_uint ndev = 0;
    int translate = 0;
    if (cfg->spirv && il && length && context_devices(ctx, &devs, &ndev) == 0) {
        int all_native = 1, all_spir = 1;
        for (cl_uint i = 0; i < ndev; i++) {
            const struct device_info *d = device_info(real, devs[i]);
            all_native &= d && d->has_native_il;
            all_spir &= d && d->has_spir;
        }
        translate = !all_native && all_spir;
        if (!all_native && !all_spir)
            LOG_ONCE(LOG_INFO, "a device without IL or SPIR support: clCreateProgramWithIL is passed to the "
                               "driver unchanged");
    }
    free(devs);
    if (!translate) {
        if (!real->clCreateProgramWithIL) {
            LOG_ONCE(LOG_WARN, "the OpenCL loader has no clCreateProgramWithIL");
            if (errcode_ret) *errcode_ret = CL_INVALID_OPERATION;
            return NULL;
        }
        cl_program prog = real->clCreateProgramWithIL(ctx, il, length, errcode_ret);
        if (prog) {
            char *copy = malloc(length);
            if (copy) {
                memcpy(copy, il, length);
                if (!new_record(prog, ctx, KEY_IL, copy, length)) free(copy);
            }
        }
        return prog;
    }
    struct spirv_scan *scan = malloc(sizeof *scan);
    char *copy = malloc(length);
    if (!scan || !copy) {
        free(scan);
        free(copy);
        if (errcode_ret) *errcode_ret = CL_OUT_OF_HOST_MEMORY;
        return NULL;
    }
    if (spirv_scan(il, length, scan) != 0) {
        log_msg(LOG_WARN, "clCreateProgramWithIL: invalid SPIR-V module: %s", scan->reason);
        free(scan);
        free(copy);
        if (errcode_ret) *errcode_ret = CL_INVALID_VALUE;
        return NULL;
    }
    /* The handle: an empty source program, so every object query works and
     * CL_PROGRAM_SOURCE is empty, as for any program made from IL. */
    const char *empty = "";
    cl_program prog = real->clCreateProgramWithSource(ctx, 1, &empty, NULL, errcode_ret);
    if (!prog) {
        free(scan);
        free(copy);
        return NULL;
    }
    memcpy(copy, il, length);
    struct pc_program *rec = new_record(prog, ctx, KEY_IL, copy, length);
    if (!rec) {
        real->clReleaseProgram(prog);
        free(scan);
        free(copy);
        if (errcode_ret) *errcode_ret = CL_OUT_OF_HOST_MEMORY;
        return NULL;
    }
    rec->translated = 1;
    rec->scan = scan;
    log_msg(LOG_DEBUG, "IL program %p: SPIR-V %u.%u, translated at build", (void *)prog, scan->version >> 16,
            (scan->version >> 8) & 0xff);
    return prog;
}

cl_int pc_set_spec_constant(cl_program prog, cl_uint spec_id, size_t spec_size, const void *spec_value)
{
    struct pc_program *rec = objmap_get(programs, prog);
    if (!rec || !rec->translated) {
        if (!real->clSetProgramSpecializationConstant) return CL_INVALID_OPERATION;
        return real->clSetProgramSpecializationConstant(prog, spec_id, spec_size, spec_value);
    }
    int known = 0;
    for (uint32_t i = 0; i < rec->scan->num_spec_ids; i++) known |= rec->scan->spec_ids[i] == spec_id;
    if (!known) return CL_INVALID_SPEC_ID;
    if (!spec_value || !(spec_size == 1 || spec_size == 2 || spec_size == 4 || spec_size == 8))
        return CL_INVALID_VALUE;
    pthread_mutex_lock(&rec->lock);
    size_t i;
    for (i = 0; i < rec->nspecs && rec->specs[i].id != spec_id; i++) {}
    if (i == rec->nspecs) {
        struct spec_value *ns = realloc(rec->specs, (rec->nspecs + 1) * sizeof *ns);
        if (!ns) {
            pthread_mutex_unlock(&rec->lock);
            return CL_OUT_OF_HOST_MEMORY;
        }
        rec->specs = ns;
        rec->nspecs++;
    }
    rec->specs[i].id = spec_id;
    rec->specs[i].size = spec_size;
    memset(rec->specs[i].value, 0, 8);
    memcpy(rec->specs[i].value, spec_value, spec_size);
    pthread_mutex_unlock(&rec->lock);
    return CL_SUCCESS;
}

/* ---- building ------------------------------------------------------------ */

static int cmp_spec(const void *a, const void *b)
{
    const struct spec_value *x = a, *y = b;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Nonzero when clshim caches nothing on this device (cache/quirks.h). */
static int stands_aside(const struct device_info *info)
{
    if (!(info->quirks & QUIRK_STAND_ASIDE_UNCACHED)) return 0;
    LOG_ONCE(LOG_INFO, "%s", quirk_description(QUIRK_STAND_ASIDE_UNCACHED));
    return 1;
}

/* The header fields of a source program's key (cache/preproc.h): -1, with
 * the key freed, when the program cannot be cached. */
static int source_headers(struct key_buf *k, const struct key_source *in, const struct device_info *info,
                          void *handle)
{
    char why[1024];
    enum preproc_route route;
    store *st = get_store(); /* opened first: the time below is the key's alone */
    uint64_t t0 = now_ns();
    if (preproc_add_headers(k, st, in, info->identity, &route, why, sizeof why) != 0) {
        STAT_ADD(proc_stats.uncacheable, 1);
        log_msg(LOG_INFO, "not caching program %p: %s", handle, why);
        key_free(k);
        return -1;
    }
    if (route != PREPROC_SCANNER)
        log_msg(LOG_INFO, "program %p: headers from %s in %.2f ms", handle,
                route == PREPROC_DIRECT ? "its manifest (direct mode)" : "the preprocessor",
                (now_ns() - t0) / 1e6);
    return 0;
}

/* Key material for one device; NULL key when the build must not be cached. */
static void derive_key(struct pc_program *rec, const char *options, struct pc_dev *d)
{
    const struct device_info *info = device_info(real, d->dev);
    if (!info || stands_aside(info)) return;
    struct key_buf k;
    key_begin(&k, rec->kind, options);
    key_add_text(&k, "device", info->identity);
    if (rec->translated) key_add_text(&k, "route", "spirv->spir");
    if (rec->nspecs) qsort(rec->specs, rec->nspecs, sizeof *rec->specs, cmp_spec);
    for (size_t i = 0; i < rec->nspecs; i++) {
        char name[32], value[24];
        uint64_t v = 0;
        memcpy(&v, rec->specs[i].value, 8);
        snprintf(name, sizeof name, "spec.%u", rec->specs[i].id);
        snprintf(value, sizeof value, "%zu:%016llx", rec->specs[i].size, (unsigned long long)v);
        key_add_text(&k, name, value);
    }
    if (rec->kind == KEY_SOURCE) {
        struct key_source in = {.source = rec->input, .len = rec->input_len, .options = options};
        if (source_headers(&k, &in, info, (void *)rec->handle) != 0) return;
    }
    key_add_blob(&k, "input", rec->input, rec->input_len);
    if (k.oom) {
        key_free(&k);
        return;
    }
    d->key = k.data;
    d->key_len = k.len;
    d->hash = key_hash(k.data, k.len);
}

/* Nonzero when reading the binaries of `prog` would make a device's driver
 * abort (QUIRK_LONG_KERNEL_NAME_CODEGEN): a kernel name is too long. */
static int binaries_unsafe(cl_program prog, size_t n, const struct pc_dev *want)
{
    int quirk = 0;
    for (size_t i = 0; i < n; i++) {
        const struct device_info *info = device_info(real, want[i].dev);
        quirk |= info && (info->quirks & QUIRK_LONG_KERNEL_NAME_CODEGEN);
    }
    size_t len = 0;
    if (!quirk || real->clGetProgramInfo(prog, CL_PROGRAM_KERNEL_NAMES, 0, NULL, &len) != CL_SUCCESS)
        return 0; /* a compiled object has no kernel names and nothing to generate */
    char *names = calloc(1, len + 1);
    if (!names || real->clGetProgramInfo(prog, CL_PROGRAM_KERNEL_NAMES, len, names, NULL) != CL_SUCCESS) {
        free(names);
        return 1;
    }
    size_t longest = 0;
    for (char *p = names; *p;) {
        size_t n = strcspn(p, ";");
        if (n > longest) longest = n;
        p += n + (p[n] == ';');
    }
    free(names);
    if (longest <= QUIRK_KERNEL_NAME_MAX) return 0;
    log_msg(LOG_INFO, "not caching program %p: a kernel name of %zu characters (%s)", (void *)prog, longest,
            quirk_description(QUIRK_LONG_KERNEL_NAME_CODEGEN));
    return 1;
}

static int read_binaries_locked(cl_program prog, size_t n, const struct pc_dev *want, void **bins, size_t *sizes);

/* Reads the binaries of `prog` for the given devices (in its device order).
 * One reader at a time: on PoCL the first read generates code and grows the
 * binary, so a second reader between another's size and bytes queries
 * would copy more than it allocated. */
static int read_binaries(cl_program prog, size_t n, const struct pc_dev *want, void **bins, size_t *sizes)
{
    static pthread_mutex_t one_reader = PTHREAD_MUTEX_INITIALIZER;
    if (binaries_unsafe(prog, n, want)) return -1;
    pthread_mutex_lock(&one_reader);
    int rc = read_binaries_locked(prog, n, want, bins, sizes);
    pthread_mutex_unlock(&one_reader);
    return rc;
}

static int read_binaries_locked(cl_program prog, size_t n, const struct pc_dev *want, void **bins, size_t *sizes)
{
    cl_uint ndev = 0;
    if (real->clGetProgramInfo(prog, CL_PROGRAM_NUM_DEVICES, sizeof ndev, &ndev, NULL) != CL_SUCCESS || !ndev)
        return -1;
    cl_device_id *devs = calloc(ndev, sizeof *devs);
    size_t *all_sizes = calloc(ndev, sizeof *all_sizes);
    unsigned char **all = calloc(ndev, sizeof *all);
    int rc = -1;
    if (!devs || !all_sizes || !all) goto out;
    if (real->clGetProgramInfo(prog, CL_PROGRAM_DEVICES, ndev * sizeof *devs, devs, NULL) != CL_SUCCESS ||
        real->clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, ndev * sizeof *all_sizes, all_sizes, NULL) !=
            CL_SUCCESS)
        goto out;
    for (cl_uint i = 0; i < ndev; i++) {
        int wanted = 0;
        for (size_t j = 0; j < n; j++) wanted |= want[j].dev == devs[i];
        if (wanted && all_sizes[i] && !(all[i] = malloc(all_sizes[i]))) goto out;
    }
    if (real->clGetProgramInfo(prog, CL_PROGRAM_BINARIES, ndev * sizeof *all, all, NULL) != CL_SUCCESS) goto out;
    rc = 0;
    for (size_t j = 0; j < n; j++) {
        bins[j] = NULL;
        sizes[j] = 0;
        for (cl_uint i = 0; i < ndev; i++)
            if (devs[i] == want[j].dev && all[i]) {
                bins[j] = all[i];
                sizes[j] = all_sizes[i];
                all[i] = NULL;
            }
        if (!bins[j]) rc = -1;
    }
out:
    for (cl_uint i = 0; i < ndev && all; i++) free(all[i]);
    free(all);
    free(all_sizes);
    free(devs);
    return rc;
}

static char *read_build_log(cl_program prog, cl_device_id dev)
{
    size_t n = 0;
    if (real->clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, 0, NULL, &n) != CL_SUCCESS) return strdup("");
    char *log = calloc(1, n + 1);
    if (log && real->clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, n, log, NULL) != CL_SUCCESS) log[0] = 0;
    return log;
}

static void key_prefix(struct cache_hash h, char out[17])
{
    char hex[33];
    key_hash_hex(h, hex);
    memcpy(out, hex, 16);
    out[16] = 0;
}

/* Waits for another process building the same key; 0 with the record when
 * it appeared, -1 when we should build (claim taken, or waited too long). */
static int wait_for_other_builder(store *st, const struct pc_dev *d, struct store_record *rec, void **arena,
                                  int *claimed)
{
    uint64_t wait_ms = config_get()->build_wait_ms;
    uint64_t deadline = now_ns() + wait_ms * 1000000u;
    unsigned sleep_us = 5000;
    for (;;) {
        int rc = store_claim_build(st, d->hash, wait_ms ? wait_ms : 1);
        if (rc == CLSHIM_OK) {
            *claimed = 1;
            /* The other builder may have stored and released just now. */
            if (store_get(st, d->hash, d->key, d->key_len, rec, arena) == CLSHIM_OK) return 0;
            return -1;
        }
        if (rc != CLSHIM_EBUSY) return -1;
        if (now_ns() > deadline) {
            log_msg(LOG_INFO, "waited %llu ms for another process compiling the same program; compiling here",
                    (unsigned long long)wait_ms);
            return -1;
        }
        usleep(sleep_us);
        if (sleep_us < 50000) sleep_us *= 2;
        if (store_get(st, d->hash, d->key, d->key_len, rec, arena) == CLSHIM_OK) return 0;
    }
}

struct lookup {
    memtier_entry *entry; /* pinned */
    int filling;          /* we own the fill */
    int claimed;          /* we hold the cross-process claim */
    int from_disk;
    int failed;           /* a concurrent build of the key failed: shared */
    int from_remote;      /* found on the remote tier (and stored locally) */
};

/* Translates the IL of rec to SPIR and creates the program from it. */
static cl_program translate_il(struct pc_program *rec, cl_uint ndev, const cl_device_id *devs, cl_int *err,
                               char *why, size_t why_len)
{
    const struct clshim_llvm_api *api = llvm_api();
    if (!api) {
        snprintf(why, why_len, "libclshim-llvm.so cannot be loaded");
        *err = CL_BUILD_PROGRAM_FAILURE;
        return NULL;
    }
    struct llvm_spec_const consts[64];
    size_t n = rec->nspecs < 64 ? rec->nspecs : 64;
    for (size_t i = 0; i < n; i++) {
        consts[i].id = rec->specs[i].id;
        consts[i].size = (uint32_t)rec->specs[i].size;
        memcpy(&consts[i].value, rec->specs[i].value, 8);
    }
    void *bc = NULL;
    size_t bc_size = 0;
    uint64_t t0 = now_ns();
    int rc = api->spirv_to_spir(rec->input, rec->input_len, consts, n, &bc, &bc_size, why, why_len);
    if (rc != 0) {
        *err = CL_BUILD_PROGRAM_FAILURE;
        return NULL;
    }
    STAT_ADD(stat_translations, 1);
    log_msg(LOG_INFO, "translated SPIR-V program %p to SPIR (%zu bytes) in %.1f ms", (void *)rec->handle,
            bc_size, (now_ns() - t0) / 1e6);
    const unsigned char **bins = calloc(ndev, sizeof *bins);
    size_t *sizes = calloc(ndev, sizeof *sizes);
    cl_program p = NULL;
    if (bins && sizes) {
        for (cl_uint i = 0; i < ndev; i++) {
            bins[i] = bc;
            sizes[i] = bc_size;
        }
        p = real->clCreateProgramWithBinary(rec->context, ndev, devs, sizes, bins, NULL, err);
    } else {
        *err = CL_OUT_OF_HOST_MEMORY;
    }
    free(bins);
    free(sizes);
    api->free(bc);
    if (!p) snprintf(why, why_len, "the driver refused the translated SPIR (error %d)", *err);
    return p;
}

static void set_effective(struct pc_program *rec, cl_program p)
{
    if (rec->effective) real->clReleaseProgram(rec->effective);
    rec->effective = p;
}

/* The driver's build: on the handle, or (translated IL) on a new program. */
static cl_int driver_build(struct pc_program *rec, cl_uint ndev, const cl_device_id *devs, const char *options)
{
    if (!rec->translated) {
        set_effective(rec, NULL);
        return real->clBuildProgram(rec->handle, ndev, devs, options, NULL, NULL);
    }
    char why[512] = "";
    cl_int err = CL_SUCCESS;
    cl_program p = translate_il(rec, ndev, devs, &err, why, sizeof why);
    if (!p) {
        log_msg(LOG_WARN, "cannot build IL program %p: %s", (void *)rec->handle, why);
        for (size_t i = 0; i < rec->ndevs; i++) {
            free(rec->devs[i].log);
            rec->devs[i].log = strdup(why);
        }
        return err;
    }
    cl_int rc = real->clBuildProgram(p, ndev, devs, options, NULL, NULL);
    /* Even a failed build stands in for the handle: the app's build log and
     * status queries are the driver's answers about it. */
    set_effective(rec, p);
    return rc;
}

static void release_program_object(void *program) { real->clReleaseProgram((cl_program)program); }

/* The binary of a hit entry; read from the attached program of another
 * context when only that is there. NULL when none can be had. */
static int retain_program_object(void *program)
{
    return real->clRetainProgram((cl_program)program) == CL_SUCCESS ? 0 : -1;
}

static const unsigned char *entry_binary(memtier_entry *e, const struct pc_dev *d, size_t *size)
{
    const unsigned char *bin = memtier_binary(e, size);
    if (bin) return bin;
    cl_program other = memtier_any_object_retain(e, retain_program_object);
    if (!other) return NULL;
    void *b = NULL;
    size_t n = 0;
    if (read_binaries(other, 1, d, &b, &n) == 0) memtier_refill(e, b, n);
    real->clReleaseProgram(other);
    free(b);
    return memtier_binary(e, size);
}

/* A hit: the record gets a program of its own made from the cached
 * binaries. Never the program object of another record, even in the same
 * context: program-scope variables and rebuilds belong to one app program
 * (share binaries, never program objects). */
static cl_int substitute(struct pc_program *rec, cl_uint ndev, const cl_device_id *devs, const char *options,
                         struct lookup *lk)
{
    {
        const unsigned char **bins = calloc(ndev, sizeof *bins);
        size_t *sizes = calloc(ndev, sizeof *sizes);
        cl_int *status = calloc(ndev, sizeof *status);
        cl_int err = CL_OUT_OF_HOST_MEMORY;
        cl_program p = NULL;
        int complete = bins && sizes && status;
        for (cl_uint i = 0; complete && i < ndev; i++)
            complete = (bins[i] = entry_binary(lk[i].entry, &rec->devs[i], &sizes[i])) != NULL;
        if (complete) p = real->clCreateProgramWithBinary(rec->context, ndev, devs, sizes, bins, status, &err);
        else if (bins && sizes && status) err = CL_INVALID_BINARY;
        free(bins);
        free(sizes);
        free(status);
        if (!p) return err;
        err = real->clBuildProgram(p, ndev, devs, options, NULL, NULL);
        if (err != CL_SUCCESS) {
            real->clReleaseProgram(p);
            return err;
        }
        set_effective(rec, p);
    }
    for (cl_uint i = 0; i < ndev; i++) {
        free(rec->devs[i].log);
        rec->devs[i].log = strdup(memtier_build_log(lk[i].entry));
    }
    return CL_SUCCESS;
}

/* What happens to a binary captured late, as the miss line says it. */
static const char *late_store_plan(void)
{
    const struct clshim_config *cfg = config_get();
    if (!cfg->cache || !get_store()) return "not stored (no persistent cache)";
    if (cfg->cache_readonly) return "not stored (read-only cache)";
    return "to be stored at its first use or release (not stored if neither happens before exit)";
}

/* Whether this build's binary is stored later (see CLSHIM_CAPTURE). */
static int capture_late(const struct pc_program *rec)
{
    const char *policy = config_get()->capture;
    if (!strcmp(policy, "build")) return 0;
    if (!strcmp(policy, "release")) return 1;
    /* "auto": the configuration accepts no other word. */
    int lazy = rec->ndevs > 0;
    for (size_t i = 0; i < rec->ndevs; i++) {
        const struct device_info *info = device_info(real, rec->devs[i].dev);
        lazy &= info && info->lazy_codegen;
    }
    return lazy;
}

/* A late capture: the in-memory tier gets the built program itself now;
 * the binary is read and stored when the program is released. */
static void keep_built(struct pc_program *rec, cl_program built, struct lookup *lk, uint64_t compile_ns)
{
    for (size_t i = 0; i < rec->ndevs; i++) {
        struct pc_dev *d = &rec->devs[i];
        if (!lk[i].filling) continue;
        STAT_ADD(proc_stats.misses, 1);
        char *log = read_build_log(built, d->dev);
        d->compile_ns = compile_ns / rec->ndevs;
        /* Attach before filling: waiters wake to the program. */
        if (real->clRetainProgram(built) == CL_SUCCESS) {
            memtier_attach(lk[i].entry, built, rec->context, release_program_object);
            d->attached = built;
        }
        memtier_fill(lk[i].entry, NULL, 0, log, d->compile_ns);
        lk[i].filling = 0;
        d->needs_capture = 1;
        d->stored_size = 0;
        /* Waiting processes want the binary captured at first use: the
         * claim stays, for CLAIM_GRACE_BUILDS builds' time at most. */
        if (lk[i].claimed && hold_claim(d->hash, CLAIM_GRACE_BUILDS * compile_ns) == 0) lk[i].claimed = 0;
        char prefix[17];
        key_prefix(d->hash, prefix);
        const struct device_info *info = device_info(real, d->dev);
        log_msg(LOG_INFO, "miss %s on '%s': compiled in %.1f ms, %s", prefix,
                info ? info->name : "?", d->compile_ns / 1e6, late_store_plan());
        free(log);
    }
}

static void store_built(struct pc_program *rec, cl_program built, struct lookup *lk, uint64_t compile_ns)
{
    store *st = get_store();
    size_t n = rec->ndevs;
    int any_key = 0; /* binaries are read only to be kept (uncacheable: none) */
    for (size_t i = 0; i < n; i++) any_key |= rec->devs[i].key != NULL || lk[i].filling;
    if (!any_key) return;
    void **bins = calloc(n, sizeof *bins);
    size_t *sizes = calloc(n, sizeof *sizes);
    if (!bins || !sizes || read_binaries(built, n, rec->devs, bins, sizes) != 0) {
        for (size_t i = 0; i < n; i++)
            if (lk[i].filling) {
                STAT_ADD(proc_stats.misses, 1);
                memtier_abandon(lk[i].entry), lk[i].entry = NULL, lk[i].filling = 0;
            }
        log_msg(LOG_INFO, "cannot read the built binaries of program %p; not cached", (void *)rec->handle);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        struct pc_dev *d = &rec->devs[i];
        if (!lk[i].filling) continue;
        STAT_ADD(proc_stats.misses, 1);
        char *log = read_build_log(built, d->dev);
        d->compile_ns = compile_ns / n;
        memtier_fill(lk[i].entry, bins[i], sizes[i], log, d->compile_ns);
        lk[i].filling = 0;
        d->needs_capture = 1;
        d->stored_size = sizes[i];
        char prefix[17];
        key_prefix(d->hash, prefix);
        const struct device_info *info = device_info(real, d->dev);
        if (st) {
            struct store_record sr = {bins[i], sizes[i], log ? log : "", d->compile_ns, (uint32_t)rec->kind,
                                      info ? info->name : ""};
            int rc = tier_put(st, d->hash, d->key, d->key_len, &sr);
            if (rc == CLSHIM_OK) STAT_ADD(proc_stats.stores, 1);
            else if (rc != CLSHIM_EREADONLY && rc != CLSHIM_ETOOBIG)
                LOG_ONCE(LOG_WARN, "cannot store a built program (%s); the app goes on uncached",
                         clshim_strerror(rc));
            log_msg(LOG_INFO, "miss %s on '%s': compiled in %.1f ms, %s %zu bytes", prefix,
                    info ? info->name : "?", d->compile_ns / 1e6, rc == CLSHIM_OK ? "stored" : "not stored",
                    sizes[i]);
        } else {
            log_msg(LOG_INFO, "miss %s on '%s': compiled in %.1f ms", prefix, info ? info->name : "?",
                    d->compile_ns / 1e6);
        }
        free(log);
    }
out:
    for (size_t i = 0; bins && i < n; i++) free(bins[i]);
    free(bins);
    free(sizes);
}

/* A failed build: counted as failed, logged once, and its error and log
 * filled into the in-memory tier so concurrent and later builds of the key
 * in this process answer the same without compiling again. */
static void share_failure(struct pc_program *rec, cl_program built, struct lookup *lk, cl_int err,
                          uint64_t compile_ns)
{
    STAT_ADD(stat_failed, 1);
    for (size_t i = 0; i < rec->ndevs; i++) {
        struct pc_dev *d = &rec->devs[i];
        char *log = d->log ? strdup(d->log) : read_build_log(built, d->dev);
        char prefix[17] = "(uncached)";
        if (d->key) key_prefix(d->hash, prefix);
        const struct device_info *info = device_info(real, d->dev);
        log_msg(LOG_INFO, "build failed %s on '%s' in %.1f ms (error %d)", prefix, info ? info->name : "?",
                compile_ns / rec->ndevs / 1e6, err);
        /* Only a compile error is the inputs' own: a transient fault (out
         * of resources) is not remembered, waiters then build themselves. */
        if (lk[i].filling && (err == CL_BUILD_PROGRAM_FAILURE || err == CL_INVALID_BUILD_OPTIONS))
            memtier_fail(lk[i].entry, err, log ? log : "", compile_ns / rec->ndevs);
        else if (lk[i].filling)
            memtier_abandon(lk[i].entry), lk[i].entry = NULL;
        lk[i].filling = 0;
        free(log);
    }
}

/* Looks every device's key up; returns 1 when all hit. */
static int lookup_all(struct pc_program *rec, struct lookup *lk)
{
    store *st = get_store();
    int all_hit, own_fill = 0;
    for (size_t i = 0; i < rec->ndevs; i++) {
        struct pc_dev *d = &rec->devs[i];
        if (!d->key) continue;
        /* Never wait for another thread while owning a fill: two builders
         * of overlapping device sets could otherwise wait on each other. */
        enum memtier_result r = memtier_acquire(d->hash, !own_fill, &lk[i].entry);
        if (r == MEMTIER_HIT && memtier_failure(lk[i].entry)) {
            lk[i].failed = 1; /* a build of this key failed in this process */
            continue;
        }
        if (r == MEMTIER_HIT && !memtier_servable(lk[i].entry)) {
            /* Its builder's program is gone and no bytes were kept. */
            memtier_discard(lk[i].entry);
            memtier_release(lk[i].entry);
            r = memtier_acquire(d->hash, !own_fill, &lk[i].entry);
        }
        if (r == MEMTIER_HIT) {
            STAT_ADD(stat_memory_hits, 1);
            continue;
        }
        if (r != MEMTIER_FILL) continue;
        lk[i].filling = own_fill = 1;
        if (!st) continue;
        struct store_record sr;
        void *arena = NULL;
        int rc = tier_get(st, d->hash, d->key, d->key_len, 1, &sr, &arena, &lk[i].from_remote);
        if (rc == CLSHIM_ENOTFOUND) rc = wait_for_other_builder(st, d, &sr, &arena, &lk[i].claimed) == 0
                                              ? CLSHIM_OK : CLSHIM_ENOTFOUND;
        if (log_enabled(LOG_DEBUG)) {
            char prefix[17];
            key_prefix(d->hash, prefix);
            log_msg(LOG_DEBUG, "lookup %s: %s", prefix, rc == CLSHIM_OK ? "found on disk" : clshim_strerror(rc));
        }
        if (rc == CLSHIM_OK) {
            memtier_fill(lk[i].entry, sr.binary, sr.binary_size, sr.build_log, sr.compile_ns);
            lk[i].filling = 0;
            lk[i].from_disk = 1;
            d->stored_size = sr.binary_size;
            store_record_free(arena);
            if (lk[i].claimed) store_release_build(st, d->hash), lk[i].claimed = 0;
            continue;
        }
        if (rc == CLSHIM_ECORRUPT || rc == CLSHIM_ECOLLISION)
            log_msg(LOG_WARN, "cache entry for program %p is %s; rebuilding it", (void *)rec->handle,
                    clshim_strerror(rc));
        if (!lk[i].claimed) store_claim_build(st, d->hash, config_get()->build_wait_ms), lk[i].claimed = 1;
    }
    all_hit = rec->ndevs > 0;
    for (size_t i = 0; i < rec->ndevs; i++) all_hit &= lk[i].entry && !lk[i].filling;
    return all_hit;
}

static void finish_lookups(struct pc_program *rec, struct lookup *lk)
{
    store *st = get_store();
    for (size_t i = 0; i < rec->ndevs; i++) {
        /* The fleet claim goes now unless a capture still owes the binary
         * (a push gave it up already; an uncacheable or failed build never
         * pushes). */
        if (!rec->devs[i].needs_capture && get_remote())
            remote_release(get_remote(), rec->devs[i].hash);
        if (lk[i].filling) memtier_abandon(lk[i].entry);
        else if (lk[i].entry) memtier_release(lk[i].entry);
        if (lk[i].claimed && st) store_release_build(st, rec->devs[i].hash);
    }
}

static cl_int build_program(cl_program prog, cl_uint num_devices, const cl_device_id *device_list,
                            const char *options, void(CL_CALLBACK *notify)(cl_program, void *), void *user_data)
{
    struct pc_program *rec = objmap_get(programs, prog);
    if (!rec) return real->clBuildProgram(prog, num_devices, device_list, options, notify, user_data);
    if ((num_devices == 0) != (device_list == NULL)) return CL_INVALID_VALUE;
    if (!notify && user_data) return CL_INVALID_VALUE;
    /* The driver refuses to rebuild a program with kernels attached; on a
     * hit it would not be asked, so refuse here as it would. */
    if (__atomic_load_n(&rec->nkernels, __ATOMIC_ACQUIRE)) return CL_INVALID_OPERATION;

    cl_device_id *owned = NULL;
    cl_uint ndev = num_devices;
    const cl_device_id *devs = device_list;
    if (!devs) {
        if (context_devices(rec->context, &owned, &ndev) != 0)
            return real->clBuildProgram(prog, num_devices, device_list, options, notify, user_data);
        devs = owned;
    }

    pthread_mutex_lock(&rec->lock);
    free_devs(rec);
    free(rec->options);
    rec->options = strdup(options ? options : "");
    rec->devs = calloc(ndev, sizeof *rec->devs);
    struct lookup *lk = calloc(ndev, sizeof *lk);
    cl_int err;
    if (!rec->devs || !lk || !rec->options) {
        free(lk);
        free_devs(rec);
        pthread_mutex_unlock(&rec->lock);
        free(owned);
        return rec->translated ? CL_OUT_OF_HOST_MEMORY
                               : real->clBuildProgram(prog, num_devices, device_list, options, notify, user_data);
    }
    rec->ndevs = ndev;
    for (cl_uint i = 0; i < ndev; i++) {
        rec->devs[i].dev = devs[i];
        if (config_get()->cache) derive_key(rec, options, &rec->devs[i]);
    }

    uint64_t t0 = now_ns();
    int all_hit = lookup_all(rec, lk);
    need_exit_handler(); /* the driver is loaded by now */
    err = CL_BUILD_PROGRAM_FAILURE;
    rec->failed = 0;
    int shared_failure = 0;
    for (cl_uint i = 0; all_hit && i < ndev; i++)
        if (lk[i].failed) shared_failure = memtier_failure(lk[i].entry);
    if (shared_failure) {
        /* Single flight shares failures: the app sees the driver's error,
         * status and log of the one build that ran. */
        set_effective(rec, NULL);
        rec->failed = 1;
        err = shared_failure;
        for (cl_uint i = 0; i < ndev; i++) {
            free(rec->devs[i].log);
            rec->devs[i].log = strdup(memtier_build_log(lk[i].entry));
            char prefix[17];
            key_prefix(rec->devs[i].hash, prefix);
            if (lk[i].failed)
                log_msg(LOG_INFO, "failed build %s shared: error %d, not compiled again", prefix, err);
        }
        STAT_ADD(stat_failed_shared, 1);
        all_hit = -1;
    } else if (all_hit) {
        err = substitute(rec, ndev, devs, options, lk);
        if (err == CL_SUCCESS) {
            double ms = (now_ns() - t0) / 1e6;
            for (cl_uint i = 0; i < ndev; i++) {
                char prefix[17];
                key_prefix(rec->devs[i].hash, prefix);
                uint64_t saved = memtier_compile_ns(lk[i].entry);
                const struct device_info *info = device_info(real, devs[i]);
                STAT_ADD(proc_stats.hits, 1);
                STAT_ADD(proc_stats.compile_ns_saved, saved > (uint64_t)(ms * 1e6) ? saved - (uint64_t)(ms * 1e6) : 0);
                log_msg(LOG_INFO, "hit %s on '%s' (%s): %.1f ms instead of %.1f ms", prefix, info ? info->name : "?",
                        lk[i].from_remote ? "remote" : lk[i].from_disk ? "disk" : "memory", ms,
                        saved / 1e6);
            }
        } else {
            /* The driver refused a cached binary: rebuild and replace it. */
            STAT_ADD(proc_stats.rejected, 1);
            LOG_ONCE(LOG_WARN, "the driver rejected a cached binary (error %d); rebuilding and replacing it", err);
            log_msg(LOG_INFO, "the driver rejected the cached binary of program %p (error %d); rebuilding",
                    (void *)prog, err);
            store *st = get_store();
            for (cl_uint i = 0; i < ndev; i++) {
                if (st) store_delete(st, rec->devs[i].hash);
                memtier_discard(lk[i].entry);
                memtier_release(lk[i].entry);
                lk[i].entry = NULL;
                /* Refill from the rebuild below, if nobody else pins it. */
                if (memtier_acquire(rec->devs[i].hash, 0, &lk[i].entry) == MEMTIER_FILL) lk[i].filling = 1;
            }
            all_hit = 0;
        }
    }
    if (!all_hit) {
        uint64_t b0 = now_ns();
        err = driver_build(rec, ndev, devs, options);
        uint64_t compile_ns = now_ns() - b0;
        cl_program built = rec->effective ? rec->effective : rec->handle;
        if (err == CL_SUCCESS && binaries_unsafe(built, rec->ndevs, rec->devs)) {
            /* Built, but its binary must never be read: not cached. */
            STAT_ADD(proc_stats.uncacheable, 1);
            for (size_t i = 0; i < rec->ndevs; i++) {
                if (lk[i].filling) memtier_abandon(lk[i].entry), lk[i].entry = NULL, lk[i].filling = 0;
                free(rec->devs[i].key);
                rec->devs[i].key = NULL;
            }
        }
        if (err != CL_SUCCESS) share_failure(rec, built, lk, err, compile_ns);
        else if (capture_late(rec)) keep_built(rec, built, lk, compile_ns);
        else store_built(rec, built, lk, compile_ns);
    }
    finish_lookups(rec, lk);
    free(lk);
    int late = 0;
    for (size_t i = 0; i < rec->ndevs; i++) late |= rec->devs[i].needs_capture;
    rec->ran = 0;
    pthread_mutex_unlock(&rec->lock);
    if (late) add_pending(rec);
    free(owned);
    if (notify) notify(prog, user_data);
    return err;
}

/* Stores the program's binary again when it changed since it was stored
 * (PoCL adds work-group functions compiled at first enqueue). */
/* Gives the in-memory tier the bytes of a program it was lent, before the
 * program goes, so later builds in this process still hit. */
static void keep_bytes_in_memory(struct cache_hash hash, const void *bin, size_t size)
{
    memtier_entry *e;
    if (memtier_acquire(hash, 0, &e) != MEMTIER_HIT) {
        if (e) memtier_abandon(e);
        return;
    }
    size_t have;
    if (!memtier_binary(e, &have)) memtier_refill(e, bin, size);
    memtier_release(e);
}

/* Whether capture() has anything to do (rec->lock held). */
static int capture_wanted(const struct pc_program *rec)
{
    int any = 0;
    for (size_t i = 0; i < rec->ndevs; i++)
        any |= (rec->devs[i].needs_capture && rec->devs[i].key) || rec->devs[i].attached;
    return any;
}

static void capture(struct pc_program *rec)
{
    store *st = get_store();
    if (!capture_wanted(rec)) return;
    cl_program built = rec->effective ? rec->effective : rec->handle;
    void **bins = calloc(rec->ndevs, sizeof *bins);
    size_t *sizes = calloc(rec->ndevs, sizeof *sizes);
    if (bins && sizes && read_binaries(built, rec->ndevs, rec->devs, bins, sizes) == 0) {
        for (size_t i = 0; i < rec->ndevs; i++) {
            struct pc_dev *d = &rec->devs[i];
            if (d->attached) keep_bytes_in_memory(d->hash, bins[i], sizes[i]);
            if (!st || !d->needs_capture || !d->key || sizes[i] == d->stored_size) continue;
            const struct device_info *info = device_info(real, d->dev);
            char *log = read_build_log(built, d->dev);
            struct store_record sr = {bins[i], sizes[i], log ? log : "", d->compile_ns, (uint32_t)rec->kind,
                                      info ? info->name : ""};
            int rc = tier_put(st, d->hash, d->key, d->key_len, &sr);
            char prefix[17];
            key_prefix(d->hash, prefix);
            if (rc == CLSHIM_OK) {
                STAT_ADD(proc_stats.stores, d->stored_size == 0);
                log_msg(LOG_INFO, "stored %s: %zu bytes%s", prefix, sizes[i],
                        d->stored_size ? " (replaces the one stored at build)" : "");
                d->stored_size = sizes[i];
            } else if (rc != CLSHIM_EREADONLY && rc != CLSHIM_ETOOBIG) {
                LOG_ONCE(LOG_WARN, "cannot store a built program (%s); the app goes on uncached",
                         clshim_strerror(rc));
            } else {
                log_msg(LOG_INFO, "not stored %s (%zu bytes): %s", prefix, sizes[i], clshim_strerror(rc));
            }
            free(log);
            d->needs_capture = 0;
        }
    }
    /* Stored or not, waiting processes have nothing more to wait for. */
    remote *rm = get_remote();
    for (size_t i = 0; i < rec->ndevs; i++) {
        drop_claim(rec->devs[i].hash);
        if (rm) remote_release(rm, rec->devs[i].hash); /* a no-op after the push above */
    }
    for (size_t i = 0; bins && i < rec->ndevs; i++) free(bins[i]);
    free(bins);
    free(sizes);
}

/* ---- compile and link ------------------------------------------------------
 * clCompileProgram is keyed like a build (plus the embedded headers' sources)
 * and a hit substitutes a program created from the compiled object. A link
 * is keyed by its options, the device and every input's compile key; a hit
 * returns a program created from the stored executable. The app's callback,
 * if any, is called after the (then synchronous) operation. */

static int device_list(cl_context ctx, cl_uint n, const cl_device_id *list, cl_device_id **owned, cl_uint *ndev,
                       const cl_device_id **devs)
{
    *owned = NULL;
    *ndev = n;
    *devs = list;
    if (list) return 0;
    if (context_devices(ctx, owned, ndev) != 0) return -1;
    *devs = *owned;
    return 0;
}

/* Looks up every device's key on disk; fills bins/sizes/logs when all hit. */
static int lookup_disk_all(struct pc_program *rec, const unsigned char **bins, size_t *sizes, void **arenas)
{
    store *st = get_store();
    if (!st) return 0;
    for (size_t i = 0; i < rec->ndevs; i++) {
        struct pc_dev *d = &rec->devs[i];
        struct store_record sr;
        if (!d->key || tier_get(st, d->hash, d->key, d->key_len, 0, &sr, &arenas[i], &d->from_remote) != CLSHIM_OK)
            return 0;
        bins[i] = sr.binary;
        sizes[i] = sr.binary_size;
        free(d->log);
        d->log = strdup(sr.build_log);
        d->compile_ns = sr.compile_ns;
        d->stored_size = sr.binary_size;
    }
    return rec->ndevs > 0;
}

static void log_hits(struct pc_program *rec, const char *what, double ms)
{
    for (size_t i = 0; i < rec->ndevs; i++) {
        char prefix[17];
        key_prefix(rec->devs[i].hash, prefix);
        const struct device_info *info = device_info(real, rec->devs[i].dev);
        STAT_ADD(proc_stats.hits, 1);
        uint64_t used = (uint64_t)(ms * 1e6);
        STAT_ADD(proc_stats.compile_ns_saved, rec->devs[i].compile_ns > used ? rec->devs[i].compile_ns - used : 0);
        log_msg(LOG_INFO, "hit %s on '%s' (%s, %s): %.1f ms instead of %.1f ms", prefix, info ? info->name : "?",
                rec->devs[i].from_remote ? "remote" : "disk", what, ms, rec->devs[i].compile_ns / 1e6);
    }
}

static cl_int compile_program(cl_program prog, cl_uint num_devices, const cl_device_id *device_list_in,
                              const char *options, cl_uint num_headers, const cl_program *headers,
                              const char **header_names, void(CL_CALLBACK *notify)(cl_program, void *),
                              void *user_data)
{
    struct pc_program *rec = objmap_get(programs, prog);
    int cacheable = rec && !rec->translated && rec->kind == KEY_SOURCE && config_get()->cache &&
                    (num_devices == 0) == (device_list_in == NULL) && (notify || !user_data) &&
                    (num_headers == 0) == (headers == NULL) && (num_headers == 0) == (header_names == NULL);
    const struct pc_program **hrecs = num_headers ? calloc(num_headers, sizeof *hrecs) : NULL;
    for (cl_uint i = 0; cacheable && i < num_headers; i++) {
        hrecs[i] = objmap_get(programs, headers[i]);
        cacheable = hrecs[i] && hrecs[i]->kind == KEY_SOURCE && header_names[i];
    }
    cl_device_id *owned = NULL;
    cl_uint ndev = 0;
    const cl_device_id *devs = NULL;
    if (!cacheable || (num_headers && !hrecs) ||
        device_list(rec->context, num_devices, device_list_in, &owned, &ndev, &devs) != 0) {
        free(hrecs);
        return real->clCompileProgram(prog, num_devices, device_list_in, options, num_headers, headers, header_names,
                                      notify, user_data);
    }
    if (__atomic_load_n(&rec->nkernels, __ATOMIC_ACQUIRE)) {
        free(owned);
        free(hrecs);
        return CL_INVALID_OPERATION; /* as the driver answers: kernels attached */
    }
    struct key_embedded *embedded = num_headers ? calloc(num_headers, sizeof *embedded) : NULL;
    pthread_mutex_lock(&rec->lock);
    /* A stand-in of an earlier compile hit never answers for this one. */
    set_effective(rec, NULL);
    free_devs(rec);
    free(rec->options);
    rec->options = strdup(options ? options : "");
    rec->devs = calloc(ndev, sizeof *rec->devs);
    rec->ndevs = rec->devs ? ndev : 0;
    for (cl_uint i = 0; i < rec->ndevs; i++) {
        struct pc_dev *d = &rec->devs[i];
        d->dev = devs[i];
        const struct device_info *info = device_info(real, d->dev);
        if (!info || stands_aside(info)) continue;
        struct key_buf k;
        key_begin(&k, KEY_COMPILE, options);
        key_add_text(&k, "device", info->identity);
        for (cl_uint h = 0; h < num_headers; h++) {
            char name[1100];
            snprintf(name, sizeof name, "embedded-header %s", header_names[h]);
            key_add_blob(&k, name, hrecs[h]->input, hrecs[h]->input_len);
            if (embedded) embedded[h] = (struct key_embedded){header_names[h], hrecs[h]->input, hrecs[h]->input_len};
        }
        struct key_source in = {rec->input, rec->input_len, options, embedded, embedded ? num_headers : 0};
        if ((num_headers && !embedded) || source_headers(&k, &in, info, (void *)prog) != 0) {
            key_free(&k);
            continue;
        }
        if (k.oom) {
            key_free(&k);
            continue;
        }
        key_add_blob(&k, "input", rec->input, rec->input_len);
        d->key = k.data;
        d->key_len = k.len;
        d->hash = key_hash(k.data, k.len);
    }
    free(hrecs);
    free(embedded);
    int any_key = 0;
    for (size_t i = 0; i < rec->ndevs; i++) any_key |= rec->devs[i].key != NULL;
    const unsigned char **bins = calloc(ndev, sizeof *bins);
    size_t *sizes = calloc(ndev, sizeof *sizes);
    void **arenas = calloc(ndev, sizeof *arenas);
    cl_int err = CL_OUT_OF_HOST_MEMORY;
    uint64_t t0 = now_ns();
    need_exit_handler();
    if (bins && sizes && arenas && lookup_disk_all(rec, bins, sizes, arenas)) {
        cl_program p = real->clCreateProgramWithBinary(rec->context, ndev, devs, sizes, bins, NULL, &err);
        if (p) {
            set_effective(rec, p);
            /* PoCL refuses binary queries on the unbuilt stand-in: they are
             * answered from these bytes. */
            for (cl_uint i = 0; i < ndev; i++)
                if ((rec->devs[i].object = malloc(sizes[i] ? sizes[i] : 1))) {
                    memcpy(rec->devs[i].object, bins[i], sizes[i]);
                    rec->devs[i].object_size = sizes[i];
                }
            log_hits(rec, "compiled object", (now_ns() - t0) / 1e6);
        } else {
            STAT_ADD(proc_stats.rejected, 1);
        }
    }
    for (cl_uint i = 0; arenas && i < ndev; i++) store_record_free(arenas[i]);
    free(arenas);
    if (!rec->effective) {
        for (size_t i = 0; i < rec->ndevs; i++) {
            free(rec->devs[i].log);
            rec->devs[i].log = NULL;
        }
        uint64_t c0 = now_ns();
        err = real->clCompileProgram(prog, ndev, devs, options, num_headers, headers, header_names, NULL, NULL);
        uint64_t compile_ns = now_ns() - c0;
        store *st = get_store();
        void **got = calloc(ndev, sizeof *got);
        /* Binaries are read only to be stored (a hashcat object is ~5 MB). */
        if (err == CL_SUCCESS && st && any_key && got &&
            read_binaries(prog, rec->ndevs, rec->devs, got, sizes) == 0) {
            for (size_t i = 0; i < rec->ndevs; i++) {
                struct pc_dev *d = &rec->devs[i];
                if (!d->key) continue;
                char *log = read_build_log(prog, d->dev);
                const struct device_info *info = device_info(real, d->dev);
                d->compile_ns = compile_ns / rec->ndevs;
                struct store_record sr = {got[i], sizes[i], log ? log : "", d->compile_ns, KEY_COMPILE,
                                          info ? info->name : ""};
                int rc = tier_put(st, d->hash, d->key, d->key_len, &sr);
                STAT_ADD(proc_stats.misses, 1);
                if (rc == CLSHIM_OK) STAT_ADD(proc_stats.stores, 1);
                char prefix[17];
                key_prefix(d->hash, prefix);
                log_msg(LOG_INFO, "miss %s on '%s': compiled object in %.1f ms, %s %zu bytes", prefix,
                        info ? info->name : "?", d->compile_ns / 1e6, rc == CLSHIM_OK ? "stored" : "not stored",
                        sizes[i]);
                free(log);
            }
        }
        for (size_t i = 0; got && i < rec->ndevs; i++) free(got[i]);
        free(got);
    }
    free(bins);
    free(sizes);
    pthread_mutex_unlock(&rec->lock);
    free(owned);
    if (notify) notify(prog, user_data);
    return err;
}

/* ---- argument info for fusion ------------------------------------------------- */

/* `options` plus -cl-kernel-arg-info, or NULL when nothing needs adding:
 * PoCL answers clGetKernelArgInfo only for programs built with that option
 * or with no options at all. */
static char *options_with_arg_info(const char *options)
{
    static const char flag[] = "-cl-kernel-arg-info";
    if (!options) return NULL;
    for (const char *p = options; (p = strstr(p, flag)); p += sizeof flag - 1)
        if ((p == options || p[-1] == ' ' || p[-1] == '\t' || p[-1] == '\n') &&
            (!p[sizeof flag - 1] || p[sizeof flag - 1] == ' ' || p[sizeof flag - 1] == '\t' ||
             p[sizeof flag - 1] == '\n'))
            return NULL;
    size_t len = strlen(options);
    char *out = malloc(len + sizeof flag + 1);
    if (!out) return NULL;
    memcpy(out, options, len);
    out[len] = ' ';
    memcpy(out + len + 1, flag, sizeof flag);
    return out;
}

/* After a build with added options: queries answer the application's. */
static void restore_app_options(cl_program prog, const char *options)
{
    struct pc_program *rec = objmap_get(programs, prog);
    char *app = strdup(options ? options : "");
    if (!rec || !app) {
        free(app);
        return;
    }
    pthread_mutex_lock(&rec->lock);
    free(rec->options);
    rec->options = app;
    rec->answers_options = 1;
    pthread_mutex_unlock(&rec->lock);
}

cl_int pc_build(cl_program prog, cl_uint num_devices, const cl_device_id *device_list, const char *options,
                int want_arg_info, void(CL_CALLBACK *notify)(cl_program, void *), void *user_data)
{
    char *with = want_arg_info ? options_with_arg_info(options) : NULL;
    if (with) LOG_ONCE(LOG_INFO, "fusion is armed: programs built with options get -cl-kernel-arg-info added");
    cl_int rc = build_program(prog, num_devices, device_list, with ? with : options, notify, user_data);
    if (with) restore_app_options(prog, options);
    free(with);
    return rc;
}

cl_int pc_compile(cl_program prog, cl_uint num_devices, const cl_device_id *devices, const char *options,
                  int want_arg_info, cl_uint num_headers, const cl_program *headers, const char **header_names,
                  void(CL_CALLBACK *notify)(cl_program, void *), void *user_data)
{
    char *with = want_arg_info ? options_with_arg_info(options) : NULL;
    cl_int rc = compile_program(prog, num_devices, devices, with ? with : options, num_headers, headers,
                                header_names, notify, user_data);
    if (with) restore_app_options(prog, options);
    free(with);
    return rc;
}

cl_program pc_link(cl_context ctx, cl_uint num_devices, const cl_device_id *device_list_in, const char *options,
                   cl_uint num_inputs, const cl_program *inputs, void(CL_CALLBACK *notify)(cl_program, void *),
                   void *user_data, cl_int *errcode_ret)
{
    cl_program *mapped = num_inputs && inputs ? calloc(num_inputs, sizeof *mapped) : NULL;
    if (!mapped || (num_devices == 0) != (device_list_in == NULL) || (!notify && user_data)) {
        free(mapped);
        return real->clLinkProgram(ctx, num_devices, device_list_in, options, num_inputs, inputs, notify, user_data,
                                   errcode_ret);
    }
    cl_device_id *owned = NULL;
    cl_uint ndev = 0;
    const cl_device_id *devs = NULL;
    int cacheable = config_get()->cache && device_list(ctx, num_devices, device_list_in, &owned, &ndev, &devs) == 0;
    struct pc_program *out = calloc(1, sizeof *out);
    struct pc_dev *dv = cacheable ? calloc(ndev, sizeof *dv) : NULL;
    cacheable = cacheable && out && dv;
    /* Inputs: the program standing in for each (a hit's compiled object). */
    for (cl_uint i = 0; i < num_inputs; i++) {
        struct pc_program *in = objmap_get(programs, inputs[i]);
        if (in) pthread_mutex_lock(&in->lock);
        mapped[i] = in && in->effective ? in->effective : inputs[i];
        if (mapped[i] != inputs[i] && real->clRetainProgram(mapped[i]) != CL_SUCCESS)
            mapped[i] = inputs[i]; /* the driver then answers for the input itself */
        for (cl_uint d = 0; cacheable && d < ndev; d++) {
            const struct pc_dev *found = NULL;
            for (size_t j = 0; in && j < in->ndevs; j++)
                if (in->devs[j].dev == devs[d] && in->devs[j].key) found = &in->devs[j];
            if (!found) {
                cacheable = 0;
                break;
            }
            if (i == 0) {
                const struct device_info *info = device_info(real, devs[d]);
                struct key_buf k;
                key_begin(&k, KEY_LINK, options);
                key_add_text(&k, "device", info ? info->identity : "");
                dv[d].key = k.data;
                dv[d].key_len = k.len;
                cacheable = info && !k.oom;
            }
            char hex[33];
            key_hash_hex(found->hash, hex);
            struct key_buf k = {dv[d].key, dv[d].key_len, dv[d].key_len, 0};
            key_add_text(&k, "input-key", hex);
            dv[d].key = k.data;
            dv[d].key_len = k.len;
            cacheable = cacheable && !k.oom;
        }
        if (in) pthread_mutex_unlock(&in->lock);
    }
    cl_program result = NULL;
    cl_int err = CL_SUCCESS;
    if (cacheable) {
        out->context = ctx;
        out->kind = KEY_LINK;
        out->refs = 1;
        out->devs = dv;
        out->ndevs = ndev;
        out->options = strdup(options ? options : "");
        pthread_mutex_init(&out->lock, NULL);
        for (cl_uint d = 0; d < ndev; d++) {
            dv[d].dev = devs[d];
            dv[d].hash = key_hash(dv[d].key, dv[d].key_len);
        }
        const unsigned char **bins = calloc(ndev, sizeof *bins);
        size_t *sizes = calloc(ndev, sizeof *sizes);
        void **arenas = calloc(ndev, sizeof *arenas);
        uint64_t t0 = now_ns();
        if (bins && sizes && arenas && lookup_disk_all(out, bins, sizes, arenas)) {
            result = real->clCreateProgramWithBinary(ctx, ndev, devs, sizes, bins, NULL, &err);
            if (result && real->clBuildProgram(result, ndev, devs, options, NULL, NULL) != CL_SUCCESS) {
                real->clReleaseProgram(result);
                result = NULL;
            }
            if (result) {
                out->answers_options = 1;
                log_hits(out, "linked program", (now_ns() - t0) / 1e6);
            } else {
                STAT_ADD(proc_stats.rejected, 1);
            }
        }
        for (cl_uint d = 0; arenas && d < ndev; d++) store_record_free(arenas[d]);
        free(arenas);
        free(bins);
        free(sizes);
    }
    if (!result) {
        if (out && out->devs)
            for (cl_uint d = 0; d < ndev; d++) {
                free(dv[d].log);
                dv[d].log = NULL;
            }
        uint64_t t0 = now_ns();
        need_exit_handler();
        result = real->clLinkProgram(ctx, num_devices, device_list_in, options, num_inputs, mapped, NULL, NULL, &err);
        uint64_t link_ns = now_ns() - t0;
        if (result && cacheable) {
            out->handle = result;
            for (cl_uint d = 0; d < ndev; d++) {
                dv[d].compile_ns = link_ns / ndev;
                dv[d].needs_capture = 1;
                STAT_ADD(proc_stats.misses, 1);
                char prefix[17];
                key_prefix(dv[d].hash, prefix);
                log_msg(LOG_INFO, "miss %s: linked in %.1f ms, %s", prefix, link_ns / 1e6, late_store_plan());
            }
            if (!capture_late(out)) capture(out);
        }
    }
    if (result && cacheable) {
        out->handle = result;
        if (objmap_put(programs, result, out) != 0) cacheable = 0;
        else if (dv[0].needs_capture) add_pending(out);
    }
    if (!(result && cacheable)) {
        if (out) {
            out->devs = dv;
            out->ndevs = dv ? ndev : 0;
            free_devs(out);
            free(out->options);
            if (out->refs) pthread_mutex_destroy(&out->lock);
            free(out);
        }
    }
    for (cl_uint i = 0; i < num_inputs; i++)
        if (mapped[i] != inputs[i]) real->clReleaseProgram(mapped[i]);
    free(mapped);
    free(owned);
    if (errcode_ret) *errcode_ret = err;
    if (notify && result) notify(result, user_data);
    return result;
}

/* ---- queries ------------------------------------------------------------- */

static cl_int answer(const void *data, size_t n, size_t size, void *value, size_t *size_ret)
{
    if (value) {
        if (size < n) return CL_INVALID_VALUE;
        memcpy(value, data, n);
    }
    if (size_ret) *size_ret = n;
    return CL_SUCCESS;
}

/* CL_PROGRAM_BINARY_SIZES / CL_PROGRAM_BINARIES after a compile hit, from
 * the compiled objects in hand, in the handle's device order (0 / untouched
 * for a device without one, as the driver answers). Returns 1 when it
 * answered into *rc, 0 when the driver answers. */
static int answer_objects(struct pc_program *rec, cl_program_info param, size_t size, void *value, size_t *size_ret,
                          cl_int *rc)
{
    cl_uint n = 0;
    if (real->clGetProgramInfo(rec->handle, CL_PROGRAM_NUM_DEVICES, sizeof n, &n, NULL) != CL_SUCCESS || !n)
        return 0;
    cl_device_id *devs = calloc(n, sizeof *devs);
    if (!devs || real->clGetProgramInfo(rec->handle, CL_PROGRAM_DEVICES, n * sizeof *devs, devs, NULL) != CL_SUCCESS) {
        free(devs);
        return 0;
    }
    pthread_mutex_lock(&rec->lock);
    int have = 0;
    for (size_t i = 0; i < rec->ndevs; i++) have |= rec->devs[i].object != NULL;
    size_t entry = param == CL_PROGRAM_BINARY_SIZES ? sizeof(size_t) : sizeof(unsigned char *);
    if (have) {
        *rc = CL_SUCCESS;
        if (size_ret) *size_ret = n * entry;
        if (value && size < n * entry) *rc = CL_INVALID_VALUE;
        for (cl_uint j = 0; value && *rc == CL_SUCCESS && j < n; j++) {
            const struct pc_dev *d = NULL;
            for (size_t i = 0; i < rec->ndevs; i++)
                if (rec->devs[i].dev == devs[j] && rec->devs[i].object) d = &rec->devs[i];
            if (param == CL_PROGRAM_BINARY_SIZES) ((size_t *)value)[j] = d ? d->object_size : 0;
            else if (d && ((unsigned char **)value)[j]) memcpy(((unsigned char **)value)[j], d->object, d->object_size);
        }
    }
    pthread_mutex_unlock(&rec->lock);
    free(devs);
    return have;
}

/* The program that answers `param` into *out, holding a reference the
 * caller drops; or the driver's error of that retain (then nothing to drop). */
static cl_int program_for(struct pc_program *rec, int about_build, cl_program *out)
{
    pthread_mutex_lock(&rec->lock);
    cl_program p = about_build && rec->effective ? rec->effective : rec->handle;
    cl_int rc = real->clRetainProgram(p);
    pthread_mutex_unlock(&rec->lock);
    *out = rc == CL_SUCCESS ? p : NULL;
    return rc;
}

cl_int pc_get_program_info(cl_program prog, cl_program_info param, size_t size, void *value, size_t *size_ret)
{
    struct pc_program *rec = objmap_get(programs, prog);
    if (!rec) return real->clGetProgramInfo(prog, param, size, value, size_ret);
    if (param == CL_PROGRAM_IL && rec->translated) return answer(rec->input, rec->input_len, size, value, size_ret);
    if (param == CL_PROGRAM_REFERENCE_COUNT) {
        /* The handle's count includes references clshim holds (the
         * in-memory tier's, substituted kernels'); rec->refs is the app's
         * own plus one per kernel, as the driver counts them. */
        cl_int rc = real->clGetProgramInfo(prog, param, 0, NULL, NULL); /* validates as the driver would */
        cl_uint refs = __atomic_load_n(&rec->refs, __ATOMIC_RELAXED);
        return rc != CL_SUCCESS ? rc : answer(&refs, sizeof refs, size, value, size_ret);
    }
    cl_int rc;
    if ((param == CL_PROGRAM_BINARY_SIZES || param == CL_PROGRAM_BINARIES) &&
        answer_objects(rec, param, size, value, size_ret, &rc))
        return rc;
    int about_build = param == CL_PROGRAM_BINARY_SIZES || param == CL_PROGRAM_BINARIES ||
                      param == CL_PROGRAM_NUM_KERNELS || param == CL_PROGRAM_KERNEL_NAMES ||
                      param == CL_PROGRAM_SCOPE_GLOBAL_CTORS_PRESENT ||
                      param == CL_PROGRAM_SCOPE_GLOBAL_DTORS_PRESENT;
    cl_program p;
    if ((rc = program_for(rec, about_build, &p)) != CL_SUCCESS) return rc;
    rc = real->clGetProgramInfo(p, param, size, value, size_ret);
    real->clReleaseProgram(p);
    return rc;
}

cl_int pc_get_build_info(cl_program prog, cl_device_id dev, cl_program_build_info param, size_t size, void *value,
                         size_t *size_ret)
{
    struct pc_program *rec = objmap_get(programs, prog);
    if (!rec) return real->clGetProgramBuildInfo(prog, dev, param, size, value, size_ret);
    if (param == CL_PROGRAM_BUILD_OPTIONS || param == CL_PROGRAM_BUILD_LOG) {
        pthread_mutex_lock(&rec->lock);
        const char *text = NULL;
        if (param == CL_PROGRAM_BUILD_OPTIONS && (rec->effective || rec->answers_options)) text = rec->options;
        for (size_t i = 0; param == CL_PROGRAM_BUILD_LOG && i < rec->ndevs; i++)
            if (rec->devs[i].dev == dev && rec->devs[i].log) text = rec->devs[i].log;
        cl_int rc;
        if (text) {
            /* Validate the device as the driver would. */
            rc = real->clGetProgramBuildInfo(rec->handle, dev, CL_PROGRAM_BUILD_STATUS, 0, NULL, NULL);
            if (rc == CL_SUCCESS) rc = answer(text, strlen(text) + 1, size, value, size_ret);
        }
        pthread_mutex_unlock(&rec->lock);
        if (text) return rc;
    }
    if (param == CL_PROGRAM_BUILD_STATUS && __atomic_load_n(&rec->failed, __ATOMIC_RELAXED)) {
        cl_int rc = real->clGetProgramBuildInfo(rec->handle, dev, param, 0, NULL, NULL); /* validates */
        cl_build_status status = CL_BUILD_ERROR;
        return rc != CL_SUCCESS ? rc : answer(&status, sizeof status, size, value, size_ret);
    }
    cl_program p;
    cl_int rc = program_for(rec, 1, &p);
    if (rc != CL_SUCCESS) return rc;
    rc = real->clGetProgramBuildInfo(p, dev, param, size, value, size_ret);
    real->clReleaseProgram(p);
    return rc;
}

cl_int pc_retain_program(cl_program prog)
{
    struct pc_program *rec = objmap_get(programs, prog);
    cl_int rc = real->clRetainProgram(prog);
    if (rec && rc == CL_SUCCESS) __atomic_add_fetch(&rec->refs, 1, __ATOMIC_RELAXED);
    return rc;
}

/* Called before a release that may drop the handle's last reference: the
 * built binary is captured while the program still exists. */
static void before_last_reference(struct pc_program *rec)
{
    if (__atomic_load_n(&rec->refs, __ATOMIC_RELAXED) != 1) return;
    /* The worker must not hold the last reference: PoCL aborts when a
     * program outlives the app's release of its context (clinfo did). So a
     * queued capture is taken back and done here, a running one awaited. */
    pthread_mutex_lock(&pending_lock);
    int queued = rec->queued;
    pthread_mutex_unlock(&pending_lock);
    if (queued && capture_cancel_or_wait(rec)) capture_done(rec);
    pthread_mutex_lock(&rec->lock);
    if (rec->refs == 1) capture(rec);
    pthread_mutex_unlock(&rec->lock);
}

static void drop_reference(struct pc_program *rec)
{
    if (__atomic_sub_fetch(&rec->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
    objmap_remove(programs, rec->handle);
    pthread_mutex_lock(&pending_lock);
    int queued = rec->queued;
    rec->orphaned = queued;
    pthread_mutex_unlock(&pending_lock);
    if (queued) return; /* capture_done frees it */
    set_effective(rec, NULL);
    free_record(rec);
}

cl_int pc_release_program(cl_program prog)
{
    struct pc_program *rec = objmap_get(programs, prog);
    if (!rec) return real->clReleaseProgram(prog);
    before_last_reference(rec);
    cl_int rc = real->clReleaseProgram(prog);
    if (rc == CL_SUCCESS) drop_reference(rec);
    return rc;
}

/* ---- kernels -------------------------------------------------------------
 * Every kernel of a tracked program is tracked and counts in rec->refs, as
 * the driver counts it in the program's reference count. A kernel created
 * from the effective program ("substituted") also holds a real reference on
 * the handle, which the driver's kernel would hold on its own program. */

struct pc_kernel_rec {
    struct pc_program *prog;
    unsigned refs;
    int substituted;
    char name[];
};

static struct pc_kernel_rec *kernel_record(cl_kernel k) { return objmap_get(kernels, k); }
static struct pc_program *kernel_program(struct pc_kernel_rec *kr) { return kr->prog; }

/* Records a new kernel of rec. On failure (the error returned) the caller
 * releases the kernel and fails as the driver would have: an untracked
 * kernel would let a rebuild through that the driver refuses. */
static cl_int track_kernel(struct pc_program *rec, cl_kernel k, const char *name, int substituted)
{
    size_t n = strlen(name);
    struct pc_kernel_rec *kr = malloc(sizeof *kr + n + 1);
    if (!kr) return CL_OUT_OF_HOST_MEMORY;
    kr->prog = rec;
    kr->refs = 1;
    kr->substituted = substituted;
    memcpy(kr->name, name, n + 1);
    cl_int rc = substituted ? real->clRetainProgram(rec->handle) : CL_SUCCESS;
    if (rc != CL_SUCCESS) {
        free(kr);
        return rc;
    }
    if (objmap_put(kernels, k, kr) != 0) {
        if (substituted) real->clReleaseProgram(rec->handle);
        free(kr);
        return CL_OUT_OF_HOST_MEMORY;
    }
    __atomic_add_fetch(&rec->refs, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&rec->nkernels, 1, __ATOMIC_RELEASE);
    return CL_SUCCESS;
}

cl_kernel pc_create_kernel(cl_program prog, const char *name, cl_int *errcode_ret)
{
    struct pc_program *rec = objmap_get(programs, prog);
    if (!rec) return real->clCreateKernel(prog, name, errcode_ret);
    cl_program p;
    cl_int rc = program_for(rec, 1, &p);
    if (rc != CL_SUCCESS) {
        if (errcode_ret) *errcode_ret = rc;
        return NULL;
    }
    cl_kernel k = real->clCreateKernel(p, name, errcode_ret);
    if (k && (rc = track_kernel(rec, k, name, p != prog)) != CL_SUCCESS) {
        real->clReleaseKernel(k);
        k = NULL;
        if (errcode_ret) *errcode_ret = rc;
    }
    real->clReleaseProgram(p);
    return k;
}

cl_int pc_create_kernels(cl_program prog, cl_uint num, cl_kernel *out, cl_uint *num_ret)
{
    struct pc_program *rec = objmap_get(programs, prog);
    if (!rec) return real->clCreateKernelsInProgram(prog, num, out, num_ret);
    cl_program p;
    cl_int rc = program_for(rec, 1, &p);
    if (rc != CL_SUCCESS) return rc;
    cl_uint made = 0;
    rc = real->clCreateKernelsInProgram(p, num, out, &made);
    if (num_ret) *num_ret = made;
    cl_uint tracked = 0;
    if (rc == CL_SUCCESS && out)
        for (; tracked < made; tracked++) {
            char name[1024] = "";
            rc = real->clGetKernelInfo(out[tracked], CL_KERNEL_FUNCTION_NAME, sizeof name, name, NULL);
            if (rc == CL_SUCCESS) rc = track_kernel(rec, out[tracked], name, p != prog);
            if (rc != CL_SUCCESS) break;
        }
    if (rc != CL_SUCCESS && out && tracked < made) {
        /* All or nothing, as the driver: the tracked ones go as the app's would. */
        for (cl_uint i = 0; i < made; i++) {
            if (i < tracked) pc_release_kernel(out[i]);
            else real->clReleaseKernel(out[i]);
            out[i] = NULL;
        }
        if (num_ret) *num_ret = 0;
    }
    real->clReleaseProgram(p);
    return rc;
}

cl_kernel pc_clone_kernel(cl_kernel source, cl_int *errcode_ret)
{
    if (!real->clCloneKernel) {
        LOG_ONCE(LOG_WARN, "the OpenCL loader has no clCloneKernel");
        if (errcode_ret) *errcode_ret = CL_INVALID_OPERATION;
        return NULL;
    }
    cl_kernel k = real->clCloneKernel(source, errcode_ret);
    struct pc_kernel_rec *kr = k ? objmap_get(kernels, source) : NULL;
    cl_int rc = kr ? track_kernel(kr->prog, k, kr->name, kr->substituted) : CL_SUCCESS;
    if (rc != CL_SUCCESS) {
        real->clReleaseKernel(k);
        k = NULL;
        if (errcode_ret) *errcode_ret = rc;
    }
    return k;
}

cl_int pc_get_kernel_info(cl_kernel k, cl_kernel_info param, size_t size, void *value, size_t *size_ret)
{
    struct pc_kernel_rec *kr = param == CL_KERNEL_PROGRAM ? objmap_get(kernels, k) : NULL;
    if (kr && kr->substituted) {
        /* Validate the kernel first, as the driver would. */
        cl_int rc = real->clGetKernelInfo(k, CL_KERNEL_PROGRAM, 0, NULL, NULL);
        if (rc != CL_SUCCESS) return rc;
        return answer(&kr->prog->handle, sizeof(cl_program), size, value, size_ret);
    }
    return real->clGetKernelInfo(k, param, size, value, size_ret);
}

cl_int pc_retain_kernel(cl_kernel k)
{
    cl_int rc = real->clRetainKernel(k);
    struct pc_kernel_rec *kr = rc == CL_SUCCESS ? objmap_get(kernels, k) : NULL;
    if (kr) __atomic_add_fetch(&kr->refs, 1, __ATOMIC_RELAXED);
    return rc;
}

cl_int pc_release_kernel(cl_kernel k)
{
    struct pc_kernel_rec *kr = objmap_get(kernels, k);
    if (!kr) return real->clReleaseKernel(k);
    struct pc_program *rec = kr->prog;
    int last_kernel_ref = __atomic_load_n(&kr->refs, __ATOMIC_ACQUIRE) == 1;
    if (last_kernel_ref) before_last_reference(rec);
    cl_int rc = real->clReleaseKernel(k);
    if (rc != CL_SUCCESS || __atomic_sub_fetch(&kr->refs, 1, __ATOMIC_ACQ_REL) != 0) return rc;
    objmap_remove(kernels, k);
    if (kr->substituted) real->clReleaseProgram(rec->handle);
    free(kr);
    __atomic_sub_fetch(&rec->nkernels, 1, __ATOMIC_RELEASE);
    drop_reference(rec);
    return rc;
}

int pc_kernel_origin(cl_kernel k, struct pc_origin *out)
{
    memset(out, 0, sizeof *out);
    struct pc_kernel_rec *kr = objmap_get(kernels, k);
    if (!kr) return -1;
    /* The kernel holds its record (rec->refs): the record outlives this
     * call; its lock keeps a concurrent build from changing the options. */
    struct pc_program *rec = kr->prog;
    pthread_mutex_lock(&rec->lock);
    out->kind = rec->kind;
    out->input_len = rec->input_len;
    out->input = malloc(rec->input_len + 1);
    out->options = strdup(rec->options ? rec->options : "");
    out->name = strdup(kr->name);
    out->specs = rec->nspecs ? calloc(rec->nspecs, sizeof *out->specs) : NULL;
    int ok = out->input && out->options && out->name && (!rec->nspecs || out->specs);
    if (ok) {
        memcpy(out->input, rec->input, rec->input_len);
        ((char *)out->input)[rec->input_len] = 0;
        out->nspecs = rec->nspecs;
        for (size_t i = 0; i < rec->nspecs; i++) {
            out->specs[i].id = rec->specs[i].id;
            out->specs[i].size = (uint32_t)rec->specs[i].size;
            memcpy(&out->specs[i].value, rec->specs[i].value, 8);
        }
    }
    pthread_mutex_unlock(&rec->lock);
    if (!ok) {
        pc_origin_free(out);
        return -1;
    }
    return 0;
}

void pc_origin_free(struct pc_origin *o)
{
    free(o->input);
    free(o->options);
    free(o->name);
    free(o->specs);
    memset(o, 0, sizeof *o);
}

int pc_program_input(cl_program prog, enum key_kind *kind, void **input, size_t *input_len)
{
    struct pc_program *rec = objmap_get(programs, prog);
    if (!rec) return -1;
    pthread_mutex_lock(&rec->lock);
    *kind = rec->kind;
    *input_len = rec->input_len;
    *input = malloc(rec->input_len + 1);
    if (*input) {
        memcpy(*input, rec->input, rec->input_len);
        ((char *)*input)[rec->input_len] = 0;
    }
    pthread_mutex_unlock(&rec->lock);
    return *input ? 0 : -1;
}

/* ---- devices ------------------------------------------------------------- */

#define ADVERTISED_IL "SPIR-V_1.0 SPIR-V_1.1 SPIR-V_1.2 SPIR-V_1.3 SPIR-V_1.4"

cl_int pc_get_device_info(cl_device_id dev, cl_device_info param, size_t size, void *value, size_t *size_ret)
{
    const struct clshim_config *cfg = config_get();
    if (!cfg->advertise_il || !cfg->spirv ||
        (param != CL_DEVICE_IL_VERSION && param != CL_DEVICE_EXTENSIONS && param != CL_DEVICE_ILS_WITH_VERSION))
        return real->clGetDeviceInfo(dev, param, size, value, size_ret);
    const struct device_info *info = device_info(real, dev);
    if (!info || info->has_native_il || !info->has_spir)
        return real->clGetDeviceInfo(dev, param, size, value, size_ret);
    if (param == CL_DEVICE_IL_VERSION) return answer(ADVERTISED_IL, sizeof ADVERTISED_IL, size, value, size_ret);
    if (param == CL_DEVICE_ILS_WITH_VERSION) {
        cl_name_version v[5];
        memset(v, 0, sizeof v);
        for (int i = 0; i < 5; i++) {
            v[i].version = CL_MAKE_VERSION(1, i, 0);
            snprintf(v[i].name, sizeof v[i].name, "SPIR-V");
        }
        return answer(v, sizeof v, size, value, size_ret);
    }
    size_t n = 0;
    cl_int rc = real->clGetDeviceInfo(dev, CL_DEVICE_EXTENSIONS, 0, NULL, &n);
    if (rc != CL_SUCCESS) return rc;
    char *ext = calloc(1, n + 32);
    if (!ext) return CL_OUT_OF_HOST_MEMORY;
    rc = real->clGetDeviceInfo(dev, CL_DEVICE_EXTENSIONS, n, ext, NULL);
    if (rc == CL_SUCCESS) {
        size_t len = strlen(ext);
        snprintf(ext + len, 32, "%scl_khr_il_program", len && ext[len - 1] != ' ' ? " " : "");
        rc = answer(ext, strlen(ext) + 1, size, value, size_ret);
    }
    free(ext);
    return rc;
}

/* ---- derived programs ------------------------------------------------------ */

/* The device-independent half of a derived program (origin.h). */
static void derived_any_key(struct key_buf *k, const void *key, size_t key_len)
{
    key_begin(k, KEY_FUSION, "");
    key_add_text(k, "device", "any");
    key_add_blob(k, "derived-any-device", key, key_len);
}

int pc_derived_get(const void *key, size_t key_len, void **value, size_t *size)
{
    *value = NULL;
    *size = 0;
    store *st = config_get()->cache ? get_store() : NULL;
    if (!st) return -1;
    struct key_buf k;
    derived_any_key(&k, key, key_len);
    int rc = -1;
    struct store_record sr;
    void *arena = NULL;
    if (!k.oom && tier_get(st, key_hash(k.data, k.len), k.data, k.len, 0, &sr, &arena, NULL) == CLSHIM_OK) {
        if ((*value = malloc(sr.binary_size ? sr.binary_size : 1))) {
            memcpy(*value, sr.binary, sr.binary_size);
            *size = sr.binary_size;
            rc = 0;
        }
        store_record_free(arena);
    }
    key_free(&k);
    return rc;
}

void pc_derived_put(const void *key, size_t key_len, const void *value, size_t size, uint64_t make_ns)
{
    store *st = config_get()->cache ? get_store() : NULL;
    if (!st) return;
    struct key_buf k;
    derived_any_key(&k, key, key_len);
    struct store_record sr = {value, size, "", make_ns, KEY_FUSION, "any device"};
    if (!k.oom && tier_put(st, key_hash(k.data, k.len), k.data, k.len, &sr) == CLSHIM_OK)
        STAT_ADD(proc_stats.stores, 1);
    key_free(&k);
}

/* A derived program just built, to be stored. */
struct derived_pending {
    cl_program program;
    cl_device_id dev;
    struct cache_hash hash;
    char *key;
    size_t key_len;
    void *meta;
    size_t meta_size;
    uint64_t compile_ns;
};

static void store_derived(struct derived_pending *d)
{
    store *st = get_store();
    struct pc_dev want = {.dev = d->dev};
    void *bin = NULL;
    size_t size = 0;
    if (!st || read_binaries(d->program, 1, &want, &bin, &size) != 0) return;
    size_t total = 8 + d->meta_size + size;
    unsigned char *value = malloc(total);
    if (value) {
        uint64_t m = d->meta_size;
        memcpy(value, &m, 8);
        memcpy(value + 8, d->meta, d->meta_size);
        memcpy(value + 8 + d->meta_size, bin, size);
        const struct device_info *info = device_info(real, d->dev);
        struct store_record sr = {value, total, "", d->compile_ns, KEY_FUSION, info ? info->name : ""};
        if (tier_put(st, d->hash, d->key, d->key_len, &sr) == CLSHIM_OK) {
            STAT_ADD(proc_stats.stores, 1);
            char prefix[17];
            key_prefix(d->hash, prefix);
            log_msg(LOG_INFO, "stored derived program %s: %zu bytes", prefix, size);
        }
        free(value);
    }
    free(bin);
}

static void free_derived(struct derived_pending *d)
{
    real->clReleaseProgram(d->program);
    free(d->key);
    free(d->meta);
    free(d);
}

cl_program pc_build_derived(cl_context ctx, cl_device_id dev, const char *options, const void *key, size_t key_len,
                            pc_make_fn make, void *arg, void **meta, size_t *meta_size, cl_int *errcode_ret)
{
    cl_int err = CL_OUT_OF_HOST_MEMORY;
    *meta = NULL;
    *meta_size = 0;
    const struct device_info *info = device_info(real, dev);
    struct key_buf k;
    key_begin(&k, KEY_FUSION, options);
    key_add_text(&k, "device", info ? info->identity : "");
    key_add_blob(&k, "derived", key, key_len);
    if (k.oom || !info) {
        key_free(&k);
        if (errcode_ret) *errcode_ret = info ? CL_OUT_OF_HOST_MEMORY : CL_INVALID_DEVICE;
        return NULL;
    }
    struct cache_hash hash = key_hash(k.data, k.len);
    char prefix[17];
    key_prefix(hash, prefix);
    store *st = config_get()->cache && !stands_aside(info) ? get_store() : NULL;
    cl_program p = NULL;
    if (st) {
        struct store_record sr;
        void *arena = NULL;
        int from_remote;
        if (tier_get(st, hash, k.data, k.len, 0, &sr, &arena, &from_remote) == CLSHIM_OK) {
            uint64_t m = 0;
            if (sr.binary_size >= 8) memcpy(&m, sr.binary, 8);
            if (m <= sr.binary_size - 8 && (*meta = malloc(m ? m : 1))) {
                const unsigned char *bin = (const unsigned char *)sr.binary + 8 + m;
                size_t bin_size = sr.binary_size - 8 - m;
                memcpy(*meta, (const unsigned char *)sr.binary + 8, m);
                *meta_size = m;
                p = real->clCreateProgramWithBinary(ctx, 1, &dev, &bin_size, &bin, NULL, &err);
                if (p && (err = real->clBuildProgram(p, 1, &dev, options, NULL, NULL)) != CL_SUCCESS) {
                    real->clReleaseProgram(p);
                    p = NULL;
                }
                if (p) {
                    STAT_ADD(proc_stats.hits, 1);
                    log_msg(LOG_INFO, "hit derived program %s (%s)", prefix, from_remote ? "remote" : "disk");
                } else {
                    STAT_ADD(proc_stats.rejected, 1);
                    free(*meta);
                    *meta = NULL;
                    *meta_size = 0;
                }
            }
            store_record_free(arena);
        }
    }
    if (p) {
        key_free(&k);
        return p;
    }
    need_exit_handler();
    /* Miss: make the bitcode, build it, keep it for the store. */
    void *bc = NULL, *m = NULL;
    size_t bc_size = 0, m_size = 0;
    uint64_t t0 = now_ns();
    int made = make(arg, &bc, &bc_size, &m, &m_size);
    if (made != 0 && made != 1) {
        key_free(&k);
        if (errcode_ret) *errcode_ret = CL_BUILD_PROGRAM_FAILURE;
        return NULL;
    }
    const unsigned char *bin = bc;
    if (made == 1) { /* OpenCL C */
        const char *text = bc;
        p = real->clCreateProgramWithSource(ctx, 1, &text, &bc_size, &err);
    } else {
        p = real->clCreateProgramWithBinary(ctx, 1, &dev, &bc_size, &bin, NULL, &err);
    }
    free(bc);
    if (p && (err = real->clBuildProgram(p, 1, &dev, options, NULL, NULL)) != CL_SUCCESS) {
        real->clReleaseProgram(p);
        p = NULL;
    }
    if (!p) {
        free(m);
        key_free(&k);
        if (errcode_ret) *errcode_ret = err;
        return NULL;
    }
    if (config_get()->cache) {
        STAT_ADD(proc_stats.misses, 1);
        log_msg(LOG_INFO, "miss derived program %s: made and built in %.1f ms", prefix, (now_ns() - t0) / 1e6);
    } else {
        log_msg(LOG_INFO, "derived program %s made and built in %.1f ms (CLSHIM_CACHE=0: not cached)", prefix,
                (now_ns() - t0) / 1e6);
    }
    *meta = malloc(m_size ? m_size : 1);
    struct derived_pending *d = calloc(1, sizeof *d);
    if (!*meta || !d) {
        free(*meta);
        free(d);
        free(m);
        key_free(&k);
        real->clReleaseProgram(p);
        if (errcode_ret) *errcode_ret = CL_OUT_OF_HOST_MEMORY;
        return NULL;
    }
    memcpy(*meta, m, m_size);
    *meta_size = m_size;
    /* Stored now: a late capture would have to wait for a release the fusion
     * layer only makes at exit, when reading a PoCL binary is not safe. */
    if (real->clRetainProgram(p) == CL_SUCCESS) {
        *d = (struct derived_pending){p, dev, hash, k.data, k.len, m, m_size, now_ns() - t0};
        if (st) store_derived(d);
        free_derived(d);
    } else {
        free(m);
        key_free(&k);
        free(d);
    }
    if (errcode_ret) *errcode_ret = CL_SUCCESS;
    return p;
}

/* ---- exit ---------------------------------------------------------------- */


void pc_print_summary(void)
{
    struct store_stats s = proc_stats;
    double saved = s.compile_ns_saved / 1e6;
    log_msg(LOG_WARN,
            "summary: %llu hits (%llu from memory), %llu misses, %llu failed (%llu shared), %llu stored, %llu rejected, "
            "%llu uncacheable, %llu IL translations; compile time saved %.1f ms",
            (unsigned long long)s.hits, (unsigned long long)stat_memory_hits, (unsigned long long)s.misses,
            (unsigned long long)stat_failed, (unsigned long long)stat_failed_shared,
            (unsigned long long)s.stores, (unsigned long long)s.rejected, (unsigned long long)s.uncacheable,
            (unsigned long long)stat_translations, saved);
}

static void at_exit(void)
{
    if (idle_child) return; /* a forked child that built nothing: the parent reports */
    /* Late captures still pending are not stored (see program/origin.h): say so. */
    size_t never = npending;
    if (never && the_store && !config_get()->cache_readonly)
        log_msg(LOG_INFO, "%zu program%s built here never ran nor were released before exit: not stored", never,
                never == 1 ? "" : "s");
    /* No captures here (see progcache.h): only what is already known is
     * written — statistics and access times. */
    /* Captures still queued for the worker: within the exit budget. */
    capture_exit(config_get()->capture_exit_budget);
    store *st = the_store;
    drop_all_claims();
    if (the_remote) {
        struct remote_counters rc;
        remote_close(the_remote, &rc); /* waits a bounded time for queued pushes */
        the_remote = NULL;
        proc_stats.remote_hits = rc.hits, proc_stats.remote_misses = rc.misses;
        proc_stats.remote_errors = rc.errors, proc_stats.remote_corrupt = rc.corrupt;
        proc_stats.remote_pushes = rc.pushes;
    }
    if (st) {
        store_stats_add(st, &proc_stats);
        store_close(st);
        the_store = NULL;
    }
    const struct clshim_config *cfg = config_get();
    if (cfg->stats || log_enabled(LOG_INFO)) {
        if (!log_enabled(LOG_WARN)) log_set_level(LOG_WARN);
        pc_print_summary();
    }
}
