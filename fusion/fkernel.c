/* fkernel.c — kernel records: names, argument recording and snapshots.
 *
 * A record is made the first time an armed wrapper sees a kernel. Its name
 * comes from the program cache (pc_kernel_origin, no driver call) or else
 * CL_KERNEL_FUNCTION_NAME, once. Arguments are recorded only for kernels
 * that may be held: those named in the plan, or all once the extension API
 * was looked up. A record made (or decided) before that arming only starts
 * recording then, and counts as incomplete until every argument has been
 * set again — an incomplete kernel is never held.
 *
 * The record's lock also guards the driver's copy of the arguments: the
 * batcher temporarily sets a held kernel's snapshot to submit it, so every
 * clSetKernelArg on a tracked kernel, and every armed enqueue of one while
 * any kernel is held (enqueue.c, forward), happens under this lock.
 */
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "cache/key.h"
#include "program/origin.h"
#include "common/objmap.h"
#include "fusion/batch.h"
#include "fusion/batch_int.h"

static objmap *kernels;
static pthread_once_t kernels_once = PTHREAD_ONCE_INIT;

/* Each thread remembers the records it found last (a few, by handle), so
 * that an enqueue of a kernel seen before costs no map lookup (a striped
 * lock shared by all threads, a hash, a chain walk). A remembered record is
 * used only while no record has been freed since it was found: fk_forget
 * bumps records_freed before it frees one, so a stale entry (its kernel
 * released, or its handle reused by a new kernel) is never returned. */
#define RECENT_SETS 8 /* of two ways each: a chain's kernels rarely meet three in one set */
static int records_freed;
static __thread struct recent_record {
    cl_kernel k;
    struct fk_kernel *r;
    int freed; /* records_freed when it was found */
} recent[RECENT_SETS][2];

/* The set of k. Handles of kernels made one after another lie at a fixed
 * stride: a multiplicative hash spreads them (a shift-and-xor of the
 * address sent two of a 4-kernel chain to one slot, half the lookups). */
static struct recent_record *recent_set(cl_kernel k)
{
    uint64_t h = (uint64_t)(uintptr_t)k * 0x9E3779B97F4A7C15ull;
    return recent[h >> 61]; /* the top 3 bits: RECENT_SETS sets */
}

static void kernels_init(void) { kernels = objmap_new(); }

/* Bumps r->args_gen, under r->lock or on a record not yet published
 * (make_record: no lock to assert); fk_args_gen reads it without the lock. */
static void fk_args_changed(struct fk_kernel *r)
{
    __atomic_store_n(&r->args_gen, r->args_gen + 1, __ATOMIC_RELEASE);
}

/* Forgets the value; keeps what the argument is (a->mem). */
void fk_arg_clear(struct fk_arg *a)
{
    if (a->size > 16 && a->kind == FK_VALUE) free(a->v.heap);
    uint8_t mem = a->mem;
    memset(a, 0, sizeof *a);
    a->mem = mem;
}

void fk_args_release(struct fk_arg *args, cl_uint n)
{
    for (cl_uint i = 0; i < n; i++)
        if (args[i].kind == FK_VALUE && args[i].size > 16) fk_arg_clear(&args[i]);
}

void fk_free_args(struct fk_arg *args, cl_uint n)
{
    if (!args) return;
    for (cl_uint i = 0; i < n; i++) fk_arg_clear(&args[i]);
    free(args);
}

int fk_arg_copy(struct fk_arg *dst, const struct fk_arg *src)
{
    *dst = *src;
    if (src->kind == FK_VALUE && src->size > 16) {
        dst->v.heap = malloc(src->size);
        if (!dst->v.heap) {
            memset(dst, 0, sizeof *dst);
            return -1;
        }
        memcpy(dst->v.heap, src->v.heap, src->size);
    }
    return 0;
}

