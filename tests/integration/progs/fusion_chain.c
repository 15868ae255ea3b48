/* fusion_chain — elementwise kernel chains for the fusion tests. Plain
 * OpenCL: it knows nothing of clshim, so a run under a fusion plan must
 * print exactly what a run without the shim prints (results as exact bit
 * patterns). Diagnostics that may differ go to stderr.
 *   fusion_chain --mode M [--iterations N] [--n N] [--options "BUILD OPTIONS"]
 * With --options the program is built with them and prints what
 * CL_PROGRAM_BUILD_OPTIONS answers (clshim must answer the same).
 * --il FILE creates the program from that SPIR-V (the kernels below, made
 * by the test with --print-source, clang-15 and llvm-spirv-15).
 * Modes (each runs the chain `offset -> scale -> square` or a variant):
 *   chain     the 3-kernel chain back to back, events chained
 *   sync      clFinish between the first and second kernel
 *   events    held events: waited for, status-queried, with callbacks
 *             (one registered mid-sequence and waited for without a flush),
 *             profiled, and in another queue's wait list
 *   setarg    clSetKernelArg after the enqueue (the held snapshot counts)
 *   sizes     the kernels over different global sizes
 *   vary      the chain relaunched with the same arguments, other buffers,
 *             another scalar, and an in-place (aliased) step in turn
 *   elide     one buffer and one scalar passed to several parameters
 *   barrier   a chain that needs a barrier (shifted read)
 *   ranges    pairs no fusion can take, for the plan
 *             "offset+scale;square+other;other+shifted": different local
 *             sizes, a 2-D launch with a local size before a 1-D one, a
 *             shifted read (needs a barrier); prints llvm-mapped= as maps
 *   threads   two threads, two queues, the chain at once
 *   release   a buffer of a held kernel is released mid-sequence
 *   maps      print to stderr whether libclshim-llvm.so is mapped
 */
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <pthread.h>
#include <stdint.h>

#include "common.h"

static const char *source =
    "__kernel void offset(__global const float *in, __global float *out, float t) {\n"
    "    size_t i = get_global_id(0); out[i] = in[i] + t; }\n"
    "__kernel void scale(__global const float *in, __global float *out, float s) {\n"
    "    size_t i = get_global_id(0); out[i] = in[i] * s; }\n"
    "__kernel void square(__global float *io) {\n"
    "    size_t i = get_global_id(0); io[i] = io[i] * io[i]; }\n"
    "__kernel void blend(__global const float *a, __global const float *b, __global float *out, float s, float t) {\n"
    "    size_t i = get_global_id(0); out[i] = (a[i] - b[i]) * s - t; }\n"
    "__kernel void shifted(__global const float *in, __global float *out) {\n"
    "    size_t i = get_global_id(0); out[i] = in[i + 1 < get_global_size(0) ? i + 1 : i]; }\n"
    "__kernel void other(__global float *io) {\n"
    "    size_t i = get_global_id(0); io[i] = io[i] - 1.0f; }\n";

static cl_context ctx;
static cl_device_id dev;
static cl_program prog;
static size_t n_elems = 4096;

struct chain {
    cl_command_queue q;
    cl_kernel koff, kscale, ksq, kmix, kshift, kother;
    cl_mem a, b, c, d;
};

static cl_kernel kernel(const char *name)
{
    cl_int err;
    cl_kernel k = clCreateKernel(prog, name, &err);
    CHECK(err);
    return k;
}

static cl_mem buffer(unsigned seed)
{
    return seeded_float_buffer(ctx, n_elems, seed);
}

static void chain_init(struct chain *c, unsigned seed)
{
    cl_int err;
    c->q = clCreateCommandQueue(ctx, dev, CL_QUEUE_PROFILING_ENABLE, &err);
    CHECK(err);
    c->koff = kernel("offset");
    c->kscale = kernel("scale");
    c->ksq = kernel("square");
    c->kmix = kernel("blend");
    c->kshift = kernel("shifted");
    c->kother = kernel("other");
    c->a = buffer(seed);
    c->b = buffer(seed + 1);
    c->c = buffer(seed + 2);
    c->d = buffer(seed + 3);
}

