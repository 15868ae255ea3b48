/* fauto.c — automatic fusion (CLSHIM_FUSION=auto): learning the kernel
 * sequences an application runs back to back.
 *
 * Each in-order queue keeps its current "run": the kernels submitted one
 * after another with nothing else on the queue between them, held for
 * fusion or not. A run ends at any other command, a sync (clFinish,
 * clFlush, a blocking command), a kernel that could not be held, or the
 * release of the queue. A run of two or more kernels that ends the same
 * way twice on a queue (same kernel names in the same order) is appended
 * to the process's plan as a learned sequence. A loop that enqueues its
 * step without syncs makes one long run: when the run's first kernel comes
 * again, the run so far is checked for a period (the same kernels twice
 * over, three times with the report on), which is learned as the step
 * (fa_repeat; the first kernel may recur inside the step: PyOpenCL's
 * `y = s*x + c; z = y*y - 0.5; w = z*y + x` is axpb axpb multiply axpb
 * multiply axpbyz). Held kernels belong to the run so that a step is found
 * whole even where a part of it was learned before. From then on the
 * batcher (enqueue.c) holds its next occurrences exactly as it does for a
 * sequence the user wrote, and fuses them only where the analysis proves
 * the fused kernel equivalent without a barrier: a learned sequence never
 * gets `force-barrier` nor `internal`, and a refusal (needs a barrier,
 * sub-buffers, SVM, overlapping host memory, ...) is logged with its reason
 * and puts the sequence in the batcher's back-off (enqueue.c): it is not held
 * for its next few occurrences, and tried again after them.
 *
 * Windows. A learned sequence refused for a lasting reason (its key: the
 * ranges, the analysis; or always) before it ever fused is retired (never
 * held again) and its next window is learned in its place, longest first
 * from the left: of a refused a+b+c+d, a+b+c, then a+b, then b+c+d, b+c,
 * then c+d (fa_refused), one occurrence each. When a window first fuses,
 * the kernels of its run after it are learned as the next window
 * (fa_first_fused). A retired sequence is never a candidate again, so a
 * window may be its prefix (plan.h's rule is about the sequences that can
 * be held); one without a window left to try is not retired (it backs off).
 *
 * Cost on the enqueue path: one store into the queue record, under the
 * queue's own lock that the batcher takes anyway. The work of comparing
 * and learning is done when a run ends (at another command) or when its
 * first kernel comes again (once per step of a pipelined loop).
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
 * program, is not timed), or from the completion of the queue's previous
 * timed occurrence when that is later: occurrences issued without a sync
 * between them overlap, and each then costs the time between two
 * completions (what the application gains per occurrence). Each entry
 * says how its sequence was issued (pipelined: found as the period of a
 * run, or its occurrences overlapped; synced otherwise; a window as its
 * run), the recurring run
 * it is a window of, and the never-slower measurement's medians when one
 * was made (fspeed.c: both ways interleaved, as the application issues
 * them). Only with the report on; the entries go to the file at exit.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clang.h"
#include "common/config.h"
#include "common/log.h"
#include "fusion/batch.h"
#include "fusion/batch_int.h"
#include "fusion/fhistory.h"
#include "program/origin.h"

#define FA_MAX_LEARNED 256 /* learned sequences per process */
#define FA_RUN_MAX PLAN_MAX_SEQ /* kernels of a run that can be learned (longer runs are not) */
#define FA_SEEN 16         /* distinct runs remembered per queue */
#define FA_SAMPLES 15      /* timed occurrences kept per sequence and way (report) */


struct fa_seen {
    uint64_t hash;  /* of the kernel names, in order */
    uint32_t n;     /* kernels */
    uint32_t count; /* times the run ended so */
};

/* A repeat of the run's first kernel (fa_repeat), for the report's timing. */
#define FA_REPEATS 4
struct fa_rep {
    uint32_t n;  /* the run's length then (0: none) */
    double t;    /* when, ms */
    cl_event ev; /* the event of the kernel before it, retained */
};

