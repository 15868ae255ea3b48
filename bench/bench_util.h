/* bench_util.h — helpers shared by the benchmarks that run themselves in
 * fresh processes (bench_passthrough, bench_ttfr, bench_il).
 *
 * Caches in clshim and PoCL are per process, and LD_PRELOAD only takes
 * effect at exec, so these benchmarks are one binary that spawns itself
 * with `--child MODE` under a controlled environment: the parent builds the
 * child's environment from its own minus LD_PRELOAD, POCL_CACHE_DIR,
 * CUDA_CACHE_*, BENCH_CSV and every CLSHIM_* variable, then adds exactly
 * what the mode needs. A child
 * prints one line `result key=value ...` on stdout; the parent parses it.
 * Everything here is static: each benchmark is one translation unit.
 */
#ifndef BENCH_UTIL_H
#define BENCH_UTIL_H

#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <libgen.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define BCHECK(expr)                                                                         \
    do {                                                                                     \
        cl_int bcheck_rc_ = (expr);                                                          \
        if (bcheck_rc_ != CL_SUCCESS) {                                                      \
            fprintf(stderr, "%s:%d: %s failed: %d\n", __FILE__, __LINE__, #expr, bcheck_rc_); \
            exit(2);                                                                         \
        }                                                                                    \
    } while (0)

static inline double bu_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static inline int bu_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The q-quantile (0..1) of v[0..n), without reordering v. */
static inline double bu_quantile(const double *v, size_t n, double q)
{
    if (!n) return 0;
    double *c = malloc(n * sizeof *c);
    if (!c) exit(3);
    memcpy(c, v, n * sizeof *c);
    qsort(c, n, sizeof *c, bu_cmp_double);
    double pos = q * (double)(n - 1);
    size_t i = (size_t)pos;
    double r = i + 1 < n ? c[i] + (c[i + 1] - c[i]) * (pos - (double)i) : c[i];
    free(c);
    return r;
}
static inline double bu_median(const double *v, size_t n) { return bu_quantile(v, n, 0.5); }
static inline double bu_min(const double *v, size_t n) { return bu_quantile(v, n, 0.0); }

/* The path of the running binary (for spawning itself). */
static inline const char *bu_self(void)
{
    static char path[4096];
    if (!path[0]) {
        ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
        if (n <= 0) {
            fprintf(stderr, "bench: cannot read /proc/self/exe\n");
            exit(3);
        }
        path[n] = 0;
    }
    return path;
}

/* $BUILD/libclshim.so, from $BUILD/bench/<this binary>, unless given. */
static inline const char *bu_default_shim(void)
{
    static char path[4096];
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", bu_self());
    char *d = dirname(dirname(tmp));
    snprintf(path, sizeof path, "%s/libclshim.so", d);
    return path;
}

/* The shim to preload: *shim (from --shim) or the one beside this binary's
 * build directory. 0, or 1 after saying why not. */
static inline int bu_find_shim(const char *bench, const char **shim)
{
    if (!*shim) *shim = bu_default_shim();
    if (access(*shim, R_OK) == 0) return 0;
    fprintf(stderr, "%s: no shim at %s (build it, or pass --shim)\n", bench, *shim);
    return 1;
}

/* The options of the benchmarks that time whole runs (bench_ttfr, bench_il):
 *   [--quick] [--reps N] [--shim PATH/libclshim.so] [--program NAME]
 *   [--ci N], and --child MODE [--file F] for the spawned children.
 * `program` and `ci` mean something to bench_ttfr only (its usage says). */
struct bu_opts {
    int reps, quick, ci;
    const char *shim, *child_mode, *file, *program;
};

/* 0, or 2 after printing the usage. --quick makes `quick_reps` the default. */
static inline int bu_parse_opts(int argc, char **argv, const char *bench, int reps, int quick_reps,
                                struct bu_opts *o)
{
    memset(o, 0, sizeof *o);
    o->reps = -1;
    o->file = "";
    o->program = "mixed";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) o->quick = 1;
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) o->reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--shim") && i + 1 < argc) o->shim = argv[++i];
        else if (!strcmp(argv[i], "--child") && i + 1 < argc) o->child_mode = argv[++i];
        else if (!strcmp(argv[i], "--file") && i + 1 < argc) o->file = argv[++i];
        else if (!strcmp(argv[i], "--program") && i + 1 < argc) o->program = argv[++i];
        else if (!strcmp(argv[i], "--ci") && i + 1 < argc) o->ci = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--quick] [--reps N] [--shim PATH/libclshim.so]%s\n", bench,
                    strcmp(bench, "bench_ttfr") ? "" : " [--program small|mixed|large] [--ci PROCESSES]");
            return 2;
        }
    }
    if (o->reps < 1 || o->reps > 100) o->reps = o->quick ? quick_reps : reps;
    return 0;
}

