/* program.c — the program layer (see program.h for the design).
 *
 * Invariants:
 *  1. rec->refs mirrors the handle's reference count as the app and our
 *     substituted kernels hold it; the record dies with the handle.
 *  2. rec->effective, when set, is a built program holding one reference
 *     of ours; kernels created from it hold their own (driver) references.
 *  3. A flight that pipeline_begin() left filling is filled or abandoned, and
 *     a cross-process claim released, before pc_build returns.
 */
#include "program/program.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cache/device.h"
#include "cache/key.h"
#include "cache/pipeline.h"
#include "cache/quirks.h"
#include "cache/preproc.h"
#include "cache/spirv_scan.h"
#include "cache/store.h"
#include "common/config.h"
#include "common/error.h"
#include "common/extstr.h"
#include "common/log.h"
#include "common/objmap.h"
#include "compiler/llvmload.h"
#include "program/capture.h"
#include "program/capture_proc.h"
#include "compiler/route_a.h"

struct pc_dev {
    cl_device_id dev;
    struct pipeline_flight f; /* key (NULL: not cacheable), hash, compile time, the lookup */
    char *log;              /* the original build's log when served from the cache */
    void *object;           /* a compile hit: the compiled object in hand (owned) */
    size_t object_size;
    int needs_capture;      /* built by the driver here: store (again) at use, release or exit */
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
    int source_build;       /* built from source by clBuildProgram here (rec->lock) */
    int handed_off;         /* its captures went to the capture helper (rec->lock) */
    cl_program handle;
    cl_context context;
    enum key_kind kind;     /* KEY_SOURCE or KEY_IL */
    int translated;         /* IL for a device without IL: the handle is a placeholder */
    int to_ptx;             /* translated IL for devices that take PTX: route (a) (compiler/route_a.h) */
    char *input;            /* source (concatenated) or IL bytes */
    size_t input_len;
    struct spirv_scan *scan; /* translated IL: its spec ids */
    unsigned nkernels;      /* live kernels (atomic): a build or compile is refused then */
    pthread_mutex_t lock;   /* guards everything below */
    unsigned refs;
    struct spec_value *specs;
    size_t nspecs;
    cl_program effective;
    int answers_options;    /* a compile served from the cache: the driver never saw the options */
    int arg_info_added;     /* clshim added -cl-kernel-arg-info (fusion armed): not the app's */
    char *compile_options;  /* a compile hit's options as the driver would have had them */
    char *compile_answer;   /* what the driver answers for them (options_answer), once asked */
    int failed;             /* the last build's failure was shared: status is CL_BUILD_ERROR */
    char *options;
    char *driver_options;   /* what the driver was given (the key's), for a capture's build */
    char *cwd;              /* the working directory at the build (relative header paths) */
    struct pc_dev *devs;
    struct pipeline_flight *flights; /* one per device, parallel to devs */
    size_t ndevs;
};

static const struct cl_api *real;
static objmap *programs; /* app handle -> struct pc_program */
static objmap *kernels;  /* kernel from an effective program -> struct pc_kernel */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The device's name for log lines and records. */
static const char *device_name(cl_device_id dev)
{
    const struct device_info *info = device_info(real, dev);
    return info ? info->name : "?";
}

static void at_exit(void);
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;
static void register_exit(void) { atexit(at_exit); }

/* A child of fork() that has not built anything since: its exit handler
 * (inherited) prints and counts nothing. */
static atomic_int idle_child; /* builds on many threads clear it */
/* Builds of programs clshim did not create (build_program). */
static atomic_ulong foreign_builds;

/* The exit handler stores late captures, which can make PoCL compile. exit()
 * runs handlers in reverse order of registration, and libLLVM (loaded with
 * PoCL) registers its static destructors when it loads: registering ours
 * only once a program has been built puts it before LLVM's teardown. */
static void need_exit_handler(void)
{
    if (atomic_load_explicit(&idle_child, memory_order_relaxed))
        atomic_store_explicit(&idle_child, 0, memory_order_relaxed);
    pthread_once(&exit_once, register_exit);
}

static void pending_captures_reset(void);
static void capture_owed_at_exit(unsigned budget_ms);
static void owed_at_exit(void)
{
    if (!atomic_load_explicit(&idle_child, memory_order_relaxed)) capture_owed_at_exit(config_get()->capture_exit_budget);
}

/* Binaries still owed at exit are read then (capture_owed_at_exit). Reading
 * a PoCL binary generates code, and exit destroys the driver's lazily made
 * statics (LLVM's, made at its first build and first code generation) in
 * reverse order of creation: a handler registered before them would read
 * after their teardown (that crashed GEGL). So the handler is registered
 * again after each build that leaves a binary owed and at the first
 * synchronisation after a program's first run (at most twice per program);
 * the last one registered runs first, the others find nothing owed. */
static void arm_owed_capture_at_exit(void)
{
    if (config_get()->capture_exit_budget) atexit(owed_at_exit);
}

static void run_capture(void *item);
static void capture_done(void *item);

/* Every read of a program's binaries, clshim's and the app's, one at a
 * time: PoCL generates code at a program's first read, and two reads at
 * once (the capture worker's and the app's own CL_PROGRAM_BINARY_SIZES)
 * crashed in a clean root (test_cache, two devices). */
static pthread_mutex_t binary_reads = PTHREAD_MUTEX_INITIALIZER;

/* In the child of fork(): LMDB forbids using an environment opened before
 * the fork, and the parent's statistics and pending captures are the
 * parent's. The inherited store handle is dropped (not closed: closing
 * touches the parent's lock file) and reopened if the child builds. */
static void after_fork_in_child(void)
{
    binary_reads = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER; /* a worker may have held it */
    pipeline_after_fork_in_child();
    pending_captures_reset();
    capture_after_fork_in_child();
    capture_proc_after_fork_in_child();
    atomic_store_explicit(&idle_child, 1, memory_order_relaxed);
}

void pc_init(const struct cl_api *real_api)
{
    real = real_api;
    programs = objmap_new();
    kernels = objmap_new();
    pipeline_memory_setup(config_get()->mem_cache_max, config_get()->mem_cache);
    pthread_atfork(NULL, NULL, after_fork_in_child);
    capture_init(&(struct capture_ops){run_capture, capture_done});
    capture_set_exit_budget(config_get()->capture_exit_budget);
    capture_set_defer_max(config_get()->capture_defer_max);
}

/* ---- records ------------------------------------------------------------- */

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
static int hand_to_helper(struct pc_program *rec);

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
    pthread_mutex_lock(&rec->lock);
    int handed = hand_to_helper(rec) == 0;
    pthread_mutex_unlock(&rec->lock);
    if (handed) {
        remove_pending_locked(rec);
        return 0;
    }
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
    int ran = 0;
    pthread_mutex_lock(&pending_lock);
    for (size_t i = 0; i < npending;) {
        struct pc_program *rec = pending[i];
        if (!__atomic_load_n(&rec->ran, __ATOMIC_RELAXED)) {
            i++;
            continue;
        }
        ran = 1;
        remove_pending_locked(rec);
        if (queue_capture_locked(rec) == 0) continue;
        pthread_mutex_lock(&rec->lock);
        capture(rec);
        pthread_mutex_unlock(&rec->lock);
    }
    int still_owed = npending > 0;
    pthread_mutex_unlock(&pending_lock);
    /* A first run generated code: the exit handler goes after its state. */
    if (ran && still_owed) arm_owed_capture_at_exit();
}

