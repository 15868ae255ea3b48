/* fusion_model — model-based test program for the fusion batcher. Plain
 * OpenCL: it knows nothing of clshim. From a seed it generates a fusion
 * plan (--plan SEED prints it, for CLSHIM_FUSE) and random command streams
 * (--cases FIRST COUNT runs them); tests/integration/test_fusion_model.sh
 * runs every stream plainly and under the shim armed with the plan and
 * compares the printed digests, which must be equal:
 *   - every buffer's bytes after each case (FNV-1a of the bits), and a
 *     buffer's whenever the stream reads it (in the local family also
 *     every buffer at each clFinish);
 *   - every event's final status and whether its profiling times are in
 *     order (queued <= submit <= start <= end, and start/end not before
 *     those of the queue's previous profiled command).
 * Some plan sequences carry `const` (scalars baked into the fused kernel:
 * every digest must still match). Some carry `internal` (the app promises that buffers
 * written by one kernel and read by a later one are not needed after the
 * sequence): the program follows its in-order queue as the batcher could
 * (the kernels enqueued since the last command that surely submits held
 * work), and wherever the last kernels enqueued spell an `internal`
 * sequence, every buffer one of them writes and a later one reads is
 * tainted, and so is every buffer later computed from a tainted one (until
 * fully overwritten or recreated); a tainted buffer's digest is printed as
 * "x". The oracle so excludes what clshim may leave undefined,
 * over-approximated, and nothing else: a sequence's own results (buffers
 * only written) are compared. Some `internal` sequences name buffers
 * instead (internal=KERNEL.ARG,..., by parameter name or index): the same
 * taint covers them, a superset of what the list lets clshim leave
 * undefined.
 * Plan seeds from LOCAL_SEEDS on make the local family: every kernel is
 * launched with a local size (one per stream, sometimes another or half
 * the range for one launch: group shapes that differ), over NELEM_LOCAL
 * items, and the plans mix the elementwise kernels with g0..g3, which read
 * within their work-group (a neighbour, the mirror element, through a
 * pointer selected between two buffers, through a __local variable of
 * their own); most of their sequences carry force-barrier,internal, so
 * intermediates are kept in __local arrays where clshim proves it sound,
 * and stored, with the reason, where it must refuse (an index it cannot
 * prove, an escaping pointer, a smaller range, arrays over its budget at
 * the largest local size).
 * Streams mix kernels of the plan and others, with and without events,
 * waits on earlier (possibly held) events, another queue waiting on held
 * work, an out-of-order queue, reads, writes, maps, markers, barriers,
 * flushes, finishes, clWaitForEvents, status queries, clSetKernelArg
 * between enqueues, releases of kernels, buffers and queues mid-sequence,
 * and (for some cases) two threads with their own queues at once. From a
 * generator of their own (the streams of the fixed seeds stay what they
 * were), in the base family, CL_COMPLETE callbacks on earlier, maybe held, events (every one
 * must fire: " cbN" counts them), and the queue's last command waited for
 * without a flush, by a callback or by polling its status (" wc", " wp";
 * " w!" when it did not complete within 5 s: the plain driver runs it).
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

#define NKERN 6        /* k0..k5: the base family's kernels */
#define NALL 10        /* and g0..g3, the local family's */
#define NBUF 4
#define NELEM 1024     /* items per buffer, base family */
#define NELEM_LOCAL 32768 /* local family: a multiple of the largest local size */
#define LOCAL_SEEDS 1000u
#define MAX_EVENTS 96
#define RUN_MAX 64     /* kernels of the in-order queue's current run the oracle remembers */

static int nelem = NELEM; /* items per buffer in this process */
static int local_family;  /* the plan seed is a local family's */
static size_t local_sizes[4] = {16, 64, 256, 4096}; /* the last lowered to the device's limit */

