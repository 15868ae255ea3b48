/* il.c — IL programs: SPIR-V translated to SPIR or, by route (a), to PTX.
 *
 * A device without IL support but with cl_khr_spir (or one taking PTX) gets
 * a placeholder handle; the IL is translated at build (compiler/llvmload.h,
 * compiler/route_a.h). Isolated here because only this path loads LLVM.
 */
#include "program/program_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/spirv_scan.h"
#include "compiler/llvmload.h"
#include "compiler/route_a.h"

/* Whether IL in ctx is translated at build (*to_ptx: by route (a)): some
 * device lacks IL but every one takes SPIR, or every one takes PTX. */
static int translates_il(cl_context ctx, const void *il, size_t length, int *to_ptx)
{
    cl_device_id *devs = NULL;
    cl_uint ndev = 0;
    int translate = 0;
    *to_ptx = 0;
    if (config_get()->spirv && il && length && context_devices(ctx, &devs, &ndev) == 0) {
        int all_native = 1, all_spir = 1, all_ptx = 1;
        for (cl_uint i = 0; i < ndev; i++) {
            const struct device_info *d = device_info(pc_real, devs[i]);
            all_native &= d && d->has_native_il;
            all_spir &= d && d->has_spir;
            all_ptx &= d && d->takes_ptx;
        }
        translate = !all_native && (all_spir || all_ptx);
        *to_ptx = translate && !all_spir;
        if (!all_native && !all_spir && !all_ptx)
            LOG_ONCE(LOG_INFO, "a device without IL, SPIR or PTX support: clCreateProgramWithIL is passed to "
                               "the driver unchanged");
    }
    free(devs);
    return translate;
}

/* IL the driver takes itself: its program, recorded with a copy of the IL. */
static cl_program native_il_program(cl_context ctx, const void *il, size_t length, cl_int *errcode_ret)
{
    if (!pc_real->clCreateProgramWithIL) {
        LOG_ONCE(LOG_WARN, "the OpenCL loader has no clCreateProgramWithIL");
        if (errcode_ret) *errcode_ret = CL_INVALID_OPERATION;
        return NULL;
    }
    cl_int err;
    cl_program prog = pc_real->clCreateProgramWithIL(ctx, il, length, &err);
    if (!prog && retry_after_emptying_tier(err, "clCreateProgramWithIL"))
        prog = pc_real->clCreateProgramWithIL(ctx, il, length, &err);
    if (errcode_ret) *errcode_ret = err;
    if (prog) {
        char *copy = malloc(length);
        if (copy) {
            memcpy(copy, il, length);
            if (!new_record(prog, ctx, KEY_IL, copy, length)) free(copy);
        }
    }
    return prog;
}

/* IL translated at build: a placeholder handle and the IL's spec ids. */
static cl_program translated_il_program(cl_context ctx, const void *il, size_t length, int to_ptx,
                                        cl_int *errcode_ret)
{
    struct spirv_scan *scan = malloc(sizeof *scan);
    char *copy = malloc(length);
    if (!scan || !copy) {
        free(scan);
        free(copy);
        if (errcode_ret) *errcode_ret = CL_OUT_OF_HOST_MEMORY;
        return NULL;
    }
    if (spirv_scan(il, length, scan) != 0) {
        log_msg(LOG_WARN, "clCreateProgramWithIL: invalid SPIR-V module: %s", scan->reason);
        free(scan);
        free(copy);
        if (errcode_ret) *errcode_ret = CL_INVALID_VALUE;
        return NULL;
    }
    /* The handle: an empty source program, so every object query works and
     * CL_PROGRAM_SOURCE is empty, as for any program made from IL. */
    const char *empty = "";
    cl_program prog = pc_real->clCreateProgramWithSource(ctx, 1, &empty, NULL, errcode_ret);
    if (!prog) {
        free(scan);
        free(copy);
        return NULL;
    }
    memcpy(copy, il, length);
    struct pc_program *rec = new_record(prog, ctx, KEY_IL, copy, length);
    if (!rec) {
        pc_real->clReleaseProgram(prog);
        free(scan);
        free(copy);
        if (errcode_ret) *errcode_ret = CL_OUT_OF_HOST_MEMORY;
        return NULL;
    }
    rec->translated = 1;
    rec->to_ptx = to_ptx;
    rec->scan = scan;
    log_msg(LOG_DEBUG, "IL program %p: SPIR-V %u.%u, translated at build%s", (void *)prog, scan->version >> 16,
            (scan->version >> 8) & 0xff, to_ptx ? " to PTX (route (a))" : "");
    return prog;
}

cl_program pc_create_with_il(cl_context ctx, const void *il, size_t length, cl_int *errcode_ret)
{
    int to_ptx;
    if (!translates_il(ctx, il, length, &to_ptx)) return native_il_program(ctx, il, length, errcode_ret);
    return translated_il_program(ctx, il, length, to_ptx, errcode_ret);
}