static inline int bu_rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    (void)remove(p);
    return 0;
}
/* rm -rf `path` (our own temp dirs only). */
static inline void bu_rm_rf(const char *path) { nftw(path, bu_rm_one, 16, FTW_DEPTH | FTW_PHYS); }

/* A fresh, empty directory `root/name`; removes what was there. */
static inline const char *bu_fresh_dir(const char *root, const char *name, char *buf, size_t size)
{
    snprintf(buf, size, "%s/%s", root, name);
    bu_rm_rf(buf);
    if (mkdir(buf, 0700) != 0) {
        fprintf(stderr, "bench: cannot create %s: %s\n", buf, strerror(errno));
        exit(3);
    }
    return buf;
}

/* A private temp root under $TMPDIR (or /tmp). */
static inline const char *bu_temp_root(const char *tag, char *buf, size_t size)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(buf, size, "%s/%s.XXXXXX", tmp && *tmp ? tmp : "/tmp", tag);
    if (!mkdtemp(buf)) {
        fprintf(stderr, "bench: mkdtemp %s: %s\n", buf, strerror(errno));
        exit(3);
    }
    return buf;
}

/* ---- child environments --------------------------------------------------- */

#define BU_ENV_MAX 1024
struct bu_env {
    char *v[BU_ENV_MAX + 1];
    int n;
};

/* This process's environment minus the variables the benchmarks control. */
static inline void bu_env_base(struct bu_env *e)
{
    e->n = 0;
    for (char **p = environ; *p && e->n < BU_ENV_MAX - 16; p++) {
        if (!strncmp(*p, "LD_PRELOAD=", 11) || !strncmp(*p, "POCL_CACHE_DIR=", 15) ||
            !strncmp(*p, "CLSHIM_", 7) || !strncmp(*p, "BENCH_CSV=", 10) ||
            !strncmp(*p, "CUDA_CACHE_", 11))
            continue;
        e->v[e->n++] = strdup(*p);
    }
    e->v[e->n] = NULL;
}

static inline void bu_env_set(struct bu_env *e, const char *name, const char *value)
{
    size_t len = strlen(name) + strlen(value) + 2;
    char *s = malloc(len);
    if (!s || e->n >= BU_ENV_MAX) exit(3);
    snprintf(s, len, "%s=%s", name, value);
    e->v[e->n++] = s;
    e->v[e->n] = NULL;
}

/* The driver's own program cache in `dir`: PoCL's (POCL_CACHE_DIR) and
 * NVIDIA's ComputeCache (CUDA_CACHE_PATH, in dir/nv), so "empty" and
 * "warm" mean the same on either driver. */
static inline void bu_set_driver_cache(struct bu_env *e, const char *dir)
{
    char nv[4200];
    snprintf(nv, sizeof nv, "%.4000s/nv", dir);
    bu_env_set(e, "POCL_CACHE_DIR", dir);
    bu_env_set(e, "CUDA_CACHE_PATH", nv);
}

