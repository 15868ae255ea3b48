/* fusion_model — model-based test program for the fusion batcher. Plain
 * OpenCL: it knows nothing of clshim. From a seed it generates a fusion
 * plan (--plan SEED prints it, for CLSHIM_FUSE) and random command streams
 * (--cases FIRST COUNT runs them); tests/integration/test_fusion_model.sh
 * runs every stream plainly and under the shim armed with the plan and
 * compares the printed digests, which must be equal:
 *   - every buffer's bytes after each case (FNV-1a of the bits);
 *   - every event's final status and whether its profiling times are in
 *     order (queued <= submit <= start <= end, and start/end not before
 *     those of the queue's previous profiled command).
 * Some plan sequences carry `const` (scalars baked into the fused kernel:
 * every digest must still match). Some carry `internal` (the app promises that buffers
 * written by one kernel and read by a later one are not needed after the
 * sequence): every buffer such a kernel writes on the in-order queue, and
 * every buffer computed from one, is tainted (until fully overwritten or
 * recreated) and its digest printed as "x" — the oracle excludes exactly
 * what clshim may leave undefined, over-approximated. Some `internal`
 * sequences name buffers instead (internal=KERNEL.ARG,..., by parameter
 * name or index): the same taint covers them, a superset of what the list
 * lets clshim leave undefined.
 * Streams mix kernels of the plan and others, with and without events,
 * waits on earlier (possibly held) events, another queue waiting on held
 * work, an out-of-order queue, reads, writes, maps, markers, barriers,
 * flushes, finishes, clWaitForEvents, status queries, clSetKernelArg
 * between enqueues, releases of kernels, buffers and queues mid-sequence,
 * and (for some cases) two threads with their own queues at once.
 *   fusion_model --sequence k0,k1,... [--iterations N]
 * enqueues the named kernels back to back N times on one queue (no events)
 * and prints the buffers: the shape of application that once aborted when a
 * plan sequence was never completed.
 *   fusion_model --queue-reuse N
 * N times: k0 then k1 on a new in-order queue, released with its events
 * alive (the driver keeps the queue), then the same on a new out-of-order
 * queue (k1 waiting for k0), which the driver may give the old handle.
 *   fusion_model --kernel-reuse N
 * N times: a k1 released while the driver still references it (its launch
 * waits for a user event), then a new k0, which the driver may give k1's
 * handle, launched and relaunched with another scalar set in between.
 */
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>

#include "common.h"

#define NKERN 6
#define NBUF 4
#define NELEM 1024
#define MAX_EVENTS 96

static const char *source =
    "__kernel void k0(__global float *io, float s) { size_t i = get_global_id(0); io[i] = io[i] * s + 1.0f; }\n"
    "__kernel void k1(__global const float *in, __global float *out, float s) {\n"
    "    size_t i = get_global_id(0); out[i] = in[i] + s; }\n"
    "__kernel void k2(__global float *io) { size_t i = get_global_id(0); io[i] = io[i] * 0.5f - 0.25f; }\n"
    "__kernel void k3(__global const float *a, __global const float *b, __global float *out) {\n"
    "    size_t i = get_global_id(0); out[i] = a[i] - b[i]; }\n"
    "__kernel void k4(__global float *io, float s) { size_t i = get_global_id(0); io[i] = io[i] - s; }\n"
    "__kernel void k5(__global const float *in, __global float *out) {\n"
    "    size_t i = get_global_id(0); size_t n = get_global_size(0); out[i] = in[(i + 1) % n]; }\n";

/* Per kernel: its parameters, 'b' a buffer, 's' a float; and which buffer
 * parameters it reads and writes (bit a: parameter a). */
static const char *const kparams[NKERN] = {"bs", "bbs", "b", "bbb", "bs", "bb"};
static const unsigned kreads[NKERN] = {1, 1, 1, 3, 1, 1}, kwrites[NKERN] = {1, 2, 1, 4, 1, 2};

/* ---- a small deterministic generator (the C library's rand is not portable) ---- */

