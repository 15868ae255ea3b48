/* fusion_internal — kernel chains with intermediates, for the `internal`
 * fusion option. Plain OpenCL (knows nothing of clshim). Prints one line per
 * buffer after the chain ran --iterations times: "NAME HASH" where HASH is
 * an FNV-1a hash of the buffer's bytes (exact bit patterns), so a test can
 * compare the buffers that must match and see which intermediates were
 * never stored (they start zeroed).
 *   fusion_internal --mode M [--iterations N] [--n N] [--ext 1] [--ext-args LIST]
 * --ext 1: each chain runs between clStartFusionCLSHIM and
 * clCompleteFusionCLSHIM with CL_FUSION_INTERNAL_CLSHIM (when the extension
 * is there; without clshim the chain simply runs). --ext-args LIST (with
 * --ext 1): CL_FUSION_INTERNAL_ARGS_CLSHIM with LIST ("k1.t1,k2.1") instead.
 * Buffers: in (input), t1 t2 t3 (intermediates, zero at first), u (a second
 * input), out.
 * Modes:
 *   chain4    k1 k2 k3 k4: in -> t1 -> t2 -> t3 -> out (k4 reads in again)
 *   escape    k1 pick: pick reads t1 or u through a selected pointer
 *   readfirst early k1 k2: early reads t1 before k1 writes it
 *   inplace   twice k2: twice reads t1 and writes it back, k2 reads it
 *   nbr       k1 nbr, local size 64: nbr reads t1 at its own element and at
 *             its neighbour's within the work-group (wrapping around in it)
 *   far       k1 far, local size 64: far reads t1 at the next element over
 *             the whole range (across work-groups); t1 is computed once
 *             before the chains, so every run reads the same values
 *   ownlocal  k1 grp, local size 64: grp has a __local variable of its own
 *             (its group's first t1 element, written by local id 0) and
 *             folds each iteration's result into out
 */
#include <stdint.h>

#include "CL/clshim_ext.h"
#include "common.h"

static const char *source =
    "__kernel void k1(__global const float *in, __global float *t1) {\n"
    "    size_t i = get_global_id(0); t1[i] = in[i] * 1.5f + 1.0f; }\n"
    "__kernel void k2(__global const float *t1, __global float *t2) {\n"
    "    size_t i = get_global_id(0); t2[i] = t1[i] * t1[i] - 0.5f; }\n"
    "__kernel void k3(__global const float *t2, __global float *t3, float s) {\n"
    "    size_t i = get_global_id(0); t3[i] = t2[i] * s + t2[i]; }\n"
    "__kernel void k4(__global const float *t3, __global const float *in, __global float *out) {\n"
    "    size_t i = get_global_id(0); out[i] = t3[i] - in[i] * 0.25f; }\n"
    "__kernel void pick(__global const float *t1, __global const float *u, __global float *out, int flag) {\n"
    "    size_t i = get_global_id(0); __global const float *src = flag ? t1 : u;\n"
    "    out[i] = src[i] * 2.0f; }\n"
    "__kernel void early(__global const float *t1, __global float *out) {\n"
    "    size_t i = get_global_id(0); out[i] = t1[i] + 3.0f; }\n"
    "__kernel void twice(__global float *t1) {\n"
    "    size_t i = get_global_id(0); t1[i] = t1[i] * 2.0f; }\n"
    "__kernel void nbr(__global const float *t1, __global float *out) {\n"
    "    size_t i = get_global_id(0), l = get_local_id(0), n = get_local_size(0);\n"
    "    out[i] = t1[get_group_id(0) * n + (l + 1) % n] * 0.5f + t1[i]; }\n"
    "__kernel void far(__global const float *t1, __global float *out) {\n"
    "    size_t i = get_global_id(0); out[i] = t1[(i + 1) % get_global_size(0)] * 0.5f + t1[i]; }\n"
    "__kernel void grp(__global const float *t1, __global float *out) {\n"
    "    __local float first[1];\n"
    "    size_t i = get_global_id(0);\n"
    "    if (get_local_id(0) == 0) first[0] = t1[i];\n"
    "    barrier(CLK_LOCAL_MEM_FENCE);\n"
    "    out[i] = out[i] * 0.5f + (t1[i] - first[0]); }\n";

enum { IN, T1, T2, T3, U, OUT, NBUF };
static const char *const buf_name[NBUF] = {"in", "t1", "t2", "t3", "u", "out"};

static cl_context ctx;
static cl_program prog;
static cl_mem bufs[NBUF];

static const char *const kernel_name[] = {"k1", "k2", "k3", "k4", "pick", "early", "twice", "nbr", "far", "grp"};
#define NKERNELS (sizeof kernel_name / sizeof kernel_name[0])
static cl_kernel kernels[NKERNELS]; /* kept until the end: releasing one ends fusion's hold */
static size_t local_size;           /* 0: none given */

