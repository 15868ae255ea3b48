/* bench_fusion — what kernel fusion buys, side by side in one run.
 *
 * Chains of K = 2, 4, 8 elementwise kernels (step_k: out = in * a + b, each
 * reading the previous kernel's output buffer and storing its own, so every
 * intermediate is stored) over N floats, these ways:
 *   unfused  the K kernels enqueued back to back (what the app does);
 *   fused    the same K enqueues between clStartFusionCLSHIM and
 *            clCompleteFusionCLSHIM: clshim's real path (holding, argument
 *            snapshots, the fused program from the cache, one launch);
 *   hand     a hand-written kernel doing the same work in one launch,
 *            storing every intermediate;
 *   internal the fused way with CL_FUSION_INTERNAL_CLSHIM: the
 *            intermediates are not needed afterwards, so the fused kernel
 *            keeps them in registers and stores only the last buffer;
 *   hand-internal  a hand-written kernel keeping the intermediates in
 *            registers (the fair comparison for internal);
 *   auto     the unfused loop again, with no plan and no extension call:
 *            automatic fusion (CLSHIM_FUSION=auto, which the program sets
 *            unless the environment says otherwise) learns the chain from
 *            its first runs and fuses it. Its kernels (autoK_k) have names of
 *            their own per K, so that the K = 2 chain learned first is not a
 *            prefix of the K = 4 one; the unfused way's kernels come from a
 *            program created from the binary of the same source, which
 *            clshim never holds, so that automatic fusion leaves them alone.
 *   plan     the unfused loop on kernels (planK_k) named in the plan PLAN,
 *            which the program sets in CLSHIM_FUSE unless the environment
 *            says otherwise: an unmodified program run with a plan (fused
 *            from the first chain; the K = 4 targets are printed
 *            for it and for fused).
 * Two modes, each way timed as a loop running that way would see it (every
 * timed run follows an untimed run of the same way, so caches and worker
 * threads are in the state that way leaves them):
 *   latency    one chain, then clFinish (each chain's result is waited for);
 *   pipelined  R chains back to back, then one clFinish, time divided by R
 *              (an iterative app that syncs rarely; N <= 1 Mi only, where
 *              launch costs matter).
 * Each figure is the median of at least 5 rounds (min and max beside it in
 * BENCH_CSV), the six ways interleaved round by round so that a change in
 * the machine's load hits all alike. The results of the first three ways,
 * auto and plan are compared bit for bit, every buffer; those of internal and
 * hand-internal with the others' last buffer (the intermediates excluded).
 * At the end the issues' targets for K = 4 are checked in each mode, beside
 * what the hand-written kernels themselves reach (the ceiling of any fusion
 * on this device).
 *
 * The program re-executes itself under LD_PRELOAD=<build>/libclshim.so with
 * a private CLSHIM_CACHE_DIR when the extension is not found.
 * --shape grid writes every kernel (and the hand-written one) as a
 * grid-stride loop over N elements run by at most GRID_ITEMS work-items,
 * the shape of PyOpenCL's ElementwiseKernel: there the fused kernel is
 * fast only when clshim merges the bodies' loops into one (fuse_loops.c).
 * The targets are checked for the pointwise shape only.
 * --launch-cost prints instead what one launch of a 4 Ki-item kernel costs
 * the driver by its number of buffer and scalar arguments: where launches
 * dominate, a fused kernel (the union of the chain's arguments) cannot gain
 * more than this allows.
 * --events makes every enqueue ask for an event (released at once), as
 * PyOpenCL does: a held kernel's event is a user event clshim completes.
 * --prime runs every way once per configuration (results still compared)
 * and times nothing: it fills a cache with the fused programs, e.g. on
 * PoCL with CLSHIM_FUSE_ROUTE=source for a GPU machine without LLVM, which
 * then takes the generated sources from the carried cache
 * (tests/compat/nvidia_fusion.sh).
 * --shape local times a 2-kernel chain whose consumer reads its neighbour's
 * element within the work-group (step: t = in * a + b; nbr: out[i] =
 * t[group * L + (lid + 1) % L] * 0.5 + t[i]), fused with force-barrier, four
 * ways: unfused; fused (t stored, the barrier between the bodies); local
 * (force-barrier and internal: clshim keeps t in a __local array); and
 * hand-local (a hand-written kernel with the __local array). Latency mode,
 * N = 1, 4, 16 Mi; `out` compared bit for bit across the four ways.
 * --host-cost measures instead the host time per chain of enqueueing
 * alone (HOST_REPS chains back to back, timed up to the last enqueue's
 * return; the clFinish after them is not timed), N = 4 Ki unless --n says
 * otherwise, six ways: unfused, fused, hand, auto, plan (kernels named in
 * the plan PLAN, set in CLSHIM_FUSE unless already set, enqueued as an
 * unmodified program does; also in every configuration's results check,
 * so --prime primes them), and hand-direct — the
 * hand-written kernel enqueued through the ICD loader's own
 * clEnqueueNDRangeKernel (looked up in libOpenCL.so.1, so clshim is not on
 * the path). fused - hand is what the fused launch costs the host beyond
 * an enqueue of the hand-written kernel; hand - hand-direct what clshim's
 * armed wrapper adds to a plain enqueue. Results are compared as usual.
 *   bench_fusion [--quick] [--k K] [--n N] [--mode latency|pipelined|both]
 *                [--shape pointwise|grid|local] [--events] [--launch-cost] [--prime] [--const]
 *                [--host-cost]
 * --const adds two ways: const (the fused way with CL_FUSION_CONST_CLSHIM:
 * the scalars a and b baked into the fused kernel) and internal-const (both
 * properties), and a table comparing them with fused and internal.
 */
#define CL_TARGET_OPENCL_VERSION 300
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <CL/cl.h>
#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "CL/clshim_ext.h"
#include "bench/bench_util.h"

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
#define GRID_ITEMS 8192 /* what PyOpenCL launches for large arrays on this machine */

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

static int grid_shape; /* --shape grid */
static int with_events; /* --events: every enqueue asks for an event (PyOpenCL does) */
static int prime_only;  /* --prime: no timing */
static int with_const;  /* --const: the ways const and internal-const too */
static int host_cost;   /* --host-cost: host time per chain, enqueue only */

static void enqueue(cl_kernel k, size_t gws, size_t lws)
{
    cl_event ev = NULL;
    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &gws, &lws, 0, NULL, with_events ? &ev : NULL));
    if (ev) CHECK(clReleaseEvent(ev));
}

/* step0..step7 and hand2/hand4/hand8; as grid-stride loops over n with
 * --shape grid (an extra last parameter n). */
