/* fmode.c — the modes of a queue (struct fb_mode): how it holds kernels
 * and when it fuses them.
 *
 * The plan's mode matches each kernel against the plan's sequences: a
 * kernel that starts one (not backing off) is held with the sequences it
 * starts as candidates, each next kernel keeps the candidates it continues,
 * and a candidate completed is fused. Automatic fusion's mode is the plan's
 * on a plan that grows (fauto.c learns sequences from the runs of kernels
 * it watches). The extension API's holds every kernel between
 * clStartFusionCLSHIM and clCompleteFusionCLSHIM, which fuses them; its
 * entry points are here too.
 */
#include "fusion/batch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "CL/clshim_ext.h"
#include "common/log.h"
#include "fusion/batch_int.h"

/* ---- plan matching ------------------------------------------------------------------ */

/* Starts matching at a first kernel r: the sequences r starts (not backing
 * off) become the candidates. A kernel that starts none is remembered as
 * such with the plan's size (sequences are only ever appended), so that
 * under automatic fusion a kernel enqueued again and again compares no
 * names until the plan grows. A sequence that sits this occurrence out
 * (back-off, or the unfused half of a measurement) lets its whole
 * occurrence pass: passes() keeps its later kernels from starting a hold,
 * which, where kernel names repeat (PyOpenCL names every elementwise kernel
 * elwise_kernel), would hold the occurrence from its second kernel on and
 * fuse a rotation of the sequence: another fused program to build, and a
 * measurement that never sees its unfused occurrence. */
static int plan_start(struct fq *q, struct fk_kernel *r)
{
    q->ncand = 0;
    uint32_t nseqs = fb_plan_nseqs(), passing = 0;
    if (__atomic_load_n(&r->starts_none, __ATOMIC_RELAXED) == nseqs + 1) return 0;
    if (!q->cand && !(q->cand = malloc(fb()->plan_cap * sizeof *q->cand))) return 0;
    int starts = 0;
    for (uint32_t s = 0; s < nseqs; s++) {
        if (strcmp(fb()->plan->seqs[s].names[0], r->name)) continue;
        starts = 1;
        if (!fb_backoff_skips(s)) q->cand[q->ncand++] = s;
        else if (fb()->plan->seqs[s].n > 1 && __atomic_load_n(&fb()->backoff[s].skip, __ATOMIC_RELAXED) != FB_BACKOFF_NEVER &&
                 (!passing || fb()->plan->seqs[s].n > fb()->plan->seqs[passing - 1].n))
            passing = s + 1; /* a retired one (FB_BACKOFF_NEVER) lets its windows start anywhere in it */
    }
    if (!starts) __atomic_store_n(&r->starts_none, nseqs + 1, __ATOMIC_RELAXED);
    q->passing = q->ncand ? 0 : passing;
    q->passing_pos = 1;
    return q->ncand > 0;
}

/* Whether kernel `name` belongs to the occurrence passing unheld (plan_start). */
static int passes(struct fq *q, const char *name)
{
    const struct plan_seq *s = &fb()->plan->seqs[q->passing - 1];
    if (q->passing_pos < s->n && !strcmp(s->names[q->passing_pos], name)) {
        if (++q->passing_pos == s->n) q->passing = 0;
        return 1;
    }
    q->passing = 0;
    return 0;
}

/* Keeps the candidates whose next kernel is `name`; returns how many.
 * When none continues with `name` the candidates are left as they were:
 * the held kernels still match them until they are submitted (invariant 4). */
static uint32_t plan_filter(struct fq *q, const char *name)
{
    uint32_t m = 0;
    for (uint32_t c = 0; c < q->ncand; c++) {
        const struct plan_seq *s = &fb()->plan->seqs[q->cand[c]];
        if (s->n > q->nheld && !strcmp(s->names[q->nheld], name) &&
            !__atomic_load_n(&fb()->backoff[q->cand[c]].skip, __ATOMIC_RELAXED))
            q->cand[m++] = q->cand[c]; /* m <= c: compacting in place only moves matches */
    }
    if (m) q->ncand = m;
    return m;
}

/* The kernels the candidates expect next, "'a' or 'b'", for the log. */
static void expected_next(const struct fq *q, char *out, size_t len)
{
    size_t o = 0;
    out[0] = 0;
    for (uint32_t c = 0; c < q->ncand && o + 1 < len; c++) {
        const struct plan_seq *s = &fb()->plan->seqs[q->cand[c]];
        if (s->n <= q->nheld) continue;
        const char *next = s->names[q->nheld];
        int seen = 0;
        for (uint32_t d = 0; d < c && !seen; d++) {
            const struct plan_seq *t = &fb()->plan->seqs[q->cand[d]];
            seen = t->n > q->nheld && !strcmp(t->names[q->nheld], next);
        }
        if (seen) continue;
        int w = snprintf(out + o, len - o, "%s'%s'", o ? " or " : "", next);
        if (w < 0) break;
        o += (size_t)w;
    }
}