struct rng {
    uint64_t s;
};
static uint32_t next(struct rng *r)
{
    r->s = r->s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(r->s >> 33);
}
static uint32_t below(struct rng *r, uint32_t n) { return next(r) % n; }
static int chance(struct rng *r, uint32_t pct) { return below(r, 100) < pct; }

/* ---- plans ---- */

struct plan {
    int n;
    int len[4];
    int k[4][6];
    int force[4];
    int internal[4];
    int consts[4];
    char named[4][48]; /* internal=LIST for an `internal` sequence; "" for all */
};

static int is_prefix(const struct plan *p, int a, int b)
{
    if (p->len[a] > p->len[b]) return 0;
    for (int i = 0; i < p->len[a]; i++)
        if (p->k[a][i] != p->k[b][i]) return 0;
    return 1;
}

/* 1-4 sequences of 2-6 kernels, repeats allowed, some sharing a prefix with
 * the one before; none a prefix of another (the plan parser refuses that). */
static void make_plan(uint64_t seed, struct plan *p)
{
    struct rng r = {seed * 2654435761u + 17};
    p->n = 1 + (int)below(&r, 4);
    for (int s = 0; s < p->n; s++) {
        for (int tries = 0;; tries++) {
            p->len[s] = 2 + (int)below(&r, 5);
            int shared = s && chance(&r, 40) ? (int)below(&r, (uint32_t)p->len[s - 1]) : 0;
            for (int i = 0; i < p->len[s]; i++)
                p->k[s][i] = i < shared ? p->k[s - 1][i] : (int)below(&r, NKERN);
            /* force-barrier is the plan author's promise that dependencies stay in
             * a work-group: k5 reads its neighbour, so never with k5. */
            int has_k5 = 0;
            for (int i = 0; i < p->len[s]; i++) has_k5 |= p->k[s][i] == 5;
            p->force[s] = !has_k5 && chance(&r, 20);
            int bad = 0;
            for (int t = 0; t < s && !bad; t++) bad = is_prefix(p, s, t) || is_prefix(p, t, s);
            if (!bad) break;
            if (tries > 50) { /* give up on this one: drop it */
                p->n = s;
                break;
            }
        }
    }
    /* `internal` from a generator of its own: the plans above stay those of
     * the fixed regression seeds. */
    struct rng ri = {seed * 0x2545F4914F6CDD1Dull + 99};
    for (int s = 0; s < p->n; s++) p->internal[s] = chance(&ri, 35);
    struct rng rc = {seed * 0x9E3779B97F4A7C15ull + 7}; /* `const`, likewise */
    for (int s = 0; s < p->n; s++) p->consts[s] = chance(&rc, 40);
    /* internal=LIST from a third generator, for the same reason: 1-2 items,
     * each a kernel of the sequence and one of its parameters (by name or
     * index; a scalar or an input is named too: clshim keeps it, saying why). */
    static const char *const pname[NKERN][3] = {{"io", "s"}, {"in", "out", "s"}, {"io"},
                                                 {"a", "b", "out"}, {"io", "s"}, {"in", "out"}};
    struct rng rn = {seed * 0x9E3779B97F4A7C15ull + 7};
    for (int s = 0; s < p->n; s++) {
        p->named[s][0] = 0;
        if (!p->internal[s] || !chance(&rn, 50)) continue;
        size_t at = 0;
        for (int item = 0, items = 1 + (int)below(&rn, 2); item < items; item++) {
            int ki = p->k[s][below(&rn, (uint32_t)p->len[s])];
            uint32_t a = below(&rn, (uint32_t)strlen(kparams[ki]));
            int w = chance(&rn, 50) ? snprintf(p->named[s] + at, sizeof p->named[s] - at, "%sk%d.%u", item ? "," : "",
                                                ki, (unsigned)a)
                                     : snprintf(p->named[s] + at, sizeof p->named[s] - at, "%sk%d.%s",
                                                item ? "," : "", ki, pname[ki][a]);
            if (w > 0) at += (size_t)w;
        }
    }
}

