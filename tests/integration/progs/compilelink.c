/* compilelink — builds with clCompileProgram (one input with an embedded
 * header program) and clLinkProgram, runs the linked kernel, prints a
 * checksum and the link's build status. */
#include "common.h"

static const char *main_src =
    "#include \"helper.h\"\n"
    "__kernel void apply(__global float *y) { size_t i = get_global_id(0); y[i] = helper(y[i]) + BIAS; }\n";
static const char *header_src = "float helper(float x);\n#define BIAS 0.5f\n";
static const char *helper_src = "float helper(float x) { return x * FACTOR + 1.0f; }\n";

int main(int argc, char **argv)
{
    const char *factor = argc > 1 ? argv[1] : "2.0f";
    cl_int err;
    cl_device_id dev = first_device(NULL);
    cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    CHECK(err);
    cl_program pm = clCreateProgramWithSource(ctx, 1, &main_src, NULL, &err);
    CHECK(err);
    cl_program ph = clCreateProgramWithSource(ctx, 1, &header_src, NULL, &err);
    CHECK(err);
    cl_program pl = clCreateProgramWithSource(ctx, 1, &helper_src, NULL, &err);
    CHECK(err);
    const char *names[] = {"helper.h"};
    CHECK(clCompileProgram(pm, 1, &dev, "", 1, &ph, names, NULL, NULL));
    char opts[64];
    snprintf(opts, sizeof opts, "-DFACTOR=%s", factor);
    CHECK(clCompileProgram(pl, 1, &dev, opts, 0, NULL, NULL, NULL, NULL));
    cl_program inputs[] = {pm, pl};
    cl_program linked = clLinkProgram(ctx, 1, &dev, "", 2, inputs, NULL, NULL, &err);
    CHECK(err);
    cl_build_status st;
    CHECK(clGetProgramBuildInfo(linked, dev, CL_PROGRAM_BUILD_STATUS, sizeof st, &st, NULL));
    cl_program_binary_type bt;
    CHECK(clGetProgramBuildInfo(pm, dev, CL_PROGRAM_BINARY_TYPE, sizeof bt, &bt, NULL));
    printf("link status %d, compiled binary type %u\n", st, (unsigned)bt);
    cl_command_queue q = clCreateCommandQueueWithProperties(ctx, dev, NULL, &err);
    CHECK(err);
    float y[1024];
    for (int i = 0; i < 1024; i++) y[i] = (float)(i % 13);
    cl_mem b = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof y, y, &err);
    CHECK(err);
    cl_kernel k = clCreateKernel(linked, "apply", &err);
    CHECK(err);
    CHECK(clSetKernelArg(k, 0, sizeof b, &b));
    size_t g = 1024;
    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &g, NULL, 0, NULL, NULL));
    CHECK(clEnqueueReadBuffer(q, b, CL_TRUE, 0, sizeof y, y, 0, NULL, NULL));
    double sum = 0;
    for (int i = 0; i < 1024; i++) sum += y[i] * (i + 1);
    printf("checksum %.3f\n", sum);
    clReleaseKernel(k);
    clReleaseMemObject(b);
    clReleaseCommandQueue(q);
    clReleaseProgram(linked);
    clReleaseProgram(pm);
    clReleaseProgram(ph);
    clReleaseProgram(pl);
    clReleaseContext(ctx);
    return 0;
}
