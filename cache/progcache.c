/* progcache.c — the program layer (see progcache.h for the design).
 *
 * Invariants:
 *  1. rec->refs mirrors the handle's reference count as the app and our
 *     substituted kernels hold it; the record dies with the handle.
 *  2. rec->effective, when set, is a built program holding one reference
 *     of ours; kernels created from it hold their own (driver) references.
 *  3. A memtier entry acquired with MEMTIER_FILL is filled or abandoned, and
 *     a cross-process claim released, before pc_build returns.
 */
#include "cache/progcache.h"

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
#include "cache/remote.h"
#include "cache/spirv_scan.h"
#include "cache/store.h"
#include "common/config.h"
#include "common/error.h"
#include "common/log.h"
#include "common/objmap.h"
#include "fusion/llvmload.h"

struct pc_dev {
    cl_device_id dev;
    struct cache_hash hash;
    char *key;              /* key material; NULL when the build is not cacheable */
    size_t key_len;
    char *log;              /* the original build's log when served from the cache */
    size_t stored_size;     /* binary size last stored; capture compares */
    uint64_t compile_ns;
    int needs_capture;      /* built by the driver here: store (again) at release */
    int claimed;            /* holds the cross-process build claim until stored */
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
    cl_program handle;
    cl_context context;
    enum key_kind kind;     /* KEY_SOURCE or KEY_IL */
    int translated;         /* IL for a device without IL: the handle is a placeholder */
    char *input;            /* source (concatenated) or IL bytes */
    size_t input_len;
    struct spirv_scan *scan; /* translated IL: its spec ids */
    pthread_mutex_t lock;   /* guards everything below */
    unsigned refs;
    struct spec_value *specs;
    size_t nspecs;
    cl_program effective;
    int answers_options;    /* a link served from the cache: options are ours to answer */
    char *options;
    struct pc_dev *devs;
    size_t ndevs;
};

static const struct cl_api *real;
static objmap *programs; /* app handle -> struct pc_program */
static objmap *kernels;  /* kernel from an effective program -> struct pc_kernel */

/* Per-process statistics, flushed to the store at exit. */
static struct store_stats proc_stats;
static uint64_t stat_memory_hits, stat_uncacheable, stat_translations;
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

/* ---- the remote tier (cache/remote.h), behind the store ------------------
 * Three call sites: remote_lookup() after a local miss, remote_store() after
 * a local store, remote_release() when a claimed build produced nothing. */

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

/* After a local miss: the remote tier, waiting for another runner compiling
 * the same key (fleet single flight). A hit is stored locally. */
static int remote_lookup(store *st, const struct pc_dev *d, struct store_record *sr, void **arena)
{
    remote *rm = get_remote();
    if (!rm || remote_fetch(rm, d->hash, d->key, d->key_len, config_get()->build_wait_ms, sr, arena) != CLSHIM_OK)
        return CLSHIM_ENOTFOUND;
    int rc = store_put(st, d->hash, d->key, d->key_len, sr);
    if (rc == CLSHIM_OK) STAT_ADD(proc_stats.stores, 1);
    return CLSHIM_OK;
}

/* After a local store: the same record to the remote tier, in the background
 * (this also gives up the fleet claim on it). */
static void remote_store(const struct pc_dev *d, const struct store_record *sr)
{
    remote *rm = get_remote();
    if (rm) remote_push(rm, d->hash, d->key, d->key_len, sr);
}

static void at_exit(void);
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;
static void register_exit(void) { atexit(at_exit); }

/* The exit handler stores late captures, which can make PoCL compile. exit()
 * runs handlers in reverse order of registration, and libLLVM (loaded with
 * PoCL) registers its static destructors when it loads: registering ours
 * only once a program has been built puts it before LLVM's teardown. */
static void need_exit_handler(void) { pthread_once(&exit_once, register_exit); }

void pc_init(const struct cl_api *real_api)
{
    real = real_api;
    programs = objmap_new();
    kernels = objmap_new();
    memtier_set_limit(config_get()->mem_cache_max);
}