static void print_plan(const struct plan *p)
{
    for (int s = 0; s < p->n; s++) {
        for (int i = 0; i < p->len[s]; i++) printf("%sk%d", i ? "+" : "", p->k[s][i]);
        const char *sep = ":";
        if (p->force[s]) printf("%sforce-barrier", sep), sep = ",";
        if (p->internal[s]) printf("%sinternal%s%s", sep, p->named[s][0] ? "=" : "", p->named[s]), sep = ",";
        if (p->consts[s]) printf("%sconst", sep);
        printf("%s", s + 1 < p->n ? ";" : "\n");
    }
}

/* ---- one stream ---- */

static cl_context ctx;
static cl_device_id dev;
static cl_program prog;

struct stream {
    struct rng r;
    struct plan plan;
    cl_command_queue q, q2, ooo; /* in-order, a second in-order one, out-of-order */
    cl_event ooo_last;           /* the out-of-order queue's commands form a chain */
    cl_kernel k[NKERN];
    int argset[NKERN];           /* the kernel's arguments are all set */
    cl_mem b[NBUF];
    cl_event ev[MAX_EVENTS];
    int evq[MAX_EVENTS];         /* which queue: 0 st->q (its generation in qgen), 1 q2 */
    int nev;
    int qgen;                    /* st->q was recreated this many times (x2) */
    int tail;                    /* the event of st->q's last command, or -1 */
    int uniform;                 /* every kernel over NELEM items, no local size */
    int arg[NKERN][3];           /* the buffer index bound to each parameter */
    int tainted[NBUF];           /* may be left undefined by an `internal` sequence */
    char out[8192];
    size_t olen;
};

static void say(struct stream *st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(struct stream *st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(st->out + st->olen, sizeof st->out - st->olen, fmt, ap);
    va_end(ap);
    if (n > 0 && st->olen + (size_t)n < sizeof st->out) st->olen += (size_t)n;
}

static cl_mem new_buffer(struct stream *st, int which)
{
    float host[NELEM];
    for (int i = 0; i < NELEM; i++) host[i] = (float)((i * 7 + which * 13) % 101) / 8.0f - 6.0f;
    cl_int err;
    cl_mem m = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof host, host, &err);
    CHECK(err);
    (void)st;
    return m;
}

static cl_command_queue new_queue(int out_of_order)
{
    cl_int err;
    cl_command_queue q = clCreateCommandQueue(
        ctx, dev, CL_QUEUE_PROFILING_ENABLE | (out_of_order ? CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE : 0), &err);
    CHECK(err);
    return q;
}

static cl_kernel new_kernel(int i)
{
    char name[8];
    snprintf(name, sizeof name, "k%d", i);
    cl_int err;
    cl_kernel k = clCreateKernel(prog, name, &err);
    CHECK(err);
    return k;
}

/* Distinct buffers for one kernel's buffer parameters (a kernel writing
 * one buffer it also reads through another parameter would race). */
static void set_args(struct stream *st, int ki)
{
    int used[NBUF] = {0};
    const char *p = kparams[ki];
    for (cl_uint a = 0; p[a]; a++) {
        if (p[a] == 'b') {
            int b = (int)below(&st->r, NBUF);
            while (used[b]) b = (b + 1) % NBUF;
            used[b] = 1;
            st->arg[ki][a] = b;
            CHECK(clSetKernelArg(st->k[ki], a, sizeof(cl_mem), &st->b[b]));
        } else {
            float s = (float)below(&st->r, 9) / 4.0f - 1.0f;
            CHECK(clSetKernelArg(st->k[ki], a, sizeof s, &s));
        }
    }
    st->argset[ki] = 1;
}

