/* compile.c — clCompileProgram through the cache.
 *
 * A compile is keyed like a build (plus the embedded headers' sources; the
 * preprocessor may run beside the driver: a late key) and a hit
 * substitutes a program created from the compiled object. It runs the
 * pipeline (run.c) as the compile kind. The app's callback, if any, is
 * called after the (then synchronous) operation.
 */
#include "program/program_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/quirks.h"

/* The application's call, as it made it. */
struct compile_call {
    cl_program prog;
    struct app_call app;
    cl_uint num_headers;
    const cl_program *headers;
    const char **header_names;
};

static cl_int compile_by_driver(const struct compile_call *c)
{
    const struct app_call *a = &c->app;
    return pc_real->clCompileProgram(c->prog, a->num_devices, a->devices, a->options, c->num_headers, c->headers,
                                  c->header_names, a->notify, a->user_data);
}

static cl_program hits_compiled(struct run *r, cl_int *err)
{
    return program_from_hits(r->ctx, r->fl, (cl_uint)r->n, r->devlist, NULL, 0, err);
}

/* PoCL refuses binary queries on the unbuilt stand-in: they are answered
 * from these bytes. */
static void keep_objects(struct run *r)
{
    for (size_t i = 0; i < r->n; i++) {
        size_t size = 0;
        const void *bin = pipeline_binary(&r->fl[i], &size);
        if (bin && (r->devs[i].object = malloc(size ? size : 1))) {
            memcpy(r->devs[i].object, bin, size);
            r->devs[i].object_size = size;
        }
    }
}

static void compile_took_hit(struct run *r, cl_program p)
{
    set_effective(r->rec, p);
    r->rec->answers_options = 1;
    keep_objects(r);
    logs_from_hits(r->rec);
}

static cl_program compile_driver(struct run *r, cl_int *err)
{
    const struct compile_call *c = r->arg;
    cl_uint n = (cl_uint)r->n;
    *err = pc_real->clCompileProgram(c->prog, n, r->devlist, r->options, c->num_headers, c->headers, c->header_names,
                                  NULL, NULL);
    if (retry_after_emptying_tier(*err, "clCompileProgram"))
        *err = pc_real->clCompileProgram(c->prog, n, r->devlist, r->options, c->num_headers, c->headers,
                                      c->header_names, NULL, NULL);
    return c->prog;
}

/* Late keys: now they can fill. */
static cl_program compile_finish(struct run *r, cl_program p, cl_int *err)
{
    (void)err;
    pipeline_key_finish(r->fl, r->n, p);
    return p;
}

static const struct run_kind compile_kind = {
    .store = RUN_LOGS,
    .no_program = CL_OUT_OF_HOST_MEMORY,
    .from_hits = hits_compiled,
    .took_hit = compile_took_hit,
    .driver = compile_driver,
    .finish = compile_finish,
};

/* Whether the compile can go through the cache: a tracked source program,
 * valid arguments, headers that are tracked source programs (their records
 * into *hrecs, which the caller frees). */
static int compile_cacheable(const struct pc_program *rec, const struct compile_call *c,
                             const struct pc_program ***hrecs)
{
    cl_uint nh = c->num_headers;
    int cacheable = rec && !rec->translated && rec->kind == KEY_SOURCE && config_get()->cache &&
                    (c->app.num_devices == 0) == (c->app.devices == NULL) && (c->app.notify || !c->app.user_data) &&
                    (nh == 0) == (c->headers == NULL) && (nh == 0) == (c->header_names == NULL);
    *hrecs = nh ? calloc(nh, sizeof **hrecs) : NULL;
    if (nh && !*hrecs) cacheable = 0; /* out of memory: the driver compiles */
    for (cl_uint i = 0; cacheable && i < nh; i++) {
        (*hrecs)[i] = objmap_get(pc_programs, c->headers[i]);
        cacheable = (*hrecs)[i] && (*hrecs)[i]->kind == KEY_SOURCE && c->header_names[i];
    }
    return cacheable;
}

/* A new compile of rec (its lock held): a stand-in of an earlier compile
 * hit never answers for this one. -1 when out of memory. */
static int start_compile(struct pc_program *rec, cl_uint ndev, const cl_device_id *devs, const char *options)
{
    (void)CLSHIM_ASSERT_HELD(&rec->lock);
    set_effective(rec, NULL);
    free(rec->options);
    rec->options = strdup(options ? options : "");
    rec->answers_options = rec->arg_info_added = 0;
    free(rec->compile_options);
    free(rec->compile_answer);
    rec->compile_options = strdup(options ? options : "");
    rec->compile_answer = NULL;
    return new_devs(rec, ndev, devs, KEY_COMPILE);
}

