/* bench_ttfr — time to first result of an OpenCL program, and the CI scenario.
 *
 *   bench_ttfr [--quick] [--reps N] [--shim PATH/libclshim.so]
 *              [--program small|mixed|large] [--ci PROCESSES]
 *
 * Programs (--program, default mixed):
 *   small  one generated elementwise kernel (a few lines of OpenCL C);
 *   mixed  bench/pipeline.h: fifteen kernels of an image pipeline, ~250
 *          lines with helpers, local memory and barriers;
 *   large  the mixed program plus GEN_LARGE generated kernels (varied math
 *          built-ins), every kernel run once: a library-sized program.
 * The measured span, inside the process: create the program, build it,
 * create its kernels and set their arguments, enqueue every kernel once,
 * clFinish. Context, queue and buffers are made before the span,
 * identically in every mode. Each run is a fresh process (this binary with
 * --child), because every cache involved is per process; the modes run
 * round-robin, rep after rep, so drift of the machine hits all alike, each
 * after a sync(), so none pays for the writeback of the run before:
 *   cold         no shim, empty POCL_CACHE_DIR: the full compile;
 *   driver-warm  no shim, the driver's own cache filled by an earlier run;
 *   clshim-cold  LD_PRELOAD, empty CLSHIM_CACHE_DIR and POCL_CACHE_DIR: what
 *                the first run under clshim costs (compile + store);
 *   clshim-warm  LD_PRELOAD, CLSHIM_CACHE_DIR filled by an earlier run (the
 *                default capture), empty POCL_CACHE_DIR;
 *   clshim-warm-dc  LD_PRELOAD, the CLSHIM_CACHE_DIR an earlier run filled,
 *                with the drivers' caches kept inside it (what a CI job
 *                that keeps only that directory gets by default:
 *                CLSHIM_DRIVER_CACHES=auto, cache/driver_caches.h; on
 *                NVIDIA it keeps the PTX's JIT-compiled code);
 *   limit        no shim, empty POCL_CACHE_DIR, the app itself loads with
 *                clCreateProgramWithBinary the binary an earlier run read
 *                after its first enqueue (PoCL freezes its binary at the
 *                first CL_PROGRAM_BINARIES read, so that read comes last).
 * Targets (issue 3, mixed program): clshim-warm within 1.2x of limit, and at
 * least 3x faster than driver-warm (medians). Every run's checksum of the
 * results must match; each clshim-warm run must report a hit and no miss,
 * each clshim-cold run a miss and no hit.
 *
 * --ci N: the CI scenario instead. N processes start together on one shared
 * cache directory, then N more on what they left (the next job): wall time
 * from the first spawn to the last exit (the job's compile step), per rep:
 *   plain-empty  no shim, empty driver caches;
 *   plain-again  no shim, the driver caches the round before filled
 *                (a CI that keeps the driver's cache);
 *   clshim-empty LD_PRELOAD, one shared empty CLSHIM_CACHE_DIR, empty
 *                driver caches (the driver's cache is not kept);
 *   clshim-again LD_PRELOAD, the CLSHIM_CACHE_DIR the round before filled,
 *                new empty driver caches (only clshim's cache is kept).
 * Each process has a driver cache directory of its own (ci_round says why).
 * "The driver cache" is PoCL's (POCL_CACHE_DIR) and NVIDIA's
 * (CUDA_CACHE_PATH) alike: bu_set_driver_cache points both at it.
 * The compiles of a clshim round are the sum of the processes' misses.
 *
 * BENCH_CSV (bench_util.h) receives one row per mode. Exits 1 when a run
 * fails or results differ, not when a target is missed.
 */
#include "bench/pipeline.h"

static const char *build_options = "-cl-mad-enable";

/* ---- the programs ------------------------------------------------------- */

enum { P_SMALL, P_MIXED, P_LARGE, P_COUNT };
static const char *const program_names[P_COUNT] = {"small", "mixed", "large"};
#define GEN_LARGE 48 /* generated kernels added to the large program */
#define GEN_N 4096   /* work-items of a generated kernel */

static int program_by_name(const char *name)
{
    for (int p = 0; p < P_COUNT; p++)
        if (!strcmp(name, program_names[p])) return p;
    return -1;
}