static char *make_source(void)
{
    static char src[32768];
    const char *loop = grid_shape ? "for (long i = get_global_id(0); i < n; i += get_global_size(0))"
                                  : "size_t i = get_global_id(0);";
    const char *n_param = grid_shape ? ", long n" : "";
    size_t o = 0;
    for (int k = 0; k < KMAX; k++)
        o += (size_t)snprintf(src + o, sizeof src - o,
                              "__kernel void step%d(__global const float *in, __global float *out, float a, "
                              "float b%s) {\n    %s out[i] = in[i] * a + b; }\n",
                              k, n_param, loop);
    for (int K = 2; K <= KMAX; K *= 2)
        for (int k = 0; k < K; k++)
            for (int w = 0; w < 2; w++)
                o += (size_t)snprintf(src + o, sizeof src - o,
                                      "__kernel void %s%d_%d(__global const float *in, __global float *out, float a, "
                                      "float b%s) {\n    %s out[i] = in[i] * a + b; }\n",
                                      w ? "plan" : "auto", K, k, n_param, loop);
    for (int K = 2; K <= KMAX; K *= 2) {
        o += (size_t)snprintf(src + o, sizeof src - o, "__kernel void hand%d(__global const float *b0", K);
        for (int k = 1; k <= K; k++) o += (size_t)snprintf(src + o, sizeof src - o, ", __global float *b%d", k);
        for (int k = 0; k < K; k++) o += (size_t)snprintf(src + o, sizeof src - o, ", float a%d, float c%d", k, k);
        o += (size_t)snprintf(src + o, sizeof src - o, "%s) {\n    %s {\n    float v = b0[i];\n", n_param, loop);
        for (int k = 0; k < K; k++)
            o += (size_t)snprintf(src + o, sizeof src - o, "    v = v * a%d + c%d; b%d[i] = v;\n", k, k, k + 1);
        o += (size_t)snprintf(src + o, sizeof src - o, "}}\n");
        /* handreg: the same parameters; only the last buffer is stored */
        o += (size_t)snprintf(src + o, sizeof src - o, "__kernel void handreg%d(__global const float *b0", K);
        for (int k = 1; k <= K; k++) o += (size_t)snprintf(src + o, sizeof src - o, ", __global float *b%d", k);
        for (int k = 0; k < K; k++) o += (size_t)snprintf(src + o, sizeof src - o, ", float a%d, float c%d", k, k);
        o += (size_t)snprintf(src + o, sizeof src - o, "%s) {\n    %s {\n    float v = b0[i];\n", n_param, loop);
        for (int k = 0; k < K; k++) o += (size_t)snprintf(src + o, sizeof src - o, "    v = v * a%d + c%d;\n", k, k);
        o += (size_t)snprintf(src + o, sizeof src - o, "    b%d[i] = v;\n}}\n", K);
    }
    return src;
}

enum { LATENCY = 0, PIPELINED = 1 };
enum { UNFUSED, FUSED, HAND, INTERNAL, HAND_INTERNAL, AUTO, PLANNED, CONST, INTERNAL_CONST, NWAYS };
/* The ways timed: const and internal-const only with --const. */
static int nways(void) { return with_const ? NWAYS : PLANNED + 1; }
#define PIPELINED_REPS 32
/* The plan way's sequences, as an unmodified program would be run with. */
#define PLAN "plan2_0+plan2_1;plan4_0+plan4_1+plan4_2+plan4_3;" \
             "plan8_0+plan8_1+plan8_2+plan8_3+plan8_4+plan8_5+plan8_6+plan8_7"
#define PIPELINED_MAX_N (1u << 20)

struct result {
    int mode, K, same;
    size_t n;
    int same_last;   /* internal and hand-internal: the last buffer as the others' */
    double t[NWAYS], lo[NWAYS], hi[NWAYS]; /* seconds per chain, median, min, max, per way */
    int rounds;
};
static struct result results[64];
static int nresults;
static int modes = 3; /* bit LATENCY, bit PIPELINED */

struct setup {
    int K;
    size_t n, gws; /* elements, work-items */
    cl_mem buf[KMAX + 1];
    cl_kernel step[KMAX], hand, handreg;
    cl_kernel ustep[KMAX]; /* step0.. of the binary program: never held by clshim */
    cl_kernel autok[KMAX]; /* autoK_0.. */
    cl_kernel plank[KMAX]; /* planK_0..: named in the plan main() sets (PLAN), as an unmodified program's */
};

/* Each runs `reps` chains, then clFinish. */
static void run_unfused(struct setup *s, int reps)
{
    size_t gws = s->gws, lws = LOCAL;
    for (int r = 0; r < reps; r++)
        for (int k = 0; k < s->K; k++) enqueue(s->ustep[k], gws, lws);
    CHECK(clFinish(q));
}

/* The same loop on kernels clshim may hold: fused automatically. */
static void run_auto(struct setup *s, int reps)
{
    size_t gws = s->gws, lws = LOCAL;
    for (int r = 0; r < reps; r++)
        for (int k = 0; k < s->K; k++) enqueue(s->autok[k], gws, lws);
    CHECK(clFinish(q));
}

/* The same loop on kernels a plan names (PLAN): fused from the first chain. */
static void run_plan(struct setup *s, int reps)
{
    size_t gws = s->gws, lws = LOCAL;
    for (int r = 0; r < reps; r++)
        for (int k = 0; k < s->K; k++) enqueue(s->plank[k], gws, lws);
    CHECK(clFinish(q));
}

/* The chain through the extension API, completed with `props`. */
static void run_fused_with(struct setup *s, int reps, const cl_fusion_properties_clshim *props)
{
    size_t gws = s->gws, lws = LOCAL;
    for (int r = 0; r < reps; r++) {
        CHECK(start_fusion(q));
        for (int k = 0; k < s->K; k++) enqueue(s->step[k], gws, lws);
        CHECK(complete_fusion(q, props, NULL));
    }
    CHECK(clFinish(q));
}

static void run_fused(struct setup *s, int reps)
{
    run_fused_with(s, reps, NULL);
}

static void run_hand(struct setup *s, int reps)
{
    size_t gws = s->gws, lws = LOCAL;
    for (int r = 0; r < reps; r++) enqueue(s->hand, gws, lws);
    CHECK(clFinish(q));
}

static void run_internal(struct setup *s, int reps)
{
    static const cl_fusion_properties_clshim internal[] = {CL_FUSION_INTERNAL_CLSHIM, 1, 0};
    run_fused_with(s, reps, internal);
}

static void run_const(struct setup *s, int reps)
{
    static const cl_fusion_properties_clshim baked[] = {CL_FUSION_CONST_CLSHIM, 1, 0};
    run_fused_with(s, reps, baked);
}

static void run_internal_const(struct setup *s, int reps)
{
    static const cl_fusion_properties_clshim both[] = {CL_FUSION_INTERNAL_CLSHIM, 1, CL_FUSION_CONST_CLSHIM, 1, 0};
    run_fused_with(s, reps, both);
}

static void run_hand_internal(struct setup *s, int reps)
{
    size_t gws = s->gws, lws = LOCAL;
    for (int r = 0; r < reps; r++) enqueue(s->handreg, gws, lws);
    CHECK(clFinish(q));
}

/* Times per chain of the ways, measured interleaved (one of each per
 * round, for about `budget` seconds, at least 5 rounds) so that a change in
 * the machine's load hits all alike: median, min and max per way.
 * Each timed run follows an untimed one of the same way: what a loop of
 * that way sees. Even rounds run the ways in order, odd rounds backwards:
 * a way is slower right after one that stored every buffer (on PoCL at
 * 1 Mi, whichever of internal and hand-internal came right after hand was
 * 1.2-1.5x slower, with the same machine code), so each way follows a
 * heavy and a light neighbour alike. */