/* Taint (see the file comment) before kernel ki is enqueued on `q`. */
static void taint(struct stream *st, cl_command_queue q, int ki)
{
    int in_internal = 0, reads_tainted = 0;
    for (int s = 0; s < st->plan.n; s++)
        for (int i = 0; i < st->plan.len[s]; i++) in_internal |= st->plan.internal[s] && st->plan.k[s][i] == ki;
    for (int a = 0; a < 3; a++)
        if (kreads[ki] >> a & 1) reads_tainted |= st->tainted[st->arg[ki][a]];
    if (!reads_tainted && !(in_internal && q == st->q)) return;
    for (int a = 0; a < 3; a++)
        if (kwrites[ki] >> a & 1) st->tainted[st->arg[ki][a]] = 1;
}

/* Where the event of a command on q goes (NULL: none asked for); keeps
 * st->tail, the event of st->q's last command. */
static cl_event *slot(struct stream *st, cl_command_queue q, int want)
{
    if (q == st->q) st->tail = -1;
    if (!want || st->nev >= MAX_EVENTS) return NULL;
    st->evq[st->nev] = q == st->q ? st->qgen : 1;
    if (q == st->q) st->tail = st->nev;
    return &st->ev[st->nev++];
}

/* 0-2 earlier events for a wait list (from any of the stream's queues). */
static cl_uint pick_waits(struct stream *st, cl_event *wl)
{
    cl_uint n = 0;
    if (st->nev && chance(&st->r, 35)) wl[n++] = st->ev[below(&st->r, (uint32_t)st->nev)];
    if (st->nev && chance(&st->r, 10)) wl[n++] = st->ev[below(&st->r, (uint32_t)st->nev)];
    return n;
}

static void enqueue_kernel(struct stream *st, cl_command_queue q, int ki)
{
    if (!st->argset[ki] || chance(&st->r, 30)) set_args(st, ki);
    cl_event wl[2];
    cl_uint nw = pick_waits(st, wl);
    /* Most streams launch everything alike (so sequences fuse); the rest mix ranges. */
    taint(st, q, ki);
    size_t gws = st->uniform || chance(&st->r, 85) ? NELEM : NELEM / 2, lws = 64;
    int with_lws = !st->uniform && chance(&st->r, 30);
    CHECK(clEnqueueNDRangeKernel(q, st->k[ki], 1, NULL, &gws, with_lws ? &lws : NULL, nw, nw ? wl : NULL,
                                 slot(st, q, chance(&st->r, 50))));
}

/* The next kernel: usually one continuing a plan sequence from its start. */
static int pick_kernel(struct stream *st, int *seq, int *pos)
{
    if (*seq >= 0 && *pos < st->plan.len[*seq] && chance(&st->r, 85)) return st->plan.k[*seq][(*pos)++];
    if (st->plan.n && chance(&st->r, 60)) {
        *seq = (int)below(&st->r, (uint32_t)st->plan.n);
        *pos = 0;
        return st->plan.k[*seq][(*pos)++];
    }
    *seq = -1;
    return (int)below(&st->r, NKERN);
}

static void ooo_command(struct stream *st)
{
    int ki = (int)below(&st->r, NKERN);
    set_args(st, ki);
    taint(st, st->ooo, ki);
    size_t gws = NELEM;
    cl_event done;
    CHECK(clEnqueueNDRangeKernel(st->ooo, st->k[ki], 1, NULL, &gws, NULL, st->ooo_last ? 1 : 0,
                                 st->ooo_last ? &st->ooo_last : NULL, &done));
    if (st->ooo_last) clReleaseEvent(st->ooo_last);
    st->ooo_last = done;
}

static int trace; /* --trace: each operation to stderr, for reducing a failing case */

