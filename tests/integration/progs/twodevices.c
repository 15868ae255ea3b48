/* twodevices — builds one program for every device of the platform in one
 * clBuildProgram call (test_cache.sh runs it with POCL_DEVICES="pthread
 * pthread"), runs its kernel on each and prints the results. */
#include "common.h"
int main(void) {
    cl_platform_id p;
    cl_device_id d[4];
    cl_uint n;
    cl_int e;
    CHECK(clGetPlatformIDs(1, &p, NULL));
    CHECK(clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 4, d, &n));
    cl_context c = clCreateContext(NULL, n, d, NULL, NULL, &e);
    CHECK(e);
    const char *src = "__kernel void k(__global int *a){ a[get_global_id(0)] += 5; }";
    cl_program pr = clCreateProgramWithSource(c, 1, &src, NULL, &e);
    CHECK(clBuildProgram(pr, 0, NULL, "-DX=1", NULL, NULL));
    for (cl_uint i = 0; i < n; i++) {
        cl_command_queue q = clCreateCommandQueueWithProperties(c, d[i], NULL, &e);
        cl_kernel k = clCreateKernel(pr, "k", &e);
        int a[64] = {0};
        cl_mem b = clCreateBuffer(c, CL_MEM_COPY_HOST_PTR, sizeof a, a, &e);
        clSetKernelArg(k, 0, sizeof b, &b);
        size_t g = 64;
        CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &g, NULL, 0, NULL, NULL));
        CHECK(clEnqueueReadBuffer(q, b, CL_TRUE, 0, sizeof a, a, 0, NULL, NULL));
        printf("device %u: %d\n", i, a[63]);
    }
    size_t sizes[4];
    CHECK(clGetProgramInfo(pr, CL_PROGRAM_BINARY_SIZES, sizeof sizes, sizes, NULL));
    printf("%u devices, binaries present: %d\n", n, sizes[0] > 0 && sizes[n - 1] > 0);
    return 0;
}
