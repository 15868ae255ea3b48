/* bench_il — time to first result of a SPIR-V program on PoCL through
 * clshim, cold (translation + compile) against a warm cache (neither).
 *
 *   bench_il [--quick] [--reps N] [--shim PATH/libclshim.so]
 *
 * The program is bench/pipeline.h's fifteen kernels, compiled to SPIR-V at
 * run time the way an application's build would (clang-15 -target spir64
 * -cl-std=CL1.2 -emit-llvm -Xclang -no-opaque-pointers, then llvm-spirv-15;
 * $CLANG and $LLVM_SPIRV override the tools). PoCL has no IL support, so
 * without the shim clCreateProgramWithIL fails; under LD_PRELOAD the shim
 * translates the module to SPIR and builds that. Each run is a fresh
 * process with an empty POCL_CACHE_DIR; the measured span is create +
 * build + kernels + first run + clFinish, as in bench_ttfr:
 *   source       no shim, the same kernels from OpenCL C (reference);
 *   il-cold      LD_PRELOAD, empty CLSHIM_CACHE_DIR: translate + compile;
 *   il-warm      LD_PRELOAD, CLSHIM_CACHE_DIR filled by an earlier run.
 * Checked per run: the shim's exit summary (il-cold: one translation and a
 * miss; il-warm: a hit and no translation) and whether libclshim-llvm.so
 * was mapped into the process (it must not be on a warm run). Exits 1 when
 * a run fails or a check does not hold; there is no timing target.
 */
#include "bench/pipeline.h"

static const char *build_options = "-cl-mad-enable";

static int child(const char *mode, const char *file)
{
    struct pipe p;
    pipe_setup(&p);
    cl_context ctx = p.ctx;
    cl_device_id dev = p.dev;
    cl_command_queue q = p.q;
    cl_int err;
    size_t len = 0;
    void *il = NULL;
    if (!strcmp(mode, "il") && !(il = bu_read_file(file, &len))) {
        fprintf(stderr, "bench_il: cannot read %s\n", file);
        return 2;
    }
    double t0 = bu_now_ns();
    cl_program prog;
    if (il) {
        prog = clCreateProgramWithIL(ctx, il, len, &err);
        if (err != CL_SUCCESS) {
            /* The expected answer without the shim: report it, not a crash. */
            printf("result create_error=%d\n", err);
            return 0;
        }
    } else {
        prog = clCreateProgramWithSource(ctx, 1, &pipe_source, NULL, &err);
        BCHECK(err);
    }
    BCHECK(clBuildProgram(prog, 1, &dev, build_options, NULL, NULL));
    double tb = bu_now_ns();
    pipe_kernels(&p, prog);
    pipe_enqueue(&p);
    BCHECK(clFinish(q));
    double t1 = bu_now_ns();
    uint64_t sum = pipe_checksum(&p);
    int llvm = bu_mapped("libclshim-llvm");
    clReleaseProgram(prog);
    pipe_release(&p);
    free(il);
    printf("result ttfr_us=%.1f build_us=%.1f run_us=%.1f llvm=%d create_error=0 checksum=%016llx\n",
           (t1 - t0) / 1e3, (tb - t0) / 1e3, (t1 - tb) / 1e3, llvm, (unsigned long long)sum);
    return 0;
}

enum { M_SOURCE, M_COLD, M_WARM, M_COUNT };
static const char *const mode_names[M_COUNT] = {"source", "il-cold", "il-warm"};
static const char *const mode_desc[M_COUNT] = {"no shim, OpenCL C, empty PoCL cache (reference)",
                                               "LD_PRELOAD, empty clshim cache: translate + compile",
                                               "LD_PRELOAD, clshim cache warm: no translation, no compile"};

struct ctx {
    const char *root, *shim, *spv;
    uint64_t il_checksum, src_checksum;
    int failures;
};

struct run {
    double ttfr, build, run;
    int llvm;
    struct bu_summary s;
};

/* One child run; mode M_COLD uses a fresh clshim cache, M_WARM the kept
 * one, `no_shim` runs the IL without the shim. Returns 0 or -1. */
