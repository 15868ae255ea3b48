/* fusion_held — a held prefix the application observes without clFlush
 * (issue 33, items 1 and 2). Plain OpenCL: it knows nothing of clshim.
 * tests/integration/test_fusion_held.sh runs it plainly and under a plan
 * naming `first+second` (or CLSHIM_FUSION=auto, which learns that pair from
 * the first --learn occurrences, each ended by a clFinish), and the
 * output must be the same. Each mode enqueues `first` alone — the prefix of
 * the sequence, so clshim holds it — and then waits for it the way the
 * mode names, for at most --timeout-ms, issuing no other OpenCL call:
 *   callback  a CL_COMPLETE callback on its event; sleeps until it fires
 *   poll      clGetEventInfo(CL_EVENT_COMMAND_EXECUTION_STATUS) on its
 *             event until CL_COMPLETE
 *   idle      no event: spins on the buffer `first` writes, created with
 *             CL_MEM_USE_HOST_PTR, which PoCL's CPU device writes in place
 *             (only a bound on how long clshim holds work can end this)
 *   wait      clWaitForEvents on its event (same queue)
 * It prints how the wait ended ("first: complete" or "first: not complete
 * after the timeout", exit 1), then enqueues `second`, clFinishes and
 * prints both buffers; how long the wait took goes to stderr ("waited N
 * ms": it differs from run to run).
 *   printf    `pa` and `pb`, which printf per work-item, back to back
 *             --iterations times over one work-group of 4 (a plan naming
 *             `pa+pb` would interleave their lines per work-item)
 */
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <unistd.h>

#include "common.h"

#define N 1024

static const char *source =
    "__kernel void first(__global float *io) { size_t i = get_global_id(0); io[i] = io[i] * 2.0f + 1.0f; }\n"
    "__kernel void second(__global const float *in, __global float *out) {\n"
    "    size_t i = get_global_id(0); out[i] = in[i] - 0.5f; }\n"
    "__kernel void pa(__global float *io) { size_t i = get_global_id(0); printf(\"pa %u\\n\", (uint)i);\n"
    "    io[i] += 1.0f; }\n"
    "__kernel void pb(__global float *io) { size_t i = get_global_id(0); printf(\"pb %u\\n\", (uint)i);\n"
    "    io[i] *= 3.0f; }\n";

static int fired;