static void chain_free(struct chain *c)
{
    clReleaseKernel(c->koff);
    clReleaseKernel(c->kscale);
    clReleaseKernel(c->ksq);
    clReleaseKernel(c->kmix);
    clReleaseKernel(c->kshift);
    clReleaseKernel(c->kother);
    clReleaseMemObject(c->a);
    clReleaseMemObject(c->b);
    clReleaseMemObject(c->c);
    clReleaseMemObject(c->d);
    clReleaseCommandQueue(c->q);
}

static void set_mem(cl_kernel k, cl_uint i, cl_mem m) { CHECK(clSetKernelArg(k, i, sizeof m, &m)); }
static void set_f(cl_kernel k, cl_uint i, float v) { CHECK(clSetKernelArg(k, i, sizeof v, &v)); }

static void launch(cl_command_queue q, cl_kernel k, size_t gws, cl_uint nw, const cl_event *wl, cl_event *ev)
{
    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &gws, NULL, nw, wl, ev));
}

static void report(struct chain *c, cl_mem m, const char *what)
{
    print_float_buffer(c->q, m, n_elems, what);
}

/* offset(a -> b, t), scale(b -> c, s), square(c) */
static void args_chain(struct chain *c, float t, float s)
{
    set_mem(c->koff, 0, c->a);
    set_mem(c->koff, 1, c->b);
    set_f(c->koff, 2, t);
    set_mem(c->kscale, 0, c->b);
    set_mem(c->kscale, 1, c->c);
    set_f(c->kscale, 2, s);
    set_mem(c->ksq, 0, c->c);
}

static void run_chain(struct chain *c, int iters, const char *tag)
{
    for (int it = 0; it < iters; it++) {
        args_chain(c, 1.5f + (float)it, 0.75f);
        cl_event e[3];
        launch(c->q, c->koff, n_elems, 0, NULL, &e[0]);
        launch(c->q, c->kscale, n_elems, 1, &e[0], &e[1]);
        launch(c->q, c->ksq, n_elems, 1, &e[1], &e[2]);
        CHECK(clWaitForEvents(1, &e[2]));
        for (int i = 0; i < 3; i++) CHECK(clReleaseEvent(e[i]));
        char what[64];
        snprintf(what, sizeof what, "%s[%d]", tag, it);
        report(c, c->c, what);
    }
}

static void mode_sync(struct chain *c, int iters)
{
    for (int it = 0; it < iters; it++) {
        args_chain(c, 2.0f, 1.25f + (float)it);
        launch(c->q, c->koff, n_elems, 0, NULL, NULL);
        CHECK(clFinish(c->q));
        launch(c->q, c->kscale, n_elems, 0, NULL, NULL);
        launch(c->q, c->ksq, n_elems, 0, NULL, NULL);
        report(c, c->c, "sync");
    }
}

static int callbacks_done;
static void CL_CALLBACK on_done(cl_event e, cl_int status, void *user)
{
    (void)e;
    (void)user;
    if (status == CL_COMPLETE) __atomic_add_fetch(&callbacks_done, 1, __ATOMIC_SEQ_CST);
}

/* The chain offset, scale, square (arguments 0.5, 3), an event each. */
static void chain_with_events(struct chain *c, cl_event e[3])
{
    args_chain(c, 0.5f, 3.0f);
    launch(c->q, c->koff, n_elems, 0, NULL, &e[0]);
    launch(c->q, c->kscale, n_elems, 0, NULL, &e[1]);
    launch(c->q, c->ksq, n_elems, 0, NULL, &e[2]);
}

/* --mode profile: the chain with an event each, finished, then its events'
 * profiling read (nothing else touches them, so a plan fuses the chain):
 * on an in-order queue each command starts after the one before ended. */