static int run_mode(struct ctx *c, int mode, int no_shim, struct run *r)
{
    struct bu_env e;
    char pocl[4200], cache[4200], log[4200], out[4096];
    bu_env_base(&e);
    bu_env_set(&e, "POCL_CACHE_DIR", bu_fresh_dir(c->root, "pocl", pocl, sizeof pocl));
    if (mode != M_SOURCE && !no_shim) {
        if (mode == M_COLD) bu_fresh_dir(c->root, "clshim-cold", cache, sizeof cache);
        else snprintf(cache, sizeof cache, "%s/clshim-warm", c->root);
        bu_env_set(&e, "LD_PRELOAD", c->shim);
        bu_env_set(&e, "CLSHIM_CACHE_DIR", cache);
        bu_env_set(&e, "CLSHIM_STATS", "1");
    }
    snprintf(log, sizeof log, "%s/child.log", c->root);
    unlink(log);
    char *argv[] = {(char *)bu_self(), "--child", mode == M_SOURCE ? "source" : "il", "--file", (char *)c->spv, NULL};
    int rc = bu_run(argv, e.v, log, out, sizeof out, NULL);
    bu_env_free(&e);
    memset(r, 0, sizeof *r);
    if (no_shim) return rc == 0 ? (int)bu_field(out, "create_error", 1) : -1;
    if (bu_child_failed("bench_il", mode_names[mode], rc, out, log)) {
        c->failures++;
        return -1;
    }
    r->ttfr = bu_field(out, "ttfr_us", 0), r->build = bu_field(out, "build_us", 0), r->run = bu_field(out, "run_us", 0);
    r->llvm = (int)bu_field(out, "llvm", -1);
    uint64_t sum = bu_field_hex(out, "checksum");
    if (mode == M_SOURCE) {
        c->src_checksum = sum;
        return 0;
    }
    if (!c->il_checksum) c->il_checksum = sum;
    const char *bad = NULL;
    if (sum != c->il_checksum) bad = "results differ from the first IL run";
    else if (bu_log_summary(log, &r->s) != 0) bad = "no clshim summary (was the shim loaded?)";
    else if (mode == M_COLD && (r->s.translations != 1 || r->s.misses < 1)) bad = "expected one translation and a miss";
    else if (mode == M_COLD && r->llvm != 1) bad = "libclshim-llvm.so was not loaded for the translation";
    else if (mode == M_WARM && (r->s.translations != 0 || r->s.hits < 1 || r->s.misses))
        bad = "expected a hit and no translation";
    else if (mode == M_WARM && r->llvm != 0) bad = "libclshim-llvm.so was loaded on a warm run";
    if (bad) {
        fprintf(stderr, "bench_il: %s run: %s (%llu hits, %llu misses, %llu translations, llvm mapped %d)\n",
                mode_names[mode], bad, r->s.hits, r->s.misses, r->s.translations, r->llvm);
        c->failures++;
        return -1;
    }
    return 0;
}