/* The candidate completed by the held kernels, or -1. */
static int plan_done(const struct fq *q)
{
    for (uint32_t c = 0; c < q->ncand; c++)
        if (fb()->plan->seqs[q->cand[c]].n == q->nheld) return (int)q->cand[c];
    return -1;
}

static int plan_flags(const struct plan_seq *s)
{
    return (s->force_barrier ? FB_FORCE_BARRIER : 0) | (s->internal ? FB_INTERNAL : 0) | (s->consts ? FB_CONST : 0);
}

/* Whether plan sequence s is the only one starting with its first kernel,
 * so that a kernel starting it finds no other candidate. Remembered per
 * queue until the plan grows (automatic fusion; a sequence that stops
 * being held for good only makes s more alone). Under q->lock (a replay
 * asks: not asserted, see may_replay). */
static int seq_alone(struct fq *q, uint32_t s)
{
    uint32_t nseqs = fb_plan_nseqs();
    if (s >= nseqs) return 0;
    if (q->alone_nseqs == nseqs && q->alone_seq == s) return 1;
    const char *first = fb()->plan->seqs[s].names[0];
    for (uint32_t t = 0; t < nseqs; t++) /* one never held again (FB_BACKOFF_NEVER) is no candidate */
        if (t != s && __atomic_load_n(&fb()->backoff[t].skip, __ATOMIC_RELAXED) != FB_BACKOFF_NEVER &&
            !strcmp(fb()->plan->seqs[t].names[0], first))
            return 0;
    q->alone_seq = s;
    q->alone_nseqs = nseqs;
    return 1;
}

/* ---- the plan's mode, and automatic fusion's ---------------------------------------- */

/* Whether r may be held under a plan: not when it belongs to an
 * occurrence passing unheld (plan_start). */
static int not_passing(struct fq *q, struct fk_kernel *r) { return !q->passing || q->nheld || !passes(q, r->name); }

static int plan_admit(struct fq *q, struct fk_kernel *r)
{
    return r->in_plan && fb()->plan && q->in_order && not_passing(q, r);
}

/* Under automatic fusion any kernel may start a sequence: one learned later. */
static int auto_admit(struct fq *q, struct fk_kernel *r) { return q->in_order && not_passing(q, r); }

/* The matching of a first occurrence would find the launch's sequence as
 * the only candidate — alone in starting with its first kernel, not backing
 * off — so the outcome is the same without it. */
static int plan_replays(struct fq *q, int s)
{
    if (s < 0 || !q->cand || __atomic_load_n(&fb()->backoff[s].skip, __ATOMIC_RELAXED)) return 0;
    return q->nheld || seq_alone(q, (uint32_t)s);
}

/* Does r continue (or start) a sequence? Held kernels it breaks off are submitted. */
static int plan_match(struct fq *q, struct fk_kernel *r, struct fb_pending *p)
{
    if (q->nheld && !plan_filter(q, r->name)) {
        if (log_enabled(LOG_INFO)) {
            char names[512], next[512];
            fb_names_of(q, names, sizeof names);
            expected_next(q, next, sizeof next);
            fb_log_kind("fusion: held %s submitted unfused: '%s' breaks the sequence (expected %s)", names, r->name,
                        next[0] ? next : "the sequence to end");
        }
        fb_backoff_broken(q);
        fb_submit_held(q, p);
    }
    return q->nheld || plan_start(q, r);
}

/* The kernel just held, the candidates' next (a replay's launch is the only
 * candidate): its name, for the invariant that they still match. */
static void plan_mark(struct fq *q, int seq)
{
    if (seq != FB_NO_REPEAT && q->nheld == 1) {
        q->cand[0] = (uint32_t)seq;
        q->ncand = 1;
    }
    q->held[q->nheld - 1].plan_name = fb()->plan->seqs[q->cand[0]].names[q->nheld - 1];
}

/* Fuses the held kernels when they complete a candidate. */
static void plan_complete(struct fq *q, struct fb_pending *p)
{
    int done = plan_done(q);
    if (done < 0) return;
    const struct plan_seq *s = &fb()->plan->seqs[done];
    fb_fuse_or_submit(q, plan_flags(s), s->internal_args, done, p, NULL);
}

static int plan_held(struct fq *q, struct fk_kernel *r, int seq, cl_uint dim, const size_t *gws, struct fb_pending *p)
{
    (void)r, (void)dim, (void)gws;
    plan_mark(q, seq);
    int kick = q->nheld == 1;
    plan_complete(q, p);
    return kick;
}