static int gen_count(int program) { return program == P_SMALL ? 1 : program == P_LARGE ? GEN_LARGE : 0; }

/* The program's OpenCL C (malloc'd): the pipeline and/or generated kernels
 * gen0..genN-1, each a short loop of a different mix of math built-ins. */
static char *program_source(int program)
{
    static const char *const mixes[] = {
        "x = x * %.4ff + sin(x * %.4ff)",        "x = x - %.4ff * cos(x + %.4ff)",
        "x = sqrt(fabs(x) + %.4ff) * %.4ff",     "x = exp(-fabs(x) * %.4ff) + x * %.4ff",
        "x = fma(x, %.4ff, tanh(x * %.4ff))",    "x = log(1.0f + fabs(x) * %.4ff) - %.4ff",
    };
    int ngen = gen_count(program);
    size_t cap = (program == P_SMALL ? 0 : strlen(pipe_source) + 1) + (size_t)ngen * 512 + 1;
    char *src = malloc(cap);
    if (!src) exit(3);
    size_t o = 0;
    if (program != P_SMALL) o += (size_t)snprintf(src, cap, "%s\n", pipe_source);
    for (int j = 0; j < ngen; j++) {
        char body[128];
        snprintf(body, sizeof body, mixes[j % 6], 0.5 + 0.01 * j, 0.25 + 0.003 * j);
        o += (size_t)snprintf(src + o, cap - o,
                              "__kernel void gen%d(__global const float *in, __global float *out, int n) {\n"
                              "    int i = get_global_id(0);\n    if (i >= n) return;\n    float x = in[i];\n"
                              "    for (int r = 0; r < %d; r++) %s;\n    out[i] = x;\n}\n",
                              j, 2 + j % 5, body);
    }
    return src;
}

/* The generated kernels' part of a run: buffers, kernels, enqueues. */
struct gen {
    int n;
    cl_mem buf[2];
    cl_kernel k[GEN_LARGE];
};

static void gen_setup(struct gen *g, cl_context ctx, cl_command_queue q, int n)
{
    memset(g, 0, sizeof *g);
    g->n = n;
    if (!n) return;
    float init[GEN_N];
    for (int i = 0; i < GEN_N; i++) init[i] = (float)(i % 97) * 0.03f - 1.0f;
    cl_int err;
    for (int b = 0; b < 2; b++) {
        g->buf[b] = clCreateBuffer(ctx, CL_MEM_READ_WRITE, sizeof init, NULL, &err);
        BCHECK(err);
    }
    BCHECK(clEnqueueWriteBuffer(q, g->buf[0], CL_TRUE, 0, sizeof init, init, 0, NULL, NULL));
}

static void gen_kernels(struct gen *g, cl_program prog)
{
    cl_int err, n = GEN_N;
    for (int j = 0; j < g->n; j++) {
        char name[32];
        snprintf(name, sizeof name, "gen%d", j);
        g->k[j] = clCreateKernel(prog, name, &err);
        BCHECK(err);
        BCHECK(clSetKernelArg(g->k[j], 0, sizeof(cl_mem), &g->buf[j % 2]));
        BCHECK(clSetKernelArg(g->k[j], 1, sizeof(cl_mem), &g->buf[(j + 1) % 2]));
        BCHECK(clSetKernelArg(g->k[j], 2, sizeof n, &n));
    }
}

static void gen_enqueue(struct gen *g, cl_command_queue q)
{
    static const size_t gws = GEN_N, lws = 64;
    for (int j = 0; j < g->n; j++) BCHECK(clEnqueueNDRangeKernel(q, g->k[j], 1, NULL, &gws, &lws, 0, NULL, NULL));
}

static uint64_t gen_checksum(struct gen *g, cl_command_queue q, uint64_t h)
{
    if (!g->n) return h;
    unsigned char out[GEN_N * sizeof(float)];
    BCHECK(clEnqueueReadBuffer(q, g->buf[g->n % 2], CL_TRUE, 0, sizeof out, out, 0, NULL, NULL));
    for (size_t i = 0; i < sizeof out; i++) h = (h ^ out[i]) * 1099511628211ull;
    return h;
}

