/* bench_tuner — a kernel tuner's run: many variants of one kernel, each
 * built once, run once and released (issue 16).
 *
 *   bench_tuner [--quick] [--reps N] [--shim PATH/libclshim.so] [--at-once]
 *
 * The child builds VARIANTS variants of a tiled reduction kernel (each a
 * different -D set, as a tuner sweeps tile sizes and unroll factors), runs
 * each once on the same input, reads the result, releases the program.
 * The measured time is the whole process, spawn to reap (a tuner's wall
 * time, exit included: captures still queued at exit count). Modes,
 * round-robin, rep after rep:
 *   cold         no shim, empty POCL_CACHE_DIR;
 *   clshim-cold  LD_PRELOAD, empty CLSHIM_CACHE_DIR and POCL_CACHE_DIR;
 *   clshim-warm  LD_PRELOAD, CLSHIM_CACHE_DIR filled by a clshim-cold run
 *                (the priming run), empty POCL_CACHE_DIR;
 *   clshim-at-once (with --at-once) clshim-cold with
 *                CLSHIM_CAPTURE_DEFER_MAX=0: the capture helper works
 *                beside the busy tuner at once, as before it waited for it.
 * Each mode also shows the tuner's own CPU time (user + system of the
 * process, not of the capture helper): what clshim costs the application
 * itself, a figure other load on the machine moves less than wall time.
 * Every run's checksum must match. The clshim-cold line says how many
 * variants were stored of VARIANTS: the cache's entries once the run's
 * capture helper (program/capture_proc.h) finished, which is waited for
 * after the run, untimed, so it never runs beside the next one.
 * Target (issue 16): clshim-cold <= 1.05x cold (medians).
 */
#include "bench/bench_util.h"

#define VARIANTS 100
#define N (1 << 14)

static const char *kernel_source =
    "__kernel void reduce(__global const float *x, __global float *out) {\n"
    "    __local float part[TILE];\n"
    "    size_t l = get_local_id(0), g = get_group_id(0);\n"
    "    float s = 0.0f;\n"
    "    #pragma unroll UNROLL\n"
    "    for (int i = 0; i < CHUNK; i++) s += x[(g * TILE + l) * CHUNK + i] * SCALE;\n"
    "    part[l] = s;\n"
    "    barrier(CLK_LOCAL_MEM_FENCE);\n"
    "    for (size_t h = TILE / 2; h > 0; h /= 2) {\n"
    "        if (l < h) part[l] += part[l + h];\n"
    "        barrier(CLK_LOCAL_MEM_FENCE);\n"
    "    }\n"
    "    if (l == 0) out[g] = part[0];\n"
    "}\n";

static int child(void)
{
    cl_device_id dev;
    cl_context ctx;
    cl_command_queue q;
    bu_open(&dev, &ctx, &q);
    cl_int err;
    float *x = malloc(N * sizeof *x), *out = malloc(N * sizeof *out);
    for (int i = 0; i < N; i++) x[i] = (float)(i % 17) * 0.25f;
    cl_mem bx = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, N * sizeof *x, x, &err);
    BCHECK(err);
    cl_mem bo = clCreateBuffer(ctx, CL_MEM_WRITE_ONLY, N * sizeof *out, NULL, &err);
    BCHECK(err);
    static const int tiles[] = {8, 16, 32, 64, 128};
    static const int chunks[] = {1, 2, 4, 8};
    static const int unrolls[] = {1, 2, 4, 8, 16};
    uint64_t sum = 1469598103934665603ull;
    for (int v = 0; v < VARIANTS; v++) {
        int tile = tiles[v % 5], chunk = chunks[(v / 5) % 4], unroll = unrolls[(v / 20) % 5];
        char opts[128];
        snprintf(opts, sizeof opts, "-DTILE=%d -DCHUNK=%d -DUNROLL=%d -DSCALE=1.0f", tile, chunk, unroll);
        cl_program p = clCreateProgramWithSource(ctx, 1, &kernel_source, NULL, &err);
        BCHECK(err);
        BCHECK(clBuildProgram(p, 1, &dev, opts, NULL, NULL));
        cl_kernel k = clCreateKernel(p, "reduce", &err);
        BCHECK(err);
        BCHECK(clSetKernelArg(k, 0, sizeof bx, &bx));
        BCHECK(clSetKernelArg(k, 1, sizeof bo, &bo));
        size_t local = (size_t)tile, global = (size_t)(N / chunk);
        BCHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &global, &local, 0, NULL, NULL));
        size_t groups = global / local;
        BCHECK(clEnqueueReadBuffer(q, bo, CL_TRUE, 0, groups * sizeof *out, out, 0, NULL, NULL));
        double total = 0;
        for (size_t i = 0; i < groups; i++) total += out[i];
        sum = (sum ^ (uint64_t)(total * 4.0)) * 1099511628211ull;
        BCHECK(clReleaseKernel(k));
        BCHECK(clReleaseProgram(p));
    }
    printf("result checksum=%016llx\n", (unsigned long long)sum);
    clReleaseMemObject(bx);
    clReleaseMemObject(bo);
    clReleaseCommandQueue(q);
    clReleaseContext(ctx);
    free(x);
    free(out);
    return 0;
}