#define MAX_ROUNDS 4000
static void time_ways(struct setup *s, int reps, double budget, struct result *res)
{
    void (*fn[NWAYS])(struct setup *, int) = {run_unfused, run_fused, run_hand, run_internal, run_hand_internal,
                                          run_auto, run_plan, run_const, run_internal_const};
    static double t[NWAYS][MAX_ROUNDS];
    for (int v = 0; v < nways(); v++) fn[v](s, 1); /* warm-up: first-launch compilation, page faults */
    double spent = 0;
    int r;
    for (r = 0; r < MAX_ROUNDS && (r < 5 || spent < budget); r++)
        for (int i = 0; i < nways(); i++) {
            int v = r % 2 ? nways() - 1 - i : i; /* odd rounds backwards: see above */
            fn[v](s, reps);
            double t0 = now_s();
            fn[v](s, reps);
            t[v][r] = (now_s() - t0) / reps;
            spent += 2 * t[v][r] * reps;
        }
    res->rounds = r;
    for (int v = 0; v < nways(); v++) {
        res->t[v] = bu_median(t[v], (size_t)r);
        res->lo[v] = bu_quantile(t[v], (size_t)r, 0.0);
        res->hi[v] = bu_quantile(t[v], (size_t)r, 1.0);
    }
    static const char *const way[NWAYS] = {"unfused", "fused", "hand", "internal", "hand-internal", "auto",
                                           "plan", "const", "internal-const"};
    char cas[128];
    snprintf(cas, sizeof cas, "k=%d;n=%zu;mode=%s;shape=%s%s", s->K, s->n, reps > 1 ? "pipelined" : "latency",
             grid_shape ? "grid" : "pointwise", with_events ? ";events=1" : "");
    for (int v = 0; v < nways(); v++) {
        double ms[MAX_ROUNDS];
        for (int i = 0; i < r; i++) ms[i] = t[v][i] * 1e3;
        bu_csv("fusion", cas, way[v], "chain", "ms", ms, (size_t)r);
    }
}