static void gen_release(struct gen *g)
{
    for (int j = 0; j < g->n; j++) clReleaseKernel(g->k[j]);
    for (int b = 0; b < 2; b++)
        if (g->buf[b]) clReleaseMemObject(g->buf[b]);
}

/* ---- the child: one measured run --------------------------------------- */

static int child(const char *mode, const char *file, int program)
{
    struct pipe p;
    struct gen g;
    pipe_setup(&p);
    gen_setup(&g, p.ctx, p.q, gen_count(program));
    cl_context ctx = p.ctx;
    cl_device_id dev = p.dev;
    cl_command_queue q = p.q;
    int with_pipe = program != P_SMALL;
    char *source = program_source(program);
    cl_int err;

    double t0 = bu_now_ns();
    cl_program prog;
    if (!strcmp(mode, "binary")) {
        size_t len;
        unsigned char *bin = bu_read_file(file, &len);
        if (!bin) {
            fprintf(stderr, "bench_ttfr: cannot read %s\n", file);
            return 2;
        }
        cl_int st;
        prog = clCreateProgramWithBinary(ctx, 1, &dev, &len, (const unsigned char **)&bin, &st, &err);
        BCHECK(err);
        BCHECK(st);
        free(bin);
    } else {
        prog = clCreateProgramWithSource(ctx, 1, (const char **)&source, NULL, &err);
        BCHECK(err);
    }
    double tc = bu_now_ns();
    BCHECK(clBuildProgram(prog, 1, &dev, build_options, NULL, NULL));
    double tb = bu_now_ns();
    if (with_pipe) pipe_kernels(&p, prog);
    gen_kernels(&g, prog);
    double tk = bu_now_ns();
    if (with_pipe) pipe_enqueue(&p);
    gen_enqueue(&g, q);
    BCHECK(clFinish(q));
    double t1 = bu_now_ns();
    if (with_pipe) pipe_enqueue(&p);
    gen_enqueue(&g, q);
    BCHECK(clFinish(q));
    double t2 = bu_now_ns();
    uint64_t sum = gen_checksum(&g, q, with_pipe ? pipe_checksum(&p) : 1469598103934665603ull);
    if (!strcmp(mode, "source-save") && pipe_save_binary(prog, file) != 0) {
        fprintf(stderr, "bench_ttfr: cannot write %s\n", file);
        return 2;
    }
    clReleaseProgram(prog);
    gen_release(&g);
    pipe_release(&p);
    free(source);
    printf("result ttfr_us=%.1f second_us=%.1f create_us=%.1f build_us=%.1f kernels_us=%.1f run_us=%.1f "
           "checksum=%016llx\n",
           (t1 - t0) / 1e3, (t2 - t1) / 1e3, (tc - t0) / 1e3, (tb - tc) / 1e3, (tk - tb) / 1e3, (t1 - tk) / 1e3,
           (unsigned long long)sum);
    return 0;
}

/* ---- the parent -------------------------------------------------------- */

enum { M_COLD, M_POCL, M_SHIM_COLD, M_SHIM, M_SHIM_DC, M_LIMIT, M_COUNT };
static const char *const mode_names[M_COUNT] = {"cold",        "driver-warm",    "clshim-cold",
                                                "clshim-warm", "clshim-warm-dc", "limit"};
static const char *const mode_desc[M_COUNT] = {
    "no shim, empty driver cache (full compile)",
    "no shim, the driver's own cache warm",
    "LD_PRELOAD, empty clshim and driver caches (first run under clshim)",
    "LD_PRELOAD, clshim cache warm, empty driver cache",
    "LD_PRELOAD, clshim's directory kept, the driver caches inside it",
    "app loads the after-use binary itself, empty driver cache"};

struct ctx {
    const char *root, *shim;
    int program;
    char bin_path[4200];
    uint64_t checksum;
    int failures;
};

/* What a child reports, in microseconds. */
enum { F_TTFR, F_SECOND, F_CREATE, F_BUILD, F_KERNELS, F_RUN, F_COUNT };
static const char *const field_names[F_COUNT] = {"ttfr_us",  "second_us",  "create_us",
                                                 "build_us", "kernels_us", "run_us"};