/* Compiles pipe_source to SPIR-V at root/pipeline.spv. */
static int make_spirv(const char *root, char *spv, size_t size, double *ms)
{
    char cl[4200], bc[4200], cmd[32768];
    snprintf(cl, sizeof cl, "%s/pipeline.cl", root);
    snprintf(bc, sizeof bc, "%s/pipeline.bc", root);
    snprintf(spv, size, "%s/pipeline.spv", root);
    if (bu_write_file(cl, pipe_source, strlen(pipe_source)) != 0) return -1;
    const char *clang = getenv("CLANG"), *tr = getenv("LLVM_SPIRV");
    snprintf(cmd, sizeof cmd,
             "'%s' -c -target spir64 -cl-std=CL1.2 -emit-llvm -Xclang -no-opaque-pointers -o '%s' '%s' && "
             "'%s' '%s' -o '%s'",
             clang && *clang ? clang : "clang-15", bc, cl, tr && *tr ? tr : "llvm-spirv-15", bc, spv);
    double t0 = bu_now_ns();
    int rc = system(cmd);
    *ms = (bu_now_ns() - t0) / 1e6;
    return rc == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    struct bu_opts o;
    int rc = bu_parse_opts(argc, argv, "bench_il", 5, 2, &o);
    if (rc) return rc;
    if (o.child_mode) return child(o.child_mode, o.file);
    if (bu_find_shim("bench_il", &o.shim)) return 1;
    int reps = o.reps;
    const char *shim = o.shim;
    char root[4096], spv[4200];
    struct ctx c = {bu_temp_root("bench_il", root, sizeof root), shim, spv, 0, 0, 0};
    double spv_ms;
    if (make_spirv(root, spv, sizeof spv, &spv_ms) != 0) {
        fprintf(stderr, "bench_il: cannot make SPIR-V (needs clang-15 and llvm-spirv-15)\n");
        bu_rm_rf(root);
        return 1;
    }
    struct run r;
    int no_shim_error = run_mode(&c, M_COLD, 1, &r);
    /* Fill the warm cache (an il-cold run of its own). */
    char warm[4200];
    bu_fresh_dir(root, "clshim-warm", warm, sizeof warm);
    {
        struct bu_env e;
        char pocl[4200], out[4096];
        bu_env_base(&e);
        bu_env_set(&e, "POCL_CACHE_DIR", bu_fresh_dir(root, "pocl", pocl, sizeof pocl));
        bu_env_set(&e, "LD_PRELOAD", shim);
        bu_env_set(&e, "CLSHIM_CACHE_DIR", warm);
        char *av[] = {(char *)bu_self(), "--child", "il", "--file", spv, NULL};
        if (bu_run(av, e.v, "/dev/null", out, sizeof out, NULL) != 0 || bu_field(out, "ttfr_us", -1) < 0) c.failures++;
        bu_env_free(&e);
    }
    static double v[M_COUNT][3][100];
    int n[M_COUNT] = {0};
    for (int i = 0; i < reps && !c.failures; i++)
        for (int m = 0; m < M_COUNT; m++)
            if (run_mode(&c, m, 0, &r) == 0) {
                v[m][0][n[m]] = r.ttfr, v[m][1][n[m]] = r.build, v[m][2][n[m]] = r.run;
                n[m]++;
            }

    size_t spv_size = 0;
    free(bu_read_file(spv, &spv_size));
    printf("bench_il: time to first result of a 15-kernel SPIR-V program on PoCL (%zu-byte module, made in %.0f ms\n"
           "  by clang-15 + llvm-spirv-15); each run a fresh process, empty PoCL cache; %d reps, round-robin\n",
           spv_size, spv_ms, reps);
    printf("  without the shim: clCreateProgramWithIL returns %d%s\n", no_shim_error,
           no_shim_error == CL_INVALID_VALUE ? " (CL_INVALID_VALUE: PoCL has no IL support)" : "");
    printf("  %-9s %10s %10s %10s %12s  %s\n", "mode", "median", "min", "build", "first run", "what");
    double med[M_COUNT] = {0};
    for (int m = 0; m < M_COUNT; m++) {
        if (!n[m]) continue;
        med[m] = bu_median(v[m][0], (size_t)n[m]);
        double ms[100];
        for (int i = 0; i < n[m]; i++) ms[i] = v[m][0][i] / 1e3;
        bu_csv("il", "program=mixed-spirv", mode_names[m], "ttfr", "ms", ms, (size_t)n[m]);
        printf("  %-9s %7.1f ms %7.1f ms %7.1f ms %9.1f ms  %s\n", mode_names[m], med[m] / 1e3,
               bu_min(v[m][0], (size_t)n[m]) / 1e3, bu_median(v[m][1], (size_t)n[m]) / 1e3,
               bu_median(v[m][2], (size_t)n[m]) / 1e3, mode_desc[m]);
    }
    if (n[M_COLD] && n[M_WARM])
        printf("  il-cold / il-warm = %.1fx; warm runs: no translation, libclshim-llvm.so not loaded (checked)\n",
               med[M_COLD] / med[M_WARM]);
    printf("  results: IL runs %s; IL vs OpenCL C source: %s\n", c.failures ? "FAILED" : "identical",
           c.il_checksum && c.il_checksum == c.src_checksum ? "identical" : "differ (see tests for tolerances)");
    bu_rm_rf(root);
    return c.failures ? 1 : 0;
}