/* A digest of buffers first..K. */
static uint64_t digest(struct setup *s, int first)
{
    uint64_t x = 1469598103934665603ULL;
    float *h = malloc(s->n * sizeof *h);
    for (int k = first; k <= s->K; k++) {
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

/* "16 Mi", "64 Ki". */
static void size_label(size_t n, char *out, size_t len)
{
    if (n >= (1u << 20)) snprintf(out, len, "%zu Mi", n >> 20);
    else snprintf(out, len, "%zu Ki", n >> 10);
}

/* ---- --host-cost: host time per chain, enqueue only ---- */

enum { HC_UNFUSED, HC_FUSED, HC_HAND, HC_AUTO, HC_PLAN, HC_DIRECT, HC_WAYS }; /* HC_DIRECT last: optional */
#define HOST_REPS 64
typedef cl_int(CL_API_CALL *enqueue_fn)(cl_command_queue, cl_kernel, cl_uint, const size_t *, const size_t *,
                                        const size_t *, cl_uint, const cl_event *, cl_event *);
static enqueue_fn direct_enqueue; /* the ICD loader's own, past clshim (NULL: not found) */

struct host_result {
    int K, same, rounds;
    size_t n;
    double t[HC_WAYS]; /* seconds of host time per chain, medians */
    /* The fused way call by call (medians over rounds of the per-round
     * means, seconds): clStartFusionCLSHIM, one held enqueue,
     * clCompleteFusionCLSHIM (fusing and the driver's enqueue); the hand
     * way's enqueue; and what reading the clock costs (already taken off). */
    double start, hold, complete, hand_call, clock_cost;
};
static struct host_result host_results[8];
static int nhost_results;

/* The loader's clEnqueueNDRangeKernel: dlsym on the loader's own handle
 * searches it (and its dependencies), not the preloaded shim. */
static void find_direct_enqueue(void)
{
    void *loader = dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (loader) direct_enqueue = (enqueue_fn)dlsym(loader, "clEnqueueNDRangeKernel");
    if (direct_enqueue == (enqueue_fn)clEnqueueNDRangeKernel) direct_enqueue = NULL; /* that is clshim's */
}

/* `reps` chains of one way, enqueued; no clFinish. */
static void host_enqueue(struct setup *s, int way, int reps)
{
    size_t gws = s->gws, lws = LOCAL;
    for (int r = 0; r < reps; r++) {
        if (way == HC_HAND) {
            enqueue(s->hand, gws, lws);
        } else if (way == HC_DIRECT) {
            cl_event ev = NULL;
            CHECK(direct_enqueue(q, s->hand, 1, NULL, &gws, &lws, 0, NULL, with_events ? &ev : NULL));
            if (ev) CHECK(clReleaseEvent(ev));
        } else {
            if (way == HC_FUSED) CHECK(start_fusion(q));
            for (int k = 0; k < s->K; k++)
                enqueue(way == HC_UNFUSED ? s->ustep[k]
                        : way == HC_FUSED ? s->step[k]
                        : way == HC_PLAN  ? s->plank[k]
                                          : s->autok[k],
                        gws, lws);
            if (way == HC_FUSED) CHECK(complete_fusion(q, NULL, NULL));
        }
    }
}

/* The fused way's calls timed one by one, beside the hand way's enqueue:
 * where the fused chain's host time goes. Each round enqueues HOST_REPS
 * chains of each way, reading the clock between calls, then clFinish. */
#define CALL_ROUNDS 15
static void time_host_calls(struct setup *s, struct host_result *res)
{
    double start[CALL_ROUNDS], hold[CALL_ROUNDS], complete[CALL_ROUNDS], hand[CALL_ROUNDS], clock[CALL_ROUNDS];
    size_t gws = s->gws, lws = LOCAL;
    for (int r = 0; r < CALL_ROUNDS; r++) {
        double c0 = now_s(), c1 = c0;
        for (int i = 0; i < 100; i++) c1 = now_s();
        clock[r] = (c1 - c0) / 100;
        double ts = 0, th = 0, tc = 0, tk = 0;
        for (int c = 0; c < HOST_REPS; c++) {
            double t0 = now_s();
            CHECK(start_fusion(q));
            double t1 = now_s();
            for (int k = 0; k < s->K; k++) enqueue(s->step[k], gws, lws);
            double t2 = now_s();
            CHECK(complete_fusion(q, NULL, NULL));
            double t3 = now_s();
            ts += t1 - t0;
            th += t2 - t1;
            tc += t3 - t2;
        }
        CHECK(clFinish(q));
        for (int c = 0; c < HOST_REPS; c++) {
            double t0 = now_s();
            enqueue(s->hand, gws, lws);
            tk += now_s() - t0;
        }
        CHECK(clFinish(q));
        start[r] = ts / HOST_REPS - clock[r];
        hold[r] = (th / HOST_REPS - clock[r]) / s->K;
        complete[r] = tc / HOST_REPS - clock[r];
        hand[r] = tk / HOST_REPS - clock[r];
    }
    res->start = bu_median(start, CALL_ROUNDS);
    res->hold = bu_median(hold, CALL_ROUNDS);
    res->complete = bu_median(complete, CALL_ROUNDS);
    res->hand_call = bu_median(hand, CALL_ROUNDS);
    res->clock_cost = bu_median(clock, CALL_ROUNDS);
}

/* Medians of interleaved rounds (even rounds in order, odd backwards), as
 * time_ways; each timed batch follows a clFinish, so the driver's queue
 * starts empty. */
static void time_host(struct setup *s, int same)
{
    static double t[HC_WAYS][MAX_ROUNDS];
    static const char *const way[HC_WAYS] = {"unfused", "fused", "hand", "auto", "plan", "hand-direct"};
    int nw = direct_enqueue ? HC_WAYS : HC_DIRECT;
    struct host_result *res = &host_results[nhost_results++];
    res->K = s->K;
    res->n = s->n;
    res->same = same;
    for (int v = 0; v < nw; v++) {
        host_enqueue(s, v, HOST_REPS);
        CHECK(clFinish(q));
    }
    double spent = 0;
    int r;
    for (r = 0; r < MAX_ROUNDS && (r < 9 || spent < 1.5); r++)
        for (int i = 0; i < nw; i++) {
            int v = r % 2 ? nw - 1 - i : i;
            double t0 = now_s();
            host_enqueue(s, v, HOST_REPS);
            double t1 = now_s();
            CHECK(clFinish(q));
            t[v][r] = (t1 - t0) / HOST_REPS;
            spent += now_s() - t0;
        }
    res->rounds = r;
    time_host_calls(s, res);
    char cas[128];
    snprintf(cas, sizeof cas, "k=%d;n=%zu;mode=host-cost%s", s->K, s->n, with_events ? ";events=1" : "");
    for (int v = 0; v < HC_WAYS; v++) {
        res->t[v] = v < nw ? bu_median(t[v], (size_t)r) : 0;
        double ns[MAX_ROUNDS];
        for (int i = 0; i < r && v < nw; i++) ns[i] = t[v][i] * 1e9;
        if (v < nw) bu_csv("fusion", cas, way[v], "host-per-chain", "ns", ns, (size_t)r);
    }
}

static void print_host_table(void)
{
    printf("\nhost time per chain, enqueue only (%d chains back to back; the clFinish after them not timed)%s; "
           "ns, medians of interleaved rounds\n\n", HOST_REPS, with_events ? "; an event for every enqueue" : "");
    printf("| K | N | unfused | fused | hand | auto | plan | hand-direct (no clshim) | fused - hand | auto - hand "
           "| plan - hand | hand - hand-direct | rounds | results |\n"
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < nhost_results; i++) {
        const struct host_result *r = &host_results[i];
        char nn[32], direct[32] = "-", over[32] = "-";
        size_label(r->n, nn, sizeof nn);
        if (direct_enqueue) {
            snprintf(direct, sizeof direct, "%.0f", r->t[HC_DIRECT] * 1e9);
            snprintf(over, sizeof over, "%+.0f", (r->t[HC_HAND] - r->t[HC_DIRECT]) * 1e9);
        }
        printf("| %d | %s | %.0f | %.0f | %.0f | %.0f | %.0f | %s | %+.0f | %+.0f | %+.0f | %s | %d | %s |\n", r->K, nn,
               r->t[HC_UNFUSED] * 1e9, r->t[HC_FUSED] * 1e9, r->t[HC_HAND] * 1e9, r->t[HC_AUTO] * 1e9,
               r->t[HC_PLAN] * 1e9, direct, (r->t[HC_FUSED] - r->t[HC_HAND]) * 1e9,
               (r->t[HC_AUTO] - r->t[HC_HAND]) * 1e9, (r->t[HC_PLAN] - r->t[HC_HAND]) * 1e9, over, r->rounds,
               r->same ? "same" : "DIFFER");
    }
    printf("\nthe fused way call by call, beside the hand way's enqueue (ns; the clock read, its cost taken "
           "off each figure)\n\n| K | start | one held enqueue | complete (fusing + the driver's enqueue) "
           "| hand's enqueue | complete - hand's enqueue | clock read |\n|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < nhost_results; i++) {
        const struct host_result *r = &host_results[i];
        printf("| %d | %.0f | %.0f | %.0f | %.0f | %+.0f | %.0f |\n", r->K, r->start * 1e9, r->hold * 1e9,
               r->complete * 1e9, r->hand_call * 1e9, (r->complete - r->hand_call) * 1e9, r->clock_cost * 1e9);
    }
}

static cl_kernel step_kernel(cl_program prog, const char *name, const struct setup *s, int k, cl_long n_arg)
{
    cl_int err;
    cl_kernel kern = clCreateKernel(prog, name, &err);
    CHECK(err);
    float a = 1.0f + 0.125f * (float)k, b = 0.5f - 0.25f * (float)k;
    CHECK(clSetKernelArg(kern, 0, sizeof(cl_mem), &s->buf[k]));
    CHECK(clSetKernelArg(kern, 1, sizeof(cl_mem), &s->buf[k + 1]));
    CHECK(clSetKernelArg(kern, 2, sizeof a, &a));
    CHECK(clSetKernelArg(kern, 3, sizeof b, &b));
    if (grid_shape) CHECK(clSetKernelArg(kern, 4, sizeof n_arg, &n_arg));
    return kern;
}

static void bench_one(cl_program prog, cl_program bin, int K, size_t n, int *fails)
{
    struct setup s;
    memset(&s, 0, sizeof s);
    s.K = K;
    s.n = n;
    s.gws = grid_shape && n > GRID_ITEMS ? GRID_ITEMS : n;
    cl_long n_arg = (cl_long)n;
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
        s.step[k] = step_kernel(prog, name, &s, k, n_arg);
        s.ustep[k] = step_kernel(bin, name, &s, k, n_arg);
        snprintf(name, sizeof name, "auto%d_%d", K, k);
        s.autok[k] = step_kernel(prog, name, &s, k, n_arg);
        snprintf(name, sizeof name, "plan%d_%d", K, k);
        s.plank[k] = step_kernel(prog, name, &s, k, n_arg);
    }
    for (int way = 0; way < 2; way++) {
        snprintf(name, sizeof name, "%s%d", way ? "handreg" : "hand", K);
        cl_kernel h = clCreateKernel(prog, name, &err);
        CHECK(err);
        for (int k = 0; k <= K; k++) CHECK(clSetKernelArg(h, (cl_uint)k, sizeof(cl_mem), &s.buf[k]));
        for (int k = 0; k < K; k++) {
            float a = 1.0f + 0.125f * (float)k, b = 0.5f - 0.25f * (float)k;
            CHECK(clSetKernelArg(h, (cl_uint)(K + 1 + 2 * k), sizeof a, &a));
            CHECK(clSetKernelArg(h, (cl_uint)(K + 2 + 2 * k), sizeof b, &b));
        }
        if (grid_shape) CHECK(clSetKernelArg(h, (cl_uint)(3 * K + 1), sizeof n_arg, &n_arg));
        if (way) s.handreg = h;
        else s.hand = h;
    }
    clear_outputs(&s);
    run_unfused(&s, 1);
    uint64_t du = digest(&s, 1), du_last = digest(&s, K);
    clear_outputs(&s);
    run_fused(&s, 1);
    uint64_t df = digest(&s, 1);
    clear_outputs(&s);
    run_hand(&s, 1);
    uint64_t dh = digest(&s, 1);
    clear_outputs(&s);
    run_internal(&s, 1);
    uint64_t di_last = digest(&s, K);
    clear_outputs(&s);
    run_hand_internal(&s, 1);
    uint64_t dhi_last = digest(&s, K);
    clear_outputs(&s);
    for (int i = 0; i < 3; i++) run_auto(&s, 1); /* learned from the first two, fused from the third */
    uint64_t da = digest(&s, 1), dc = da, dic_last = di_last;
    clear_outputs(&s);
    run_plan(&s, 1);
    uint64_t dp = digest(&s, 1);
    if (with_const) {
        clear_outputs(&s);
        run_const(&s, 1);
        dc = digest(&s, 1);
        clear_outputs(&s);
        run_internal_const(&s, 1);
        dic_last = digest(&s, K);
    }
    int same = du == df && df == dh && dh == da && da == dc && dc == dp;
    int same_last = du_last == di_last && di_last == dhi_last && dhi_last == dic_last;
    if (!same || !same_last) (*fails)++;
    if (prime_only) printf("K=%d n=%zu: %s\n", K, n, same && same_last ? "same results" : "RESULTS DIFFER");
    if (host_cost) time_host(&s, same);
    for (int mode = 0; mode < 2 && !prime_only && !host_cost; mode++) {
        if (!(modes & (1 << mode)) || (mode == PIPELINED && n > PIPELINED_MAX_N)) continue;
        struct result *res = &results[nresults++];
        res->mode = mode;
        res->K = K;
        res->n = n;
        res->same = same;
        res->same_last = same_last;
        time_ways(&s, mode == PIPELINED ? PIPELINED_REPS : 1, n >= (16u << 20) ? 6.0 : 1.5, res);
        fprintf(stderr, ".");
    }
    for (int k = 0; k < K; k++) {
        clReleaseKernel(s.step[k]);
        clReleaseKernel(s.ustep[k]);
        clReleaseKernel(s.autok[k]);
        clReleaseKernel(s.plank[k]);
    }
    clReleaseKernel(s.hand);
    clReleaseKernel(s.handreg);
    for (int k = 0; k <= K; k++) clReleaseMemObject(s.buf[k]);
}

static void print_tables(void)
{
    static const char *const title[2] = {
        "latency: one chain, then clFinish",
        "pipelined: 32 chains back to back, then one clFinish; time per chain",
    };
    for (int mode = 0; mode < 2; mode++) {
        int any = 0;
        for (int i = 0; i < nresults; i++) any |= results[i].mode == mode;
        if (!any) continue;
        printf("\n%s%s%s (ms)\n\n", title[mode],
               grid_shape ? "; every kernel a grid-stride loop run by at most 8192 work-items" : "",
               with_events ? "; an event for every enqueue" : "");
        printf("| K | N | unfused | fused | hand | speedup (unfused/fused) | hand's speedup (unfused/hand) "
               "| fused/hand | internal | hand-internal | speedup (unfused/internal) | internal/hand-internal "
               "| auto | speedup (unfused/auto) | plan | speedup (unfused/plan) | plan/hand | results |\n");
        printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
        for (int i = 0; i < nresults; i++) {
            const struct result *r = &results[i];
            if (r->mode != mode) continue;
            char nn[32];
            size_label(r->n, nn, sizeof nn);
            printf("| %d | %6s | %10.4f | %10.4f | %10.4f | %6.2fx | %6.2fx | %6.2f | %10.4f | %10.4f | %6.2fx "
                   "| %6.2f | %10.4f | %6.2fx | %10.4f | %6.2fx | %6.2f | %s |\n", r->K, nn, r->t[UNFUSED] * 1e3,
                   r->t[FUSED] * 1e3, r->t[HAND] * 1e3,
                   r->t[UNFUSED] / r->t[FUSED], r->t[UNFUSED] / r->t[HAND], r->t[FUSED] / r->t[HAND],
                   r->t[INTERNAL] * 1e3, r->t[HAND_INTERNAL] * 1e3, r->t[UNFUSED] / r->t[INTERNAL],
                   r->t[INTERNAL] / r->t[HAND_INTERNAL], r->t[AUTO] * 1e3, r->t[UNFUSED] / r->t[AUTO],
                   r->t[PLANNED] * 1e3, r->t[UNFUSED] / r->t[PLANNED], r->t[PLANNED] / r->t[HAND],
                   r->same && r->same_last ? "same" : r->same ? "internal DIFFER" : "DIFFER");
        }
        if (!with_const) continue;
        printf("\nconst (scalars baked in, CL_FUSION_CONST_CLSHIM), %s (ms)\n\n", title[mode]);
        printf("| K | N | fused | const | fused/const | internal | internal-const | internal/internal-const "
               "| hand-internal | internal-const/hand-internal |\n|---|---|---|---|---|---|---|---|---|---|\n");
        for (int i = 0; i < nresults; i++) {
            const struct result *r = &results[i];
            if (r->mode != mode) continue;
            char nn[32];
            size_label(r->n, nn, sizeof nn);
            printf("| %d | %6s | %10.4f | %10.4f | %6.3f | %10.4f | %10.4f | %6.3f | %10.4f | %6.3f |\n", r->K, nn,
                   r->t[FUSED] * 1e3, r->t[CONST] * 1e3, r->t[FUSED] / r->t[CONST], r->t[INTERNAL] * 1e3,
                   r->t[INTERNAL_CONST] * 1e3, r->t[INTERNAL] / r->t[INTERNAL_CONST], r->t[HAND_INTERNAL] * 1e3,
                   r->t[INTERNAL_CONST] / r->t[HAND_INTERNAL]);
        }
    }
}

/* The targets at K = 4, per mode: fused never slower than unfused
 * (any K), >= 1.3x at N >= 16 Mi, >= 2x at N <= 1 Mi, within 1.1x of the
 * hand-written kernel everywhere. */
static void print_targets(void)
{
    static const char *const name[2] = {"latency", "pipelined"};
    if (grid_shape) return; /* the targets are set for the pointwise chain */
    printf("\n");
    for (int mode = 0; mode < 2; mode++) {
        int any = 0, never_slower = 1, big_ok = 1, small_ok = 1, hand_ok = 1, big_any = 0, small_any = 0;
        double big_min = 1e9, small_min = 1e9, small_hand = 1e9, worst_hand = 0, worst_slow = 1e9;
        for (int i = 0; i < nresults; i++) {
            const struct result *r = &results[i];
            if (r->mode != mode) continue;
            any = 1;
            double sp = r->t[0] / r->t[1], fh = r->t[1] / r->t[2];
            if (sp < worst_slow) worst_slow = sp;
            if (sp < 1.0) never_slower = 0;
            if (fh > worst_hand) worst_hand = fh;
            if (fh > 1.1) hand_ok = 0;
            if (r->K != 4) continue;
            if (r->n >= (16u << 20)) {
                big_any = 1;
                if (sp < big_min) big_min = sp;
                if (sp < 1.3) big_ok = 0;
            }
            if (r->n <= (1u << 20)) {
                small_any = 1;
                if (sp < small_min) small_min = sp;
                if (sp < 2.0) small_ok = 0;
                if (r->t[0] / r->t[2] < small_hand) small_hand = r->t[0] / r->t[2];
            }
        }
        if (!any) continue;
        printf("%s: fused never slower than unfused (lowest speedup %.2fx): target %s\n", name[mode], worst_slow,
               never_slower ? "met" : "MISSED");
        if (big_any)
            printf("%s: K=4, N >= 16 Mi: >= 1.3x (lowest %.2fx): target %s\n", name[mode], big_min,
                   big_ok ? "met" : "MISSED");
        if (small_any)
            printf("%s: K=4, N <= 1 Mi: >= 2x (lowest %.2fx; the hand-written kernel's lowest: %.2fx): target %s\n",
                   name[mode], small_min, small_hand, small_ok ? "met" : "MISSED");
        printf("%s: fused within 1.1x of hand-written everywhere (worst %.2fx): target %s\n", name[mode],
               worst_hand, hand_ok ? "met" : "MISSED");
        /* issue 19: K = 4 internalised, 1 Mi <= N <= 64 Mi */
        int in_any = 0, in_fast = 1, in_hand = 1;
        double in_min = 1e9, in_worst = 0, hi_min = 1e9;
        for (int i = 0; i < nresults; i++) {
            const struct result *r = &results[i];
            if (r->mode != mode || r->K != 4 || r->n < (1u << 20) || r->n > (64u << 20)) continue;
            in_any = 1;
            double sp = r->t[UNFUSED] / r->t[INTERNAL], ih = r->t[INTERNAL] / r->t[HAND_INTERNAL];
            if (sp < in_min) in_min = sp;
            if (sp < 3.0) in_fast = 0;
            if (ih > in_worst) in_worst = ih;
            if (ih > 1.1) in_hand = 0;
            if (r->t[UNFUSED] / r->t[HAND_INTERNAL] < hi_min) hi_min = r->t[UNFUSED] / r->t[HAND_INTERNAL];
        }
        /* issue 18: K = 4, an unmodified program with a plan (and the
         * extension API beside it): >= 2.5x at N <= 1 Mi, >= 1.8x at
         * 16-64 Mi, within 1.1x of the hand-written kernel */
        for (int w = PLANNED; w >= FUSED; w -= PLANNED - FUSED) {
            double lo_small = 1e9, lo_big = 1e9, worst = 0, hand_small = 1e9;
            for (int i = 0; i < nresults; i++) {
                const struct result *r = &results[i];
                if (r->mode != mode || r->K != 4) continue;
                double sp = r->t[UNFUSED] / r->t[w];
                if (r->n <= (1u << 20) && sp < lo_small) lo_small = sp;
                if (r->n <= (1u << 20) && r->t[UNFUSED] / r->t[HAND] < hand_small) hand_small = r->t[UNFUSED] / r->t[HAND];
                if (r->n >= (16u << 20) && sp < lo_big) lo_big = sp;
                if (r->t[w] / r->t[HAND] > worst) worst = r->t[w] / r->t[HAND];
            }
            const char *wn = w == PLANNED ? "plan" : "fused (extension API)";
            if (lo_small < 1e9)
                printf("%s: K=4 %s, N <= 1 Mi: >= 2.5x (lowest %.2fx; the hand-written kernel's lowest: %.2fx): "
                       "target %s\n", name[mode], wn, lo_small, hand_small, lo_small >= 2.5 ? "met" : "MISSED");
            if (lo_big < 1e9)
                printf("%s: K=4 %s, N 16-64 Mi: >= 1.8x (lowest %.2fx): target %s\n", name[mode], wn, lo_big,
                       lo_big >= 1.8 ? "met" : "MISSED");
            if (worst > 0)
                printf("%s: K=4 %s within 1.1x of hand-written (worst %.2fx): target %s\n", name[mode], wn, worst,
                       worst <= 1.1 ? "met" : "MISSED");
        }
        /* issue 19: automatic fusion of the K = 4 chain at 1 Mi, no plan */
        for (int i = 0; i < nresults; i++) {
            const struct result *r = &results[i];
            if (r->mode != mode || r->K != 4 || r->n != (1u << 20)) continue;
            double sp = r->t[UNFUSED] / r->t[AUTO];
            printf("%s: K=4 auto (no plan), 1 Mi: >= 1.5x (%.2fx): target %s\n", name[mode], sp,
                   sp >= 1.5 ? "met" : "MISSED");
        }
        if (in_any) {
            printf("%s: K=4 internal, 1-64 Mi: >= 3x (lowest %.2fx; hand-internal's lowest: %.2fx): target %s\n",
                   name[mode], in_min, hi_min, in_fast ? "met" : "MISSED");
            printf("%s: K=4 internal within 1.1x of hand-internal (worst %.2fx): target %s\n", name[mode],
                   in_worst, in_hand ? "met" : "MISSED");
        }
    }
}

/* Per-launch cost by argument count: best of 20 batches of 200 launches
 * and one clFinish, after a warm-up. Buffers hold 1.0f (never denormals). */
static void launch_cost(void)
{
    static const char *src =
        "__kernel void b2(__global float *a, __global float *b) { size_t i = get_global_id(0); b[i] = a[i]; }\n"
        "__kernel void b5(__global float *a, __global float *b, __global float *c, __global float *d,\n"
        "                 __global float *e) { size_t i = get_global_id(0); b[i] = c[i] = d[i] = e[i] = a[i]; }\n"
        "__kernel void b2s8(__global float *a, __global float *b, float s0, float s1, float s2, float s3, float s4,\n"
        "                   float s5, float s6, float s7) {\n"
        "    size_t i = get_global_id(0); b[i] = a[i] * s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7; }\n"
        "__kernel void b5s8(__global float *a, __global float *b, __global float *c, __global float *d,\n"
        "                   __global float *e, float s0, float s1, float s2, float s3, float s4, float s5,\n"
        "                   float s6, float s7) {\n"
        "    size_t i = get_global_id(0); b[i] = a[i] * s0 + s1; c[i] = a[i] * s2 + s3; d[i] = a[i] * s4 + s5;\n"
        "    e[i] = a[i] * s6 + s7; }\n";
    static const char *const names[] = {"b2", "b5", "b2s8", "b5s8"};
    static const int nbuf[] = {2, 5, 2, 5}, nscalar[] = {0, 0, 8, 8};
    cl_int err;
    cl_program prog = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
    CHECK(err);
    CHECK(clBuildProgram(prog, 1, &dev, NULL, NULL, NULL));
    const size_t n = 4096, lws = LOCAL;
    cl_mem m[5];
    float one = 1.0f;
    for (int i = 0; i < 5; i++) {
        m[i] = clCreateBuffer(ctx, CL_MEM_READ_WRITE, n * sizeof(float), NULL, &err);
        CHECK(err);
        CHECK(clEnqueueFillBuffer(q, m[i], &one, sizeof one, 0, n * sizeof(float), 0, NULL, NULL));
    }
    CHECK(clFinish(q));
    printf("\nper-launch cost, %zu work-items, 200 launches per clFinish (us)\n\n", n);
    printf("| kernel | buffer arguments | scalar arguments | us per launch |\n|---|---|---|---|\n");
    for (int v = 0; v < 4; v++) {
        cl_kernel k = clCreateKernel(prog, names[v], &err);
        CHECK(err);
        for (int i = 0; i < nbuf[v]; i++) CHECK(clSetKernelArg(k, (cl_uint)i, sizeof(cl_mem), &m[i]));
        for (int i = 0; i < nscalar[v]; i++) CHECK(clSetKernelArg(k, (cl_uint)(nbuf[v] + i), sizeof one, &one));
        double best = 1e30;
        for (int rep = -3; rep < 20; rep++) { /* three warm-up batches */
            double t0 = now_s();
            for (int r = 0; r < 200; r++) CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &n, &lws, 0, NULL, NULL));
            CHECK(clFinish(q));
            double t = (now_s() - t0) / 200;
            if (rep >= 0 && t < best) best = t;
        }
        printf("| %s | %d | %d | %.2f |\n", names[v], nbuf[v], nscalar[v], best * 1e6);
        clReleaseKernel(k);
    }
    for (int i = 0; i < 5; i++) clReleaseMemObject(m[i]);
    clReleaseProgram(prog);
}

