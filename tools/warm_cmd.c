/* warm_cmd.c — `clshim cache warm`: the programs stored for another device
 * or driver, built for the present ones (issue 46, docs/cache.md "After a
 * driver upgrade").
 *
 * A driver or device change changes every key, so every application's
 * first run would compile everything again. The store holds, for every
 * program built from source, compiled or linked, the key material that
 * names all its inputs: source, options, embedded headers, the compiled
 * inputs of a link. Warming computes each entry's key for a present device
 * as the application would (key.h: the headers read from the file system
 * now, from this process's working directory) and builds it exactly as the
 * capture helper builds (tools/capture_child.h: a child process, the
 * build under the sandbox, served the snapshot of the bytes the new key
 * names). What the new key names beyond the device and the driver must be
 * what the old one named: a header edited or gone since, a key of another
 * format, is skipped and said, never built into an entry of a program the
 * application no longer has.
 *
 * Order: sources and compiles first (children in parallel, at nice 19),
 * then links, whose inputs are the compiled entries the first phase warmed
 * or found: a link is keyed by its inputs' keys, so it is exact when they
 * are. Nothing is deleted; entries of the device itself are not touched.
 */
#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "cache/device.h"
#include "cache/key.h"
#include "cache/keydiff.h"
#include "cache/pipeline.h"
#include "cache/quirks.h"
#include "cache/snapshot.h"
#include "cache/store.h"
#include "common/childenv.h"
#include "common/clapi.h"
#include "common/config.h"
#include "common/error.h"
#include "common/log.h"
#include "program/capture_proc.h"
#include "tools/capture_child.h"
#include "tools/commands.h"
#include "tools/help.h"

extern char **environ;

#define WARM_MAX_DEVICES 64
/* A build's CPU budget: no application waits, so a generous one (a
 * driver's start alone is seconds of CPU on NVIDIA's); it only stops a
 * runaway. */
#define WARM_BUDGET_FLOOR_NS 60000000000ull
#define WARM_POLL_NS 10000000L

/* Why a program was not warmed, in the order the summary names them. */
enum warm_skip {
    SKIP_INPUTS,      /* what the key names changed since (a header, an embedded header) */
    SKIP_FORMAT,      /* a key of another clshim key format */
    SKIP_UNCACHEABLE, /* the key cannot be made here (the pipeline said why) */
    SKIP_UNREADABLE,  /* the entry cannot be read, or this process does not trust it */
    SKIP_LINK_INPUT,  /* a link whose compiled input was not warmed */
    SKIP_FOREIGN,     /* a key with fields warm does not rebuild (a translated program) */
    SKIP_BUILD,       /* the build failed here (the device lacks what it needs) */
    SKIP_COST,        /* its build ran past its CPU budget */
    SKIP_COUNT
};
static const char *const skip_names[SKIP_COUNT] = {
    "inputs changed", "other key format", "not cacheable here", "unreadable or untrusted",
    "link input not warmed", "not rebuildable", "build failed", "over its CPU budget",
};

struct target {
    cl_device_id dev;
    const struct device_info *info;
};

/* A stored entry (copied out of the store's read transaction). */
struct entry {
    struct cache_hash hash;
    uint32_t origin;
    char *key;
    size_t key_len;
    char device[256];
};

/* One program for one device. */
struct job {
    const struct entry *from;
    const struct target *t;
    struct pipeline_flight f; /* the new key */
    uint64_t compile_ns;      /* the stored entry's */
    struct key_buf parts;
    enum { JOB_QUEUED, JOB_RUNNING, JOB_WARMED, JOB_ALREADY, JOB_SKIPPED, JOB_FAILED, JOB_SAME } state;
    struct job *same;         /* JOB_SAME: the job of the same new key, whose outcome is this one's */
    enum warm_skip skip;
    char why[600];
    struct capture_child child;
};

struct warm {
    struct target targets[WARM_MAX_DEVICES];
    size_t ntargets;
    struct entry *entries;
    size_t nentries, cap;
    struct job **jobs;
    size_t njobs, jobs_cap;
    unsigned jobs_max;
    int push, json, tty;
    char cwd[4096];
    unsigned long warmed, already, failed, skipped_by[SKIP_COUNT];
    size_t done, total;
};