/* Decides (again, after a new arming) whether the record tracks arguments. */
static void decide_tracking(struct fk_kernel *r)
{
    int gen = __atomic_load_n(&fb()->arm_gen, __ATOMIC_ACQUIRE);
    if (r->arm_gen == gen) return;
    r->arm_gen = gen;
    int armed = __atomic_load_n(&fusion_armed, __ATOMIC_RELAXED);
    int want = armed > 0 && ((armed & (FUSION_ARMED_EXT | FUSION_ARMED_AUTO)) || r->in_plan);
    if (want && !r->track) {
        for (cl_uint i = 0; i < r->nargs; i++) fk_arg_clear(&r->args[i]); /* unknown until set again */
        r->all_set = 0;
        r->nheap = 0;
        fk_args_changed(r);
        r->track = 1;
    }
}

/* The specialization constants of r's IL program, sorted by id. An IL
 * program's constants change its code: the fused module is translated with
 * them, and they are part of the origin (so of the fused program's cache
 * key); a program setting more than FK_MAX_SPECS is never fused. */
static void record_specs(struct fk_kernel *r, const struct pc_origin *origin)
{
    if (origin->nspecs > FK_MAX_SPECS) r->origin_ok = 0;
    r->nspecs = origin->nspecs > FK_MAX_SPECS ? 0 : (uint32_t)origin->nspecs;
    for (uint32_t i = 0; i < r->nspecs; i++)
        r->specs[i] = (struct llvm_spec_const){origin->specs[i].id, origin->specs[i].size, origin->specs[i].value};
    for (uint32_t i = 1; i < r->nspecs; i++) /* insertion sort: a handful at most */
        for (uint32_t j = i; j > 0 && r->specs[j - 1].id > r->specs[j].id; j--) {
            struct llvm_spec_const t = r->specs[j];
            r->specs[j] = r->specs[j - 1];
            r->specs[j - 1] = t;
        }
}

/* r->origin_hash: XXH3-128 of its program's kind, options, input and
 * specialization constants. 0, or -1 out of memory. */
static int hash_origin(struct fk_kernel *r, const struct pc_origin *origin)
{
    XXH3_state_t *st = XXH3_createState();
    if (!st) return -1;
    uint64_t kk = (uint64_t)origin->kind, ol = strlen(origin->options), il = origin->input_len;
    XXH3_128bits_reset(st);
    XXH3_128bits_update(st, &kk, sizeof kk);
    XXH3_128bits_update(st, &ol, sizeof ol);
    XXH3_128bits_update(st, origin->options, ol);
    XXH3_128bits_update(st, &il, sizeof il);
    XXH3_128bits_update(st, origin->input, origin->input_len);
    for (uint32_t i = 0; i < r->nspecs; i++) {
        uint64_t spec[3] = {r->specs[i].id, r->specs[i].size, r->specs[i].value};
        XXH3_128bits_update(st, spec, sizeof spec);
    }
    XXH128_hash_t h = XXH3_128bits_digest(st);
    memcpy(r->origin_hash, &h.low64, 8);
    memcpy(r->origin_hash + 8, &h.high64, 8);
    XXH3_freeState(st);
    return 0;
}

/* What the program cache knows of r's program: its name, options,
 * specialization constants and origin hash; whether it can be fused. */
static void record_origin(struct fk_kernel *r, const struct pc_origin *origin)
{
    r->name = strdup(origin->name);
    r->options = strdup(origin->options);
    r->origin_ok = (origin->kind == KEY_SOURCE || origin->kind == KEY_IL) && r->options && r->name;
    r->from_il = origin->kind == KEY_IL;
    record_specs(r, origin);
    if (hash_origin(r, origin) != 0) r->origin_ok = 0;
}

