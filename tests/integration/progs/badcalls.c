/* badcalls — OpenCL calls with NULL and invalid objects and arguments; prints
 * every error code, so a run under clshim can be compared with a plain run. */
#include "common.h"

#define SHOW(expr) printf("%-60s -> %d\n", #expr, (int)(expr))

int main(void)
{
    cl_int err = 0;
    cl_device_id dev = first_device(NULL);
    cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    CHECK(err);
    const char *src = "__kernel void k(__global int *a) { a[get_global_id(0)] = 1; }";
    size_t zero = 0, size = 0;
    char buf[64];

    clCreateProgramWithSource(NULL, 1, &src, NULL, &err); SHOW(err);
    clCreateProgramWithSource(ctx, 0, &src, NULL, &err); SHOW(err);
    SHOW(clBuildProgram(NULL, 0, NULL, "", NULL, NULL));
    SHOW(clGetProgramInfo(NULL, CL_PROGRAM_SOURCE, 0, NULL, &size));
    SHOW(clGetProgramBuildInfo(NULL, dev, CL_PROGRAM_BUILD_LOG, 0, NULL, &size));
    SHOW(clReleaseProgram(NULL));
    SHOW(clRetainProgram(NULL));
    clCreateKernel(NULL, "k", &err); SHOW(err);
    SHOW(clReleaseKernel(NULL));
    SHOW(clGetKernelInfo(NULL, CL_KERNEL_PROGRAM, 0, NULL, &size));

    cl_program p = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
    CHECK(err);
    clCreateKernel(p, "k", &err); SHOW(err); /* not built yet */
    SHOW(clBuildProgram(p, 1, NULL, "", NULL, NULL));
    SHOW(clBuildProgram(p, 0, &dev, "", NULL, NULL));
    SHOW(clBuildProgram(p, 0, NULL, "", NULL, (void *)1));
    SHOW(clBuildProgram(p, 0, NULL, "-cl-no-such-option", NULL, NULL));
    SHOW(clBuildProgram(p, 1, &dev, "", NULL, NULL));
    clCreateKernel(p, "missing", &err); SHOW(err);
    clCreateKernel(p, NULL, &err); SHOW(err);
    SHOW(clGetProgramInfo(p, CL_PROGRAM_SOURCE, 1, buf, &size));
    SHOW(clGetProgramInfo(p, 0x7777, sizeof buf, buf, &size));
    SHOW(clGetProgramInfo(p, CL_PROGRAM_NUM_KERNELS, sizeof zero, &zero, NULL));
    printf("num kernels %zu\n", zero);
    SHOW(clGetProgramBuildInfo(p, NULL, CL_PROGRAM_BUILD_STATUS, sizeof buf, buf, NULL));
    SHOW(clGetProgramBuildInfo(p, dev, 0x7777, sizeof buf, buf, NULL));
    SHOW(clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_OPTIONS, 0, NULL, &size));
    printf("options size %zu\n", size);
    cl_kernel k = clCreateKernel(p, "k", &err);
    SHOW(err);
    SHOW(clGetKernelInfo(k, 0x7777, sizeof buf, buf, NULL));
    SHOW(clSetKernelArg(k, 5, 4, buf));
    size_t g = 16;
    cl_command_queue q = clCreateCommandQueueWithProperties(ctx, dev, NULL, &err);
    SHOW(clEnqueueNDRangeKernel(q, k, 1, NULL, &g, NULL, 0, NULL, NULL)); /* arg not set */
    SHOW(clEnqueueNDRangeKernel(NULL, k, 1, NULL, &g, NULL, 0, NULL, NULL));
    /* Under a plan "k+k" (test_fusion_every) the second pair is a replay of
     * the first's fused launch, and the fifth k starts a third: what follows
     * must be answered by the driver as it is plainly. */
    cl_mem m = clCreateBuffer(ctx, CL_MEM_READ_WRITE, g * sizeof(cl_int), NULL, &err);
    CHECK(err);
    SHOW(clSetKernelArg(k, 0, sizeof m, &m));
    cl_event marker = NULL;
    SHOW(clEnqueueMarkerWithWaitList(q, 0, NULL, &marker));
    for (int i = 0; i < 5; i++) SHOW(clEnqueueNDRangeKernel(q, k, 1, NULL, &g, NULL, 0, NULL, NULL));
    SHOW(clEnqueueNDRangeKernel(q, k, 1, NULL, &g, NULL, 0, &marker, NULL)); /* a list with no count */
    /* (A count with no list crashes PoCL 3.1 itself: not asked.) */
    SHOW(clEnqueueNDRangeKernel(q, k, 0, NULL, &g, NULL, 0, NULL, NULL));    /* no dimension */
    SHOW(clEnqueueNDRangeKernel(q, k, 4, NULL, &g, NULL, 0, NULL, NULL));
    size_t bad_local = 3;
    SHOW(clEnqueueNDRangeKernel(q, k, 1, NULL, &g, &bad_local, 0, NULL, NULL)); /* 16 % 3 */
    SHOW(clEnqueueNDRangeKernel(q, k, 1, NULL, &g, NULL, 0, NULL, NULL));
    SHOW(clFinish(q));
    SHOW(clReleaseEvent(marker));
    SHOW(clReleaseMemObject(m));
    SHOW(clFinish(NULL));
    SHOW(clFlush(NULL));
    SHOW(clWaitForEvents(0, NULL));
    SHOW(clReleaseKernel(k));
    SHOW(clReleaseProgram(p));
    SHOW(clReleaseCommandQueue(q));
    SHOW(clReleaseContext(ctx));
    return 0;
}
