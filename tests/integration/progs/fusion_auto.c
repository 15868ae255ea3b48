/* fusion_auto — kernel chains for automatic fusion (CLSHIM_FUSION=auto).
 * Plain OpenCL: it knows nothing of clshim, so a run under the shim must
 * print exactly what a plain run prints (results as exact bit patterns).
 *   fusion_auto --mode M [--iterations N] [--n N] [--loaded LIB]
 * --loaded LIB: at exit, "loaded LIB: yes" or "no" on standard error, as
 * this process's memory maps say (whether clshim loaded a library here).
 * Every iteration sets the arguments, enqueues its kernels back to back and
 * ends with clFinish; after the last one every buffer is printed.
 * Modes:
 *   chain4   k1..k4, pointwise: in -> t1 -> t2 -> t3 -> out (fusable)
 *   stencil  k1 then blur, which reads its neighbours in t1 (needs a barrier)
 *   alias    k1 then k2 on two sub-buffers of one parent (they may alias)
 *   unalias  as alias for the first 4 iterations, then k1 then k2 on two
 *            separate buffers (the aliasing has passed)
 *   sync     k1, clFinish, k2, clFinish, k3, k4 (the chain broken by syncs)
 *   waitmid  k1, clWaitForEvents on k1's event, k2, k3 (a host wait
 *            splits the chain as a clFinish would)
 *   pairs    k1 k2 k1 k2 ... without syncs in between (the run's period
 *            is learned: k1+k2)
 *   steps    k1 k1 k2 k3 per iteration without syncs in between: the
 *            step's first kernel recurs inside it (as PyOpenCL's array
 *            expressions do), its period is still the whole step
 *   expr     k1 k1 k2 k1 k2 k3 per iteration without syncs in between, as
 *            PyOpenCL's `y = s*x + c; z = y*y - 0.5; w = z*y + x` (k1+k2
 *            runs twice back to back inside the step)
 *   exprblocks  as expr, after one k3 before the first iteration, with a
 *            clFinish after every 10th: the run's period is first found
 *            from the k3 on (k3+k1+k1+k2+k1+k2), and from a block's start
 *            on (k1 first) whenever the learned one is not held
 *   events   k1 k2 k3 per iteration without syncs (a clFinish after every
 *            50th), each waiting for the kernel before it, the previous
 *            iteration's k3 included, and asking for an event it releases
 *            once the next enqueue named it, as PyOpenCL's arrays do: the
 *            wait lists of held kernels name events of launches fused
 *            before, which only clshim still holds and which complete on
 *            the driver's thread while the next fused launch is made
 *   windows  k1 k2 blur k3 k4, clFinish: refused whole (blur reads k2's
 *            output around its own index), its windows k1+k2 and
 *            blur+k3+k4 fuse
 *   broken   k1 k2 in the first 2 iterations (learned), then k1 blur: the
 *            learned k1+k2 is broken off wherever it is held
 *   recreate k1 k2 k3 from kernel objects created for the iteration and
 *            released after its clFinish (the driver may hand the next
 *            ones the same handles)
 *   release  k1 k2 from kernel objects created for the iteration, each
 *            released right after its enqueue (as CLBlast does), both
 *            behind a user event set after the releases
 */
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <stdint.h>

#include "common.h"

static const char *source =
    "__kernel void k1(__global const float *in, __global float *out, float a) {\n"
    "    size_t i = get_global_id(0); out[i] = in[i] * a + 1.0f; }\n"
    "__kernel void k2(__global const float *in, __global float *out, float a) {\n"
    "    size_t i = get_global_id(0); out[i] = in[i] * in[i] - a; }\n"
    "__kernel void k3(__global const float *in, __global float *out, float a) {\n"
    "    size_t i = get_global_id(0); out[i] = sqrt(fabs(in[i])) + a; }\n"
    "__kernel void k4(__global const float *in, __global float *out, float a) {\n"
    "    size_t i = get_global_id(0); out[i] = in[i] / (1.0f + a * in[i] * in[i]); }\n"
    "__kernel void blur(__global const float *in, __global float *out, float a) {\n"
    "    size_t i = get_global_id(0), n = get_global_size(0);\n"
    "    out[i] = a * (in[i > 0 ? i - 1 : i] + in[i] + in[i + 1 < n ? i + 1 : i]); }\n";

static cl_context ctx;
static cl_device_id dev;
static cl_command_queue q;
static cl_program prog;
static size_t n_elems = 4096;

static cl_kernel kernel(const char *name)
{
    cl_int err;
    cl_kernel k = clCreateKernel(prog, name, &err);
    CHECK(err);
    return k;
}

static cl_mem buffer(size_t n, unsigned seed)
{
    float *h = malloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++) h[i] = (float)((i * 2654435761u + seed) % 1000) / 250.0f - 2.0f;
    cl_int err;
    cl_mem m = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, n * sizeof *h, h, &err);
    CHECK(err);
    free(h);
    return m;
}

