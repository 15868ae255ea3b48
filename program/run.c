/* run.c — the pipeline protocol, run once for every kind of cached program.
 *
 * Builds, compiles, links and derived (fused) programs all take the same
 * steps (cache/pipeline.h): begin, then a shared failure, a hit or a
 * rejected hit, then the driver's work, the built outputs handed to the
 * pipeline, and the end. What differs between them — how a hit becomes a
 * program, how the driver is called, what is stored — is data (struct
 * run_kind), so the sequence and the collecting of outputs exist once.
 */
#include "program/program_int.h"

#include <stdlib.h>
#include <string.h>

#include "cache/driver_writes.h"
#include "cache/quirks.h"
#include "cache/sandbox.h"

static void release_program_object(void *program) { pc_real->clReleaseProgram((cl_program)program); }

static int retain_program_object(void *program)
{
    return pc_real->clRetainProgram((cl_program)program) == CL_SUCCESS ? 0 : -1;
}

/* The binary of a hit entry; read from the attached program of another
 * context when only that is there. NULL when none can be had. Bytes or
 * program in one look (pipeline_serve()): looked at one after the other,
 * the program's owner could keep its bytes and detach it in between, and
 * a servable entry would read as neither (a false "driver rejected"). */
static const unsigned char *entry_binary(struct pipeline_flight *f, cl_device_id dev, size_t *size)
{
    void *object;
    const unsigned char *bin = pipeline_serve(f, size, retain_program_object, &object);
    if (bin || !object) return bin;
    cl_program other = object;
    struct pc_dev want = {.dev = dev};
    void *b = NULL;
    size_t n = 0;
    if (read_binaries(other, 1, &want, &b, &n) == 0) pipeline_refill(f, b, n);
    pc_real->clReleaseProgram(other);
    free(b);
    return pipeline_binary(f, size);
}

/* A program made from the hit's binaries; built when `build` (a compiled
 * object is not). NULL with *err when the driver refuses them. */
static cl_program program_from_binaries(cl_context ctx, struct pipeline_flight *fl, cl_uint ndev,
                                        const cl_device_id *devs, cl_int *err)
{
    const unsigned char **bins = calloc(ndev, sizeof *bins);
    size_t *sizes = calloc(ndev, sizeof *sizes);
    cl_program p = NULL;
    *err = CL_OUT_OF_HOST_MEMORY;
    int complete = bins && sizes;
    for (cl_uint i = 0; complete && i < ndev; i++)
        complete = (bins[i] = entry_binary(&fl[i], devs[i], &sizes[i])) != NULL;
    if (complete) { /* the hit's own entries stay pinned while the tier is emptied */
        p = pc_real->clCreateProgramWithBinary(ctx, ndev, devs, sizes, bins, NULL, err);
        if (!p && retry_after_emptying_tier(*err, "clCreateProgramWithBinary"))
            p = pc_real->clCreateProgramWithBinary(ctx, ndev, devs, sizes, bins, NULL, err);
    } else if (bins && sizes) {
        *err = CL_INVALID_BINARY;
    }
    free(bins);
    free(sizes);
    return p;
}

/* A hit: a program of its own made from the cached binaries (built when
 * `build`; a compiled object is not). Never the program object of another
 * record, even in the same context: program-scope variables and rebuilds
 * belong to one app program (share binaries, never program objects). */
cl_program program_from_hits(cl_context ctx, struct pipeline_flight *fl, cl_uint ndev, const cl_device_id *devs,
                             const char *options, int build, cl_int *err)
{
    /* The driver unpacks what it needs into its own cache here: synced
     * once in the background, not file by file (cache/driver_writes.h). */
    const struct device_info *info = ndev ? device_info(pc_real, devs[0]) : NULL;
    char root[4096];
    struct driver_writes *writes =
        info && quirk_source_dir(info->quirks, root, sizeof root) == 0 ? driver_writes_begin(root) : NULL;
    cl_program p = program_from_binaries(ctx, fl, ndev, devs, err);
    if (p && build) {
        *err = pc_real->clBuildProgram(p, ndev, devs, options, NULL, NULL);
        if (retry_after_emptying_tier(*err, "clBuildProgram"))
            *err = pc_real->clBuildProgram(p, ndev, devs, options, NULL, NULL);
    }
    driver_writes_end(writes);
    if (p && build && *err != CL_SUCCESS) {
        pc_real->clReleaseProgram(p);
        p = NULL;
    }
    return p;
}

/* The from_hits of the kinds that build their hit (build, link). */
cl_program run_hits_built(struct run *r, cl_int *err)
{
    return program_from_hits(r->ctx, r->fl, (cl_uint)r->n, r->devlist, r->options, 1, err);
}

/* The app-visible logs of a hit: the original build's. */
void logs_from_hits(struct pc_program *rec)
{
    for (size_t i = 0; i < rec->ndevs; i++) {
        free(rec->devs[i].log);
        rec->devs[i].log = strdup(pipeline_build_log(&rec->flights[i]));
    }
}

