/* link.c — clLinkProgram through the cache.
 *
 * A link is keyed by its options, the device and every input's compile
 * key; a hit returns a program created from the stored executable. It runs
 * the pipeline (run.c) as the link kind, and the linked program gets a
 * record of its own (stored now or captured late, like a build). The app's
 * callback, if any, is called after the (then synchronous) operation.
 */
#include "program/program_int.h"

#include <stdlib.h>
#include <string.h>

/* The application's call, as it made it; `mapped` stands in for inputs. */
struct link_call {
    cl_context ctx;
    struct app_call app;
    cl_uint num_inputs;
    const cl_program *inputs;
    cl_program *mapped;
};

static void link_took_hit(struct run *r, cl_program p)
{
    (void)p;
    logs_from_hits(r->rec);
}

static cl_program link_driver(struct run *r, cl_int *err)
{
    const struct link_call *c = r->arg;
    const struct app_call *a = &c->app;
    cl_program p = pc_real->clLinkProgram(c->ctx, a->num_devices, a->devices, a->options, c->num_inputs, c->mapped,
                                       NULL, NULL, err);
    if (!p && retry_after_emptying_tier(*err, "clLinkProgram"))
        p = pc_real->clLinkProgram(c->ctx, a->num_devices, a->devices, a->options, c->num_inputs, c->mapped, NULL, NULL,
                                err);
    return p;
}

/* The linked program is the record's handle. */
static cl_program link_finish(struct run *r, cl_program p, cl_int *err)
{
    (void)err;
    if (r->cached) r->rec->handle = p;
    return p;
}

static const struct run_kind link_kind = {
    .store = RUN_CAPTURE | RUN_LOGS,
    .no_program = CL_LINK_PROGRAM_FAILURE,
    .from_hits = run_hits_built,
    .took_hit = link_took_hit,
    .driver = link_driver,
    .finish = link_finish,
};

/* The record of the linked program; NULL when out of memory. */
static struct pc_program *new_link_record(cl_context ctx, const char *options)
{
    struct pc_program *out = calloc(1, sizeof *out);
    if (!out) return NULL;
    out->context = ctx;
    out->kind = KEY_LINK;
    out->refs = 1;
    out->options = strdup(options ? options : "");
    pthread_mutex_init(&out->lock, NULL);
    return out;
}

static void free_link_record(struct pc_program *out)
{
    free_devs(out);
    free(out->options);
    pthread_mutex_destroy(&out->lock);
    free(out);
}

/* Per device: the options and the device; NULL (nothing begun) when out
 * of memory; *cacheable cleared for a device clshim does not know. */
static struct key_buf *begin_link_keys(const char *options, cl_uint ndev, const cl_device_id *devs, int *cacheable)
{
    struct key_buf *kb = *cacheable ? calloc(ndev, sizeof *kb) : NULL;
    *cacheable = *cacheable && kb;
    for (cl_uint d = 0; *cacheable && d < ndev; d++) {
        const struct device_info *info = device_info(pc_real, devs[d]);
        key_begin(&kb[d], KEY_LINK, options);
        key_add_text(&kb[d], "device", info ? info->identity : "");
        *cacheable = info != NULL;
    }
    return kb;
}

/* Input `in`'s compile key on each device into the keys; 0 when one has
 * none (not cacheable). in->lock held. */
static int add_input_keys(const struct pc_program *in, struct key_buf *kb, cl_uint ndev, const cl_device_id *devs)
{
    if (in) (void)CLSHIM_ASSERT_HELD(&in->lock);
    for (cl_uint d = 0; d < ndev; d++) {
        const struct pipeline_flight *found = NULL;
        for (size_t j = 0; in && j < in->ndevs; j++)
            if (in->devs[j].dev == devs[d] && in->flights[j].key) found = &in->flights[j];
        if (!found) return 0;
        char hex[33];
        key_hash_hex(found->hash, hex);
        key_add_text(&kb[d], "input-key", hex);
    }
    return 1;
}

/* Inputs: the program standing in for each (a hit's compiled object, with
 * a reference of ours), and their keys while cacheable. */
static void map_inputs(struct link_call *c, struct key_buf *kb, cl_uint ndev, const cl_device_id *devs,
                       int *cacheable)
{
    for (cl_uint i = 0; i < c->num_inputs; i++) {
        struct pc_program *in = objmap_get(pc_programs, c->inputs[i]);
        if (in) pthread_mutex_lock(&in->lock);
        c->mapped[i] = in && in->effective ? in->effective : c->inputs[i];
        if (c->mapped[i] != c->inputs[i] && pc_real->clRetainProgram(c->mapped[i]) != CL_SUCCESS)
            c->mapped[i] = c->inputs[i]; /* the driver then answers for the input itself */
        if (*cacheable) *cacheable = add_input_keys(in, kb, ndev, devs);
        if (in) pthread_mutex_unlock(&in->lock);
    }
}