/* Checks a child's checksum against the first one seen. */
static void check_sum(struct ctx *c, const char *what, const char *out)
{
    uint64_t sum = bu_field_hex(out, "checksum");
    if (!c->checksum) c->checksum = sum;
    if (sum != c->checksum) {
        fprintf(stderr, "bench_ttfr: %s run: results differ (checksum %016llx, expected %016llx)\n", what,
                (unsigned long long)sum, (unsigned long long)c->checksum);
        c->failures++;
    }
}

static void show_log(const char *log)
{
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "tail -n 20 '%.4200s' >&2", log);
    if (system(cmd) != 0) {}
}

/* The argv of a child: this binary, --child MODE --file F --program P. */
static void child_argv(struct ctx *c, const char *child_mode, char *argv[8])
{
    argv[0] = (char *)bu_self();
    argv[1] = "--child";
    argv[2] = (char *)child_mode;
    argv[3] = "--file";
    argv[4] = c->bin_path;
    argv[5] = "--program";
    argv[6] = (char *)program_names[c->program];
    argv[7] = NULL;
}

/* One child run in `mode`: fills f[] and returns 0, or -1 when it failed. */
static int run_mode(struct ctx *c, int mode, int prime, double f[F_COUNT])
{
    struct bu_env e;
    char pocl[4200], shim_cache[4200], log[4200], out[4096];
    bu_env_base(&e);
    if (mode == M_POCL) {
        snprintf(pocl, sizeof pocl, "%s/driver-warm", c->root);
        mkdir(pocl, 0700);
    } else {
        /* A directory never used before, as on a fresh runner: writing the
         * same names into a directory whose files were deleted a moment ago
         * costs ext4 twice as much (it skips recently freed inodes), which
         * would charge the modes that write the driver cache for the bench's
         * own clean-up. All of them go with the root at the end. */
        static unsigned runs;
        char name[64];
        snprintf(name, sizeof name, "pocl-empty-%u", runs++);
        bu_fresh_dir(c->root, name, pocl, sizeof pocl);
    }
    if (mode == M_SHIM_DC) {
        /* No driver cache named: clshim keeps them in the directory it is
         * given, as it does for a CI job (CLSHIM_DRIVER_CACHES=auto). */
        snprintf(shim_cache, sizeof shim_cache, "%s/clshim-kept", c->root);
        bu_env_set(&e, "LD_PRELOAD", c->shim);
        bu_env_set(&e, "CLSHIM_CACHE_DIR", shim_cache);
        bu_env_set(&e, "CLSHIM_STATS", "1");
    } else {
        bu_set_driver_cache(&e, pocl);
    }
    if (mode == M_SHIM || mode == M_SHIM_COLD)
        bu_env_clshim(&e, c->shim, c->root, mode == M_SHIM, shim_cache, sizeof shim_cache);
    snprintf(log, sizeof log, "%s/child.log", c->root);
    unlink(log);
    char *argv[8];
    child_argv(c, mode == M_LIMIT ? (prime ? "source-save" : "binary") : "source", argv);
    /* Every run starts on a quiet disk: the writeback of the run before
     * (its deleted driver cache, its store) is not charged to this one. */
    sync();
    int rc = bu_run(argv, e.v, log, out, sizeof out, NULL);
    bu_env_free(&e);
    /* The capture helper of a clshim run stores after the process ended:
     * waited for (untimed), so the next run finds its entries and never
     * runs beside it. */
    int shim = mode == M_SHIM || mode == M_SHIM_COLD || mode == M_SHIM_DC;
    if (shim) bu_wait_capture(c->shim, shim_cache, NULL);
    if (rc != 0 || bu_field(out, "ttfr_us", -1) < 0) {
        fprintf(stderr, "bench_ttfr: %s run failed (exit %d); its log:\n", mode_names[mode], rc);
        show_log(log);
        c->failures++;
        return -1;
    }
    for (int i = 0; i < F_COUNT; i++) f[i] = bu_field(out, field_names[i], 0);
    check_sum(c, mode_names[mode], out);
    if (mode == M_SHIM_DC) {
        char driver[4300];
        snprintf(driver, sizeof driver, "%s/driver", shim_cache);
        if (access(driver, F_OK) != 0) {
            fprintf(stderr, "bench_ttfr: %s run: no driver caches in %s (CLSHIM_DRIVER_CACHES=auto)\n",
                    mode_names[mode], shim_cache);
            c->failures++;
        }
    }
    if (shim) {
        struct bu_summary s;
        int want_hit = (mode == M_SHIM || mode == M_SHIM_DC) && !prime;
        if (bu_log_summary(log, &s) != 0) {
            fprintf(stderr, "bench_ttfr: %s run printed no clshim summary (was the shim loaded?)\n",
                    mode_names[mode]);
            c->failures++;
        } else if (want_hit ? (s.hits < 1 || s.misses > 0) : (s.misses < 1 || s.hits > 0)) {
            fprintf(stderr, "bench_ttfr: %s run: expected %s, got %llu hits, %llu misses\n", mode_names[mode],
                    want_hit ? "only hits" : "only misses", s.hits, s.misses);
            c->failures++;
        }
    }
    return 0;
}