static void free_each(void **v, size_t n)
{
    for (size_t i = 0; v && i < n; i++) free(v[i]);
    free(v);
}

/* The build logs stored with the binaries: the record's own (a failed
 * translation's reason), else the driver's; NULL on no memory. */
static char **collect_logs(const struct run *r, cl_program built)
{
    char **logs = calloc(r->n, sizeof *logs);
    for (size_t i = 0; logs && i < r->n; i++)
        logs[i] = r->devs[i].log ? strdup(r->devs[i].log) : built ? read_build_log(built, r->devs[i].dev) : NULL;
    return logs;
}

/* A late capture: the built program is lent to the in-process tier, its
 * binary read at first use, release or exit (capture()). Attached before
 * the fill: waiters wake to the program. */
static void lend_for_late_capture(struct run *r, cl_program built)
{
    struct pc_program *rec = r->rec;
    for (size_t i = 0; i < r->n; i++) {
        if (!r->fl[i].filling || pc_real->clRetainProgram(built) != CL_SUCCESS) continue;
        if (pipeline_attach(&r->fl[i], built, rec->context, release_program_object) == 0)
            rec->devs[i].attached = built;
        else
            pc_real->clReleaseProgram(built);
    }
}

/* The stored values in place of the binaries (the kind's `value`); -1
 * when one cannot be made (nothing is stored then). */
static int values_from_binaries(struct run *r, void **bins, size_t *sizes)
{
    for (size_t i = 0; r->kind->value && i < r->n; i++) {
        size_t total = 0;
        void *v = r->kind->value(r, bins[i], sizes[i], &total);
        if (!v) return -1;
        free(bins[i]);
        bins[i] = v;
        sizes[i] = total;
    }
    return 0;
}

/* The binaries of a successful build into *out: read now, or (a late
 * capture) lent as the program itself. */
static void collect_binaries(struct run *r, cl_program built, void **bins, size_t *sizes,
                             struct pipeline_output *out)
{
    int captured = (r->kind->store & RUN_CAPTURE) != 0;
    if (captured && capture_late(r->rec)) {
        out->late = 1;
        lend_for_late_capture(r, built);
    } else if (bins && sizes && read_binaries(built, r->n, r->devs, bins, sizes) == 0 &&
               values_from_binaries(r, bins, sizes) == 0) {
        out->binaries = (const void *const *)bins;
        out->sizes = sizes;
    } else {
        if (captured)
            log_msg(LOG_INFO, "cannot read the built binaries of program %p; not cached", (void *)r->rec->handle);
        return;
    }
    for (size_t i = 0; captured && i < r->n; i++) r->rec->devs[i].needs_capture = r->fl[i].filling;
}

/* After the driver built `built` (NULL: nothing made): the pipeline stores
 * its binaries now, or gets the program itself for a late store, or
 * shares the failure (RUN_SHARE_FAILURE). */
static void store_built(struct run *r, cl_program built, cl_int err, const struct pipeline_clock *clk)
{
    const struct run_kind *k = r->kind;
    size_t n = r->n;
    if ((k->store & RUN_CAPTURE) && err == CL_SUCCESS && built && binaries_unsafe(built, n, r->devs))
        pipeline_uncacheable(r->fl, n); /* built, but its binary must never be read */
    int any_fill = 0;
    for (size_t i = 0; i < n; i++) any_fill |= r->fl[i].filling;
    char **logs = (k->store & RUN_LOGS) ? collect_logs(r, built) : NULL;
    void **bins = calloc(n, sizeof *bins);
    size_t *sizes = calloc(n, sizeof *sizes);
    struct pipeline_output out = {.error = err == CL_SUCCESS && !built ? k->no_program : err,
                                  .logs = (const char *const *)logs, .clock = clk,
                                  .share_failure = (k->store & RUN_SHARE_FAILURE) != 0};
    if (out.error == CL_SUCCESS && built && any_fill) collect_binaries(r, built, bins, sizes, &out);
    pipeline_built(r->fl, n, &out);
    free_each((void **)logs, n);
    free_each(bins, n);
    free(sizes);
}

/* A hit of an entry built before any run (`clshim cache warm`) on a
 * driver that generates code at a kernel's first enqueue (PoCL) lacks that
 * code, which every run would generate again: the program is captured
 * again after its first use (the capture helper builds it in the driver's
 * cache, where this run's code is), replacing the entry
 * (cache/pipeline.h, pipeline_provisional()). Sources only. */