static int usage(const char *fmt, const char *arg)
{
    fprintf(stderr, "clshim cache warm: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (clshim cache help)\n");
    return 2;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void hash_prefix(struct cache_hash h, char out[17])
{
    char hex[33];
    key_hash_hex(h, hex);
    memcpy(out, hex, 16);
    out[16] = 0;
}

/* ---- the stored entries -------------------------------------------------------- */

static int copy_entry(const struct store_entry_info *e, void *arg)
{
    struct warm *w = arg;
    if (e->origin != KEY_SOURCE && e->origin != KEY_COMPILE && e->origin != KEY_LINK) return 0;
    if (w->nentries == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 64;
        struct entry *n = realloc(w->entries, cap * sizeof *n);
        if (!n) return 1;
        w->entries = n, w->cap = cap;
    }
    struct entry *x = &w->entries[w->nentries];
    if (!(x->key = malloc(e->key_len ? e->key_len : 1))) return 1;
    memcpy(x->key, e->key, e->key_len);
    x->key_len = e->key_len;
    x->hash = e->hash;
    x->origin = e->origin;
    snprintf(x->device, sizeof x->device, "%s", e->device_name ? e->device_name : "");
    w->nentries++;
    return 0;
}

/* What warming needs of a key's fields. */
struct fields {
    int version;
    char *options, *device; /* unescaped */
    struct key_embedded *embedded;
    size_t nembedded;
    const char *input;
    size_t input_len;
    struct cache_hash *inputs; /* a link's input-key fields, in order */
    size_t ninputs;
    char foreign[64];          /* the first field warm does not rebuild */
    int oom;
};

static int is_field(const struct key_field *f, const char *name)
{
    return f->name_len == strlen(name) && !memcmp(f->name, name, f->name_len);
}

static int hex_hash(const char *hex, size_t len, struct cache_hash *out)
{
    char s[33];
    if (len != 32) return -1;
    memcpy(s, hex, 32);
    s[32] = 0;
    for (int i = 0; i < 32; i++)
        if (!isxdigit((unsigned char)s[i])) return -1;
    char hi[17], lo[17];
    memcpy(hi, s, 16), hi[16] = 0;
    memcpy(lo, s + 16, 16), lo[16] = 0;
    *out = (struct cache_hash){.hi = strtoull(hi, NULL, 16), .lo = strtoull(lo, NULL, 16)};
    char back[33];
    key_hash_hex(*out, back);
    return strcmp(back, s) ? -1 : 0;
}

static int take_field(const struct key_field *f, void *arg)
{
    struct fields *x = arg;
    if (is_field(f, "clshim-key")) {
        x->version = atoi(f->value);
    } else if (is_field(f, "options")) {
        x->oom |= !(x->options = key_field_text(f));
    } else if (is_field(f, "device")) {
        x->oom |= !(x->device = key_field_text(f));
    } else if (f->blob && is_field(f, "input")) {
        x->input = f->value, x->input_len = f->value_len;
    } else if (f->blob && f->name_len > 16 && !memcmp(f->name, "embedded-header ", 16)) {
        struct key_embedded *e = realloc(x->embedded, (x->nembedded + 1) * sizeof *e);
        char *name = e ? strndup(f->name + 16, f->name_len - 16) : NULL;
        if (e) x->embedded = e;
        if (!name) return x->oom = 1;
        e[x->nembedded++] = (struct key_embedded){name, f->value, f->value_len};
    } else if (is_field(f, "input-key")) {
        struct cache_hash *h = realloc(x->inputs, (x->ninputs + 1) * sizeof *h);
        if (!h) return x->oom = 1;
        x->inputs = h;
        if (hex_hash(f->value, f->value_len, &h[x->ninputs++]) != 0) snprintf(x->foreign, sizeof x->foreign, "input-key");
    } else if (is_field(f, "route") || (f->name_len > 5 && !memcmp(f->name, "spec.", 5))) {
        if (!*x->foreign) snprintf(x->foreign, sizeof x->foreign, "%.*s", (int)f->name_len, f->name);
    }
    return x->oom;
}

static void fields_free(struct fields *x)
{
    for (size_t i = 0; i < x->nembedded; i++) free((char *)x->embedded[i].name);
    free(x->embedded);
    free(x->inputs);
    free(x->options);
    free(x->device);
}

/* ---- one job --------------------------------------------------------------------- */

static void skip(struct job *j, enum warm_skip why, const char *fmt, const char *detail)
{
    j->state = JOB_SKIPPED;
    j->skip = why;
    char d[400]; /* a detail cut so that every format's words fit in j->why */
    snprintf(d, sizeof d, "%s", detail);
    snprintf(j->why, sizeof j->why, fmt, d);
}

/* Whether what the new key names differs from the old beyond the device
 * and driver: 1 with the differences in words. */
static int inputs_changed(const struct entry *e, const struct pipeline_flight *f, char *out, size_t len)
{
    struct keydiff *d = keydiff_new(e->key, e->key_len, f->key, f->key_len);
    if (!d) {
        snprintf(out, len, "the keys cannot be compared");
        return 1;
    }
    size_t at = 0, shown = 0, more = 0;
    out[0] = 0;
    for (size_t i = 0; i < keydiff_count(d); i++) {
        const struct keydiff_item *it = keydiff_item(d, i);
        /* The device's and the driver's own (its identity, its variables,
         * the names its source directory holds: another driver has none or
         * others), and places a header could be found, absent in both: not
         * the program's inputs. */
        if (it->field == KEYDIFF_DEVICE || it->field == KEYDIFF_DRIVER || it->field == KEYDIFF_DRIVER_ENV ||
            it->field == KEYDIFF_DRIVER_DIR || it->field == KEYDIFF_HEADER_PLACE)
            continue;
        if (shown == 3) {
            more++;
            continue;
        }
        char text[300];
        keydiff_describe(it, text, sizeof text);
        at += (size_t)snprintf(out + at, at < len ? len - at : 0, "%s%s", shown ? ", " : "", text);
        shown++;
    }
    if (more && at < len) snprintf(out + at, len - at, " and %zu more", more);
    keydiff_free(d);
    return shown > 0;
}

/* The new key of a source or compile entry for t; the job is queued, or
 * skipped with its reason. */
static void key_source_job(struct job *j, const struct fields *x)
{
    const struct target *t = j->t;
    struct key_buf k;
    key_begin(&k, (enum key_kind)j->from->origin, x->options);
    key_add_text(&k, "device", t->info->identity);
    for (size_t h = 0; h < x->nembedded; h++) {
        char name[1100];
        snprintf(name, sizeof name, "embedded-header %s", x->embedded[h].name);
        key_add_blob(&k, name, x->embedded[h].source, x->embedded[h].len);
        capture_part_add(&j->parts, x->embedded[h].name, x->embedded[h].source, x->embedded[h].len);
    }
    char ddir[4096];
    struct key_source in = {x->input, x->input_len, x->options, x->embedded, x->nembedded,
                            quirk_source_dir(t->info->quirks, ddir, sizeof ddir) == 0 ? ddir : NULL};
    if (pipeline_key(&j->f, &k, &in, t->info->identity, x->input, x->input_len, NULL) != 0 || !j->f.key)
        return skip(j, SKIP_UNCACHEABLE, "%s", "its key cannot be made here (CLSHIM_LOG=info says why)");
    char why[1000];
    if (inputs_changed(j->from, &j->f, why, sizeof why))
        return skip(j, SKIP_INPUTS, "inputs changed since it was stored: %s", why);
    j->state = JOB_QUEUED;
}

/* The stored entry of `hash` (its key checked), for its binary. */
static int read_entry(struct cache_hash hash, const void *key, size_t key_len, struct store_record *sr, void **arena)
{
    return pipeline_local_get(pipeline_store(), hash, key, key_len, sr, arena);
}

/* The target's job whose old entry is `old` (phase 1), or NULL. */
static struct job *job_of(struct warm *w, const struct target *t, struct cache_hash old)
{
    for (size_t i = 0; i < w->njobs; i++) {
        struct job *j = w->jobs[i];
        if (j->t != t || j->from->origin != KEY_COMPILE || memcmp(&j->from->hash, &old, sizeof old)) continue;
        while (j->state == JOB_SAME) j = j->same;
        return j;
    }
    return NULL;
}

/* The new key of a link for t: its inputs' new keys, and their binaries as
 * the parts; skipped when an input was not warmed or found. */
static void key_link_job(struct warm *w, struct job *j, const struct fields *x)
{
    struct key_buf k;
    key_begin(&k, KEY_LINK, x->options);
    key_add_text(&k, "device", j->t->info->identity);
    for (size_t i = 0; i < x->ninputs; i++) {
        struct job *in = job_of(w, j->t, x->inputs[i]);
        char prefix[17];
        hash_prefix(x->inputs[i], prefix);
        if (!in || (in->state != JOB_WARMED && in->state != JOB_ALREADY)) {
            key_free(&k);
            return skip(j, SKIP_LINK_INPUT, "its compiled input %s was not warmed", prefix);
        }
        struct store_record sr;
        void *arena = NULL;
        if (read_entry(in->f.hash, in->f.key, in->f.key_len, &sr, &arena) != CLSHIM_OK) {
            key_free(&k);
            return skip(j, SKIP_LINK_INPUT, "its compiled input %s cannot be read now", prefix);
        }
        char hex[33];
        key_hash_hex(in->f.hash, hex);
        key_add_text(&k, "input-key", hex);
        capture_part_add(&j->parts, hex, sr.binary, sr.binary_size);
        store_record_free(arena);
    }
    if (pipeline_key(&j->f, &k, NULL, NULL, NULL, 0, NULL) != 0 || !j->f.key)
        return skip(j, SKIP_UNCACHEABLE, "%s", "its key cannot be made (out of memory)");
    j->state = JOB_QUEUED;
}

/* The job of entry e on t, keyed: NULL when there is none (the entry is
 * the device's own, or the new key is another job's already). */
static struct job *plan(struct warm *w, const struct entry *e, const struct target *t)
{
    struct fields x = {0};
    int malformed = key_fields(e->key, e->key_len, take_field, &x) != 0 || x.oom;
    if (!malformed && x.device && !strcmp(x.device, t->info->identity)) {
        fields_free(&x);
        return NULL;
    }
    struct job *j = calloc(1, sizeof *j);
    if (!j) {
        fields_free(&x);
        return NULL;
    }
    j->from = e, j->t = t;
    j->f.kind = (enum key_kind)e->origin;
    struct store_record sr;
    void *arena = NULL;
    char ver[16];
    snprintf(ver, sizeof ver, "%d", x.version);
    if (malformed || !x.device || !x.options || read_entry(e->hash, e->key, e->key_len, &sr, &arena) != CLSHIM_OK)
        skip(j, SKIP_UNREADABLE, "%s", "the entry cannot be read or is not trusted here");
    else if (x.version != KEY_FORMAT_VERSION)
        skip(j, SKIP_FORMAT, "its key is of clshim's key format %s, another than this clshim's", ver);
    else if (*x.foreign)
        skip(j, SKIP_FOREIGN, "its key has a field cache warm does not rebuild (%s)", x.foreign);
    else if (e->origin == KEY_LINK)
        key_link_job(w, j, &x);
    else if (!x.input)
        skip(j, SKIP_UNREADABLE, "%s", "its key has no input");
    else
        key_source_job(j, &x);
    if (arena) {
        j->compile_ns = sr.compile_ns;
        store_record_free(arena);
    }
    fields_free(&x);
    /* Another entry makes the same new key (the program stored for two
     * other devices): one build. */
    for (size_t i = 0; j->state == JOB_QUEUED && i < w->njobs; i++)
        if (w->jobs[i]->t == t && w->jobs[i]->state != JOB_SAME && w->jobs[i]->f.key &&
            !memcmp(&w->jobs[i]->f.hash, &j->f.hash, sizeof j->f.hash))
            j->state = JOB_SAME, j->same = w->jobs[i];
    if (j->state == JOB_QUEUED && read_entry(j->f.hash, j->f.key, j->f.key_len, &sr, &arena) == CLSHIM_OK) {
        j->state = JOB_ALREADY;
        if (w->push) pipeline_push_stored(j->f.hash, j->f.key, j->f.key_len, &sr);
        store_record_free(arena);
    }
    return j;
}

static int add_job(struct warm *w, struct job *j)
{
    if (w->njobs == w->jobs_cap) {
        size_t cap = w->jobs_cap ? 2 * w->jobs_cap : 64;
        struct job **n = realloc(w->jobs, cap * sizeof *n);
        if (!n) return -1;
        w->jobs = n, w->jobs_cap = cap;
    }
    w->jobs[w->njobs++] = j;
    return 0;
}

/* ---- building -------------------------------------------------------------------- */

static uint64_t warm_budget_ns(uint64_t compile_ns)
{
    uint64_t b = 4 * capture_budget_ns(compile_ns, CAPTURE_FIRST_USE_MAX * compile_ns);
    return b > WARM_BUDGET_FLOOR_NS ? b : WARM_BUDGET_FLOOR_NS;
}

static int start(struct warm *w, struct job *j)
{
    struct key_buf snap = {0}, req = {0};
    snapshot_encode(j->f.snap, &snap);
    char *options = NULL;
    struct fields x = {0};
    (void)key_fields(j->f.key, j->f.key_len, take_field, &x);
    options = x.options;
    /* The child arms its budget from the request's costs
     * (capture_budget_ns()): costs that give warm's. */
    uint64_t budget = warm_budget_ns(j->compile_ns), unit = budget / (2 * (1 + CAPTURE_FIRST_USE_MAX));
    struct capture_request rq = {.identity = j->t->info->identity, .device = j->t->info->name,
                                 .kind = j->f.kind, .options = options ? options : "",
                                 .source = x.input, .source_len = x.input_len, .key = j->f.key,
                                 .key_len = j->f.key_len, .compile_ns = unit,
                                 .first_use_ns = CAPTURE_FIRST_USE_MAX * unit, .log = "",
                                 .cwd = j->f.snap && j->f.snap->cwd ? j->f.snap->cwd : w->cwd,
                                 .snapshot = snap.data, .snapshot_len = snap.len,
                                 .parts = j->parts.data, .parts_len = j->parts.len};
    char why[600] = "";
    int fd = -1, rc = -1;
    if (snap.oom || j->parts.oom) {
        snprintf(why, sizeof why, "out of memory");
    } else if (j->f.kind != KEY_LINK && snapshot_matches_key(j->f.snap, j->f.key, j->f.key_len, why, sizeof why) != 0) {
        j->state = JOB_SKIPPED, j->skip = SKIP_INPUTS;
        snprintf(j->why, sizeof j->why, "the files read for its key are not what it names (%.500s)", why);
        goto out;
    } else if ((fd = capture_proc_encode(&rq)) < 0) {
        snprintf(why, sizeof why, "the build request cannot be made");
    } else {
        /* The request's bytes, as the helper hands them. */
        off_t size = lseek(fd, 0, SEEK_END);
        if (size > 0 && (req.data = malloc((size_t)size)) && pread(fd, req.data, (size_t)size, 0) == size) {
            req.len = (size_t)size;
            rc = capture_child_start(&j->child, req.data, req.len, budget, why, sizeof why);
        } else {
            snprintf(why, sizeof why, "the build request cannot be read back");
        }
    }
    if (rc == 0) {
        j->state = JOB_RUNNING;
        (void)setpriority(PRIO_PROCESS, (id_t)j->child.pid, 19);
    } else {
        j->state = JOB_FAILED;
        snprintf(j->why, sizeof j->why, "%s", why);
    }
out:
    if (fd >= 0) close(fd);
    free(req.data);
    key_free(&snap);
    fields_free(&x);
    return rc;
}

static void finish(struct warm *w, struct job *j)
{
    void *bin = NULL;
    size_t size = 0;
    uint64_t read_ns = 0;
    enum capture_lost lost;
    char why[1200];
    uint64_t cpu = capture_child_cpu_ns(&j->child);
    if (capture_child_answer(&j->child, &bin, &size, &read_ns, &lost, why, sizeof why) != 0) {
        int input = lost == CAPTURE_LOST_INPUTS, cost = lost == CAPTURE_LOST_COST;
        j->state = input || cost || lost == CAPTURE_LOST_BUILD ? JOB_SKIPPED : JOB_FAILED;
        j->skip = input ? SKIP_INPUTS : cost ? SKIP_COST : SKIP_BUILD;
        if (cost) snprintf(j->why, sizeof j->why, "its build ran past its CPU budget of %.0f s", j->child.budget_ns / 1e9);
        else snprintf(j->why, sizeof j->why, "%.590s", why);
        return;
    }
    j->f.device = j->t->info->name;
    /* What a hit saves: the program's compile as stored for the other
     * device (the child's CPU is mostly its own start and the driver's). */
    j->f.compile_ns = j->compile_ns ? j->compile_ns : cpu > read_ns ? cpu - read_ns : 0;
    j->f.names_files = 1;
    j->f.exact = 1; /* the child's sandbox saw the build read nothing but the snapshot */
    if (pipeline_store_late(&j->f, bin, size, "", read_ns)) {
        j->state = JOB_WARMED;
        /* No kernel ran: the driver's first-use code is not in it. */
        if (j->t->info->lazy_codegen && j->f.kind == KEY_SOURCE) pipeline_note_provisional(j->f.key, j->f.key_len, 1);
    } else {
        j->state = JOB_FAILED;
        snprintf(j->why, sizeof j->why, "the store refused it (full disk, read-only, or over the size limit)");
    }
    free(bin);
    (void)w;
}

static void progress(struct warm *w, unsigned running)
{
    if (!w->tty) return;
    fprintf(stderr, "\rclshim: cache warm: %zu of %zu built, %u running ", w->done, w->total, running);
    fflush(stderr);
}

/* Runs the queued jobs among w->jobs[from..), at most jobs_max at once. */
static void run_jobs(struct warm *w, size_t from)
{
    size_t next = from;
    unsigned running = 0;
    for (size_t i = from; i < w->njobs; i++) w->total += w->jobs[i]->state == JOB_QUEUED;
    for (;;) {
        while (running < w->jobs_max && next < w->njobs) {
            struct job *j = w->jobs[next++];
            if (j->state != JOB_QUEUED) continue;
            if (start(w, j) == 0) running++;
            else w->done++;
        }
        if (!running) break;
        progress(w, running);
        nanosleep(&(struct timespec){0, WARM_POLL_NS}, NULL);
        for (size_t i = from; i < next; i++) {
            struct job *j = w->jobs[i];
            if (j->state != JOB_RUNNING || !capture_child_done(&j->child)) continue;
            finish(w, j);
            running--;
            w->done++;
        }
    }
    if (w->tty && w->total) fprintf(stderr, "\r%60s\r", "");
}

/* ---- devices ---------------------------------------------------------------------- */

static int name_matches(const char *name, const char *want)
{
    size_t n = strlen(want);
    for (const char *p = name; *p; p++)
        if (!strncasecmp(p, want, n)) return 1;
    return !*want;
}

static int find_targets(struct warm *w, struct cl_api *api, const char *want)
{
    if (!dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_GLOBAL)) {
        fprintf(stderr, "clshim cache warm: cannot load libOpenCL.so.1 (%s): install an OpenCL driver\n", dlerror());
        return 1;
    }
    clapi_from_loader(api);
    cl_platform_id plats[16];
    cl_uint np = 0;
    char names[2048] = "";
    size_t at = 0;
    if (api->clGetPlatformIDs(16, plats, &np) != CL_SUCCESS) np = 0;
    for (cl_uint p = 0; p < np && p < 16; p++) {
        cl_device_id devs[WARM_MAX_DEVICES];
        cl_uint nd = 0;
        if (api->clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, WARM_MAX_DEVICES, devs, &nd) != CL_SUCCESS) continue;
        for (cl_uint d = 0; d < nd && d < WARM_MAX_DEVICES && w->ntargets < WARM_MAX_DEVICES; d++) {
            const struct device_info *info = device_info(api, devs[d]);
            if (!info) continue;
            if (at < sizeof names) at += (size_t)snprintf(names + at, sizeof names - at, "%s'%s'", at ? ", " : "", info->name);
            if (want && !name_matches(info->name, want)) continue;
            if (info->quirks & QUIRK_STAND_ASIDE_UNCACHED) {
                fprintf(stderr, "clshim: cache warm: not for %s: %s\n", info->name,
                        quirk_description(QUIRK_STAND_ASIDE_UNCACHED));
                continue;
            }
            w->targets[w->ntargets++] = (struct target){devs[d], info};
        }
    }
    if (w->ntargets) return 0;
    if (!at) fprintf(stderr, "clshim cache warm: no OpenCL device here: nothing to warm for\n");
    else if (want) fprintf(stderr, "clshim cache warm: no device named like '%s' here (there are %s)\n", want, names);
    else fprintf(stderr, "clshim cache warm: no device here that clshim caches for (there are %s)\n", names);
    return 1;
}

