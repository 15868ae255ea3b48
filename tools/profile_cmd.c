/* profile_cmd.c — `clshim-tool profile report DIR [--json] [--trace FILE]`:
 * the profiles the processes of a run wrote (common/profile.h's format)
 * summed into tables of kernels, fused sequences and builds, as text or
 * JSON, and the launches and builds as a Chrome trace (chrome://tracing,
 * Perfetto). `clshim run --profile` calls it after the command.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/profile.h"
#include "tools/commands.h"
#include "tools/help.h"

struct row {
    char *name;
    int fused;
    uint64_t launches, timed, total, min, max, replaced;
    double unfused, fused_ns;
};

struct build {
    char *kind, *key, *outcome, *device;
    uint64_t wall, cpu, compile;
};

struct report {
    struct row *rows;
    size_t nrows, rows_cap;
    struct build *builds;
    size_t nbuilds, builds_cap;
    char procs[2048];
    size_t procs_len;
    unsigned nprocs;
    FILE *trace;
    int trace_first;
    uint64_t t0; /* the earliest time in the trace (host clock, ns) */
};

static void *grow(void *v, size_t *cap, size_t n, size_t size)
{
    if (n < *cap) return v;
    size_t c = *cap ? 2 * *cap : 64;
    void *p = realloc(v, c * size);
    if (p) *cap = c;
    return p;
}

static struct row *row_of(struct report *r, const char *name, int fused)
{
    for (size_t i = 0; i < r->nrows; i++)
        if (r->rows[i].fused == fused && !strcmp(r->rows[i].name, name)) return &r->rows[i];
    struct row *rows = grow(r->rows, &r->rows_cap, r->nrows, sizeof *rows);
    if (!rows) return NULL;
    r->rows = rows;
    struct row *x = &rows[r->nrows++];
    *x = (struct row){.name = strdup(name), .fused = fused, .min = UINT64_MAX};
    return x->name ? x : NULL;
}

/* Splits a line at tabs into at most max fields; their count. */
static int fields(char *line, char **f, int max)
{
    int n = 0;
    line[strcspn(line, "\n")] = 0;
    for (char *p = line; n < max;) {
        f[n++] = p;
        char *t = strchr(p, '\t');
        if (!t) break;
        *t = 0;
        p = t + 1;
    }
    return n;
}

static uint64_t u64(const char *s) { return strtoull(s, NULL, 10); }

static void json_text(FILE *o, const char *s)
{
    fputc('"', o);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(o, "\\%c", c);
        else if (c < 0x20) fprintf(o, "\\u%04x", c);
        else fputc(c, o);
    }
    fputc('"', o);
}

/* The earliest host time in a file (the trace starts at 0 there). */
static void first_time(struct report *r, FILE *f)
{
    char line[2048], *v[8];
    while (fgets(line, sizeof line, f)) {
        int n = fields(line, v, 8);
        uint64_t t = 0;
        if (n == 6 && !strcmp(v[0], "event")) t = u64(v[4]);
        else if (n == 6 && !strcmp(v[0], "bevent")) t = u64(v[4]);
        if (t && (!r->t0 || t < r->t0)) r->t0 = t;
    }
}

static void trace_event(struct report *r, const char *name, const char *cat, unsigned pid, unsigned tid, uint64_t start,
                        uint64_t end)
{
    if (!r->trace) return;
    fprintf(r->trace, "%s\n  {\"name\": ", r->trace_first ? "" : ",");
    json_text(r->trace, name);
    fprintf(r->trace, ", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": %u, \"tid\": %u, \"ts\": %.3f, \"dur\": %.3f}", cat,
            pid, tid, (start > r->t0 ? start - r->t0 : 0) / 1e3, (end > start ? end - start : 0) / 1e3);
    r->trace_first = 0;
}

