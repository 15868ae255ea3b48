/* build.c — clBuildProgram, clCompileProgram and clLinkProgram through the cache.
 *
 * Each operation keys its flights, runs the pipeline protocol and does the
 * driver's work the pipeline asks for; the records and queries then answer
 * as the driver would have.
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

/* Compile and link.
 * clCompileProgram is keyed like a build (plus the embedded headers' sources)
 * and a hit substitutes a program created from the compiled object. A link
 * is keyed by its options, the device and every input's compile key; a hit
 * returns a program created from the stored executable. The app's callback,
 * if any, is called after the (then synchronous) operation. */

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