static const char *source =
    "__kernel void k0(__global float *io, float s) { size_t i = get_global_id(0); io[i] = io[i] * s + 1.0f; }\n"
    "__kernel void k1(__global const float *in, __global float *out, float s) {\n"
    "    size_t i = get_global_id(0); out[i] = in[i] + s; }\n"
    "__kernel void k2(__global float *io) { size_t i = get_global_id(0); io[i] = io[i] * 0.5f - 0.25f; }\n"
    "__kernel void k3(__global const float *a, __global const float *b, __global float *out) {\n"
    "    size_t i = get_global_id(0); out[i] = a[i] - b[i]; }\n"
    "__kernel void k4(__global float *io, float s) { size_t i = get_global_id(0); io[i] = io[i] - s; }\n"
    "__kernel void k5(__global const float *in, __global float *out) {\n"
    "    size_t i = get_global_id(0); size_t n = get_global_size(0); out[i] = in[(i + 1) % n]; }\n"
    /* The local family's: each reads within its work-group only. */
    "__kernel void g0(__global const float *in, __global float *out) {\n"
    "    size_t i = get_global_id(0), l = get_local_id(0), n = get_local_size(0);\n"
    "    out[i] = in[get_group_id(0) * n + (l + 1) % n] * 0.5f + in[i]; }\n"
    "__kernel void g1(__global const float *in, __global float *out) {\n"
    "    size_t i = get_global_id(0), l = get_local_id(0), n = get_local_size(0);\n"
    "    out[i] = in[get_group_id(0) * n + (n - 1 - l)] - 1.0f; }\n"
    "__kernel void g2(__global const float *a, __global const float *b, __global float *out) {\n"
    "    size_t i = get_global_id(0); __global const float *src = get_group_id(0) & 1 ? a : b;\n"
    "    out[i] = src[i] * 2.0f + 1.0f; }\n"
    "__kernel void g3(__global const float *in, __global float *out) {\n"
    "    __local float first[1];\n"
    "    size_t i = get_global_id(0);\n"
    "    if (get_local_id(0) == 0) first[0] = in[i];\n"
    "    barrier(CLK_LOCAL_MEM_FENCE);\n"
    "    out[i] = in[i] - first[0]; }\n";

/* Per kernel: its parameters, 'b' a buffer, 's' a float; and which buffer
 * parameters it reads and writes (bit a: parameter a). */
static const char *const kparams[NALL] = {"bs", "bbs", "b", "bbb", "bs", "bb", "bb", "bb", "bbb", "bb"};
static const unsigned kreads[NALL] = {1, 1, 1, 3, 1, 1, 1, 1, 3, 1}, kwrites[NALL] = {1, 2, 1, 4, 1, 2, 2, 2, 4, 2};
static const char *const kname[NALL] = {"k0", "k1", "k2", "k3", "k4", "k5", "g0", "g1", "g2", "g3"};
/* Parameter names, for internal=KERNEL.NAME. */
static const char *const pname[NALL][3] = {{"io", "s"}, {"in", "out", "s"}, {"io"}, {"a", "b", "out"}, {"io", "s"},
                                           {"in", "out"}, {"in", "out"}, {"in", "out"}, {"a", "b", "out"},
                                           {"in", "out"}};

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

/* internal=LIST for sequence s: 1-2 items, each a kernel of the sequence
 * and one of its parameters (by name or index; a scalar or an input is
 * named too: clshim keeps it, saying why). */
static void name_buffers(struct rng *r, struct plan *p, int s)
{
    size_t at = 0;
    for (int item = 0, items = 1 + (int)below(r, 2); item < items; item++) {
        int ki = p->k[s][below(r, (uint32_t)p->len[s])];
        uint32_t a = below(r, (uint32_t)strlen(kparams[ki]));
        int w = chance(r, 50) ? snprintf(p->named[s] + at, sizeof p->named[s] - at, "%s%s.%u", item ? "," : "",
                                         kname[ki], (unsigned)a)
                              : snprintf(p->named[s] + at, sizeof p->named[s] - at, "%s%s.%s", item ? "," : "",
                                         kname[ki], pname[ki][a]);
        if (w > 0) at += (size_t)w;
    }
}

