/* ilprog — an unmodified OpenCL program that loads SPIR-V with
 * clCreateProgramWithIL (or OpenCL C with --source), runs the kernels of
 * tests/integration/data/features.cl and prints checksums.
 *   ilprog --il FILE.spv | --source FILE.cl     run the features kernels
 *   ilprog --spec FILE.spv [VALUE]              run the spec-constant kernel
 *   ilprog --spec-chain FILE.spv VALUE          the spec constants 7 = VALUE and
 *       8 = 10 * VALUE; kernels spec and spec_add back to back (a fusion plan's shape)
 *   ilprog --invalid FILE.spv                   invalid modules, then the valid one
 *   --khr: create through clCreateProgramWithILKHR */
#include "common.h"

#include <pthread.h>

typedef cl_program(CL_API_CALL *create_il_fn)(cl_context, const void *, size_t, cl_int *);
static int use_khr;
static cl_platform_id platform;

static cl_program create_il(cl_context ctx, const void *il, size_t n, cl_int *err)
{
    if (!use_khr) return clCreateProgramWithIL(ctx, il, n, err);
    create_il_fn f = (create_il_fn)clGetExtensionFunctionAddressForPlatform(platform, "clCreateProgramWithILKHR");
    if (!f) {
        *err = CL_INVALID_OPERATION;
        printf("clCreateProgramWithILKHR not available\n");
        return NULL;
    }
    return f(ctx, il, n, err);
}

static double checksum(const void *p, size_t n)
{
    const unsigned char *b = p;
    double s = 0;
    for (size_t i = 0; i < n; i++) s += b[i] * (double)((i % 251) + 1);
    return s;
}

static void run_features(cl_context ctx, cl_device_id dev, cl_program prog)
{
    cl_int err;
    cl_command_queue q = clCreateCommandQueueWithProperties(ctx, dev, NULL, &err);
    CHECK(err);
    enum { N = 1024, L = 64 };
    float in[N], y[N], sums[N / L], v4in[N * 4], v4out[N * 4];
    double din[N], dout[N];
    for (int i = 0; i < N; i++) {
        in[i] = (float)(i % 29) * 0.25f;
        y[i] = (float)(i % 7);
        din[i] = i * 0.5 + 1.0;
    }
    for (int i = 0; i < N * 4; i++) v4in[i] = (float)(i % 11) - 3.0f;
    cl_mem bin = clCreateBuffer(ctx, CL_MEM_COPY_HOST_PTR, sizeof in, in, &err);
    cl_mem bsum = clCreateBuffer(ctx, CL_MEM_READ_WRITE, sizeof sums, NULL, &err);
    cl_mem bv4i = clCreateBuffer(ctx, CL_MEM_COPY_HOST_PTR, sizeof v4in, v4in, &err);
    cl_mem bv4o = clCreateBuffer(ctx, CL_MEM_READ_WRITE, sizeof v4out, NULL, &err);
    cl_mem by = clCreateBuffer(ctx, CL_MEM_COPY_HOST_PTR, sizeof y, y, &err);
    cl_mem bdi = clCreateBuffer(ctx, CL_MEM_COPY_HOST_PTR, sizeof din, din, &err);
    cl_mem bdo = clCreateBuffer(ctx, CL_MEM_READ_WRITE, sizeof dout, NULL, &err);
    size_t g = N, l = L;
    cl_kernel k = clCreateKernel(prog, "block_sum", &err);
    CHECK(err);
    CHECK(clSetKernelArg(k, 0, sizeof bin, &bin));
    CHECK(clSetKernelArg(k, 1, sizeof bsum, &bsum));
    CHECK(clSetKernelArg(k, 2, L * sizeof(float), NULL));
    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &g, &l, 0, NULL, NULL));
    clReleaseKernel(k);
    k = clCreateKernel(prog, "vec4", &err);
    CHECK(err);
    CHECK(clSetKernelArg(k, 0, sizeof bv4i, &bv4i));
    CHECK(clSetKernelArg(k, 1, sizeof bv4o, &bv4o));
    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &g, NULL, 0, NULL, NULL));
    clReleaseKernel(k);
    k = clCreateKernel(prog, "with_struct", &err);
    CHECK(err);
    struct { float scale; int shift; } params = {1.5f, 3};
    CHECK(clSetKernelArg(k, 0, sizeof by, &by));
    CHECK(clSetKernelArg(k, 1, sizeof params, &params));
    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &g, NULL, 0, NULL, NULL));
    clReleaseKernel(k);
    k = clCreateKernel(prog, "dbl", &err);
    CHECK(err);
    CHECK(clSetKernelArg(k, 0, sizeof bdi, &bdi));
    CHECK(clSetKernelArg(k, 1, sizeof bdo, &bdo));
    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &g, NULL, 0, NULL, NULL));
    clReleaseKernel(k);
    CHECK(clEnqueueReadBuffer(q, bsum, CL_TRUE, 0, sizeof sums, sums, 0, NULL, NULL));
    CHECK(clEnqueueReadBuffer(q, bv4o, CL_TRUE, 0, sizeof v4out, v4out, 0, NULL, NULL));
    CHECK(clEnqueueReadBuffer(q, by, CL_TRUE, 0, sizeof y, y, 0, NULL, NULL));
    CHECK(clEnqueueReadBuffer(q, bdo, CL_TRUE, 0, sizeof dout, dout, 0, NULL, NULL));
    printf("local+barrier %.1f\nfloat4 %.1f\nstruct %.1f\ndouble %.1f\n", checksum(sums, sizeof sums),
           checksum(v4out, sizeof v4out), checksum(y, sizeof y), checksum(dout, sizeof dout));
    cl_mem all[] = {bin, bsum, bv4i, bv4o, by, bdi, bdo};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) clReleaseMemObject(all[i]);
    clReleaseCommandQueue(q);
}