static void one_op(struct stream *st, int *seq, int *pos)
{
    float host[NELEM];
    cl_event wl[2];
    cl_uint nw;
    int b = (int)below(&st->r, NBUF);
    uint32_t op = below(&st->r, 100);
    if (trace) fprintf(stderr, "op %u b%d\n", op, b);
    if (op < 55) {
        enqueue_kernel(st, st->q, pick_kernel(st, seq, pos));
    } else if (op < 58) { /* a blocking read */
        nw = pick_waits(st, wl);
        CHECK(clEnqueueReadBuffer(st->q, st->b[b], CL_TRUE, 0, sizeof host, host, nw, nw ? wl : NULL,
                                  slot(st, st->q, chance(&st->r, 50))));
    } else if (op < 61) { /* a write of deterministic data */
        for (int i = 0; i < NELEM; i++) host[i] = (float)(i % 17) - 3.0f;
        CHECK(clEnqueueWriteBuffer(st->q, st->b[b], CL_TRUE, 0, sizeof host, host, 0, NULL, NULL));
        st->tainted[b] = 0;
        st->tail = -1;
    } else if (op < 64) { /* map, change one element, unmap */
        cl_int err;
        float *m = clEnqueueMapBuffer(st->q, st->b[b], CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, sizeof host, 0, NULL,
                                      NULL, &err);
        CHECK(err);
        m[below(&st->r, NELEM)] += 1.0f;
        CHECK(clEnqueueUnmapMemObject(st->q, st->b[b], m, 0, NULL, NULL));
        st->tail = -1;
    } else if (op < 67) {
        nw = pick_waits(st, wl);
        CHECK(clEnqueueMarkerWithWaitList(st->q, nw, nw ? wl : NULL, slot(st, st->q, 1)));
    } else if (op < 69) {
        CHECK(clEnqueueBarrierWithWaitList(st->q, 0, NULL, NULL));
        st->tail = -1;
    } else if (op < 72) {
        CHECK(clFlush(st->q));
    } else if (op < 74) {
        CHECK(clFinish(st->q));
    } else if (op < 77 && st->nev) { /* wait for an earlier (maybe held) event */
        CHECK(clWaitForEvents(1, &st->ev[below(&st->r, (uint32_t)st->nev)]));
    } else if (op < 80 && st->nev) { /* status query: its answer may differ in time, not printed */
        cl_int status;
        CHECK(clGetEventInfo(st->ev[below(&st->r, (uint32_t)st->nev)], CL_EVENT_COMMAND_EXECUTION_STATUS,
                             sizeof status, &status, NULL));
    } else if (op < 84) { /* the second queue: a kernel after all of this queue's (maybe held) work */
        int ki = (int)below(&st->r, NKERN);
        set_args(st, ki);
        taint(st, st->q2, ki);
        size_t gws = NELEM;
        if (st->tail < 0) CHECK(clFinish(st->q)); /* the queues share buffers: order them */
        int tail = st->tail;
        CHECK(clEnqueueNDRangeKernel(st->q2, st->k[ki], 1, NULL, &gws, NULL, tail >= 0, tail >= 0 ? &st->ev[tail] : NULL,
                                     slot(st, st->q2, 1)));
        CHECK(clFinish(st->q2));
    } else if (op < 86) { /* the out-of-order queue, after this queue's work */
        CHECK(clFinish(st->q));
        ooo_command(st);
        CHECK(clFinish(st->ooo));
    } else if (op < 90) {
        int ki = (int)below(&st->r, NKERN);
        set_args(st, ki); /* clSetKernelArg between enqueues */
    } else if (op < 93) { /* release and recreate a kernel (maybe held) */
        int ki = (int)below(&st->r, NKERN);
        CHECK(clReleaseKernel(st->k[ki]));
        st->k[ki] = new_kernel(ki);
        st->argset[ki] = 0;
    } else if (op < 96) { /* release a buffer (maybe used by held kernels), recreate it */
        CHECK(clReleaseMemObject(st->b[b]));
        st->b[b] = new_buffer(st, b + 10);
        st->tainted[b] = 0;
        for (int ki = 0; ki < NKERN; ki++) st->argset[ki] = 0;
    } else if (op < 98) { /* release the queue mid-sequence (a second reference keeps it for a clFinish) */
        cl_command_queue old = st->q;
        CHECK(clRetainCommandQueue(old));
        CHECK(clReleaseCommandQueue(old));
        CHECK(clFinish(old));
        CHECK(clReleaseCommandQueue(old));
        st->q = new_queue(0);
        st->qgen += 2;
        st->tail = -1;
    } else {
        CHECK(clFinish(st->q));
    }
}