/* The key of device i; the preprocessor may run beside the compile (a
 * late key). `embedded` (num_headers entries) is filled for the key. */
static void compile_key(struct pc_program *rec, size_t i, const struct compile_call *c,
                        const struct pc_program **hrecs, struct key_embedded *embedded)
{
    const struct device_info *info = device_info(pc_real, rec->devs[i].dev);
    if (!info || stands_aside(info) || (c->num_headers && !embedded)) return;
    struct key_buf k;
    key_begin(&k, KEY_COMPILE, c->app.options);
    key_add_text(&k, "device", info->identity);
    for (cl_uint h = 0; h < c->num_headers; h++) {
        char name[1100];
        snprintf(name, sizeof name, "embedded-header %s", c->header_names[h]);
        key_add_blob(&k, name, hrecs[h]->input, hrecs[h]->input_len);
        embedded[h] = (struct key_embedded){c->header_names[h], hrecs[h]->input, hrecs[h]->input_len};
    }
    char ddir[4096];
    struct key_source in = {rec->input, rec->input_len, c->app.options, embedded, embedded ? c->num_headers : 0,
                            quirk_source_dir(info->quirks, ddir, sizeof ddir) == 0 ? ddir : NULL};
    pipeline_key_start(&rec->flights[i], &k, &in, info->identity, rec->input, rec->input_len, c->prog);
}

/* Keys, then the pipeline run as a compile (rec->lock held). */
static cl_int compile_record(struct pc_program *rec, cl_uint ndev, const cl_device_id *devs,
                             struct compile_call *c, const struct pc_program **hrecs)
{
    (void)CLSHIM_ASSERT_HELD(&rec->lock);
    struct key_embedded *embedded = c->num_headers ? calloc(c->num_headers, sizeof *embedded) : NULL;
    need_exit_handler();
    for (cl_uint i = 0; i < ndev; i++) compile_key(rec, i, c, hrecs, embedded);
    free(embedded);
    struct run r = {.kind = &compile_kind, .rec = rec, .fl = rec->flights, .devs = rec->devs, .n = ndev,
                    .cached = 1, .ctx = rec->context, .devlist = devs, .options = c->app.options,
                    .handle = c->prog, .arg = c};
    cl_int err = CL_OUT_OF_HOST_MEMORY;
    run_pipeline(&r, &err);
    return err;
}

static cl_int compile_program(struct compile_call *c)
{
    struct pc_program *rec = objmap_get(pc_programs, c->prog);
    const struct pc_program **hrecs = NULL;
    cl_device_id *owned = NULL;
    cl_uint ndev = 0;
    const cl_device_id *devs = NULL;
    if (!compile_cacheable(rec, c, &hrecs) ||
        device_list(rec->context, c->app.num_devices, c->app.devices, &owned, &ndev, &devs) != 0) {
        free(hrecs);
        return compile_by_driver(c);
    }
    cl_int err = CL_INVALID_OPERATION; /* as the driver answers: kernels attached */
    if (!__atomic_load_n(&rec->nkernels, __ATOMIC_ACQUIRE)) {
        pthread_mutex_lock(&rec->lock);
        int started = start_compile(rec, ndev, devs, c->app.options) == 0;
        err = started ? compile_record(rec, ndev, devs, c, hrecs) : CL_SUCCESS;
        pthread_mutex_unlock(&rec->lock);
        if (!started) err = compile_by_driver(c);
        else if (c->app.notify) c->app.notify(c->prog, c->app.user_data);
    }
    free(owned);
    free(hrecs);
    return err;
}

cl_int pc_compile(cl_program prog, cl_uint num_devices, const cl_device_id *devices, const char *app_options,
                  int want_arg_info, cl_uint num_headers, const cl_program *headers, const char **header_names,
                  void(CL_CALLBACK *notify)(cl_program, void *), void *user_data)
{
    char *appended = options_appended(app_options, config_get()->build_options_append);
    const char *options = appended ? appended : app_options;
    char *with = want_arg_info ? options_with_arg_info(options) : NULL;
    struct compile_call c = {prog, {num_devices, devices, with ? with : options, notify, user_data}, num_headers,
                             headers, header_names};
    cl_int rc = compile_program(&c);
    if (with) restore_app_options(prog, options);
    free(with);
    free(appended);
    return rc;
}