enum { M_COLD, M_SHIM_COLD, M_SHIM_WARM, M_AT_ONCE, M_COUNT };
static const char *const mode_names[M_COUNT] = {"cold", "clshim-cold", "clshim-warm", "clshim-at-once"};

struct ctx {
    const char *root, *shim;
    uint64_t checksum;
    int failures;
    unsigned long long stored_min, stored_max;
    double helper_ms[M_COUNT]; /* waited for capture helpers after cold clshim runs */
};

/* One child run: its wall time in ms (its CPU time in *cpu_ms), or -1. */
static double run_mode(struct ctx *c, int mode, int prime, double *cpu_ms)
{
    struct bu_env e;
    char pocl[4200], shim_cache[4200], log[4200], out[4096];
    bu_env_base(&e);
    bu_fresh_dir(c->root, "pocl-empty", pocl, sizeof pocl);
    bu_set_driver_cache(&e, pocl);
    if (mode != M_COLD) bu_env_clshim(&e, c->shim, c->root, mode == M_SHIM_WARM, shim_cache, sizeof shim_cache);
    if (mode == M_AT_ONCE) bu_env_set(&e, "CLSHIM_CAPTURE_DEFER_MAX", "0");
    snprintf(log, sizeof log, "%s/child.log", c->root);
    unlink(log);
    char *argv[] = {(char *)bu_self(), "--child", "run", NULL};
    double wall = 0, cpu = 0;
    int rc = bu_run_cpu(argv, e.v, log, out, sizeof out, &wall, &cpu);
    *cpu_ms = cpu / 1e6;
    bu_env_free(&e);
    uint64_t sum = bu_field_hex(out, "checksum");
    if (rc != 0 || !sum) {
        fprintf(stderr, "bench_tuner: %s run failed (exit %d)\n", mode_names[mode], rc);
        c->failures++;
        return -1;
    }
    if (!c->checksum) c->checksum = sum;
    if (sum != c->checksum) {
        fprintf(stderr, "bench_tuner: %s run: results differ\n", mode_names[mode]);
        c->failures++;
    }
    struct bu_summary s;
    /* The capture helper of a clshim-cold run stores after the process
     * ended, off its wall time; waited for (untimed) so that it neither
     * runs beside the next run nor goes uncounted. */
    unsigned long long stored = 0;
    int cold_shim = mode == M_SHIM_COLD || mode == M_AT_ONCE;
    if (cold_shim) c->helper_ms[mode] += bu_wait_capture(c->shim, shim_cache, &stored);
    if (mode != M_COLD && bu_log_summary(log, &s) != 0) {
        fprintf(stderr, "bench_tuner: %s run printed no clshim summary\n", mode_names[mode]);
        c->failures++;
    } else if (cold_shim && !prime) {
        if (!c->stored_max || stored > c->stored_max) c->stored_max = stored;
        if (!c->stored_min || stored < c->stored_min) c->stored_min = stored;
    } else if (mode == M_SHIM_WARM && !prime && s.misses) {
        fprintf(stderr, "bench_tuner: clshim-warm run: %llu misses (%llu hits)\n", s.misses, s.hits);
    }
    return wall / 1e6;
}