static void run_stream(struct stream *st, uint64_t plan_seed, uint64_t seed)
{
    memset(st, 0, sizeof *st);
    st->r.s = seed * 0x9E3779B97F4A7C15ull + 1;
    make_plan(plan_seed, &st->plan);
    st->q = new_queue(0);
    st->q2 = new_queue(0);
    st->tail = -1;
    st->uniform = chance(&st->r, 70);
    st->ooo = new_queue(1);
    for (int i = 0; i < NKERN; i++) st->k[i] = new_kernel(i);
    for (int i = 0; i < NBUF; i++) st->b[i] = new_buffer(st, i);
    int seq = -1, pos = 0, nops = 10 + (int)below(&st->r, 40);
    for (int i = 0; i < nops; i++) one_op(st, &seq, &pos);
    CHECK(clFinish(st->q));
    CHECK(clFinish(st->q2));
    CHECK(clFinish(st->ooo));
    if (st->nev) CHECK(clWaitForEvents((cl_uint)st->nev, st->ev));
    for (int i = 0; i < NBUF; i++) {
        float host[NELEM];
        CHECK(clEnqueueReadBuffer(st->q, st->b[i], CL_TRUE, 0, sizeof host, host, 0, NULL, NULL));
        if (st->tainted[i]) say(st, " b%d=x", i);
        else say(st, " b%d=%016llx", i, (unsigned long long)fnv(host, sizeof host));
    }
    cl_ulong last_start = 0, last_end = 0;
    int last_q = -1;
    for (int i = 0; i < st->nev; i++) {
        cl_int status;
        cl_ulong t[4];
        CHECK(clGetEventInfo(st->ev[i], CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, NULL));
        int ok = 1;
        static const cl_profiling_info what[4] = {CL_PROFILING_COMMAND_QUEUED, CL_PROFILING_COMMAND_SUBMIT,
                                                  CL_PROFILING_COMMAND_START, CL_PROFILING_COMMAND_END};
        for (int w = 0; w < 4; w++)
            ok &= clGetEventProfilingInfo(st->ev[i], what[w], sizeof t[w], &t[w], NULL) == CL_SUCCESS;
        ok = ok && t[0] <= t[1] && t[1] <= t[2] && t[2] <= t[3];
        if (ok && st->evq[i] == last_q) ok = t[2] >= last_start && t[3] >= last_end;
        last_q = st->evq[i];
        last_start = t[2];
        last_end = t[3];
        say(st, " e%d=%d%s", i, status, ok ? "" : "!order");
        CHECK(clReleaseEvent(st->ev[i]));
    }
    if (st->ooo_last) clReleaseEvent(st->ooo_last);
    for (int i = 0; i < NKERN; i++) CHECK(clReleaseKernel(st->k[i]));
    for (int i = 0; i < NBUF; i++) CHECK(clReleaseMemObject(st->b[i]));
    CHECK(clReleaseCommandQueue(st->q));
    CHECK(clReleaseCommandQueue(st->q2));
    CHECK(clReleaseCommandQueue(st->ooo));
}

struct job {
    uint64_t plan_seed, seed;
    struct stream st;
};

static void *run_job(void *arg)
{
    struct job *j = arg;
    run_stream(&j->st, j->plan_seed, j->seed);
    return NULL;
}

/* Case `seed`: one stream, or two at once on two threads. */
static void run_case(uint64_t plan_seed, uint64_t seed)
{
    static struct job jobs[2];
    int threads = seed % 5 == 4 ? 2 : 1;
    pthread_t t[2];
    for (int i = 0; i < threads; i++) {
        jobs[i].plan_seed = plan_seed;
        jobs[i].seed = seed * 2 + (uint64_t)i;
        if (pthread_create(&t[i], NULL, run_job, &jobs[i])) exit(3);
    }
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    printf("case %llu:", (unsigned long long)seed);
    for (int i = 0; i < threads; i++) printf("%s%s", i ? " |" : "", jobs[i].st.out);
    printf("\n");
    fflush(stdout);
}

