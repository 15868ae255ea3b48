/* chain_app — an unmodified application running a K = 4 elementwise chain
 * (tests/compat/data/chain4.cl: s0..s3, the last a sqrt) and the same
 * chain written by hand as one kernel (handreg4). It knows nothing of
 * clshim: under a plan (CLSHIM_FUSE="s0+s1+s2+s3:internal") clshim fuses
 * the four launches; without one they run as enqueued. Used by
 * tests/compat/nvidia_route_a.sh (route (a) through the launch path on
 * NVIDIA) and tests/integration/test_fusion_ptx.sh.
 *
 *   chain_app (--source chain4.cl | --il chain4.spv) [--reps R] [--pipe P] [N...]
 *
 * For each N (floats; default 1, 4, 16, 64 Mi), after one untimed chain:
 *   chain_us, hand_us            latency: the median of R (one chain, then
 *                                clFinish), the two ways interleaved;
 *   chain_pipe_us, hand_pipe_us  pipelined: P chains back to back and one
 *                                clFinish, per chain (the median of 3);
 *   chain_hash, hand_hash        FNV-1a of the last buffer b4 after the
 *                                chain / the hand-written kernel (bit
 *                                patterns: runs are compared by these).
 * One line per N:
 *   N=... chain_us=... hand_us=... chain_pipe_us=... hand_pipe_us=... chain_hash=... hand_hash=...
 * --reps 0 runs each way once and prints the hashes only (priming a cache).
 */
#include "common.h"

static const float coef[4][2] = {{1.5f, 0.25f}, {0.75f, 1.0f}, {1.25f, 0.5f}, {2.0f, -0.125f}};

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void enqueue_way(cl_command_queue q, int hand_way, cl_kernel *steps, cl_kernel hand, size_t n)
{
    if (hand_way) CHECK(clEnqueueNDRangeKernel(q, hand, 1, NULL, &n, NULL, 0, NULL, NULL));
    else
        for (int k = 0; k < 4; k++) CHECK(clEnqueueNDRangeKernel(q, steps[k], 1, NULL, &n, NULL, 0, NULL, NULL));
}

static double median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return t[n / 2];
}

static uint64_t result_hash(cl_command_queue q, cl_mem b4, size_t n)
{
    float *host = malloc(n * sizeof *host);
    if (!host) exit(2);
    CHECK(clEnqueueReadBuffer(q, b4, CL_TRUE, 0, n * sizeof *host, host, 0, NULL, NULL));
    uint64_t h = fnv(host, n * sizeof *host);
    free(host);
    return h;
}

