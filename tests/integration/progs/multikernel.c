/* multikernel — a small but realistic OpenCL program: three kernels (one
 * with local memory and barriers), build options with -D, optional -I
 * header, several threads or contexts building at once, and a build error
 * mode. Prints a checksum of every result and every error code.
 *   multikernel [--scale N] [--include DIR] [--threads N] [--contexts N]
 *               [--iterations N] [--error] [--options STR] [--time]
 */
#include <pthread.h>

#include "common.h"

static const char *source =
    "#ifdef USE_HEADER\n"
    "#include \"mk_header.h\"\n"
    "#else\n"
    "#define OFFSET 0.0f\n"
    "#endif\n"
    "__kernel void saxpy(__global const float *x, __global float *y, float a) {\n"
    "    size_t i = get_global_id(0);\n"
    "    y[i] = a * x[i] + y[i] + OFFSET;\n"
    "}\n"
    "__kernel void scale(__global float *y) {\n"
    "    size_t i = get_global_id(0);\n"
    "    y[i] = y[i] * SCALE;\n"
    "}\n"
    "__kernel void block_sum(__global const float *y, __global float *out, __local float *tmp) {\n"
    "    size_t l = get_local_id(0), n = get_local_size(0);\n"
    "    tmp[l] = y[get_global_id(0)];\n"
    "    for (size_t s = n / 2; s > 0; s /= 2) {\n"
    "        barrier(CLK_LOCAL_MEM_FENCE);\n"
    "        if (l < s) tmp[l] += tmp[l + s];\n"
    "    }\n"
    "    if (l == 0) out[get_group_id(0)] = tmp[0];\n"
    "}\n";

static const char *broken_source = "__kernel void broken(__global float *y) { y[0] = undefined_symbol; }\n";

struct job {
    cl_context ctx;
    cl_device_id dev;
    const char *options;
    int error_mode;
    double checksum;
    cl_int build_rc;
};

#define N 4096
#define LOCAL 64

static void *run_job(void *arg)
{
    struct job *j = arg;
    cl_int err;
    const char *src = j->error_mode ? broken_source : source;
    cl_program prog = clCreateProgramWithSource(j->ctx, 1, &src, NULL, &err);
    CHECK(err);
    j->build_rc = clBuildProgram(prog, 1, &j->dev, j->options, NULL, NULL);
    if (j->build_rc != CL_SUCCESS) {
        char *log = build_log(prog, j->dev);
        /* Print only whether a log exists and mentions the bad symbol: the
         * text of a log names temp files that differ between runs. */
        printf("build error %d, log mentions symbol: %s\n", j->build_rc,
               strstr(log, "undefined_symbol") ? "yes" : "no");
        free(log);
        clReleaseProgram(prog);
        return NULL;
    }
    cl_command_queue q = clCreateCommandQueueWithProperties(j->ctx, j->dev, NULL, &err);
    CHECK(err);
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y), out[N / LOCAL];
    for (int i = 0; i < N; i++) {
        x[i] = (float)(i % 17) * 0.5f;
        y[i] = (float)(i % 5);
    }
    cl_mem bx = clCreateBuffer(j->ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, N * sizeof *x, x, &err);
    CHECK(err);
    cl_mem by = clCreateBuffer(j->ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, N * sizeof *y, y, &err);
    CHECK(err);
    cl_mem bo = clCreateBuffer(j->ctx, CL_MEM_WRITE_ONLY, sizeof out, NULL, &err);
    CHECK(err);
    cl_kernel k1 = clCreateKernel(prog, "saxpy", &err);
    CHECK(err);
    cl_kernel k2 = clCreateKernel(prog, "scale", &err);
    CHECK(err);
    cl_kernel k3 = clCreateKernel(prog, "block_sum", &err);
    CHECK(err);
    float a = 2.0f;
    CHECK(clSetKernelArg(k1, 0, sizeof bx, &bx));
    CHECK(clSetKernelArg(k1, 1, sizeof by, &by));
    CHECK(clSetKernelArg(k1, 2, sizeof a, &a));
    CHECK(clSetKernelArg(k2, 0, sizeof by, &by));
    CHECK(clSetKernelArg(k3, 0, sizeof by, &by));
    CHECK(clSetKernelArg(k3, 1, sizeof bo, &bo));
    CHECK(clSetKernelArg(k3, 2, LOCAL * sizeof(float), NULL));
    size_t global = N, local = LOCAL;
    CHECK(clEnqueueNDRangeKernel(q, k1, 1, NULL, &global, NULL, 0, NULL, NULL));
    CHECK(clEnqueueNDRangeKernel(q, k2, 1, NULL, &global, NULL, 0, NULL, NULL));
    CHECK(clEnqueueNDRangeKernel(q, k3, 1, NULL, &global, &local, 0, NULL, NULL));
    CHECK(clEnqueueReadBuffer(q, bo, CL_TRUE, 0, sizeof out, out, 0, NULL, NULL));
    double sum = 0;
    for (int i = 0; i < N / LOCAL; i++) sum += out[i] * (i + 1);
    j->checksum = sum;
    /* Queries the app may make: they must look like a source build. */
    cl_program kp;
    CHECK(clGetKernelInfo(k1, CL_KERNEL_PROGRAM, sizeof kp, &kp, NULL));
    if (kp != prog) printf("CL_KERNEL_PROGRAM differs from the program\n");
    size_t src_len = 0;
    CHECK(clGetProgramInfo(prog, CL_PROGRAM_SOURCE, 0, NULL, &src_len));
    if (src_len != strlen(source) + 1) printf("CL_PROGRAM_SOURCE has %zu bytes\n", src_len);
    size_t nk = 0;
    CHECK(clGetProgramInfo(prog, CL_PROGRAM_NUM_KERNELS, sizeof nk, &nk, NULL));
    cl_build_status status;
    CHECK(clGetProgramBuildInfo(prog, j->dev, CL_PROGRAM_BUILD_STATUS, sizeof status, &status, NULL));
    char opts[256] = "";
    CHECK(clGetProgramBuildInfo(prog, j->dev, CL_PROGRAM_BUILD_OPTIONS, sizeof opts, opts, NULL));
    if (nk != 3 || status != CL_BUILD_SUCCESS || strcmp(opts, j->options ? j->options : ""))
        printf("queries: kernels %zu status %d options '%s'\n", nk, status, opts);
    clReleaseKernel(k1);
    clReleaseKernel(k2);
    clReleaseKernel(k3);
    clReleaseMemObject(bx);
    clReleaseMemObject(by);
    clReleaseMemObject(bo);
    clReleaseCommandQueue(q);
    clReleaseProgram(prog);
    free(x);
    free(y);
    return NULL;
}

