/* fusion_source — kernel chains that exercise the corners of fusion by
 * generated OpenCL C (route (b), fusion/fuse_source.h). Plain OpenCL: a run
 * under clshim must print exactly what a plain run prints (results as bit
 * patterns and hashes).
 *   fusion_source --mode M [--iterations N]
 * The program's source has a helper function named like clshim's first
 * generated kernel (clshim_f0), kernels with reqd_work_group_size, a struct
 * argument passed by value, a __constant table, and a kernel with a
 * kernel-scope __local array. Modes:
 *   attr    up -> root over 4096 items, local size 64 (both kernels
 *           require it)
 *   struct  affine(pair_t by value) -> lookup(__constant table) -> neg
 *   local   affine -> tiled (tiled declares __local float tile[64])
 *   alias   e1 -> e2 where e1's input and output are buffers over
 *           overlapping host memory (CL_MEM_USE_HOST_PTR): never fused
 *   chain4  the elementwise chain e1 -> e2 -> e3 -> e4 (the last a sqrt),
 *           over --n items, with `--reps R` timed launches reported to
 *           stderr (the GPU script uses it)
 */
#include <stdint.h>

#include "common.h"

static const char *source =
    "#define SCALE 3.0f\n"
    "float clshim_f0(float x) { return x * SCALE; }\n"
    "typedef struct { float a, b; } pair_t;\n"
    "__kernel __attribute__((reqd_work_group_size(64, 1, 1)))\n"
    "void up(__global const float *in, __global float *out) {\n"
    "    size_t i = get_global_id(0); out[i] = clshim_f0(in[i]) + 0.1f; }\n"
    "__kernel __attribute__((reqd_work_group_size(64, 1, 1)))\n"
    "void root(__global float *restrict io, const float k) {\n"
    "    size_t i = get_global_id(0); io[i] = sqrt(fabs(io[i])) * k; }\n"
    "__kernel void affine(__global float *io, pair_t p) {\n"
    "    size_t i = get_global_id(0); io[i] = io[i] * p.a + p.b; }\n"
    "__constant float table[4] = {0.5f, -1.25f, 2.0f, 3.5f};\n"
    "__kernel void lookup(__global const float *in, __global float *restrict out) {\n"
    "    size_t i = get_global_id(0); out[i] = in[i] * table[i & 3]; }\n"
    "__kernel void neg(__global float *io) { size_t i = get_global_id(0); io[i] = -io[i]; }\n"
    "__kernel void tiled(__global const float *in, __global float *out) {\n"
    "    __local float tile[64];\n"
    "    size_t l = get_local_id(0); tile[l] = in[get_global_id(0)];\n"
    "    barrier(CLK_LOCAL_MEM_FENCE);\n"
    "    out[get_global_id(0)] = tile[l] * 2.0f; }\n"
    "__kernel void e1(__global const float *x, __global float *t1) {\n"
    "    size_t i = get_global_id(0); t1[i] = x[i] * 1.5f + 0.25f; }\n"
    "__kernel void e2(__global const float *t1, __global float *t2) {\n"
    "    size_t i = get_global_id(0); t2[i] = t1[i] * t1[i] - 0.5f; }\n"
    "__kernel void e3(__global const float *t2, __global float *t3, float k) {\n"
    "    size_t i = get_global_id(0); t3[i] = fma(t2[i], k, 1.0f); }\n"
    "__kernel void e4(__global const float *t3, __global float *y) {\n"
    "    size_t i = get_global_id(0); y[i] = sqrt(fabs(t3[i])); }\n";

static cl_context ctx;
static cl_device_id dev;
static cl_command_queue q;
static cl_program prog;
static size_t n_elems = 4096;

static cl_kernel kernel(const char *name)
{
    cl_int err;
    cl_kernel k = clCreateKernel(prog, name, &err);
    CHECK(err);
    return k;
}

static cl_mem buffer(unsigned seed)
{
    return seeded_float_buffer(ctx, n_elems, seed);
}

static void set_mem(cl_kernel k, cl_uint i, cl_mem m) { CHECK(clSetKernelArg(k, i, sizeof m, &m)); }
static void set_f(cl_kernel k, cl_uint i, float v) { CHECK(clSetKernelArg(k, i, sizeof v, &v)); }

static void launch(cl_kernel k, const size_t *lws)
{
    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &n_elems, lws, 0, NULL, NULL));
}

static void report(cl_mem m, const char *what)
{
    print_float_buffer(q, m, n_elems, what);
}

static void mode_attr(int iters)
{
    cl_kernel up = kernel("up"), root = kernel("root");
    cl_mem a = buffer(1), b = buffer(2);
    size_t lws = 64;
    for (int it = 0; it < iters; it++) {
        set_mem(up, 0, a);
        set_mem(up, 1, b);
        set_mem(root, 0, b);
        set_f(root, 1, 0.5f + (float)it);
        launch(up, &lws);
        launch(root, &lws);
        char what[32];
        snprintf(what, sizeof what, "attr[%d]", it);
        report(b, what);
    }
    clReleaseKernel(up);
    clReleaseKernel(root);
    clReleaseMemObject(a);
    clReleaseMemObject(b);
}