/* A run under the shim at `shim`, with its exit summary, on the clshim cache
 * ROOT/clshim-warm (warm) or a fresh ROOT/clshim-empty; the cache dir's
 * path is left in buf. */
static inline void bu_env_clshim(struct bu_env *e, const char *shim, const char *root, int warm, char *buf,
                                 size_t size)
{
    if (warm) snprintf(buf, size, "%s/clshim-warm", root);
    else bu_fresh_dir(root, "clshim-empty", buf, size);
    bu_env_set(e, "LD_PRELOAD", shim);
    bu_env_set(e, "CLSHIM_CACHE_DIR", buf);
    bu_env_set(e, "CLSHIM_STATS", "1");
}

static inline void bu_env_free(struct bu_env *e)
{
    for (int i = 0; i < e->n; i++) free(e->v[i]);
    e->n = 0;
}

/* Runs argv[0] with `envp`; its stdout goes to `out` (NUL-terminated,
 * truncated to size), its stderr to `err_path` (or inherited when NULL).
 * *wall_ns (optional) is spawn-to-reap time, *cpu_ns (optional) the CPU
 * time (user + system) of the child and the children it reaped. Returns
 * the exit status (or 128+signal; -1 when it could not be started). */
static inline int bu_run_cpu(char *const argv[], char *const envp[], const char *err_path, char *out, size_t size,
                             double *wall_ns, double *cpu_ns)
{
    int fd[2] = {-1, -1};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (out) {
        if (pipe(fd) != 0) return -1;
        posix_spawn_file_actions_adddup2(&fa, fd[1], 1);
        posix_spawn_file_actions_addclose(&fa, fd[0]);
        posix_spawn_file_actions_addclose(&fa, fd[1]);
    } else {
        posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    }
    if (err_path) posix_spawn_file_actions_addopen(&fa, 2, err_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
    pid_t pid;
    double t0 = bu_now_ns();
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
        fprintf(stderr, "bench: cannot run %s: %s\n", argv[0], strerror(rc));
        if (out) close(fd[0]), close(fd[1]);
        return -1;
    }
    size_t got = 0;
    if (out) {
        close(fd[1]);
        ssize_t n;
        char sink[4096];
        while ((n = read(fd[0], got + 1 < size ? out + got : sink,
                         got + 1 < size ? size - 1 - got : sizeof sink)) > 0)
            if (got + 1 < size) got += (size_t)n;
        close(fd[0]);
        out[got] = 0;
    }
    int st;
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    while (wait4(pid, &st, 0, &ru) < 0 && errno == EINTR) {}
    if (wall_ns) *wall_ns = bu_now_ns() - t0;
    if (cpu_ns)
        *cpu_ns = (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e9 + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e3;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static inline int bu_run(char *const argv[], char *const envp[], const char *err_path, char *out, size_t size,
                         double *wall_ns)
{
    return bu_run_cpu(argv, envp, err_path, out, size, wall_ns, NULL);
}

/* Waits for the capture helpers (program/capture_proc.h) still storing into
 * the clshim cache `dir`: `clshim-tool cache wait` (the tool next to the
 * shim). Returns the ms waited; *entries (optional) gets the number of
 * entries the cache holds then (`cache stats --json`), 0 when unknown. */
static inline double bu_wait_capture(const char *shim, const char *dir, unsigned long long *entries)
{
    char tool[4200], out[8192];
    const char *slash = strrchr(shim, '/');
    snprintf(tool, sizeof tool, "%.*s/clshim-tool", slash ? (int)(slash - shim) : 1, slash ? shim : ".");
    char *wait_argv[] = {tool, "cache", "--dir", (char *)dir, "wait", "--timeout", "600", NULL};
    char *stats_argv[] = {tool, "cache", "--dir", (char *)dir, "stats", "--json", NULL};
    extern char **environ;
    double t0 = bu_now_ns();
    if (bu_run(wait_argv, environ, NULL, NULL, 0, NULL) != 0) fprintf(stderr, "bench: %s cache wait failed\n", tool);
    double waited = (bu_now_ns() - t0) / 1e6;
    if (entries) {
        *entries = 0;
        if (bu_run(stats_argv, environ, NULL, out, sizeof out, NULL) == 0) {
            const char *e = strstr(out, "\"entries\": ");
            if (e) *entries = strtoull(e + strlen("\"entries\": "), NULL, 10);
        }
    }
    return waited;
}

/* Whether a child run failed (non-zero exit, or no `result ... ttfr_us=`
 * line); if so says which mode, with the tail of its log. */
static inline int bu_child_failed(const char *bench, const char *mode, int rc, const char *out, const char *log)
{
    if (rc == 0 && strstr(out, "result ") && strstr(out, " ttfr_us=")) return 0;
    fprintf(stderr, "%s: %s run failed (exit %d); its log:\n", bench, mode, rc);
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "tail -n 20 '%s' >&2", log);
    if (system(cmd) != 0) {}
    return 1;
}

/* The value of `key=` in a child's `result ...` line, or `dflt`. */
static inline double bu_field(const char *out, const char *key, double dflt)
{
    const char *line = strstr(out, "result ");
    if (!line) return dflt;
    size_t kl = strlen(key);
    for (const char *p = line; (p = strstr(p, key)); p += kl)
        if ((p == line || p[-1] == ' ') && p[kl] == '=') return strtod(p + kl + 1, NULL);
    return dflt;
}

/* The hexadecimal value of `key=` in a child's `result ...` line, or 0. */
static inline uint64_t bu_field_hex(const char *out, const char *key)
{
    const char *line = strstr(out, "result ");
    if (!line) return 0;
    size_t kl = strlen(key);
    for (const char *p = line; (p = strstr(p, key)); p += kl)
        if ((p == line || p[-1] == ' ') && p[kl] == '=') return strtoull(p + kl + 1, NULL, 16);
    return 0;
}

/* Whether the file at `path` contains `needle`. */
static inline int bu_file_contains(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[4096];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) found = strstr(line, needle) != NULL;
    fclose(f);
    return found;
}

