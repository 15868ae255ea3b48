/* bench_keycost — what the preprocessor adds to a miss (issue 15's key
 * cost), on hashcat's markov program compiled the way hashcat compiles it.
 *
 *   bench_keycost [--quick] [--reps N] [--shim PATH/libclshim.so] [--file F.cl]
 *
 * The program is hashcat's markov_le.cl (Debian's hashcat, default
 * /usr/share/hashcat/OpenCL/markov_le.cl), which includes its headers
 * through `#include M2S(INCLUDE_PATH/inc_vendor.h)`: only the preprocessor
 * can list them. Each run is a fresh process that times one
 * clCompileProgram with hashcat's options (the -D list of a mask attack on
 * MD5, INCLUDE_PATH the file's directory), with an empty POCL_CACHE_DIR:
 *   plain      no shim (the reference);
 *   scanner    LD_PRELOAD, empty clshim cache, the includes spelled as
 *              literal paths: a miss whose headers the scanner finds (what
 *              a miss costs without the preprocessor: store, binaries);
 *   serial     LD_PRELOAD, empty clshim cache, CLSHIM_PREPROC_OVERLAP=0:
 *              the preprocessor runs before the compile (the old way);
 *   overlap    the same with CLSHIM_PREPROC_OVERLAP=1 (the default): the
 *              preprocessor runs beside the compile.
 * The modes take turns within each repetition; figures are medians. A
 * mode's miss costs (median - plain) / plain; the preprocessor's part of
 * it is (median - scanner) / plain, the key cost of issue 15 (target
 * <= 5 %); and how long the compile waited for the preprocessor (its
 * whole run in serial, the wait after the driver was done in overlap),
 * the part of the cost that other processes' load does not blur. Checked: every shim run is a miss; the preprocessor ran (beside
 * the compile only in overlap) except in scanner; serial and overlap
 * derive the same key; a second overlap run on the same cache hits. Exits
 * 1 when a check fails, 2 when hashcat's kernels are not installed.
 */
#include "bench/bench_util.h"

#define KEYCOST_DEFAULT_FILE "/usr/share/hashcat/OpenCL/markov_le.cl"

/* hashcat 6.2's options for its markov program (-m 0 -a 3 on a PoCL CPU). */
static const char hashcat_options[] =
    "-D KERNEL_STATIC -D INCLUDE_PATH=%s -D XM2S(x)=#x -D M2S(x)=XM2S(x) -D LOCAL_MEM_TYPE=2 -D VENDOR_ID=64 "
    "-D CUDA_ARCH=0 -D HAS_ADD=0 -D HAS_ADDC=0 -D HAS_SUB=0 -D HAS_SUBC=0 -D HAS_VADD=0 -D HAS_VADDC=0 "
    "-D HAS_VADD_CO=0 -D HAS_VADDC_CO=0 -D HAS_VSUB=0 -D HAS_VSUBB=0 -D HAS_VSUB_CO=0 -D HAS_VSUBB_CO=0 "
    "-D HAS_VPERM=0 -D HAS_VADD3=0 -D HAS_VBFE=0 -D HAS_BFE=0 -D HAS_LOP3=0 -D HAS_MOV64=0 -D HAS_PRMT=0 "
    "-D VECT_SIZE=8 -D DEVICE_TYPE=2 -D DGST_R0=0 -D DGST_R1=3 -D DGST_R2=2 -D DGST_R3=1 -D DGST_ELEM=4 "
    "-D KERN_TYPE=0 -D ATTACK_EXEC=11 -D ATTACK_KERN=3 -D ATTACK_MODE=3 -w";

/* The source with `#include M2S(INCLUDE_PATH/x)` spelled `#include "DIR/x"`:
 * the same compile, headers the scanner finds without the preprocessor. */
static char *literal_includes(const char *src, const char *dir, size_t *len)
{
    static const char computed[] = "#include M2S(INCLUDE_PATH/";
    size_t cap = strlen(src) + 1, n = 0;
    for (const char *p = src; (p = strstr(p, computed)); p++) cap += strlen(dir) + 4;
    char *out = malloc(cap);
    if (!out) return NULL;
    for (const char *p = src; *p;) {
        const char *close;
        if (!strncmp(p, computed, sizeof computed - 1) && (close = strchr(p, ')'))) {
            const char *name = p + sizeof computed - 1;
            n += (size_t)sprintf(out + n, "#include \"%s/%.*s\"", dir, (int)(close - name), name);
            p = close + 1;
        } else {
            out[n++] = *p++;
        }
    }
    out[n] = 0;
    *len = n;
    return out;
}