/* ---- the report ------------------------------------------------------------------ */

static const char *state_name(const struct job *j)
{
    switch (j->state) {
    case JOB_WARMED: return "warmed";
    case JOB_ALREADY: return "already";
    case JOB_SKIPPED: return "skipped";
    case JOB_FAILED: return "failed";
    case JOB_SAME: return "same";
    default: return "queued";
    }
}

static void json_text(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}

static void report(struct warm *w, double seconds)
{
    for (size_t i = 0; i < w->njobs; i++) {
        struct job *j = w->jobs[i];
        if (j->state == JOB_WARMED) w->warmed++;
        else if (j->state == JOB_ALREADY) w->already++;
        else if (j->state == JOB_SKIPPED) w->skipped_by[j->skip]++;
        else if (j->state == JOB_FAILED) w->failed++;
        if (j->state != JOB_SKIPPED && j->state != JOB_FAILED) continue;
        char old[17];
        hash_prefix(j->from->hash, old);
        fprintf(stderr, "clshim: cache warm: %s %s%s (%s, stored for %s) for %s: %s\n",
                j->state == JOB_FAILED ? "failed" : "skipped", old, "", key_kind_name(j->from->origin),
                *j->from->device ? j->from->device : "another device", j->t->info->name, j->why);
    }
    unsigned long skipped = 0;
    char by[400] = "";
    size_t at = 0;
    for (int r = 0; r < SKIP_COUNT; r++) {
        if (!w->skipped_by[r]) continue;
        skipped += w->skipped_by[r];
        at += (size_t)snprintf(by + at, sizeof by - at, "%s%lu %s", at ? ", " : "", w->skipped_by[r], skip_names[r]);
    }
    if (w->json) {
        printf("{\"warmed\": %lu, \"already\": %lu, \"skipped\": %lu, \"failed\": %lu, \"seconds\": %.3f,\n",
               w->warmed, w->already, skipped, w->failed, seconds);
        printf(" \"skipped_by\": {");
        for (int r = 0, first = 1; r < SKIP_COUNT; r++) {
            if (!w->skipped_by[r]) continue;
            printf("%s", first ? "" : ", "), first = 0;
            json_text(skip_names[r]);
            printf(": %lu", w->skipped_by[r]);
        }
        printf("},\n \"devices\": [");
        for (size_t t = 0; t < w->ntargets; t++) {
            printf("%s", t ? ", " : "");
            json_text(w->targets[t].info->name);
        }
        printf("],\n \"programs\": [");
        for (size_t i = 0; i < w->njobs; i++) {
            struct job *j = w->jobs[i];
            char old[33], now[33] = "";
            key_hash_hex(j->from->hash, old);
            if (j->f.key) key_hash_hex(j->f.hash, now);
            printf("%s\n  {\"key\": \"%s\", \"kind\": \"%s\", \"stored_for\": ", i ? "," : "", old,
                   key_kind_name(j->from->origin));
            json_text(j->from->device);
            printf(", \"device\": ");
            json_text(j->t->info->name);
            printf(", \"new_key\": ");
            if (*now) printf("\"%s\"", now);
            else printf("null");
            printf(", \"outcome\": \"%s\", \"reason\": ", state_name(j));
            if (j->state == JOB_SKIPPED || j->state == JOB_FAILED) json_text(j->why);
            else printf("null");
            printf("}");
        }
        printf("\n ]}\n");
    }
    fprintf(stderr, "clshim: cache warm: %lu warmed, %lu already warm, %lu skipped%s%s%s, %lu failed, in %.1f s\n",
            w->warmed, w->already, skipped, at ? " (" : "", by, at ? ")" : "", w->failed, seconds);
}

