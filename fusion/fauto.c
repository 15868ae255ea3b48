/* fauto.c — automatic fusion (CLSHIM_FUSION=auto): learning the kernel
 * sequences an application runs back to back.
 *
 * Each in-order queue keeps its current "run": the kernels submitted one
 * after another with nothing else on the queue between them. A run ends at
 * any other command, a sync (clFinish, clFlush, a blocking command), a
 * kernel that could not be held, kernels held for fusion, the release of
 * the queue, or when its first kernel comes again (a loop enqueueing the
 * same chain without syncs). A run of two or more kernels that ends the
 * same way twice on a queue (same kernel names in the same order) is
 * appended to the process's plan as a learned sequence; from then on the
 * batcher (batch.c) holds its next occurrences exactly as it does for a
 * sequence the user wrote, and fuses them only where the analysis proves
 * the fused kernel equivalent without a barrier: a learned sequence never
 * gets `force-barrier` nor `internal`, and a refusal (needs a barrier,
 * sub-buffers, SVM, overlapping host memory, ...) is logged with its reason
 * and puts the sequence in the batcher's back-off (batch.c): it is not held
 * for its next few occurrences, and tried again after them.
 *
 * Cost on the enqueue path: one store into the queue record, under the
 * queue's own lock that the batcher takes anyway. The work of comparing
 * and learning is done when a run ends, which is at another command.
 *
 * A learned sequence must not repeat another or be a prefix of one (the
 * batcher could not tell where it ends, plan.h): such runs are not learned.
 *
 * The report (CLSHIM_FUSION_REPORT, for `clshim plan suggest`): every run
 * seen twice gets an entry with its work-items, how often it ran unfused
 * and fused, the verdict of its fusion, and the time of an occurrence:
 * from the enqueue of its first kernel (of holding it, when fused) to the
 * completion of its last kernel (of the fused launch), taken by a
 * completion callback on an event clshim asks for where the application
 * asked for none (the first fused occurrence, which builds the fused
 * program, is not timed). Only with the report on; the entries go to the
 * file at exit.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/config.h"
#include "common/log.h"
#include "fusion/batch.h"
#include "fusion/batch_int.h"

#define FA_MAX_LEARNED 256 /* learned sequences per process */
#define FA_RUN_MAX 32      /* kernels of a run that can be learned (longer runs are not) */
#define FA_SEEN 16         /* distinct runs remembered per queue */

int fb_auto;
uint32_t fb_plan_cap;
int fa_reporting;

struct fa_seen {
    uint64_t hash;  /* of the kernel names, in order */
    uint32_t n;     /* kernels */
    uint32_t count; /* times the run ended so */
};

struct fa_watch {
    struct fk_kernel *run[FA_RUN_MAX];
    uint32_t n;    /* kernels in the run (atomic: read without the lock by fa_running) */
    cl_uint dim;   /* the first kernel's ND-range (for the report) */
    size_t gws[3];
    double t0;     /* when the run's first kernel (or the first held one) was enqueued, ms */
    cl_event last; /* the run's last kernel's event, retained (report only) */
    int overflow;  /* the run had more than FA_RUN_MAX kernels */
    struct fa_seen seen[FA_SEEN];
    uint32_t next_seen;
};

static pthread_mutex_t learn_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- the report ---------------------------------------------------------------- */

struct fa_entry {
    char *names; /* "a+b+c" */
    cl_uint dim;
    size_t gws[3];
    uint64_t unfused, fused;             /* occurrences seen, each way */
    uint64_t unfused_timed, fused_timed; /* of which timed */
    double unfused_ms, fused_ms;         /* the fastest occurrence (less noise than a mean of a few) */
    char *verdict;                       /* NULL: not tried; "fused"; else why it was refused */
    struct fa_entry *next;
};
static struct fa_entry *entries;
static pthread_mutex_t report_lock = PTHREAD_MUTEX_INITIALIZER; /* a leaf: taken under queue locks */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* The entry of `names`, made on first use. Caller holds report_lock. */
static struct fa_entry *entry_of(const char *names)
{
    struct fa_entry *e;
    for (e = entries; e; e = e->next)
        if (!strcmp(e->names, names)) return e;
    if (!(e = calloc(1, sizeof *e)) || !(e->names = strdup(names))) {
        free(e);
        return NULL;
    }
    e->next = entries;
    entries = e;
    return e;
}

