/* neverrun — builds programs whose kernels never run before exit (as a
 * GEGL pipeline builds its largest program), then exits without releasing
 * them. Modes: "one" builds one program and exits; "beside" also builds a
 * second program and runs it (its code generation creates the driver's
 * state before the exit), then exits. Prints the build status and, in
 * "beside", the result; the cache's behaviour is in clshim's log. */
#include "common.h"

static const char *never_src =
    "__kernel void never_a(__global float *y) { y[get_global_id(0)] = sin(y[get_global_id(0)]) * 3.0f; }\n"
    "__kernel void never_b(__global float *y, float s) { y[get_global_id(0)] += s * cos(s); }\n";

static const char *run_src = "__kernel void twice(__global float *y) { y[get_global_id(0)] *= 2.0f; }";

static cl_program build(cl_context ctx, cl_device_id dev, const char *src)
{
    cl_int err;
    cl_program prog = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
    CHECK(err);
    cl_int rc = clBuildProgram(prog, 1, &dev, "", NULL, NULL);
    printf("build: %d\n", rc);
    return prog;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "one";
    cl_int err;
    cl_device_id dev = first_device(NULL);
    cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    CHECK(err);
    build(ctx, dev, never_src);
    if (!strcmp(mode, "beside")) {
        cl_program prog = build(ctx, dev, run_src);
        cl_kernel k = clCreateKernel(prog, "twice", &err);
        CHECK(err);
        float y[64];
        for (int i = 0; i < 64; i++) y[i] = (float)i;
        run_on_floats(ctx, dev, k, y, 64); /* a blocking read: the synchronisation after its first run */
        double sum = 0;
        for (int i = 0; i < 64; i++) sum += y[i];
        printf("sum: %.1f\n", sum);
    }
    return 0; /* nothing released */
}