/* ---- --shape local: a within-group neighbour chain, t in local memory ---- */

#define LWAYS 4
static const char *local_src =
    "__kernel void lstep(__global const float *in, __global float *t, float a, float b) {\n"
    "    size_t i = get_global_id(0); t[i] = in[i] * a + b; }\n"
    "__kernel void lnbr(__global const float *t, __global float *out) {\n"
    "    size_t i = get_global_id(0), l = get_local_id(0), n = get_local_size(0);\n"
    "    out[i] = t[get_group_id(0) * n + (l + 1) % n] * 0.5f + t[i]; }\n"
    "__kernel void lhand(__global const float *in, __global float *out, float a, float b) {\n"
    "    __local float s[256];\n"
    "    size_t i = get_global_id(0), l = get_local_id(0), n = get_local_size(0);\n"
    "    s[l] = in[i] * a + b;\n"
    "    barrier(CLK_LOCAL_MEM_FENCE);\n"
    "    out[i] = s[(l + 1) % n] * 0.5f + s[l]; }\n";

struct local_setup {
    size_t n;
    cl_kernel step, nbr, ustep, unbr, hand;
};

static void local_run(const struct local_setup *s, int way)
{
    size_t gws = s->n, lws = LOCAL;
    static const cl_fusion_properties_clshim forced[] = {CL_FUSION_FORCE_BARRIER_CLSHIM, 1, 0};
    static const cl_fusion_properties_clshim local[] = {CL_FUSION_FORCE_BARRIER_CLSHIM, 1,
                                                        CL_FUSION_INTERNAL_CLSHIM, 1, 0};
    if (way == 0) {
        enqueue(s->ustep, gws, lws);
        enqueue(s->unbr, gws, lws);
    } else if (way == 3) {
        enqueue(s->hand, gws, lws);
    } else {
        CHECK(start_fusion(q));
        enqueue(s->step, gws, lws);
        enqueue(s->nbr, gws, lws);
        CHECK(complete_fusion(q, way == 1 ? forced : local, NULL));
    }
    CHECK(clFinish(q));
}

