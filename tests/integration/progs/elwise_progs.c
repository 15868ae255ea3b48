/* elwise_progs.c — a chain of elementwise kernels, each from a program of
 * its own, as PyOpenCL's ElementwiseKernel makes them (a grid-stride loop
 * over base pointers plus byte offsets, the PYOPENCL_ELWISE_CONTINUE
 * macro), for route (b)'s join of programs (fusion/fuse_source.h). The
 * programs also declare the same names with different meanings: every
 * kernel is `elwise_kernel`, every program has a helper `elwise_op` and a
 * typedef `elwise_t`, and programs 1 and 3 a program-scope constant
 * `elwise_c` (1.0f and 0.5f). One step:
 *     t1 = s * x + c;   t2 = t1 * t1;   y = t2 - 0.5f     (c = 1.0f)
 * Prints a digest of every buffer after each iteration, so runs with and
 * without the shim can be diffed.
 *
 *   elwise_progs [--programs 2|3] [--n N] [--iterations I] [--reps R]
 *                [--steps S] [--cus C] [--options2 OPTS] [--contract-off2]
 *
 * --programs 2 runs the first two kernels only. --options2 builds program
 * 2 with other options; --contract-off2 starts its source with
 * `#pragma OPENCL FP_CONTRACT OFF` (which would hold for a program after
 * it). The ND-range is PyOpenCL's `splay` for the
 * device's compute units (--cus C: for C of them instead, to prime a cache
 * for another device). With --reps R: R timed rounds of S steps (default
 * 20) back to back, then one clFinish ("pipelined"), and R rounds of one
 * step each followed by clFinish ("latency"), interleaved; the medians on
 * stderr: "elwise n=N gws=G lws=L pipelined_us=T latency_us=T" (per step). */
#include "common.h"

/* PyOpenCL's ElementwiseKernel template: PARAMS after the two buffers,
 * LOCALS before the loop, BODY for each element i. */
#define ELWISE(PARAMS, LOCALS, BODY)                                                                          \
    "#define PYOPENCL_ELWISE_CONTINUE continue\n"                                                             \
    "__kernel void elwise_kernel(__global float *x__base, long x__offset, __global float *y__base, "           \
    "long y__offset" PARAMS ", long n)\n"                                                                     \
    "{\n"                                                                                                     \
    "  int lid = get_local_id(0);\n"                                                                          \
    "  int gsize = get_global_size(0);\n"                                                                     \
    "  int work_group_start = get_local_size(0)*get_group_id(0);\n"                                           \
    "  long i;\n" LOCALS                                                                                      \
    "  __global float *x = (__global float *) ((__global char *) x__base + x__offset);\n"                     \
    "  __global float *y = (__global float *) ((__global char *) y__base + y__offset);\n"                     \
    "  for (i = work_group_start + lid; i < n; i += gsize)\n"                                                 \
    "  {\n"                                                                                                   \
    "    " BODY "\n"                                                                                          \
    "  }\n"                                                                                                   \
    "}\n"

static const char *sources[3] = { /* not const: --func replaces the last */
    "typedef float elwise_t;\n"
    "__constant elwise_t elwise_c = 1.0f;\n"
    "elwise_t elwise_op(elwise_t v, float s) { return s * v + elwise_c; }\n"
    ELWISE(", float s", "", "y[i] = elwise_op(x[i], s);"),
    "typedef int elwise_t;\n"
    "float elwise_op(float v) { return v * v; }\n"
    ELWISE("", "  elwise_t unused = 0;\n", "y[i] = elwise_op(x[i]) + (float)unused;"),
    "__constant float elwise_c = 0.5f;\n"
    "float elwise_op(float v) { return v - elwise_c; }\n"
    ELWISE("", "", "y[i] = elwise_op(x[i]);"),
};

/* --func: the last program's kernel reads its own name (sizeof(__func__):
 * 14 for "elwise_kernel"), which a join must not change. */
static const char *func_source =
    "__constant float elwise_c = 0.5f;\n"
    "float elwise_op(float v) { return v - elwise_c; }\n"
    ELWISE("", "", "y[i] = elwise_op(x[i]) + (float)sizeof(__func__);");

static cl_command_queue q;
static size_t gws, lws;

/* PyOpenCL's splay (pyopencl/array.py): its ND-range for n items. */
static void splay(size_t n, size_t cus, size_t max_wg)
{
    size_t max_items = max_wg < 128 ? max_wg : 128, min_items = max_items < 32 ? max_items : 32;
    size_t max_groups = cus * 4 * 8, groups, per_group;
    if (n < min_items) groups = 1, per_group = min_items;
    else if (n < max_groups * min_items) groups = (n + min_items - 1) / min_items, per_group = min_items;
    else if (n < max_groups * max_items) {
        groups = max_groups;
        per_group = ((n + min_items - 1) / min_items + max_groups - 1) / max_groups * min_items;
    } else groups = max_groups, per_group = max_items;
    gws = groups * per_group;
    lws = per_group;
}

static void step(cl_kernel *k, int nk)
{
    for (int i = 0; i < nk; i++) CHECK(clEnqueueNDRangeKernel(q, k[i], 1, NULL, &gws, &lws, 0, NULL, NULL));
}

static double median(double *t, int n)
{
    for (int i = 1; i < n; i++) /* insertion sort: n is small */
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            double s = t[j];
            t[j] = t[j - 1];
            t[j - 1] = s;
        }
    return t[n / 2];
}

