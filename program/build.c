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
#include "cache/snapshot.h"
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
    struct key_source in = {.source = built_input(rec), .len = rec->input_len, .options = options,
                            .driver_dir = quirk_source_dir(info->quirks, ddir, sizeof ddir) == 0 ? ddir : NULL};
    pipeline_key(&rec->flights[i], &k, rec->kind == KEY_SOURCE ? &in : NULL, info->identity, built_input(rec),
                 rec->input_len, rec->handle);
}

/* Each application's marker is said once per process, recognised or kept. */
static void say_marker(const struct app_marker *m, const char *kept_because)
{
    static unsigned said_recognised, said_kept;
    unsigned bit = 1u << (m->row & 31);
    if (__atomic_fetch_or(kept_because ? &said_kept : &said_recognised, bit, __ATOMIC_RELAXED) & bit) return;
    if (kept_because)
        log_msg(LOG_INFO, "%s's cache-defeating marker kept in the key: %s; such programs miss on every build: "
                "set %s instead (clshim's cache then takes the place of %s's)",
                m->app, kept_because, m->instead, m->app);
    else
        log_msg(LOG_INFO, "%s's cache-defeating marker recognised: the constant %s<random> it appends to its "
                "sources is keyed and built with zeros for the random part (nothing uses it; the application "
                "still sees its own text)",
                m->app, m->stem);
}

/* An application's cache-defeating marker (cache/quirks.h): on a driver
 * clshim caches on, the build's key and the driver's build are of the
 * source's neutral form (rec->keyed), where nothing the application sees can
 * tell. Why the neutral text is built, not only keyed: the key must name
 * exactly what was compiled (docs/cache.md, "Exact by construction"), and
 * the capture helper rebuilds from the text it is handed. */
static void neutral_marker(struct pc_program *rec, const char *options)
{
    (void)CLSHIM_ASSERT_HELD(&rec->lock);
    free(rec->keyed);
    rec->keyed = NULL;
    if (rec->kind != KEY_SOURCE || rec->translated || !rec->ndevs) return;
    struct app_marker m;
    char why[256] = "";
    int found = 1;
    for (size_t i = 0; i < rec->ndevs && found > 0; i++) {
        const struct device_info *info = device_info(pc_real, rec->devs[i].dev);
        if (!info || stands_aside(info)) return;
        found = quirk_app_marker(rec->input, rec->input_len, options, info->identity, &m, why, sizeof why);
    }
    if (found < 0) say_marker(&m, why);
    if (found <= 0 || !(rec->keyed = malloc(rec->input_len + 1))) return;
    memcpy(rec->keyed, rec->input, rec->input_len + 1);
    quirk_app_marker_neutral(&m, rec->keyed);
    rec->marker = m;
}

/* After the keys of a neutral form: 1 when it holds, 0 when no key was
 * made (the driver builds the application's text, as for any program not
 * cached), -1 when a header a key names mentions the marker's stem (a
 * macro of that name, a use of it: the rename could change more than a
 * name; said once). */
static int neutral_holds(struct pc_program *rec)
{
    int keyed = 0;
    for (size_t i = 0; i < rec->ndevs; i++) {
        const struct pipeline_flight *f = &rec->flights[i];
        keyed |= f->key != NULL;
        for (size_t j = 0; f->key && f->snap && j < f->snap->n; j++) {
            const struct snap_file *h = &f->snap->files[j];
            if (!quirk_app_marker_named(&rec->marker, h->bytes, h->len)) continue;
            char why[4200];
            snprintf(why, sizeof why, "a header the key names mentions it (%.4000s)", h->path);
            say_marker(&rec->marker, why);
            return -1;
        }
    }
    return keyed;
}

/* The keys of every device: of the neutral form where it holds, else of the
 * application's text. */
static void derive_keys(struct pc_program *rec, const char *options, cl_uint ndev)
{
    neutral_marker(rec, options);
    for (cl_uint i = 0; i < ndev; i++) derive_key(rec, options, i);
    int holds = rec->keyed ? neutral_holds(rec) : 1;
    if (holds > 0) {
        if (rec->keyed) say_marker(&rec->marker, NULL);
        return;
    }
    free(rec->keyed);
    rec->keyed = NULL;
    for (cl_uint i = 0; holds < 0 && i < ndev; i++) {
        pipeline_flight_free(&rec->flights[i]);
        derive_key(rec, options, i);
    }
}