static void bench_local(cl_context c, const size_t *ns, size_t nn)
{
    cl_int err;
    cl_program prog = clCreateProgramWithSource(c, 1, &local_src, NULL, &err);
    CHECK(err);
    CHECK(clBuildProgram(prog, 1, &dev, NULL, NULL, NULL));
    size_t bin_size = 0; /* the unfused way's kernels from the binary: clshim never holds them */
    CHECK(clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof bin_size, &bin_size, NULL));
    unsigned char *bin_bytes = malloc(bin_size);
    CHECK(clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof bin_bytes, &bin_bytes, NULL));
    cl_program bin = clCreateProgramWithBinary(c, 1, &dev, &bin_size, (const unsigned char **)&bin_bytes, NULL, &err);
    CHECK(err);
    CHECK(clBuildProgram(bin, 1, &dev, NULL, NULL, NULL));
    free(bin_bytes);
    static const char *const way[LWAYS] = {"unfused", "fused", "local", "hand-local"};
    printf("\n`bench_fusion --shape local`: step + within-group neighbour read, local size %d, latency; ms per "
           "chain, median (min-max) of interleaved rounds:\n\n", LOCAL);
    printf("| N | unfused | fused (t stored) | local (t in __local) | hand-local | unfused/local | local/hand-local "
           "| rounds |\n|---|---|---|---|---|---|---|---|\n");
    int fails = 0;
    for (size_t ni = 0; ni < nn; ni++) {
        struct local_setup s = {.n = ns[ni]};
        size_t bytes = s.n * sizeof(float);
        float *host = malloc(bytes), *ref = malloc(bytes), *got = malloc(bytes);
        for (size_t i = 0; i < s.n; i++) host[i] = (float)(i % 1000) * 0.013f - 3.0f;
        cl_mem in = clCreateBuffer(c, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bytes, host, &err);
        CHECK(err);
        cl_mem t = clCreateBuffer(c, CL_MEM_READ_WRITE, bytes, NULL, &err);
        CHECK(err);
        cl_mem out = clCreateBuffer(c, CL_MEM_READ_WRITE, bytes, NULL, &err);
        CHECK(err);
        float a = 1.25f, b = -0.5f;
        cl_kernel *steps[2] = {&s.step, &s.ustep}, *nbrs[2] = {&s.nbr, &s.unbr};
        for (int p = 0; p < 2; p++) {
            cl_program from = p ? bin : prog;
            *steps[p] = clCreateKernel(from, "lstep", &err);
            CHECK(err);
            *nbrs[p] = clCreateKernel(from, "lnbr", &err);
            CHECK(err);
            CHECK(clSetKernelArg(*steps[p], 0, sizeof in, &in));
            CHECK(clSetKernelArg(*steps[p], 1, sizeof t, &t));
            CHECK(clSetKernelArg(*steps[p], 2, sizeof a, &a));
            CHECK(clSetKernelArg(*steps[p], 3, sizeof b, &b));
            CHECK(clSetKernelArg(*nbrs[p], 0, sizeof t, &t));
            CHECK(clSetKernelArg(*nbrs[p], 1, sizeof out, &out));
        }
        s.hand = clCreateKernel(prog, "lhand", &err);
        CHECK(err);
        CHECK(clSetKernelArg(s.hand, 0, sizeof in, &in));
        CHECK(clSetKernelArg(s.hand, 1, sizeof out, &out));
        CHECK(clSetKernelArg(s.hand, 2, sizeof a, &a));
        CHECK(clSetKernelArg(s.hand, 3, sizeof b, &b));
        for (int w = 0; w < LWAYS; w++) { /* warm-up, and `out` compared bit for bit */
            float zero = 0;
            CHECK(clEnqueueFillBuffer(q, out, &zero, sizeof zero, 0, bytes, 0, NULL, NULL));
            local_run(&s, w);
            CHECK(clEnqueueReadBuffer(q, out, CL_TRUE, 0, bytes, w ? got : ref, 0, NULL, NULL));
            if (w && memcmp(ref, got, bytes)) {
                fprintf(stderr, "bench_fusion --shape local: N=%zu: way %s gives another `out`\n", s.n, way[w]);
                fails++;
            }
        }
        static double tm[LWAYS][MAX_ROUNDS];
        double spent = 0;
        int r;
        for (r = 0; r < MAX_ROUNDS && (r < 5 || spent < 2.0); r++)
            for (int w = 0; w < LWAYS; w++) {
                local_run(&s, w);
                double t0 = now_s();
                local_run(&s, w);
                tm[w][r] = now_s() - t0;
                spent += 2 * tm[w][r];
            }
        double med[LWAYS];
        printf("| %zu Mi |", s.n >> 20);
        for (int w = 0; w < LWAYS; w++) {
            med[w] = bu_median(tm[w], (size_t)r);
            printf(" %.3f (%.3f-%.3f) |", med[w] * 1e3, bu_quantile(tm[w], (size_t)r, 0) * 1e3,
                   bu_quantile(tm[w], (size_t)r, 1) * 1e3);
        }
        printf(" %.2fx | %.2fx | %d |\n", med[0] / med[2], med[2] / med[3], r);
        fflush(stdout);
        cl_kernel ks[] = {s.step, s.nbr, s.ustep, s.unbr, s.hand};
        for (size_t k = 0; k < sizeof ks / sizeof *ks; k++) clReleaseKernel(ks[k]);
        clReleaseMemObject(in);
        clReleaseMemObject(t);
        clReleaseMemObject(out);
        free(host);
        free(ref);
        free(got);
    }
    clReleaseProgram(bin);
    clReleaseProgram(prog);
    if (fails) {
        fprintf(stderr, "bench_fusion --shape local: %d ways gave different results\n", fails);
        exit(1);
    }
}