static void make_local_plan(uint64_t seed, struct plan *p);

/* 1-4 sequences of 2-6 kernels, repeats allowed, some sharing a prefix with
 * the one before; none a prefix of another (the plan parser refuses that). */
static void make_plan(uint64_t seed, struct plan *p)
{
    if (seed >= LOCAL_SEEDS) {
        make_local_plan(seed, p);
        return;
    }
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
    /* internal=LIST from a third generator, for the same reason. */
    struct rng rn = {seed * 0x9E3779B97F4A7C15ull + 7};
    for (int s = 0; s < p->n; s++) {
        p->named[s][0] = 0;
        if (p->internal[s] && chance(&rn, 50)) name_buffers(&rn, p, s);
    }
}

/* The local family's plans: 1-3 sequences of 2-4 kernels, each with one of
 * g0..g3 at least and never k5 (it reads outside the work-group, which
 * force-barrier's promise excludes); most carry force-barrier,internal
 * (local memory), some only one of the two or neither. */
static void make_local_plan(uint64_t seed, struct plan *p)
{
    static const int pool[] = {0, 1, 2, 3, 4, 6, 7, 8, 9};
    struct rng r = {seed * 0x2545F4914F6CDD1Dull + 4242};
    p->n = 1 + (int)below(&r, 3);
    for (int s = 0; s < p->n; s++) {
        for (int tries = 0;; tries++) {
            p->len[s] = 2 + (int)below(&r, 3);
            int group = 0;
            for (int i = 0; i < p->len[s]; i++) {
                p->k[s][i] = pool[below(&r, sizeof pool / sizeof pool[0])];
                group |= p->k[s][i] >= NKERN;
            }
            if (!group) p->k[s][p->len[s] - 1] = NKERN + (int)below(&r, NALL - NKERN);
            int bad = 0;
            for (int t = 0; t < s && !bad; t++) bad = is_prefix(p, s, t) || is_prefix(p, t, s);
            if (!bad) break;
            if (tries > 50) {
                p->n = s;
                return;
            }
        }
        uint32_t how = below(&r, 100);
        p->force[s] = how < 80;
        p->internal[s] = how < 65 || (how >= 80 && how < 90);
        p->consts[s] = chance(&r, 20);
        p->named[s][0] = 0;
        if (p->internal[s] && chance(&r, 25)) name_buffers(&r, p, s);
    }
}