/* affine(a) then, per mode, lookup(a -> b) and neg(b), or tiled(a -> b). */
static void mode_struct_local(int iters, int local)
{
    cl_kernel affine = kernel("affine"), lookup = kernel("lookup"), neg = kernel("neg"), tiled = kernel("tiled");
    cl_mem a = buffer(3), b = buffer(4);
    size_t lws = 64;
    for (int it = 0; it < iters; it++) {
        struct {
            float a, b;
        } pair = {1.25f + (float)it, -0.75f};
        set_mem(affine, 0, a);
        CHECK(clSetKernelArg(affine, 1, sizeof pair, &pair));
        launch(affine, local ? &lws : NULL);
        if (local) {
            set_mem(tiled, 0, a);
            set_mem(tiled, 1, b);
            launch(tiled, &lws);
        } else {
            set_mem(lookup, 0, a);
            set_mem(lookup, 1, b);
            set_mem(neg, 0, b);
            launch(lookup, NULL);
            launch(neg, NULL);
        }
        char what[32];
        snprintf(what, sizeof what, "%s[%d]", local ? "local" : "struct", it);
        report(a, what);
        report(b, what);
    }
    clReleaseKernel(affine);
    clReleaseKernel(lookup);
    clReleaseKernel(neg);
    clReleaseKernel(tiled);
    clReleaseMemObject(a);
    clReleaseMemObject(b);
}

/* e1..e4 over n_elems; `reps` timed rounds after a warm-up, the median
 * round's time on stderr ("chain4 n=N median_us=T"). */
static void mode_chain4(int iters, int reps)
{
    cl_kernel k[4] = {kernel("e1"), kernel("e2"), kernel("e3"), kernel("e4")};
    cl_mem x = buffer(5), t1 = buffer(6), t2 = buffer(7), t3 = buffer(8), y = buffer(9);
    set_mem(k[0], 0, x);
    set_mem(k[0], 1, t1);
    set_mem(k[1], 0, t1);
    set_mem(k[1], 1, t2);
    set_mem(k[2], 0, t2);
    set_mem(k[2], 1, t3);
    set_f(k[2], 2, 0.375f);
    set_mem(k[3], 0, t3);
    set_mem(k[3], 1, y);
    for (int it = 0; it < iters; it++) {
        for (int i = 0; i < 4; i++) launch(k[i], NULL);
        char what[32];
        snprintf(what, sizeof what, "chain4[%d]", it);
        report(y, what);
    }
    double *t = calloc((size_t)(reps > 0 ? reps : 1), sizeof *t);
    for (int r = 0; r < reps; r++) {
        CHECK(clFinish(q));
        double t0 = now_ms();
        for (int rep = 0; rep < 20; rep++)
            for (int i = 0; i < 4; i++) launch(k[i], NULL);
        CHECK(clFinish(q));
        t[r] = (now_ms() - t0) * 1e3 / 20;
    }
    for (int i = 1; i < reps; i++) /* insertion sort: reps is small */
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            double s = t[j];
            t[j] = t[j - 1];
            t[j - 1] = s;
        }
    if (reps > 0) fprintf(stderr, "chain4 n=%zu median_us=%.1f\n", n_elems, t[reps / 2]);
    free(t);
    for (int i = 0; i < 4; i++) clReleaseKernel(k[i]);
    clReleaseMemObject(x);
    clReleaseMemObject(t1);
    clReleaseMemObject(t2);
    clReleaseMemObject(t3);
    clReleaseMemObject(y);
}

static void mode_alias(int iters)
{
    cl_kernel e1 = kernel("e1"), e2 = kernel("e2");
    float *host = calloc(n_elems + 32, sizeof *host);
    for (size_t i = 0; i < n_elems + 32; i++) host[i] = (float)(i % 101) * 0.5f;
    cl_int err;
    cl_mem x = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, n_elems * sizeof(float), host, &err);
    CHECK(err);
    cl_mem t1 = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, n_elems * sizeof(float), host + 32, &err);
    CHECK(err);
    cl_mem t2 = buffer(10);
    for (int it = 0; it < iters; it++) {
        set_mem(e1, 0, x);
        set_mem(e1, 1, t1);
        set_mem(e2, 0, t1);
        set_mem(e2, 1, t2);
        launch(e1, NULL);
        launch(e2, NULL);
        char what[32];
        snprintf(what, sizeof what, "alias[%d]", it);
        report(t2, what);
    }
    clReleaseKernel(e1);
    clReleaseKernel(e2);
    clReleaseMemObject(x);
    clReleaseMemObject(t1);
    clReleaseMemObject(t2);
    free(host);
}

int main(int argc, char **argv)
{
    const char *mode = "attr";
    int iters = 2, reps = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--mode") && i + 1 < argc) mode = argv[++i];
        else if (!strcmp(argv[i], "--iterations") && i + 1 < argc) iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--n") && i + 1 < argc) n_elems = (size_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--print-source")) {
            fputs(source, stdout);
            return 0;
        }
    }
    cl_int err;
    first_context_queue(&dev, &ctx, &q);
    prog = clCreateProgramWithSource(ctx, 1, &source, NULL, &err);
    CHECK(err);
    err = clBuildProgram(prog, 1, &dev, "", NULL, NULL);
    if (err != CL_SUCCESS) {
        char *log = build_log(prog, dev);
        fprintf(stderr, "build failed (%d): %s\n", err, log);
        free(log);
        return 1;
    }
    if (!strcmp(mode, "attr")) mode_attr(iters);
    else if (!strcmp(mode, "struct")) mode_struct_local(iters, 0);
    else if (!strcmp(mode, "local")) mode_struct_local(iters, 1);
    else if (!strcmp(mode, "chain4")) mode_chain4(iters, reps);
    else if (!strcmp(mode, "alias")) mode_alias(iters);
    else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 1;
    }
    clReleaseProgram(prog);
    clReleaseCommandQueue(q);
    clReleaseContext(ctx);
    return 0;
}
