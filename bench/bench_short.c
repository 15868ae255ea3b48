/* bench_short — a short run of a 4-kernel elementwise chain, as an
 * application that does a little work and exits runs it (issue 47: fusion
 * never slower, whatever the run length). bench/short_runs.sh runs it
 * plainly and under CLSHIM_FUSION=auto, interleaved.
 *
 *   bench_short [--chains C] [--n FLOATS] [--sync chain|end]
 *
 * The program (the chain s0..s3 of tests/compat/data/chain4.cl) is built
 * and its kernels made before the timed span; the span is every chain:
 * four launches, and with --sync chain (default) a clFinish after each,
 * with --sync end one clFinish after the last. It prints
 *   result per_chain_us=... total_ms=... hash=...
 * (hash: FNV-1a of the last buffer: runs are compared by it).
 */
#include "bench/bench_util.h"

static const char *src =
    "__kernel void s0(__global const float *b0, __global float *b1, float a0, float c0) { size_t i = get_global_id(0); b1[i] = b0[i] * a0 + c0; }\n"
    "__kernel void s1(__global const float *b1, __global float *b2, float a1, float c1) { size_t i = get_global_id(0); b2[i] = b1[i] * a1 + c1; }\n"
    "__kernel void s2(__global const float *b2, __global float *b3, float a2, float c2) { size_t i = get_global_id(0); b3[i] = b2[i] * a2 + c2; }\n"
    "__kernel void s3(__global const float *b3, __global float *b4, float a3, float c3) { size_t i = get_global_id(0); b4[i] = sqrt(b3[i]) * a3 + c3; }\n";

static const float coef[4][2] = {{1.5f, 0.25f}, {0.75f, 1.0f}, {1.25f, 0.5f}, {2.0f, -0.125f}};

int main(int argc, char **argv)
{
    long chains = 30;
    size_t n = 1u << 20;
    int sync_each = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--chains") && i + 1 < argc) chains = atol(argv[++i]);
        else if (!strcmp(argv[i], "--n") && i + 1 < argc) n = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--sync") && i + 1 < argc) sync_each = strcmp(argv[++i], "end") != 0;
        else {
            fprintf(stderr, "usage: bench_short [--chains C] [--n FLOATS] [--sync chain|end]\n");
            return 2;
        }
    }
    if (chains < 1 || !n) return 2;
    cl_device_id dev;
    cl_context ctx;
    cl_command_queue q;
    bu_open(&dev, &ctx, &q);
    cl_int err;
    cl_program prog = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
    BCHECK(err);
    BCHECK(clBuildProgram(prog, 1, &dev, "", NULL, NULL));
    cl_kernel k[4];
    for (int s = 0; s < 4; s++) {
        char name[8];
        snprintf(name, sizeof name, "s%d", s);
        k[s] = clCreateKernel(prog, name, &err);
        BCHECK(err);
    }
    float *host = malloc(n * sizeof *host);
    if (!host) return 2;
    for (size_t i = 0; i < n; i++) host[i] = (float)((i * 2654435761u) % 1000003u) / 7.0f;
    cl_mem b[5];
    for (int s = 0; s < 5; s++) {
        b[s] = clCreateBuffer(ctx, CL_MEM_READ_WRITE | (s ? 0 : CL_MEM_COPY_HOST_PTR), n * sizeof *host, s ? NULL : host,
                              &err);
        BCHECK(err);
    }
    for (int s = 0; s < 4; s++) {
        BCHECK(clSetKernelArg(k[s], 0, sizeof(cl_mem), &b[s]));
        BCHECK(clSetKernelArg(k[s], 1, sizeof(cl_mem), &b[s + 1]));
        BCHECK(clSetKernelArg(k[s], 2, sizeof(float), &coef[s][0]));
        BCHECK(clSetKernelArg(k[s], 3, sizeof(float), &coef[s][1]));
    }
    BCHECK(clFinish(q));
    double t0 = bu_now_ns();
    for (long c = 0; c < chains; c++) {
        for (int s = 0; s < 4; s++) BCHECK(clEnqueueNDRangeKernel(q, k[s], 1, NULL, &n, NULL, 0, NULL, NULL));
        if (sync_each) BCHECK(clFinish(q));
    }
    BCHECK(clFinish(q));
    double total = bu_now_ns() - t0;
    BCHECK(clEnqueueReadBuffer(q, b[4], CL_TRUE, 0, n * sizeof *host, host, 0, NULL, NULL));
    uint64_t h = 1469598103934665603ull;
    const unsigned char *p = (const unsigned char *)host;
    for (size_t i = 0; i < n * sizeof *host; i++) h = (h ^ p[i]) * 1099511628211ull;
    printf("result per_chain_us=%.2f total_ms=%.3f hash=%016llx\n", total / 1e3 / (double)chains, total / 1e6,
           (unsigned long long)h);
    for (int s = 0; s < 5; s++) clReleaseMemObject(b[s]);
    for (int s = 0; s < 4; s++) clReleaseKernel(k[s]);
    clReleaseProgram(prog);
    clReleaseCommandQueue(q);
    clReleaseContext(ctx);
    free(host);
    return 0;
}