cl_int pc_set_spec_constant(cl_program prog, cl_uint spec_id, size_t spec_size, const void *spec_value)
{
    struct pc_program *rec = objmap_get(pc_programs, prog);
    if (!rec || !rec->translated) {
        if (!pc_real->clSetProgramSpecializationConstant) return CL_INVALID_OPERATION;
        return pc_real->clSetProgramSpecializationConstant(prog, spec_id, spec_size, spec_value);
    }
    int known = 0;
    for (uint32_t i = 0; i < rec->scan->num_spec_ids; i++) known |= rec->scan->spec_ids[i] == spec_id;
    if (!known) return CL_INVALID_SPEC_ID;
    if (!spec_value || !(spec_size == 1 || spec_size == 2 || spec_size == 4 || spec_size == 8))
        return CL_INVALID_VALUE;
    pthread_mutex_lock(&rec->lock);
    size_t i;
    for (i = 0; i < rec->nspecs && rec->specs[i].id != spec_id; i++) {}
    if (i == rec->nspecs) {
        struct spec_value *ns = realloc(rec->specs, (rec->nspecs + 1) * sizeof *ns);
        if (!ns) {
            pthread_mutex_unlock(&rec->lock);
            return CL_OUT_OF_HOST_MEMORY;
        }
        rec->specs = ns;
        rec->nspecs++;
    }
    rec->specs[i].id = spec_id;
    rec->specs[i].size = spec_size;
    memset(rec->specs[i].value, 0, 8);
    memcpy(rec->specs[i].value, spec_value, spec_size);
    pthread_mutex_unlock(&rec->lock);
    return CL_SUCCESS;
}

int cmp_spec(const void *a, const void *b)
{
    const struct spec_value *x = a, *y = b;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* The lowest NVIDIA compute capability among the devices (0: unknown), the
 * one route (a) lowers for so the PTX loads on every device. */
static uint32_t lowest_nv_sm(const struct cl_api *pc_real, cl_uint ndev, const cl_device_id *devs)
{
    uint32_t sm = 0;
    for (cl_uint i = 0; i < ndev; i++) {
        const struct device_info *d = device_info(pc_real, devs[i]);
        if (d && d->nv_sm && (!sm || d->nv_sm < sm)) sm = d->nv_sm;
    }
    return sm;
}

/* The IL of rec as SPIR bitcode (api->free() frees it): 0, or -1 with
 * `why`. */
static int spirv_to_spir(const struct clshim_llvm_api *api, const struct pc_program *rec, void **bc, size_t *size,
                         char *why, size_t why_len)
{
    struct llvm_spec_const consts[64];
    size_t n = rec->nspecs < 64 ? rec->nspecs : 64;
    for (size_t i = 0; i < n; i++) {
        consts[i].id = rec->specs[i].id;
        consts[i].size = (uint32_t)rec->specs[i].size;
        memcpy(&consts[i].value, rec->specs[i].value, 8);
    }
    uint64_t t0 = now_ns();
    if (api->spirv_to_spir(rec->input, rec->input_len, consts, n, bc, size, why, why_len) != 0) return -1;
    pipeline_count_translation();
    log_msg(LOG_INFO, "translated SPIR-V program %p to SPIR (%zu bytes) in %.1f ms", (void *)rec->handle, *size,
            (now_ns() - t0) / 1e6);
    return 0;
}

/* Route (a): the SPIR bitcode *bc (freed here) lowered to PTX for the
 * lowest compute capability of the devices (*bc then malloc'd). 0, or -1
 * with `why`. */
static int spir_to_ptx(const struct clshim_llvm_api *api, const struct pc_program *rec, cl_uint ndev,
                       const cl_device_id *devs, const char *options, void **bc, size_t *size, char *why,
                       size_t why_len)
{
    char *ptx = NULL;
    size_t ptx_size = 0;
    uint64_t t0 = now_ns();
    int rc = route_a_ptx_sm(api, *bc, *size, lowest_nv_sm(pc_real, ndev, devs), options, &ptx, &ptx_size, why,
                            why_len);
    api->free(*bc);
    if (rc != 0) return -1;
    log_msg(LOG_INFO, "lowered SPIR-V program %p to PTX (%zu bytes, route (a)) in %.1f ms", (void *)rec->handle,
            ptx_size, (now_ns() - t0) / 1e6);
    *bc = ptx;
    *size = ptx_size;
    return 0;
}

/* The program of rec's context made from the same translated bytes for
 * every device. */
static cl_program program_from_translation(const struct pc_program *rec, cl_uint ndev, const cl_device_id *devs,
                                           const void *bc, size_t bc_size, cl_int *err)
{
    const unsigned char **bins = calloc(ndev, sizeof *bins);
    size_t *sizes = calloc(ndev, sizeof *sizes);
    cl_program p = NULL;
    if (bins && sizes) {
        for (cl_uint i = 0; i < ndev; i++) {
            bins[i] = bc;
            sizes[i] = bc_size;
        }
        p = pc_real->clCreateProgramWithBinary(rec->context, ndev, devs, sizes, bins, NULL, err);
    } else {
        *err = CL_OUT_OF_HOST_MEMORY;
    }
    free(bins);
    free(sizes);
    return p;
}

/* Translates the IL of rec to SPIR (and, for devices that take PTX, to PTX
 * by route (a)) and creates the program from it. */
cl_program translate_il(struct pc_program *rec, cl_uint ndev, const cl_device_id *devs, const char *options,
                        cl_int *err, char *why, size_t why_len)
{
    const struct clshim_llvm_api *api = llvm_api();
    if (!api) {
        snprintf(why, why_len, "libclshim-llvm.so cannot be loaded");
        *err = CL_BUILD_PROGRAM_FAILURE;
        return NULL;
    }
    void *bc = NULL;
    size_t bc_size = 0;
    if (spirv_to_spir(api, rec, &bc, &bc_size, why, why_len) != 0 ||
        (rec->to_ptx && spir_to_ptx(api, rec, ndev, devs, options, &bc, &bc_size, why, why_len) != 0)) {
        *err = CL_BUILD_PROGRAM_FAILURE;
        return NULL;
    }
    cl_program p = program_from_translation(rec, ndev, devs, bc, bc_size, err);
    if (rec->to_ptx) free(bc);
    else api->free(bc);
    if (!p)
        snprintf(why, why_len, "the driver refused the translated %s (error %d)", rec->to_ptx ? "PTX" : "SPIR",
                 *err);
    return p;
}