int main(int argc, char **argv)
{
    int scale = 3, threads = 1, contexts = 1, iterations = 1, error_mode = 0, timing = 0;
    const char *include = NULL, *extra = "";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--scale") && i + 1 < argc) scale = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--include") && i + 1 < argc) include = argv[++i];
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--contexts") && i + 1 < argc) contexts = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--iterations") && i + 1 < argc) iterations = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--options") && i + 1 < argc) extra = argv[++i];
        else if (!strcmp(argv[i], "--error")) error_mode = 1;
        else if (!strcmp(argv[i], "--time")) timing = 1;
        else { fprintf(stderr, "unknown argument %s\n", argv[i]); return 2; }
    }
    double t0 = now_ms();
    cl_device_id dev = first_device(NULL);
    char options[1024];
    snprintf(options, sizeof options, "-DSCALE=%d.0f%s%s%s%s", scale, include ? " -DUSE_HEADER -I " : "",
             include ? include : "", *extra ? " " : "", extra);
    int njobs = threads * contexts;
    struct job *jobs = calloc((size_t)njobs, sizeof *jobs);
    pthread_t *tids = calloc((size_t)njobs, sizeof *tids);
    for (int it = 0; it < iterations; it++) {
        cl_context ctxs[64];
        for (int c = 0; c < contexts && c < 64; c++) {
            cl_int err;
            ctxs[c] = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
            CHECK(err);
        }
        for (int i = 0; i < njobs; i++) {
            jobs[i] = (struct job){ctxs[i % contexts], dev, options, error_mode, 0, 0};
            pthread_create(&tids[i], NULL, run_job, &jobs[i]);
        }
        for (int i = 0; i < njobs; i++) pthread_join(tids[i], NULL);
        for (int c = 0; c < contexts && c < 64; c++) clReleaseContext(ctxs[c]);
        if (it == 0 && timing) fprintf(stderr, "time to first result: %.1f ms\n", now_ms() - t0);
    }
    for (int i = 0; i < njobs; i++)
        if (!error_mode) printf("job %d checksum %.3f\n", i, jobs[i].checksum);
    free(jobs);
    free(tids);
    return 0;
}