static void mode_profile(struct chain *c, int iters)
{
    for (int it = 0; it < iters; it++) {
        cl_event e[3];
        chain_with_events(c, e);
        CHECK(clFinish(c->q));
        cl_ulong prev_end = 0;
        for (int i = 0; i < 3; i++) {
            cl_ulong tq = 0, ts = 0, t0 = 0, t1 = 0;
            CHECK(clGetEventProfilingInfo(e[i], CL_PROFILING_COMMAND_QUEUED, sizeof tq, &tq, NULL));
            CHECK(clGetEventProfilingInfo(e[i], CL_PROFILING_COMMAND_SUBMIT, sizeof ts, &ts, NULL));
            CHECK(clGetEventProfilingInfo(e[i], CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL));
            CHECK(clGetEventProfilingInfo(e[i], CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL));
            printf("profile %d: queued<=submit<=start<=end %d, after the one before %d\n", i,
                   tq <= ts && ts <= t0 && t0 <= t1 && t0 > 0, t0 >= prev_end);
            prev_end = t1;
            CHECK(clReleaseEvent(e[i]));
        }
        report(c, c->c, "profile");
    }
}

static void mode_events(struct chain *c, int iters)
{
    cl_int err;
    cl_command_queue q2 = clCreateCommandQueue(ctx, dev, 0, &err);
    CHECK(err);
    for (int it = 0; it < iters; it++) {
        /* 1. a complete sequence; its events waited for, queried, called back. */
        cl_event e[3];
        chain_with_events(c, e);
        for (int i = 0; i < 3; i++) CHECK(clSetEventCallback(e[i], CL_COMPLETE, on_done, NULL));
        CHECK(clWaitForEvents(3, e));
        for (int i = 0; i < 3; i++) {
            cl_int st = 1;
            cl_command_type type = 0;
            cl_command_queue eq = NULL;
            CHECK(clGetEventInfo(e[i], CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL));
            CHECK(clGetEventInfo(e[i], CL_EVENT_COMMAND_TYPE, sizeof type, &type, NULL));
            CHECK(clGetEventInfo(e[i], CL_EVENT_COMMAND_QUEUE, sizeof eq, &eq, NULL));
            cl_ulong t0 = 0, t1 = 0;
            CHECK(clGetEventProfilingInfo(e[i], CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL));
            CHECK(clGetEventProfilingInfo(e[i], CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL));
            printf("event %d: status %d type %#x own-queue %d profile-ordered %d\n", i, st, (unsigned)type,
                   eq == c->q, t1 >= t0 && t0 > 0);
        }
        report(c, c->c, "events-waited");
        for (int i = 0; i < 3; i++) CHECK(clReleaseEvent(e[i]));

        /* 2. a held event in another queue's wait list, mid-sequence. */
        args_chain(c, 1.0f, -2.0f);
        set_mem(c->kother, 0, c->b);
        launch(c->q, c->koff, n_elems, 0, NULL, &e[0]);
        launch(c->q, c->kscale, n_elems, 0, NULL, &e[1]);
        launch(q2, c->kother, n_elems, 1, &e[1], &e[2]); /* waits for scale's work, on q2 */
        CHECK(clWaitForEvents(1, &e[2]));
        launch(c->q, c->ksq, n_elems, 0, NULL, NULL);
        report(c, c->c, "events-other-queue-c");
        report(c, c->b, "events-other-queue-b");
        for (int i = 0; i < 3; i++) CHECK(clReleaseEvent(e[i]));

        /* 3. a status query on a held event, mid-sequence. */
        args_chain(c, 4.0f, 0.5f);
        launch(c->q, c->koff, n_elems, 0, NULL, &e[0]);
        cl_int st = 1;
        do CHECK(clGetEventInfo(e[0], CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL));
        while (st > CL_COMPLETE);
        printf("polled status %d\n", st);
        launch(c->q, c->kscale, n_elems, 0, NULL, NULL);
        launch(c->q, c->ksq, n_elems, 0, NULL, NULL);
        report(c, c->c, "events-polled");
        CHECK(clReleaseEvent(e[0]));

        /* 4. a callback registered on a held event, mid-sequence, waited for
         *    without a flush (the plain driver runs the kernel). */
        args_chain(c, -1.0f, 2.5f);
        launch(c->q, c->koff, n_elems, 0, NULL, &e[0]);
        int before = __atomic_load_n(&callbacks_done, __ATOMIC_SEQ_CST);
        CHECK(clSetEventCallback(e[0], CL_COMPLETE, on_done, NULL));
        for (int spin = 0; spin < 5000 && __atomic_load_n(&callbacks_done, __ATOMIC_SEQ_CST) == before; spin++) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
        printf("callback before the rest: %d\n", __atomic_load_n(&callbacks_done, __ATOMIC_SEQ_CST) > before);
        launch(c->q, c->kscale, n_elems, 0, NULL, NULL);
        launch(c->q, c->ksq, n_elems, 0, NULL, NULL);
        report(c, c->c, "events-called-back");
        CHECK(clReleaseEvent(e[0]));
    }
    CHECK(clFinish(q2));
    CHECK(clReleaseCommandQueue(q2));
    /* Callbacks may run on a driver thread after the wait returns. */
    for (int spin = 0; spin < 2000 && __atomic_load_n(&callbacks_done, __ATOMIC_SEQ_CST) < 4 * iters; spin++) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    printf("callbacks %d\n", __atomic_load_n(&callbacks_done, __ATOMIC_SEQ_CST));
}