static void run_sequence(const char *list, int iters)
{
    struct stream st;
    memset(&st, 0, sizeof st);
    st.q = new_queue(0);
    for (int i = 0; i < NKERN; i++) st.k[i] = new_kernel(i);
    for (int i = 0; i < NBUF; i++) st.b[i] = new_buffer(&st, i);
    for (int ki = 0; ki < NKERN; ki++) { /* fixed arguments: buffers 0.., scalar 0.5 */
        float s = 0.5f;
        for (cl_uint a = 0, b = 0; kparams[ki][a]; a++)
            if (kparams[ki][a] == 'b') CHECK(clSetKernelArg(st.k[ki], a, sizeof(cl_mem), &st.b[b++]));
            else CHECK(clSetKernelArg(st.k[ki], a, sizeof s, &s));
    }
    size_t gws = NELEM;
    for (int it = 0; it < iters; it++)
        for (const char *p = list; *p;) {
            if (*p == 'k' && p[1] >= '0' && p[1] < '0' + NKERN)
                CHECK(clEnqueueNDRangeKernel(st.q, st.k[p[1] - '0'], 1, NULL, &gws, NULL, 0, NULL, NULL));
            p += strcspn(p, ",");
            p += *p == ',';
        }
    CHECK(clFinish(st.q));
    for (int i = 0; i < NBUF; i++) {
        float host[NELEM];
        CHECK(clEnqueueReadBuffer(st.q, st.b[i], CL_TRUE, 0, sizeof host, host, 0, NULL, NULL));
        printf("b%d=%016llx\n", i, (unsigned long long)fnv(host, sizeof host));
    }
}

static void run_queue_reuse(int iters)
{
    struct stream st;
    memset(&st, 0, sizeof st);
    for (int i = 0; i < NKERN; i++) st.k[i] = new_kernel(i);
    for (int i = 0; i < NBUF; i++) st.b[i] = new_buffer(&st, i);
    float s = 0.5f;
    CHECK(clSetKernelArg(st.k[0], 0, sizeof(cl_mem), &st.b[0]));
    CHECK(clSetKernelArg(st.k[0], 1, sizeof s, &s));
    CHECK(clSetKernelArg(st.k[1], 0, sizeof(cl_mem), &st.b[0]));
    CHECK(clSetKernelArg(st.k[1], 1, sizeof(cl_mem), &st.b[1]));
    CHECK(clSetKernelArg(st.k[1], 2, sizeof s, &s));
    size_t gws = NELEM;
    for (int it = 0; it < iters; it++)
        for (int ooo = 0; ooo < 2; ooo++) {
            cl_command_queue q = new_queue(ooo);
            cl_event e[2];
            CHECK(clEnqueueNDRangeKernel(q, st.k[0], 1, NULL, &gws, NULL, 0, NULL, &e[0]));
            CHECK(clEnqueueNDRangeKernel(q, st.k[1], 1, NULL, &gws, NULL, 1, &e[0], &e[1]));
            CHECK(clFinish(q));
            CHECK(clReleaseCommandQueue(q)); /* events still alive */
            CHECK(clReleaseEvent(e[0]));
            CHECK(clReleaseEvent(e[1]));
        }
    for (int i = 0; i < NBUF; i++) {
        float host[NELEM];
        cl_command_queue q = new_queue(0);
        CHECK(clEnqueueReadBuffer(q, st.b[i], CL_TRUE, 0, sizeof host, host, 0, NULL, NULL));
        CHECK(clReleaseCommandQueue(q));
        printf("b%d=%016llx\n", i, (unsigned long long)fnv(host, sizeof host));
    }
}