static struct fk_kernel *make_record(cl_kernel k)
{
    const struct cl_api *real = fb()->real;
    static uint64_t next_id;
    struct fk_kernel *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    pthread_mutex_init(&r->lock, NULL);
    r->k = k;
    r->id = __atomic_add_fetch(&next_id, 1, __ATOMIC_RELAXED);
    struct pc_origin origin;
    if (pc_kernel_origin(k, &origin) == 0) {
        record_origin(r, &origin);
        pc_origin_free(&origin);
    } else {
        size_t n = 0;
        if (real->clGetKernelInfo(k, CL_KERNEL_FUNCTION_NAME, 0, NULL, &n) == CL_SUCCESS && n && n < 4096) {
            r->name = calloc(1, n + 1);
            if (r->name && real->clGetKernelInfo(k, CL_KERNEL_FUNCTION_NAME, n, r->name, NULL) != CL_SUCCESS)
                r->name[0] = 0;
        }
    }
    cl_uint nargs = 0;
    if (!r->name || real->clGetKernelInfo(k, CL_KERNEL_NUM_ARGS, sizeof nargs, &nargs, NULL) != CL_SUCCESS ||
        real->clGetKernelInfo(k, CL_KERNEL_CONTEXT, sizeof r->ctx, &r->ctx, NULL) != CL_SUCCESS || nargs > 4096) {
        free(r->options);
        free(r->name);
        free(r);
        return NULL;
    }
    r->nargs = nargs;
    r->args = calloc(nargs ? nargs : 1, sizeof *r->args);
    if (!r->args) {
        free(r->options);
        free(r->name);
        free(r);
        return NULL;
    }
    for (cl_uint i = 0; i < nargs; i++) {
        cl_kernel_arg_address_qualifier aq = 0;
        if (real->clGetKernelArgInfo &&
            real->clGetKernelArgInfo(k, i, CL_KERNEL_ARG_ADDRESS_QUALIFIER, sizeof aq, &aq, NULL) == CL_SUCCESS)
            r->args[i].mem = aq == CL_KERNEL_ARG_ADDRESS_GLOBAL || aq == CL_KERNEL_ARG_ADDRESS_CONSTANT;
        else
            r->args[i].mem = 2;
    }
    /* Under automatic fusion every kernel is a candidate (and the plan
     * grows while this runs): in_plan is not needed. */
    r->in_plan = fb()->automatic ? 0 : plan_has_kernel(fb()->plan, r->name);
    /* Decided here, where an application makes its kernels, rather than
     * at the run that is first learned: a cache look-up and a search for
     * clang cost the H100 26 us in a 30-chain run's second chain. */
    if (fb()->automatic && !r->from_il) (void)fa_sources_fusable();
    r->arm_gen = -1;
    decide_tracking(r);
    return r;
}

/* The record of k from the map, made on first sight. */
static struct fk_kernel *fk_lookup(cl_kernel k)
{
    pthread_once(&kernels_once, kernels_init);
    if (!kernels || !k) return NULL;
    struct fk_kernel *r = objmap_get(kernels, k);
    if (!r) {
        r = make_record(k);
        if (!r) return NULL;
        /* Two threads may race to make the record: the map keeps one; the
         * other is dropped (the application may not use one kernel from two
         * threads for arguments, so nothing was recorded in it yet). */
        struct fk_kernel *other = objmap_get(kernels, k);
        if (other || objmap_put(kernels, k, r) != 0) {
            fk_free_args(r->args, r->nargs);
            free(r->options);
            free(r->name);
            pthread_mutex_destroy(&r->lock);
            free(r);
            return other;
        }
    }
    return r;
}

/* fk_get past the thread's recent records (kept apart: the hit path then
 * saves no registers). */
static __attribute__((noinline)) struct fk_kernel *fk_get_slow(cl_kernel k, struct recent_record *set, int freed,
                                                               struct fk_kernel *r)
{
    if (!r) r = fk_lookup(k);
    if (!r) return NULL;
    if (set[0].k != k) set[1] = set[0]; /* the set's newest first; the older one goes */
    set[0] = (struct recent_record){k, r, freed};
    if (r->arm_gen != __atomic_load_n(&fb()->arm_gen, __ATOMIC_ACQUIRE)) {
        pthread_mutex_lock(&r->lock);
        decide_tracking(r);
        pthread_mutex_unlock(&r->lock);
    }
    return r;
}