/* Counts lines of `path` containing `needle`. */
static inline int bu_file_count(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f)) n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

/* clshim's exit summary in a child's log (CLSHIM_STATS=1): hits, misses
 * and IL translations, each read as the number before its word ("3 hits",
 * "0 misses", ...), so fields the summary gains later do not break it.
 * Returns 0, or -1 when there is no summary line. */
struct bu_summary {
    unsigned long long hits, misses, stored, rejected, uncacheable, translations;
};
static inline unsigned long long bu_count_before(const char *line, const char *word)
{
    size_t wl = strlen(word);
    for (const char *p = strstr(line, word); p; p = strstr(p + 1, word)) {
        if (p[wl] != ',' && p[wl] != ';' && p[wl] != ' ' && p[wl] != '\n' && p[wl] != 0) continue;
        const char *q = p;
        while (q > line && q[-1] == ' ') q--;
        const char *digits = q;
        while (digits > line && digits[-1] >= '0' && digits[-1] <= '9') digits--;
        if (digits < q) return strtoull(digits, NULL, 10);
    }
    return 0;
}
static inline int bu_log_summary(const char *path, struct bu_summary *s)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[4096];
    int found = -1;
    memset(s, 0, sizeof *s);
    while (fgets(line, sizeof line, f)) {
        const char *p = strstr(line, "clshim: summary: ");
        if (!p) continue;
        s->hits = bu_count_before(p, "hits");
        s->misses = bu_count_before(p, "misses");
        s->stored = bu_count_before(p, "stored");
        s->rejected = bu_count_before(p, "rejected");
        s->uncacheable = bu_count_before(p, "uncacheable");
        s->translations = bu_count_before(p, "IL translations");
        found = 0;
    }
    fclose(f);
    return found;
}

