/* bench_fusion — what kernel fusion buys, side by side in one run.
 *
 * Chains of K = 2, 4, 8 elementwise kernels (step_k: out = in * a + b, each
 * reading the previous kernel's output buffer and storing its own, so every
 * intermediate is stored) over N floats, three ways:
 *   unfused  the K kernels enqueued back to back (what the app does);
 *   fused    the same K enqueues between clStartFusionCLSHIM and
 *            clCompleteFusionCLSHIM: clshim's real path (holding, argument
 *            snapshots, the fused program from the cache, one launch);
 *   hand     a hand-written kernel doing the same work in one launch,
 *            storing every intermediate.
 * Each time is the best of repetitions of enqueue + clFinish, the three ways
 * interleaved round by round (the machine is shared; the minimum is the
 * least disturbed). The results of the three ways are compared bit for bit.
 *
 * The program re-executes itself under LD_PRELOAD=<build>/libclshim.so with
 * a private CLSHIM_CACHE_DIR when the extension is not found.
 *   bench_fusion [--quick] [--k K] [--n N]
 */
#define CL_TARGET_OPENCL_VERSION 300
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <CL/cl.h>
#include <libgen.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "CL/clshim_ext.h"

#define CHECK(expr)                                                                       \
    do {                                                                                  \
        cl_int check_rc_ = (expr);                                                        \
        if (check_rc_ != CL_SUCCESS) {                                                    \
            fprintf(stderr, "%s:%d: %s failed: %d\n", __FILE__, __LINE__, #expr, check_rc_); \
            exit(2);                                                                      \
        }                                                                                 \
    } while (0)

#define KMAX 8
#define LOCAL 256

static cl_context ctx;
static cl_device_id dev;
static cl_command_queue q;
static clStartFusionCLSHIM_fn start_fusion;
static clCompleteFusionCLSHIM_fn complete_fusion;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* step0..step7 and hand2/hand4/hand8. */
static char *make_source(void)
{
    static char src[16384];
    size_t o = 0;
    for (int k = 0; k < KMAX; k++)
        o += (size_t)snprintf(src + o, sizeof src - o,
                              "__kernel void step%d(__global const float *in, __global float *out, float a, "
                              "float b) {\n    size_t i = get_global_id(0); out[i] = in[i] * a + b; }\n",
                              k);
    for (int K = 2; K <= KMAX; K *= 2) {
        o += (size_t)snprintf(src + o, sizeof src - o, "__kernel void hand%d(__global const float *b0", K);
        for (int k = 1; k <= K; k++) o += (size_t)snprintf(src + o, sizeof src - o, ", __global float *b%d", k);
        for (int k = 0; k < K; k++) o += (size_t)snprintf(src + o, sizeof src - o, ", float a%d, float c%d", k, k);
        o += (size_t)snprintf(src + o, sizeof src - o, ") {\n    size_t i = get_global_id(0); float v = b0[i];\n");
        for (int k = 0; k < K; k++)
            o += (size_t)snprintf(src + o, sizeof src - o, "    v = v * a%d + c%d; b%d[i] = v;\n", k, k, k + 1);
        o += (size_t)snprintf(src + o, sizeof src - o, "}\n");
    }
    return src;
}

struct setup {
    int K;
    size_t n;
    cl_mem buf[KMAX + 1];
    cl_kernel step[KMAX], hand;
};

static void run_unfused(struct setup *s)
{
    size_t gws = s->n, lws = LOCAL;
    for (int k = 0; k < s->K; k++) CHECK(clEnqueueNDRangeKernel(q, s->step[k], 1, NULL, &gws, &lws, 0, NULL, NULL));
    CHECK(clFinish(q));
}

static void run_fused(struct setup *s)
{
    size_t gws = s->n, lws = LOCAL;
    CHECK(start_fusion(q));
    for (int k = 0; k < s->K; k++) CHECK(clEnqueueNDRangeKernel(q, s->step[k], 1, NULL, &gws, &lws, 0, NULL, NULL));
    CHECK(complete_fusion(q, NULL, NULL));
    CHECK(clFinish(q));
}

static void run_hand(struct setup *s)
{
    size_t gws = s->n, lws = LOCAL;
    CHECK(clEnqueueNDRangeKernel(q, s->hand, 1, NULL, &gws, &lws, 0, NULL, NULL));
    CHECK(clFinish(q));
}

/* Best times of the three ways, measured interleaved (one of each per
 * round, for about `budget` seconds, at least 5 rounds) so that a change in
 * the machine's load hits all three alike. */
static void best3(struct setup *s, double budget, double out[3])
{
    void (*fn[3])(struct setup *) = {run_unfused, run_fused, run_hand};
    for (int v = 0; v < 3; v++) {
        fn[v](s); /* warm-up: first-launch compilation, page faults */
        out[v] = 1e30;
    }
    double spent = 0;
    for (int r = 0; r < 2000 && (r < 5 || spent < budget); r++)
        for (int v = 0; v < 3; v++) {
            double t0 = now_s();
            fn[v](s);
            double t = now_s() - t0;
            spent += t;
            if (t < out[v]) out[v] = t;
        }
}

static uint64_t digest(struct setup *s)
{
    uint64_t x = 1469598103934665603ULL;
    float *h = malloc(s->n * sizeof *h);
    for (int k = 1; k <= s->K; k++) {
        CHECK(clEnqueueReadBuffer(q, s->buf[k], CL_TRUE, 0, s->n * sizeof *h, h, 0, NULL, NULL));
        const unsigned char *p = (const unsigned char *)h;
        for (size_t i = 0; i < s->n * sizeof *h; i += 4096 / 8 * 8 + 4) x = (x ^ p[i]) * 1099511628211ULL;
        x = (x ^ p[s->n * sizeof *h - 1]) * 1099511628211ULL;
    }
    free(h);
    return x;
}

static void clear_outputs(struct setup *s)
{
    float zero = 0.0f;
    for (int k = 1; k <= s->K; k++)
        CHECK(clEnqueueFillBuffer(q, s->buf[k], &zero, sizeof zero, 0, s->n * sizeof zero, 0, NULL, NULL));
    CHECK(clFinish(q));
}

static void bench_one(cl_program prog, int K, size_t n, int *fails)
{
    struct setup s;
    memset(&s, 0, sizeof s);
    s.K = K;
    s.n = n;
    cl_int err;
    float *init = malloc(n * sizeof *init);
    for (size_t i = 0; i < n; i++) init[i] = (float)(i % 1013) * 0.01f;
    for (int k = 0; k <= K; k++) {
        s.buf[k] = clCreateBuffer(ctx, CL_MEM_READ_WRITE | (k ? 0 : CL_MEM_COPY_HOST_PTR), n * sizeof(float),
                                  k ? NULL : init, &err);
        CHECK(err);
    }
    free(init);
    char name[32];
    for (int k = 0; k < K; k++) {
        snprintf(name, sizeof name, "step%d", k);
        s.step[k] = clCreateKernel(prog, name, &err);
        CHECK(err);
        float a = 1.0f + 0.125f * (float)k, b = 0.5f - 0.25f * (float)k;
        CHECK(clSetKernelArg(s.step[k], 0, sizeof(cl_mem), &s.buf[k]));
        CHECK(clSetKernelArg(s.step[k], 1, sizeof(cl_mem), &s.buf[k + 1]));
        CHECK(clSetKernelArg(s.step[k], 2, sizeof a, &a));
        CHECK(clSetKernelArg(s.step[k], 3, sizeof b, &b));
    }
    snprintf(name, sizeof name, "hand%d", K);
    s.hand = clCreateKernel(prog, name, &err);
    CHECK(err);
    for (int k = 0; k <= K; k++) CHECK(clSetKernelArg(s.hand, (cl_uint)k, sizeof(cl_mem), &s.buf[k]));
    for (int k = 0; k < K; k++) {
        float a = 1.0f + 0.125f * (float)k, b = 0.5f - 0.25f * (float)k;
        CHECK(clSetKernelArg(s.hand, (cl_uint)(K + 1 + 2 * k), sizeof a, &a));
        CHECK(clSetKernelArg(s.hand, (cl_uint)(K + 2 + 2 * k), sizeof b, &b));
    }
    double budget = n >= (16u << 20) ? 6.0 : 1.5;
    clear_outputs(&s);
    run_unfused(&s);
    uint64_t du = digest(&s);
    clear_outputs(&s);
    run_fused(&s);
    uint64_t df = digest(&s);
    clear_outputs(&s);
    run_hand(&s);
    uint64_t dh = digest(&s);
    double t[3];
    best3(&s, budget, t);
    double tu = t[0], tf = t[1], th = t[2];
    int same = du == df && df == dh;
    if (!same) (*fails)++;
    char nn[32];
    if (n >= (1u << 20)) snprintf(nn, sizeof nn, "%zu Mi", n >> 20);
    else snprintf(nn, sizeof nn, "%zu Ki", n >> 10);
    printf("| %d | %6s | %10.3f | %10.3f | %10.3f | %6.2fx | %6.2f | %s |\n", K, nn, tu * 1e3, tf * 1e3, th * 1e3,
           tu / tf, tf / th, same ? "same" : "DIFFER");
    fflush(stdout);
    for (int k = 0; k < K; k++) clReleaseKernel(s.step[k]);
    clReleaseKernel(s.hand);
    for (int k = 0; k <= K; k++) clReleaseMemObject(s.buf[k]);
}

/* Re-executes under the shim with a private cache; returns only on failure. */
static void reexec_under_shim(char **argv)
{
    char self[PATH_MAX], lib[PATH_MAX + 32];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0 || getenv("BENCH_FUSION_REEXEC")) return;
    self[len] = 0;
    snprintf(lib, sizeof lib, "%s/../libclshim.so", dirname(self));
    if (access(lib, R_OK) != 0) return;
    char dir[] = "/tmp/bench_fusion_cache.XXXXXX";
    if (!getenv("CLSHIM_CACHE_DIR") && mkdtemp(dir)) setenv("CLSHIM_CACHE_DIR", dir, 1);
    setenv("LD_PRELOAD", lib, 1);
    setenv("BENCH_FUSION_REEXEC", "1", 1);
    len = readlink("/proc/self/exe", self, sizeof self - 1);
    self[len] = 0;
    execv(self, argv);
}

