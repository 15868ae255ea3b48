/* origin.h — what the program layer offers fusion (fusion/ includes this
 * header only): a kernel's origin, derived programs built through the cache,
 * and the enqueue/synchronisation notes of late capture.
 */
#ifndef CLSHIM_PROGRAM_ORIGIN_H
#define CLSHIM_PROGRAM_ORIGIN_H

#include <stddef.h>
#include <stdint.h>

#include "cache/key.h"
#include "common/clapi.h"

/* What fusion needs to know about a kernel's program: its IR input, as an
 * owned copy (the program may be rebuilt or released by another thread
 * meanwhile). */
struct pc_spec_constant {
    uint32_t id;
    uint32_t size;  /* 1, 2, 4 or 8 */
    uint64_t value; /* the bytes the app set, zero-extended */
};
struct pc_origin {
    enum key_kind kind;       /* KEY_SOURCE or KEY_IL */
    void *input;              /* the source (NUL-terminated) or IL bytes, as built: an application's
                               * cache-defeating marker in its neutral form (cache/quirks.h) */
    size_t input_len;
    char *options;            /* the program's last build options ("" if none) */
    char *name;               /* the kernel's name */
    struct pc_spec_constant *specs; /* the IL program's specialization constants */
    size_t nspecs;
};
/* Fills *out with copies; 0, or -1 when the kernel's program is not one
 * clshim tracks (e.g. created from a binary) or out of memory (then *out
 * holds nothing to free). */
int pc_kernel_origin(cl_kernel k, struct pc_origin *out);
void pc_origin_free(struct pc_origin *o);

/* A tracked program's kind (KEY_SOURCE or KEY_IL) and a copy of its source
 * (NUL-terminated, as built: see pc_origin) or IL bytes in *input
 * (malloc'd; the caller frees). 0, or
 * -1 when the program is not tracked or out of memory (nothing to free). */
int pc_program_input(cl_program prog, enum key_kind *kind, void **input, size_t *input_len);

/* A program clshim derives itself (a fused kernel), built through the cache.
 * `key` is the caller's key material: everything that determines the
 * program (its inputs' keys, kernel names, ranges, argument classes, plan
 * options). The cached value is the caller's metadata plus the device
 * binary. On a hit nothing is made: *meta receives the stored metadata. On a
 * miss make() returns SPIR bitcode and metadata (malloc'd; freed here) and 0,
 * or OpenCL C text in *bitcode (bitcode_size bytes) and 1; the program is
 * created from the bitcode (or the source) and built, and its device binary is
 * stored right away (a late capture would wait for a release fusion only
 * makes at exit). make() may refuse (any other return: nothing is built,
 * nor counted as a failed build). Returns the built program (the
 * caller owns one reference) and *meta (malloc'd, caller frees), or NULL
 * with *errcode_ret set and nothing to free. Thread-safe. */
typedef int (*pc_make_fn)(void *arg, void **bitcode, size_t *bitcode_size, void **meta, size_t *meta_size);
cl_program pc_build_derived(cl_context ctx, cl_device_id dev, const char *options, const void *key, size_t key_len,
                            pc_make_fn make, void *arg, void **meta, size_t *meta_size, cl_int *errcode_ret);

/* The device-independent half of a derived program: what make() computes
 * before any driver is involved (route (b) of fusion: the generated OpenCL
 * C and its metadata), stored under the caller's key material alone, so a
 * machine without LLVM (the GPU machine) can build a fused kernel from an
 * imported cache. get: 0 with *value (malloc'd, caller frees), or -1 (none,
 * cache off, out of memory). put: best effort. */
int pc_derived_get(const void *key, size_t key_len, void **value, size_t *size);
void pc_derived_put(const void *key, size_t key_len, const void *value, size_t size, uint64_t make_ns);

/* Automatic fusion's fused programs made off the application's thread
 * (fusion/fjob.h): the capture helper (program/capture_proc.h) makes the
 * program from a job, builds it, runs it once and stores it under the key
 * pc_build_derived() uses; the application switches to it once it is
 * there. pc_derived_by_helper() returns the program when the cache holds
 * it (a hit as pc_build_derived()'s: *meta, the caller owns a reference);
 * else NULL and *state says why. `job` (job_len bytes) is handed over when
 * the key is neither stored nor with the helper; NULL: only look (the
 * caller handed it before). It never waits for another process, never
 * claims the key (the helper does) and never compiles. */
