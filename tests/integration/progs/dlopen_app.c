/* dlopen_app — an OpenCL program that, like many real ones (hashcat,
 * darktable, ...), does not link libOpenCL: it dlopens libOpenCL.so.1 and
 * looks every entry point up with dlsym(handle, ...), which LD_PRELOAD cannot
 * see. It builds one program with clCompileProgram (with an embedded header)
 * + clLinkProgram and a second with clBuildProgram, runs a kernel from each
 * and prints their checksums, so runs in every clshim mode can be diffed.
 * With --include DIR a third program is compiled with "-I DIR" and links:
 * its header, DIR/dl_weight.h (defining DL_WEIGHT), is read by the
 * driver's compiler from the file system.
 *   dlopen_app [--library NAME] [--scale N] [--include DIR]
 */
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define API(X)                                                                                     \
    X(clGetPlatformIDs) X(clGetDeviceIDs) X(clCreateContext) X(clCreateCommandQueueWithProperties)  \
    X(clCreateProgramWithSource) X(clCompileProgram) X(clLinkProgram) X(clBuildProgram)              \
    X(clGetProgramBuildInfo) X(clCreateKernel) X(clCreateBuffer) X(clSetKernelArg)                   \
    X(clEnqueueNDRangeKernel) X(clEnqueueReadBuffer) X(clFinish) X(clReleaseKernel)                 \
    X(clReleaseProgram) X(clReleaseMemObject) X(clReleaseCommandQueue) X(clReleaseContext)

static struct {
#define API_MEMBER(name) __typeof__(name) *name;
    API(API_MEMBER)
#undef API_MEMBER
} cl;

#define CHECK(expr)                                                                                \
    do {                                                                                           \
        cl_int rc_ = (expr);                                                                       \
        if (rc_ != CL_SUCCESS) {                                                                   \
            fprintf(stderr, "dlopen_app: %s failed: %d\n", #expr, rc_);                            \
            exit(2);                                                                               \
        }                                                                                          \
    } while (0)

static const char *header_src = "#define WEIGHT(i) ((float)((i) % 7) * 0.25f)\n";

static const char *linked_src =
    "#include \"weights.h\"\n"
    "__kernel void weigh(__global const float *x, __global float *y) {\n"
    "    size_t i = get_global_id(0);\n"
    "    y[i] = x[i] * WEIGHT(i) + SCALE;\n"
    "}\n";

static const char *built_src =
    "__kernel void square_add(__global const float *x, __global float *y) {\n"
    "    size_t i = get_global_id(0);\n"
    "    y[i] = x[i] * x[i] + 1.0f;\n"
    "}\n";

static const char *included_src =
    "#include \"dl_weight.h\"\n"
    "__kernel void weigh_file(__global const float *x, __global float *y) {\n"
    "    size_t i = get_global_id(0);\n"
    "    y[i] = x[i] * DL_WEIGHT;\n"
    "}\n";

#define N 2048

static double run_kernel(cl_context ctx, cl_command_queue q, cl_program prog, const char *name)
{
    cl_int err;
    cl_kernel k = cl.clCreateKernel(prog, name, &err);
    CHECK(err);
    float x[N], y[N];
    for (int i = 0; i < N; i++) x[i] = (float)(i % 13) * 0.5f;
    cl_mem bx = cl.clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof x, x, &err);
    CHECK(err);
    cl_mem by = cl.clCreateBuffer(ctx, CL_MEM_WRITE_ONLY, sizeof y, NULL, &err);
    CHECK(err);
    CHECK(cl.clSetKernelArg(k, 0, sizeof bx, &bx));
    CHECK(cl.clSetKernelArg(k, 1, sizeof by, &by));
    size_t global = N;
    CHECK(cl.clEnqueueNDRangeKernel(q, k, 1, NULL, &global, NULL, 0, NULL, NULL));
    CHECK(cl.clEnqueueReadBuffer(q, by, CL_TRUE, 0, sizeof y, y, 0, NULL, NULL));
    CHECK(cl.clFinish(q));
    double sum = 0;
    for (int i = 0; i < N; i++) sum += y[i] * (double)(i % 11 + 1);
    cl.clReleaseMemObject(bx);
    cl.clReleaseMemObject(by);
    cl.clReleaseKernel(k);
    return sum;
}