static void mode_setarg(struct chain *c, int iters)
{
    for (int it = 0; it < iters; it++) {
        args_chain(c, 1.0f, 2.0f);
        launch(c->q, c->koff, n_elems, 0, NULL, NULL);
        set_f(c->koff, 2, 100.0f);       /* after the enqueue: not for the launch above */
        set_mem(c->koff, 1, c->d);
        launch(c->q, c->kscale, n_elems, 0, NULL, NULL);
        set_f(c->kscale, 2, -1.0f);
        launch(c->q, c->ksq, n_elems, 0, NULL, NULL);
        report(c, c->c, "setarg-chain");
        /* The new arguments count for the next enqueue. */
        launch(c->q, c->koff, n_elems, 0, NULL, NULL);
        CHECK(clFinish(c->q));
        report(c, c->d, "setarg-after");
    }
}

static void mode_sizes(struct chain *c, int iters)
{
    for (int it = 0; it < iters; it++) {
        args_chain(c, 3.0f, 0.5f);
        launch(c->q, c->koff, n_elems, 0, NULL, NULL);
        launch(c->q, c->kscale, n_elems / 2, 0, NULL, NULL);
        launch(c->q, c->ksq, n_elems / 4 * 3, 0, NULL, NULL);
        report(c, c->b, "sizes-b");
        report(c, c->c, "sizes-c");
    }
}

/* Relaunches of one sequence that repeat the last launch exactly or differ
 * from it: clshim reuses the last fused launch only for an exact repeat. */
static void mode_vary(struct chain *c, int iters)
{
    for (int it = 0; it < iters; it++) {
        for (int v = 0; v < 6; v++) {
            cl_mem in = c->a, mid = c->b, out = c->c;
            float t = 2.0f, s = 0.5f;
            if (v == 2) in = c->c, mid = c->d, out = c->a;  /* other buffers, same pattern */
            if (v == 3) t = -1.25f;                          /* another scalar */
            if (v == 4) out = mid;                           /* scale in place: b -> b */
            set_mem(c->koff, 0, in);
            set_mem(c->koff, 1, mid);
            set_f(c->koff, 2, t);
            set_mem(c->kscale, 0, mid);
            set_mem(c->kscale, 1, out);
            set_f(c->kscale, 2, s);
            set_mem(c->ksq, 0, out);
            launch(c->q, c->koff, n_elems, 0, NULL, NULL);
            launch(c->q, c->kscale, n_elems, 0, NULL, NULL);
            launch(c->q, c->ksq, n_elems, 0, NULL, NULL);
            char what[32];
            snprintf(what, sizeof what, "vary[%d]", v);
            report(c, out, what);
        }
    }
}

