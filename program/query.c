/* query.c — clGetProgramInfo and clGetProgramBuildInfo answered as the driver would.
 *
 * A hit's handle is never built: queries about the build are answered from
 * the effective program, the log and options from the original build, the
 * reference count from the record.
 */
#include "program/program_int.h"

#include <stdlib.h>
#include <string.h>

cl_int answer(const void *data, size_t n, size_t size, void *value, size_t *size_ret)
{
    if (value) {
        if (size < n) return CL_INVALID_VALUE;
        memcpy(value, data, n);
    }
    if (size_ret) *size_ret = n;
    return CL_SUCCESS;
}

/* CL_PROGRAM_BINARY_SIZES / CL_PROGRAM_BINARIES after a compile hit, from
 * the compiled objects in hand, in the handle's device order (0 / untouched
 * for a device without one, as the driver answers). Returns 1 when it
 * answered into *rc, 0 when the driver answers. */
static int answer_objects(struct pc_program *rec, cl_program_info param, size_t size, void *value, size_t *size_ret,
                          cl_int *rc)
{
    cl_uint n = 0;
    if (pc_real->clGetProgramInfo(rec->handle, CL_PROGRAM_NUM_DEVICES, sizeof n, &n, NULL) != CL_SUCCESS || !n)
        return 0;
    cl_device_id *devs = calloc(n, sizeof *devs);
    if (!devs || pc_real->clGetProgramInfo(rec->handle, CL_PROGRAM_DEVICES, n * sizeof *devs, devs, NULL) != CL_SUCCESS) {
        free(devs);
        return 0;
    }
    pthread_mutex_lock(&rec->lock);
    int have = 0;
    for (size_t i = 0; i < rec->ndevs; i++) have |= rec->devs[i].object != NULL;
    size_t entry = param == CL_PROGRAM_BINARY_SIZES ? sizeof(size_t) : sizeof(unsigned char *);
    if (have) {
        *rc = CL_SUCCESS;
        if (size_ret) *size_ret = n * entry;
        if (value && size < n * entry) *rc = CL_INVALID_VALUE;
        for (cl_uint j = 0; value && *rc == CL_SUCCESS && j < n; j++) {
            const struct pc_dev *d = NULL;
            for (size_t i = 0; i < rec->ndevs; i++)
                if (rec->devs[i].dev == devs[j] && rec->devs[i].object) d = &rec->devs[i];
            if (param == CL_PROGRAM_BINARY_SIZES) ((size_t *)value)[j] = d ? d->object_size : 0;
            else if (d && ((unsigned char **)value)[j]) memcpy(((unsigned char **)value)[j], d->object, d->object_size);
        }
    }
    pthread_mutex_unlock(&rec->lock);
    free(devs);
    return have;
}

/* The program that answers `param` into *out, holding a reference the
 * caller drops; or the driver's error of that retain (then nothing to drop). */
cl_int program_for(struct pc_program *rec, int about_build, cl_program *out)
{
    pthread_mutex_lock(&rec->lock);
    cl_program p = about_build && rec->effective ? rec->effective : rec->handle;
    cl_int rc = pc_real->clRetainProgram(p);
    pthread_mutex_unlock(&rec->lock);
    *out = rc == CL_SUCCESS ? p : NULL;
    return rc;
}