/* The driver's build of the neutral form: on a program of its own that
 * stands in for the handle (as a translated IL program does), so the handle
 * keeps the application's source for CL_PROGRAM_SOURCE. NULL with *rc when
 * the program cannot be made. */
static cl_program build_neutral(struct pc_program *rec, cl_uint ndev, const cl_device_id *devs, const char *options,
                                cl_int *rc)
{
    const char *text = rec->keyed;
    size_t len = rec->input_len;
    cl_program p = pc_real->clCreateProgramWithSource(rec->context, 1, &text, &len, rc);
    if (!p && retry_after_emptying_tier(*rc, "clCreateProgramWithSource"))
        p = pc_real->clCreateProgramWithSource(rec->context, 1, &text, &len, rc);
    if (!p) return NULL;
    *rc = pc_real->clBuildProgram(p, ndev, devs, options, NULL, NULL);
    if (retry_after_emptying_tier(*rc, "clBuildProgram")) *rc = pc_real->clBuildProgram(p, ndev, devs, options, NULL, NULL);
    return p;
}

/* The driver's build: on the handle, or (translated IL) on a new program. */
static cl_int driver_build(struct pc_program *rec, cl_uint ndev, const cl_device_id *devs, const char *options)
{
    if (!rec->translated) {
        set_effective(rec, NULL);
        cl_int rc;
        cl_program neutral = rec->keyed ? build_neutral(rec, ndev, devs, options, &rc) : NULL;
        if (neutral) {
            set_effective(rec, neutral); /* failed too: its status and log are the build's */
            return rc;
        }
        if (rec->keyed) { /* the handle is built: its binary is not what the key names */
            log_msg(LOG_INFO, "program %p: its neutral form cannot be made (%d): not cached", (void *)rec->handle, rc);
            pipeline_uncacheable(rec->flights, rec->ndevs);
            free(rec->keyed);
            rec->keyed = NULL;
        }
        rc = pc_real->clBuildProgram(rec->handle, ndev, devs, options, NULL, NULL);
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
    free(rec->keyed); /* the last build's: this one keys afresh */
    rec->keyed = NULL;
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
    if (config_get()->cache) derive_keys(rec, options, ndev);
    struct run r = {.kind = &build_kind, .rec = rec, .fl = rec->flights, .devs = rec->devs, .n = ndev,
                    .cached = 1, .ctx = rec->context, .devlist = devs, .options = options, .handle = rec->handle};
    cl_int err = CL_BUILD_PROGRAM_FAILURE;
    rec->failed = 0;
    run_pipeline(&r, &err);
    *late = 0;
    for (size_t i = 0; i < rec->ndevs; i++) *late |= rec->devs[i].needs_capture;
    rec->ran = 0;
    pthread_mutex_lock(&pc_ran_names_lock); /* no kernel lives across a build: none has run since */
    rec->nran_names = 0;
    pthread_mutex_unlock(&pc_ran_names_lock);
    rec->source_build = (r.built || r.refresh) && rec->kind == KEY_SOURCE && !rec->translated;
    rec->handed_off = 0;
    rec->captured_here = 0;
    rec->built_cpu_ns = process_cpu_ns();
    rec->synced_cpu_ns = 0;
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
    /* Built before and not yet captured (built, queried, built again with
     * other options before first use, as a conformance test does): that
     * build is captured now, before the new one replaces it in the driver;
     * dropped, it would miss on every warm run, silently. */
    capture(rec);
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
    if (appended && (rc == CL_BUILD_PROGRAM_FAILURE || rc == CL_INVALID_BUILD_OPTIONS))
        options_blame_build(prog, num_devices, device_list, app_options, config_get()->build_options_append);
    if (with) restore_app_options(prog, options);
    free(with);
    free(appended);
    return rc;
}