static void owe_refresh(struct run *r)
{
    struct pc_program *rec = r->rec;
    /* Only the helper can: a program made from a binary reads back as that
     * binary here. Nor where the entry cannot be replaced: a read-only
     * cache, or one that trusts keys and seals nothing (cache/store.h). */
    const struct clshim_config *cfg = config_get();
    if (!rec || !(r->kind->store & RUN_CAPTURE) || rec->kind != KEY_SOURCE || rec->translated || !capture_late(rec) ||
        !cfg->capture_process || store_is_readonly(pipeline_store()) || (*cfg->trust && !*cfg->sign_key))
        return;
    for (size_t i = 0; i < r->n; i++) {
        struct pipeline_flight *f = &r->fl[i];
        const struct device_info *info = device_info(pc_real, r->devs[i].dev);
        if (!f->key || f->from == PIPELINE_FROM_MEMORY || !info || !info->shared_codegen_cache ||
            !pipeline_provisional(f->key, f->key_len, f->from == PIPELINE_FROM_REMOTE))
            continue;
        r->devs[i].needs_capture = r->devs[i].refresh = r->refresh = 1;
        char hex[33];
        key_hash_hex(f->hash, hex);
        log_msg(LOG_INFO, "hit %.16s was built before any run (clshim cache warm): captured again after its first "
                          "use, with the code the driver generates then",
                hex);
    }
}

/* Every flight hit: the kind's program from the binaries, or the driver
 * refused them (the entries are dropped; the caller builds). */
static cl_program run_hit(struct run *r, cl_int *err)
{
    cl_program p = r->kind->from_hits(r, err);
    if (!p) {
        pipeline_rejected(r->fl, r->n, *err, r->handle);
        return NULL;
    }
    if (r->kind->took_hit) r->kind->took_hit(r, p);
    pipeline_hit(r->fl, r->n);
    owe_refresh(r);
    return p;
}

/* The driver's work under a sandbox (cache/sandbox.h) when the key names
 * files: the compiler is served the bytes the key was made of, so what it
 * builds is exactly what the key names, and the flights may be stored
 * (pipeline_flight.exact). A key still being made (the preprocessor beside
 * a compile) is judged after the kind's finish step, from what the build
 * read (record mode). A build that read anything else is the app's as
 * usual, never stored: said once per build. */
static struct sandbox *sandbox_for(struct run *r)
{
    struct pipeline_flight *f0 = r->cached && r->n ? &r->fl[0] : NULL;
    int pending = f0 && !f0->key && f0->pending;
    if (!f0 || (!pending && (!f0->key || !f0->names_files))) return NULL;
    const struct device_info *info = device_info(pc_real, r->devlist[0]);
    char ddir[4096];
    int has_ddir = info && quirk_source_dir(info->quirks, ddir, sizeof ddir) == 0;
    return sandbox_begin(pending ? NULL : f0->snap, pending ? NULL : f0->key, pending ? 0 : f0->key_len,
                         has_ddir ? ddir : NULL);
}

static void judge_sandbox(struct run *r, struct sandbox *sb, cl_int err)
{
    char why[1400] = "";
    int said = 0;
    for (size_t i = 0; i < r->n; i++) {
        struct pipeline_flight *f = &r->fl[i];
        if (!f->key || !f->names_files) continue;
        int exact = sandbox_verdict(sb, f->key, f->key_len, why, sizeof why) == 0;
        f->exact = sandbox_sees(sb) ? exact : f->exact;
        if (f->exact) continue;
        if (!exact && err == CL_SUCCESS && !said++)
            log_msg(LOG_INFO, "program %p: its build is not stored as it is: %s", (void *)r->handle, why);
    }
    sandbox_free(sb);
}

/* The driver's work, timed, then its outputs to the pipeline. */
static cl_program run_driver(struct run *r, cl_int *err)
{
    struct pipeline_clock clk;
    pipeline_clock_start(&clk);
    struct sandbox *sb = sandbox_for(r);
    cl_program p = r->kind->driver(r, err);
    sandbox_stop(sb);
    pipeline_clock_stop(&clk);
    r->built = 1;
    if (r->kind->finish) p = r->kind->finish(r, p, err);
    if (sb) judge_sandbox(r, sb, *err);
    if (r->cached && !r->nothing_built) store_built(r, p, *err, &clk);
    else if (p && r->kind->uncached) r->kind->uncached(r, &clk);
    return p;
}

cl_program run_pipeline(struct run *r, cl_int *err)
{
    const struct run_kind *k = r->kind;
    /* A cached run has its flights and devices; else the driver builds,
     * uncached. */
    r->cached = r->cached && CLSHIM_ASSERT(r->fl && r->devs);
    enum pipeline_result res = r->cached ? pipeline_begin(r->fl, r->n, k->begin_flags) : PIPELINE_BUILD;
    cl_program p = NULL;
    if (res == PIPELINE_FAILED && k->failed) {
        /* Single flight shares failures: the app sees the driver's error,
         * status and log of the one build that ran. */
        k->failed(r, err);
        pipeline_failure_shared(r->fl, r->n);
    } else {
        if (res == PIPELINE_HIT) p = run_hit(r, err);
        if (!p) p = run_driver(r, err);
    }
    if (r->cached) pipeline_end(r->fl, r->n);
    return p;
}
