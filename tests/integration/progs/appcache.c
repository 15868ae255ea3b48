/* appcache — an application with its own binary cache: `appcache save FILE`
 * builds a kernel from source and writes the device binary to FILE;
 * `appcache load FILE` creates the program from that binary, builds and
 * runs it, and prints the result. (Under clshim the load run builds
 * nothing through clshim's cache.) */
#include "common.h"

static const char *src = "__kernel void twice(__global int *a) { size_t i = get_global_id(0); a[i] *= 2; }";

int main(int argc, char **argv)
{
    if (argc != 3 || (strcmp(argv[1], "save") && strcmp(argv[1], "load"))) {
        fprintf(stderr, "usage: appcache save|load FILE\n");
        return 2;
    }
    cl_int err;
    cl_device_id dev = first_device(NULL);
    cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    CHECK(err);
    cl_program prog;
    if (!strcmp(argv[1], "save")) {
        prog = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
        CHECK(err);
        CHECK(clBuildProgram(prog, 1, &dev, "", NULL, NULL));
        size_t size;
        CHECK(clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL));
        unsigned char *bin = malloc(size);
        CHECK(clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof bin, &bin, NULL));
        FILE *f = fopen(argv[2], "wb");
        if (!f || fwrite(bin, 1, size, f) != size || fclose(f)) return 1;
        free(bin);
        printf("saved %zu bytes\n", size);
    } else {
        FILE *f = fopen(argv[2], "rb");
        if (!f) return 1;
        static unsigned char bin[1 << 24];
        size_t size = fread(bin, 1, sizeof bin, f);
        fclose(f);
        const unsigned char *b = bin;
        cl_int status;
        prog = clCreateProgramWithBinary(ctx, 1, &dev, &size, &b, &status, &err);
        CHECK(err);
        CHECK(clBuildProgram(prog, 1, &dev, "", NULL, NULL));
        cl_kernel k = clCreateKernel(prog, "twice", &err);
        CHECK(err);
        int a[4] = {1, 2, 3, 4};
        cl_mem m = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof a, a, &err);
        CHECK(err);
        cl_command_queue q = clCreateCommandQueueWithProperties(ctx, dev, NULL, &err);
        CHECK(err);
        CHECK(clSetKernelArg(k, 0, sizeof m, &m));
        size_t n = 4;
        CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &n, NULL, 0, NULL, NULL));
        CHECK(clEnqueueReadBuffer(q, m, CL_TRUE, 0, sizeof a, a, 0, NULL, NULL));
        printf("%d %d %d %d\n", a[0], a[1], a[2], a[3]);
        clReleaseMemObject(m);
        clReleaseKernel(k);
        clReleaseCommandQueue(q);
    }
    clReleaseProgram(prog);
    clReleaseContext(ctx);
    return 0;
}