cl_int pc_get_program_info(cl_program prog, cl_program_info param, size_t size, void *value, size_t *size_ret)
{
    struct pc_program *rec = objmap_get(pc_programs, prog);
    if (!rec) return pc_real->clGetProgramInfo(prog, param, size, value, size_ret);
    if (param == CL_PROGRAM_IL && rec->translated) return answer(rec->input, rec->input_len, size, value, size_ret);
    if (param == CL_PROGRAM_REFERENCE_COUNT) {
        /* The handle's count includes references clshim holds (the
         * in-memory tier's, substituted kernels'); rec->refs is the app's
         * own plus one per kernel, as the driver counts them. */
        cl_int rc = pc_real->clGetProgramInfo(prog, param, 0, NULL, NULL); /* validates as the driver would */
        cl_uint refs = __atomic_load_n(&rec->refs, __ATOMIC_RELAXED);
        return rc != CL_SUCCESS ? rc : answer(&refs, sizeof refs, size, value, size_ret);
    }
    cl_int rc;
    if ((param == CL_PROGRAM_BINARY_SIZES || param == CL_PROGRAM_BINARIES) &&
        answer_objects(rec, param, size, value, size_ret, &rc))
        return rc;
    int about_build = param == CL_PROGRAM_BINARY_SIZES || param == CL_PROGRAM_BINARIES ||
                      param == CL_PROGRAM_NUM_KERNELS || param == CL_PROGRAM_KERNEL_NAMES ||
                      param == CL_PROGRAM_SCOPE_GLOBAL_CTORS_PRESENT ||
                      param == CL_PROGRAM_SCOPE_GLOBAL_DTORS_PRESENT;
    cl_program p;
    if ((rc = program_for(rec, about_build, &p)) != CL_SUCCESS) return rc;
    int binaries = param == CL_PROGRAM_BINARY_SIZES || param == CL_PROGRAM_BINARIES;
    if (binaries) pthread_mutex_lock(&pc_binary_reads);
    rc = pc_real->clGetProgramInfo(p, param, size, value, size_ret);
    if (binaries) pthread_mutex_unlock(&pc_binary_reads);
    pc_real->clReleaseProgram(p);
    return rc;
}

/* A driver's CL_PROGRAM_BUILD_OPTIONS of program p, NUL-terminated (NULL
 * with *rc set when the driver refuses). */
static char *driver_options_answer(cl_program p, cl_device_id dev, cl_int *rc)
{
    size_t n = 0;
    char *text = NULL;
    *rc = pc_real->clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_OPTIONS, 0, NULL, &n);
    if (*rc == CL_SUCCESS && !(text = malloc(n + 1))) *rc = CL_OUT_OF_HOST_MEMORY;
    if (*rc == CL_SUCCESS) *rc = pc_real->clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_OPTIONS, n, text, NULL);
    if (*rc != CL_SUCCESS) {
        free(text);
        return NULL;
    }
    text[n] = 0;
    return text;
}

/* What the driver answers for a compile with `options`, asked of a blank
 * program of its own: a compile hit's stand-in was never compiled. Done
 * once, when the application first asks. NULL when the driver refuses. */
static char *compile_options_answer(cl_context ctx, cl_device_id dev, const char *options)
{
    static const char *blank = "\n";
    cl_int rc;
    cl_program p = pc_real->clCreateProgramWithSource(ctx, 1, &blank, NULL, &rc);
    if (!p) return NULL;
    char *text = NULL;
    if (pc_real->clCompileProgram(p, 1, &dev, options, 0, NULL, NULL, NULL, NULL) == CL_SUCCESS)
        text = driver_options_answer(p, dev, &rc);
    pc_real->clReleaseProgram(p);
    return text;
}

/* CL_PROGRAM_BUILD_OPTIONS of a program clshim built, compiled or loaded:
 * the driver's answer for the options the application gave (a hit's key
 * holds them), normalised as the driver does (PoCL collapses spaces and
 * drops -create-library), less the -cl-kernel-arg-info clshim adds at the
 * end to arm fusion. From the built program; for a compile hit, from a
 * blank program compiled with the same options. Where the driver cannot
 * tell, or clshim's token is not the answer's last, the application's
 * text. */
static cl_int options_answer(struct pc_program *rec, cl_device_id dev, size_t size, void *value, size_t *size_ret)
{
    static const char arg_info[] = "-cl-kernel-arg-info";
    cl_program p;
    cl_int rc = program_for(rec, 1, &p);
    if (rc != CL_SUCCESS) return rc;
    char *text = NULL;
    if (!__atomic_load_n(&rec->answers_options, __ATOMIC_RELAXED)) {
        text = driver_options_answer(p, dev, &rc);
    } else {
        rc = pc_real->clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_STATUS, 0, NULL, NULL); /* validates */
        pthread_mutex_lock(&rec->lock);
        if (rc == CL_SUCCESS && !rec->compile_answer && rec->compile_options)
            rec->compile_answer = compile_options_answer(rec->context, dev, rec->compile_options);
        text = rc == CL_SUCCESS && rec->compile_answer ? strdup(rec->compile_answer) : NULL;
        pthread_mutex_unlock(&rec->lock);
    }
    pc_real->clReleaseProgram(p);
    if (rc != CL_SUCCESS) return rc;
    pthread_mutex_lock(&rec->lock);
    if (text && rec->arg_info_added) {
        size_t len = strlen(text), tl = sizeof arg_info - 1;
        if (len >= tl && !strcmp(text + len - tl, arg_info) && (len == tl || text[len - tl - 1] == ' ')) {
            text[len > tl ? len - tl - 1 : 0] = 0;
        } else {
            free(text);
            text = NULL;
        }
    }
    if (!text) text = strdup(rec->options ? rec->options : ""); /* the application's own words */
    pthread_mutex_unlock(&rec->lock);
    if (!text) return CL_OUT_OF_HOST_MEMORY;
    rc = answer(text, strlen(text) + 1, size, value, size_ret);
    free(text);
    return rc;
}