/* Fused relaunches with the arguments unchanged three times in a row (the
 * second repeats the first; from the third on clshim knows the fused
 * kernel already holds them and compares nothing), then after
 * clSetKernelArg on the original kernels: another scalar, another buffer,
 * and a buffer released and replaced by a new one with other contents,
 * which the driver may give the released one's handle (said on stderr). */
static void mode_relaunch(struct chain *c, int iters)
{
    for (int it = 0; it < iters; it++) {
        cl_mem in = buffer(50 + (unsigned)it);
        for (int v = 0; v < 4; v++) {
            float t = v == 1 ? -2.5f : 1.5f;
            cl_mem mid = v >= 2 ? c->d : c->b; /* v = 3: the argument bytes of v = 2 */
            if (v == 3) {
                /* Nothing in flight holds it, so the release frees it on
                 * this thread; a few more buffers, the first with its handle
                 * kept, since the allocator may return another block first. */
                CHECK(clFinish(c->q));
                cl_mem old = in, spare[9];
                int nspare = 0;
                CHECK(clReleaseMemObject(in));
                in = buffer(70 + (unsigned)it);
                while (in != old && nspare < 8) {
                    spare[nspare++] = in;
                    in = buffer(70 + (unsigned)it);
                }
                if (in != old) { /* not reused: take the first, as before */
                    spare[nspare++] = in;
                    in = spare[0];
                    spare[0] = spare[--nspare];
                }
                for (int i = 0; i < nspare; i++) CHECK(clReleaseMemObject(spare[i]));
                if (in == old) fprintf(stderr, "relaunch: the new buffer has the released one's handle\n");
            }
            for (int r = 0; r < 3; r++) {
                set_mem(c->koff, 0, in);
                set_mem(c->koff, 1, mid);
                set_f(c->koff, 2, t);
                set_mem(c->kscale, 0, mid);
                set_mem(c->kscale, 1, c->c);
                set_f(c->kscale, 2, 0.5f);
                set_mem(c->ksq, 0, c->c);
                launch(c->q, c->koff, n_elems, 0, NULL, NULL);
                launch(c->q, c->kscale, n_elems, 0, NULL, NULL);
                launch(c->q, c->ksq, n_elems, 0, NULL, NULL);
                char what[48];
                snprintf(what, sizeof what, "relaunch[%d][%d][%d]", it, v, r);
                report(c, c->c, what);
            }
        }
        CHECK(clReleaseMemObject(in));
    }
}

static void mode_elide(struct chain *c, int iters)
{
    for (int it = 0; it < iters; it++) {
        /* mix(a, a, b, s, s): one buffer and one scalar twice; then
         * offset(b -> c, s), square(c): s again. */
        float s = 1.5f;
        set_mem(c->kmix, 0, c->a);
        set_mem(c->kmix, 1, c->a);
        set_mem(c->kmix, 2, c->b);
        set_f(c->kmix, 3, s);
        set_f(c->kmix, 4, s);
        set_mem(c->koff, 0, c->b);
        set_mem(c->koff, 1, c->c);
        set_f(c->koff, 2, s);
        set_mem(c->ksq, 0, c->c);
        launch(c->q, c->kmix, n_elems, 0, NULL, NULL);
        launch(c->q, c->koff, n_elems, 0, NULL, NULL);
        launch(c->q, c->ksq, n_elems, 0, NULL, NULL);
        report(c, c->c, "elide");
    }
}