enum pc_helper_state {
    PC_HELPER_NONE,    /* no helper here (a driver whose code cache no other process shares,
                        * CLSHIM_CAPTURE_PROCESS=0, no writable cache, the helper gone):
                        * the caller makes it itself */
    PC_HELPER_PENDING, /* with the helper (handed now or before), not answered yet */
    PC_HELPER_LOST     /* answered without storing (refused, failed: its line says why) */
};
/* The derived program when the cache holds it (as pc_build_derived()'s
 * hit), else NULL: a look that neither makes, claims nor waits (a program
 * that cannot be made here, kept from the cache all the same). */
cl_program pc_derived_lookup(cl_context ctx, cl_device_id dev, const char *options, const void *key, size_t key_len,
                             void **meta, size_t *meta_size);
cl_program pc_derived_by_helper(cl_context ctx, cl_device_id dev, const char *options, const void *key,
                                size_t key_len, const void *job, size_t job_len, void **meta, size_t *meta_size,
                                enum pc_helper_state *state);

/* Whether the cache holds any derived program's device-independent half
 * or device binary (a marker record each store of one writes): where no
 * compiler can make one (no clang), automatic fusion of kernels built from
 * source then has nothing to build from. 0 also with the cache off. */
int pc_derived_any(void);

/* Derived programs that cannot be made or built for a key on a device
 * (a fusion the analysis refuses, a fused program the driver fails to
 * build): remembered in the cache under the caller's key material, the
 * build options, the device's identity (driver version included) and `by`
 * (who refused, with its version: a later one may accept), so no later
 * process tries again on that driver. The record is the reason text and
 * whether it holds for the kernels whatever the key (`permanent`). get: 0
 * with *reason (malloc'd, caller frees) and *permanent, or -1 (none, cache
 * off, out of memory). put: best effort. */
int pc_derived_refusal_get(cl_device_id dev, const char *options, const void *key, size_t key_len, const char *by,
                           char **reason, int *permanent);
void pc_derived_refusal_put(cl_device_id dev, const char *options, const void *key, size_t key_len, const char *by,
                            const char *reason, int permanent);
/* pc_derived_refusal_put() where the device is known by its identity
 * (device_info()->identity) only: the capture helper's process. */
void pc_derived_refusal_put_for(const char *identity, const char *device, const char *options, const void *key,
                                size_t key_len, const char *by, const char *reason, int permanent);

/* What earlier runs saw of a derived program on a device: automatic
 * fusion's prediction of whether loading it pays in this run
 * (fusion/fhistory.c). Kept under the caller's key material (its
 * sequence's kernels), the options and the device's identity; written at exit
 * by the run that used the key. Only a prediction: any value (another
 * run's, a remote tier's) changes when a sequence fuses, never what it
 * computes. get: 0 with *h, or -1 (none, malformed, cache off). put: best
 * effort. */
struct pc_derived_history {
    uint32_t runs;        /* runs that wrote it (saturates) */
    uint32_t occurrences; /* the last run's occurrences of the sequence */
    uint32_t load_us;     /* loading the program on the application's thread, the last time measured */
    uint32_t loads;       /* runs that measured a load (saturates) */
    int32_t gain_ns;      /* one fused occurrence against one unfused; 0: never measured */
};
int pc_derived_history_get(cl_device_id dev, const char *options, const void *key, size_t key_len,
                           struct pc_derived_history *h);
void pc_derived_history_put(cl_device_id dev, const char *options, const void *key, size_t key_len,
                            const struct pc_derived_history *h);

/* fn runs at exit before the cache closes (once; a later call replaces it):
 * for records a run writes when it knows its totals. */
void pc_before_cache_exit(void (*fn)(void));

/* Late capture (PoCL). A program built here whose binary is stored after
 * use is "pending" until its handle is released or the first
 * synchronisation after one of its kernels ran (clFinish, clWaitForEvents,
 * a blocking read or map): then the binary, with the work-group functions
 * PoCL compiled at the first enqueue, is read and stored, on the background
 * capture thread (program/capture.h; exit waits for it at most
 * CLSHIM_CAPTURE_EXIT_BUDGET). A program that neither ran nor was released
 * is read at exit, within the same budget, by an exit handler registered
 * again after each such build and first run, so it runs before the
 * teardown of the driver state they created (program/exit.c).
 * The enqueue and sync wrappers call these only while pc_capture_pending()
 * (one relaxed load). */
extern int pc_pending_captures;
static inline int pc_capture_pending(void)
{
    return __atomic_load_n(&pc_pending_captures, __ATOMIC_RELAXED) != 0;
}
void pc_note_enqueue(cl_kernel kernel);
void pc_sync_point(void);

#endif
