/* pipeline — the bundled demo program: an ordinary OpenCL application that
 * knows nothing of clshim. It builds a program of five kernels, runs an
 * elementwise chain (standardize -> gain -> clamp01, a fusion candidate) and
 * a reduction, and prints the result and its time to first result.
 *   pipeline [N] [ITERATIONS] [UNTIMED]
 * The time per iteration is that of the iterations after the first UNTIMED
 * (default 1: after the first result); bench/demo_auto.sh passes more, to
 * time the steady state after automatic fusion has learned the chain. */
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CHECK(x)                                                                     \
    do {                                                                             \
        cl_int rc_ = (x);                                                            \
        if (rc_ != CL_SUCCESS) {                                                     \
            fprintf(stderr, "pipeline: %s failed: %d\n", #x, rc_);                   \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

static const char *source =
    "__kernel void standardize(__global const float *in, __global float *out, float mean, float inv_std) {\n"
    "    size_t i = get_global_id(0);\n"
    "    out[i] = (in[i] - mean) * inv_std;\n"
    "}\n"
    "__kernel void gain(__global float *x, float g) {\n"
    "    size_t i = get_global_id(0);\n"
    "    x[i] = x[i] * g + 0.5f;\n"
    "}\n"
    "__kernel void clamp01(__global float *x) {\n"
    "    size_t i = get_global_id(0);\n"
    "    x[i] = clamp(x[i], 0.0f, 1.0f);\n"
    "}\n"
    "__kernel void histogram16(__global const float *x, __global int *bins) {\n"
    "    size_t i = get_global_id(0);\n"
    "    atomic_inc(&bins[min((int)(x[i] * 16.0f), 15)]);\n"
    "}\n"
    "__kernel void partial_sum(__global const float *x, __global float *out, __local float *tmp) {\n"
    "    size_t l = get_local_id(0), n = get_local_size(0);\n"
    "    tmp[l] = x[get_global_id(0)];\n"
    "    for (size_t s = n / 2; s > 0; s /= 2) {\n"
    "        barrier(CLK_LOCAL_MEM_FENCE);\n"
    "        if (l < s) tmp[l] += tmp[l + s];\n"
    "    }\n"
    "    if (l == 0) out[get_group_id(0)] = tmp[0];\n"
    "}\n";

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
    size_t n = argc > 1 ? strtoul(argv[1], NULL, 10) : 1 << 20;
    int iterations = argc > 2 ? atoi(argv[2]) : 3;
    int untimed = argc > 3 ? atoi(argv[3]) : 1;
    if (untimed < 1 || untimed >= iterations) untimed = 1;
    const size_t local = 256;
    n = (n + local - 1) / local * local;
    cl_platform_id platform;
    cl_device_id dev;
    cl_int err;
    CHECK(clGetPlatformIDs(1, &platform, NULL));
    CHECK(clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &dev, NULL));
    cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    CHECK(err);
    cl_command_queue q = clCreateCommandQueueWithProperties(ctx, dev, NULL, &err);
    CHECK(err);
    float *host = malloc(n * sizeof *host);
    for (size_t i = 0; i < n; i++) host[i] = (float)((i * 2654435761u) % 1000) / 10.0f;

    double t0 = now_ms();
    cl_program prog = clCreateProgramWithSource(ctx, 1, &source, NULL, &err);
    CHECK(err);
    CHECK(clBuildProgram(prog, 1, &dev, "-cl-mad-enable", NULL, NULL));
    cl_kernel knorm = clCreateKernel(prog, "standardize", &err);
    CHECK(err);
    cl_kernel kgain = clCreateKernel(prog, "gain", &err);
    CHECK(err);
    cl_kernel kclamp = clCreateKernel(prog, "clamp01", &err);
    CHECK(err);
    cl_kernel khist = clCreateKernel(prog, "histogram16", &err);
    CHECK(err);
    cl_kernel ksum = clCreateKernel(prog, "partial_sum", &err);
    CHECK(err);
    cl_mem in = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, n * sizeof(float), host, &err);
    CHECK(err);
    cl_mem x = clCreateBuffer(ctx, CL_MEM_READ_WRITE, n * sizeof(float), NULL, &err);
    CHECK(err);
    cl_mem bins = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 16 * sizeof(int), NULL, &err);
    CHECK(err);
    cl_mem sums = clCreateBuffer(ctx, CL_MEM_READ_WRITE, n / local * sizeof(float), NULL, &err);
    CHECK(err);
    float mean = 50.0f, inv_std = 1.0f / 28.9f, g = 0.25f;
    CHECK(clSetKernelArg(knorm, 0, sizeof in, &in));
    CHECK(clSetKernelArg(knorm, 1, sizeof x, &x));
    CHECK(clSetKernelArg(knorm, 2, sizeof mean, &mean));
    CHECK(clSetKernelArg(knorm, 3, sizeof inv_std, &inv_std));
    CHECK(clSetKernelArg(kgain, 0, sizeof x, &x));
    CHECK(clSetKernelArg(kgain, 1, sizeof g, &g));
    CHECK(clSetKernelArg(kclamp, 0, sizeof x, &x));
    CHECK(clSetKernelArg(khist, 0, sizeof x, &x));
    CHECK(clSetKernelArg(khist, 1, sizeof bins, &bins));
    CHECK(clSetKernelArg(ksum, 0, sizeof x, &x));
    CHECK(clSetKernelArg(ksum, 1, sizeof sums, &sums));
    CHECK(clSetKernelArg(ksum, 2, local * sizeof(float), NULL));

    int hist[16];
    float *partial = malloc(n / local * sizeof *partial);
    double total = 0, first = 0, loop_start = 0;
    for (int it = 0; it < iterations; it++) {
        if (it == untimed) loop_start = now_ms();
        int zero = 0;
        CHECK(clEnqueueFillBuffer(q, bins, &zero, sizeof zero, 0, sizeof hist, 0, NULL, NULL));
        CHECK(clEnqueueNDRangeKernel(q, knorm, 1, NULL, &n, NULL, 0, NULL, NULL));
        CHECK(clEnqueueNDRangeKernel(q, kgain, 1, NULL, &n, NULL, 0, NULL, NULL));
        CHECK(clEnqueueNDRangeKernel(q, kclamp, 1, NULL, &n, NULL, 0, NULL, NULL));
        CHECK(clEnqueueNDRangeKernel(q, khist, 1, NULL, &n, NULL, 0, NULL, NULL));
        CHECK(clEnqueueNDRangeKernel(q, ksum, 1, NULL, &n, &local, 0, NULL, NULL));
        CHECK(clEnqueueReadBuffer(q, bins, CL_TRUE, 0, sizeof hist, hist, 0, NULL, NULL));
        CHECK(clEnqueueReadBuffer(q, sums, CL_TRUE, 0, n / local * sizeof(float), partial, 0, NULL, NULL));
        if (it == 0) first = now_ms() - t0;
        total = 0;
        for (size_t i = 0; i < n / local; i++) total += partial[i];
    }
    double per_iteration = iterations > untimed ? (now_ms() - loop_start) / (iterations - untimed) : 0;
    printf("sum %.4f histogram", total);
    for (int i = 0; i < 16; i++) printf(" %d", hist[i]);
    printf("\n");
    if (untimed == 1)
        fprintf(stderr, "pipeline: time to first result %.1f ms; %.2f ms per later iteration\n", first, per_iteration);
    else
        fprintf(stderr, "pipeline: time to first result %.1f ms; %.3f ms per iteration after the first %d\n", first,
                per_iteration, untimed);
    clReleaseMemObject(in);
    clReleaseMemObject(x);
    clReleaseMemObject(bins);
    clReleaseMemObject(sums);
    clReleaseKernel(knorm);
    clReleaseKernel(kgain);
    clReleaseKernel(kclamp);
    clReleaseKernel(khist);
    clReleaseKernel(ksum);
    clReleaseProgram(prog);
    clReleaseCommandQueue(q);
    clReleaseContext(ctx);
    free(host);
    free(partial);
    return 0;
}
