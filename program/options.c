/* options.c — the build options clshim adds, and what queries answer then.
 *
 * CLSHIM_BUILD_OPTIONS_APPEND (and _LINK_) and fusion's -cl-kernel-arg-info
 * change what the driver gets; kept apart from the build so the rule that
 * queries answer the application's options lives in one place.
 */
#include "program/program_int.h"

#include <stdlib.h>
#include <string.h>

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
char *options_with_arg_info(const char *options)
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
char *options_appended(const char *options, const char *append)
{
    if (!append || !*append) return NULL;
    char *out = join_options(options, append);
    if (!out) LOG_ONCE(LOG_WARN, "out of memory: a build went on without the appended options");
    return out;
}

/* One line when the knob's options are what made a build or link fail:
 * the same call with the application's options alone succeeds (made on a
 * scratch program through the driver, never on the application's). */
static void blame_append(const char *what, const char *knob, const char *append, cl_program scratch,
                         cl_int scratch_err)
{
    if (scratch_err == CL_SUCCESS)
        log_msg(LOG_WARN, "the %s fails only because of %s=\"%.200s\": without it, it succeeds; fix or unset it",
                what, knob, append);
    if (scratch) pc_real->clReleaseProgram(scratch);
}

void options_blame_build(cl_program prog, cl_uint ndev, const cl_device_id *devs, const char *app_options,
                         const char *append)
{
    struct pc_program *rec = objmap_get(pc_programs, prog);
    if (!rec || rec->kind != KEY_SOURCE || !rec->input) return;
    const char *src = rec->input;
    size_t len = rec->input_len;
    cl_int err;
    cl_program scratch = pc_real->clCreateProgramWithSource(rec->context, 1, &src, &len, &err);
    if (!scratch) return;
    err = pc_real->clBuildProgram(scratch, ndev, devs, app_options, NULL, NULL);
    blame_append("build", "CLSHIM_BUILD_OPTIONS_APPEND", append, scratch, err);
}

void options_blame_link(cl_context ctx, cl_uint ndev, const cl_device_id *devs, const char *app_options,
                        cl_uint ninputs, const cl_program *inputs, const char *append)
{
    cl_int err = CL_LINK_PROGRAM_FAILURE;
    cl_program *mapped = ninputs ? calloc(ninputs, sizeof *mapped) : NULL;
    if (!mapped) return;
    /* What the driver links: a compile that hit is a program of clshim's
     * (the application's own object was never compiled by the driver). */
    for (cl_uint i = 0; i < ninputs; i++) {
        struct pc_program *in = objmap_get(pc_programs, inputs[i]);
        mapped[i] = in && in->effective ? in->effective : inputs[i];
    }
    cl_program scratch = pc_real->clLinkProgram(ctx, ndev, devs, app_options, ninputs, mapped, NULL, NULL, &err);
    free(mapped);
    blame_append("link", "CLSHIM_LINK_OPTIONS_APPEND", append, scratch, scratch ? err : CL_LINK_PROGRAM_FAILURE);
}

/* After a build with added options: queries answer the application's. */
void restore_app_options(cl_program prog, const char *options)
{
    struct pc_program *rec = objmap_get(pc_programs, prog);
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