int main(int argc, char **argv)
{
    int quick = 0, only_k = 0;
    size_t only_n = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--k") && i + 1 < argc) only_k = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--n") && i + 1 < argc) only_n = (size_t)atol(argv[++i]);
    }
    cl_platform_id platform;
    CHECK(clGetPlatformIDs(1, &platform, NULL));
    start_fusion = (clStartFusionCLSHIM_fn)clGetExtensionFunctionAddressForPlatform(platform, "clStartFusionCLSHIM");
    complete_fusion =
        (clCompleteFusionCLSHIM_fn)clGetExtensionFunctionAddressForPlatform(platform, "clCompleteFusionCLSHIM");
    if (!start_fusion || !complete_fusion) {
        reexec_under_shim(argv);
        fprintf(stderr, "bench_fusion: clshim's fusion extension not found; run it as "
                        "LD_PRELOAD=build/libclshim.so %s\n", argv[0]);
        return 2;
    }
    CHECK(clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &dev, NULL));
    cl_int err;
    ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    CHECK(err);
    q = clCreateCommandQueue(ctx, dev, 0, &err);
    CHECK(err);
    const char *src = make_source();
    cl_program prog = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
    CHECK(err);
    CHECK(clBuildProgram(prog, 1, &dev, NULL, NULL, NULL));
    char devname[256] = "";
    clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof devname, devname, NULL);
    printf("bench_fusion on %s, local size %d; times in ms (best of repetitions)\n\n", devname, LOCAL);
    printf("| K | N | unfused | fused | hand | speedup (unfused/fused) | fused/hand | results |\n");
    printf("|---|---|---|---|---|---|---|---|\n");
    static const size_t all_n[] = {4u << 10, 64u << 10, 1u << 20, 16u << 20, 64u << 20};
    static const size_t quick_n[] = {4u << 10, 1u << 20, 16u << 20};
    const size_t *ns = quick ? quick_n : all_n;
    size_t nn = quick ? 3 : 5;
    int fails = 0;
    for (int K = 2; K <= KMAX; K *= 2) {
        if (only_k && K != only_k) continue;
        for (size_t i = 0; i < nn; i++)
            if (!only_n || ns[i] == only_n) bench_one(prog, K, ns[i], &fails);
    }
    clReleaseProgram(prog);
    clReleaseCommandQueue(q);
    clReleaseContext(ctx);
    if (fails) fprintf(stderr, "bench_fusion: %d configurations gave different results\n", fails);
    return fails ? 1 : 0;
}