static void free_devs(struct pc_program *rec)
{
    for (size_t i = 0; i < rec->ndevs; i++) {
        if (rec->devs[i].attached) pipeline_detach(&rec->flights[i], rec->devs[i].attached);
        pipeline_flight_free(&rec->flights[i]); /* a claim still held for a late store goes */
        free(rec->devs[i].log);
        free(rec->devs[i].object);
    }
    free(rec->devs);
    free(rec->flights);
    rec->devs = NULL;
    rec->flights = NULL;
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
    free(rec->compile_options);
    free(rec->compile_answer);
    free(rec->driver_options);
    free(rec->cwd);
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

/* After a driver call that failed with `err`: nonzero when it is to be
 * made once more. A driver out of memory or resources may fail for what
 * the in-memory tier holds (binaries, and built programs lent to it that
 * keep the driver's code alive): the tier is emptied of every entry no
 * build uses, and the call retried when that freed anything. */
static int retry_after_emptying_tier(cl_int err, const char *what)
{
    if (err != CL_OUT_OF_RESOURCES && err != CL_OUT_OF_HOST_MEMORY) return 0;
    uint64_t dropped = pipeline_memory_clear();
    if (dropped)
        log_msg(LOG_INFO, "%s: the driver is out of %s; emptied the in-memory tier (%llu entries), retrying once",
                what, err == CL_OUT_OF_RESOURCES ? "resources" : "host memory", (unsigned long long)dropped);
    return dropped != 0;
}

cl_program pc_create_with_source(cl_context ctx, cl_uint count, const char **strings, const size_t *lengths,
                                 cl_int *errcode_ret)
{
    cl_int err;
    cl_program prog = real->clCreateProgramWithSource(ctx, count, strings, lengths, &err);
    if (!prog && retry_after_emptying_tier(err, "clCreateProgramWithSource"))
        prog = real->clCreateProgramWithSource(ctx, count, strings, lengths, &err);
    if (errcode_ret) *errcode_ret = err;
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
    int translate = 0, to_ptx = 0, all_ptx = 1;
    if (cfg->spirv && il && length && context_devices(ctx, &devs, &ndev) == 0) {
        int all_native = 1, all_spir = 1;
        for (cl_uint i = 0; i < ndev; i++) {
            const struct device_info *d = device_info(real, devs[i]);
            all_native &= d && d->has_native_il;
            all_spir &= d && d->has_spir;
            all_ptx &= d && d->takes_ptx;
        }
        translate = !all_native && (all_spir || all_ptx);
        to_ptx = translate && !all_spir;
        if (!all_native && !all_spir && !all_ptx)
            LOG_ONCE(LOG_INFO, "a device without IL, SPIR or PTX support: clCreateProgramWithIL is passed to "
                               "the driver unchanged");
    }
    free(devs);
    if (!translate) {
        if (!real->clCreateProgramWithIL) {
            LOG_ONCE(LOG_WARN, "the OpenCL loader has no clCreateProgramWithIL");
            if (errcode_ret) *errcode_ret = CL_INVALID_OPERATION;
            return NULL;
        }
        cl_int err;
        cl_program prog = real->clCreateProgramWithIL(ctx, il, length, &err);
        if (!prog && retry_after_emptying_tier(err, "clCreateProgramWithIL"))
            prog = real->clCreateProgramWithIL(ctx, il, length, &err);
        if (errcode_ret) *errcode_ret = err;
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
    rec->to_ptx = to_ptx;
    rec->scan = scan;
    log_msg(LOG_DEBUG, "IL program %p: SPIR-V %u.%u, translated at build%s", (void *)prog, scan->version >> 16,
            (scan->version >> 8) & 0xff, to_ptx ? " to PTX (route (a))" : "");
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

/* The key of device i: the program's fields, then the pipeline finishes it
 * (headers, input, hash). No key when the build must not be cached. */
static void derive_key(struct pc_program *rec, const char *options, size_t i)
{
    const struct device_info *info = device_info(real, rec->devs[i].dev);
    if (!info || stands_aside(info)) return;
    struct key_buf k;
    key_begin(&k, rec->kind, options);
    key_add_text(&k, "device", info->identity);
    if (rec->translated) key_add_text(&k, "route", rec->to_ptx ? route_a_key_part() : "spirv->spir");
    if (rec->nspecs) qsort(rec->specs, rec->nspecs, sizeof *rec->specs, cmp_spec);
    for (size_t s = 0; s < rec->nspecs; s++) {
        char name[32], value[24];
        uint64_t v = 0;
        memcpy(&v, rec->specs[s].value, 8);
        snprintf(name, sizeof name, "spec.%u", rec->specs[s].id);
        snprintf(value, sizeof value, "%zu:%016llx", rec->specs[s].size, (unsigned long long)v);
        key_add_text(&k, name, value);
    }
    char ddir[4096];
    struct key_source in = {.source = rec->input, .len = rec->input_len, .options = options,
                            .driver_dir = quirk_source_dir(info->quirks, ddir, sizeof ddir) == 0 ? ddir : NULL};
    pipeline_key(&rec->flights[i], &k, rec->kind == KEY_SOURCE ? &in : NULL, info->identity, rec->input,
                 rec->input_len, rec->handle);
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
    if (binaries_unsafe(prog, n, want)) return -1;
    pthread_mutex_lock(&binary_reads);
    int rc = read_binaries_locked(prog, n, want, bins, sizes);
    pthread_mutex_unlock(&binary_reads);
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

/* The lowest NVIDIA compute capability among the devices (0: unknown), the
 * one route (a) lowers for so the PTX loads on every device. */
static uint32_t lowest_nv_sm(const struct cl_api *real, cl_uint ndev, const cl_device_id *devs)
{
    uint32_t sm = 0;
    for (cl_uint i = 0; i < ndev; i++) {
        const struct device_info *d = device_info(real, devs[i]);
        if (d && d->nv_sm && (!sm || d->nv_sm < sm)) sm = d->nv_sm;
    }
    return sm;
}

/* Translates the IL of rec to SPIR (and, for devices that take PTX, to PTX
 * by route (a)) and creates the program from it. */
static cl_program translate_il(struct pc_program *rec, cl_uint ndev, const cl_device_id *devs, const char *options,
                               cl_int *err, char *why, size_t why_len)
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
    pipeline_count_translation();
    log_msg(LOG_INFO, "translated SPIR-V program %p to SPIR (%zu bytes) in %.1f ms", (void *)rec->handle,
            bc_size, (now_ns() - t0) / 1e6);
    if (rec->to_ptx) {
        char *ptx = NULL;
        size_t ptx_size = 0;
        t0 = now_ns();
        rc = route_a_ptx_sm(api, bc, bc_size, lowest_nv_sm(real, ndev, devs), options, &ptx, &ptx_size, why,
                            why_len);
        api->free(bc);
        if (rc != 0) {
            *err = CL_BUILD_PROGRAM_FAILURE;
            return NULL;
        }
        log_msg(LOG_INFO, "lowered SPIR-V program %p to PTX (%zu bytes, route (a)) in %.1f ms", (void *)rec->handle,
                ptx_size, (now_ns() - t0) / 1e6);
        bc = ptx;
        bc_size = ptx_size;
    }
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
    if (rec->to_ptx) free(bc);
    else api->free(bc);
    if (!p) snprintf(why, why_len, "the driver refused the translated %s (error %d)", rec->to_ptx ? "PTX" : "SPIR", *err);
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
        cl_int rc = real->clBuildProgram(rec->handle, ndev, devs, options, NULL, NULL);
        if (retry_after_emptying_tier(rc, "clBuildProgram"))
            rc = real->clBuildProgram(rec->handle, ndev, devs, options, NULL, NULL);
        return rc;
    }
    char why[512] = "";
    cl_int err = CL_SUCCESS;
    cl_program p = translate_il(rec, ndev, devs, options, &err, why, sizeof why);
    if (!p) {
        log_msg(LOG_WARN, "cannot build IL program %p: %s", (void *)rec->handle, why);
        for (size_t i = 0; i < rec->ndevs; i++) {
            free(rec->devs[i].log);
            rec->devs[i].log = strdup(why);
        }
        return err;
    }
    cl_int rc = real->clBuildProgram(p, ndev, devs, options, NULL, NULL);
    if (retry_after_emptying_tier(rc, "clBuildProgram")) rc = real->clBuildProgram(p, ndev, devs, options, NULL, NULL);
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

static const unsigned char *entry_binary(struct pipeline_flight *f, cl_device_id dev, size_t *size)
{
    const unsigned char *bin = pipeline_binary(f, size);
    if (bin) return bin;
    cl_program other = pipeline_attached_retain(f, retain_program_object);
    if (!other) return NULL;
    struct pc_dev want = {.dev = dev};
    void *b = NULL;
    size_t n = 0;
    if (read_binaries(other, 1, &want, &b, &n) == 0) pipeline_refill(f, b, n);
    real->clReleaseProgram(other);
    free(b);
    return pipeline_binary(f, size);
}

/* A hit: a program of its own made from the cached binaries (built when
 * `build`; a compiled object is not). Never the program object of another
 * record, even in the same context: program-scope variables and rebuilds
 * belong to one app program (share binaries, never program objects). */
static cl_program program_from_hits(cl_context ctx, struct pipeline_flight *fl, cl_uint ndev,
                                    const cl_device_id *devs, const char *options, int build, cl_int *err)
{
    const unsigned char **bins = calloc(ndev, sizeof *bins);
    size_t *sizes = calloc(ndev, sizeof *sizes);
    cl_program p = NULL;
    *err = CL_OUT_OF_HOST_MEMORY;
    int complete = bins && sizes;
    for (cl_uint i = 0; complete && i < ndev; i++)
        complete = (bins[i] = entry_binary(&fl[i], devs[i], &sizes[i])) != NULL;
    if (complete) { /* the hit's own entries stay pinned while the tier is emptied */
        p = real->clCreateProgramWithBinary(ctx, ndev, devs, sizes, bins, NULL, err);
        if (!p && retry_after_emptying_tier(*err, "clCreateProgramWithBinary"))
            p = real->clCreateProgramWithBinary(ctx, ndev, devs, sizes, bins, NULL, err);
    } else if (bins && sizes) {
        *err = CL_INVALID_BINARY;
    }
    free(bins);
    free(sizes);
    if (p && build) {
        *err = real->clBuildProgram(p, ndev, devs, options, NULL, NULL);
        if (retry_after_emptying_tier(*err, "clBuildProgram"))
            *err = real->clBuildProgram(p, ndev, devs, options, NULL, NULL);
    }
    if (p && build && *err != CL_SUCCESS) {
        real->clReleaseProgram(p);
        p = NULL;
    }
    return p;
}

/* The app-visible logs of a hit: the original build's. */
static void logs_from_hits(struct pc_program *rec)
{
    for (size_t i = 0; i < rec->ndevs; i++) {
        free(rec->devs[i].log);
        rec->devs[i].log = strdup(pipeline_build_log(&rec->flights[i]));
    }
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

/* After the driver built `built` for rec (a build or a link): the pipeline
 * stores its binaries now, or — a late capture — gets the program itself
 * (the binary is read at first use, release or exit: capture()), or shares
 * the failure (builds: `share_failure`). */
static void after_driver_build(struct pc_program *rec, cl_program built, cl_int err, const struct pipeline_clock *clk,
                               int share_failure)
{
    size_t n = rec->ndevs;
    struct pipeline_flight *fl = rec->flights;
    if (err == CL_SUCCESS && built && binaries_unsafe(built, n, rec->devs))
        pipeline_uncacheable(fl, n); /* built, but its binary must never be read */
    int any_fill = 0;
    for (size_t i = 0; i < n; i++) any_fill |= fl[i].filling;
    char **logs = calloc(n, sizeof *logs);
    void **bins = calloc(n, sizeof *bins);
    size_t *sizes = calloc(n, sizeof *sizes);
    for (size_t i = 0; logs && i < n; i++)
        logs[i] = rec->devs[i].log ? strdup(rec->devs[i].log)
                                   : built ? read_build_log(built, rec->devs[i].dev) : NULL;
    struct pipeline_output out = {.error = err == CL_SUCCESS && !built ? CL_OUT_OF_HOST_MEMORY : err,
                                  .logs = (const char *const *)logs, .clock = clk, .share_failure = share_failure};
    if (out.error == CL_SUCCESS && any_fill) {
        if (capture_late(rec)) {
            out.late = 1;
            /* Attached before the fill: waiters wake to the program. */
            for (size_t i = 0; i < n; i++) {
                if (!fl[i].filling || real->clRetainProgram(built) != CL_SUCCESS) continue;
                if (pipeline_attach(&fl[i], built, rec->context, release_program_object) == 0)
                    rec->devs[i].attached = built;
                else
                    real->clReleaseProgram(built);
            }
            for (size_t i = 0; i < n; i++) rec->devs[i].needs_capture = fl[i].filling;
        } else if (bins && sizes && read_binaries(built, n, rec->devs, bins, sizes) == 0) {
            out.binaries = (const void *const *)bins;
            out.sizes = sizes;
            for (size_t i = 0; i < n; i++) rec->devs[i].needs_capture = fl[i].filling;
        } else {
            log_msg(LOG_INFO, "cannot read the built binaries of program %p; not cached", (void *)rec->handle);
        }
    }
    pipeline_built(fl, n, &out);
    for (size_t i = 0; i < n; i++) {
        if (logs) free(logs[i]);
        if (bins) free(bins[i]);
    }
    free(logs);
    free(bins);
    free(sizes);
}

/* New device and flight arrays for a build, compile or link of rec (its
 * lock held); -1 when out of memory. */
static int new_devs(struct pc_program *rec, cl_uint ndev, const cl_device_id *devs, enum key_kind kind)
{
    free_devs(rec);
    rec->devs = calloc(ndev, sizeof *rec->devs);
    rec->flights = calloc(ndev, sizeof *rec->flights);
    if (!rec->devs || !rec->flights) {
        free_devs(rec);
        return -1;
    }
    rec->ndevs = ndev;
    for (cl_uint i = 0; i < ndev; i++) {
        rec->devs[i].dev = devs[i];
        rec->flights[i].device = device_name(devs[i]);
        rec->flights[i].kind = kind;
    }
    return 0;
}

static void keep_reply_in_memory(const struct capture_reply *r);

static cl_int build_program(cl_program prog, cl_uint num_devices, const cl_device_id *device_list,
                            const char *options, void(CL_CALLBACK *notify)(cl_program, void *), void *user_data)
{
    struct pc_program *rec = objmap_get(programs, prog);
    if (!rec) {
        /* Created from the application's own binaries (or built-in
         * kernels): not clshim's to cache, but counted so the summary can
         * say why nothing went through the cache. */
        atomic_fetch_add_explicit(&foreign_builds, 1, memory_order_relaxed);
        need_exit_handler();
        return real->clBuildProgram(prog, num_devices, device_list, options, notify, user_data);
    }
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
    free(rec->options);
    rec->options = strdup(options ? options : "");
    rec->answers_options = rec->arg_info_added = 0;
    free(rec->driver_options);
    rec->driver_options = strdup(options ? options : "");
    free(rec->cwd);
    rec->cwd = getcwd(NULL, 0);
    if (new_devs(rec, ndev, devs, rec->kind) != 0 || !rec->options || !rec->driver_options) {
        pthread_mutex_unlock(&rec->lock);
        free(owned);
        return rec->translated ? CL_OUT_OF_HOST_MEMORY
                               : real->clBuildProgram(prog, num_devices, device_list, options, notify, user_data);
    }
    need_exit_handler(); /* the driver is loaded by now */
    capture_proc_poll(keep_reply_in_memory);
    for (cl_uint i = 0; i < ndev; i++)
        if (config_get()->cache) derive_key(rec, options, i);

    struct pipeline_flight *fl = rec->flights;
    enum pipeline_result r = pipeline_begin(fl, ndev, PIPELINE_SHARE_FAILURE | PIPELINE_FLEET_CLAIM);
    cl_int err = CL_BUILD_PROGRAM_FAILURE;
    rec->failed = 0;
    if (r == PIPELINE_FAILED) {
        /* Single flight shares failures: the app sees the driver's error,
         * status and log of the one build that ran. */
        set_effective(rec, NULL);
        rec->failed = 1;
        for (cl_uint i = 0; i < ndev; i++)
            if (pipeline_failure(&fl[i])) err = pipeline_failure(&fl[i]);
        logs_from_hits(rec);
        pipeline_failure_shared(fl, ndev);
    } else if (r == PIPELINE_HIT) {
        cl_program p = program_from_hits(rec->context, fl, ndev, devs, options, 1, &err);
        if (p) {
            set_effective(rec, p);
            logs_from_hits(rec);
            pipeline_hit(fl, ndev);
        } else {
            /* The driver refused a cached binary: rebuild and replace it. */
            pipeline_rejected(fl, ndev, err, prog);
            r = PIPELINE_BUILD;
        }
    }
    if (r == PIPELINE_BUILD) {
        struct pipeline_clock clk;
        pipeline_clock_start(&clk);
        err = driver_build(rec, ndev, devs, options);
        pipeline_clock_stop(&clk);
        cl_program built = rec->effective ? rec->effective : rec->handle;
        after_driver_build(rec, built, err, &clk, 1);
    }
    pipeline_end(fl, ndev);
    int late = 0;
    for (size_t i = 0; i < rec->ndevs; i++) late |= rec->devs[i].needs_capture;
    rec->ran = 0;
    rec->source_build = r == PIPELINE_BUILD && rec->kind == KEY_SOURCE && !rec->translated;
    rec->handed_off = 0;
    pthread_mutex_unlock(&rec->lock);
    if (late) {
        add_pending(rec);
        arm_owed_capture_at_exit();
    }
    free(owned);
    if (notify) notify(prog, user_data);
    return err;
}

/* The capture helper stored a binary it was handed: the in-process tier
 * keeps its bytes (a program released and built again is a memory hit). */
static void keep_reply_in_memory(const struct capture_reply *r)
{
    pipeline_keep_stored(r->hash, r->binary, r->size, r->log, r->compile_ns);
}

/* Whether capture() has anything to do (rec->lock held). */
static int capture_wanted(const struct pc_program *rec)
{
    int any = 0;
    for (size_t i = 0; i < rec->ndevs; i++)
        any |= (rec->devs[i].needs_capture && rec->flights[i].key) || (rec->devs[i].attached && !rec->handed_off);
    return any;
}

/* Hands the captures rec still owes to the capture helper
 * (program/capture_proc.h; rec->lock held): 0 when none is owed here any
 * more, -1 when the caller captures (not a program built from source here,
 * a device whose code cache other processes do not share, no helper, its
 * queue full). The in-process tier keeps only the attached program then:
 * reading its bytes is the very code generation the helper saves. */
static int hand_to_helper(struct pc_program *rec)
{
    const struct clshim_config *cfg = config_get();
    if (!cfg->capture_process || !rec->source_build || cfg->cache_readonly || !pipeline_store())
        return -1;
    int owed = 0;
    if (!rec->driver_options || !rec->cwd) return -1;
    for (size_t i = 0; i < rec->ndevs; i++) {
        if (!rec->devs[i].needs_capture || !rec->flights[i].key) continue;
        const struct device_info *info = device_info(real, rec->devs[i].dev);
        if (!info || !info->shared_codegen_cache) return -1;
        owed = 1;
    }
    if (!owed) return -1;
    cl_program built = rec->effective ? rec->effective : rec->handle;
    for (size_t i = 0; i < rec->ndevs; i++) {
        struct pc_dev *d = &rec->devs[i];
        struct pipeline_flight *f = &rec->flights[i];
        if (!d->needs_capture || !f->key) continue;
        char *log = read_build_log(built, d->dev);
        struct capture_request rq = {.identity = device_info(real, d->dev)->identity, .device = f->device,
                                     .kind = rec->kind, .options = rec->driver_options,
                                     .source = rec->input, .source_len = rec->input_len, .key = f->key,
                                     .key_len = f->key_len, .compile_ns = f->compile_ns, .log = log,
                                     .cwd = rec->cwd};
        int rc = capture_proc_send(&rq);
        free(log);
        if (rc < 0) return -1;
        /* 1: built again before the helper answered; the helper, asked to
         * hurry, answers with the bytes (capture_proc.h says why they are
         * not read here). */
        if (rc == 0) pipeline_count_handed();
        d->needs_capture = 0;
        pipeline_let_go(f); /* waiting processes build: a hit in the driver's cache */
        if (log_enabled(LOG_INFO)) {
            char hex[33];
            key_hash_hex(f->hash, hex);
            log_msg(LOG_INFO, rc == 0 ? "capture of %.16s handed to the capture helper"
                                      : "capture of %.16s: built again before the capture helper stored it: "
                                        "the helper captures it now",
                    hex);
        }
    }
    rec->handed_off = 1;
    return 0;
}

/* Reads the built binaries and hands those still owed to the pipeline
 * (stored when they changed since the build). */
static void capture(struct pc_program *rec)
{
    if (!capture_wanted(rec) || hand_to_helper(rec) == 0) return;
    store *st = pipeline_store();
    cl_program built = rec->effective ? rec->effective : rec->handle;
    void **bins = calloc(rec->ndevs, sizeof *bins);
    size_t *sizes = calloc(rec->ndevs, sizeof *sizes);
    uint64_t cpu0 = thread_cpu_ns();
    if (bins && sizes && read_binaries(built, rec->ndevs, rec->devs, bins, sizes) == 0) {
        uint64_t read_cpu = (thread_cpu_ns() - cpu0) / rec->ndevs;
        for (size_t i = 0; i < rec->ndevs; i++) {
            struct pc_dev *d = &rec->devs[i];
            struct pipeline_flight *f = &rec->flights[i];
            if (d->attached) pipeline_keep_bytes(f->hash, bins[i], sizes[i]);
            if (!st || !d->needs_capture || !f->key || sizes[i] == f->stored_size) continue;
            char *log = read_build_log(built, d->dev);
            pipeline_store_late(f, bins[i], sizes[i], log, read_cpu);
            free(log);
            d->needs_capture = 0;
        }
    }
    /* Stored or not, waiting processes have nothing more to wait for. */
    for (size_t i = 0; i < rec->ndevs; i++) pipeline_let_go(&rec->flights[i]);
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
    if (num_headers && !hrecs) cacheable = 0; /* out of memory: the driver compiles */
    for (cl_uint i = 0; cacheable && i < num_headers; i++) {
        hrecs[i] = objmap_get(programs, headers[i]);
        cacheable = hrecs[i] && hrecs[i]->kind == KEY_SOURCE && header_names[i];
    }
    cl_device_id *owned = NULL;
    cl_uint ndev = 0;
    const cl_device_id *devs = NULL;
    if (!cacheable ||
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
    free(rec->options);
    rec->options = strdup(options ? options : "");
    rec->answers_options = rec->arg_info_added = 0;
    free(rec->compile_options);
    free(rec->compile_answer);
    rec->compile_options = strdup(options ? options : "");
    rec->compile_answer = NULL;
    if (new_devs(rec, ndev, devs, KEY_COMPILE) != 0) {
        pthread_mutex_unlock(&rec->lock);
        free(owned);
        free(hrecs);
        free(embedded);
        return real->clCompileProgram(prog, num_devices, device_list_in, options, num_headers, headers, header_names,
                                      notify, user_data);
    }
    need_exit_handler();
    struct pipeline_flight *fl = rec->flights;
    for (cl_uint i = 0; i < ndev; i++) {
        const struct device_info *info = device_info(real, devs[i]);
        if (!info || stands_aside(info) || (num_headers && !embedded)) continue;
        struct key_buf k;
        key_begin(&k, KEY_COMPILE, options);
        key_add_text(&k, "device", info->identity);
        for (cl_uint h = 0; h < num_headers; h++) {
            char name[1100];
            snprintf(name, sizeof name, "embedded-header %s", header_names[h]);
            key_add_blob(&k, name, hrecs[h]->input, hrecs[h]->input_len);
            embedded[h] = (struct key_embedded){header_names[h], hrecs[h]->input, hrecs[h]->input_len};
        }
        char ddir[4096];
        struct key_source in = {rec->input, rec->input_len, options, embedded, embedded ? num_headers : 0,
                                quirk_source_dir(info->quirks, ddir, sizeof ddir) == 0 ? ddir : NULL};
        /* The preprocessor may run beside the compile (a late key). */
        pipeline_key_start(&fl[i], &k, &in, info->identity, rec->input, rec->input_len, prog);
    }
    free(hrecs);
    free(embedded);
    cl_int err = CL_OUT_OF_HOST_MEMORY;
    if (pipeline_begin(fl, ndev, 0) == PIPELINE_HIT) {
        cl_program p = program_from_hits(rec->context, fl, ndev, devs, NULL, 0, &err);
        if (p) {
            set_effective(rec, p);
            rec->answers_options = 1;
            /* PoCL refuses binary queries on the unbuilt stand-in: they are
             * answered from these bytes. */
            for (cl_uint i = 0; i < ndev; i++) {
                size_t size = 0;
                const void *bin = pipeline_binary(&fl[i], &size);
                if (bin && (rec->devs[i].object = malloc(size ? size : 1))) {
                    memcpy(rec->devs[i].object, bin, size);
                    rec->devs[i].object_size = size;
                }
            }
            logs_from_hits(rec);
            pipeline_hit(fl, ndev);
        } else {
            pipeline_rejected(fl, ndev, err, prog);
        }
    }
    if (!rec->effective) {
        struct pipeline_clock clk;
        pipeline_clock_start(&clk);
        err = real->clCompileProgram(prog, ndev, devs, options, num_headers, headers, header_names, NULL, NULL);
        if (retry_after_emptying_tier(err, "clCompileProgram"))
            err = real->clCompileProgram(prog, ndev, devs, options, num_headers, headers, header_names, NULL, NULL);
        pipeline_clock_stop(&clk);
        pipeline_key_finish(fl, ndev, prog); /* late keys: now they can fill */
        int any_fill = 0;
        for (cl_uint i = 0; i < ndev; i++) any_fill |= fl[i].filling;
        char **logs = calloc(ndev, sizeof *logs);
        void **got = calloc(ndev, sizeof *got);
        size_t *sizes = calloc(ndev, sizeof *sizes);
        for (cl_uint i = 0; logs && i < ndev; i++) logs[i] = read_build_log(prog, devs[i]);
        struct pipeline_output out = {.error = err, .logs = (const char *const *)logs, .clock = &clk};
        /* Binaries are read only to be kept (a hashcat object is ~5 MB). */
        if (err == CL_SUCCESS && any_fill && got && sizes && read_binaries(prog, ndev, rec->devs, got, sizes) == 0) {
            out.binaries = (const void *const *)got;
            out.sizes = sizes;
        }
        pipeline_built(fl, ndev, &out);
        for (cl_uint i = 0; i < ndev; i++) {
            if (logs) free(logs[i]);
            if (got) free(got[i]);
        }
        free(logs);
        free(got);
        free(sizes);
    }
    pipeline_end(fl, ndev);
    pthread_mutex_unlock(&rec->lock);
    free(owned);
    if (notify) notify(prog, user_data);
    return err;
}

/* ---- argument info for fusion ------------------------------------------------- */

/* "options more" (just `more` when options is empty); NULL on no memory. */
static char *join_options(const char *options, const char *more)
{
    if (!options || !*options) return strdup(more);
    size_t len = strlen(options), add = strlen(more);
    char *out = malloc(len + add + 2);
    if (!out) return NULL;
    memcpy(out, options, len);
    out[len] = ' ';
    memcpy(out + len + 1, more, add + 1);
    return out;
}

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
    return join_options(options, flag);
}

/* The application's options with CLSHIM_BUILD_OPTIONS_APPEND (or
 * _LINK_) appended: what the driver gets, the key holds and
 * CL_PROGRAM_BUILD_OPTIONS answers, as if the application had passed them.
 * NULL when nothing is appended (or, logged, on no memory: the build then
 * goes on with the application's options alone). */
static char *options_appended(const char *options, const char *append)
{
    if (!append || !*append) return NULL;
    char *out = join_options(options, append);
    if (!out) LOG_ONCE(LOG_WARN, "out of memory: a build went on without the appended options");
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
    rec->arg_info_added = 1;
    pthread_mutex_unlock(&rec->lock);
}

cl_int pc_build(cl_program prog, cl_uint num_devices, const cl_device_id *device_list, const char *app_options,
                int want_arg_info, void(CL_CALLBACK *notify)(cl_program, void *), void *user_data)
{
    char *appended = options_appended(app_options, config_get()->build_options_append);
    const char *options = appended ? appended : app_options;
    char *with = want_arg_info ? options_with_arg_info(options) : NULL;
    if (with) LOG_ONCE(LOG_INFO, "fusion is armed: programs built with options get -cl-kernel-arg-info added");
    cl_int rc = build_program(prog, num_devices, device_list, with ? with : options, notify, user_data);
    if (with) restore_app_options(prog, options);
    free(with);
    free(appended);
    return rc;
}

cl_int pc_compile(cl_program prog, cl_uint num_devices, const cl_device_id *devices, const char *app_options,
                  int want_arg_info, cl_uint num_headers, const cl_program *headers, const char **header_names,
                  void(CL_CALLBACK *notify)(cl_program, void *), void *user_data)
{
    char *appended = options_appended(app_options, config_get()->build_options_append);
    const char *options = appended ? appended : app_options;
    char *with = want_arg_info ? options_with_arg_info(options) : NULL;
    cl_int rc = compile_program(prog, num_devices, devices, with ? with : options, num_headers, headers,
                                header_names, notify, user_data);
    if (with) restore_app_options(prog, options);
    free(with);
    free(appended);
    return rc;
}

static cl_program link_program(cl_context ctx, cl_uint num_devices, const cl_device_id *device_list_in,
                               const char *options, cl_uint num_inputs, const cl_program *inputs,
                               void(CL_CALLBACK *notify)(cl_program, void *), void *user_data, cl_int *errcode_ret)
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
    /* The record of the linked program, keyed per device by the options,
     * the device and every input's compile key. */
    struct pc_program *out = calloc(1, sizeof *out);
    if (out) {
        out->context = ctx;
        out->kind = KEY_LINK;
        out->refs = 1;
        out->options = strdup(options ? options : "");
        pthread_mutex_init(&out->lock, NULL);
    }
    cacheable = cacheable && out && new_devs(out, ndev, devs, KEY_LINK) == 0;
    struct key_buf *kb = cacheable ? calloc(ndev, sizeof *kb) : NULL;
    cacheable = cacheable && kb;
    for (cl_uint d = 0; cacheable && d < ndev; d++) {
        const struct device_info *info = device_info(real, devs[d]);
        key_begin(&kb[d], KEY_LINK, options);
        key_add_text(&kb[d], "device", info ? info->identity : "");
        cacheable = info != NULL;
    }
    /* Inputs: the program standing in for each (a hit's compiled object). */
    for (cl_uint i = 0; i < num_inputs; i++) {
        struct pc_program *in = objmap_get(programs, inputs[i]);
        if (in) pthread_mutex_lock(&in->lock);
        mapped[i] = in && in->effective ? in->effective : inputs[i];
        if (mapped[i] != inputs[i] && real->clRetainProgram(mapped[i]) != CL_SUCCESS)
            mapped[i] = inputs[i]; /* the driver then answers for the input itself */
        for (cl_uint d = 0; cacheable && d < ndev; d++) {
            const struct pipeline_flight *found = NULL;
            for (size_t j = 0; in && j < in->ndevs; j++)
                if (in->devs[j].dev == devs[d] && in->flights[j].key) found = &in->flights[j];
            if (!found) {
                cacheable = 0;
                break;
            }
            char hex[33];
            key_hash_hex(found->hash, hex);
            key_add_text(&kb[d], "input-key", hex);
        }
        if (in) pthread_mutex_unlock(&in->lock);
    }
    for (cl_uint d = 0; kb && d < ndev; d++) {
        if (cacheable) cacheable = pipeline_key(&out->flights[d], &kb[d], NULL, NULL, NULL, 0, NULL) == 0;
        else key_free(&kb[d]);
    }
    free(kb);
    cl_program result = NULL;
    cl_int err = CL_SUCCESS;
    struct pipeline_flight *fl = cacheable ? out->flights : NULL;
    need_exit_handler();
    if (cacheable && pipeline_begin(fl, ndev, 0) == PIPELINE_HIT) {
        result = program_from_hits(ctx, fl, ndev, devs, options, 1, &err);
        if (result) {
            logs_from_hits(out);
            pipeline_hit(fl, ndev);
        } else {
            pipeline_rejected(fl, ndev, err, NULL);
        }
    }
    if (!result) {
        struct pipeline_clock clk;
        pipeline_clock_start(&clk);
        result = real->clLinkProgram(ctx, num_devices, device_list_in, options, num_inputs, mapped, NULL, NULL, &err);
        if (!result && retry_after_emptying_tier(err, "clLinkProgram"))
            result =
                real->clLinkProgram(ctx, num_devices, device_list_in, options, num_inputs, mapped, NULL, NULL, &err);
        pipeline_clock_stop(&clk);
        if (cacheable) {
            out->handle = result;
            after_driver_build(out, result, result || err != CL_SUCCESS ? err : CL_LINK_PROGRAM_FAILURE, &clk, 0);
        }
    }
    if (cacheable) pipeline_end(fl, ndev);
    if (result && cacheable) {
        out->handle = result;
        if (objmap_put(programs, result, out) != 0) {
            cacheable = 0;
        } else {
            int late = 0;
            for (cl_uint d = 0; d < ndev; d++) late |= out->devs[d].needs_capture;
            if (late) {
                add_pending(out);
                arm_owed_capture_at_exit();
            }
        }
    }
    if (!(result && cacheable) && out) {
        free_devs(out);
        free(out->options);
        pthread_mutex_destroy(&out->lock);
        free(out);
    }
    for (cl_uint i = 0; i < num_inputs; i++)
        if (mapped[i] != inputs[i]) real->clReleaseProgram(mapped[i]);
    free(mapped);
    free(owned);
    if (errcode_ret) *errcode_ret = err;
    if (notify && result) notify(result, user_data);
    return result;
}

cl_program pc_link(cl_context ctx, cl_uint num_devices, const cl_device_id *device_list_in, const char *app_options,
                   cl_uint num_inputs, const cl_program *inputs, void(CL_CALLBACK *notify)(cl_program, void *),
                   void *user_data, cl_int *errcode_ret)
{
    char *appended = options_appended(app_options, config_get()->link_options_append);
    cl_program p = link_program(ctx, num_devices, device_list_in, appended ? appended : app_options, num_inputs,
                                inputs, notify, user_data, errcode_ret);
    free(appended);
    return p;
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
    int binaries = param == CL_PROGRAM_BINARY_SIZES || param == CL_PROGRAM_BINARIES;
    if (binaries) pthread_mutex_lock(&binary_reads);
    rc = real->clGetProgramInfo(p, param, size, value, size_ret);
    if (binaries) pthread_mutex_unlock(&binary_reads);
    real->clReleaseProgram(p);
    return rc;
}

/* A driver's CL_PROGRAM_BUILD_OPTIONS of program p, NUL-terminated (NULL
 * with *rc set when the driver refuses). */
static char *driver_options_answer(cl_program p, cl_device_id dev, cl_int *rc)
{
    size_t n = 0;
    char *text = NULL;
    *rc = real->clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_OPTIONS, 0, NULL, &n);
    if (*rc == CL_SUCCESS && !(text = malloc(n + 1))) *rc = CL_OUT_OF_HOST_MEMORY;
    if (*rc == CL_SUCCESS) *rc = real->clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_OPTIONS, n, text, NULL);
    if (*rc != CL_SUCCESS) {
        free(text);
        return NULL;
    }
    text[n] = 0;
    return text;
}

/* What the driver answers for a compile with `options`, asked of a blank
 * program of its own: a compile hit's stand-in was never compiled. Done
 * once, when the application first asks. NULL when the driver refuses. */
static char *compile_options_answer(cl_context ctx, cl_device_id dev, const char *options)
{
    static const char *blank = "\n";
    cl_int rc;
    cl_program p = real->clCreateProgramWithSource(ctx, 1, &blank, NULL, &rc);
    if (!p) return NULL;
    char *text = NULL;
    if (real->clCompileProgram(p, 1, &dev, options, 0, NULL, NULL, NULL, NULL) == CL_SUCCESS)
        text = driver_options_answer(p, dev, &rc);
    real->clReleaseProgram(p);
    return text;
}

/* CL_PROGRAM_BUILD_OPTIONS of a program clshim built, compiled or loaded:
 * the driver's answer for the options the application gave (a hit's key
 * holds them), normalised as the driver does (PoCL collapses spaces and
 * drops -create-library), less the -cl-kernel-arg-info clshim adds at the
 * end to arm fusion. From the built program; for a compile hit, from a
 * blank program compiled with the same options. Where the driver cannot
 * tell, or clshim's token is not the answer's last, the application's
 * text. */
static cl_int options_answer(struct pc_program *rec, cl_device_id dev, size_t size, void *value, size_t *size_ret)
{
    static const char arg_info[] = "-cl-kernel-arg-info";
    cl_program p;
    cl_int rc = program_for(rec, 1, &p);
    if (rc != CL_SUCCESS) return rc;
    char *text = NULL;
    if (!__atomic_load_n(&rec->answers_options, __ATOMIC_RELAXED)) {
        text = driver_options_answer(p, dev, &rc);
    } else {
        rc = real->clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_STATUS, 0, NULL, NULL); /* validates */
        pthread_mutex_lock(&rec->lock);
        if (rc == CL_SUCCESS && !rec->compile_answer && rec->compile_options)
            rec->compile_answer = compile_options_answer(rec->context, dev, rec->compile_options);
        text = rc == CL_SUCCESS && rec->compile_answer ? strdup(rec->compile_answer) : NULL;
        pthread_mutex_unlock(&rec->lock);
    }
    real->clReleaseProgram(p);
    if (rc != CL_SUCCESS) return rc;
    pthread_mutex_lock(&rec->lock);
    if (text && rec->arg_info_added) {
        size_t len = strlen(text), tl = sizeof arg_info - 1;
        if (len >= tl && !strcmp(text + len - tl, arg_info) && (len == tl || text[len - tl - 1] == ' ')) {
            text[len > tl ? len - tl - 1 : 0] = 0;
        } else {
            free(text);
            text = NULL;
        }
    }
    if (!text) text = strdup(rec->options ? rec->options : ""); /* the application's own words */
    pthread_mutex_unlock(&rec->lock);
    if (!text) return CL_OUT_OF_HOST_MEMORY;
    rc = answer(text, strlen(text) + 1, size, value, size_ret);
    free(text);
    return rc;
}