/* ---- records ------------------------------------------------------------- */

static store *get_store(void);

/* ---- pending late captures (see progcache.h) ------------------------------ */

int pc_pending_captures;
static struct pc_program **pending;
static size_t npending, pending_cap;
static pthread_mutex_t pending_lock = PTHREAD_MUTEX_INITIALIZER;
static void capture(struct pc_program *rec);

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
        pthread_mutex_lock(&rec->lock);
        capture(rec);
        pthread_mutex_unlock(&rec->lock);
    }
    pthread_mutex_unlock(&pending_lock);
}

static void free_devs(struct pc_program *rec)
{
    for (size_t i = 0; i < rec->ndevs; i++) {
        if (rec->devs[i].claimed) store_release_build(get_store(), rec->devs[i].hash);
        if (rec->devs[i].attached) memtier_detach(rec->devs[i].hash, rec->devs[i].attached);
        free(rec->devs[i].key);
        free(rec->devs[i].log);
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
    if (!prog || !config_get()->cache) return prog;
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
        if (prog && cfg->cache) {
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

/* Key material for one device; NULL key when the build must not be cached. */
static void derive_key(struct pc_program *rec, const char *options, struct pc_dev *d)
{
    const struct device_info *info = device_info(real, d->dev);
    if (!info) return;
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
        char why[256];
        if (key_add_headers(&k, rec->input, rec->input_len, options, why, sizeof why) != 0) {
            STAT_ADD(stat_uncacheable, 1);
            log_msg(LOG_INFO, "not caching program %p: %s", (void *)rec->handle, why);
            key_free(&k);
            return;
        }
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

/* Reads the binaries of `prog` for the given devices (in its device order). */
static int read_binaries(cl_program prog, size_t n, const struct pc_dev *want, void **bins, size_t *sizes)
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
    int from_remote;      /* found on the remote tier (and stored locally) */
    int shared;           /* the effective program is shared from memory */
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
static void retain_program_object(void *program) { real->clRetainProgram((cl_program)program); }

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

static cl_int substitute(struct pc_program *rec, cl_uint ndev, const cl_device_id *devs, const char *options,
                         struct lookup *lk)
{
    cl_program shared =
        ndev == 1 ? memtier_object_retain(lk[0].entry, rec->context, retain_program_object) : NULL;
    if (shared) {
        /* Built in this process and context: share the program itself. */
        set_effective(rec, shared);
        lk[0].shared = 1;
    } else {
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

/* Whether this build's binary is stored later (see CLSHIM_CAPTURE). */
static int capture_late(const struct pc_program *rec)
{
    const char *policy = config_get()->capture;
    if (!strcmp(policy, "build")) return 0;
    if (!strcmp(policy, "release")) return 1;
    if (strcmp(policy, "auto"))
        LOG_ONCE(LOG_WARN, "CLSHIM_CAPTURE=%s is not valid (accepts auto, build or release); using auto", policy);
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
        char *log = read_build_log(built, d->dev);
        d->compile_ns = compile_ns / rec->ndevs;
        /* Attach before filling: waiters wake to the program. */
        real->clRetainProgram(built);
        memtier_attach(lk[i].entry, built, rec->context, release_program_object);
        d->attached = built;
        memtier_fill(lk[i].entry, NULL, 0, log, d->compile_ns);
        lk[i].filling = 0;
        d->needs_capture = 1;
        d->stored_size = 0;
        d->claimed = lk[i].claimed; /* held until the binary is stored */
        lk[i].claimed = 0;
        char prefix[17];
        key_prefix(d->hash, prefix);
        const struct device_info *info = device_info(real, d->dev);
        log_msg(LOG_INFO, "miss %s on '%s': compiled in %.1f ms, stored after first use", prefix,
                info ? info->name : "?", d->compile_ns / 1e6);
        free(log);
    }
}

static void store_built(struct pc_program *rec, cl_program built, struct lookup *lk, uint64_t compile_ns)
{
    store *st = get_store();
    size_t n = rec->ndevs;
    void **bins = calloc(n, sizeof *bins);
    size_t *sizes = calloc(n, sizeof *sizes);
    if (!bins || !sizes || read_binaries(built, n, rec->devs, bins, sizes) != 0) {
        for (size_t i = 0; i < n; i++)
            if (lk[i].filling) memtier_abandon(lk[i].entry), lk[i].entry = NULL, lk[i].filling = 0;
        log_msg(LOG_INFO, "cannot read the built binaries of program %p; not cached", (void *)rec->handle);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        struct pc_dev *d = &rec->devs[i];
        if (!lk[i].filling) continue;
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
            int rc = store_put(st, d->hash, d->key, d->key_len, &sr);
            remote_store(d, &sr);
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
        int rc = store_get(st, d->hash, d->key, d->key_len, &sr, &arena);
        if (rc == CLSHIM_ENOTFOUND && remote_lookup(st, d, &sr, &arena) == CLSHIM_OK)
            rc = CLSHIM_OK, lk[i].from_remote = 1;
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
        if (lk[i].filling && get_remote()) remote_release(get_remote(), rec->devs[i].hash);
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
    if (all_hit) {
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
                        lk[i].from_remote ? "remote"
                        : lk[i].from_disk ? "disk"
                        : lk[i].shared    ? "memory, shared program"
                                          : "memory",
                        ms, saved / 1e6);
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
        for (cl_uint i = 0; i < ndev; i++)
            if (lk[i].filling) STAT_ADD(proc_stats.misses, 1);
        uint64_t b0 = now_ns();
        err = driver_build(rec, ndev, devs, options);
        uint64_t compile_ns = now_ns() - b0;
        cl_program built = rec->effective ? rec->effective : rec->handle;
        if (err == CL_SUCCESS && capture_late(rec)) keep_built(rec, built, lk, compile_ns);
        else if (err == CL_SUCCESS) store_built(rec, built, lk, compile_ns);
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

static void capture(struct pc_program *rec)
{
    store *st = get_store();
    int any = 0;
    for (size_t i = 0; i < rec->ndevs; i++)
        any |= (rec->devs[i].needs_capture && rec->devs[i].key) || rec->devs[i].claimed || rec->devs[i].attached;
    if (!any) return;
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
            int rc = store_put(st, d->hash, d->key, d->key_len, &sr);
            remote_store(d, &sr);
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
    for (size_t i = 0; st && i < rec->ndevs; i++)
        if (rec->devs[i].claimed) {
            store_release_build(st, rec->devs[i].hash);
            rec->devs[i].claimed = 0;
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
        if (!d->key || store_get(st, d->hash, d->key, d->key_len, &sr, &arenas[i]) != CLSHIM_OK) return 0;
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
        log_msg(LOG_INFO, "hit %s on '%s' (disk, %s): %.1f ms instead of %.1f ms", prefix, info ? info->name : "?",
                what, ms, rec->devs[i].compile_ns / 1e6);
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
    pthread_mutex_lock(&rec->lock);
    free_devs(rec);
    free(rec->options);
    rec->options = strdup(options ? options : "");
    rec->devs = calloc(ndev, sizeof *rec->devs);
    rec->ndevs = rec->devs ? ndev : 0;
    for (cl_uint i = 0; i < rec->ndevs; i++) {
        struct pc_dev *d = &rec->devs[i];
        d->dev = devs[i];
        const struct device_info *info = device_info(real, d->dev);
        if (!info) continue;
        struct key_buf k;
        key_begin(&k, KEY_COMPILE, options);
        key_add_text(&k, "device", info->identity);
        for (cl_uint h = 0; h < num_headers; h++) {
            char name[1100];
            snprintf(name, sizeof name, "embedded-header %s", header_names[h]);
            key_add_blob(&k, name, hrecs[h]->input, hrecs[h]->input_len);
        }
        char why[256];
        if (key_add_headers(&k, rec->input, rec->input_len, options, why, sizeof why) != 0 || k.oom) {
            STAT_ADD(stat_uncacheable, 1);
            log_msg(LOG_INFO, "not caching the compile of program %p: %s", (void *)prog, k.oom ? "out of memory" : why);
            key_free(&k);
            continue;
        }
        key_add_blob(&k, "input", rec->input, rec->input_len);
        d->key = k.data;
        d->key_len = k.len;
        d->hash = key_hash(k.data, k.len);
    }
    free(hrecs);
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
        if (err == CL_SUCCESS && st && got && read_binaries(prog, rec->ndevs, rec->devs, got, sizes) == 0) {
            for (size_t i = 0; i < rec->ndevs; i++) {
                struct pc_dev *d = &rec->devs[i];
                if (!d->key) continue;
                char *log = read_build_log(prog, d->dev);
                const struct device_info *info = device_info(real, d->dev);
                d->compile_ns = compile_ns / rec->ndevs;
                struct store_record sr = {got[i], sizes[i], log ? log : "", d->compile_ns, KEY_COMPILE,
                                          info ? info->name : ""};
                int rc = store_put(st, d->hash, d->key, d->key_len, &sr);
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
        if (mapped[i] != inputs[i]) real->clRetainProgram(mapped[i]);
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
                log_msg(LOG_INFO, "miss %s: linked in %.1f ms, stored after first use", prefix, link_ns / 1e6);
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

/* The program that answers `param`, holding a reference the caller drops. */
static cl_program program_for(struct pc_program *rec, int about_build)
{
    pthread_mutex_lock(&rec->lock);
    cl_program p = about_build && rec->effective ? rec->effective : rec->handle;
    real->clRetainProgram(p);
    pthread_mutex_unlock(&rec->lock);
    return p;
}

cl_int pc_get_program_info(cl_program prog, cl_program_info param, size_t size, void *value, size_t *size_ret)
{
    struct pc_program *rec = objmap_get(programs, prog);
    if (!rec) return real->clGetProgramInfo(prog, param, size, value, size_ret);
    if (param == CL_PROGRAM_IL && rec->translated) return answer(rec->input, rec->input_len, size, value, size_ret);
    int about_build = param == CL_PROGRAM_BINARY_SIZES || param == CL_PROGRAM_BINARIES ||
                      param == CL_PROGRAM_NUM_KERNELS || param == CL_PROGRAM_KERNEL_NAMES ||
                      param == CL_PROGRAM_SCOPE_GLOBAL_CTORS_PRESENT ||
                      param == CL_PROGRAM_SCOPE_GLOBAL_DTORS_PRESENT;
    cl_program p = program_for(rec, about_build);
    cl_int rc = real->clGetProgramInfo(p, param, size, value, size_ret);
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
    cl_program p = program_for(rec, 1);
    cl_int rc = real->clGetProgramBuildInfo(p, dev, param, size, value, size_ret);
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
    pthread_mutex_lock(&rec->lock);
    if (rec->refs == 1) capture(rec);
    pthread_mutex_unlock(&rec->lock);
}

static void drop_reference(struct pc_program *rec)
{
    if (__atomic_sub_fetch(&rec->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
    objmap_remove(programs, rec->handle);
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

static void track_kernel(struct pc_program *rec, cl_kernel k, const char *name, int substituted)
{
    size_t n = strlen(name);
    struct pc_kernel_rec *kr = malloc(sizeof *kr + n + 1);
    if (!kr) return;
    kr->prog = rec;
    kr->refs = 1;
    kr->substituted = substituted;
    memcpy(kr->name, name, n + 1);
    if (substituted && real->clRetainProgram(rec->handle) != CL_SUCCESS) {
        free(kr);
        return;
    }
    if (objmap_put(kernels, k, kr) != 0) {
        if (substituted) real->clReleaseProgram(rec->handle);
        free(kr);
        return;
    }
    __atomic_add_fetch(&rec->refs, 1, __ATOMIC_RELAXED);
}

cl_kernel pc_create_kernel(cl_program prog, const char *name, cl_int *errcode_ret)
{
    struct pc_program *rec = objmap_get(programs, prog);
    if (!rec) return real->clCreateKernel(prog, name, errcode_ret);
    cl_program p = program_for(rec, 1);
    cl_kernel k = real->clCreateKernel(p, name, errcode_ret);
    if (k) track_kernel(rec, k, name, p != prog);
    real->clReleaseProgram(p);
    return k;
}

cl_int pc_create_kernels(cl_program prog, cl_uint num, cl_kernel *out, cl_uint *num_ret)
{
    struct pc_program *rec = objmap_get(programs, prog);
    if (!rec) return real->clCreateKernelsInProgram(prog, num, out, num_ret);
    cl_program p = program_for(rec, 1);
    cl_uint made = 0;
    cl_int rc = real->clCreateKernelsInProgram(p, num, out, &made);
    if (num_ret) *num_ret = made;
    if (rc == CL_SUCCESS && out)
        for (cl_uint i = 0; i < made; i++) {
            char name[1024] = "";
            real->clGetKernelInfo(out[i], CL_KERNEL_FUNCTION_NAME, sizeof name, name, NULL);
            track_kernel(rec, out[i], name, p != prog);
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
    if (kr) track_kernel(kr->prog, k, kr->name, kr->substituted);
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
    drop_reference(rec);
    return rc;
}

int pc_kernel_origin(cl_kernel k, int *kind, const void **input, size_t *input_len, const char **options,
                     const char **name)
{
    struct pc_kernel_rec *kr = objmap_get(kernels, k);
    if (!kr) return -1;
    *kind = kr->prog->kind;
    *input = kr->prog->input;
    *input_len = kr->prog->input_len;
    *options = kr->prog->options ? kr->prog->options : "";
    *name = kr->name;
    return 0;
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
        if (store_put(st, d->hash, d->key, d->key_len, &sr) == CLSHIM_OK) {
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
    store *st = config_get()->cache ? get_store() : NULL;
    cl_program p = NULL;
    if (st) {
        struct store_record sr;
        void *arena = NULL;
        if (store_get(st, hash, k.data, k.len, &sr, &arena) == CLSHIM_OK) {
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
                    log_msg(LOG_INFO, "hit derived program %s (disk)", prefix);
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
    if (make(arg, &bc, &bc_size, &m, &m_size) != 0) {
        key_free(&k);
        if (errcode_ret) *errcode_ret = CL_BUILD_PROGRAM_FAILURE;
        return NULL;
    }
    const unsigned char *bin = bc;
    p = real->clCreateProgramWithBinary(ctx, 1, &dev, &bc_size, &bin, NULL, &err);
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
    STAT_ADD(proc_stats.misses, 1);
    log_msg(LOG_INFO, "miss derived program %s: made and built in %.1f ms", prefix, (now_ns() - t0) / 1e6);
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
    real->clRetainProgram(p);
    /* Stored now: a late capture would have to wait for a release the fusion
     * layer only makes at exit, when reading a PoCL binary is not safe. */
    *d = (struct derived_pending){p, dev, hash, k.data, k.len, m, m_size, now_ns() - t0};
    if (st) store_derived(d);
    free_derived(d);
    if (errcode_ret) *errcode_ret = CL_SUCCESS;
    return p;
}

/* ---- exit ---------------------------------------------------------------- */


void pc_print_summary(void)
{
    struct store_stats s = proc_stats;
    double saved = s.compile_ns_saved / 1e6;
    log_msg(LOG_WARN,
            "summary: %llu hits (%llu from memory), %llu misses, %llu stored, %llu rejected, %llu uncacheable, "
            "%llu IL translations; compile time saved %.1f ms",
            (unsigned long long)s.hits, (unsigned long long)stat_memory_hits, (unsigned long long)s.misses,
            (unsigned long long)s.stores, (unsigned long long)s.rejected, (unsigned long long)stat_uncacheable,
            (unsigned long long)stat_translations, saved);
}

static void at_exit(void)
{
    /* No captures here (see progcache.h): only what is already known is
     * written — statistics and access times. */
    store *st = the_store;
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
