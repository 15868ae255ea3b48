/* kernel.c — kernel records and a kernel's origin for fusion.
 *
 * Kernels of a tracked program count in its reference count, as the driver
 * counts them; a kernel made from the effective program reports the handle
 * as its program. Fusion asks a kernel's origin (program/origin.h).
 */
#include "program/program_int.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

struct pc_kernel_rec *kernel_record(cl_kernel k) { return objmap_get(pc_kernels, k); }
struct pc_program *kernel_program(struct pc_kernel_rec *kr) { return kr->prog; }

/* Records a new kernel of rec. On failure (the error returned) the caller
 * releases the kernel and fails as the driver would have: an untracked
 * kernel would let a rebuild through that the driver refuses. */
static cl_int track_kernel(struct pc_program *rec, cl_kernel k, const char *name, int substituted)
{
    size_t n = strlen(name);
    struct pc_kernel_rec *kr = malloc(sizeof *kr + n + 1);
    if (!kr) return CL_OUT_OF_HOST_MEMORY;
    kr->prog = rec;
    kr->refs = 1;
    kr->substituted = substituted;
    kr->ran = 0;
    memcpy(kr->name, name, n + 1);
    cl_int rc = substituted ? pc_real->clRetainProgram(rec->handle) : CL_SUCCESS;
    if (rc != CL_SUCCESS) {
        free(kr);
        return rc;
    }
    if (objmap_put(pc_kernels, k, kr) != 0) {
        if (substituted) pc_real->clReleaseProgram(rec->handle);
        free(kr);
        return CL_OUT_OF_HOST_MEMORY;
    }
    __atomic_add_fetch(&rec->refs, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&rec->nkernels, 1, __ATOMIC_RELEASE);
    return CL_SUCCESS;
}

cl_kernel pc_create_kernel(cl_program prog, const char *name, cl_int *errcode_ret)
{
    struct pc_program *rec = objmap_get(pc_programs, prog);
    if (!rec) return pc_real->clCreateKernel(prog, name, errcode_ret);
    cl_program p;
    cl_int rc = program_for(rec, 1, &p);
    if (rc != CL_SUCCESS) {
        if (errcode_ret) *errcode_ret = rc;
        return NULL;
    }
    cl_kernel k = pc_real->clCreateKernel(p, name, errcode_ret);
    if (k && (rc = track_kernel(rec, k, name, p != prog)) != CL_SUCCESS) {
        pc_real->clReleaseKernel(k);
        k = NULL;
        if (errcode_ret) *errcode_ret = rc;
    }
    pc_real->clReleaseProgram(p);
    return k;
}

cl_int pc_create_kernels(cl_program prog, cl_uint num, cl_kernel *out, cl_uint *num_ret)
{
    struct pc_program *rec = objmap_get(pc_programs, prog);
    if (!rec) return pc_real->clCreateKernelsInProgram(prog, num, out, num_ret);
    cl_program p;
    cl_int rc = program_for(rec, 1, &p);
    if (rc != CL_SUCCESS) return rc;
    cl_uint made = 0;
    rc = pc_real->clCreateKernelsInProgram(p, num, out, &made);
    if (num_ret) *num_ret = made;
    cl_uint tracked = 0;
    if (rc == CL_SUCCESS && out)
        for (; tracked < made; tracked++) {
            char name[1024] = "";
            rc = pc_real->clGetKernelInfo(out[tracked], CL_KERNEL_FUNCTION_NAME, sizeof name, name, NULL);
            if (rc == CL_SUCCESS) rc = track_kernel(rec, out[tracked], name, p != prog);
            if (rc != CL_SUCCESS) break;
        }
    if (rc != CL_SUCCESS && out && tracked < made) {
        /* All or nothing, as the driver: the tracked ones go as the app's would. */
        for (cl_uint i = 0; i < made; i++) {
            if (i < tracked) pc_release_kernel(out[i]);
            else pc_real->clReleaseKernel(out[i]);
            out[i] = NULL;
        }
        if (num_ret) *num_ret = 0;
    }
    pc_real->clReleaseProgram(p);
    return rc;
}