static int child(const char *mode, const char *file)
{
    size_t len = 0;
    char *src = bu_read_file(file, &len);
    if (!src) {
        fprintf(stderr, "bench_keycost: cannot read %s\n", file);
        return 2;
    }
    char dir[4096], options[8192];
    snprintf(dir, sizeof dir, "%s", file);
    snprintf(options, sizeof options, hashcat_options, dirname(dir));
    if (!strcmp(mode, "literal")) {
        char *lit = literal_includes(src, dir, &len);
        free(src);
        if (!(src = lit)) return 2;
    }
    cl_device_id dev;
    cl_context ctx;
    cl_command_queue q;
    bu_open(&dev, &ctx, &q);
    cl_int err;
    const char *srcs[] = {src};
    cl_program prog = clCreateProgramWithSource(ctx, 1, srcs, &len, &err);
    BCHECK(err);
    double t0 = bu_now_ns();
    BCHECK(clCompileProgram(prog, 1, &dev, options, 0, NULL, NULL, NULL, NULL));
    double t1 = bu_now_ns();
    printf("result compile_us=%.1f\n", (t1 - t0) / 1e3);
    clReleaseProgram(prog);
    clReleaseCommandQueue(q);
    clReleaseContext(ctx);
    free(src);
    return 0;
}

enum { M_PLAIN, M_SCANNER, M_SERIAL, M_OVERLAP, M_COUNT };
static const char *const mode_names[M_COUNT] = {"plain", "scanner", "serial", "overlap"};

struct ctx {
    const char *root, *shim, *file;
    char key[M_COUNT][17]; /* the first run's key prefix per shim mode */
    int failures;
};

/* The 16 hex digits after "miss " in the log, or "" */
static void miss_key(const char *log, char out[17])
{
    out[0] = 0;
    size_t len = 0;
    char *text = bu_read_file(log, &len);
    const char *m = text ? strstr(text, "clshim: miss ") : NULL;
    if (m) snprintf(out, 17, "%.16s", m + 13);
    free(text);
}

/* The number after `what` in the log's preprocessor line, or -1: its run
 * time ("headers from the preprocessor in "), or how long the compile
 * waited for it after the driver was done ("beside the compile ("). */
static double preproc_ms(const char *log, const char *what)
{
    size_t len = 0;
    char *text = bu_read_file(log, &len);
    const char *line = text ? strstr(text, "headers from the preprocessor in ") : NULL;
    const char *m = line ? strstr(line, what) : NULL;
    double ms = m && (size_t)(m - line) < 200 ? atof(m + strlen(what)) : -1;
    free(text);
    return ms;
}

/* One child run on a fresh clshim cache, or on `cache` (then it must hit).
 * 0 with *us, or -1. */