static void run_spec(cl_context ctx, cl_device_id dev, cl_program prog, int chain)
{
    cl_int err;
    cl_command_queue q = clCreateCommandQueueWithProperties(ctx, dev, NULL, &err);
    cl_mem b = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 4 * sizeof(int), NULL, &err);
    cl_kernel k = clCreateKernel(prog, "spec", &err);
    CHECK(err);
    CHECK(clSetKernelArg(k, 0, sizeof b, &b));
    size_t g = 4;
    int out[4];
    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &g, NULL, 0, NULL, NULL));
    cl_kernel k2 = NULL;
    if (chain) {
        k2 = clCreateKernel(prog, "spec_add", &err);
        CHECK(err);
        CHECK(clSetKernelArg(k2, 0, sizeof b, &b));
        CHECK(clEnqueueNDRangeKernel(q, k2, 1, NULL, &g, NULL, 0, NULL, NULL));
    }
    CHECK(clEnqueueReadBuffer(q, b, CL_TRUE, 0, sizeof out, out, 0, NULL, NULL));
    if (k2) clReleaseKernel(k2);
    printf("spec values %d %d %d %d\n", out[0], out[1], out[2], out[3]);
    clReleaseKernel(k);
    clReleaseMemObject(b);
    clReleaseCommandQueue(q);
}

static int llvm_loaded(void)
{
    size_t n;
    char *maps = read_text_file("/proc/self/maps", &n);
    int yes = maps && strstr(maps, "libclshim-llvm.so") != NULL;
    free(maps);
    return yes;
}

static void note_exit(void) { fprintf(stderr, "ilprog: atexit handler ran\n"); }

/* fork()s in this process (an atfork handler runs in the parent at each):
 * a translation must not run the application's fork handlers. */
static int forks_seen;
static void count_fork(void) { __atomic_add_fetch(&forks_seen, 1, __ATOMIC_RELAXED); }