static void trace_name(struct report *r, unsigned pid, unsigned tid, const char *what, const char *name)
{
    if (!r->trace) return;
    fprintf(r->trace, "%s\n  {\"name\": \"%s\", \"ph\": \"M\", \"pid\": %u, \"tid\": %u, \"args\": {\"name\": ", r->trace_first ? "" : ",",
            what, pid, tid);
    json_text(r->trace, name);
    fprintf(r->trace, "}}");
    r->trace_first = 0;
}

static int read_file(struct report *r, const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[2048], *v[9];
    unsigned pid = 0;
    int ok = 0;
    unsigned queues_named[64] = {0};
    while (fgets(line, sizeof line, f)) {
        int n = fields(line, v, 9);
        if (n == 4 && !strcmp(v[0], "clshim-profile")) {
            if (atoi(v[1]) != PROFILE_FORMAT) break;
            pid = (unsigned)atoi(v[2]);
            ok = 1;
            r->nprocs++;
            if (r->procs_len < sizeof r->procs - 64)
                r->procs_len += (size_t)snprintf(r->procs + r->procs_len, sizeof r->procs - r->procs_len, "%s%s %u",
                                                 r->nprocs > 1 ? ", " : "", v[3], pid);
            trace_name(r, pid, 0, "process_name", v[3]);
            trace_name(r, pid, 0, "thread_name", "builds (host)");
        } else if (!ok) {
            break;
        } else if (n == 7 && (!strcmp(v[0], "kernel") || !strcmp(v[0], "fused"))) {
            int fused = v[0][0] == 'f';
            struct row *x = row_of(r, v[1], fused);
            if (!x) continue;
            x->launches += u64(v[2]);
            if (fused) {
                x->replaced += u64(v[3]);
                x->total += u64(v[4]);
                if (u64(v[6])) x->unfused = strtod(v[5], NULL), x->fused_ns = strtod(v[6], NULL);
            } else {
                uint64_t lo = u64(v[5]), hi = u64(v[6]);
                x->timed += u64(v[3]);
                x->total += u64(v[4]);
                if (u64(v[3]) && lo < x->min) x->min = lo;
                if (hi > x->max) x->max = hi;
            }
        } else if (n == 8 && !strcmp(v[0], "build")) {
            struct build *b = grow(r->builds, &r->builds_cap, r->nbuilds, sizeof *b);
            if (!b) continue;
            r->builds = b;
            b[r->nbuilds++] = (struct build){strdup(v[1]), strdup(v[2]), strdup(v[3]), strdup(v[7]), u64(v[4]),
                                             u64(v[5]), u64(v[6])};
        } else if (n == 6 && !strcmp(v[0], "event")) {
            unsigned q = (unsigned)atoi(v[3]);
            if (q < 64 && !queues_named[q]) {
                char qn[32];
                snprintf(qn, sizeof qn, "queue %u (device)", q);
                trace_name(r, pid, q + 1, "thread_name", qn);
                queues_named[q] = 1;
            }
            /* A fused launch's row; its kernels' shares are the K events. */
            if (v[1][0] == 'F') {
                char name[1100];
                snprintf(name, sizeof name, "fused %s", v[2]);
                trace_event(r, name, "fused", pid, q + 1, u64(v[4]), u64(v[5]));
            } else {
                trace_event(r, v[2], "kernel", pid, q + 1, u64(v[4]), u64(v[5]));
            }
        } else if (n == 6 && !strcmp(v[0], "bevent")) {
            char name[128];
            snprintf(name, sizeof name, "%s %s %s", v[1], v[2], v[3]);
            trace_event(r, name, "build", pid, 0, u64(v[4]), u64(v[5]));
        }
    }
    fclose(f);
    return ok ? 0 : -1;
}

static int by_total(const void *a, const void *b)
{
    const struct row *x = a, *y = b;
    if (x->fused != y->fused) return x->fused - y->fused;
    return x->total < y->total ? 1 : x->total > y->total ? -1 : strcmp(x->name, y->name);
}

static int is_hit(const struct build *b) { return !strncmp(b->outcome, "hit", 3); }

