/* record.c — program records and their reference counts.
 *
 * The app's cl_program handle is always the driver's program; a record beside
 * it keeps what the cache and the queries need (input, options, per-device
 * flights, the effective program). It lives as long as the handle: created
 * with the program, dropped at the release of its last reference (the
 * app's and one per kernel, as the driver counts them).
 */
#include "program/program_int.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "cache/driver_writes.h"
#include "program/capture.h"
#include "program/capture_proc.h"

const struct cl_api *pc_real;
objmap *pc_programs; /* app handle -> struct pc_program */
objmap *pc_kernels;  /* kernel from an effective program -> struct pc_kernel */

/* The device's name for log lines and records. */
static const char *device_name(cl_device_id dev)
{
    const struct device_info *info = device_info(pc_real, dev);
    return info ? info->name : "?";
}

void pc_init(const struct cl_api *real_api)
{
    pc_real = real_api;
    pc_programs = objmap_new();
    pc_kernels = objmap_new();
    pipeline_memory_setup(config_get()->mem_cache_max, config_get()->mem_cache);
    pthread_atfork(NULL, NULL, after_fork_in_child);
    capture_init(&(struct capture_ops){run_capture, capture_done});
    capture_set_exit_budget(config_get()->capture_exit_budget);
    capture_set_defer_max(config_get()->capture_defer_max);
    driver_writes_recover_early(); /* before the driver reads its cache */
}

void free_devs(struct pc_program *rec)
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

void free_record(struct pc_program *rec)
{
    remove_pending(rec);
    free_devs(rec);
    free(rec->input);
    free(rec->keyed);
    free(rec->scan);
    free(rec->specs);
    free(rec->options);
    free(rec->compile_options);
    free(rec->compile_answer);
    free(rec->driver_options);
    free(rec->cwd);
    free(rec->ran_names);
    pthread_mutex_destroy(&rec->lock);
    free(rec);
}

struct pc_program *new_record(cl_program handle, cl_context ctx, enum key_kind kind, char *input,
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
    if (objmap_put(pc_programs, handle, rec) != 0) {
        rec->input = NULL;
        free_record(rec);
        return NULL;
    }
    return rec;
}

cl_program pc_create_with_source(cl_context ctx, cl_uint count, const char **strings, const size_t *lengths,
                                 cl_int *errcode_ret)
{
    cl_int err;
    cl_program prog = pc_real->clCreateProgramWithSource(ctx, count, strings, lengths, &err);
    if (!prog && retry_after_emptying_tier(err, "clCreateProgramWithSource"))
        prog = pc_real->clCreateProgramWithSource(ctx, count, strings, lengths, &err);
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

int context_devices(cl_context ctx, cl_device_id **devs, cl_uint *n)
{
    size_t size = 0;
    if (pc_real->clGetContextInfo(ctx, CL_CONTEXT_DEVICES, 0, NULL, &size) != CL_SUCCESS || !size) return -1;
    *devs = malloc(size);
    if (!*devs) return -1;
    if (pc_real->clGetContextInfo(ctx, CL_CONTEXT_DEVICES, size, *devs, NULL) != CL_SUCCESS) {
        free(*devs);
        return -1;
    }
    *n = (cl_uint)(size / sizeof(cl_device_id));
    return 0;
}

void set_effective(struct pc_program *rec, cl_program p)
{
    if (rec->effective) pc_real->clReleaseProgram(rec->effective);
    rec->effective = p;
}

/* New device and flight arrays for a build, compile or link of rec (its
 * lock held); -1 when out of memory. */
int new_devs(struct pc_program *rec, cl_uint ndev, const cl_device_id *devs, enum key_kind kind)
{
    (void)CLSHIM_ASSERT_HELD(&rec->lock);
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

int device_list(cl_context ctx, cl_uint n, const cl_device_id *list, cl_device_id **owned, cl_uint *ndev,
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

cl_int pc_retain_program(cl_program prog)
{
    struct pc_program *rec = objmap_get(pc_programs, prog);
    cl_int rc = pc_real->clRetainProgram(prog);
    if (rec && rc == CL_SUCCESS) __atomic_add_fetch(&rec->refs, 1, __ATOMIC_RELAXED);
    return rc;
}

/* Called before a release that may drop the handle's last reference: the
 * built binary is captured while the program still exists. */
void before_last_reference(struct pc_program *rec)
{
    if (__atomic_load_n(&rec->refs, __ATOMIC_RELAXED) != 1) return;
    /* The worker must not hold the last reference: PoCL aborts when a
     * program outlives the app's release of its context (clinfo did). So a
     * queued capture is taken back and done here, a running one awaited. */
    pthread_mutex_lock(&pc_pending_lock);
    int queued = rec->queued;
    pthread_mutex_unlock(&pc_pending_lock);
    if (queued && capture_cancel_or_wait(rec)) capture_done(rec);
    pthread_mutex_lock(&rec->lock);
    if (rec->refs == 1) capture(rec);
    pthread_mutex_unlock(&rec->lock);
}

void drop_reference(struct pc_program *rec)
{
    unsigned left = __atomic_sub_fetch(&rec->refs, 1, __ATOMIC_ACQ_REL);
    /* Never below zero: a record dropped more often than referenced is
     * left alone (the driver answered the release itself). */
    if (!CLSHIM_ASSERT(left != UINT_MAX) || left != 0) return;
    objmap_remove(pc_programs, rec->handle);
    pthread_mutex_lock(&pc_pending_lock);
    int queued = rec->queued;
    rec->orphaned = queued;
    pthread_mutex_unlock(&pc_pending_lock);
    if (queued) return; /* capture_done frees it */
    set_effective(rec, NULL);
    free_record(rec);
}

cl_int pc_release_program(cl_program prog)
{
    struct pc_program *rec = objmap_get(pc_programs, prog);
    if (!rec) return pc_real->clReleaseProgram(prog);
    before_last_reference(rec);
    cl_int rc = pc_real->clReleaseProgram(prog);
    if (rc == CL_SUCCESS) drop_reference(rec);
    return rc;
}

int pc_program_input(cl_program prog, enum key_kind *kind, void **input, size_t *input_len)
{
    struct pc_program *rec = objmap_get(pc_programs, prog);
    if (!rec) return -1;
    pthread_mutex_lock(&rec->lock);
    *kind = rec->kind;
    *input_len = rec->input_len;
    *input = malloc(rec->input_len + 1);
    if (*input) {
        memcpy(*input, built_input(rec), rec->input_len);
        ((char *)*input)[rec->input_len] = 0;
    }
    pthread_mutex_unlock(&rec->lock);
    return *input ? 0 : -1;
}