static int auto_held(struct fq *q, struct fk_kernel *r, int seq, cl_uint dim, const size_t *gws, struct fb_pending *p)
{
    plan_mark(q, seq);
    int kick = q->nheld == 1;
    fa_held(q, r, dim, gws);
    plan_complete(q, p);
    return kick;
}

/* A kernel that could be held extends the queue's run; anything else ends it. */
static int auto_passed(struct fq *q, struct fk_kernel *r, cl_uint dim, const size_t *gws, int task, const char *why)
{
    (void)why;
    if (task || !r || !r->origin_ok || r->svm || !q->in_order || q->off || !gws || dim < 1 || dim > 3) {
        fa_break(q);
        return 0;
    }
    fa_note(q, r, dim, gws);
    return FM_NOTED | (fb()->reporting ? FM_REPORT : 0);
}

/* The next enqueue of r here may take the fast path (fusion_enqueue_kernel)
 * when it would find what this one found: nothing held, no measurement
 * following, r alone in the run and starting no sequence. */
static void auto_forwarded(struct fq *q, struct fk_kernel *r, cl_event ev, uint32_t follow_done)
{
    if (ev) fa_note_event(q, ev);
    if (!fb()->reporting && !follow_done && !q->nheld && !q->ext && !q->fs_follow && fa_run_is(q, r) &&
        __atomic_load_n(&r->starts_none, __ATOMIC_RELAXED) == fb_plan_nseqs() + 1)
        __atomic_store_n(&q->steady, r, __ATOMIC_RELEASE);
}

static const struct fb_mode plan_mode = {
    .admit = plan_admit, .replays = plan_replays, .match = plan_match, .held = plan_held,
};

static const struct fb_mode auto_mode = {
    .arrive = fa_before_kernel, .admit = auto_admit, .replays = plan_replays, .match = plan_match,
    .held = auto_held, .passed = auto_passed, .forwarded = auto_forwarded,
};

/* ---- the extension API's mode ------------------------------------------------------------ */

static int ext_admit(struct fq *q, struct fk_kernel *r)
{
    (void)q, (void)r;
    return 1;
}

static int ext_replays(struct fq *q, int s)
{
    (void)q;
    return s == -1;
}

static int ext_held(struct fq *q, struct fk_kernel *r, int seq, cl_uint dim, const size_t *gws, struct fb_pending *p)
{
    (void)seq;
    if (fb()->automatic) fa_held(q, r, dim, gws); /* the application's own fusion: not a run of the queue */
    if (q->nheld >= PLAN_MAX_SEQ) {
        log_msg(LOG_INFO, "fusion: more than %d kernels held; fusion mode ends", PLAN_MAX_SEQ - 1);
        fb_submit_held(q, p);
        fm_end_ext(q);
    }
    return 0;
}

/* A kernel that cannot be held ends fusion mode; the queue's own mode watches it. */
static int ext_passed(struct fq *q, struct fk_kernel *r, cl_uint dim, const size_t *gws, int task, const char *why)
{
    log_msg(LOG_INFO, "fusion: fusion mode cancelled: kernel '%s' cannot be held (%s)", r && r->name ? r->name : "?",
            why ? why : "clEnqueueTask");
    fm_end_ext(q);
    const struct fb_mode *m = q->mode;
    return m->passed ? m->passed(q, r, dim, gws, task, why) : 0;
}

static const struct fb_mode ext_mode = {
    .admit = ext_admit, .replays = ext_replays, .held = ext_held, .passed = ext_passed,
};

const struct fb_mode *fm_standing(void) { return fb()->automatic ? &auto_mode : &plan_mode; }

void fm_end_ext(struct fq *q)
{
    CLSHIM_ASSERT_HELD(&q->lock); /* logged (or fatal in tests); the mode ends all the same */
    q->ext = 0;
    q->mode = fm_standing();
}

/* ---- the extension API ------------------------------------------------------------------- */

static cl_int CL_API_CALL ext_start(cl_command_queue queue)
{
    if (!queue) return CL_INVALID_COMMAND_QUEUE;
    struct fq *q = fq_get(queue, 1);
    if (!q) return CL_INVALID_COMMAND_QUEUE;
    struct fb_pending p = {0};
    cl_int rc = CL_SUCCESS;
    fq_lock(q);
    if (q->ext) {
        rc = CL_INVALID_OPERATION;
    } else if (q->in_order && !q->off) {
        if (q->nheld) fb_submit_held(q, &p); /* a plan sequence in progress */
        q->ext = 1;
        q->mode = &ext_mode;
    }
    q->ext_open = 1;
    pthread_mutex_unlock(&q->lock);
    fb_pending_flush(&p);
    return rc;
}

/* Ends the app's Start on q; nonzero when this Complete or Cancel came
 * without one and is the queue's first such (reported then, once: it is
 * harmless, but usually a missing or misplaced Start). */