cl_int pc_get_build_info(cl_program prog, cl_device_id dev, cl_program_build_info param, size_t size, void *value,
                         size_t *size_ret)
{
    struct pc_program *rec = objmap_get(programs, prog);
    if (!rec) return real->clGetProgramBuildInfo(prog, dev, param, size, value, size_ret);
    if (param == CL_PROGRAM_BUILD_OPTIONS) return options_answer(rec, dev, size, value, size_ret);
    if (param == CL_PROGRAM_BUILD_LOG) {
        pthread_mutex_lock(&rec->lock);
        const char *text = NULL;
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
        if (rec->input_len) /* a linked program has no input of its own */
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

cl_int pc_get_device_info(cl_device_id dev, cl_device_info param, size_t size, void *value, size_t *size_ret,
                          const char *also)
{
    const struct clshim_config *cfg = config_get();
    const struct device_info *info = NULL;
    if (cfg->advertise_il && cfg->spirv &&
        (param == CL_DEVICE_IL_VERSION || extstr_param(param) || param == CL_DEVICE_ILS_WITH_VERSION))
        info = device_info(real, dev);
    int il = info && !info->has_native_il && info->has_spir; /* clshim advertises IL here */
    if (il && param == CL_DEVICE_IL_VERSION) return answer(ADVERTISED_IL, sizeof ADVERTISED_IL, size, value, size_ret);
    if (il && param == CL_DEVICE_ILS_WITH_VERSION) {
        cl_name_version v[5];
        memset(v, 0, sizeof v);
        for (int i = 0; i < 5; i++) {
            v[i].version = CL_MAKE_VERSION(1, i, 0);
            snprintf(v[i].name, sizeof v[i].name, "SPIR-V");
        }
        return answer(v, sizeof v, size, value, size_ret);
    }
    if (extstr_param(param) && (il || also)) { /* CL_DEVICE_EXTENSIONS[_WITH_VERSION] */
        const char *add[2] = {il ? "cl_khr_il_program" : NULL, also};
        return extstr_device(real, dev, param, add, 2, size, value, size_ret);
    }
    return real->clGetDeviceInfo(dev, param, size, value, size_ret);
}

/* ---- derived programs ------------------------------------------------------ */

/* The device-independent half of a derived program (origin.h). */
static int derived_any_key(struct key_buf *k, const void *key, size_t key_len)
{
    if (!config_get()->cache) return -1;
    key_begin(k, KEY_FUSION, "");
    key_add_text(k, "device", "any");
    key_add_blob(k, "derived-any-device", key, key_len);
    return 0;
}

int pc_derived_get(const void *key, size_t key_len, void **value, size_t *size)
{
    struct key_buf k;
    *value = NULL;
    *size = 0;
    if (derived_any_key(&k, key, key_len) != 0) return -1;
    int rc = pipeline_record_get(&k, value, size);
    key_free(&k);
    return rc;
}

void pc_derived_put(const void *key, size_t key_len, const void *value, size_t size, uint64_t make_ns)
{
    struct key_buf k;
    if (derived_any_key(&k, key, key_len) != 0) return;
    pipeline_record_put(&k, value, size, KEY_FUSION, "any device", make_ns);
    key_free(&k);
}

/* A refused derived program (origin.h): its key on that device. */
static int derived_refusal_key(struct key_buf *k, cl_device_id dev, const char *options, const void *key,
                               size_t key_len, const char *by)
{
    const struct device_info *info = config_get()->cache ? device_info(real, dev) : NULL;
    if (!info) return -1;
    key_begin(k, KEY_FUSION, options);
    key_add_text(k, "device", info->identity);
    key_add_text(k, "refused-by", by);
    key_add_blob(k, "derived-refused", key, key_len);
    return 0;
}

int pc_derived_refusal_get(cl_device_id dev, const char *options, const void *key, size_t key_len, const char *by,
                           char **reason, int *permanent)
{
    struct key_buf k;
    void *v = NULL;
    size_t n = 0;
    *reason = NULL;
    if (derived_refusal_key(&k, dev, options, key, key_len, by) != 0) return -1;
    int rc = pipeline_record_get(&k, &v, &n);
    key_free(&k);
    if (rc != 0) return -1;
    /* A flag byte, then the reason (not NUL-terminated). */
    if (n < 2 || !(*reason = malloc(n))) {
        free(v);
        return -1;
    }
    *permanent = ((const unsigned char *)v)[0] == 1;
    memcpy(*reason, (const char *)v + 1, n - 1);
    (*reason)[n - 1] = 0;
    free(v);
    return 0;
}

void pc_derived_refusal_put(cl_device_id dev, const char *options, const void *key, size_t key_len, const char *by,
                            const char *reason, int permanent)
{
    struct key_buf k;
    size_t len = strlen(reason);
    unsigned char *v = len ? malloc(len + 1) : NULL;
    if (!v || derived_refusal_key(&k, dev, options, key, key_len, by) != 0) {
        free(v);
        return;
    }
    v[0] = permanent ? 1 : 0;
    memcpy(v + 1, reason, len);
    pipeline_record_put(&k, v, len + 1, KEY_FUSION, device_info(real, dev)->name, 0);
    key_free(&k);
    free(v);
}

/* A derived program's cached value: the caller's metadata, then the binary
 * (8-byte metadata length first). */
static void *derived_value(const void *meta, size_t meta_size, const void *bin, size_t size, size_t *total)
{
    *total = 8 + meta_size + size;
    unsigned char *value = malloc(*total);
    if (!value) return NULL;
    uint64_t m = meta_size;
    memcpy(value, &m, 8);
    memcpy(value + 8, meta, meta_size);
    memcpy(value + 8 + meta_size, bin, size);
    return value;
}

/* A hit: the program from the cached value, its metadata to *meta. */
static cl_program derived_from_hit(cl_context ctx, cl_device_id dev, const char *options,
                                   const struct pipeline_flight *fl, void **meta, size_t *meta_size, cl_int *err)
{
    size_t total = 0;
    const unsigned char *value = pipeline_binary(fl, &total);
    uint64_t m = 0;
    *err = CL_INVALID_BINARY;
    if (!value || total < 8) return NULL;
    memcpy(&m, value, 8);
    if (m > total - 8 || !(*meta = malloc(m ? m : 1))) return NULL;
    const unsigned char *bin = value + 8 + m;
    size_t bin_size = total - 8 - m;
    memcpy(*meta, value + 8, m);
    *meta_size = m;
    cl_program p = real->clCreateProgramWithBinary(ctx, 1, &dev, &bin_size, &bin, NULL, err);
    if (p && (*err = real->clBuildProgram(p, 1, &dev, options, NULL, NULL)) != CL_SUCCESS) {
        real->clReleaseProgram(p);
        p = NULL;
    }
    if (!p) {
        free(*meta);
        *meta = NULL;
        *meta_size = 0;
    }
    return p;
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
    need_exit_handler();
    struct pipeline_flight fl = {.device = info->name, .kind = KEY_FUSION};
    struct cache_hash hash = key_hash(k.data, k.len); /* for the log line when not cached */
    int cached = 0;
    if (config_get()->cache && !stands_aside(info)) cached = pipeline_key(&fl, &k, NULL, NULL, NULL, 0, NULL) == 0;
    else key_free(&k);
    cl_program p = NULL;
    if (cached && pipeline_begin(&fl, 1, 0) == PIPELINE_HIT) {
        p = derived_from_hit(ctx, dev, options, &fl, meta, meta_size, &err);
        if (p) pipeline_hit(&fl, 1);
        else pipeline_rejected(&fl, 1, err, NULL);
    }
    if (!p) {
        /* Miss: make the bitcode, build it, keep it for the store. */
        void *bc = NULL, *m = NULL;
        size_t bc_size = 0, m_size = 0;
        struct pipeline_clock clk;
        pipeline_clock_start(&clk);
        int made = make(arg, &bc, &bc_size, &m, &m_size);
        if (made == 0 || made == 1) {
            const unsigned char *bin = bc;
            const char *text = bc;
            p = made == 1 ? real->clCreateProgramWithSource(ctx, 1, &text, &bc_size, &err) /* OpenCL C */
                          : real->clCreateProgramWithBinary(ctx, 1, &dev, &bc_size, &bin, NULL, &err);
            free(bc);
            if (p && (err = real->clBuildProgram(p, 1, &dev, options, NULL, NULL)) != CL_SUCCESS) {
                real->clReleaseProgram(p);
                p = NULL;
            }
        } else {
            err = CL_BUILD_PROGRAM_FAILURE;
        }
        pipeline_clock_stop(&clk);
        int refused = made != 0 && made != 1; /* make() said no: nothing was built, nothing failed to build */
        if (p && !(*meta = malloc(m_size ? m_size : 1))) {
            real->clReleaseProgram(p);
            p = NULL;
            err = CL_OUT_OF_HOST_MEMORY;
        }
        if (p) {
            memcpy(*meta, m, m_size);
            *meta_size = m_size;
        }
        /* Stored now: a late capture would have to wait for a release the
         * fusion layer only makes at exit. */
        struct pc_dev want = {.dev = dev};
        void *bin = NULL, *value = NULL;
        size_t size = 0, total = 0;
        if (p && fl.filling && read_binaries(p, 1, &want, &bin, &size) == 0)
            value = derived_value(m, m_size, bin, size, &total);
        const void *values[1] = {value};
        struct pipeline_output out = {.error = p ? CL_SUCCESS : err, .binaries = value ? values : NULL,
                                      .sizes = &total, .clock = &clk};
        if (cached && !refused) pipeline_built(&fl, 1, &out); /* a refused flight is let go by pipeline_end */
        else if (p) {
            char hex[33];
            key_hash_hex(hash, hex);
            hex[16] = 0;
            log_msg(LOG_INFO, "derived program %s made and built in %.1f ms (CLSHIM_CACHE=0: not cached)", hex,
                    clk.wall_ns / 1e6);
        }
        free(value);
        free(bin);
        free(m);
    }
    if (cached) pipeline_end(&fl, 1);
    pipeline_flight_free(&fl);
    if (errcode_ret) *errcode_ret = p ? CL_SUCCESS : err;
    return p;
}

/* ---- exit ---------------------------------------------------------------- */


void pc_print_summary(void)
{
    unsigned long foreign = atomic_load_explicit(&foreign_builds, memory_order_relaxed);
    struct pipeline_stats s;
    pipeline_stats(&s);
    if (foreign && !s.store.hits && !s.store.misses && !s.failed && !s.store.uncacheable) {
        log_msg(LOG_WARN, "summary: no build went through clshim's cache: %lu program%s built from the "
                          "application's own binaries (its binary cache, clCreateProgramWithBinary); clshim caches "
                          "programs built from source or IL", foreign, foreign == 1 ? "" : "s");
        return;
    }
    pipeline_print_summary();
    if (foreign)
        log_msg(LOG_WARN, "also %lu program%s built from the application's own binaries, not through "
                          "clshim's cache", foreign, foreign == 1 ? "" : "s");
}

/* At exit: the programs whose binaries are still owed (built here, and
 * neither run and synchronised nor released: a GEGL-like app builds its
 * largest program and exits without a synchronisation) are captured now,
 * on the worker, within CLSHIM_CAPTURE_EXIT_BUDGET (issue 16); what the
 * budget does not cover is given up, in one line. Inline (no worker) the
 * captures stop at the same deadline. */
static void capture_owed_at_exit(unsigned budget_ms)
{
    pthread_mutex_lock(&pending_lock);
    size_t owed = npending, queued = 0, skipped = 0;
    if (!owed || !pipeline_store() || config_get()->cache_readonly) {
        /* Nothing to store into: the miss lines said "not stored". */
        pthread_mutex_unlock(&pending_lock);
        return;
    }
    if (!budget_ms) {
        pthread_mutex_unlock(&pending_lock);
        pipeline_count_capture_lost(CAPTURE_LOST_EXIT, owed);
        log_msg(LOG_INFO, "%zu program%s built here not used or released before exit: not stored "
                          "(CLSHIM_CAPTURE_EXIT_BUDGET=0)", owed, owed == 1 ? "" : "s");
        return;
    }
    uint64_t t0 = now_ns(), deadline = t0 + (uint64_t)budget_ms * 1000000u;
    while (npending) {
        struct pc_program *rec = pending[0];
        if (queue_capture_locked(rec) == 0) {
            queued++;
            continue;
        }
        remove_pending_locked(rec);
        if (now_ns() >= deadline) {
            skipped++;
            continue;
        }
        pthread_mutex_lock(&rec->lock);
        capture(rec);
        pthread_mutex_unlock(&rec->lock);
    }
    pthread_mutex_unlock(&pending_lock);
    uint64_t left_ms = (now_ns() - t0) / 1000000u;
    size_t dropped = capture_exit(left_ms < budget_ms ? budget_ms - (unsigned)left_ms : 0);
    size_t given_up = skipped + (dropped < queued ? dropped : queued);
    pipeline_count_capture_lost(CAPTURE_LOST_EXIT, given_up);
    if (given_up)
        log_msg(LOG_INFO, "%zu of %zu program%s not used or released before exit: not stored, the exit budget "
                          "(CLSHIM_CAPTURE_EXIT_BUDGET=%u ms) spent", given_up, owed, owed == 1 ? "" : "s",
                budget_ms);
    else
        log_msg(LOG_INFO, "%zu program%s not used or released before exit: captured at exit in %.0f ms", owed,
                owed == 1 ? "" : "s", (now_ns() - t0) / 1e6);
}

static void at_exit(void)
{
    if (atomic_load_explicit(&idle_child, memory_order_relaxed)) return; /* a forked child that built nothing: the parent reports */
    capture_owed_at_exit(config_get()->capture_exit_budget); /* nothing left when owed_at_exit ran */
    /* Captures still queued for the worker: within the exit budget. */
    size_t dropped = capture_exit(config_get()->capture_exit_budget); /* says so itself */
    pipeline_count_capture_lost(CAPTURE_LOST_EXIT, dropped);
    pipeline_exit();
    const struct clshim_config *cfg = config_get();
    if (cfg->stats || log_enabled(LOG_INFO)) {
        if (!log_enabled(LOG_WARN)) log_set_level(LOG_WARN);
        pc_print_summary();
    }
}