static void print_plan(const struct plan *p)
{
    for (int s = 0; s < p->n; s++) {
        for (int i = 0; i < p->len[s]; i++) printf("%s%s", i ? "+" : "", kname[p->k[s][i]]);
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

struct run_entry {
    int k;      /* the kernel */
    int arg[3]; /* the buffer index bound to each parameter when it was enqueued */
};

struct stream {
    struct rng r;
    struct rng r2;               /* callbacks and status polling (observe) */
    int cb_registered, cb_fired; /* CL_COMPLETE callbacks on the stream's events (fired: atomic) */
    int waits_fired;             /* callbacks of observe's waits that ran (atomic) */
    struct plan plan;
    int nk;                      /* kernels its random picks choose from (k0.. or all) */
    size_t L;                    /* local family: the local size of its launches */
    cl_command_queue q, q2, ooo; /* in-order, a second in-order one, out-of-order */
    cl_event ooo_last;           /* the out-of-order queue's commands form a chain */
    cl_kernel k[NALL];
    int argset[NALL];            /* the kernel's arguments are all set */
    cl_mem b[NBUF];
    cl_event ev[MAX_EVENTS];
    int evq[MAX_EVENTS];         /* which queue: 0 st->q (its generation in qgen), 1 q2 */
    int nev;
    int qgen;                    /* st->q was recreated this many times (x2) */
    int tail;                    /* the event of st->q's last command, or -1 */
    int uniform;                 /* every kernel over all items, one local size (or none) */
    int arg[NALL][3];            /* the buffer index bound to each parameter */
    int tainted[NBUF];           /* may be left undefined by an `internal` sequence */
    struct run_entry run[RUN_MAX]; /* st->q's kernels since a command that surely submits held ones */
    int nrun;
    char out[16384];
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
    float host[NELEM_LOCAL];
    for (int i = 0; i < nelem; i++) host[i] = (float)((i * 7 + which * 13) % 101) / 8.0f - 6.0f;
    cl_int err;
    cl_mem m = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, nelem * sizeof *host, host, &err);
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
    cl_int err;
    cl_kernel k = clCreateKernel(prog, kname[i], &err);
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

/* Taint (see the file comment), before kernel ki is enqueued on any queue:
 * what it computes from a tainted buffer is tainted. */
static void taint(struct stream *st, int ki)
{
    int reads_tainted = 0;
    for (int a = 0; a < 3; a++)
        if (kreads[ki] >> a & 1) reads_tainted |= st->tainted[st->arg[ki][a]];
    if (!reads_tainted) return;
    for (int a = 0; a < 3; a++)
        if (kwrites[ki] >> a & 1) st->tainted[st->arg[ki][a]] = 1;
}

/* Kernel ki was enqueued on st->q: it extends the run the batcher may be
 * holding. Where the run's last kernels spell an `internal` sequence, the
 * batcher may have fused them: every buffer one of them writes and a later
 * one reads may be left undefined (the sequence's own reads of it are not
 * tainted: fused, they get the values the writer computed). */
static void run_kernel(struct stream *st, int ki)
{
    if (st->nrun == RUN_MAX) {
        memmove(st->run, st->run + 1, (RUN_MAX - 1) * sizeof *st->run);
        st->nrun--;
    }
    struct run_entry *e = &st->run[st->nrun++];
    e->k = ki;
    memcpy(e->arg, st->arg[ki], sizeof e->arg);
    for (int s = 0; s < st->plan.n; s++) {
        int len = st->plan.len[s];
        if (!st->plan.internal[s] || len > st->nrun) continue;
        const struct run_entry *w = st->run + st->nrun - len;
        int match = 1;
        for (int i = 0; i < len && match; i++) match = w[i].k == st->plan.k[s][i];
        for (int i = 0; match && i < len; i++)
            for (int j = i + 1; j < len; j++)
                for (int a = 0; a < 3; a++)
                    for (int b = 0; b < 3; b++)
                        if ((kwrites[w[i].k] >> a & 1) && (kreads[w[j].k] >> b & 1) && w[i].arg[a] == w[j].arg[b])
                            st->tainted[w[i].arg[a]] = 1;
    }
}

/* The local family's launch shape: the stream's local size over every
 * item; in a mixed stream sometimes half the items, or another local size
 * (group shapes that differ within a sequence). */
static void local_shape(struct stream *st, size_t *gws, size_t *lws)
{
    *gws = (size_t)nelem;
    *lws = st->L;
    if (st->uniform) return;
    uint32_t c = below(&st->r, 100);
    if (c < 10) {
        *gws = (size_t)nelem / 2;
    } else if (c < 14) {
        int at = 0;
        while (local_sizes[at] != st->L) at++;
        *lws = local_sizes[(at + 1 + (int)below(&st->r, 3)) % 4];
    }
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
    taint(st, ki);
    size_t gws, lws;
    int with_lws = 1;
    if (local_family) {
        local_shape(st, &gws, &lws);
    } else {
        gws = st->uniform || chance(&st->r, 85) ? NELEM : NELEM / 2;
        lws = 64;
        with_lws = !st->uniform && chance(&st->r, 30);
    }
    CHECK(clEnqueueNDRangeKernel(q, st->k[ki], 1, NULL, &gws, with_lws ? &lws : NULL, nw, nw ? wl : NULL,
                                 slot(st, q, chance(&st->r, 50))));
    if (q == st->q) run_kernel(st, ki);
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
    return (int)below(&st->r, (uint32_t)st->nk);
}

/* The local size of a command on another queue: the stream's (the local
 * family's kernels read within their work-group), else none. */
static const size_t *other_lws(const struct stream *st) { return local_family ? &st->L : NULL; }

static void ooo_command(struct stream *st)
{
    int ki = (int)below(&st->r, (uint32_t)st->nk);
    set_args(st, ki);
    taint(st, ki);
    size_t gws = (size_t)nelem;
    cl_event done;
    CHECK(clEnqueueNDRangeKernel(st->ooo, st->k[ki], 1, NULL, &gws, other_lws(st), st->ooo_last ? 1 : 0,
                                 st->ooo_last ? &st->ooo_last : NULL, &done));
    if (st->ooo_last) clReleaseEvent(st->ooo_last);
    st->ooo_last = done;
}

/* A buffer's digest (its first nelem floats in host), or "x" when tainted. */
static void print_digest(struct stream *st, const char *when, int b, const float *host)
{
    if (st->tainted[b]) say(st, " %sb%d=x", when, b);
    else say(st, " %sb%d=%016llx", when, b, (unsigned long long)fnv(host, (size_t)nelem * sizeof *host));
}

static int trace; /* --trace: each operation to stderr, for reducing a failing case */

static void CL_CALLBACK count_callback(cl_event e, cl_int status, void *counter)
{
    (void)e;
    if (status == CL_COMPLETE) __atomic_add_fetch((int *)counter, 1, __ATOMIC_SEQ_CST);
}

/* Sleeps 1 ms at a time until *counter exceeds `than` or 5 s passed: 1 when it did. */
static int wait_counter(const int *counter, int than)
{
    for (double t0 = now_ms(); now_ms() - t0 < 5000;) {
        if (__atomic_load_n(counter, __ATOMIC_SEQ_CST) > than) return 1;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    return __atomic_load_n(counter, __ATOMIC_SEQ_CST) > than;
}

/* After an operation, from st->r2: a CL_COMPLETE callback on an earlier
 * (maybe held) event, or st->q's last command waited for without a flush —
 * by a callback or by polling its status — as an application waiting for
 * one command does; the plain driver runs it meanwhile. */
static void observe(struct stream *st)
{
    uint32_t c = below(&st->r2, 100);
    if (c < 5 && st->nev) {
        CHECK(clSetEventCallback(st->ev[below(&st->r2, (uint32_t)st->nev)], CL_COMPLETE, count_callback,
                                 &st->cb_fired));
        st->cb_registered++;
    } else if (c < 9 && st->tail >= 0) {
        cl_event e = st->ev[st->tail];
        int done;
        if (c < 7) {
            int before = __atomic_load_n(&st->waits_fired, __ATOMIC_SEQ_CST);
            CHECK(clSetEventCallback(e, CL_COMPLETE, count_callback, &st->waits_fired));
            done = wait_counter(&st->waits_fired, before);
        } else {
            cl_int status = CL_QUEUED;
            for (double t0 = now_ms(); status != CL_COMPLETE && now_ms() - t0 < 5000;)
                CHECK(clGetEventInfo(e, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, NULL));
            done = status == CL_COMPLETE;
        }
        say(st, " w%c", !done ? '!' : c < 7 ? 'c' : 'p');
    }
}

static void one_op(struct stream *st, int *seq, int *pos)
{
    float host[NELEM_LOCAL];
    const size_t bytes = (size_t)nelem * sizeof *host;
    cl_event wl[2];
    cl_uint nw;
    int b = (int)below(&st->r, NBUF);
    uint32_t op = below(&st->r, 100);
    if (trace) fprintf(stderr, "op %u b%d\n", op, b);
    if (op < 55) {
        enqueue_kernel(st, st->q, pick_kernel(st, seq, pos));
    } else if (op < 58) { /* a blocking read */
        nw = pick_waits(st, wl);
        CHECK(clEnqueueReadBuffer(st->q, st->b[b], CL_TRUE, 0, bytes, host, nw, nw ? wl : NULL,
                                  slot(st, st->q, chance(&st->r, 50))));
        st->nrun = 0;
        print_digest(st, "r", b, host);
    } else if (op < 61) { /* a write of deterministic data */
        for (int i = 0; i < nelem; i++) host[i] = (float)(i % 17) - 3.0f;
        CHECK(clEnqueueWriteBuffer(st->q, st->b[b], CL_TRUE, 0, bytes, host, 0, NULL, NULL));
        st->tainted[b] = 0;
        st->tail = -1;
        st->nrun = 0;
    } else if (op < 64) { /* map, change one element, unmap */
        cl_int err;
        float *m = clEnqueueMapBuffer(st->q, st->b[b], CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, bytes, 0, NULL,
                                      NULL, &err);
        CHECK(err);
        m[below(&st->r, (uint32_t)nelem)] += 1.0f;
        CHECK(clEnqueueUnmapMemObject(st->q, st->b[b], m, 0, NULL, NULL));
        st->tail = -1;
        st->nrun = 0;
    } else if (op < 67) {
        nw = pick_waits(st, wl);
        CHECK(clEnqueueMarkerWithWaitList(st->q, nw, nw ? wl : NULL, slot(st, st->q, 1)));
        st->nrun = 0;
    } else if (op < 69) {
        CHECK(clEnqueueBarrierWithWaitList(st->q, 0, NULL, NULL));
        st->tail = -1;
        st->nrun = 0;
    } else if (op < 72) {
        CHECK(clFlush(st->q));
        st->nrun = 0;
    } else if (op < 74) {
        CHECK(clFinish(st->q));
        st->nrun = 0;
        /* The local family looks at every buffer here too: a sequence's
         * result may be overwritten before the case ends. */
        for (int i = 0; local_family && i < NBUF; i++) {
            CHECK(clEnqueueReadBuffer(st->q, st->b[i], CL_TRUE, 0, bytes, host, 0, NULL, NULL));
            print_digest(st, "f", i, host);
        }
    } else if (op < 77 && st->nev) { /* wait for an earlier (maybe held) event */
        CHECK(clWaitForEvents(1, &st->ev[below(&st->r, (uint32_t)st->nev)]));
    } else if (op < 80 && st->nev) { /* status query: its answer may differ in time, not printed */
        cl_int status;
        CHECK(clGetEventInfo(st->ev[below(&st->r, (uint32_t)st->nev)], CL_EVENT_COMMAND_EXECUTION_STATUS,
                             sizeof status, &status, NULL));
    } else if (op < 84) { /* the second queue: a kernel after all of this queue's (maybe held) work */
        int ki = (int)below(&st->r, (uint32_t)st->nk);
        set_args(st, ki);
        taint(st, ki);
        size_t gws = (size_t)nelem;
        if (st->tail < 0) { /* the queues share buffers: order them */
            CHECK(clFinish(st->q));
            st->nrun = 0;
        }
        int tail = st->tail;
        CHECK(clEnqueueNDRangeKernel(st->q2, st->k[ki], 1, NULL, &gws, other_lws(st), tail >= 0,
                                     tail >= 0 ? &st->ev[tail] : NULL, slot(st, st->q2, 1)));
        CHECK(clFinish(st->q2));
    } else if (op < 86) { /* the out-of-order queue, after this queue's work */
        CHECK(clFinish(st->q));
        st->nrun = 0;
        ooo_command(st);
        CHECK(clFinish(st->ooo));
    } else if (op < 90) {
        int ki = (int)below(&st->r, (uint32_t)st->nk);
        set_args(st, ki); /* clSetKernelArg between enqueues */
    } else if (op < 93) { /* release and recreate a kernel (maybe held) */
        int ki = (int)below(&st->r, (uint32_t)st->nk);
        CHECK(clReleaseKernel(st->k[ki]));
        st->k[ki] = new_kernel(ki);
        st->argset[ki] = 0;
    } else if (op < 96) { /* release a buffer (maybe used by held kernels), recreate it */
        CHECK(clReleaseMemObject(st->b[b]));
        st->b[b] = new_buffer(st, b + 10);
        st->tainted[b] = 0;
        for (int ki = 0; ki < NALL; ki++) st->argset[ki] = 0;
    } else if (op < 98) { /* release the queue mid-sequence (a second reference keeps it for a clFinish) */
        cl_command_queue old = st->q;
        CHECK(clRetainCommandQueue(old));
        CHECK(clReleaseCommandQueue(old));
        CHECK(clFinish(old));
        CHECK(clReleaseCommandQueue(old));
        st->q = new_queue(0);
        st->qgen += 2;
        st->tail = -1;
        st->nrun = 0;
    } else {
        CHECK(clFinish(st->q));
        st->nrun = 0;
    }
}


static void run_stream(struct stream *st, uint64_t plan_seed, uint64_t seed)
{
    memset(st, 0, sizeof *st);
    st->r.s = seed * 0x9E3779B97F4A7C15ull + 1;
    st->r2.s = seed * 0xD1B54A32D192ED03ull + 5;
    make_plan(plan_seed, &st->plan);
    st->q = new_queue(0);
    st->q2 = new_queue(0);
    st->tail = -1;
    st->uniform = chance(&st->r, 70);
    st->nk = local_family ? NALL : NKERN;
    if (local_family) st->L = local_sizes[below(&st->r, 4)];
    st->ooo = new_queue(1);
    for (int i = 0; i < NALL; i++) st->k[i] = new_kernel(i);
    for (int i = 0; i < NBUF; i++) st->b[i] = new_buffer(st, i);
    int seq = -1, pos = 0, nops = 10 + (int)below(&st->r, 40);
    for (int i = 0; i < nops; i++) {
        one_op(st, &seq, &pos);
        if (!local_family) observe(st); /* the local family's streams stay those its rules' checks were found in */
    }
    CHECK(clFinish(st->q));
    CHECK(clFinish(st->q2));
    CHECK(clFinish(st->ooo));
    if (st->nev) CHECK(clWaitForEvents((cl_uint)st->nev, st->ev));
    /* Callbacks run on a driver thread, maybe after the wait returned. */
    int fired = st->cb_registered ? wait_counter(&st->cb_fired, st->cb_registered - 1) : 1;
    say(st, " cb%d%s", st->cb_registered, fired ? "" : "!missing");
    for (int i = 0; i < NBUF; i++) {
        float host[NELEM_LOCAL];
        const size_t bytes = (size_t)nelem * sizeof *host;
        CHECK(clEnqueueReadBuffer(st->q, st->b[i], CL_TRUE, 0, bytes, host, 0, NULL, NULL));
        print_digest(st, "", i, host);
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
    for (int i = 0; i < NALL; i++) CHECK(clReleaseKernel(st->k[i]));
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
    local_family = plan_seed >= LOCAL_SEEDS;
    if (local_family) nelem = NELEM_LOCAL;
    cl_int err;
    dev = first_device(NULL);
    size_t max_wg = 0;
    CHECK(clGetDeviceInfo(dev, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof max_wg, &max_wg, NULL));
    while (local_sizes[3] > max_wg && local_sizes[3] > 256) local_sizes[3] /= 2;
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