int main(int argc, char **argv)
{
    int nprogs = 3, iters = 2, reps = 0, steps = 20;
    size_t n = 100003, cus = 0;
    const char *options2 = "";
    int contract_off2 = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--programs") && i + 1 < argc) nprogs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--n") && i + 1 < argc) n = (size_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "--iterations") && i + 1 < argc) iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--cus") && i + 1 < argc) cus = (size_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "--options2") && i + 1 < argc) options2 = argv[++i];
        else if (!strcmp(argv[i], "--contract-off2")) contract_off2 = 1;
        else if (!strcmp(argv[i], "--func")) sources[2] = func_source;
        else {
            fprintf(stderr, "usage: elwise_progs [--programs 2|3] [--n N] [--iterations I] [--reps R] [--steps S] "
                    "[--cus C] [--options2 OPTS] [--contract-off2]\n");
            return 2;
        }
    }
    if (nprogs < 2 || nprogs > 3) nprogs = 3;
    cl_device_id dev;
    cl_context ctx;
    first_context_queue(&dev, &ctx, &q);
    cl_uint dev_cus = 0;
    size_t max_wg = 0;
    CHECK(clGetDeviceInfo(dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof dev_cus, &dev_cus, NULL));
    CHECK(clGetDeviceInfo(dev, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof max_wg, &max_wg, NULL));
    splay(n, cus ? cus : dev_cus, max_wg);
    cl_int err;
    cl_program prog[3];
    cl_kernel k[3];
    for (int p = 0; p < nprogs; p++) {
        const char *text[2] = {"#pragma OPENCL FP_CONTRACT OFF\n", sources[p]};
        int off = !(p == 1 && contract_off2);
        prog[p] = clCreateProgramWithSource(ctx, 2 - off, text + off, NULL, &err);
        CHECK(err);
        err = clBuildProgram(prog[p], 1, &dev, p == 1 ? options2 : "", NULL, NULL);
        if (err != CL_SUCCESS) {
            char *log = build_log(prog[p], dev);
            fprintf(stderr, "build of program %d failed (%d): %s\n", p + 1, err, log);
            free(log);
            return 1;
        }
        k[p] = clCreateKernel(prog[p], "elwise_kernel", &err);
        CHECK(err);
    }
    float *host = malloc(n * sizeof *host);
    for (size_t i = 0; i < n; i++) host[i] = (float)(i % 977) / 7.0f;
    cl_mem buf[4];
    for (int b = 0; b < 4; b++) {
        buf[b] = clCreateBuffer(ctx, CL_MEM_READ_WRITE | (b ? 0 : CL_MEM_COPY_HOST_PTR), n * sizeof(float),
                                b ? NULL : host, &err);
        CHECK(err);
    }
    cl_long zero = 0, items = (cl_long)n;
    for (int p = 0; p < nprogs; p++) {
        CHECK(clSetKernelArg(k[p], 0, sizeof(cl_mem), &buf[p]));
        CHECK(clSetKernelArg(k[p], 1, sizeof zero, &zero));
        CHECK(clSetKernelArg(k[p], 2, sizeof(cl_mem), &buf[p + 1]));
        CHECK(clSetKernelArg(k[p], 3, sizeof zero, &zero));
        if (p == 0) {
            float s = 0.75f;
            CHECK(clSetKernelArg(k[p], 4, sizeof s, &s));
        }
        CHECK(clSetKernelArg(k[p], p == 0 ? 5 : 4, sizeof items, &items));
    }
    for (int it = 0; it < iters; it++) {
        step(k, nprogs);
        CHECK(clFinish(q));
        for (int b = 1; b <= nprogs; b++) {
            CHECK(clEnqueueReadBuffer(q, buf[b], CL_TRUE, 0, n * sizeof(float), host, 0, NULL, NULL));
            printf("iteration %d buffer %d: %016llx\n", it, b, (unsigned long long)fnv(host, n * sizeof(float)));
        }
    }
    if (reps > 0) {
        double *tp = calloc((size_t)reps, sizeof *tp), *tl = calloc((size_t)reps, sizeof *tl);
        for (int w = 0; w < 3 * steps; w++) step(k, nprogs); /* warm: learned and fused before timing */
        CHECK(clFinish(q));
        for (int r = 0; r < reps; r++) {
            double t0 = now_ms();
            for (int s = 0; s < steps; s++) step(k, nprogs);
            CHECK(clFinish(q));
            tp[r] = (now_ms() - t0) * 1e3 / steps;
            t0 = now_ms();
            for (int s = 0; s < steps; s++) {
                step(k, nprogs);
                CHECK(clFinish(q));
            }
            tl[r] = (now_ms() - t0) * 1e3 / steps;
        }
        fprintf(stderr, "elwise n=%zu gws=%zu lws=%zu pipelined_us=%.2f latency_us=%.2f\n", n, gws, lws,
                median(tp, reps), median(tl, reps));
        free(tp);
        free(tl);
        CHECK(clEnqueueReadBuffer(q, buf[nprogs], CL_TRUE, 0, n * sizeof(float), host, 0, NULL, NULL));
        printf("after timing buffer %d: %016llx\n", nprogs, (unsigned long long)fnv(host, n * sizeof(float)));
    }
    for (int p = 0; p < nprogs; p++) {
        clReleaseKernel(k[p]);
        clReleaseProgram(prog[p]);
    }
    for (int b = 0; b < 4; b++) clReleaseMemObject(buf[b]);
    free(host);
    clReleaseCommandQueue(q);
    clReleaseContext(ctx);
    return 0;
}