struct fk_kernel *fk_get(cl_kernel k, int arm_gen)
{
    struct recent_record *set = recent_set(k);
    int freed = __atomic_load_n(&records_freed, __ATOMIC_ACQUIRE);
    struct fk_kernel *r = NULL;
    if (set[0].k == k && set[0].freed == freed) r = set[0].r;
    else if (set[1].k == k && set[1].freed == freed) r = set[1].r;
    /* No entry of a NULL k holds a record (fk_get_slow stores found ones only). */
    if (r && r->arm_gen == arm_gen) return r;
    return fk_get_slow(k, set, freed, r);
}

void fk_forget(cl_kernel k)
{
    pthread_once(&kernels_once, kernels_init); /* another thread may be making the map (TSan saw it) */
    if (!kernels) return;
    struct fk_kernel *r = objmap_remove(kernels, k);
    if (!r) return;
    __atomic_add_fetch(&records_freed, 1, __ATOMIC_ACQ_REL); /* before the free: see recent_record */
    fk_free_args(r->args, r->nargs);
    free(r->options);
    free(r->name);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

static int record(struct fk_arg *a, size_t size, const void *value, int kind)
{
    struct fk_arg n;
    memset(&n, 0, sizeof n);
    n.mem = a->mem;
    n.kind = (uint8_t)kind;
    n.size = (uint32_t)size;
    if (kind == FK_VALUE) {
        if (size > 16) {
            n.v.heap = malloc(size);
            if (!n.v.heap) return -1;
            memcpy(n.v.heap, value, size);
        } else {
            memcpy(n.v.inl, value, size);
        }
    } else if (kind == FK_SVM) {
        memcpy(n.v.inl, &value, sizeof value);
    }
    fk_arg_clear(a);
    *a = n;
    return 0;
}

/* Whether `a` already holds what clSetKernelArg(size, value) records:
 * local memory of that size (value NULL), or those bytes. */
static int holds_value(const struct fk_arg *a, size_t size, const void *value)
{
    if (a->size != size || a->kind != (value ? FK_VALUE : FK_LOCAL)) return 0;
    return !value || !memcmp(FK_BYTES(a), value, size);
}

cl_int fk_set_arg(struct fk_kernel *r, cl_uint index, size_t size, const void *value)
{
    pthread_mutex_lock(&r->lock);
    cl_int rc = fb()->real->clSetKernelArg(r->k, index, size, value);
    if (rc == CL_SUCCESS && r->track && index < r->nargs) {
        struct fk_arg *a = &r->args[index];
        /* A loop that sets the same arguments before every launch leaves
         * args_gen alone, so its repeats are recognised without comparing. */
        if (size <= UINT32_MAX && holds_value(a, size, value)) {
            pthread_mutex_unlock(&r->lock);
            return rc;
        }
        fk_args_changed(r);
        r->nheap -= a->kind == FK_VALUE && a->size > 16;
        if (size > UINT32_MAX || record(a, size, value, value ? FK_VALUE : FK_LOCAL) != 0) {
            fk_arg_clear(a); /* unknown: the kernel is not held until it is set again */
            r->all_set = 0;
        }
        r->nheap += a->kind == FK_VALUE && a->size > 16;
    }
    pthread_mutex_unlock(&r->lock);
    return rc;
}

/* All arguments recorded (under r->lock: fk_take asserts it). */
static int fk_complete(struct fk_kernel *r)
{
    if (!r->track || r->svm) return 0;
    if (r->all_set) return 1; /* an argument once set stays set until all_set is cleared */
    for (cl_uint i = 0; i < r->nargs; i++)
        if (r->args[i].kind == FK_UNSET) return 0;
    r->all_set = 1;
    return 1;
}

/* Copies the current arguments into *args (under r->lock: fk_take asserts it), growing
 * it to r->nargs entries when *cap is smaller. 0, or -1 on OOM with nothing
 * copied. The copy owns heap values (size > 16) of its own only when
 * r->nheap > 0. */
static int fk_snapshot_into(const struct fk_kernel *r, struct fk_arg **args, uint32_t *cap)
{
    if (*cap < r->nargs || !*args) {
        uint32_t n = r->nargs > 4 ? r->nargs : 4;
        struct fk_arg *grown = realloc(*args, n * sizeof *grown);
        if (!grown) return -1;
        *args = grown;
        *cap = n;
    }
    struct fk_arg *s = *args;
    if (!r->nheap) { /* every value inline: one copy */
        memcpy(s, r->args, r->nargs * sizeof *s);
        return 0;
    }
    for (cl_uint i = 0; i < r->nargs; i++)
        if (fk_arg_copy(&s[i], &r->args[i]) != 0) {
            while (i--) fk_arg_clear(&s[i]);
            return -1;
        }
    return 0;
}

static cl_int set_one(struct fk_kernel *r, cl_uint i, const struct fk_arg *a)
{
    if (a->kind == FK_LOCAL) return fb()->real->clSetKernelArg(r->k, i, a->size, NULL);
    if (a->kind == FK_VALUE) return fb()->real->clSetKernelArg(r->k, i, a->size, FK_BYTES(a));
    return CL_INVALID_ARG_VALUE;
}

cl_int fk_apply(struct fk_kernel *r, const struct fk_arg *args, int back)
{
    cl_int rc = CL_SUCCESS;
    for (cl_uint i = 0; i < r->nargs; i++) {
        if (fk_arg_equal(&args[i], &r->args[i])) continue;
        cl_int e = set_one(r, i, back ? &r->args[i] : &args[i]);
        if (e != CL_SUCCESS && rc == CL_SUCCESS) rc = e;
    }
    return rc;
}

/* Work-group size limit of the kernel on `dev` (0: unknown); under r->lock (fk_take asserts it). */
static size_t fk_wg_max(struct fk_kernel *r, cl_device_id dev)
{
    if (r->wg_dev != dev) {
        size_t n = 0;
        if (fb()->real->clGetKernelWorkGroupInfo(r->k, dev, CL_KERNEL_WORK_GROUP_SIZE, sizeof n, &n, NULL) !=
            CL_SUCCESS)
            n = 0;
        r->wg_dev = dev;
        r->wg_max = n;
    }
    return r->wg_max;
}

int fk_take(struct fk_kernel *r, cl_device_id dev, size_t wg, struct held *h, const char **why)
{
    if (!CLSHIM_ASSERT_HELD(&r->lock)) return *why = "internal error", 0;
    if (wg) {
        size_t max = fk_wg_max(r, dev);
        if (!max || wg > max) return *why = "work-group size above the kernel's limit", 0;
    }
    if (!fk_complete(r)) return *why = r->svm ? "SVM arguments" : "arguments set before fusion was armed", 0;
    /* A loop holding the same kernels with the same arguments finds each
     * slot's array already holding the snapshot: no copy. */
    if (!h || (h->snap_id == r->id && h->snap_gen == r->args_gen && !r->nheap)) return 1;
    int copied = fk_snapshot_into(r, &h->args, &h->args_cap) == 0;
    h->snap_id = copied && !r->nheap ? r->id : 0;
    h->snap_gen = r->args_gen;
    return copied;
}

cl_int fk_set_arg_svm(struct fk_kernel *r, cl_uint index, const void *value)
{
    pthread_mutex_lock(&r->lock);
    cl_int rc = fb()->real->clSetKernelArgSVMPointer(r->k, index, value);
    if (rc == CL_SUCCESS && !r->svm) {
        r->svm = 1;
        fk_args_changed(r); /* never held again: no replay either */
    }
    pthread_mutex_unlock(&r->lock);
    return rc;
}