int main(int argc, char **argv)
{
    const char *src_path = NULL, *il_path = NULL;
    int reps = 9, pipe = 50;
    size_t sizes[16];
    int nsizes = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--source") && i + 1 < argc) src_path = argv[++i];
        else if (!strcmp(argv[i], "--il") && i + 1 < argc) il_path = argv[++i];
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--pipe") && i + 1 < argc) pipe = atoi(argv[++i]);
        else if (nsizes < 16) sizes[nsizes++] = strtoull(argv[i], NULL, 10);
    }
    if ((!src_path) == (!il_path) || reps < 0 || pipe < 1) {
        fprintf(stderr, "usage: chain_app (--source chain4.cl | --il chain4.spv) [--reps R] [--pipe P] [N...]\n");
        return 2;
    }
    if (!nsizes) {
        sizes[0] = 1u << 20, sizes[1] = 4u << 20, sizes[2] = 16u << 20, sizes[3] = 64u << 20;
        nsizes = 4;
    }
    cl_device_id dev;
    cl_context ctx;
    cl_command_queue q;
    first_context_queue(&dev, &ctx, &q);
    cl_int err;
    size_t len;
    char *input = read_text_file(src_path ? src_path : il_path, &len);
    if (!input) {
        perror(src_path ? src_path : il_path);
        return 2;
    }
    const char *srcs[1] = {input};
    cl_program prog = src_path ? clCreateProgramWithSource(ctx, 1, srcs, &len, &err)
                               : clCreateProgramWithIL(ctx, input, len, &err);
    CHECK(err);
    if (clBuildProgram(prog, 1, &dev, "", NULL, NULL) != CL_SUCCESS) {
        fprintf(stderr, "chain_app: build failed: %.2000s\n", build_log(prog, dev));
        return 2;
    }
    cl_kernel steps[4], hand = clCreateKernel(prog, "handreg4", &err);
    CHECK(err);
    for (int k = 0; k < 4; k++) {
        char name[16];
        snprintf(name, sizeof name, "s%d", k);
        steps[k] = clCreateKernel(prog, name, &err);
        CHECK(err);
    }
    for (int s = 0; s < nsizes; s++) {
        size_t n = sizes[s];
        cl_mem b[5];
        float *host = malloc(n * sizeof *host);
        if (!host) return 2;
        for (size_t i = 0; i < n; i++) host[i] = (float)((i * 2654435761u) % 1000003u) / 7.0f;
        for (int k = 0; k < 5; k++) {
            b[k] = clCreateBuffer(ctx, CL_MEM_READ_WRITE | (k ? 0 : CL_MEM_COPY_HOST_PTR), n * sizeof(float),
                                  k ? NULL : host, &err);
            CHECK(err);
        }
        free(host);
        for (int k = 0; k < 4; k++) {
            CHECK(clSetKernelArg(steps[k], 0, sizeof(cl_mem), &b[k]));
            CHECK(clSetKernelArg(steps[k], 1, sizeof(cl_mem), &b[k + 1]));
            CHECK(clSetKernelArg(steps[k], 2, sizeof(float), &coef[k][0]));
            CHECK(clSetKernelArg(steps[k], 3, sizeof(float), &coef[k][1]));
        }
        for (int k = 0; k < 5; k++) CHECK(clSetKernelArg(hand, (cl_uint)k, sizeof(cl_mem), &b[k]));
        for (int k = 0; k < 4; k++) {
            CHECK(clSetKernelArg(hand, (cl_uint)(5 + 2 * k), sizeof(float), &coef[k][0]));
            CHECK(clSetKernelArg(hand, (cl_uint)(6 + 2 * k), sizeof(float), &coef[k][1]));
        }
        uint64_t hash[2];
        for (int w = 0; w < 2; w++) { /* untimed: builds, and each way's result */
            float zero = 0;
            CHECK(clEnqueueFillBuffer(q, b[4], &zero, sizeof zero, 0, n * sizeof(float), 0, NULL, NULL));
            enqueue_way(q, w, steps, hand, n);
            hash[w] = result_hash(q, b[4], n);
        }
        double lat[2] = {0, 0}, piped[2] = {0, 0};
        if (reps > 0) {
            double *t[2] = {malloc((size_t)reps * sizeof(double)), malloc((size_t)reps * sizeof(double))};
            double p[2][3];
            if (!t[0] || !t[1]) return 2;
            for (int r = 0; r < reps; r++) /* interleaved, so load changes hit both ways alike */
                for (int w = 0; w < 2; w++) {
                    CHECK(clFinish(q));
                    double t0 = now_ms();
                    enqueue_way(q, w, steps, hand, n);
                    CHECK(clFinish(q));
                    t[w][r] = (now_ms() - t0) * 1000.0;
                }
            for (int r = 0; r < 3; r++)
                for (int w = 0; w < 2; w++) {
                    CHECK(clFinish(q));
                    double t0 = now_ms();
                    for (int c = 0; c < pipe; c++) enqueue_way(q, w, steps, hand, n);
                    CHECK(clFinish(q));
                    p[w][r] = (now_ms() - t0) * 1000.0 / pipe;
                }
            for (int w = 0; w < 2; w++) {
                lat[w] = median(t[w], reps);
                piped[w] = median(p[w], 3);
                free(t[w]);
            }
        }
        printf("N=%zu chain_us=%.1f hand_us=%.1f chain_pipe_us=%.1f hand_pipe_us=%.1f chain_hash=%016llx "
               "hand_hash=%016llx\n", n, lat[0], lat[1], piped[0], piped[1], (unsigned long long)hash[0],
               (unsigned long long)hash[1]);
        fflush(stdout);
        for (int k = 0; k < 5; k++) clReleaseMemObject(b[k]);
    }
    for (int k = 0; k < 4; k++) clReleaseKernel(steps[k]);
    clReleaseKernel(hand);
    clReleaseProgram(prog);
    free(input);
    return 0;
}