/* other(b) over half the range, then shifted(b -> c): shifted reads b at
 * another work-item's index, so fusing needs a barrier, and a barrier is
 * never allowed in a guarded (smaller) body: even a forcing plan fails. */
static void mode_barrier(struct chain *c, int iters)
{
    for (int it = 0; it < iters; it++) {
        set_mem(c->kother, 0, c->b);
        set_mem(c->kshift, 0, c->b);
        set_mem(c->kshift, 1, c->c);
        launch(c->q, c->kother, n_elems / 2, 0, NULL, NULL);
        launch(c->q, c->kshift, n_elems, 0, NULL, NULL);
        report(c, c->c, "barrier");
    }
}

static void mode_ranges(struct chain *c, int iters)
{
    for (int it = 0; it < iters; it++) {
        args_chain(c, 0.25f, 1.5f + (float)it);
        size_t l64 = 64, l128 = 128, g2[2] = {n_elems, 1}, l2[2] = {64, 1};
        CHECK(clEnqueueNDRangeKernel(c->q, c->koff, 1, NULL, &n_elems, &l64, 0, NULL, NULL));
        CHECK(clEnqueueNDRangeKernel(c->q, c->kscale, 1, NULL, &n_elems, &l128, 0, NULL, NULL));
        set_mem(c->kother, 0, c->c);
        CHECK(clEnqueueNDRangeKernel(c->q, c->ksq, 2, NULL, g2, l2, 0, NULL, NULL));
        launch(c->q, c->kother, n_elems, 0, NULL, NULL);
        set_mem(c->kother, 0, c->b);
        set_mem(c->kshift, 0, c->b);
        set_mem(c->kshift, 1, c->d);
        launch(c->q, c->kother, n_elems, 0, NULL, NULL);
        launch(c->q, c->kshift, n_elems, 0, NULL, NULL);
        report(c, c->c, "ranges-c");
        report(c, c->d, "ranges-d");
    }
}

static void mode_release(struct chain *c, int iters)
{
    for (int it = 0; it < iters; it++) {
        cl_mem tmp = buffer(99);
        set_mem(c->koff, 0, c->a);
        set_mem(c->koff, 1, tmp);
        set_f(c->koff, 2, 1.0f);
        set_mem(c->kscale, 0, tmp);
        set_mem(c->kscale, 1, c->c);
        set_f(c->kscale, 2, 2.0f);
        launch(c->q, c->koff, n_elems, 0, NULL, NULL);
        launch(c->q, c->kscale, n_elems, 0, NULL, NULL);
        CHECK(clReleaseMemObject(tmp)); /* the held kernels still use it */
        set_mem(c->ksq, 0, c->c);
        launch(c->q, c->ksq, n_elems, 0, NULL, NULL);
        report(c, c->c, "release");
    }
}

struct thread_job {
    struct chain c;
    int iters;
    unsigned seed;
    char out[16][160];
};

static void *thread_main(void *arg)
{
    struct thread_job *j = arg;
    for (int it = 0; it < j->iters && it < 16; it++) {
        args_chain(&j->c, (float)j->seed + (float)it, 0.5f);
        launch(j->c.q, j->c.koff, n_elems, 0, NULL, NULL);
        launch(j->c.q, j->c.kscale, n_elems, 0, NULL, NULL);
        launch(j->c.q, j->c.ksq, n_elems, 0, NULL, NULL);
        float *h = malloc(n_elems * sizeof *h);
        CHECK(clEnqueueReadBuffer(j->c.q, j->c.c, CL_TRUE, 0, n_elems * sizeof *h, h, 0, NULL, NULL));
        uint64_t x = 1469598103934665603ULL;
        const unsigned char *p = (const unsigned char *)h;
        for (size_t i = 0; i < n_elems * sizeof *h; i++) x = (x ^ p[i]) * 1099511628211ULL;
        snprintf(j->out[it], sizeof j->out[it], "thread %u[%d]: %016llx %a", j->seed, it, (unsigned long long)x,
                 h[7]);
        free(h);
    }
    return NULL;
}