static void launch(cl_command_queue q, const char *name, const int *args, size_t nargs, size_t n)
{
    cl_kernel k = NULL;
    for (size_t i = 0; i < NKERNELS; i++)
        if (!strcmp(kernel_name[i], name)) k = kernels[i];
    for (size_t a = 0; a < nargs; a++) {
        if (args[a] >= 0) {
            CHECK(clSetKernelArg(k, (cl_uint)a, sizeof(cl_mem), &bufs[args[a]]));
        } else if (args[a] == -1) { /* the float scale */
            float s = 0.75f;
            CHECK(clSetKernelArg(k, (cl_uint)a, sizeof s, &s));
        } else { /* the int flag */
            cl_int flag = 1;
            CHECK(clSetKernelArg(k, (cl_uint)a, sizeof flag, &flag));
        }
    }
    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &n, local_size ? &local_size : NULL, 0, NULL, NULL));
}


int main(int argc, char **argv)
{
    const char *mode = "chain4";
    int iterations = 2, ext = 0;
    const char *ext_args = NULL;
    size_t n = 4096;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--mode")) mode = argv[i + 1];
        else if (!strcmp(argv[i], "--iterations")) iterations = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--n")) n = (size_t)strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--ext")) ext = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--ext-args")) ext_args = argv[i + 1];
    }
    cl_platform_id platform;
    first_device(&platform);
    clStartFusionCLSHIM_fn start_fusion = NULL;
    clCompleteFusionCLSHIM_fn complete_fusion = NULL;
    if (ext) fusion_ext_lookup(platform, &start_fusion, &complete_fusion);
    cl_device_id dev;
    cl_command_queue q;
    cl_int err;
    first_context_queue(&dev, &ctx, &q);
    prog = clCreateProgramWithSource(ctx, 1, &source, NULL, &err);
    CHECK(err);
    CHECK(clBuildProgram(prog, 1, &dev, "", NULL, NULL));
    for (size_t i = 0; i < NKERNELS; i++) {
        kernels[i] = clCreateKernel(prog, kernel_name[i], &err);
        CHECK(err);
    }
    float *host = calloc(n, sizeof *host);
    for (int b = 0; b < NBUF; b++) {
        for (size_t i = 0; i < n; i++)
            host[i] = b == IN ? (float)i * 0.37f - 11.0f : b == U ? 5.0f - (float)i * 0.01f : 0.0f;
        bufs[b] = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, n * sizeof *host, host, &err);
        CHECK(err);
    }
    if (!strcmp(mode, "nbr") || !strcmp(mode, "far") || !strcmp(mode, "ownlocal")) local_size = 64;
    if (!strcmp(mode, "far")) { /* t1 before the chains: what far reads across groups is never stale */
        launch(q, "k1", (const int[]){IN, T1}, 2, n);
        CHECK(clFinish(q));
    }
    for (int it = 0; it < iterations; it++) {
        if (start_fusion && complete_fusion) CHECK(start_fusion(q));
        if (!strcmp(mode, "chain4")) {
            launch(q, "k1", (const int[]){IN, T1}, 2, n);
            launch(q, "k2", (const int[]){T1, T2}, 2, n);
            launch(q, "k3", (const int[]){T2, T3, -1}, 3, n);
            launch(q, "k4", (const int[]){T3, IN, OUT}, 3, n);
        } else if (!strcmp(mode, "escape")) {
            launch(q, "k1", (const int[]){IN, T1}, 2, n);
            launch(q, "pick", (const int[]){T1, U, OUT, -2}, 4, n);
        } else if (!strcmp(mode, "readfirst")) {
            launch(q, "early", (const int[]){T1, OUT}, 2, n);
            launch(q, "k1", (const int[]){IN, T1}, 2, n);
            launch(q, "k2", (const int[]){T1, T2}, 2, n);
        } else if (!strcmp(mode, "inplace")) {
            launch(q, "twice", (const int[]){T1}, 1, n);
            launch(q, "k2", (const int[]){T1, T2}, 2, n);
        } else if (!strcmp(mode, "nbr") || !strcmp(mode, "far")) {
            launch(q, "k1", (const int[]){IN, T1}, 2, n);
            launch(q, mode, (const int[]){T1, OUT}, 2, n);
        } else if (!strcmp(mode, "ownlocal")) {
            launch(q, "k1", (const int[]){IN, T1}, 2, n);
            launch(q, "grp", (const int[]){T1, OUT}, 2, n);
        } else {
            fprintf(stderr, "unknown mode %s\n", mode);
            return 2;
        }
        if (start_fusion && complete_fusion) {
            cl_fusion_properties_clshim internal[] = {CL_FUSION_INTERNAL_CLSHIM, 1, 0};
            cl_fusion_properties_clshim named[] = {CL_FUSION_INTERNAL_ARGS_CLSHIM,
                                                   (cl_fusion_properties_clshim)(uintptr_t)ext_args, 0};
            CHECK(complete_fusion(q, ext_args ? named : internal, NULL));
        }
    }
    for (int b = 0; b < NBUF; b++) {
        CHECK(clEnqueueReadBuffer(q, bufs[b], CL_TRUE, 0, n * sizeof *host, host, 0, NULL, NULL));
        printf("%s %016llx\n", buf_name[b], (unsigned long long)fnv((const unsigned char *)host, n * sizeof *host));
        clReleaseMemObject(bufs[b]);
    }
    free(host);
    for (size_t i = 0; i < NKERNELS; i++) clReleaseKernel(kernels[i]);
    clReleaseProgram(prog);
    clReleaseCommandQueue(q);
    clReleaseContext(ctx);
    return 0;
}