cl_kernel pc_clone_kernel(cl_kernel source, cl_int *errcode_ret)
{
    if (!pc_real->clCloneKernel) {
        LOG_ONCE(LOG_WARN, "the OpenCL loader has no clCloneKernel");
        if (errcode_ret) *errcode_ret = CL_INVALID_OPERATION;
        return NULL;
    }
    cl_kernel k = pc_real->clCloneKernel(source, errcode_ret);
    struct pc_kernel_rec *kr = k ? objmap_get(pc_kernels, source) : NULL;
    cl_int rc = kr ? track_kernel(kr->prog, k, kr->name, kr->substituted) : CL_SUCCESS;
    if (rc != CL_SUCCESS) {
        pc_real->clReleaseKernel(k);
        k = NULL;
        if (errcode_ret) *errcode_ret = rc;
    }
    return k;
}

cl_int pc_get_kernel_info(cl_kernel k, cl_kernel_info param, size_t size, void *value, size_t *size_ret)
{
    struct pc_kernel_rec *kr = param == CL_KERNEL_PROGRAM ? objmap_get(pc_kernels, k) : NULL;
    if (kr && kr->substituted) {
        /* Validate the kernel first, as the driver would. */
        cl_int rc = pc_real->clGetKernelInfo(k, CL_KERNEL_PROGRAM, 0, NULL, NULL);
        if (rc != CL_SUCCESS) return rc;
        return answer(&kr->prog->handle, sizeof(cl_program), size, value, size_ret);
    }
    return pc_real->clGetKernelInfo(k, param, size, value, size_ret);
}

cl_int pc_retain_kernel(cl_kernel k)
{
    cl_int rc = pc_real->clRetainKernel(k);
    struct pc_kernel_rec *kr = rc == CL_SUCCESS ? objmap_get(pc_kernels, k) : NULL;
    if (kr) __atomic_add_fetch(&kr->refs, 1, __ATOMIC_RELAXED);
    return rc;
}

cl_int pc_release_kernel(cl_kernel k)
{
    struct pc_kernel_rec *kr = objmap_get(pc_kernels, k);
    if (!kr) return pc_real->clReleaseKernel(k);
    struct pc_program *rec = kr->prog;
    int last_kernel_ref = __atomic_load_n(&kr->refs, __ATOMIC_ACQUIRE) == 1;
    if (last_kernel_ref) before_last_reference(rec);
    cl_int rc = pc_real->clReleaseKernel(k);
    if (rc != CL_SUCCESS) return rc;
    unsigned left = __atomic_sub_fetch(&kr->refs, 1, __ATOMIC_ACQ_REL);
    /* Never below zero: a kernel record released more often than it was
     * retained is left alone (the driver answered the release itself). */
    if (!CLSHIM_ASSERT(left != UINT_MAX) || left != 0) return rc;
    objmap_remove(pc_kernels, k);
    if (kr->substituted) pc_real->clReleaseProgram(rec->handle);
    free(kr);
    __atomic_sub_fetch(&rec->nkernels, 1, __ATOMIC_RELEASE);
    drop_reference(rec);
    return rc;
}

int pc_kernel_origin(cl_kernel k, struct pc_origin *out)
{
    memset(out, 0, sizeof *out);
    struct pc_kernel_rec *kr = objmap_get(pc_kernels, k);
    if (!kr) return -1;
    /* The kernel holds its record (rec->refs): the record outlives this
     * call; its lock keeps a concurrent build from changing the options. */
    struct pc_program *rec = kr->prog;
    pthread_mutex_lock(&rec->lock);
    out->kind = rec->kind;
    out->input_len = rec->input_len;
    out->input = malloc(rec->input_len + 1);
    out->options = strdup(rec->options ? rec->options : "");
    out->name = strdup(kr->name);
    out->specs = rec->nspecs ? calloc(rec->nspecs, sizeof *out->specs) : NULL;
    int ok = out->input && out->options && out->name && (!rec->nspecs || out->specs);
    if (ok) {
        if (rec->input_len) /* a linked program has no input of its own */
            memcpy(out->input, built_input(rec), rec->input_len); /* the kernel's own text */
        ((char *)out->input)[rec->input_len] = 0;
        out->nspecs = rec->nspecs;
        for (size_t i = 0; i < rec->nspecs; i++) {
            out->specs[i].id = rec->specs[i].id;
            out->specs[i].size = (uint32_t)rec->specs[i].size;
            memcpy(&out->specs[i].value, rec->specs[i].value, 8);
        }
    }
    pthread_mutex_unlock(&rec->lock);
    if (!ok) {
        pc_origin_free(out);
        return -1;
    }
    return 0;
}

void pc_origin_free(struct pc_origin *o)
{
    free(o->input);
    free(o->options);
    free(o->name);
    free(o->specs);
    memset(o, 0, sizeof *o);
}