static void CL_CALLBACK on_complete(cl_event e, cl_int status, void *user)
{
    (void)e;
    (void)user;
    __atomic_store_n(&fired, status == CL_COMPLETE ? 1 : -1, __ATOMIC_SEQ_CST);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Kernel `name` of prog with buffers args[0..n) as its arguments. */
static cl_kernel kernel_on(cl_program prog, const char *name, const cl_mem *args, cl_uint n)
{
    cl_int err;
    cl_kernel k = clCreateKernel(prog, name, &err);
    CHECK(err);
    for (cl_uint i = 0; i < n; i++) CHECK(clSetKernelArg(k, i, sizeof args[i], &args[i]));
    return k;
}

static void print_buffer(cl_command_queue q, cl_mem m, const char *what)
{
    float host[N];
    CHECK(clEnqueueReadBuffer(q, m, CL_TRUE, 0, sizeof host, host, 0, NULL, NULL));
    printf("%s %016llx\n", what, (unsigned long long)fnv(host, sizeof host));
}

int main(int argc, char **argv)
{
    const char *mode = "callback";
    int timeout_ms = 5000, learn = 0, iterations = 3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--mode") && i + 1 < argc) mode = argv[++i];
        else if (!strcmp(argv[i], "--timeout-ms") && i + 1 < argc) timeout_ms = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--learn") && i + 1 < argc) learn = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--iterations") && i + 1 < argc) iterations = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s --mode callback|poll|idle|wait|printf [--timeout-ms MS] [--learn N] "
                            "[--iterations N]\n", argv[0]);
            return 2;
        }
    }
    cl_device_id dev;
    cl_context ctx;
    cl_command_queue q;
    cl_int err;
    first_context_queue(&dev, &ctx, &q);
    cl_program prog = built_program(ctx, dev, source);
    /* Page-aligned host memory: PoCL uses it as the buffer's storage. */
    float *host = aligned_alloc(4096, N * sizeof *host);
    for (int i = 0; i < N; i++) host[i] = (float)(i % 13);
    cl_mem a = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, N * sizeof *host, host, &err);
    CHECK(err);
    cl_mem b = clCreateBuffer(ctx, CL_MEM_READ_WRITE, N * sizeof(float), NULL, &err);
    CHECK(err);
    int rc = 0;
    if (!strcmp(mode, "printf")) {
        cl_kernel pa = kernel_on(prog, "pa", &b, 1), pb = kernel_on(prog, "pb", &b, 1);
        size_t gws = 4, lws = 4; /* one work-group: its work-items print in order */
        fflush(stdout);
        for (int it = 0; it < iterations; it++) {
            CHECK(clEnqueueNDRangeKernel(q, pa, 1, NULL, &gws, &lws, 0, NULL, NULL));
            CHECK(clEnqueueNDRangeKernel(q, pb, 1, NULL, &gws, &lws, 0, NULL, NULL));
            CHECK(clFinish(q));
        }
        fflush(stdout);
        CHECK(clReleaseKernel(pa));
        CHECK(clReleaseKernel(pb));
    } else {
        cl_mem ab[2] = {a, b};
        cl_kernel first = kernel_on(prog, "first", ab, 1), second = kernel_on(prog, "second", ab, 2);
        size_t gws = N;
        for (int it = 0; it < learn; it++) { /* the pair, back to back: what automatic fusion learns */
            CHECK(clEnqueueNDRangeKernel(q, first, 1, NULL, &gws, NULL, 0, NULL, NULL));
            CHECK(clEnqueueNDRangeKernel(q, second, 1, NULL, &gws, NULL, 0, NULL, NULL));
            CHECK(clFinish(q));
        }
        /* What `first` will have written to element 1 (1 at first, each run x * 2 + 1). */
        float expect = 1.0f;
        for (int it = 0; it <= learn; it++) expect = expect * 2.0f + 1.0f;
        cl_event ev = NULL;
        int idle = !strcmp(mode, "idle");
        CHECK(clEnqueueNDRangeKernel(q, first, 1, NULL, &gws, NULL, 0, NULL, idle ? NULL : &ev));
        int done = 0;
        double t0 = now_ms();
        if (!strcmp(mode, "callback")) CHECK(clSetEventCallback(ev, CL_COMPLETE, on_complete, NULL));
        while (!done && now_ms() - t0 < timeout_ms) {
            if (!strcmp(mode, "callback")) {
                done = __atomic_load_n(&fired, __ATOMIC_SEQ_CST) == 1;
            } else if (!strcmp(mode, "poll")) {
                cl_int st = CL_QUEUED;
                CHECK(clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL));
                done = st == CL_COMPLETE;
            } else if (!strcmp(mode, "wait")) {
                CHECK(clWaitForEvents(1, &ev));
                done = 1;
            } else if (idle) {
                done = *(volatile float *)&host[1] == expect;
            } else {
                fprintf(stderr, "unknown mode %s\n", mode);
                return 2;
            }
            if (!done) sleep_ms(1);
        }
        fprintf(stderr, "waited %.0f ms\n", now_ms() - t0);
        printf("first: %s\n", done ? "complete" : "not complete after the timeout");
        rc = !done;
        CHECK(clEnqueueNDRangeKernel(q, second, 1, NULL, &gws, NULL, 0, NULL, NULL));
        CHECK(clFinish(q));
        if (ev) CHECK(clReleaseEvent(ev));
        print_buffer(q, a, "a");
        print_buffer(q, b, "b");
        CHECK(clReleaseKernel(first));
        CHECK(clReleaseKernel(second));
    }
    CHECK(clReleaseMemObject(a));
    CHECK(clReleaseMemObject(b));
    free(host);
    CHECK(clReleaseCommandQueue(q));
    CHECK(clReleaseProgram(prog));
    CHECK(clReleaseContext(ctx));
    return rc;
}