int main(int argc, char **argv)
{
    /* --at-once is this benchmark's own option: taken out before the
     * common ones are parsed. */
    int at_once = 0, kept = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--at-once")) at_once = 1;
        else argv[kept++] = argv[i];
    }
    argc = kept;
    struct bu_opts o;
    int rc = bu_parse_opts(argc, argv, "bench_tuner", 5, 1, &o);
    if (rc) return rc;
    if (o.child_mode) return child();
    if (bu_find_shim("bench_tuner", &o.shim)) return 1;
    char root[4096];
    struct ctx c = {.root = bu_temp_root("bench_tuner", root, sizeof root), .shim = o.shim};
    char warm[4200];
    snprintf(warm, sizeof warm, "%s/clshim-warm", root);
    mkdir(warm, 0700);
    /* Prime the warm cache: a clshim run on it (with its exit budget). */
    {
        struct bu_env e;
        char pocl[4200], log[4200], out[4096];
        bu_env_base(&e);
        bu_fresh_dir(root, "pocl-empty", pocl, sizeof pocl);
        bu_set_driver_cache(&e, pocl);
        bu_env_set(&e, "LD_PRELOAD", c.shim);
        bu_env_set(&e, "CLSHIM_CACHE_DIR", warm);
        bu_env_set(&e, "CLSHIM_CAPTURE_EXIT_BUDGET", "600000");
        snprintf(log, sizeof log, "%s/prime.log", root);
        char *pargv[] = {(char *)bu_self(), "--child", "run", NULL};
        if (bu_run(pargv, e.v, log, out, sizeof out, NULL) != 0) c.failures++;
        c.checksum = bu_field_hex(out, "checksum");
        bu_env_free(&e);
        bu_wait_capture(c.shim, warm, NULL);
    }
    int reps = o.reps, modes = at_once ? M_COUNT : M_AT_ONCE;
    double v[M_COUNT][100], cpu[M_COUNT][100];
    int n[M_COUNT] = {0};
    for (int r = 0; r < reps; r++)
        for (int m = 0; m < modes; m++) {
            double cpu_ms = 0, ms = run_mode(&c, m, 0, &cpu_ms);
            if (ms >= 0) cpu[m][n[m]] = cpu_ms, v[m][n[m]++] = ms;
        }
    printf("bench_tuner: %d variants of one kernel, each built, run once and released; whole-process wall time;\n"
           "  %d reps per mode, round-robin\n",
           VARIANTS, reps);
    printf("  %-14s %10s %10s %10s %8s %12s %8s\n", "mode", "median", "min", "max", "vs cold", "tuner CPU",
           "vs cold");
    double cold = n[M_COLD] ? bu_median(v[M_COLD], (size_t)n[M_COLD]) : 0;
    double cold_cpu = n[M_COLD] ? bu_median(cpu[M_COLD], (size_t)n[M_COLD]) : 0;
    for (int m = 0; m < M_COUNT; m++) {
        if (!n[m]) continue;
        double med = bu_median(v[m], (size_t)n[m]), med_cpu = bu_median(cpu[m], (size_t)n[m]);
        bu_csv("tuner", "100-variants", mode_names[m], "wall", "ms", v[m], (size_t)n[m]);
        bu_csv("tuner", "100-variants", mode_names[m], "cpu", "ms", cpu[m], (size_t)n[m]);
        printf("  %-14s %7.0f ms %7.0f ms %7.0f ms %7.2fx %9.0f ms %7.2fx\n", mode_names[m], med,
               bu_min(v[m], (size_t)n[m]), bu_quantile(v[m], (size_t)n[m], 1.0), cold ? med / cold : 0, med_cpu,
               cold_cpu ? med_cpu / cold_cpu : 0);
    }
    if (n[M_COLD] && n[M_SHIM_COLD]) {
        double ratio = bu_median(v[M_SHIM_COLD], (size_t)n[M_SHIM_COLD]) / cold;
        printf("  clshim-cold / cold = %.2fx  (target <= 1.05x)  %s; variants stored per cold clshim run: %llu-%llu of %d\n",
               ratio, bu_verdict(ratio <= 1.05), c.stored_min, c.stored_max, VARIANTS);
        for (int m = M_SHIM_COLD; m < M_COUNT; m++)
            if (m != M_SHIM_WARM && n[m])
                printf("  (%s: the capture helper finished %.0f ms after the tuner's exit, per run, untimed)\n",
                       mode_names[m], c.helper_ms[m] / n[m]);
    }
    printf("  results: %s (checksum %016llx)\n", c.failures ? "FAILURES" : "identical in every run",
           (unsigned long long)c.checksum);
    bu_rm_rf(root);
    return c.failures ? 1 : 0;
}