/* The keys of the record's flights; 1 when every device has one. */
static int link_keys(struct link_call *c, struct pc_program *out, cl_uint ndev, const cl_device_id *devs,
                     int cacheable)
{
    struct key_buf *kb = begin_link_keys(c->app.options, ndev, devs, &cacheable);
    map_inputs(c, kb, ndev, devs, &cacheable);
    for (cl_uint d = 0; kb && d < ndev; d++) {
        if (cacheable) cacheable = pipeline_key(&out->flights[d], &kb[d], NULL, NULL, NULL, 0, NULL) == 0;
        else key_free(&kb[d]);
    }
    free(kb);
    return cacheable;
}

/* The linked program's record joins the map (a late capture then owed is
 * pending); 0, or -1 when it cannot (the record is freed by the caller). */
static int keep_link_record(struct pc_program *out, cl_program result, cl_uint ndev)
{
    out->handle = result;
    if (objmap_put(pc_programs, result, out) != 0) return -1;
    int late = 0;
    for (cl_uint d = 0; d < ndev; d++) late |= out->devs[d].needs_capture;
    if (late) {
        add_pending(out);
        arm_owed_capture_at_exit();
    }
    return 0;
}

static cl_program link_program(struct link_call *c, cl_int *errcode_ret)
{
    cl_device_id *owned = NULL;
    cl_uint ndev = 0;
    const cl_device_id *devs = NULL;
    int cacheable =
        config_get()->cache && device_list(c->ctx, c->app.num_devices, c->app.devices, &owned, &ndev, &devs) == 0;
    /* The record of the linked program, keyed per device by the options,
     * the device and every input's compile key. */
    struct pc_program *out = new_link_record(c->ctx, c->app.options);
    if (out) pthread_mutex_lock(&out->lock); /* not shared yet; held as a build holds its record's */
    cacheable = cacheable && out && new_devs(out, ndev, devs, KEY_LINK) == 0;
    cacheable = link_keys(c, out, ndev, devs, cacheable);
    need_exit_handler();
    struct run r = {.kind = &link_kind, .rec = out, .fl = cacheable ? out->flights : NULL,
                    .devs = cacheable ? out->devs : NULL, .n = ndev, .cached = cacheable, .ctx = c->ctx,
                    .devlist = devs, .options = c->app.options, .arg = c};
    cl_int err = CL_SUCCESS;
    cl_program result = run_pipeline(&r, &err);
    if (out) pthread_mutex_unlock(&out->lock);
    if (!(result && cacheable && keep_link_record(out, result, ndev) == 0) && out) free_link_record(out);
    for (cl_uint i = 0; i < c->num_inputs; i++)
        if (c->mapped[i] != c->inputs[i]) pc_real->clReleaseProgram(c->mapped[i]);
    free(owned);
    if (errcode_ret) *errcode_ret = err;
    if (c->app.notify && result) c->app.notify(result, c->app.user_data);
    return result;
}

cl_program pc_link(cl_context ctx, cl_uint num_devices, const cl_device_id *device_list_in, const char *app_options,
                   cl_uint num_inputs, const cl_program *inputs, void(CL_CALLBACK *notify)(cl_program, void *),
                   void *user_data, cl_int *errcode_ret)
{
    char *appended = options_appended(app_options, config_get()->link_options_append);
    struct link_call c = {ctx, {num_devices, device_list_in, appended ? appended : app_options, notify, user_data},
                          num_inputs, inputs, NULL};
    c.mapped = num_inputs && inputs ? calloc(num_inputs, sizeof *c.mapped) : NULL;
    cl_program p;
    if (!c.mapped || (num_devices == 0) != (device_list_in == NULL) || (!notify && user_data))
        p = pc_real->clLinkProgram(ctx, num_devices, device_list_in, c.app.options, num_inputs, inputs, notify, user_data,
                                errcode_ret);
    else
        p = link_program(&c, errcode_ret);
    if (appended && !p && errcode_ret &&
        (*errcode_ret == CL_LINK_PROGRAM_FAILURE || *errcode_ret == CL_INVALID_LINKER_OPTIONS))
        options_blame_link(ctx, num_devices, device_list_in, app_options, num_inputs, inputs,
                           config_get()->link_options_append);
    free(c.mapped);
    free(appended);
    return p;
}