static int time_to_first_result(struct ctx *c, int reps)
{
    /* Fill the caches: PoCL's, clshim's, the binary the limit mode loads.
     * Each priming run also checks the results. */
    double f[F_COUNT] = {0};
    run_mode(c, M_POCL, 1, f);
    double prime_cold = f[F_TTFR];
    run_mode(c, M_SHIM, 1, f);
    run_mode(c, M_SHIM_DC, 1, f);
    run_mode(c, M_LIMIT, 1, f);

    /* v[mode][field][rep] */
    static double v[M_COUNT][F_COUNT][100];
    int n[M_COUNT] = {0};
    for (int r = 0; r < reps && !c->failures; r++)
        for (int m = 0; m < M_COUNT; m++)
            if (run_mode(c, m, 0, f) == 0) {
                for (int i = 0; i < F_COUNT; i++) v[m][i][n[m]] = f[i];
                n[m]++;
            }

    printf("bench_ttfr: time to first result of the %s program (create + build + kernels + first run +\n"
           "  clFinish), each run a fresh process; %d reps per mode, round-robin; the driver's first build %.0f ms\n",
           program_names[c->program], reps, prime_cold / 1e3);
    printf("  %-14s %10s %10s %10s %9s %11s  %s\n", "mode", "median", "min", "max", "vs cold", "compute*",
           "what");
    double med[M_COUNT] = {0};
    char cas[64];
    snprintf(cas, sizeof cas, "program=%s", program_names[c->program]);
    for (int m = 0; m < M_COUNT; m++) {
        if (!n[m]) continue;
        double ms[100];
        for (int i = 0; i < n[m]; i++) ms[i] = v[m][F_TTFR][i] / 1e3;
        med[m] = bu_median(ms, (size_t)n[m]);
        bu_csv("ttfr", cas, mode_names[m], "ttfr", "ms", ms, (size_t)n[m]);
        printf("  %-14s %7.1f ms %7.1f ms %7.1f ms %8.1fx %8.2f ms  %s\n", mode_names[m], med[m],
               bu_min(ms, (size_t)n[m]), bu_quantile(ms, (size_t)n[m], 1.0), med[M_COLD] / med[m],
               bu_median(v[m][F_SECOND], (size_t)n[m]) / 1e3, mode_desc[m]);
    }
    printf("  * compute: the median time of a second run of the program in the same process (already compiled)\n");
    printf("  where the time goes (medians, ms):\n  %-14s %9s %9s %9s %9s\n", "mode", "create", "build",
           "kernels", "first run");
    for (int m = 0; m < M_COUNT; m++)
        if (n[m])
            printf("  %-14s %9.2f %9.2f %9.2f %9.2f\n", mode_names[m], bu_median(v[m][F_CREATE], (size_t)n[m]) / 1e3,
                   bu_median(v[m][F_BUILD], (size_t)n[m]) / 1e3, bu_median(v[m][F_KERNELS], (size_t)n[m]) / 1e3,
                   bu_median(v[m][F_RUN], (size_t)n[m]) / 1e3);
    if (n[M_SHIM] && n[M_LIMIT] && n[M_POCL] && c->program == P_MIXED) {
        double r1 = med[M_SHIM] / med[M_LIMIT], r2 = med[M_POCL] / med[M_SHIM];
        printf("  clshim-warm / limit        = %5.2fx  (target <= 1.20x)  %s\n", r1, bu_verdict(r1 <= 1.2));
        printf("  driver-warm / clshim-warm  = %5.2fx  (target >= 3.00x)  %s\n", r2, bu_verdict(r2 >= 3.0));
    }
    if (n[M_SHIM_DC] && n[M_POCL])
        printf("  driver-warm / clshim-warm-dc = %5.2fx  (a CI job that keeps clshim's directory, by default)\n",
               med[M_POCL] / med[M_SHIM_DC]);
    if (n[M_SHIM_COLD] && n[M_COLD])
        printf("  clshim-cold / cold         = %5.2fx  (what the first run under clshim costs)\n",
               med[M_SHIM_COLD] / med[M_COLD]);
    printf("  results: %s (checksum %016llx)\n", c->failures ? "FAILED" : "identical in every run",
           (unsigned long long)c->checksum);
    return c->failures ? 1 : 0;
}

