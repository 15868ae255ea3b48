/* common.h — helpers for the integration programs: plain OpenCL host code
 * that knows nothing of clshim. Each program prints deterministic lines
 * (results, error codes) so runs with and without the shim can be diffed. */
#ifndef PROGS_COMMON_H
#define PROGS_COMMON_H

#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(expr)                                                                       \
    do {                                                                                  \
        cl_int check_rc_ = (expr);                                                        \
        if (check_rc_ != CL_SUCCESS) {                                                    \
            fprintf(stderr, "%s:%d: %s failed: %d\n", __FILE__, __LINE__, #expr, check_rc_); \
            exit(2);                                                                      \
        }                                                                                 \
    } while (0)

static inline double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static inline cl_device_id first_device(cl_platform_id *platform_out)
{
    cl_platform_id platform;
    cl_device_id dev;
    CHECK(clGetPlatformIDs(1, &platform, NULL));
    CHECK(clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &dev, NULL));
    if (platform_out) *platform_out = platform;
    return dev;
}

static inline char *build_log(cl_program prog, cl_device_id dev)
{
    size_t n = 0;
    clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, 0, NULL, &n);
    char *log = calloc(1, n + 1);
    clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, n, log, NULL);
    return log;
}

/* FNV-1a of n bytes: results compared bit for bit in one line. */
static inline uint64_t fnv(const void *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char *)p)[i]) * 1099511628211ull;
    return h;
}

#ifdef CL_CLSHIM_EXT_H
/* The fusion extension's Start and Complete, looked up before any kernel
 * argument is set (the lookup turns on argument recording); both NULL
 * without clshim. Says "ext: present" or "ext: absent" on stderr. */
static inline void fusion_ext_lookup(cl_platform_id platform, clStartFusionCLSHIM_fn *start,
                                     clCompleteFusionCLSHIM_fn *complete)
{
    *start = (clStartFusionCLSHIM_fn)clGetExtensionFunctionAddressForPlatform(platform, "clStartFusionCLSHIM");
    *complete = (clCompleteFusionCLSHIM_fn)clGetExtensionFunctionAddressForPlatform(platform, "clCompleteFusionCLSHIM");
    fprintf(stderr, "ext: %s\n", *start && *complete ? "present" : "absent");
}
#endif

/* The first device, a context of it alone and an in-order queue. */
static inline void first_context_queue(cl_device_id *dev, cl_context *ctx, cl_command_queue *queue)
{
    cl_int err;
    *dev = first_device(NULL);
    *ctx = clCreateContext(NULL, 1, dev, NULL, NULL, &err);
    CHECK(err);
    *queue = clCreateCommandQueueWithProperties(*ctx, *dev, NULL, &err);
    CHECK(err);
}

/* A program of `source` built for dev; exits 2 with the build log on failure. */
static inline cl_program built_program(cl_context ctx, cl_device_id dev, const char *source)
{
    cl_int err;
    cl_program prog = clCreateProgramWithSource(ctx, 1, &source, NULL, &err);
    CHECK(err);
    if (clBuildProgram(prog, 1, &dev, NULL, NULL, NULL) != CL_SUCCESS) {
        fprintf(stderr, "build failed:\n%s\n", build_log(prog, dev));
        exit(2);
    }
    return prog;
}

/* Runs a kernel whose only argument is one int it writes, on one work-item;
 * returns the int. */
static inline int run_int_kernel(cl_context ctx, cl_command_queue queue, cl_kernel k)
{
    cl_int err;
    int value = -1;
    cl_mem out = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof value, &value, &err);
    CHECK(err);
    CHECK(clSetKernelArg(k, 0, sizeof out, &out));
    size_t one = 1;
    CHECK(clEnqueueNDRangeKernel(queue, k, 1, NULL, &one, NULL, 0, NULL, NULL));
    CHECK(clEnqueueReadBuffer(queue, out, CL_TRUE, 0, sizeof value, &value, 0, NULL, NULL));
    clReleaseMemObject(out);
    return value;
}

/* Runs kernel `k` (argument 0: a float buffer) over n items on y, in place. */
static inline void run_on_floats(cl_context ctx, cl_device_id dev, cl_kernel k, float *y, size_t n)
{
    cl_int err;
    cl_command_queue q = clCreateCommandQueueWithProperties(ctx, dev, NULL, &err);
    CHECK(err);
    cl_mem b = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, n * sizeof *y, y, &err);
    CHECK(err);
    CHECK(clSetKernelArg(k, 0, sizeof b, &b));
    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &n, NULL, 0, NULL, NULL));
    CHECK(clEnqueueReadBuffer(q, b, CL_TRUE, 0, n * sizeof *y, y, 0, NULL, NULL));
    clReleaseMemObject(b);
    clReleaseCommandQueue(q);
}

/* A buffer of n floats from rand() seeded with `seed` (the same values on
 * every run). */
static inline cl_mem seeded_float_buffer(cl_context ctx, size_t n, unsigned seed)
{
    float *host = malloc(n * sizeof *host);
    srand(seed);
    for (size_t i = 0; i < n; i++) host[i] = (float)(rand() % 20000) / 37.0f - 200.0f;
    cl_int err;
    cl_mem m = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, n * sizeof(float), host, &err);
    CHECK(err);
    free(host);
    return m;
}

/* Prints a buffer of n floats: an FNV-1a hash of its bytes and three values
 * as bits. */
static inline void print_float_buffer(cl_command_queue q, cl_mem m, size_t n, const char *what)
{
    float *h = malloc(n * sizeof *h);
    CHECK(clEnqueueReadBuffer(q, m, CL_TRUE, 0, n * sizeof *h, h, 0, NULL, NULL));
    uint64_t x = 1469598103934665603ULL;
    const unsigned char *p = (const unsigned char *)h;
    for (size_t i = 0; i < n * sizeof *h; i++) x = (x ^ p[i]) * 1099511628211ULL;
    printf("%s: %016llx %a %a %a\n", what, (unsigned long long)x, h[0], h[n / 2], h[n - 1]);
    free(h);
}

static inline char *read_text_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) { free(buf); fclose(f); return NULL; }
    buf[n] = 0;
    fclose(f);
    if (len) *len = (size_t)n;
    return buf;
}

#endif
