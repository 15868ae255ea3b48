/* bench_short — a short run of a 4-kernel elementwise chain, as an
 * application that does a little work and exits runs it (issue 47: fusion
 * never slower, whatever the run length). bench/short_runs.sh runs it
 * plainly and under CLSHIM_FUSION=auto, interleaved.
 *
 *   bench_short [--chains C] [--n FLOATS] [--sync chain|end] [--events] [--broken]
 *
 * The program (the chain s0..s3 of tests/compat/data/chain4.cl) is built
 * and its kernels made before the timed span; the span is every chain:
 * four launches, and with --sync chain (default) a clFinish after each,
 * with --sync end one clFinish after the last. It prints
 *   result per_chain_us=... total_ms=... hash=...
 * (hash: FNV-1a of the last buffer: runs are compared by it).
 * --events: every launch asks for an event (released at once), as
 * PyOpenCL's do. --broken: a chain is s0 then s2 then s3, so that a plan
 * naming s0+s1 holds every s0 and submits it unfused when s2 arrives: the
 * cost of a hold, against the same run with fusion off. --read-binary
 * reads the built program's binary, --from-binary also builds a new
 * program from it and runs that (what a cache hit does), before the span.
 * --pause-ms MS sleeps before the span (an application's other work: what
 * a shim does beside it then is not in the span).
 * With --sync chain it also prints the first chain in parts ("first_split
 * l0_us=... l3_us=... finish_us=..."): each launch, then the clFinish.
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
    int sync_each = 1, events = 0, broken = 0, binary = 0, each = 0;
    long pause_ms = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--chains") && i + 1 < argc) chains = atol(argv[++i]);
        else if (!strcmp(argv[i], "--n") && i + 1 < argc) n = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--sync") && i + 1 < argc) sync_each = strcmp(argv[++i], "end") != 0;
        else if (!strcmp(argv[i], "--events")) events = 1;
        else if (!strcmp(argv[i], "--broken")) broken = 1;
        else if (!strcmp(argv[i], "--read-binary")) binary = 1;
        else if (!strcmp(argv[i], "--from-binary")) binary = 2;
        else if (!strcmp(argv[i], "--pause-ms") && i + 1 < argc) pause_ms = atol(argv[++i]);
        else if (!strcmp(argv[i], "--each")) each = 1;
        else {
            fprintf(stderr, "usage: bench_short [--chains C] [--n FLOATS] [--sync chain|end] [--events] [--broken] [--read-binary|--from-binary] [--pause-ms MS] [--each]\n");
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
    if (binary) {
        /* What a cache hit does: the driver's binary read back and loaded
         * (1: read only; 2: a new program from it, built, used below). */
        size_t size = 0;
        BCHECK(clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL));
        unsigned char *bin = malloc(size ? size : 1);
        if (!bin) return 2;
        BCHECK(clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof bin, &bin, NULL));
        if (binary == 2) {
            const unsigned char *cbin = bin;
            cl_int st = CL_SUCCESS;
            clReleaseProgram(prog);
            prog = clCreateProgramWithBinary(ctx, 1, &dev, &size, &cbin, &st, &err);
            BCHECK(err);
            BCHECK(clBuildProgram(prog, 1, &dev, "", NULL, NULL));
        }
        free(bin);
    }
    cl_kernel k[4];
    for (int s = 0; s < 4; s++) {
        char name[16];
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
    if (broken) BCHECK(clSetKernelArg(k[2], 0, sizeof(cl_mem), &b[1])); /* s2 reads what s0 wrote */
    BCHECK(clFinish(q));
    if (pause_ms > 0) nanosleep(&(struct timespec){pause_ms / 1000, pause_ms % 1000 * 1000000L}, NULL);
    double *at = calloc((size_t)chains + 1, sizeof *at); /* the end of each chain, for the split below */
    if (!at) return 2;
    double first_at[5] = {0}; /* chain 0: after each launch, and after its clFinish */
    double t0 = bu_now_ns();
    for (long c = 0; c < chains; c++) {
        for (int s = 0; s < 4; s++) {
            if (broken && s == 1) continue;
            cl_event e = NULL;
            BCHECK(clEnqueueNDRangeKernel(q, k[s], 1, NULL, &n, NULL, 0, NULL, events ? &e : NULL));
            if (e) clReleaseEvent(e);
            if (c == 0) first_at[s] = bu_now_ns();
        }
        if (sync_each) BCHECK(clFinish(q));
        at[c] = bu_now_ns();
        if (c == 0) first_at[4] = at[c];
    }
    BCHECK(clFinish(q));
    double total = bu_now_ns() - t0;
    if (sync_each && chains >= 3) {
        /* Where the time goes: the first chain (the driver's first
         * launches, a shim's first look at each kernel), the second, and
         * the median of the rest (the steady cost of a chain). */
        size_t m = (size_t)chains - 2;
        double *rest = malloc(m * sizeof *rest);
        if (!rest) return 2;
        for (size_t i = 0; i < m; i++) rest[i] = at[i + 2] - at[i + 1];
        for (size_t i = 1; i < m; i++) /* insertion sort: at most a few thousand */
            for (size_t j = i; j > 0 && rest[j - 1] > rest[j]; j--) {
                double t = rest[j];
                rest[j] = rest[j - 1], rest[j - 1] = t;
            }
        printf("split first_us=%.2f second_us=%.2f rest_median_us=%.2f\n", (at[0] - t0) / 1e3, (at[1] - at[0]) / 1e3,
               rest[m / 2] / 1e3);
        /* The first chain's parts: each launch's host time, then its
         * clFinish (where a driver's lazy first-launch work lands). */
        double prev = t0;
        printf("first_split");
        for (int s = 0; s < 5; s++) {
            if (first_at[s] == 0) continue; /* a launch --broken skips */
            printf(" %s_us=%.2f", s < 4 ? (const char *[]){"l0", "l1", "l2", "l3"}[s] : "finish", (first_at[s] - prev) / 1e3);
            prev = first_at[s];
        }
        printf("\n");
        if (each) { /* every chain's time, in order: where a shim's one-off costs land */
            printf("each_us");
            for (long c = 0; c < chains; c++) printf(" %.1f", (at[c] - (c ? at[c - 1] : t0)) / 1e3);
            printf("\n");
        }
        free(rest);
    }
    free(at);
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