/* Prints a buffer: an FNV-1a hash of its bytes and three values as bits. */
static void report(cl_mem m, size_t n, const char *what)
{
    float *h = malloc(n * sizeof *h);
    CHECK(clEnqueueReadBuffer(q, m, CL_TRUE, 0, n * sizeof *h, h, 0, NULL, NULL));
    uint64_t x = 1469598103934665603ULL;
    const unsigned char *p = (const unsigned char *)h;
    for (size_t i = 0; i < n * sizeof *h; i++) x = (x ^ p[i]) * 1099511628211ULL;
    printf("%s %016llx %a %a %a\n", what, (unsigned long long)x, h[0], h[n / 2], h[n - 1]);
    free(h);
}

/* Sets k's arguments and enqueues it after *wait (when not NULL, then
 * released and replaced by k's event). */
static void run_after(cl_kernel k, cl_mem in, cl_mem out, float a, size_t n, cl_event *wait)
{
    CHECK(clSetKernelArg(k, 0, sizeof in, &in));
    CHECK(clSetKernelArg(k, 1, sizeof out, &out));
    CHECK(clSetKernelArg(k, 2, sizeof a, &a));
    cl_event ev = NULL;
    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &n, NULL, *wait ? 1 : 0, *wait ? wait : NULL, &ev));
    if (*wait) CHECK(clReleaseEvent(*wait));
    *wait = ev;
}

/* Sets k's arguments and enqueues it; its event in *ev when not NULL. */
static void run_ev(cl_kernel k, cl_mem in, cl_mem out, float a, size_t n, cl_event *ev)
{
    CHECK(clSetKernelArg(k, 0, sizeof in, &in));
    CHECK(clSetKernelArg(k, 1, sizeof out, &out));
    CHECK(clSetKernelArg(k, 2, sizeof a, &a));
    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &n, NULL, 0, NULL, ev));
}

static void run(cl_kernel k, cl_mem in, cl_mem out, float a, size_t n) { run_ev(k, in, out, a, n, NULL); }