/* ---- the CI scenario ------------------------------------------------------ */

enum { CI_PLAIN_EMPTY, CI_PLAIN_AGAIN, CI_SHIM_EMPTY, CI_SHIM_AGAIN, CI_COUNT };
static const char *const ci_names[CI_COUNT] = {"plain-empty", "plain-again", "clshim-empty", "clshim-again"};

/* Starts `procs` children at once in round `round`, waits for all; returns
 * the wall time in ms (first spawn to last exit), or -1. *compiles gets the
 * sum of the clshim processes' misses. */
static double ci_round(struct ctx *c, int round, int procs, unsigned long long *compiles)
{
    char shim_cache[4200];
    int shim = round == CI_SHIM_EMPTY || round == CI_SHIM_AGAIN;
    if (round == CI_SHIM_EMPTY) bu_fresh_dir(c->root, "ci-clshim", shim_cache, sizeof shim_cache);
    else snprintf(shim_cache, sizeof shim_cache, "%s/ci-clshim", c->root);
    /* Each process has a driver cache of its own (a job's ~/.cache/pocl):
     * PoCL 3.1 itself fails builds (CL_BUILD_PROGRAM_FAILURE) now and then
     * when several processes compile into one empty cache directory at
     * once, without clshim too. plain-again keeps each process's. */
    static struct bu_env envs[64];
    for (int i = 0; i < procs; i++) {
        char pocl[4200], name[32];
        snprintf(name, sizeof name, "ci-pocl.%d", i);
        if (round == CI_PLAIN_AGAIN) snprintf(pocl, sizeof pocl, "%s/%s", c->root, name);
        else bu_fresh_dir(c->root, name, pocl, sizeof pocl);
        bu_env_base(&envs[i]);
        bu_set_driver_cache(&envs[i], pocl);
        if (shim) {
            bu_env_set(&envs[i], "LD_PRELOAD", c->shim);
            bu_env_set(&envs[i], "CLSHIM_CACHE_DIR", shim_cache);
            bu_env_set(&envs[i], "CLSHIM_STATS", "1");
        }
    }
    char *argv[8];
    child_argv(c, "source", argv);
    pid_t pids[64];
    char outs[64][4200], logs[64][4200];
    double t0 = bu_now_ns();
    int started = 0, failed = 0;
    for (int i = 0; i < procs; i++) {
        snprintf(outs[i], sizeof outs[i], "%s/ci-out.%d", c->root, i);
        snprintf(logs[i], sizeof logs[i], "%s/ci-log.%d", c->root, i);
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, 1, outs[i], O_WRONLY | O_CREAT | O_TRUNC, 0600);
        posix_spawn_file_actions_addopen(&fa, 2, logs[i], O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int rc = posix_spawn(&pids[i], argv[0], &fa, NULL, argv, envs[i].v);
        posix_spawn_file_actions_destroy(&fa);
        if (rc != 0) {
            fprintf(stderr, "bench_ttfr: cannot spawn a CI process: %s\n", strerror(rc));
            failed++;
            break;
        }
        started++;
    }
    for (int i = 0; i < started; i++) {
        int st;
        while (waitpid(pids[i], &st, 0) < 0 && errno == EINTR) {}
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) failed++;
    }
    double wall = (bu_now_ns() - t0) / 1e6;
    if (shim) bu_wait_capture(c->shim, shim_cache, NULL); /* untimed: the next round finds what they stored */
    for (int i = 0; i < procs; i++) bu_env_free(&envs[i]);
    *compiles = 0;
    for (int i = 0; i < started; i++) {
        size_t len;
        char *out = bu_read_file(outs[i], &len);
        if (!out || bu_field(out, "ttfr_us", -1) < 0) {
            fprintf(stderr, "bench_ttfr: CI %s process %d failed; its log:\n", ci_names[round], i);
            show_log(logs[i]);
            failed++;
        } else {
            check_sum(c, ci_names[round], out);
        }
        free(out);
        struct bu_summary s;
        if (shim && bu_log_summary(logs[i], &s) == 0) *compiles += s.misses;
        else if (shim) {
            fprintf(stderr, "bench_ttfr: CI %s process %d printed no clshim summary\n", ci_names[round], i);
            failed++;
        }
    }
    if (failed) c->failures++;
    return failed ? -1 : wall;
}

