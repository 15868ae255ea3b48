/* ext_first — a linked OpenCL program whose very first OpenCL call is one
 * clshim intercepts (clGetExtensionFunctionAddress), made before the ICD
 * loader has initialised: the order in which combined clshim entry modes
 * (preload + layer + loader library) must still agree on which copy
 * intercepts (docs/modes.md). Then it builds a program and prints a result.
 */
#define CL_USE_DEPRECATED_OPENCL_1_1_APIS /* clGetExtensionFunctionAddress */
#include "common.h"

static const char *source = "__kernel void twice(__global float *y) { y[get_global_id(0)] *= 2.0f; }\n";

int main(void)
{
    void *f = clGetExtensionFunctionAddress("clIcdGetPlatformIDsKHR");
    printf("clIcdGetPlatformIDsKHR %s\n", f ? "found" : "absent");
    cl_device_id dev = first_device(NULL);
    cl_int err;
    cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    CHECK(err);
    cl_program prog = clCreateProgramWithSource(ctx, 1, &source, NULL, &err);
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
    size_t global = 256;
    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &global, NULL, 0, NULL, NULL));
    CHECK(clEnqueueReadBuffer(q, b, CL_TRUE, 0, sizeof y, y, 0, NULL, NULL));
    double sum = 0;
    for (int i = 0; i < 256; i++) sum += y[i];
    printf("twice: sum %.1f\n", sum);
    clReleaseMemObject(b);
    clReleaseCommandQueue(q);
    clReleaseKernel(k);
    clReleaseProgram(prog);
    clReleaseContext(ctx);
    return 0;
}