/* ---- the command ------------------------------------------------------------------ */

/* The pipeline's store is the configuration's: another --dir is this
 * command again in a process whose CLSHIM_CACHE_DIR names it. */
static int run_in_dir(const char *dir, int argc, char **argv)
{
    char here[4096];
    if (config_cache_dir(config_get(), here, sizeof here) == 0 && !strcmp(here, dir)) return -1;
    /* No --dir again: the new process's directory is its configuration's. */
    setenv("CLSHIM_CACHE_DIR", dir, 1);
    char **args = calloc((size_t)argc + 3, sizeof *args);
    if (!args) return 1;
    args[0] = "clshim-tool", args[1] = "cache";
    for (int i = 0; i < argc; i++) args[i + 2] = argv[i];
    execv("/proc/self/exe", args);
    fprintf(stderr, "clshim cache warm: cannot run again for --dir %s (%s)\n", dir, strerror(errno));
    free(args);
    return 1;
}

int cache_warm_main(const char *dir, int argc, char **argv)
{
    struct warm w = {.jobs_max = 0};
    const char *want = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        if ((!strcmp(a, "--device") || !strcmp(a, "--jobs")) && i + 1 < argc) v = argv[++i];
        else if (!strncmp(a, "--device=", 9) || !strncmp(a, "--jobs=", 7)) v = strchr(a, '=') + 1;
        if (!strncmp(a, "--device", 8) && v) want = v;
        else if (!strncmp(a, "--jobs", 6) && v) {
            char *end;
            long n = strtol(v, &end, 10);
            if (*end || end == v || n < 1 || n > 256) return usage("--jobs '%s' is not a number from 1 to 256", v);
            w.jobs_max = (unsigned)n;
        } else if (!strcmp(a, "--push")) w.push = 1;
        else if (!strcmp(a, "--json")) w.json = 1;
        else return help_unknown("clshim cache: warm", "cache warm", a);
    }
    if (want && !*want) return usage("%s needs a device name", "--device");
    int rc = run_in_dir(dir, argc, argv);
    if (rc >= 0) return rc;
    const struct clshim_config *cfg = config_get();
    if (!cfg->cache) {
        fprintf(stderr, "clshim cache warm: the cache is off (CLSHIM_CACHE=0): nothing to warm\n");
        return 1;
    }
    if (w.push && !*cfg->remote) return usage("--push needs a remote tier: %s", "set CLSHIM_REMOTE");
    if (!w.push) pipeline_remote_off();
    if (!w.jobs_max) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        w.jobs_max = n > 1 ? (unsigned)n : 1;
    }
    w.tty = isatty(2) && !w.json;
    if (!getcwd(w.cwd, sizeof w.cwd)) snprintf(w.cwd, sizeof w.cwd, "/");
    double t0 = now_s();
    store *st = pipeline_store();
    if (!st) {
        fprintf(stderr, "clshim cache warm: no cache in %s: nothing to warm\n", dir);
        return 1;
    }
    /* Children run the driver as the application would: without clshim. */
    char **env = child_environ();
    if (env) environ = env;
    struct cl_api api;
    if ((rc = find_targets(&w, &api, want)) != 0) return rc;
    rc = store_foreach(st, copy_entry, &w);
    if (rc != CLSHIM_OK) {
        fprintf(stderr, "clshim cache warm: cannot read the cache in %s: %s\n", dir, clshim_strerror(rc));
        return 1;
    }
    /* Phase 1, sources and compiles; phase 2, links of what phase 1 has. */
    for (int phase = 0; phase < 2; phase++) {
        size_t from = w.njobs;
        for (size_t t = 0; t < w.ntargets; t++)
            for (size_t e = 0; e < w.nentries; e++) {
                if ((w.entries[e].origin == KEY_LINK) != (phase == 1)) continue;
                struct job *j = plan(&w, &w.entries[e], &w.targets[t]);
                if (j && add_job(&w, j) != 0) return fprintf(stderr, "clshim cache warm: out of memory\n"), 1;
            }
        run_jobs(&w, from);
    }
    if (w.push) {
        char line[600] = "";
        unsigned refused = pipeline_remote_settle(line, sizeof line);
        if (refused) {
            fprintf(stderr, "clshim: %s; %u push%s refused in all\n", line, refused, refused == 1 ? "" : "es");
            rc = 1;
        }
    }
    report(&w, now_s() - t0);
    if (w.failed) rc = 1;
    for (size_t i = 0; i < w.njobs; i++) {
        pipeline_flight_free(&w.jobs[i]->f);
        key_free(&w.jobs[i]->parts);
        free(w.jobs[i]);
    }
    for (size_t e = 0; e < w.nentries; e++) free(w.entries[e].key);
    free(w.entries);
    free(w.jobs);
    return rc;
}
