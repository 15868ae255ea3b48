/* build.c — clBuildProgram through the cache.
 *
 * A build keys each device's flight (the program's kind, options, device,
 * route and specialization constants; the pipeline adds headers and
 * input), then runs the pipeline (run.c) as the build kind: a shared
 * failure, a hit that makes the effective program, or the driver's build
 * whose binary is stored now or captured late. compile.c and link.c are
 * the other two operations of the same protocol.
 */
#include "program/program_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/quirks.h"
#include "compiler/route_a.h"
#include "program/capture_proc.h"

/* Nonzero when clshim caches nothing on this device (cache/quirks.h). */
int stands_aside(const struct device_info *info)
{
    if (!(info->quirks & QUIRK_STAND_ASIDE_UNCACHED)) return 0;
    LOG_ONCE(LOG_INFO, "%s", quirk_description(QUIRK_STAND_ASIDE_UNCACHED));
    return 1;
}

/* The key of device i: the program's fields, then the pipeline finishes it
 * (headers, input, hash). No key when the build must not be cached. */
static void derive_key(struct pc_program *rec, const char *options, size_t i)
{
    const struct device_info *info = device_info(pc_real, rec->devs[i].dev);
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

/* The driver's build: on the handle, or (translated IL) on a new program. */
static cl_int driver_build(struct pc_program *rec, cl_uint ndev, const cl_device_id *devs, const char *options)
{
    if (!rec->translated) {
        set_effective(rec, NULL);
        cl_int rc = pc_real->clBuildProgram(rec->handle, ndev, devs, options, NULL, NULL);
        if (retry_after_emptying_tier(rc, "clBuildProgram"))
            rc = pc_real->clBuildProgram(rec->handle, ndev, devs, options, NULL, NULL);
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
    cl_int rc = pc_real->clBuildProgram(p, ndev, devs, options, NULL, NULL);
    if (retry_after_emptying_tier(rc, "clBuildProgram")) rc = pc_real->clBuildProgram(p, ndev, devs, options, NULL, NULL);
    /* Even a failed build stands in for the handle: the app's build log and
     * status queries are the driver's answers about it. */
    set_effective(rec, p);
    return rc;
}

static void build_failed(struct run *r, cl_int *err)
{
    set_effective(r->rec, NULL);
    r->rec->failed = 1;
    for (size_t i = 0; i < r->n; i++)
        if (pipeline_failure(&r->fl[i])) *err = pipeline_failure(&r->fl[i]);
    logs_from_hits(r->rec);
}

static void build_took_hit(struct run *r, cl_program p)
{
    set_effective(r->rec, p);
    logs_from_hits(r->rec);
}

/* The program built: the effective one (translated IL) or the handle. */
static cl_program build_driver(struct run *r, cl_int *err)
{
    *err = driver_build(r->rec, (cl_uint)r->n, r->devlist, r->options);
    return r->rec->effective ? r->rec->effective : r->rec->handle;
}

static const struct run_kind build_kind = {
    .begin_flags = PIPELINE_SHARE_FAILURE | PIPELINE_FLEET_CLAIM,
    .store = RUN_SHARE_FAILURE | RUN_CAPTURE | RUN_LOGS,
    .no_program = CL_OUT_OF_HOST_MEMORY,
    .failed = build_failed,
    .from_hits = run_hits_built,
    .took_hit = build_took_hit,
    .driver = build_driver,
};

/* A new build of rec (its lock held): the options it answers and gives
 * the driver, the working directory, fresh flights. -1 when out of memory. */
static int start_build(struct pc_program *rec, cl_uint ndev, const cl_device_id *devs, const char *options)
{
    (void)CLSHIM_ASSERT_HELD(&rec->lock);
    free(rec->options);
    rec->options = strdup(options ? options : "");
    rec->answers_options = rec->arg_info_added = 0;
    free(rec->driver_options);
    rec->driver_options = strdup(options ? options : "");
    free(rec->cwd);
    rec->cwd = getcwd(NULL, 0);
    if (new_devs(rec, ndev, devs, rec->kind) != 0 || !rec->options || !rec->driver_options) return -1;
    return 0;
}

/* Keys, then the pipeline run as a build (rec->lock held). *late: a late
 * capture is owed. */
static cl_int build_record(struct pc_program *rec, cl_uint ndev, const cl_device_id *devs, const char *options,
                           int *late)
{
    (void)CLSHIM_ASSERT_HELD(&rec->lock);
    need_exit_handler(); /* the driver is loaded by now */
    capture_proc_poll(keep_reply_in_memory);
    for (cl_uint i = 0; i < ndev; i++)
        if (config_get()->cache) derive_key(rec, options, i);
    struct run r = {.kind = &build_kind, .rec = rec, .fl = rec->flights, .devs = rec->devs, .n = ndev,
                    .cached = 1, .ctx = rec->context, .devlist = devs, .options = options, .handle = rec->handle};
    cl_int err = CL_BUILD_PROGRAM_FAILURE;
    rec->failed = 0;
    run_pipeline(&r, &err);
    *late = 0;
    for (size_t i = 0; i < rec->ndevs; i++) *late |= rec->devs[i].needs_capture;
    rec->ran = 0;
    rec->source_build = r.built && rec->kind == KEY_SOURCE && !rec->translated;
    rec->handed_off = 0;
    rec->built_cpu_ns = process_cpu_ns();
    return err;
}

/* Created from the application's own binaries (or built-in kernels): not
 * clshim's to cache, but counted so the summary can say why nothing went
 * through the cache. */
static cl_int build_foreign(cl_program prog, cl_uint num_devices, const cl_device_id *device_list_in,
                            const char *options, void(CL_CALLBACK *notify)(cl_program, void *), void *user_data)
{
    atomic_fetch_add_explicit(&pc_foreign_builds, 1, memory_order_relaxed);
    need_exit_handler();
    return pc_real->clBuildProgram(prog, num_devices, device_list_in, options, notify, user_data);
}

static cl_int build_program(cl_program prog, cl_uint num_devices, const cl_device_id *device_list_in,
                            const char *options, void(CL_CALLBACK *notify)(cl_program, void *), void *user_data)
{
    struct pc_program *rec = objmap_get(pc_programs, prog);
    if (!rec) return build_foreign(prog, num_devices, device_list_in, options, notify, user_data);
    if ((num_devices == 0) != (device_list_in == NULL)) return CL_INVALID_VALUE;
    if (!notify && user_data) return CL_INVALID_VALUE;
    /* The driver refuses to rebuild a program with kernels attached; on a
     * hit it would not be asked, so refuse here as it would. */
    if (__atomic_load_n(&rec->nkernels, __ATOMIC_ACQUIRE)) return CL_INVALID_OPERATION;
    cl_device_id *owned = NULL;
    cl_uint ndev = 0;
    const cl_device_id *devs = NULL;
    if (device_list(rec->context, num_devices, device_list_in, &owned, &ndev, &devs) != 0)
        return pc_real->clBuildProgram(prog, num_devices, device_list_in, options, notify, user_data);
    pthread_mutex_lock(&rec->lock);
    if (start_build(rec, ndev, devs, options) != 0) {
        pthread_mutex_unlock(&rec->lock);
        free(owned);
        return rec->translated ? CL_OUT_OF_HOST_MEMORY
                               : pc_real->clBuildProgram(prog, num_devices, device_list_in, options, notify, user_data);
    }
    int late;
    cl_int err = build_record(rec, ndev, devs, options, &late);
    pthread_mutex_unlock(&rec->lock);
    if (late) {
        add_pending(rec);
        arm_owed_capture_at_exit();
    }
    free(owned);
    if (notify) notify(prog, user_data);
    return err;
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
