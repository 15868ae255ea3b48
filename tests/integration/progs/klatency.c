/* klatency — a kernel latency loop right after a cold build, as a latency
 * benchmark runs: builds a program, runs its kernel once and synchronises
 * (under clshim a late capture is queued there), then times N launches of
 * the kernel, each waited for. Prints "loop done" to stderr when the loop
 * ends, then the median and 90th percentile latency in microseconds on
 * stdout, then sleeps IDLE_MS (an application idle after its work).
 *   klatency N [IDLE_MS] */
#include "common.h"

#include <time.h>

static const char *src = "__kernel void k(__global float *y) { y[get_global_id(0)] += 1.0f; }\n";

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 1000;
    long idle_ms = argc > 2 ? atol(argv[2]) : 0;
    cl_int err;
    cl_device_id dev;
    cl_context ctx;
    cl_command_queue q;
    first_context_queue(&dev, &ctx, &q);
    size_t len = strlen(src);
    cl_program prog = clCreateProgramWithSource(ctx, 1, &src, &len, &err);
    CHECK(err);
    CHECK(clBuildProgram(prog, 1, &dev, "", NULL, NULL));
    cl_kernel k = clCreateKernel(prog, "k", &err);
    CHECK(err);
    cl_mem buf = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 64 * sizeof(float), NULL, &err);
    CHECK(err);
    float zero[64] = {0};
    CHECK(clEnqueueWriteBuffer(q, buf, CL_TRUE, 0, sizeof zero, zero, 0, NULL, NULL));
    CHECK(clSetKernelArg(k, 0, sizeof buf, &buf));
    size_t global = 64;
    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &global, NULL, 0, NULL, NULL));
    CHECK(clFinish(q));
    double *us = calloc((size_t)n, sizeof *us);
    for (int i = 0; i < n; i++) {
        double t0 = now_ms();
        CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &global, NULL, 0, NULL, NULL));
        CHECK(clFinish(q));
        us[i] = (now_ms() - t0) * 1000;
    }
    fprintf(stderr, "loop done\n");
    float out[64];
    CHECK(clEnqueueReadBuffer(q, buf, CL_TRUE, 0, sizeof out, out, 0, NULL, NULL));
    qsort(us, (size_t)n, sizeof *us, cmp_double);
    printf("result %.0f\n", out[7]);
    fprintf(stderr, "latency median %.1f us, p90 %.1f us\n", us[n / 2], us[n * 9 / 10]);
    fflush(stdout);
    if (idle_ms) {
        struct timespec ts = {idle_ms / 1000, (idle_ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0) {
        }
    }
    free(us);
    clReleaseMemObject(buf);
    clReleaseKernel(k);
    clReleaseProgram(prog);
    clReleaseCommandQueue(q);
    clReleaseContext(ctx);
    return 0;
}