int main(int argc, char **argv)
{
    const char *loaded = NULL;
    const char *mode = "chain4";
    int iters = 6;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--mode") && i + 1 < argc) mode = argv[++i];
        else if (!strcmp(argv[i], "--iterations") && i + 1 < argc) iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--n") && i + 1 < argc) n_elems = (size_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "--loaded") && i + 1 < argc) loaded = argv[++i];
        else {
            fprintf(stderr, "usage: fusion_auto --mode chain4|stencil|alias|unalias|sync|waitmid|pairs|steps|expr|exprblocks|events|windows|broken|recreate|release "
                            "[--iterations N] [--n N] [--loaded LIB]\n");
            return 2;
        }
    }
    cl_int err;
    first_context_queue(&dev, &ctx, &q);
    prog = clCreateProgramWithSource(ctx, 1, &source, NULL, &err);
    CHECK(err);
    CHECK(clBuildProgram(prog, 1, &dev, NULL, NULL, NULL));
    cl_kernel k1 = kernel("k1"), k2 = kernel("k2"), k3 = kernel("k3"), k4 = kernel("k4"), blur = kernel("blur");
    size_t n = n_elems;
    cl_mem in = buffer(n, 7), t1 = buffer(n, 11), t2 = buffer(n, 13), t3 = buffer(n, 17), out = buffer(n, 19);
    cl_mem parent = NULL, lo = NULL, hi = NULL;
    if (!strcmp(mode, "alias") || !strcmp(mode, "unalias")) { /* two halves of one parent, 4 KiB aligned */
        parent = buffer(2 * n, 23);
        cl_buffer_region r0 = {0, n * sizeof(float)}, r1 = {n * sizeof(float), n * sizeof(float)};
        lo = clCreateSubBuffer(parent, 0, CL_BUFFER_CREATE_TYPE_REGION, &r0, &err);
        CHECK(err);
        hi = clCreateSubBuffer(parent, 0, CL_BUFFER_CREATE_TYPE_REGION, &r1, &err);
        CHECK(err);
    }
    for (int it = 0; it < iters; it++) {
        float a = 0.5f + 0.125f * (float)it;
        if (!strcmp(mode, "chain4")) {
            run(k1, in, t1, a, n);
            run(k2, t1, t2, a, n);
            run(k3, t2, t3, a, n);
            run(k4, t3, out, a, n);
        } else if (!strcmp(mode, "stencil")) {
            run(k1, in, t1, a, n);
            run(blur, t1, out, a, n);
        } else if (!strcmp(mode, "alias")) {
            run(k1, in, lo, a, n);
            run(k2, lo, hi, a, n);
        } else if (!strcmp(mode, "unalias")) {
            run(k1, in, it < 4 ? lo : t1, a, n);
            run(k2, it < 4 ? lo : t1, it < 4 ? hi : t2, a, n);
        } else if (!strcmp(mode, "waitmid")) {
            cl_event e1;
            run_ev(k1, in, t1, a, n, &e1);
            CHECK(clWaitForEvents(1, &e1));
            CHECK(clReleaseEvent(e1));
            run(k2, t1, t2, a, n);
            run(k3, t2, t3, a, n);
        } else if (!strcmp(mode, "sync")) {
            run(k1, in, t1, a, n);
            CHECK(clFinish(q));
            run(k2, t1, t2, a, n);
            CHECK(clFinish(q));
            run(k3, t2, t3, a, n);
            run(k4, t3, out, a, n);
        } else if (!strcmp(mode, "release")) {
            /* Both wait for a user event until both are released, so the
             * driver still has them at each release (as a library's
             * kernels on a busy device), however fast this device is. */
            cl_event gate = clCreateUserEvent(ctx, &err);
            CHECK(err);
            cl_kernel f1 = kernel("k1");
            cl_event wait = gate;
            CHECK(clRetainEvent(gate));
            run_after(f1, in, t1, a, n, &wait);
            CHECK(clReleaseKernel(f1));
            cl_kernel f2 = kernel("k2");
            run_after(f2, t1, t2, a, n, &wait);
            CHECK(clReleaseKernel(f2));
            CHECK(clSetUserEventStatus(gate, CL_COMPLETE));
            CHECK(clReleaseEvent(gate));
            CHECK(clReleaseEvent(wait));
        } else if (!strcmp(mode, "recreate")) {
            cl_kernel f1 = kernel("k1"), f2 = kernel("k2"), f3 = kernel("k3");
            run(f1, in, t1, a, n);
            run(f2, t1, t2, a, n);
            run(f3, t2, t3, a, n);
            CHECK(clFinish(q));
            CHECK(clReleaseKernel(f1));
            CHECK(clReleaseKernel(f2));
            CHECK(clReleaseKernel(f3));
        } else if (!strcmp(mode, "steps")) {
            run(k1, in, t1, a, n);
            run(k1, t1, t2, a, n);
            run(k2, t2, t3, a, n);
            run(k3, t3, out, a, n);
            if (it + 1 < iters) continue; /* no sync between iterations */
        } else if (!strcmp(mode, "expr") || !strcmp(mode, "exprblocks")) {
            int blocks = !strcmp(mode, "exprblocks");
            if (blocks && it == 0) run(k3, t2, out, a, n);
            run(k1, in, t1, a, n);
            run(k1, t1, t2, a, n);
            run(k2, t2, t3, a, n);
            run(k1, t3, t1, a, n);
            run(k2, t1, t2, a, n);
            run(k3, t2, out, a, n);
            if (it + 1 < iters && (!blocks || (it + 1) % 10)) continue; /* no sync between iterations */
        } else if (!strcmp(mode, "events")) {
            static cl_event last;
            run_after(k1, in, t1, a, n, &last);
            run_after(k2, t1, t2, a, n, &last);
            run_after(k3, t2, out, a, n, &last);
            if (it + 1 == iters) CHECK(clReleaseEvent(last));
            if (it + 1 < iters && (it + 1) % 50) continue; /* no sync between iterations */
        } else if (!strcmp(mode, "windows")) {
            run(k1, in, t1, a, n);
            run(k2, t1, t2, a, n);
            run(blur, t2, t3, a, n);
            run(k3, t3, out, a, n);
            run(k4, out, t1, a, n);
        } else if (!strcmp(mode, "broken")) {
            run(k1, in, t1, a, n);
            if (it < 2) run(k2, t1, t2, a, n);
            else run(blur, t1, out, a, n);
        } else if (!strcmp(mode, "pairs")) {
            run(k1, in, t1, a, n);
            run(k2, t1, t2, a, n);
            if (it + 1 < iters) continue; /* no sync between iterations */
        } else {
            fprintf(stderr, "unknown mode %s\n", mode);
            return 2;
        }
        CHECK(clFinish(q));
    }
    CHECK(clFinish(q));
    report(in, n, "in");
    report(t1, n, "t1");
    report(t2, n, "t2");
    report(t3, n, "t3");
    report(out, n, "out");
    if (parent) report(parent, 2 * n, "parent");
    if (loaded) {
        FILE *maps = fopen("/proc/self/maps", "r");
        char line[4096];
        int found = 0;
        while (maps && fgets(line, sizeof line, maps)) found |= strstr(line, loaded) != NULL;
        if (maps) fclose(maps);
        fprintf(stderr, "loaded %s: %s\n", loaded, found ? "yes" : "no");
    }
    return 0;
}
