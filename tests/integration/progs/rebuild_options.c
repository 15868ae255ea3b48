/* rebuild_options — one program object built, queried, then built again
 * with other options before any kernel of the first build ran (as a
 * conformance test does), then a kernel of the second build run:
 *
 *   rebuild_options
 *
 * Prints each build's kernel count and the result of the second build's
 * kernel (VAL=2 makes it write 2s). Both builds are programs a warm run
 * can load: under clshim each is stored, the first one too. */
#include "common.h"

static const char *source = "__kernel void fill(__global int *o) { o[get_global_id(0)] = VAL; }\n";

int main(void)
{
    cl_device_id dev = first_device(NULL);
    cl_int err;
    cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    CHECK(err);
    cl_command_queue q = clCreateCommandQueueWithProperties(ctx, dev, NULL, &err);
    CHECK(err);
    cl_program p = clCreateProgramWithSource(ctx, 1, &source, NULL, &err);
    CHECK(err);
    CHECK(clBuildProgram(p, 1, &dev, "-DVAL=1", NULL, NULL));
    size_t nk = 0;
    CHECK(clGetProgramInfo(p, CL_PROGRAM_NUM_KERNELS, sizeof nk, &nk, NULL));
    printf("first build: %zu kernel(s)\n", nk);
    CHECK(clBuildProgram(p, 1, &dev, "-DVAL=2", NULL, NULL));
    CHECK(clGetProgramInfo(p, CL_PROGRAM_NUM_KERNELS, sizeof nk, &nk, NULL));
    printf("second build: %zu kernel(s)\n", nk);
    cl_mem buf = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 4 * sizeof(int), NULL, &err);
    CHECK(err);
    cl_kernel k = clCreateKernel(p, "fill", &err);
    CHECK(err);
    CHECK(clSetKernelArg(k, 0, sizeof buf, &buf));
    size_t n = 4;
    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &n, NULL, 0, NULL, NULL));
    int out[4];
    CHECK(clEnqueueReadBuffer(q, buf, CL_TRUE, 0, sizeof out, out, 0, NULL, NULL));
    printf("result: %d %d %d %d\n", out[0], out[1], out[2], out[3]);
    clReleaseKernel(k);
    clReleaseMemObject(buf);
    clReleaseProgram(p);
    clReleaseCommandQueue(q);
    clReleaseContext(ctx);
    return 0;
}