/* Whether a mapping of this process names `needle` (e.g. a library). */
static inline int bu_mapped(const char *needle)
{
    return bu_file_contains("/proc/self/maps", needle);
}

static inline void *bu_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc(n > 0 ? (size_t)n + 1 : 1);
    if (!buf || n < 0 || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        fclose(f);
        return NULL;
    }
    fclose(f);
    buf[n] = 0;
    *len = (size_t)n;
    return buf;
}

static inline int bu_write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = fwrite(data, 1, len, f) == len;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* The first device of the first platform, a context and an in-order queue on it. */
static inline void bu_open(cl_device_id *dev, cl_context *ctx, cl_command_queue *q)
{
    cl_platform_id plat;
    cl_int err;
    BCHECK(clGetPlatformIDs(1, &plat, NULL));
    BCHECK(clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 1, dev, NULL));
    *ctx = clCreateContext(NULL, 1, dev, NULL, NULL, &err);
    BCHECK(err);
    *q = clCreateCommandQueueWithProperties(*ctx, *dev, NULL, &err);
    BCHECK(err);
}

/* ---- the suite's CSV (bench/run.sh, bench/report.py) ----------------------
 * When BENCH_CSV names a file, each benchmark appends one row per figure:
 *   bench,case,variant,metric,unit,median,min,max,n
 * `case` is `key=value` pairs joined by ';' (what was measured: program,
 * K, N, mode), `variant` the way it ran (cold, clshim-warm, fused, ...).
 * The values come from one interleaved run (A B A B ...), so ratios of
 * medians of one case are side by side. Spawned children never see it
 * (bu_env_base drops it): only the parent, which has every value, writes. */
/* One row from a figure computed elsewhere (a paired difference and its
 * noise band, say): `lo`..`hi` is the band shown. */
static inline void bu_csv_value(const char *bench, const char *cas, const char *variant, const char *metric,
                                const char *unit, double median, double lo, double hi, size_t n)
{
    const char *path = getenv("BENCH_CSV");
    if (!path || !*path) return;
    FILE *f = fopen(path, "a");
    if (!f) {
        fprintf(stderr, "bench: cannot append to %s: %s\n", path, strerror(errno));
        return;
    }
    fprintf(f, "%s,%s,%s,%s,%s,%.6g,%.6g,%.6g,%zu\n", bench, cas, variant, metric, unit, median, lo, hi, n);
    fclose(f);
}

/* One row from the samples v[0..n): median, min, max. */
static inline void bu_csv(const char *bench, const char *cas, const char *variant, const char *metric,
                          const char *unit, const double *v, size_t n)
{
    if (n) bu_csv_value(bench, cas, variant, metric, unit, bu_median(v, n), bu_quantile(v, n, 0.0),
                        bu_quantile(v, n, 1.0), n);
}

/* "met"/"missed" for a target line. */
static inline const char *bu_verdict(int met) { return met ? "target met" : "target MISSED"; }


/* Runs a child (bu_run) with environment e (freed here) and checks it: it
 * ran and printed a result line, and its checksum equals *checksum (the
 * first run's, recorded when *checksum is 0). Returns 0; -1 when the run
 * failed (no results); 1 when its results differ. Says why on stderr. */
static inline int bu_run_checked(const char *bench, const char *mode, char *const argv[], struct bu_env *e,
                                 const char *log, char *out, size_t size, uint64_t *checksum)
{
    int rc = bu_run(argv, e->v, log, out, size, NULL);
    bu_env_free(e);
    if (bu_child_failed(bench, mode, rc, out, log)) return -1;
    uint64_t sum = bu_field_hex(out, "checksum");
    if (!*checksum) *checksum = sum;
    if (sum == *checksum) return 0;
    fprintf(stderr, "%s: %s run: results differ (checksum %016llx, expected %016llx)\n", bench, mode,
            (unsigned long long)sum, (unsigned long long)*checksum);
    return 1;
}

#endif