struct fa_watch {
    struct fk_kernel *run[FA_RUN_MAX];
    uint32_t n;    /* kernels in the run (atomic: read without the lock by fa_running) */
    cl_uint dim;   /* the first kernel's ND-range (for the report) */
    size_t gws[3];
    double t0;     /* when the run's first kernel was enqueued, ms (report) */
    double held_t0; /* when the first of the kernels held now was held, ms (report) */
    cl_event last; /* the run's last kernel's event, retained (report only) */
    double done_ms; /* when the queue's last timed occurrence completed (report; under report_lock) */
    int overflow;  /* the run had more than FA_RUN_MAX kernels */
    int held;      /* some of its kernels were held for fusion (its time is not an unfused one) */
    uint32_t alone; /* times run[0], the run's only kernel, came again and was not appended yet
                       (atomic: fa_again counts them without the lock; run_append appends them
                       once another kernel comes, so a period such as k1 k1 k2 is kept) */
    uint32_t skipped; /* a quiet kernel went past unseen (atomic: fa_skipped, without the lock):
                         the run has a hole; it is dropped, not learned from */
    uint64_t period_hash; /* of the names of the last period found here (fa_repeat) */
    struct fa_rep rep[FA_REPEATS]; /* the last repeats of the run's first kernel (report) */
    uint32_t next_rep;
    struct fa_seen seen[FA_SEEN];
    uint32_t next_seen;
};

static pthread_mutex_t learn_lock = PTHREAD_MUTEX_INITIALIZER;

/* Per learned sequence (index s - fb()->plan_user): the learned sequence it is
 * a window of (itself for a recurring run) and where it starts there.
 * Written before the sequence is published (fb_plan_nseqs), never after. */
static struct fa_origin {
    uint32_t root, start;
} origins[FA_MAX_LEARNED];

static uint32_t root_of(uint32_t s) { return s >= fb()->plan_user ? origins[s - fb()->plan_user].root : s; }