static void run_kernel_reuse(int iters)
{
    struct stream st;
    memset(&st, 0, sizeof st);
    cl_command_queue q = new_queue(0);
    for (int i = 0; i < NBUF; i++) st.b[i] = new_buffer(&st, i);
    size_t gws = NELEM;
    for (int it = 0; it < iters; it++) {
        cl_int err;
        cl_event gate = clCreateUserEvent(ctx, &err);
        CHECK(err);
        cl_kernel k1 = new_kernel(1);
        float s = 1.5f;
        CHECK(clSetKernelArg(k1, 0, sizeof(cl_mem), &st.b[0]));
        CHECK(clSetKernelArg(k1, 1, sizeof(cl_mem), &st.b[1]));
        CHECK(clSetKernelArg(k1, 2, sizeof s, &s));
        CHECK(clEnqueueNDRangeKernel(q, k1, 1, NULL, &gws, NULL, 1, &gate, NULL));
        CHECK(clReleaseKernel(k1)); /* the pending launch keeps it */
        CHECK(clSetUserEventStatus(gate, CL_COMPLETE));
        CHECK(clFinish(q));
        CHECK(clReleaseEvent(gate));
        cl_kernel k0 = new_kernel(0);
        CHECK(clSetKernelArg(k0, 0, sizeof(cl_mem), &st.b[2]));
        CHECK(clSetKernelArg(k0, 1, sizeof s, &s));
        CHECK(clEnqueueNDRangeKernel(q, k0, 1, NULL, &gws, NULL, 0, NULL, NULL));
        float s2 = -0.25f;
        CHECK(clSetKernelArg(k0, 1, sizeof s2, &s2));
        CHECK(clEnqueueNDRangeKernel(q, k0, 1, NULL, &gws, NULL, 0, NULL, NULL));
        CHECK(clFinish(q));
        CHECK(clReleaseKernel(k0));
    }
    for (int i = 0; i < NBUF; i++) {
        float host[NELEM];
        CHECK(clEnqueueReadBuffer(q, st.b[i], CL_TRUE, 0, sizeof host, host, 0, NULL, NULL));
        printf("b%d=%016llx\n", i, (unsigned long long)fnv(host, sizeof host));
    }
    CHECK(clReleaseCommandQueue(q));
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--plan")) {
        struct plan p;
        make_plan(strtoull(argv[2], NULL, 10), &p);
        print_plan(&p);
        return 0;
    }
    const char *sequence = NULL;
    int iters = 30, queue_reuse = 0, kernel_reuse = 0;
    uint64_t plan_seed = 0, first = 0, count = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--sequence") && i + 1 < argc) sequence = argv[++i];
        else if (!strcmp(argv[i], "--iterations") && i + 1 < argc) iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--trace")) trace = 1;
        else if (!strcmp(argv[i], "--queue-reuse") && i + 1 < argc) queue_reuse = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--kernel-reuse") && i + 1 < argc) kernel_reuse = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--plan-seed") && i + 1 < argc) plan_seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--cases") && i + 2 < argc) {
            first = strtoull(argv[++i], NULL, 10);
            count = strtoull(argv[++i], NULL, 10);
        } else {
            fprintf(stderr, "usage: %s --plan SEED | --plan-seed SEED --cases FIRST COUNT | --sequence k0,k1 "
                            "[--iterations N]\n", argv[0]);
            return 2;
        }
    }
    cl_int err;
    dev = first_device(NULL);
    ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    CHECK(err);
    prog = clCreateProgramWithSource(ctx, 1, &source, NULL, &err);
    CHECK(err);
    if (clBuildProgram(prog, 1, &dev, NULL, NULL, NULL) != CL_SUCCESS) {
        fprintf(stderr, "build failed:\n%s\n", build_log(prog, dev));
        return 2;
    }
    if (sequence) run_sequence(sequence, iters);
    if (queue_reuse) run_queue_reuse(queue_reuse);
    if (kernel_reuse) run_kernel_reuse(kernel_reuse);
    for (uint64_t s = first; s < first + count; s++) run_case(plan_seed, s);
    CHECK(clReleaseProgram(prog));
    CHECK(clReleaseContext(ctx));
    return 0;
}