static int run_mode(struct ctx *c, int mode, const char *cache, double *us, double *pp_ms, double *wait_ms)
{
    struct bu_env e;
    char pocl[4200], fresh[4200], log[4200], out[4096];
    bu_env_base(&e);
    bu_env_set(&e, "POCL_CACHE_DIR", bu_fresh_dir(c->root, "pocl", pocl, sizeof pocl));
    if (mode != M_PLAIN) {
        bu_env_set(&e, "LD_PRELOAD", c->shim);
        bu_env_set(&e, "CLSHIM_CACHE_DIR", cache ? cache : bu_fresh_dir(c->root, "clshim", fresh, sizeof fresh));
        bu_env_set(&e, "CLSHIM_LOG", "info");
        bu_env_set(&e, "CLSHIM_PREPROC_OVERLAP", mode == M_OVERLAP ? "1" : "0");
    }
    snprintf(log, sizeof log, "%s/child.log", c->root);
    unlink(log);
    char *argv[] = {(char *)bu_self(), "--child", mode == M_SCANNER ? "literal" : "computed", "--file",
                    (char *)c->file, NULL};
    int rc = bu_run(argv, e.v, log, out, sizeof out, NULL);
    bu_env_free(&e);
    *us = bu_field(out, "compile_us", -1);
    if (rc != 0 || *us < 0) {
        fprintf(stderr, "bench_keycost: %s run failed (exit %d)\n", mode_names[mode], rc);
        c->failures++;
        return -1;
    }
    if (mode == M_PLAIN) return 0;
    *pp_ms = preproc_ms(log, "headers from the preprocessor in ");
    *wait_ms = mode == M_OVERLAP ? preproc_ms(log, "beside the compile (") : *pp_ms;
    const char *bad = NULL;
    char key[17];
    miss_key(log, key);
    int beside = bu_file_contains(log, "beside the compile");
    if (cache) bad = bu_file_contains(log, "clshim: hit ") ? NULL : "a second run on the same cache did not hit";
    else if (!key[0]) bad = "no miss logged";
    else if ((*pp_ms < 0) != (mode == M_SCANNER))
        bad = mode == M_SCANNER ? "the preprocessor ran" : "no preprocessor line logged";
    else if (beside != (mode == M_OVERLAP)) bad = beside ? "overlapped with the knob off" : "did not overlap";
    else if (!c->key[mode][0]) snprintf(c->key[mode], sizeof c->key[mode], "%s", key);
    else if (strcmp(c->key[mode], key)) bad = "the key changed between runs";
    if (bad) {
        fprintf(stderr, "bench_keycost: %s run: %s; its log:\n", mode_names[mode], bad);
        char cmd[4300];
        snprintf(cmd, sizeof cmd, "tail -n 5 '%s' >&2", log);
        if (system(cmd) != 0) {}
        c->failures++;
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct bu_opts o;
    int rc = bu_parse_opts(argc, argv, "bench_keycost", 7, 3, &o);
    if (rc) return rc;
    const char *file = o.file[0] ? o.file : KEYCOST_DEFAULT_FILE;
    if (o.child_mode) return child(o.child_mode, file);
    if (access(file, R_OK) != 0) {
        fprintf(stderr, "bench_keycost: needs hashcat's kernels (%s; apt-get install hashcat)\n", file);
        return 2;
    }
    if (bu_find_shim("bench_keycost", &o.shim)) return 1;
    char root[4096];
    struct ctx c = {bu_temp_root("bench_keycost", root, sizeof root), o.shim, file, {{0}}, 0};
    static double v[M_COUNT][100], pp[M_COUNT][100], waited[M_COUNT][100];
    int n[M_COUNT] = {0};
    for (int i = 0; i < o.reps && !c.failures; i++)
        for (int j = 0; j < M_COUNT; j++) {
            int m = (i + j) % M_COUNT; /* take turns: drift spreads over every mode */
            double us, ms = 0, wait = 0;
            if (run_mode(&c, m, NULL, &us, &ms, &wait) == 0) {
                v[m][n[m]] = us;
                waited[m][n[m]] = wait;
                pp[m][n[m]++] = ms;
            }
        }
    if (!c.failures && strcmp(c.key[M_SERIAL], c.key[M_OVERLAP])) {
        fprintf(stderr, "bench_keycost: the modes derive different keys (%s, %s)\n", c.key[M_SERIAL],
                c.key[M_OVERLAP]);
        c.failures++;
    }
    /* Warm: the cache an overlap run filled (run_mode's last fresh one,
     * root/clshim) serves the next run. */
    if (!c.failures) {
        char warm[4200];
        double us, ms, wait;
        c.key[M_OVERLAP][0] = 0;
        snprintf(warm, sizeof warm, "%s/clshim", root);
        if (run_mode(&c, M_OVERLAP, NULL, &us, &ms, &wait) == 0) run_mode(&c, M_OVERLAP, warm, &us, &ms, &wait);
    }
    bu_rm_rf(root);
    if (c.failures) return 1;
    printf("bench_keycost: %s, %d runs per mode, median compile wall (clCompileProgram):\n", file, o.reps);
    double plain = bu_median(v[M_PLAIN], (size_t)n[M_PLAIN]);
    printf("  %-8s %9.1f ms\n", "plain", plain / 1e3);
    double scanner = bu_median(v[M_SCANNER], (size_t)n[M_SCANNER]);
    printf("  %-8s %9.1f ms  a miss without the preprocessor: %+5.1f %% over plain\n", "scanner", scanner / 1e3,
           (scanner - plain) / plain * 100);
    for (int m = M_SERIAL; m < M_COUNT; m++) {
        double med = bu_median(v[m], (size_t)n[m]), cost = (med - plain) / plain * 100;
        printf("  %-8s %9.1f ms  miss %+5.1f %% over plain, of which the preprocessor %+5.1f %%  %s\n", mode_names[m],
               med / 1e3, cost, (med - scanner) / plain * 100, bu_verdict((med - scanner) / plain * 100 <= 5.0));
        double wait = bu_median(waited[m], (size_t)n[m]);
        printf("  %-8s the preprocessor ran %.1f ms; the compile waited %.1f ms for it (%.1f %% of plain)\n", "",
               bu_median(pp[m], (size_t)n[m]), wait, wait / (plain / 1e3) * 100);
    }
    return 0;
}
