/* profile_app — known launch counts, and every answer `clshim run
 * --profile` must leave as the plain driver gives it
 * (tests/integration/test_profile.sh).
 *
 * Three queues: q1 from clCreateCommandQueue without profiling, q2 from
 * clCreateCommandQueueWithProperties with a properties array without it,
 * q3 with profiling. It prints each queue's CL_QUEUE_PROPERTIES and q2's
 * CL_QUEUE_PROPERTIES_ARRAY, the profiling answer of an event of q1 and of
 * q2 (the plain driver: CL_PROFILING_INFO_NOT_AVAILABLE) and whether q3's
 * event has START <= END; then launches `a` 7 times on q1, `b` 5 times on
 * q2 (with events), and the chain c0 c1 ITERATIONS times on q3 (default 12;
 * a plan or automatic fusion fuses it),
 * and prints a checksum of the results.
 */
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include "common.h"

static const char *src =
    "__kernel void a(__global float *x) { size_t i = get_global_id(0); x[i] = x[i] * 0.5f + 1.0f; }\n"
    "__kernel void b(__global float *x) { size_t i = get_global_id(0); x[i] = x[i] + 2.0f; }\n"
    "__kernel void c0(__global const float *x, __global float *y) { size_t i = get_global_id(0); y[i] = x[i] * 3.0f; }\n"
    "__kernel void c1(__global const float *y, __global float *z) { size_t i = get_global_id(0); z[i] = y[i] - 1.0f; }\n";

#define N 65536

int main(int argc, char **argv)
{
    int iterations = argc > 1 ? atoi(argv[1]) : 12;
    cl_int err;
    cl_device_id dev = first_device(NULL);
    cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    CHECK(err);
    cl_command_queue q1 = clCreateCommandQueue(ctx, dev, 0, &err);
    CHECK(err);
    cl_queue_properties props2[] = {CL_QUEUE_PROPERTIES, 0, 0};
    cl_command_queue q2 = clCreateCommandQueueWithProperties(ctx, dev, props2, &err);
    CHECK(err);
    cl_command_queue q3 = clCreateCommandQueue(ctx, dev, CL_QUEUE_PROFILING_ENABLE, &err);
    CHECK(err);
    cl_command_queue qs[] = {q1, q2, q3};
    for (int i = 0; i < 3; i++) {
        cl_command_queue_properties p = 0;
        CHECK(clGetCommandQueueInfo(qs[i], CL_QUEUE_PROPERTIES, sizeof p, &p, NULL));
        printf("q%d properties=0x%llx\n", i + 1, (unsigned long long)p);
    }
    cl_queue_properties back[8] = {0};
    size_t back_size = 0;
    CHECK(clGetCommandQueueInfo(q2, CL_QUEUE_PROPERTIES_ARRAY, sizeof back, back, &back_size));
    printf("q2 properties array: %zu bytes:", back_size);
    for (size_t i = 0; i < back_size / sizeof *back; i++) printf(" 0x%llx", (unsigned long long)back[i]);
    printf("\n");

    cl_program prog = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
    CHECK(err);
    CHECK(clBuildProgram(prog, 1, &dev, "", NULL, NULL));
    cl_kernel ka = clCreateKernel(prog, "a", &err), kb = clCreateKernel(prog, "b", &err);
    cl_kernel k0 = clCreateKernel(prog, "c0", &err), k1 = clCreateKernel(prog, "c1", &err);
    CHECK(err);
    float *host = malloc(N * sizeof *host);
    for (int i = 0; i < N; i++) host[i] = (float)(i % 97);
    cl_mem x = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, N * sizeof *host, host, &err);
    cl_mem y = clCreateBuffer(ctx, CL_MEM_READ_WRITE, N * sizeof *host, NULL, &err);
    cl_mem z = clCreateBuffer(ctx, CL_MEM_READ_WRITE, N * sizeof *host, NULL, &err);
    CHECK(err);
    CHECK(clSetKernelArg(ka, 0, sizeof x, &x));
    CHECK(clSetKernelArg(kb, 0, sizeof x, &x));
    CHECK(clSetKernelArg(k0, 0, sizeof x, &x));
    CHECK(clSetKernelArg(k0, 1, sizeof y, &y));
    CHECK(clSetKernelArg(k1, 0, sizeof y, &y));
    CHECK(clSetKernelArg(k1, 1, sizeof z, &z));
    size_t gws = N;

    cl_event e1, e2, e3;
    CHECK(clEnqueueNDRangeKernel(q1, ka, 1, NULL, &gws, NULL, 0, NULL, &e1));
    for (int i = 1; i < 7; i++) CHECK(clEnqueueNDRangeKernel(q1, ka, 1, NULL, &gws, NULL, 0, NULL, NULL));
    CHECK(clFinish(q1));
    for (int i = 0; i < 5; i++) {
        CHECK(clEnqueueNDRangeKernel(q2, kb, 1, NULL, &gws, NULL, 0, NULL, i ? NULL : &e2));
        CHECK(clFinish(q2));
    }
    cl_ulong t0 = 0, t1 = 0;
    cl_int r1 = clGetEventProfilingInfo(e1, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL);
    cl_int r2 = clGetEventProfilingInfo(e2, CL_PROFILING_COMMAND_END, sizeof t0, &t0, NULL);
    printf("q1 event profiling: %d\nq2 event profiling: %d\n", r1, r2);
    for (int i = 0; i < iterations; i++) {
        CHECK(clEnqueueNDRangeKernel(q3, k0, 1, NULL, &gws, NULL, 0, NULL, NULL));
        CHECK(clEnqueueNDRangeKernel(q3, k1, 1, NULL, &gws, NULL, 0, NULL, i == iterations - 1 ? &e3 : NULL));
        CHECK(clFinish(q3));
    }
    CHECK(clGetEventProfilingInfo(e3, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL));
    CHECK(clGetEventProfilingInfo(e3, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL));
    printf("q3 event profiling: start <= end: %s\n", t0 <= t1 ? "yes" : "no");
    CHECK(clEnqueueReadBuffer(q3, z, CL_TRUE, 0, N * sizeof *host, host, 0, NULL, NULL));
    printf("checksum %016llx\n", (unsigned long long)fnv(host, N * sizeof *host));
    clReleaseEvent(e1);
    clReleaseEvent(e2);
    clReleaseEvent(e3);
    clReleaseMemObject(x);
    clReleaseMemObject(y);
    clReleaseMemObject(z);
    clReleaseKernel(ka);
    clReleaseKernel(kb);
    clReleaseKernel(k0);
    clReleaseKernel(k1);
    clReleaseProgram(prog);
    for (int i = 0; i < 3; i++) clReleaseCommandQueue(qs[i]);
    clReleaseContext(ctx);
    free(host);
    return 0;
}