static void print_text(const struct report *r)
{
    size_t nk = 0, nf = 0, hits = 0;
    uint64_t compile = 0, load = 0, saved = 0;
    for (size_t i = 0; i < r->nrows; i++) r->rows[i].fused ? nf++ : nk++;
    for (size_t i = 0; i < r->nbuilds; i++) {
        const struct build *b = &r->builds[i];
        if (is_hit(b)) hits++, load += b->wall, saved += b->compile;
        else compile += b->wall;
    }
    printf("clshim profile: %u process%s (%s): %zu kernel%s, %zu fused sequence%s, %zu build%s\n", r->nprocs,
           r->nprocs == 1 ? "" : "es", r->procs, nk, nk == 1 ? "" : "s", nf, nf == 1 ? "" : "s", r->nbuilds,
           r->nbuilds == 1 ? "" : "s");
    printf("\nKernels (device time, ms)            launches  timed       total        mean         min         max\n");
    for (size_t i = 0; i < r->nrows; i++) {
        const struct row *x = &r->rows[i];
        if (x->fused) continue;
        if (!x->timed) {
            printf("  %-34.34s %9llu  %5llu  %10s\n", x->name, (unsigned long long)x->launches, 0ull, "(untimed)");
            continue;
        }
        printf("  %-34.34s %9llu  %5llu  %10.3f  %10.4f  %10.4f  %10.4f\n", x->name, (unsigned long long)x->launches,
               (unsigned long long)x->timed, x->total / 1e6, x->total / 1e6 / (double)x->timed, x->min / 1e6,
               x->max / 1e6);
    }
    if (nf) {
        printf("\nFused sequences                      launches  replaced  device ms  measured (unfused -> fused, per occurrence)\n");
        for (size_t i = 0; i < r->nrows; i++) {
            const struct row *x = &r->rows[i];
            if (!x->fused) continue;
            char gain[96] = "not measured (too few occurrences)";
            if (x->fused_ns > 0)
                snprintf(gain, sizeof gain, "%.2fx (%.4f -> %.4f ms)", x->unfused / x->fused_ns, x->unfused / 1e6,
                         x->fused_ns / 1e6);
            printf("  %-34.34s %9llu  %8llu  %9.3f  %s\n", x->name, (unsigned long long)x->launches,
                   (unsigned long long)x->replaced, x->total / 1e6, gain);
        }
    }
    printf("\nBuilds: %zu hit%s (%.1f ms to load, %.1f ms of compile CPU saved), %zu miss%s (%.1f ms to build)\n", hits,
           hits == 1 ? "" : "s", load / 1e6, saved / 1e6, r->nbuilds - hits, r->nbuilds - hits == 1 ? "" : "es",
           compile / 1e6);
    for (size_t i = 0; i < r->nbuilds; i++) {
        const struct build *b = &r->builds[i];
        printf("  %-16s  %-8s  %-13s  %9.1f ms  (compile %.1f ms CPU)  %s\n", b->key, b->kind, b->outcome, b->wall / 1e6,
               b->compile / 1e6, b->device);
    }
}