struct fa_timing {
    struct fa_entry *e;
    double t0;
    int fused;
};

static void CL_CALLBACK timed(cl_event ev, cl_int status, void *arg)
{
    struct fa_timing *t = arg;
    double ms = now_ms() - t->t0;
    if (status == CL_COMPLETE) {
        pthread_mutex_lock(&report_lock);
        uint64_t *n = t->fused ? &t->e->fused_timed : &t->e->unfused_timed;
        double *best = t->fused ? &t->e->fused_ms : &t->e->unfused_ms;
        if (!(*n)++ || ms < *best) *best = ms;
        pthread_mutex_unlock(&report_lock);
    }
    fb_real->clReleaseEvent(ev);
    free(t);
}

/* Counts an occurrence of `names` and times it through `ev` (taken over:
 * released here or by the callback; may be NULL). */
static void occurrence(const char *names, int fused, double t0, cl_event ev, cl_uint dim, const size_t *gws)
{
    pthread_mutex_lock(&report_lock);
    struct fa_entry *e = entry_of(names);
    if (e) {
        if (fused) e->fused++;
        else e->unfused++;
        if (!e->dim && gws) {
            e->dim = dim;
            memcpy(e->gws, gws, sizeof e->gws);
        }
    }
    /* The first fused occurrence builds (or loads) the fused program: not
     * what the next ones take. */
    int first_fused = fused && e && e->fused == 1;
    pthread_mutex_unlock(&report_lock);
    struct fa_timing *t = e && ev && !first_fused ? malloc(sizeof *t) : NULL;
    if (t) {
        *t = (struct fa_timing){e, t0, fused};
        if (fb_real->clSetEventCallback(ev, CL_COMPLETE, timed, t) == CL_SUCCESS) return;
        free(t);
    }
    if (ev) fb_real->clReleaseEvent(ev);
}

void fa_seq_names(const struct plan_seq *s, char *out, size_t len)
{
    size_t o = 0;
    out[0] = 0;
    for (uint32_t i = 0; i < s->n && o + 1 < len; i++) {
        int m = snprintf(out + o, len - o, "%s%s", i ? "+" : "", s->names[i]);
        if (m < 0) break;
        o += (size_t)m;
    }
}

static struct fa_watch *watch_of(struct fq *q)
{
    struct fa_watch *w = q->watch;
    if (!w && (w = calloc(1, sizeof *w))) __atomic_store_n(&q->watch, w, __ATOMIC_RELEASE);
    return w;
}

void fa_held(struct fq *q)
{
    struct fa_watch *w = fa_reporting && q->nheld == 1 ? watch_of(q) : NULL;
    if (w) w->t0 = now_ms();
}

void fa_fused(struct fq *q, int seq, cl_event launch, const char *why)
{
    char names[1024];
    fa_seq_names(&fb_plan->seqs[seq], names, sizeof names);
    const struct fa_watch *w = q->watch;
    occurrence(names, launch != NULL, w ? w->t0 : now_ms(), launch, 0, NULL);
    pthread_mutex_lock(&report_lock);
    struct fa_entry *e = entry_of(names);
    /* The first verdict, unless a later occurrence fused (a refusal can
     * hold for one occurrence only: the sequence is fusable). */
    if (e && (!e->verdict || (launch && strcmp(e->verdict, "fused")))) {
        free(e->verdict);
        e->verdict = strdup(launch ? "fused" : why);
    }
    pthread_mutex_unlock(&report_lock);
}

void fa_note_event(struct fq *q, cl_event ev)
{
    struct fa_watch *w = q->watch;
    if (!w || !ev) return;
    if (w->last) fb_real->clReleaseEvent(w->last);
    fb_real->clRetainEvent(ev);
    w->last = ev;
}