int main(int argc, char **argv)
{
    atexit(note_exit); /* must run once, in this process only */
    pthread_atfork(count_fork, NULL, NULL);
    const char *mode = NULL, *path = NULL, *spec_value = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--khr")) use_khr = 1;
        else if (!mode && i + 1 < argc) { mode = argv[i]; path = argv[++i]; }
        else spec_value = argv[i];
    }
    if (!mode) { fprintf(stderr, "usage: see the comment at the top\n"); return 2; }
    cl_int err;
    cl_device_id dev = first_device(&platform);
    cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    CHECK(err);
    size_t len;
    char *data = read_text_file(path, &len);
    if (!data) { fprintf(stderr, "cannot read %s\n", path); return 2; }
    if (!strcmp(mode, "--invalid")) {
        unsigned char junk[256];
        srand(7);
        for (size_t i = 0; i < sizeof junk; i++) junk[i] = (unsigned char)rand();
        cl_program p = create_il(ctx, junk, sizeof junk, &err);
        printf("random bytes: %d %s\n", err, p ? "program" : "null");
        p = create_il(ctx, data, len / 2 & ~(size_t)3, &err);
        printf("truncated module: %d %s\n", err, p ? "program" : "null");
        char *bad = malloc(len);
        memcpy(bad, data, len);
        bad[0] ^= 0x55;
        p = create_il(ctx, bad, len, &err);
        printf("wrong magic: %d %s\n", err, p ? "program" : "null");
        free(bad);
        mode = "--il"; /* the app continues with the valid module */
    }
    cl_program prog;
    if (!strcmp(mode, "--source")) prog = clCreateProgramWithSource(ctx, 1, (const char **)&data, &len, &err);
    else prog = create_il(ctx, data, len, &err);
    CHECK(err);
    int chain = !strcmp(mode, "--spec-chain");
    if (!strcmp(mode, "--spec") && spec_value) {
        int v = atoi(spec_value);
        CHECK(clSetProgramSpecializationConstant(prog, 7, sizeof v, &v));
        printf("unknown spec id: %d\n", clSetProgramSpecializationConstant(prog, 99, sizeof v, &v));
    }
    if (chain && spec_value) {
        int v = atoi(spec_value), v10 = v * 10;
        CHECK(clSetProgramSpecializationConstant(prog, 7, sizeof v, &v));
        CHECK(clSetProgramSpecializationConstant(prog, 8, sizeof v10, &v10));
    }
    /* Left in stdout's buffer across the build: a translator child must not
     * write it out a second time. */
    printf("program created\n");
    int forks_before = __atomic_load_n(&forks_seen, __ATOMIC_RELAXED);
    err = clBuildProgram(prog, 1, &dev, "", NULL, NULL);
    fprintf(stderr, "ilprog: forks during the build: %d\n", __atomic_load_n(&forks_seen, __ATOMIC_RELAXED) - forks_before);
    if (err != CL_SUCCESS) {
        char *log = build_log(prog, dev);
        printf("build failed: %d\n%s\n", err, log);
        return 1;
    }
    if (strcmp(mode, "--source")) {
        size_t il_size = 0;
        CHECK(clGetProgramInfo(prog, CL_PROGRAM_IL, 0, NULL, &il_size));
        char *il = malloc(il_size);
        CHECK(clGetProgramInfo(prog, CL_PROGRAM_IL, il_size, il, NULL));
        printf("CL_PROGRAM_IL returns the module: %s\n", il_size == len && !memcmp(il, data, len) ? "yes" : "no");
        free(il);
    }
    if (!strcmp(mode, "--spec") || chain) run_spec(ctx, dev, prog, chain);
    else run_features(ctx, dev, prog);
    fprintf(stderr, "llvm loaded: %s\n", llvm_loaded() ? "yes" : "no");
    clReleaseProgram(prog);
    clReleaseContext(ctx);
    free(data);
    return 0;
}