/* The build log of a build of a source's neutral form (cache/quirks.h):
 * the log of the build that ran (the driver's, or the stored one of a hit
 * or a shared failure) with each neutral name the application's own, as the
 * driver's build of the application's text writes it (of one length: the
 * size is the same). Returns 1 when it answered into *rc, 0 when the
 * program has no neutral form. */
static int neutral_log(struct pc_program *rec, cl_device_id dev, size_t size, void *value, size_t *size_ret,
                       cl_int *rc)
{
    pthread_mutex_lock(&rec->lock);
    if (!rec->keyed) {
        pthread_mutex_unlock(&rec->lock);
        return 0;
    }
    const char *kept = NULL;
    for (size_t i = 0; i < rec->ndevs; i++)
        if (rec->devs[i].dev == dev && rec->devs[i].log) kept = rec->devs[i].log;
    cl_program built = rec->effective ? rec->effective : rec->handle;
    /* Validates the device as the driver would. */
    *rc = pc_real->clGetProgramBuildInfo(kept ? rec->handle : built, dev, CL_PROGRAM_BUILD_STATUS, 0, NULL, NULL);
    char *text = *rc != CL_SUCCESS ? NULL : kept ? strdup(kept) : read_build_log(built, dev);
    if (*rc == CL_SUCCESS && !text) *rc = CL_OUT_OF_HOST_MEMORY;
    if (*rc == CL_SUCCESS) {
        quirk_app_marker_restore(&rec->marker, rec->input, text, strlen(text));
        *rc = answer(text, strlen(text) + 1, size, value, size_ret);
    }
    pthread_mutex_unlock(&rec->lock);
    free(text);
    return 1;
}

cl_int pc_get_build_info(cl_program prog, cl_device_id dev, cl_program_build_info param, size_t size, void *value,
                         size_t *size_ret)
{
    struct pc_program *rec = objmap_get(pc_programs, prog);
    if (!rec) return pc_real->clGetProgramBuildInfo(prog, dev, param, size, value, size_ret);
    if (param == CL_PROGRAM_BUILD_OPTIONS) return options_answer(rec, dev, size, value, size_ret);
    cl_int rc;
    if (param == CL_PROGRAM_BUILD_LOG && neutral_log(rec, dev, size, value, size_ret, &rc)) return rc;
    if (param == CL_PROGRAM_BUILD_LOG) {
        pthread_mutex_lock(&rec->lock);
        const char *text = NULL;
        for (size_t i = 0; param == CL_PROGRAM_BUILD_LOG && i < rec->ndevs; i++)
            if (rec->devs[i].dev == dev && rec->devs[i].log) text = rec->devs[i].log;
        if (text) {
            /* Validate the device as the driver would. */
            rc = pc_real->clGetProgramBuildInfo(rec->handle, dev, CL_PROGRAM_BUILD_STATUS, 0, NULL, NULL);
            if (rc == CL_SUCCESS) rc = answer(text, strlen(text) + 1, size, value, size_ret);
        }
        pthread_mutex_unlock(&rec->lock);
        if (text) return rc;
    }
    if (param == CL_PROGRAM_BUILD_STATUS && __atomic_load_n(&rec->failed, __ATOMIC_RELAXED)) {
        rc = pc_real->clGetProgramBuildInfo(rec->handle, dev, param, 0, NULL, NULL); /* validates */
        cl_build_status status = CL_BUILD_ERROR;
        return rc != CL_SUCCESS ? rc : answer(&status, sizeof status, size, value, size_ret);
    }
    cl_program p;
    if ((rc = program_for(rec, 1, &p)) != CL_SUCCESS) return rc;
    rc = pc_real->clGetProgramBuildInfo(p, dev, param, size, value, size_ret);
    pc_real->clReleaseProgram(p);
    return rc;
}
