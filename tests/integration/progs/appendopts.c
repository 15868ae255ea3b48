/* appendopts — builds one program with clBuildProgram and one with
 * clCompileProgram + clLinkProgram, with the options given, runs both and
 * prints their results and what CL_PROGRAM_BUILD_OPTIONS answers for each.
 *   appendopts BUILD_OPTIONS LINK_OPTIONS
 * The kernels use V (default 1): a -DV=... among the options changes the
 * results. A link that fails, or makes a library (no kernel to run), is
 * printed with its error codes. */
#include "common.h"

static const char *src = "#ifndef V\n#define V 1\n#endif\n"
                         "__kernel void k(__global int *y) { int i = get_global_id(0); y[i] = V * i + 1; }\n";

static char *options_of(cl_program p, cl_device_id dev)
{
    size_t n = 0;
    CHECK(clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_OPTIONS, 0, NULL, &n));
    char *s = calloc(1, n + 1);
    CHECK(clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_OPTIONS, n, s, NULL));
    return s;
}

static void run(const char *what, cl_context ctx, cl_device_id dev, cl_program p)
{
    cl_int err;
    cl_command_queue q = clCreateCommandQueueWithProperties(ctx, dev, NULL, &err);
    CHECK(err);
    int y[64];
    cl_mem b = clCreateBuffer(ctx, CL_MEM_READ_WRITE, sizeof y, NULL, &err);
    CHECK(err);
    char *opts = options_of(p, dev);
    cl_kernel k = clCreateKernel(p, "k", &err);
    if (err != CL_SUCCESS) {
        printf("%s: no kernel (error %d), options '%s'\n", what, err, opts);
        free(opts);
        clReleaseMemObject(b);
        clReleaseCommandQueue(q);
        return;
    }
    CHECK(clSetKernelArg(k, 0, sizeof b, &b));
    size_t g = 64;
    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &g, NULL, 0, NULL, NULL));
    CHECK(clEnqueueReadBuffer(q, b, CL_TRUE, 0, sizeof y, y, 0, NULL, NULL));
    long sum = 0;
    for (int i = 0; i < 64; i++) sum += (long)y[i] * (i + 1);
    printf("%s: checksum %ld, options '%s'\n", what, sum, opts);
    free(opts);
    clReleaseKernel(k);
    clReleaseMemObject(b);
    clReleaseCommandQueue(q);
}

int main(int argc, char **argv)
{
    const char *build_opts = argc > 1 ? argv[1] : "";
    const char *link_opts = argc > 2 ? argv[2] : "";
    cl_int err;
    cl_device_id dev = first_device(NULL);
    cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    CHECK(err);
    cl_program pb = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
    CHECK(err);
    CHECK(clBuildProgram(pb, 1, &dev, build_opts, NULL, NULL));
    run("build", ctx, dev, pb);
    cl_program pc = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
    CHECK(err);
    CHECK(clCompileProgram(pc, 1, &dev, build_opts, 0, NULL, NULL, NULL, NULL));
    char *copts = options_of(pc, dev);
    printf("compile: options '%s'\n", copts);
    free(copts);
    cl_program linked = clLinkProgram(ctx, 1, &dev, link_opts, 1, &pc, NULL, NULL, &err);
    if (linked) {
        run("link", ctx, dev, linked);
        clReleaseProgram(linked);
    } else {
        printf("link: error %d\n", err);
    }
    clReleaseProgram(pc);
    clReleaseProgram(pb);
    clReleaseContext(ctx);
    return 0;
}