static int ext_close(struct fq *q)
{
    if (!CLSHIM_ASSERT_HELD(&q->lock)) return 0;
    int report = !q->ext_open && !q->ext_warned;
    q->ext_warned |= report;
    q->ext_open = 0;
    return report;
}

static void ext_report_unopened(const char *fn)
{
    log_msg(LOG_WARN, "%s on a queue not in fusion mode (no clStartFusionCLSHIM before it): nothing to fuse; "
                      "not reported again for this queue", fn);
}

static cl_int CL_API_CALL ext_cancel(cl_command_queue queue)
{
    if (!queue) return CL_INVALID_COMMAND_QUEUE;
    struct fq *q = fq_get(queue, 1);
    if (!q) return CL_INVALID_COMMAND_QUEUE;
    struct fb_pending p = {0};
    fq_lock(q);
    if (q->ext && q->nheld) fb_submit_held(q, &p);
    fm_end_ext(q);
    int report = ext_close(q);
    pthread_mutex_unlock(&q->lock);
    fb_pending_run(&p);
    if (report) ext_report_unopened("clCancelFusionCLSHIM");
    return CL_SUCCESS;
}

static cl_int CL_API_CALL ext_query(cl_command_queue queue, cl_bool *in_fusion_mode)
{
    if (!queue) return CL_INVALID_COMMAND_QUEUE;
    if (!in_fusion_mode) return CL_INVALID_VALUE;
    struct fq *q = fq_get(queue, 1);
    if (!q) return CL_INVALID_COMMAND_QUEUE;
    /* Read under the lock: ext changes under it (an early end on another thread). */
    fq_lock(q);
    *in_fusion_mode = q->ext ? CL_TRUE : CL_FALSE;
    pthread_mutex_unlock(&q->lock);
    return CL_SUCCESS;
}

static cl_int CL_API_CALL ext_complete(cl_command_queue queue, const cl_fusion_properties_clshim *props,
                                       cl_event *event)
{
    if (!queue) return CL_INVALID_COMMAND_QUEUE;
    int flags = 0;
    const char *internal_args = NULL;
    for (size_t i = 0; props && props[i]; i += 2) {
        if (props[i] == CL_FUSION_INTERNAL_ARGS_CLSHIM) {
            internal_args = (const char *)(uintptr_t)props[i + 1];
            if (plan_internal_args_valid(internal_args) != 0) return CL_INVALID_VALUE;
            flags |= FB_INTERNAL;
            continue;
        }
        int bit = props[i] == CL_FUSION_FORCE_BARRIER_CLSHIM ? FB_FORCE_BARRIER
                : props[i] == CL_FUSION_INTERNAL_CLSHIM      ? FB_INTERNAL
                : props[i] == CL_FUSION_CONST_CLSHIM         ? FB_CONST
                                                             : 0;
        if (!bit || props[i + 1] > 1) return CL_INVALID_VALUE;
        flags = props[i + 1] ? flags | bit : flags & ~bit;
    }
    struct fq *q = fq_get(queue, 1);
    if (!q) return CL_INVALID_COMMAND_QUEUE;
    struct fb_pending p = {0};
    cl_event out = NULL;
    fq_lock(q);
    if (q->ext && q->nheld >= 2) fb_fuse_or_submit(q, flags, internal_args, -1, &p, event ? &out : NULL);
    else if (q->nheld) fb_submit_held(q, &p);
    fm_end_ext(q);
    int report = ext_close(q);
    cl_int rc = CL_SUCCESS;
    if (event && !out) rc = fb()->real->clEnqueueMarkerWithWaitList(queue, 0, NULL, &out);
    pthread_mutex_unlock(&q->lock);
    fb_pending_flush(&p);
    if (report) ext_report_unopened("clCompleteFusionCLSHIM");
    if (event) *event = out;
    return rc;
}

void *fusion_extension(const char *name)
{
    void *fn = NULL;
    if (!strcmp(name, "clStartFusionCLSHIM")) fn = (void *)ext_start;
    else if (!strcmp(name, "clCompleteFusionCLSHIM")) fn = (void *)ext_complete;
    else if (!strcmp(name, "clCancelFusionCLSHIM")) fn = (void *)ext_cancel;
    else if (!strcmp(name, "clQueryFusionCLSHIM")) fn = (void *)ext_query;
    if (!fn || !fusion_available()) return NULL; /* fusion_init() found the shim disabled */
    if (!(__atomic_fetch_or(&fusion_armed, FUSION_ARMED_EXT, __ATOMIC_ACQ_REL) & FUSION_ARMED_EXT))
        __atomic_add_fetch(&fb()->arm_gen, 1, __ATOMIC_ACQ_REL);
    return fn;
}