static void print_json(const struct report *r)
{
    printf("{\"processes\": %u, \"kernels\": [", r->nprocs);
    int first = 1;
    for (size_t i = 0; i < r->nrows; i++) {
        const struct row *x = &r->rows[i];
        if (x->fused) continue;
        printf("%s\n  {\"name\": ", first ? "" : ","), first = 0;
        json_text(stdout, x->name);
        printf(", \"launches\": %llu, \"timed\": %llu, \"total_ms\": %.6f, \"mean_ms\": %.6f, \"min_ms\": %.6f, "
               "\"max_ms\": %.6f}",
               (unsigned long long)x->launches, (unsigned long long)x->timed, x->total / 1e6,
               x->timed ? x->total / 1e6 / (double)x->timed : 0.0, x->timed ? x->min / 1e6 : 0.0, x->max / 1e6);
    }
    printf("],\n \"fused\": [");
    first = 1;
    for (size_t i = 0; i < r->nrows; i++) {
        const struct row *x = &r->rows[i];
        if (!x->fused) continue;
        printf("%s\n  {\"sequence\": ", first ? "" : ","), first = 0;
        json_text(stdout, x->name);
        printf(", \"launches\": %llu, \"replaced\": %llu, \"device_ms\": %.6f, ", (unsigned long long)x->launches,
               (unsigned long long)x->replaced, x->total / 1e6);
        if (x->fused_ns > 0) printf("\"unfused_ms\": %.6f, \"fused_ms\": %.6f, \"gain\": %.4f}", x->unfused / 1e6,
                                    x->fused_ns / 1e6, x->unfused / x->fused_ns);
        else printf("\"unfused_ms\": null, \"fused_ms\": null, \"gain\": null}");
    }
    printf("],\n \"builds\": [");
    for (size_t i = 0; i < r->nbuilds; i++) {
        const struct build *b = &r->builds[i];
        printf("%s\n  {\"key\": \"%s\", \"kind\": \"%s\", \"outcome\": \"%s\", \"device\": ", i ? "," : "", b->key,
               b->kind, b->outcome);
        json_text(stdout, b->device);
        printf(", \"wall_ms\": %.6f, \"cpu_ms\": %.6f, \"compile_ms\": %.6f}", b->wall / 1e6, b->cpu / 1e6,
               b->compile / 1e6);
    }
    printf("]}\n");
}

int profile_cmd_main(int argc, char **argv)
{
    const char *dir = NULL, *trace = NULL;
    int json = 0;
    if (argc < 2 || strcmp(argv[1], "report")) {
        fprintf(stderr, "usage: clshim-tool profile report DIR [--json] [--trace FILE]\n");
        return 2;
    }
    if (help_asked(argc - 1, argv + 1) && help_print(stdout, "profile report") == 0) return 0;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--trace") && i + 1 < argc) trace = argv[++i];
        else if (!strncmp(argv[i], "--trace=", 8)) trace = argv[i] + 8;
        else if (argv[i][0] != '-' && !dir) dir = argv[i];
        else return help_unknown("clshim profile report", "profile report", argv[i]);
    }
    if (!dir) {
        fprintf(stderr, "usage: clshim-tool profile report DIR [--json] [--trace FILE]\n");
        return 2;
    }
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "clshim profile: cannot read %s: no profile was written\n", dir);
        return 1;
    }
    struct report r = {.trace_first = 1};
    if (trace && !(r.trace = fopen(trace, "w"))) {
        fprintf(stderr, "clshim profile: cannot write the trace %s\n", trace);
        closedir(d);
        return 1;
    }
    if (r.trace) fprintf(r.trace, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [");
    struct dirent *e;
    char path[8192];
    /* The processes share the host's clock: the trace starts at the first
     * moment any of them recorded. */
    for (int pass = 0; pass < 2; pass++) {
        rewinddir(d);
        while ((e = readdir(d))) {
            if (strncmp(e->d_name, "profile.", 8) || !strstr(e->d_name, ".txt") || strstr(e->d_name, ".tmp"))
                continue;
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            FILE *f = pass == 0 && r.trace ? fopen(path, "r") : NULL;
            if (f) first_time(&r, f), fclose(f);
            if (pass == 1 && read_file(&r, path) != 0)
                fprintf(stderr, "clshim profile: %s is not a profile; left out\n", path);
        }
    }
    closedir(d);
    if (r.trace) {
        fprintf(r.trace, "\n]}\n");
        if (fclose(r.trace) != 0) fprintf(stderr, "clshim profile: cannot write the trace %s\n", trace);
    }
    if (!r.nprocs) {
        fprintf(stderr, "clshim profile: no process of the command made an OpenCL call through clshim\n");
        return 1;
    }
    qsort(r.rows, r.nrows, sizeof *r.rows, by_total);
    if (json) print_json(&r);
    else print_text(&r);
    return 0;
}
