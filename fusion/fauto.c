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
 * sub-buffers, SVM, overlapping host memory, ...) marks it failed for the
 * process, with one log line naming the reason.
 *
 * Cost on the enqueue path: one store into the queue record, under the
 * queue's own lock that the batcher takes anyway. The work of comparing
 * and learning is done when a run ends, which is at another command.
 *
 * A learned sequence must not repeat another or be a prefix of one (the
 * batcher could not tell where it ends, plan.h): such runs are not learned.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "fusion/batch.h"
#include "fusion/batch_int.h"

#define FA_MAX_LEARNED 256 /* learned sequences per process */
#define FA_RUN_MAX 32      /* kernels of a run that can be learned (longer runs are not) */
#define FA_SEEN 16         /* distinct runs remembered per queue */

int fb_auto;
uint32_t fb_plan_cap;
int fb_kernel_gen;

struct fa_seen {
    uint64_t hash;  /* of the kernel names, in order */
    uint32_t n;     /* kernels */
    uint32_t count; /* times the run ended so */
};

struct fa_watch {
    struct fk_kernel *run[FA_RUN_MAX];
    uint32_t n;    /* kernels in the run (atomic: read without the lock by fa_running) */
    int overflow;  /* the run had more than FA_RUN_MAX kernels */
    int gen;       /* fb_kernel_gen when the run started: a change means a record in it may be freed */
    struct fa_seen seen[FA_SEEN];
    uint32_t next_seen;
};

static pthread_mutex_t learn_lock = PTHREAD_MUTEX_INITIALIZER;

int fa_init(struct fusion_plan **plan)
{
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

void fa_before_kernel(struct fq *q, const struct fk_kernel *r)
{
    const struct fa_watch *w = q->watch;
    if (w && w->n && w->run[0] == r) fa_break(q);
}

void fa_note(struct fq *q, struct fk_kernel *r)
{
    struct fa_watch *w = q->watch;
    if (!w) {
        if (!(w = calloc(1, sizeof *w))) return;
        __atomic_store_n(&q->watch, w, __ATOMIC_RELEASE);
    }
    if (!w->n) w->gen = __atomic_load_n(&fb_kernel_gen, __ATOMIC_ACQUIRE);
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
    __atomic_store_n(&fb_seq_failed[ns], 0, __ATOMIC_RELAXED);
    __atomic_store_n(&fb_plan->nseqs, ns + 1, __ATOMIC_RELEASE);
    log_msg(LOG_INFO, "fusion: auto: learned %s (ran twice back to back); its next occurrences are fused if proven safe",
            names);
out:
    pthread_mutex_unlock(&learn_lock);
}

void fa_break(struct fq *q)
{
    struct fa_watch *w = q->watch;
    if (!w || !w->n) return;
    uint32_t n = w->n;
    int usable = n >= 2 && !w->overflow && w->gen == __atomic_load_n(&fb_kernel_gen, __ATOMIC_ACQUIRE);
    __atomic_store_n(&w->n, 0, __ATOMIC_RELAXED);
    w->overflow = 0;
    if (!usable) return;
    uint64_t h = 1469598103934665603ull;
    for (uint32_t i = 0; i < n; i++) {
        for (const char *c = w->run[i]->name; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ull;
        h = (h ^ '+') * 1099511628211ull;
    }
    for (uint32_t i = 0; i < FA_SEEN; i++) {
        struct fa_seen *s = &w->seen[i];
        if (s->count && s->hash == h && s->n == n) {
            if (++s->count == 2) learn(w->run, n);
            return;
        }
    }
    struct fa_seen *s = &w->seen[w->next_seen++ % FA_SEEN];
    *s = (struct fa_seen){h, n, 1};
}