/* The median of the first min(n, FA_SAMPLES) values of v (sorted in place), 0 for none. */
static float median_of(float *v, uint64_t n)
{
    uint32_t m = n < FA_SAMPLES ? (uint32_t)n : FA_SAMPLES;
    for (uint32_t i = 1; i < m; i++)
        for (uint32_t j = i; j && v[j - 1] > v[j]; j--) {
            float t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return !m ? 0 : m % 2 ? v[m / 2] : (v[m / 2 - 1] + v[m / 2]) / 2;
}

/* The plan sequence whose names are "a+b+c", or -1. */
static int seq_named(const char *names)
{
    char buf[1024];
    uint32_t ns = fb_plan_nseqs();
    for (uint32_t s = 0; s < ns; s++) {
        fa_seq_names(&fb()->plan->seqs[s], buf, sizeof buf);
        if (!strcmp(buf, names)) return (int)s;
    }
    return -1;
}

/* ---- the report ---------------------------------------------------------------- */

struct fa_entry {
    char *names; /* "a+b+c" */
    cl_uint dim;
    size_t gws[3];
    uint64_t unfused, fused;             /* occurrences seen, each way */
    uint64_t unfused_timed, fused_timed; /* of which timed */
    float unfused_ms[FA_SAMPLES], fused_ms[FA_SAMPLES]; /* the first FA_SAMPLES timed each way (median at exit:
                                            the fastest of pipelined ones can be two callbacks run at once) */
    char *verdict;                       /* NULL: not tried; "fused"; else why it was refused */
    char *root;                          /* the recurring run it is a window of (NULL: itself) */
    int pipelined;                       /* issued without syncs between its occurrences */
    uint64_t runs;                       /* runs that ended as this sequence, held or not (fa_break, fa_repeat) */
    uint32_t start;                      /* its first kernel's place in root */
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

/* The entry of `names`, or NULL (under report_lock, asserted). */
static struct fa_entry *entry_named(const char *names)
{
    if (!CLSHIM_ASSERT_HELD(&report_lock)) return NULL;
    struct fa_entry *e;
    for (e = entries; e && strcmp(e->names, names); e = e->next)
        continue;
    return e;
}

/* The entry of `names`, made on first use (under report_lock, asserted); NULL
 * without one. */
static struct fa_entry *entry_of(const char *names)
{
    if (!CLSHIM_ASSERT_HELD(&report_lock)) return NULL;
    struct fa_entry *e = entry_named(names);
    if (e) return e;
    if (!(e = calloc(1, sizeof *e)) || !(e->names = strdup(names))) {
        free(e);
        return NULL;
    }
    e->next = entries;
    entries = e;
    return e;
}

struct fa_timing {
    struct fa_entry *e; /* NULL: only marks the queue's last completion */
    struct fa_watch *w; /* of the queue it ran on (never freed) */
    double t0;
    int fused;
};

static void CL_CALLBACK timed(cl_event ev, cl_int status, void *arg)
{
    struct fa_timing *t = arg;
    double now = now_ms();
    pthread_mutex_lock(&report_lock);
    /* An occurrence enqueued before the previous one completed overlapped
     * it: what it costs the application is the time between the two
     * completions, not its own enqueue-to-completion latency. */
    int overlapped = t->w->done_ms > t->t0;
    double ms = now - (overlapped ? t->w->done_ms : t->t0);
    t->w->done_ms = now;
    if (status == CL_COMPLETE && t->e) {
        uint64_t *n = t->fused ? &t->e->fused_timed : &t->e->unfused_timed;
        float *v = t->fused ? t->e->fused_ms : t->e->unfused_ms;
        if (*n < FA_SAMPLES) v[*n] = (float)ms;
        ++*n;
        /* Overlapping its previous occurrence: issued without a sync. A
         * window's overlap with the one before it in the run says nothing
         * of that: it is issued as its root is. */
        if (!t->e->root) t->e->pipelined |= overlapped;
    }
    pthread_mutex_unlock(&report_lock);
    fb()->real->clReleaseEvent(ev);
    free(t);
}

/* Counts an occurrence of `names` on the queue watched by w and times it
 * through `ev` (taken over: released here or by the callback; may be NULL). */
static void occurrence(struct fa_watch *w, const char *names, int fused, double t0, cl_event ev, cl_uint dim,
                       const size_t *gws)
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
    struct fa_timing *t = e && w && ev && !first_fused ? malloc(sizeof *t) : NULL;
    if (t) {
        *t = (struct fa_timing){e, w, t0, fused};
        if (fb()->real->clSetEventCallback(ev, CL_COMPLETE, timed, t) == CL_SUCCESS) return;
        free(t);
    }
    if (ev) fb()->real->clReleaseEvent(ev);
}

/* The completion of ev (taken over) ends an occurrence that is not timed:
 * the next one, when it overlaps it, is timed from there. */
static void mark_done(struct fa_watch *w, cl_event ev)
{
    struct fa_timing *t = malloc(sizeof *t);
    if (t) {
        *t = (struct fa_timing){NULL, w, 0, 0};
        if (fb()->real->clSetEventCallback(ev, CL_COMPLETE, timed, t) == CL_SUCCESS) return;
        free(t);
    }
    fb()->real->clReleaseEvent(ev);
}

/* The run `names` ended k more times back to back (held or not). */
static void count_runs(const char *names, uint64_t k)
{
    pthread_mutex_lock(&report_lock);
    struct fa_entry *e = entry_of(names);
    if (e) e->runs += k;
    pthread_mutex_unlock(&report_lock);
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

static void repeats_clear(struct fa_watch *w);

/* A run with a hole (fa_skipped) is dropped: the kernel seen next starts
 * one afresh. Under q->lock. 1 when it was. */
static int drop_skipped(struct fa_watch *w)
{
    if (!__atomic_load_n(&w->skipped, __ATOMIC_RELAXED)) return 0;
    __atomic_store_n(&w->skipped, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&w->n, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&w->alone, 0, __ATOMIC_RELAXED);
    w->overflow = 0;
    if (w->last) fb()->real->clReleaseEvent(w->last);
    w->last = NULL;
    if (fb()->reporting) repeats_clear(w);
    return 1;
}


void fa_fused(struct fq *q, int seq, cl_event launch, const char *why)
{
    if (!CLSHIM_ASSERT_HELD(&q->lock)) return; /* the run is not watched: nothing is learned from it */
    char names[1024], root[1024];
    fa_seq_names(&fb()->plan->seqs[seq], names, sizeof names);
    uint32_t r = root_of((uint32_t)seq);
    if (r != (uint32_t)seq) fa_seq_names(&fb()->plan->seqs[r], root, sizeof root);
    struct fa_watch *w = watch_of(q);
    occurrence(w, names, launch != NULL, w ? w->held_t0 : now_ms(), launch, 0, NULL);
    pthread_mutex_lock(&report_lock);
    struct fa_entry *e = entry_of(names);
    if (e && r != (uint32_t)seq && !e->root) {
        e->root = strdup(root);
        e->start = origins[seq - fb()->plan_user].start;
    }
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
    if (w->last) fb()->real->clReleaseEvent(w->last);
    fb()->real->clRetainEvent(ev);
    w->last = ev;
}

void fa_write_report(void)
{
    const char *path = config_get()->fusion_report;
    if (!fb()->reporting || !path || !*path) return;
    FILE *f = fopen(path, "a");
    if (!f) {
        log_msg(LOG_WARN, "fusion: cannot write the report to %s", path);
        return;
    }
    pthread_mutex_lock(&report_lock);
    for (struct fa_entry *e = entries; e; e = e->next) {
        /* Every run that recurred, tried or not (verdict "none": it was
         * learned too late, or not at all, to be tried). */
        const struct fa_entry *root = e->root ? entry_named(e->root) : NULL;
        if (!e->dim && root) { /* a window never seen as a run of its own: its root's range */
            e->dim = root->dim;
            memcpy(e->gws, root->gws, sizeof e->gws);
        }
        double mf = 0, mu = 0;
        float uf = median_of(e->unfused_ms, e->unfused_timed), ff = median_of(e->fused_ms, e->fused_timed);
        int seq = seq_named(e->names);
        int measured = seq >= 0 && fs_measured((uint32_t)seq, &mf, &mu);
        int pipelined = root ? root->pipelined : e->pipelined;
        fprintf(f, "sequence=%s\troot=%s\tstart=%u\tissued=%s\truns=%llu\tdim=%u\tgws=%zu,%zu,%zu\tunfused=%llu\t"
                   "fused=%llu\tunfused_ms=%.6f\tfused_ms=%.6f\tmeasured_unfused_ms=%.6f\tmeasured_fused_ms=%.6f\t"
                   "verdict=", e->names, e->root ? e->root : e->names, (unsigned)e->start,
                pipelined ? "pipelined" : "synced", (unsigned long long)e->runs, e->dim, e->gws[0], e->gws[1],
                e->gws[2], (unsigned long long)e->unfused, (unsigned long long)e->fused, uf, ff, measured ? mu : 0.0,
                measured ? mf : 0.0);
        for (const char *c = e->verdict ? e->verdict : "none"; *c; c++) fputc(*c == '\t' || *c == '\n' ? ' ' : *c, f);
        fputc('\n', f);
    }
    pthread_mutex_unlock(&report_lock);
    fclose(f);
}

int fa_init(struct fusion_plan **plan)
{
    const char *report = config_get()->fusion_report;
    fb()->reporting = report && *report;
    if (!*plan && !(*plan = calloc(1, sizeof **plan))) return -1;
    uint32_t cap = (*plan)->nseqs + FA_MAX_LEARNED;
    struct plan_seq *seqs = realloc((*plan)->seqs, cap * sizeof *seqs);
    if (!seqs) return -1;
    memset(seqs + (*plan)->nseqs, 0, FA_MAX_LEARNED * sizeof *seqs);
    (*plan)->seqs = seqs;
    fb()->plan_cap = cap;
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
    return CLSHIM_ASSERT_HELD(&q->lock) && w && w->n == 1 && w->run[0] == r;
}

void fa_before_kernel(struct fq *q, const struct fk_kernel *r)
{
    if (!CLSHIM_ASSERT_HELD(&q->lock)) return; /* the run is not watched: nothing is learned from it */
    const struct fa_watch *w = q->watch;
    /* A run of r alone that r continues stays that run (run_append keeps
     * it): it has no period to learn, and a kernel enqueued over and over
     * costs no more than one comparison. The report records each run's
     * start, so it goes on to fa_repeat. */
    if (w && w->n && w->run[0] == r && (w->n > 1 || fb()->reporting)) fa_repeat(q);
}

/* Appends kernel r to q's run; `held`: it was held for fusion. */
static void run_append(struct fq *q, struct fk_kernel *r, cl_uint dim, const size_t *gws, int held)
{
    struct fa_watch *w = watch_of(q);
    if (!w) return;
    drop_skipped(w);
    if (w->n == 1 && w->run[0] == r && !fb()->reporting) { /* the same run (fa_before_kernel): counted only */
        fa_again(q);
        return;
    }
    for (uint32_t a = __atomic_exchange_n(&w->alone, 0, __ATOMIC_RELAXED); a && w->n; a--) {
        if (w->n == FA_RUN_MAX) {
            w->overflow = 1;
            break;
        }
        w->run[w->n] = w->run[0];
        __atomic_store_n(&w->n, w->n + 1, __ATOMIC_RELAXED);
    }
    if (!w->n) {
        w->dim = dim;
        for (cl_uint d = 0; d < 3; d++) w->gws[d] = d < dim ? gws[d] : 1;
        if (fb()->reporting) w->t0 = now_ms();
        w->held = 0;
    }
    w->held |= held;
    if (w->n == FA_RUN_MAX) {
        w->overflow = 1;
        return;
    }
    w->run[w->n] = r;
    __atomic_store_n(&w->n, w->n + 1, __ATOMIC_RELAXED);
}

void fa_again(struct fq *q)
{
    struct fa_watch *w = q->watch;
    if (w && __atomic_load_n(&w->alone, __ATOMIC_RELAXED) < FA_RUN_MAX) __atomic_add_fetch(&w->alone, 1, __ATOMIC_RELAXED);
}

void fa_skipped(struct fq *q)
{
    struct fa_watch *w = __atomic_load_n(&q->watch, __ATOMIC_ACQUIRE);
    if (w && !__atomic_load_n(&w->skipped, __ATOMIC_RELAXED) && !__atomic_exchange_n(&w->skipped, 1, __ATOMIC_RELAXED))
        STAT_ADD(fb()->stat_unwatched, 1);
}

void fa_end_unwatched(struct fq *q)
{
    struct fa_watch *w = __atomic_load_n(&q->watch, __ATOMIC_ACQUIRE);
    if (w && !__atomic_load_n(&w->n, __ATOMIC_RELAXED) && __atomic_load_n(&w->skipped, __ATOMIC_RELAXED))
        __atomic_store_n(&w->skipped, 0, __ATOMIC_RELAXED);
}

void fa_note(struct fq *q, struct fk_kernel *r, cl_uint dim, const size_t *gws) { run_append(q, r, dim, gws, 0); }

void fa_held(struct fq *q, struct fk_kernel *r, cl_uint dim, const size_t *gws)
{
    if (!CLSHIM_ASSERT_HELD(&q->lock)) return; /* the run is not watched: nothing is learned from it */
    if (q->ext) { /* the application's own fusion: not a run of the queue */
        fa_break(q);
        return;
    }
    run_append(q, r, dim, gws, 1);
    if (fb()->reporting && q->nheld == 1 && q->watch) q->watch->held_t0 = now_ms(); /* the clock of fa_fused */
}

static void names_joined(const char *const *names, uint32_t n, char *out, size_t len)
{
    size_t o = 0;
    out[0] = 0;
    for (uint32_t i = 0; i < n && o + 1 < len; i++) {
        int m = snprintf(out + o, len - o, "%s%s", i ? "+" : "", names[i]);
        if (m < 0) break;
        o += (size_t)m;
    }
}

static void run_names(struct fk_kernel *const *run, uint32_t n, char *out, size_t len)
{
    const char *names[FA_RUN_MAX] = {0};
    for (uint32_t i = 0; i < n; i++) names[i] = run[i]->name;
    names_joined(names, n, out, len);
}

/* How the names relate to plan sequence s: 0 unrelated, 1 equal, 2 one is
 * a prefix of the other. */
static int relation(const struct plan_seq *s, const char *const *names, uint32_t n)
{
    uint32_t m = s->n < n ? s->n : n;
    for (uint32_t i = 0; i < m; i++)
        if (strcmp(s->names[i], names[i])) return 0;
    return s->n == n ? 1 : 2;
}

/* A retired sequence is never a candidate again (fa_refused): a prefix of
 * it can be told apart from it. */
static int retired(uint32_t s) { return __atomic_load_n(&fb()->backoff[s].skip, __ATOMIC_RELAXED) == FB_BACKOFF_NEVER; }

/* Whether the names are plan sequence s, once or more, begun at another of
 * its kernels: the same loop, its period found from another place (the
 * occurrences of s not held while a measurement or a back-off lets them
 * pass), or two of its steps back to back. Two such sequences would take
 * each other's kernels and build a fused program each. */
static int rotation_of(const struct plan_seq *s, const char *const *names, uint32_t n)
{
    if (!s->n || n % s->n) return 0;
    for (uint32_t r = 0; r < s->n; r++) {
        uint32_t i = 0;
        while (i < n && !strcmp(s->names[(i + r) % s->n], names[i])) i++;
        if (i == n) return 1;
    }
    return 0;
}

/* Appends the sequence of `names` to the plan (once per process, whichever
 * queue saw it) as a window of learned sequence `root` starting at `start`
 * (root FA_NEW: a recurring run, its own root); `how` says why, for the
 * log. Returns its index, or -1 when it is not learned (it is known
 * already, one the other's prefix with a sequence that can be held, no
 * room, no memory). Under learn_lock (asserted). */
#define FA_NEW UINT32_MAX
static int learn_locked(const char *const *names, uint32_t n, uint32_t root, uint32_t start, const char *how)
{
    if (!CLSHIM_ASSERT_HELD(&learn_lock)) return -1;
    char joined[1024];
    names_joined(names, n, joined, sizeof joined);
    uint32_t ns = fb_plan_nseqs();
    for (uint32_t s = 0; s < ns; s++) {
        int rel = relation(&fb()->plan->seqs[s], names, n);
        if (rel == 1) return -1; /* another queue learned it, the user's plan has it, or it was retired */
        if (rel == 2 && !retired(s)) {
            fb_log_kind("fusion: auto: %s not learned: it and the sequence at %s are one the other's prefix", joined,
                        fb()->plan->seqs[s].where);
            return -1;
        }
        if (rotation_of(&fb()->plan->seqs[s], names, n) && !retired(s)) {
            fb_log_kind("fusion: auto: %s not learned: the sequence at %s is the same loop begun elsewhere", joined,
                        fb()->plan->seqs[s].where);
            return -1;
        }
    }
    if (ns >= fb()->plan_cap) {
        fb_log_kind("fusion: auto: %s not learned: %u sequences learned already", joined, FA_MAX_LEARNED);
        return -1;
    }
    struct plan_seq *s = &fb()->plan->seqs[ns];
    memset(s, 0, sizeof *s);
    s->names = calloc(n, sizeof *s->names);
    s->where = strdup("auto");
    int ok = s->names && s->where;
    for (uint32_t i = 0; i < n && ok; i++) ok = (s->names[i] = strdup(names[i])) != NULL;
    if (!ok) {
        for (uint32_t i = 0; s->names && i < n; i++) free(s->names[i]);
        free(s->names);
        free(s->where);
        memset(s, 0, sizeof *s);
        return -1;
    }
    s->n = n;
    origins[ns - fb()->plan_user] = (struct fa_origin){root == FA_NEW ? ns : root, start};
    __atomic_store_n(&fb()->backoff[ns].skip, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&fb()->backoff[ns].refusals, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&fb()->plan->nseqs, ns + 1, __ATOMIC_RELEASE);
    log_msg(LOG_INFO, "fusion: auto: learned %s (%s); its next occurrences are fused if proven safe", joined, how);
    return (int)ns;
}

/* Whether a fused program of kernels built from source can come about in
 * this process: clang compiles them to IR, or the cache holds fused
 * programs made elsewhere (an imported cache on a GPU machine without
 * clang). Decided once. Where neither, learning such a run would only buy
 * holds and a refused attempt: on the H200, 9 us per chain of a 30-chain
 * run (0.89x plain; the shim with fusion off 0.98x). */
int fa_sources_fusable(void)
{
    static int known = -1;
    int v = __atomic_load_n(&known, __ATOMIC_RELAXED);
    if (v >= 0) return v;
    v = clang_available() || pc_derived_any();
    if (__atomic_exchange_n(&known, v, __ATOMIC_RELAXED) < 0 && !v)
        log_msg(LOG_INFO, "fusion: auto: runs of kernels built from source are not learned: %s is not installed "
                          "(CLSHIM_CLANG) and the cache holds no fused program made elsewhere", clang_name());
    return v;
}

/* Learns the first n kernels of a run as a recurring sequence (not one of
 * kernels built from source that cannot be fused here: fa_sources_fusable;
 * the report still learns it, to say why). */
static void learn_run(const struct fq *q, struct fk_kernel *const *run, uint32_t n, const char *how)
{
    for (uint32_t i = 0; i < n && !fb()->reporting; i++)
        if (!run[i]->from_il && !fa_sources_fusable()) return;
    const char *names[FA_RUN_MAX] = {0};
    for (uint32_t i = 0; i < n; i++) names[i] = run[i]->name;
    pthread_mutex_lock(&learn_lock);
    int seq = learn_locked(names, n, FA_NEW, 0, how);
    pthread_mutex_unlock(&learn_lock);
    if (seq >= 0) fh_learned(q, (uint32_t)seq, run, n); /* whether its program pays in this run: before it is held */
}

int fa_refused(uint32_t seq)
{
    if (seq < fb()->plan_user || __atomic_load_n(&fb()->backoff[seq].fused, __ATOMIC_RELAXED)) return 0;
    pthread_mutex_lock(&learn_lock);
    const struct fa_origin o = origins[seq - fb()->plan_user];
    const struct plan_seq *root = &fb()->plan->seqs[o.root];
    uint32_t start = o.start, n = fb()->plan->seqs[seq].n;
    char refused[1024], how[1100];
    fa_seq_names(&fb()->plan->seqs[seq], refused, sizeof refused);
    snprintf(how, sizeof how, "a window of %s, which was refused", refused);
    /* Retired before a window is published: a window may be its prefix. */
    uint32_t skip = __atomic_exchange_n(&fb()->backoff[seq].skip, FB_BACKOFF_NEVER, __ATOMIC_RELAXED);
    fb_retired();
    int learned = -1;
    /* The next windows, longest first from the left, until one can be
     * learned. */
    while (learned < 0 && skip != FB_BACKOFF_NEVER) {
        if (n > 2) {
            n--;
        } else {
            start++;
            n = root->n - start;
        }
        if (n < 2) break;
        learned = learn_locked((const char *const *)root->names + start, n, o.root, start, how);
    }
    /* Without a successor it stays as it was, backing off. */
    if (learned < 0) {
        __atomic_store_n(&fb()->backoff[seq].skip, skip, __ATOMIC_RELAXED);
        fb_retired(); /* brought back: kernels decided quiet meanwhile are decided again */
    }
    pthread_mutex_unlock(&learn_lock);
    return learned >= 0;
}

void fa_first_fused(uint32_t seq)
{
    if (seq < fb()->plan_user) return;
    pthread_mutex_lock(&learn_lock);
    const struct fa_origin o = origins[seq - fb()->plan_user];
    const struct plan_seq *root = &fb()->plan->seqs[o.root];
    uint32_t start = o.start + fb()->plan->seqs[seq].n;
    if (o.root != seq && start + 2 <= root->n) {
        char fused[1024], how[1100];
        fa_seq_names(&fb()->plan->seqs[seq], fused, sizeof fused);
        snprintf(how, sizeof how, "the rest of a run after %s, which fused", fused);
        learn_locked((const char *const *)root->names + start, root->n - start, o.root, start, how);
    }
    pthread_mutex_unlock(&learn_lock);
}

/* The run's first kernel comes again without a sync: when the run so far
 * is `need` repetitions of one period (2, 3 with the report on), that
 * period is a recurring sequence, learned, and a new run starts with this
 * kernel. Otherwise the run goes on: the period may hold its first kernel
 * more than once. Only at such repeats, never per enqueue. Under q->lock
 * (asserted). */
/* Drops the repeats remembered for the report's timing. */
static void repeats_clear(struct fa_watch *w)
{
    for (uint32_t i = 0; i < FA_REPEATS; i++) {
        if (w->rep[i].ev) fb()->real->clReleaseEvent(w->rep[i].ev);
        w->rep[i] = (struct fa_rep){0, 0, NULL};
    }
}

/* The repeat remembered at run position n, or NULL. */
static const struct fa_rep *repeat_at(const struct fa_watch *w, uint32_t n)
{
    for (uint32_t i = 0; i < FA_REPEATS; i++)
        if (w->rep[i].n == n) return &w->rep[i];
    return NULL;
}

static uint64_t names_hash(struct fk_kernel *const *run, uint32_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (uint32_t i = 0; i < n; i++) {
        for (const char *c = run[i]->name; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ull;
        h = (h ^ '+') * 1099511628211ull;
    }
    return h;
}

/* Counts the `need` repetitions of a period of m kernels that the run
 * holds as occurrences, pipelined, timing the later ones: each from the
 * repeat that began it to the completion of its last kernel (the event
 * remembered at the repeat that ended it), which timed() turns into the
 * time between two completions. The first is not timed (the first launches
 * of a kernel compile it on some drivers). */
static void report_period(struct fa_watch *w, uint32_t m, uint32_t need)
{
    char names[1024];
    run_names(w->run, m, names, sizeof names);
    for (uint32_t j = 1; j <= need; j++) {
        const struct fa_rep *begin = repeat_at(w, (j - 1) * m), *end = j == need ? NULL : repeat_at(w, j * m);
        cl_event ev = j == need ? w->last : end ? end->ev : NULL;
        int timed = j > 1 && !w->held && begin && ev;
        if (ev && !w->held) fb()->real->clRetainEvent(ev);
        occurrence(w, names, 0, timed ? begin->t : 0, timed ? ev : NULL, w->dim, w->gws);
        if (!timed && ev && !w->held) mark_done(w, ev); /* the next one is timed from its end */
    }
    pthread_mutex_lock(&report_lock);
    struct fa_entry *e = entry_of(names);
    if (e) {
        e->pipelined = 1;
        e->runs += need;
    }
    pthread_mutex_unlock(&report_lock);
}

void fa_repeat(struct fq *q)
{
    if (!CLSHIM_ASSERT_HELD(&q->lock)) return; /* the run is not watched: nothing is learned from it */
    struct fa_watch *w = q->watch;
    if (drop_skipped(w)) return; /* no period in a run with a hole */
    uint32_t need = fb()->reporting ? 3 : 2, n = w->n, m = n / need;
    if (w->overflow) { /* no period within FA_RUN_MAX kernels: start afresh here */
        fa_break(q);
        return;
    }
    if (fb()->reporting) { /* where each repetition began and ended, for report_period */
        struct fa_rep *r = &w->rep[w->next_rep++ % FA_REPEATS];
        if (r->ev) fb()->real->clReleaseEvent(r->ev);
        if (w->last) fb()->real->clRetainEvent(w->last);
        *r = (struct fa_rep){n, now_ms(), w->last};
    }
    if (n % need || m < 2) return;
    for (uint32_t i = m; i < n; i++)
        if (w->run[i] != w->run[i - m] && strcmp(w->run[i]->name, w->run[i - m]->name)) return;
    /* A loop whose step is learned (and held) finds it again every `need`
     * steps: the plan is searched once per queue and step. */
    uint64_t h = names_hash(w->run, m);
    if (h != w->period_hash) learn_run(q, w->run, m, "the period of a run enqueued without syncs");
    w->period_hash = h;
    if (fb()->reporting) {
        if (!w->held) {
            report_period(w, m, need);
        } else {
            char names[1024];
            run_names(w->run, m, names, sizeof names);
            count_runs(names, need);
        }
    }
    __atomic_store_n(&w->n, 0, __ATOMIC_RELAXED);
    if (w->last) fb()->real->clReleaseEvent(w->last);
    w->last = NULL;
    repeats_clear(w);
}

void fa_forget_kernel(struct fq *q, cl_kernel k)
{
    if (!CLSHIM_ASSERT_HELD(&q->lock)) return; /* the run is not watched: nothing is learned from it */
    struct fa_watch *w = q->watch;
    if (!w) return;
    for (uint32_t i = 0; i < w->n; i++)
        if (w->run[i]->k == k) {
            __atomic_store_n(&w->n, 0, __ATOMIC_RELAXED);
            w->overflow = 0;
            if (w->last) fb()->real->clReleaseEvent(w->last);
            w->last = NULL;
            repeats_clear(w);
            return;
        }
}

void fa_break(struct fq *q)
{
    if (!CLSHIM_ASSERT_HELD(&q->lock)) return; /* the run is not watched: nothing is learned from it */
    struct fa_watch *w = q->watch;
    if (!w || !w->n) return;
    uint32_t n = w->n;
    int usable = n >= 2 && !w->overflow && !__atomic_load_n(&w->skipped, __ATOMIC_RELAXED);
    __atomic_store_n(&w->skipped, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&w->n, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&w->alone, 0, __ATOMIC_RELAXED);
    w->overflow = 0;
    cl_event last = w->last;
    w->last = NULL;
    if (fb()->reporting) repeats_clear(w);
    if (!usable) {
        if (last) fb()->real->clReleaseEvent(last);
        return;
    }
    uint64_t h = names_hash(w->run, n);
    for (uint32_t i = 0; i < FA_SEEN; i++) {
        struct fa_seen *s = &w->seen[i];
        if (s->count && s->hash == h && s->n == n) {
            /* With the report on, a third occurrence is run unfused first:
             * the first launches of a kernel compile it on some drivers. */
            if (++s->count == (fb()->reporting ? 3u : 2u)) learn_run(q, w->run, n, "ran twice back to back");
            if (fb()->reporting) { /* runs seen once are not reported: the first is counted with the second */
                char names[1024];
                run_names(w->run, n, names, sizeof names);
                count_runs(names, s->count == 2 ? 2 : 1);
                if (!w->held) { /* an unfused occurrence */
                    if (s->count == 2) occurrence(w, names, 0, 0, NULL, w->dim, w->gws);
                    occurrence(w, names, 0, w->t0, last, w->dim, w->gws);
                    last = NULL;
                }
            }
            if (last) fb()->real->clReleaseEvent(last);
            return;
        }
    }
    if (last) fb()->real->clReleaseEvent(last);
    struct fa_seen *s = &w->seen[w->next_seen++ % FA_SEEN];
    *s = (struct fa_seen){h, n, 1};
}
