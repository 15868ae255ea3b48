/* norelease — builds, runs and reads a kernel's result, then exits without
 * releasing anything (as many programs do). Regression test: clshim once
 * read the binary at exit, when PoCL's LLVM was being torn down, and the
 * process crashed. */
#include "common.h"

int main(void)
{
    cl_int err;
    cl_device_id dev = first_device(NULL);
    cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    CHECK(err);
    const char *src = "__kernel void twice(__global float *y) { y[get_global_id(0)] *= 2.0f; }";
    cl_program prog = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
    CHECK(err);
    CHECK(clBuildProgram(prog, 1, &dev, "", NULL, NULL));
    cl_kernel k = clCreateKernel(prog, "twice", &err);
    CHECK(err);
    cl_command_queue q = clCreateCommandQueueWithProperties(ctx, dev, NULL, &err);
    CHECK(err);
    float y[256];
    for (int i = 0; i < 256; i++) y[i] = (float)i;
    cl_mem b = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof y, y, &err);
    CHECK(err);
    CHECK(clSetKernelArg(k, 0, sizeof b, &b));
    size_t g = 256;
    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &g, NULL, 0, NULL, NULL));
    CHECK(clEnqueueReadBuffer(q, b, CL_TRUE, 0, sizeof y, y, 0, NULL, NULL));
    double sum = 0;
    for (int i = 0; i < 256; i++) sum += y[i];
    printf("sum %.1f\n", sum);
    return 0;
}