static void print_log(cl_program prog, cl_device_id dev)
{
    char log[4096] = "";
    cl.clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
    fprintf(stderr, "dlopen_app: build log:\n%s\n", log);
}

int main(int argc, char **argv)
{
    const char *library = "libOpenCL.so.1";
    int scale = 3;
    const char *include_dir = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--library") && i + 1 < argc) library = argv[++i];
        else if (!strcmp(argv[i], "--scale") && i + 1 < argc) scale = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--include") && i + 1 < argc) include_dir = argv[++i];
        else {
            fprintf(stderr, "usage: dlopen_app [--library NAME] [--scale N] [--include DIR]\n");
            return 2;
        }
    }
    void *h = dlopen(library, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "dlopen_app: cannot load %s: %s\n", library, dlerror());
        return 2;
    }
#define API_LOOKUP(name)                                                                           \
    if (!(cl.name = (__typeof__(name) *)dlsym(h, #name))) {                                        \
        fprintf(stderr, "dlopen_app: %s has no %s\n", library, #name);                             \
        return 2;                                                                                  \
    }
    API(API_LOOKUP)
#undef API_LOOKUP

    cl_platform_id platform;
    cl_device_id dev;
    cl_int err;
    CHECK(cl.clGetPlatformIDs(1, &platform, NULL));
    CHECK(cl.clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &dev, NULL));
    cl_context ctx = cl.clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    CHECK(err);
    cl_command_queue q = cl.clCreateCommandQueueWithProperties(ctx, dev, NULL, &err);
    CHECK(err);

    /* Separate compilation: header program + compile + link. */
    cl_program header = cl.clCreateProgramWithSource(ctx, 1, &header_src, NULL, &err);
    CHECK(err);
    cl_program unit = cl.clCreateProgramWithSource(ctx, 1, &linked_src, NULL, &err);
    CHECK(err);
    char options[64];
    snprintf(options, sizeof options, "-DSCALE=%d.0f", scale);
    const char *header_name = "weights.h";
    err = cl.clCompileProgram(unit, 1, &dev, options, 1, &header, &header_name, NULL, NULL);
    if (err != CL_SUCCESS) print_log(unit, dev);
    CHECK(err);
    cl_program linked = cl.clLinkProgram(ctx, 1, &dev, "", 1, &unit, NULL, NULL, &err);
    CHECK(err);
    printf("compile+link: weigh checksum %.3f\n", run_kernel(ctx, q, linked, "weigh"));

    /* Whole-program build. */
    cl_program built = cl.clCreateProgramWithSource(ctx, 1, &built_src, NULL, &err);
    CHECK(err);
    err = cl.clBuildProgram(built, 1, &dev, "", NULL, NULL);
    if (err != CL_SUCCESS) print_log(built, dev);
    CHECK(err);
    printf("build: square_add checksum %.3f\n", run_kernel(ctx, q, built, "square_add"));

    if (include_dir) { /* a header from the file system, through -I */
        cl_program file_unit = cl.clCreateProgramWithSource(ctx, 1, &included_src, NULL, &err);
        CHECK(err);
        char inc[4200];
        snprintf(inc, sizeof inc, "-I %s", include_dir);
        err = cl.clCompileProgram(file_unit, 1, &dev, inc, 0, NULL, NULL, NULL, NULL);
        if (err != CL_SUCCESS) print_log(file_unit, dev);
        CHECK(err);
        cl_program file_linked = cl.clLinkProgram(ctx, 1, &dev, "", 1, &file_unit, NULL, NULL, &err);
        CHECK(err);
        printf("include: weigh_file checksum %.3f\n", run_kernel(ctx, q, file_linked, "weigh_file"));
        cl.clReleaseProgram(file_linked);
        cl.clReleaseProgram(file_unit);
    }

    cl.clReleaseProgram(built);
    cl.clReleaseProgram(linked);
    cl.clReleaseProgram(unit);
    cl.clReleaseProgram(header);
    cl.clReleaseCommandQueue(q);
    cl.clReleaseContext(ctx);
    dlclose(h);
    return 0;
}
