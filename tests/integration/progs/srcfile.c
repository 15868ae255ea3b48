/* srcfile — builds the OpenCL C file named on the command line, the way
 * hashcat does when asked (--compile-link: clCompileProgram with the
 * options, then clLinkProgram), or with clBuildProgram; runs its kernel
 * `k(__global float *y)` over 256 items and prints a checksum.
 *   srcfile FILE [--options STR] [--compile-link]
 * Exit 3 when the build fails (the build log goes to stderr). */
#include "common.h"

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: srcfile FILE [--options STR] [--compile-link]\n");
        return 2;
    }
    const char *options = "";
    int compile_link = 0;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--options") && i + 1 < argc) options = argv[++i];
        else if (!strcmp(argv[i], "--compile-link")) compile_link = 1;
        else { fprintf(stderr, "unknown argument %s\n", argv[i]); return 2; }
    }
    size_t len;
    char *src = read_text_file(argv[1], &len);
    if (!src) { fprintf(stderr, "cannot read %s\n", argv[1]); return 2; }
    cl_int err;
    cl_device_id dev = first_device(NULL);
    cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    CHECK(err);
    const char *srcs[] = {src};
    cl_program prog = clCreateProgramWithSource(ctx, 1, srcs, &len, &err);
    CHECK(err);
    cl_program exe = prog;
    if (compile_link) {
        err = clCompileProgram(prog, 1, &dev, options, 0, NULL, NULL, NULL, NULL);
        if (err == CL_SUCCESS) exe = clLinkProgram(ctx, 1, &dev, "", 1, &prog, NULL, NULL, &err);
    } else {
        err = clBuildProgram(prog, 1, &dev, options, NULL, NULL);
    }
    if (err != CL_SUCCESS) {
        char *log = build_log(prog, dev);
        fprintf(stderr, "build failed (%d): %s\n", err, log);
        return 3;
    }
    float y[256] = {0};
    cl_kernel k = clCreateKernel(exe, "k", &err);
    CHECK(err);
    run_on_floats(ctx, dev, k, y, 256);
    double sum = 0;
    for (int i = 0; i < 256; i++) sum += y[i] * (i + 1);
    printf("checksum %.3f\n", sum);
    clReleaseKernel(k);
    if (exe != prog) clReleaseProgram(exe);
    clReleaseProgram(prog);
    clReleaseContext(ctx);
    free(src);
    return 0;
}