/* clshim reads its configuration when it is loaded, so the settings main()
 * makes (CLSHIM_FUSION, CLSHIM_FUSE) reach a shim already preloaded (a
 * baseline's, say) only through an exec; returns only on failure. */
static void reexec_for_settings(char **argv)
{
    if (getenv("BENCH_FUSION_REEXEC") || !getenv("LD_PRELOAD")) return;
    setenv("BENCH_FUSION_REEXEC", "1", 1);
    execv("/proc/self/exe", argv);
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
    int quick = 0, only_k = 0, cost = 0, local_shape = 0;
    size_t only_n = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--launch-cost")) cost = 1;
        else if (!strcmp(argv[i], "--k") && i + 1 < argc) only_k = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--n") && i + 1 < argc) only_n = (size_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "--mode") && i + 1 < argc) {
            const char *m = argv[++i];
            modes = !strcmp(m, "latency") ? 1 : !strcmp(m, "pipelined") ? 2 : !strcmp(m, "both") ? 3 : 0;
            if (!modes) {
                fprintf(stderr, "bench_fusion: --mode latency|pipelined|both\n");
                return 2;
            }
        } else if (!strcmp(argv[i], "--events")) {
            with_events = 1;
        } else if (!strcmp(argv[i], "--const")) {
            with_const = 1;
        } else if (!strcmp(argv[i], "--prime")) {
            prime_only = 1;
        } else if (!strcmp(argv[i], "--host-cost")) {
            host_cost = 1;
        } else if (!strcmp(argv[i], "--shape") && i + 1 < argc && !strcmp(argv[i + 1], "grid")) {
            grid_shape = 1;
            i++;
        } else if (!strcmp(argv[i], "--shape") && i + 1 < argc && !strcmp(argv[i + 1], "pointwise")) {
            i++;
        } else if (!strcmp(argv[i], "--shape") && i + 1 < argc && !strcmp(argv[i + 1], "local")) {
            local_shape = 1;
            i++;
        } else {
            fprintf(stderr, "usage: bench_fusion [--quick] [--k K] [--n N] [--mode latency|pipelined|both] "
                            "[--shape pointwise|grid|local] [--events] [--launch-cost] [--prime] [--const] [--host-cost]\n");
            return 2;
        }
    }
    setenv("CLSHIM_FUSION", "auto", 0); /* the auto way; read at clshim's first call */
    setenv("CLSHIM_FUSE", PLAN, 0);      /* the plan way */
    reexec_for_settings(argv);
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
    if (local_shape) {
        static const size_t local_n[] = {1u << 20, 4u << 20, 16u << 20};
        size_t nn = 0, ns[3];
        for (size_t i = 0; i < (quick ? 2 : 3); i++)
            if (!only_n || local_n[i] == only_n) ns[nn++] = local_n[i];
        bench_local(ctx, ns, nn);
        clReleaseCommandQueue(q);
        clReleaseContext(ctx);
        return 0;
    }
    if (cost) {
        launch_cost();
        clReleaseCommandQueue(q);
        clReleaseContext(ctx);
        return 0;
    }
    const char *src = make_source();
    cl_program prog = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
    CHECK(err);
    CHECK(clBuildProgram(prog, 1, &dev, NULL, NULL, NULL));
    /* The unfused way's kernels: the same code from the binary (see the top). */
    size_t bin_size = 0;
    CHECK(clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof bin_size, &bin_size, NULL));
    unsigned char *bin_bytes = malloc(bin_size);
    CHECK(clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof bin_bytes, &bin_bytes, NULL));
    cl_program bin = clCreateProgramWithBinary(ctx, 1, &dev, &bin_size, (const unsigned char **)&bin_bytes, NULL,
                                               &err);
    CHECK(err);
    CHECK(clBuildProgram(bin, 1, &dev, NULL, NULL, NULL));
    free(bin_bytes);
    char devname[256] = "";
    clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof devname, devname, NULL);
    printf("bench_fusion on %s, local size %d; medians of >= 5 interleaved rounds, each way timed after an "
           "untimed run of itself\n", devname, LOCAL);
    fflush(stdout);
    static const size_t all_n[] = {4u << 10, 64u << 10, 1u << 20, 16u << 20, 64u << 20};
    static const size_t quick_n[] = {4u << 10, 1u << 20, 16u << 20};
    static const size_t host_n[] = {4u << 10};
    const size_t *ns = quick ? quick_n : all_n;
    size_t nn = quick ? 3 : 5;
    if (host_cost) {
        find_direct_enqueue();
        ns = only_n ? &only_n : host_n;
        nn = 1;
    }
    int fails = 0;
    for (int K = 2; K <= KMAX; K *= 2) {
        if (only_k && K != only_k) continue;
        for (size_t i = 0; i < nn; i++)
            if (!only_n || ns[i] == only_n) bench_one(prog, bin, K, ns[i], &fails);
    }
    fprintf(stderr, "\n");
    if (host_cost) {
        print_host_table();
    } else if (!prime_only) {
        print_tables();
        print_targets();
    }
    clReleaseProgram(bin);
    clReleaseProgram(prog);
    clReleaseCommandQueue(q);
    clReleaseContext(ctx);
    if (fails) fprintf(stderr, "bench_fusion: %d configurations gave different results\n", fails);
    return fails ? 1 : 0;
}