void fa_write_report(void)
{
    const char *path = config_get()->fusion_report;
    if (!fa_reporting || !path || !*path) return;
    FILE *f = fopen(path, "a");
    if (!f) {
        log_msg(LOG_WARN, "fusion: cannot write the report to %s", path);
        return;
    }
    pthread_mutex_lock(&report_lock);
    for (const struct fa_entry *e = entries; e; e = e->next) {
        if (!e->verdict) continue; /* never learned */
        fprintf(f, "sequence=%s\tdim=%u\tgws=%zu,%zu,%zu\tunfused=%llu\tfused=%llu\tunfused_ms=%.6f\tfused_ms=%.6f\t"
                   "verdict=", e->names, e->dim, e->gws[0], e->gws[1], e->gws[2], (unsigned long long)e->unfused,
                (unsigned long long)e->fused, e->unfused_ms, e->fused_ms);
        for (const char *c = e->verdict; *c; c++) fputc(*c == '\t' || *c == '\n' ? ' ' : *c, f);
        fputc('\n', f);
    }
    pthread_mutex_unlock(&report_lock);
    fclose(f);
}

int fa_init(struct fusion_plan **plan)
{
    const char *report = config_get()->fusion_report;
    fa_reporting = report && *report;
    if (!*plan && !(*plan = calloc(1, sizeof **plan))) return -1;
    uint32_t cap = (*plan)->nseqs + FA_MAX_LEARNED;
    struct plan_seq *seqs = realloc((*plan)->seqs, cap * sizeof *seqs);
    if (!seqs) return -1;
    memset(seqs + (*plan)->nseqs, 0, FA_MAX_LEARNED * sizeof *seqs);
    (*plan)->seqs = seqs;
    fb_plan_cap = cap;
    return 0;
}

int fa_running(const struct fq *q)
{
    const struct fa_watch *w = __atomic_load_n(&q->watch, __ATOMIC_ACQUIRE);
    return w && __atomic_load_n(&w->n, __ATOMIC_RELAXED) > 0;
}

int fa_run_is(const struct fq *q, const struct fk_kernel *r)
{
    const struct fa_watch *w = q->watch;
    return w && w->n == 1 && w->run[0] == r;
}

void fa_before_kernel(struct fq *q, const struct fk_kernel *r)
{
    const struct fa_watch *w = q->watch;
    /* A run of r alone that r continues stays that run (fa_note keeps it):
     * breaking it would learn nothing, and a kernel enqueued over and over
     * costs no more than one comparison. The report records each run's
     * start, so it breaks. */
    if (w && w->n && w->run[0] == r && (w->n > 1 || fa_reporting)) fa_break(q);
}

void fa_note(struct fq *q, struct fk_kernel *r, cl_uint dim, const size_t *gws)
{
    struct fa_watch *w = watch_of(q);
    if (!w || (w->n == 1 && w->run[0] == r && !fa_reporting)) return; /* the same run (fa_before_kernel) */
    if (!w->n) {
        w->dim = dim;
        for (cl_uint d = 0; d < 3; d++) w->gws[d] = d < dim ? gws[d] : 1;
        if (fa_reporting) w->t0 = now_ms();
    }
    if (w->n == FA_RUN_MAX) {
        w->overflow = 1;
        return;
    }
    w->run[w->n] = r;
    __atomic_store_n(&w->n, w->n + 1, __ATOMIC_RELAXED);
}

static void run_names(struct fk_kernel *const *run, uint32_t n, char *out, size_t len)
{
    size_t o = 0;
    out[0] = 0;
    for (uint32_t i = 0; i < n && o + 1 < len; i++) {
        int m = snprintf(out + o, len - o, "%s%s", i ? "+" : "", run[i]->name);
        if (m < 0) break;
        o += (size_t)m;
    }
}

/* How the run relates to plan sequence s: 0 unrelated, 1 equal, 2 one is a
 * prefix of the other. */
static int relation(const struct plan_seq *s, struct fk_kernel *const *run, uint32_t n)
{
    uint32_t m = s->n < n ? s->n : n;
    for (uint32_t i = 0; i < m; i++)
        if (strcmp(s->names[i], run[i]->name)) return 0;
    return s->n == n ? 1 : 2;
}

