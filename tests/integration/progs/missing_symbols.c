/* missing_symbols — runs on an OpenCL loader that lacks the OpenCL 2.1+
 * entry points (test_oldloader.sh makes one). Looks them up at run time as
 * careful programs do, calls those it finds, and runs an ordinary build. */
#include <dlfcn.h>

#include "common.h"

typedef cl_program(CL_API_CALL *il_fn)(cl_context, const void *, size_t, cl_int *);
typedef cl_kernel(CL_API_CALL *clone_fn)(cl_kernel, cl_int *);

int main(void)
{
    cl_int err;
    cl_device_id dev = first_device(NULL);
    cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    CHECK(err);
    il_fn il = (il_fn)dlsym(RTLD_DEFAULT, "clCreateProgramWithIL");
    clone_fn clone = (clone_fn)dlsym(RTLD_DEFAULT, "clCloneKernel");
    const char *src = "__kernel void k(__global int *a) { a[get_global_id(0)] = 7; }";
    cl_program p = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
    CHECK(err);
    CHECK(clBuildProgram(p, 1, &dev, "", NULL, NULL));
    cl_kernel k = clCreateKernel(p, "k", &err);
    CHECK(err);
    if (il) {
        static const unsigned int module[8] = {0x07230203, 0x00010000, 0, 1, 0};
        cl_program q = il(ctx, module, sizeof module, &err);
        printf("clCreateProgramWithIL: %d%s\n", err, q ? " (a program)" : "");
    }
    if (clone) {
        cl_kernel c = clone(k, &err);
        printf("clCloneKernel: %d%s\n", err, c ? " (a kernel)" : "");
    }
    printf("build ok, kernel created\n");
    clReleaseKernel(k);
    clReleaseProgram(p);
    clReleaseContext(ctx);
    return 0;
}