static void mode_threads(int iters)
{
    struct thread_job jobs[2];
    pthread_t t[2];
    for (int i = 0; i < 2; i++) {
        memset(&jobs[i], 0, sizeof jobs[i]);
        chain_init(&jobs[i].c, 10u + 7u * (unsigned)i);
        jobs[i].iters = iters;
        jobs[i].seed = (unsigned)i + 1;
    }
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, thread_main, &jobs[i]);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < 2; i++) {
        for (int it = 0; it < iters && it < 16; it++) printf("%s\n", jobs[i].out[it]);
        chain_free(&jobs[i].c);
    }
}

static int llvm_mapped(void)
{
    FILE *f = fopen("/proc/self/maps", "r"); /* size 0 to stat: read it by lines */
    char line[4096];
    int found = 0;
    while (f && fgets(line, sizeof line, f)) found |= strstr(line, "libclshim-llvm.so") != NULL;
    if (f) fclose(f);
    return found;
}

int main(int argc, char **argv)
{
    const char *mode = "chain", *options = NULL, *il_file = NULL;
    int iters = 3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--mode") && i + 1 < argc) mode = argv[++i];
        else if (!strcmp(argv[i], "--iterations") && i + 1 < argc) iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--n") && i + 1 < argc) n_elems = (size_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "--options") && i + 1 < argc) options = argv[++i];
        else if (!strcmp(argv[i], "--il") && i + 1 < argc) il_file = argv[++i];
        else if (!strcmp(argv[i], "--print-source")) {
            fputs(source, stdout);
            return 0;
        }
    }
    cl_int err;
    dev = first_device(NULL);
    ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    CHECK(err);
    if (il_file) {
        FILE *f = fopen(il_file, "rb");
        if (!f) {
            perror(il_file);
            return 2;
        }
        static unsigned char il[1 << 20];
        size_t len = fread(il, 1, sizeof il, f);
        fclose(f);
        prog = clCreateProgramWithIL(ctx, il, len, &err);
    } else {
        prog = clCreateProgramWithSource(ctx, 1, &source, NULL, &err);
    }
    CHECK(err);
    CHECK(clBuildProgram(prog, 1, &dev, options, NULL, NULL));
    if (options) {
        char got[512] = "";
        CHECK(clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_OPTIONS, sizeof got, got, NULL));
        printf("build options: '%s'\n", got);
    }
    struct chain c;
    chain_init(&c, 1);
    if (!strcmp(mode, "chain") || !strcmp(mode, "maps")) run_chain(&c, iters, "chain");
    else if (!strcmp(mode, "ranges")) mode_ranges(&c, iters);
    else if (!strcmp(mode, "sync")) mode_sync(&c, iters);
    else if (!strcmp(mode, "events")) mode_events(&c, iters);
    else if (!strcmp(mode, "profile")) mode_profile(&c, iters);
    else if (!strcmp(mode, "setarg")) mode_setarg(&c, iters);
    else if (!strcmp(mode, "sizes")) mode_sizes(&c, iters);
    else if (!strcmp(mode, "elide")) mode_elide(&c, iters);
    else if (!strcmp(mode, "vary")) mode_vary(&c, iters);
    else if (!strcmp(mode, "relaunch")) mode_relaunch(&c, iters);
    else if (!strcmp(mode, "barrier")) mode_barrier(&c, iters);
    else if (!strcmp(mode, "release")) mode_release(&c, iters);
    else if (!strcmp(mode, "threads")) mode_threads(iters);
    else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    if (!strcmp(mode, "maps") || !strcmp(mode, "ranges")) fprintf(stderr, "llvm-mapped=%d\n", llvm_mapped());
    chain_free(&c);
    CHECK(clReleaseProgram(prog));
    CHECK(clReleaseContext(ctx));
    return 0;
}