/* Appends the run to the plan (once per process, whichever queue saw it). */
static void learn(struct fk_kernel *const *run, uint32_t n)
{
    char names[1024];
    run_names(run, n, names, sizeof names);
    pthread_mutex_lock(&learn_lock);
    uint32_t ns = fb_plan_nseqs();
    for (uint32_t s = 0; s < ns; s++) {
        int rel = relation(&fb_plan->seqs[s], run, n);
        if (rel == 1) goto out; /* another queue learned it, or the user's plan has it */
        if (rel == 2) {
            fb_log_kind("fusion: auto: %s not learned: it and the sequence at %s are one the other's prefix", names,
                        fb_plan->seqs[s].where);
            goto out;
        }
    }
    if (ns >= fb_plan_cap) {
        fb_log_kind("fusion: auto: %s not learned: %u sequences learned already", names, FA_MAX_LEARNED);
        goto out;
    }
    struct plan_seq *s = &fb_plan->seqs[ns];
    memset(s, 0, sizeof *s);
    s->names = calloc(n, sizeof *s->names);
    s->where = strdup("auto");
    int ok = s->names && s->where;
    for (uint32_t i = 0; i < n && ok; i++) ok = (s->names[i] = strdup(run[i]->name)) != NULL;
    if (!ok) {
        for (uint32_t i = 0; s->names && i < n; i++) free(s->names[i]);
        free(s->names);
        free(s->where);
        memset(s, 0, sizeof *s);
        goto out;
    }
    s->n = n;
    __atomic_store_n(&fb_backoff[ns].skip, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&fb_backoff[ns].refusals, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&fb_plan->nseqs, ns + 1, __ATOMIC_RELEASE);
    log_msg(LOG_INFO, "fusion: auto: learned %s (ran twice back to back); its next occurrences are fused if proven safe",
            names);
out:
    pthread_mutex_unlock(&learn_lock);
}

void fa_forget_kernel(struct fq *q, cl_kernel k)
{
    struct fa_watch *w = q->watch;
    if (!w) return;
    for (uint32_t i = 0; i < w->n; i++)
        if (w->run[i]->k == k) {
            __atomic_store_n(&w->n, 0, __ATOMIC_RELAXED);
            w->overflow = 0;
            if (w->last) fb_real->clReleaseEvent(w->last);
            w->last = NULL;
            return;
        }
}

void fa_break(struct fq *q)
{
    struct fa_watch *w = q->watch;
    if (!w || !w->n) return;
    uint32_t n = w->n;
    int usable = n >= 2 && !w->overflow;
    __atomic_store_n(&w->n, 0, __ATOMIC_RELAXED);
    w->overflow = 0;
    cl_event last = w->last;
    w->last = NULL;
    if (!usable) {
        if (last) fb_real->clReleaseEvent(last);
        return;
    }
    uint64_t h = 1469598103934665603ull;
    for (uint32_t i = 0; i < n; i++) {
        for (const char *c = w->run[i]->name; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ull;
        h = (h ^ '+') * 1099511628211ull;
    }
    for (uint32_t i = 0; i < FA_SEEN; i++) {
        struct fa_seen *s = &w->seen[i];
        if (s->count && s->hash == h && s->n == n) {
            /* With the report on, a third occurrence is run unfused first:
             * the first launches of a kernel compile it on some drivers. */
            if (++s->count == (fa_reporting ? 3u : 2u)) learn(w->run, n);
            if (fa_reporting) { /* runs seen once are not reported: the first is counted with the second */
                char names[1024];
                run_names(w->run, n, names, sizeof names);
                if (s->count == 2) occurrence(names, 0, 0, NULL, w->dim, w->gws);
                occurrence(names, 0, w->t0, last, w->dim, w->gws);
                last = NULL;
            }
            if (last) fb_real->clReleaseEvent(last);
            return;
        }
    }
    if (last) fb_real->clReleaseEvent(last);
    struct fa_seen *s = &w->seen[w->next_seen++ % FA_SEEN];
    *s = (struct fa_seen){h, n, 1};
}