static int ci_scenario(struct ctx *c, int procs, int reps)
{
    static double v[CI_COUNT][100];
    unsigned long long compiles[CI_COUNT] = {0};
    int n = 0;
    for (int r = 0; r < reps && !c->failures; r++, n++)
        for (int round = 0; round < CI_COUNT; round++) {
            unsigned long long k;
            v[round][n] = ci_round(c, round, procs, &k);
            if (r == 0 || k > compiles[round]) compiles[round] = k;
        }
    if (c->failures) return 1;
    printf("bench_ttfr --ci %d: %d processes of the %s program start together on one shared cache, then %d\n"
           "  more on what they left; wall time of each group (first spawn to last exit), %d reps, round-robin\n",
           procs, procs, program_names[c->program], procs, n);
    printf("  %-13s %10s %10s %10s %9s  %s\n", "round", "median", "min", "max", "compiles", "");
    char cas[64];
    snprintf(cas, sizeof cas, "program=%s;processes=%d", program_names[c->program], procs);
    for (int round = 0; round < CI_COUNT; round++) {
        bu_csv("ci", cas, ci_names[round], "wall", "ms", v[round], (size_t)n);
        char k[32] = "-";
        if (round >= CI_SHIM_EMPTY) snprintf(k, sizeof k, "%llu", compiles[round]);
        printf("  %-13s %7.0f ms %7.0f ms %7.0f ms %9s\n", ci_names[round], bu_median(v[round], (size_t)n),
               bu_min(v[round], (size_t)n), bu_quantile(v[round], (size_t)n, 1.0), k);
    }
    printf("  plain-empty / clshim-again = %.1fx; clshim-empty / plain-empty = %.2fx\n",
           bu_median(v[CI_PLAIN_EMPTY], (size_t)n) / bu_median(v[CI_SHIM_AGAIN], (size_t)n),
           bu_median(v[CI_SHIM_EMPTY], (size_t)n) / bu_median(v[CI_PLAIN_EMPTY], (size_t)n));
    printf("  results: identical in every process (checksum %016llx)\n", (unsigned long long)c->checksum);
    return 0;
}

int main(int argc, char **argv)
{
    struct bu_opts o;
    int rc = bu_parse_opts(argc, argv, "bench_ttfr", 7, 3, &o);
    if (rc) return rc;
    int program = program_by_name(o.program);
    if (program < 0) {
        fprintf(stderr, "bench_ttfr: --program small|mixed|large\n");
        return 2;
    }
    if (o.child_mode) return child(o.child_mode, o.file, program);
    if (bu_find_shim("bench_ttfr", &o.shim)) return 1;
    if (o.ci < 0 || o.ci > 64) {
        fprintf(stderr, "bench_ttfr: --ci takes 1 to 64 processes\n");
        return 2;
    }
    char root[4096];
    struct ctx c = {bu_temp_root("bench_ttfr", root, sizeof root), o.shim, program, {0}, 0, 0};
    snprintf(c.bin_path, sizeof c.bin_path, "%s/best.bin", root);
    rc = o.ci ? ci_scenario(&c, o.ci, o.reps) : time_to_first_result(&c, o.reps);
    bu_rm_rf(root);
    return rc;
}
