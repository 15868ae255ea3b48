/* enqueue.c — the batcher's kernel enqueue: held, fused, or forwarded.
 *
 * fusion_enqueue_kernel takes the kernel's record (fkernel.c) and the
 * queue's (batch.c), then decides under the queue lock, with the queue's
 * mode (struct fb_mode: the plan's and automatic fusion's are here, the
 * extension API's in fext.c) saying which kernels are held and when they
 * are complete: the kernel is held
 * (as a replay of the queue's last fused launch, or matched and checked),
 * and fused with the kernels held before it when it completes a sequence;
 * or what is held is submitted and the kernel goes to the driver. The
 * invariants of a queue record are stated in batch.c (fq_check).
 * State changes happen under q->lock; application-visible side effects
 * (completing user events) run after it is dropped (struct fb_pending).
 */
#include "fusion/batch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "fusion/batch_int.h"

int fusion_armed = -1;
static struct fb_module module;
/* Here, where the enqueue path reads it, fb() is the instance's address. */
struct fb_module *fb(void) { return &module; }

/* Inlined into the enqueue path: the plan's hooks and the replay, which the
 * plan's mode runs for every kernel of a fused loop (bench/callgrind_chain.sh
 * counts them). */
#define HOT inline __attribute__((always_inline))

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
static inline int plan_done(const struct fq *q)
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

static HOT int plan_admit(struct fq *q, struct fk_kernel *r)
{
    return r->in_plan && fb()->plan && q->in_order && not_passing(q, r);
}

/* Under automatic fusion any kernel may start a sequence: one learned later. */
static int auto_admit(struct fq *q, struct fk_kernel *r) { return q->in_order && not_passing(q, r); }

/* The matching of a first occurrence would find the launch's sequence as
 * the only candidate — alone in starting with its first kernel, not backing
 * off — so the outcome is the same without it. */
static HOT int plan_replays(struct fq *q, int s)
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
static HOT void plan_mark(struct fq *q, int seq)
{
    if (seq != FB_NO_REPEAT && q->nheld == 1) {
        q->cand[0] = (uint32_t)seq;
        q->ncand = 1;
    }
    q->held[q->nheld - 1].plan_name = fb()->plan->seqs[q->cand[0]].names[q->nheld - 1];
}

/* Fuses the held kernels when they complete a candidate. */
static HOT void plan_complete(struct fq *q, struct fb_pending *p)
{
    int done = plan_done(q);
    if (done < 0) return;
    const struct plan_seq *s = &fb()->plan->seqs[done];
    fb_fuse_or_submit(q, plan_flags(s), s->internal_args, done, p, NULL);
}

static HOT int plan_held(struct fq *q, struct fk_kernel *r, int seq, cl_uint dim, const size_t *gws, struct fb_pending *p)
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

/* Whether r is in some plan sequence and every one is retired (learned and
 * refused for good) or rests (fb_rests), so runs with r teach the learner
 * nothing it can use; *rest_seq: 1 + the resting sequence r starts, whose
 * occurrences r's quiet enqueues count. Not quiet where r starts two
 * resting sequences, or starts one it appears in again (PyOpenCL's
 * elwise_kernel thrice: each enqueue would count an occurrence). */
static int quiet_now(const struct fk_kernel *r, uint32_t *rest_seq)
{
    int in_some = 0;
    *rest_seq = 0;
    for (uint32_t s = fb()->plan_user, n = fb_plan_nseqs(); s < n; s++) {
        const struct plan_seq *seq = &fb()->plan->seqs[s];
        uint32_t times = 0;
        for (uint32_t i = 0; i < seq->n; i++) times += !strcmp(seq->names[i], r->name);
        if (!times) continue;
        in_some = 1;
        if (__atomic_load_n(&fb()->backoff[s].skip, __ATOMIC_RELAXED) == FB_BACKOFF_NEVER) continue;
        if (!fb_rests(s)) return 0;
        if (strcmp(seq->names[0], r->name)) continue;
        if (times > 1 || *rest_seq) return 0;
        *rest_seq = s + 1;
    }
    for (uint32_t s = 0; s < fb()->plan_user; s++) /* a user's plan naming r: never quiet */
        for (uint32_t i = 0; i < fb()->plan->seqs[s].n; i++)
            if (!strcmp(fb()->plan->seqs[s].names[i], r->name)) return 0;
    return in_some;
}

/* The next enqueue of r here may take the fast path (fusion_enqueue_kernel)
 * when it would find what this one found: nothing held, no measurement
 * following, r alone in the run and starting no sequence. */
static void auto_forwarded(struct fq *q, struct fk_kernel *r, cl_event ev, uint32_t follow_done)
{
    if (ev && fb()->reporting) fa_note_event(q, ev); /* the report's clock; a retain and a release a launch */
    if (fb()->reporting || follow_done || q->nheld || q->ext || q->fs_follow) return;
    uint64_t key = fb_quiet_key();
    if (__atomic_load_n(&r->quiet_key, __ATOMIC_ACQUIRE) != key) {
        uint32_t rest_seq;
        __atomic_store_n(&r->quiet, quiet_now(r, &rest_seq), __ATOMIC_RELAXED);
        __atomic_store_n(&r->rest_seq, rest_seq, __ATOMIC_RELAXED);
        __atomic_store_n(&r->quiet_key, key, __ATOMIC_RELEASE);
    }
    if (fa_run_is(q, r) && __atomic_load_n(&r->starts_none, __ATOMIC_RELAXED) == fb_plan_nseqs() + 1)
        __atomic_store_n(&q->steady, r, __ATOMIC_RELEASE);
    /* Nothing this queue could hold or measure is under way: a quiet kernel
     * enqueued next would only be forwarded (the second fast path). */
    if (!q->passing) __atomic_store_n(&q->quiet, 1, __ATOMIC_RELEASE);
}

static const struct fb_mode plan_mode = {
    .admit = plan_admit, .replays = plan_replays, .match = plan_match, .held = plan_held,
};

static const struct fb_mode auto_mode = {
    .arrive = fa_before_kernel, .admit = auto_admit, .replays = plan_replays, .match = plan_match,
    .held = auto_held, .passed = auto_passed, .forwarded = auto_forwarded,
};

const struct fb_mode *fm_standing(void) { return fb()->automatic ? &auto_mode : &plan_mode; }

void fm_end_ext(struct fq *q)
{
    CLSHIM_ASSERT_HELD(&q->lock); /* logged (or fatal in tests); the mode ends all the same */
    q->ext = 0;
    q->mode = fm_standing();
}


/* ---- holding ---------------------------------------------------------------------- */

/* The queue's side of whether a kernel enqueue can be held (the kernel's
 * is fk_take's); why not in *why. *wg: the work-group's items, 0 without a
 * local size. */
static int can_hold(struct fq *q, struct fk_kernel *r, cl_uint dim, const size_t *gws, const size_t *lws,
                    cl_uint nw, const cl_event *wl, size_t *wg, const char **why)
{
    if (!CLSHIM_ASSERT_HELD(&q->lock)) return *why = "internal error", 0;
    if (!q->in_order || q->dead) return *why = "out-of-order queue", 0;
    if (!r->origin_ok)
        return *why = "its program was not created from source or IL while caching was on", 0;
    if (r->ctx != q->ctx) return *why = "kernel and queue contexts differ", 0;
    if (dim < 1 || dim > 3 || !gws) return *why = "invalid ND-range", 0;
    size_t n = 1;
    for (cl_uint d = 0; d < dim; d++) {
        if (!gws[d] || (lws && (!lws[d] || gws[d] % lws[d]))) return *why = "non-uniform or empty ND-range", 0;
        if (lws) n *= lws[d];
    }
    if ((nw > 0) != (wl != NULL)) return *why = "invalid wait list", 0;
    for (cl_uint i = 0; i < nw; i++)
        if (!wl[i]) return *why = "invalid wait list", 0;
    *wg = lws ? n : 0;
    return 1;
}

/* q's next held slot, the array grown as needed (cleared, but for the
 * argument arrays of slots used before); NULL when out of memory. */
static struct held *next_slot(struct fq *q)
{
    if (q->nheld == q->cap) {
        uint32_t cap = q->cap ? q->cap * 2 : 8;
        struct held *nh = realloc(q->held, cap * sizeof *nh);
        if (!nh) return NULL;
        memset(nh + q->cap, 0, (cap - q->cap) * sizeof *nh);
        q->held = nh;
        q->cap = cap;
    }
    return &q->held[q->nheld];
}

/* dst = the first dim of src's 3 sizes, `fill` for the others (all when src is NULL). */
static inline void copy_range(size_t dst[3], const size_t *src, cl_uint dim, size_t fill)
{
    dst[0] = src ? src[0] : fill;
    dst[1] = src && dim > 1 ? src[1] : fill;
    dst[2] = src && dim > 2 ? src[2] : fill;
}

/* Appends the held entry h, q's next slot, already holding the snapshot
 * of r's arguments (fk_take). 0 or -1. Under q->lock and r->lock: its only
 * caller, take, runs it after can_hold and fk_take asserted both. */
static int hold(struct fq *q, struct held *h, struct fk_kernel *r, cl_kernel k, cl_uint dim, const size_t *off,
                const size_t *gws, const size_t *lws, cl_uint nw, const cl_event *wl, cl_event *ev)
{
    h->waits = nw ? malloc(nw * sizeof *h->waits) : NULL;
    h->ev = ev ? fev_new(q, CL_COMMAND_NDRANGE_KERNEL) : NULL;
    if ((nw && !h->waits) || (ev && !h->ev)) {
        for (cl_uint i = 0; i < r->nargs; i++) fk_arg_clear(&h->args[i]);
        h->snap_id = 0;
        free(h->waits);
        h->waits = NULL;
        if (h->ev) { /* nobody has seen it: complete and drop it */
            struct fev *e = h->ev;
            cl_event ue = e->ue;
            e->held = 0;
            fb()->real->clSetUserEventStatus(ue, CL_COMPLETE);
            fev_unref(e);
            fev_unref(e);
            fb()->real->clReleaseEvent(ue);
            fb()->real->clReleaseEvent(ue);
            h->ev = NULL;
        }
        return -1;
    }
    h->nargs = r->nargs;
    h->args_gen = r->args_gen;
    h->heap_args = r->nheap > 0;
    h->k = k;
    h->rec = r;
    h->dim = dim; /* 1..3 (can_hold) */
    copy_range(h->gws, gws, dim, 1);
    copy_range(h->lws, lws, dim, 0);
    copy_range(h->off, off, dim, 0);
    h->has_lws = lws != NULL;
    h->has_off = off != NULL;
    for (cl_uint i = 0; i < nw; i++) {
        h->waits[i] = wl[i];
        fb()->real->clRetainEvent(wl[i]);
    }
    h->nwaits = nw;
    if (ev) *ev = h->ev->ue;
    __atomic_store_n(&q->nheld, q->nheld + 1, __ATOMIC_RELEASE);
    __atomic_add_fetch(&fb()->held_total, 1, __ATOMIC_RELEASE);
    return 0;
}

/* ---- back-off after refusals ----------------------------------------------------------- */

/* A refused fusion of a plan sequence is not final: the refusal may hold
 * for one occurrence only (two arguments that alias this time, a launch
 * with another local size). The sequence is instead not held for its next
 * 1, 2, 4, ... occurrences, doubling with each refusal in a row, up to
 * BACKOFF_LASTING occurrences when the refusal follows from the fused
 * program's key (the same kernels, ranges and argument classes are refused
 * again, and the memo answers that without building: a stencil that needs
 * a barrier is retried rarely, and cheaply), and up to BACKOFF_TRANSIENT
 * when it follows from the occurrence alone (its buffers): such a condition
 * that has passed is fused again soon. A fused occurrence resets it. An
 * occurrence is a kernel that could start the sequence arriving while the
 * queue holds nothing. A refusal that no occurrence can escape
 * (FB_REFUSED_ALWAYS: printf, images, no LLVM, ...) ends it: the sequence
 * is never held again in this process (BACKOFF_NEVER, which nothing lowers).
 * So does, for a learned sequence with no window left to learn, the
 * BACKOFF_RETIRE_ROW-th refusal in a row for its key: the application
 * repeats what the analysis refuses (a stencil after the kernel whose
 * output it reads), and a sequence that backs off still costs each enqueue
 * of its kernels the lock, the match and the learner (PyOpenCL on an H100:
 * about 1 us a step of two kernels, 4 %), which a retired one's kernels
 * (quiet, enqueue.c) do not. A few words per sequence (struct fb_backoff). */
#define BACKOFF_LASTING 1024u
#define BACKOFF_TRANSIENT 16u
#define BACKOFF_NEVER FB_BACKOFF_NEVER
#define BACKOFF_RETIRE_ROW 3u
_Static_assert(BACKOFF_RETIRE_ROW == 3, "the refusal line says 3 times");
/* While the capture helper makes a sequence's fused program, its
 * occurrences run unheld: only a held occurrence can look whether the
 * program is ready (its key names the ranges and arguments of every
 * kernel), and each one held costs the application the wait for its end.
 * The helper makes it when the application is idle or gone, so a look is
 * rare: one after DEFERRED_POLL_FIRST_US, then at doubling intervals up to
 * DEFERRED_POLL_MAX_US. A run that ends first ran unfused; the next one
 * finds the program in the cache. */
#define DEFERRED_POLL_FIRST_US 100000u
#define DEFERRED_POLL_MAX_US 3200000u

static uint64_t now_us(void) { return (uint64_t)(fs_now_ms() * 1e3); }

/* Whether sequence s sits out this occurrence (counting it). */
int fb_backoff_skips(uint32_t s)
{
    uint32_t left = __atomic_load_n(&fb()->backoff[s].skip, __ATOMIC_RELAXED);
    while (left && left != BACKOFF_NEVER &&
           !__atomic_compare_exchange_n(&fb()->backoff[s].skip, &left, left - 1, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        continue;
    if (!left) {
        uint64_t poll_at = __atomic_load_n(&fb()->backoff[s].poll_at_us, __ATOMIC_RELAXED);
        if (!poll_at || now_us() >= poll_at) return 0;
    }
    if (left != BACKOFF_NEVER) /* sat out, still one of the run's (flaunch.c, history) */
        __atomic_add_fetch(&fb()->backoff[s].occurrences, 1, __ATOMIC_RELAXED);
    return 1;
}

/* Sequence s's fused program is being made by the capture helper: its
 * occurrences are not held until the next look (DEFERRED_POLL_*). */
static void backoff_deferred(uint32_t s)
{
    uint32_t polls = __atomic_add_fetch(&fb()->backoff[s].polls, 1, __ATOMIC_RELAXED);
    uint64_t wait = DEFERRED_POLL_FIRST_US;
    for (uint32_t i = 1; i < polls && wait < DEFERRED_POLL_MAX_US; i++) wait *= 2;
    if (wait > DEFERRED_POLL_MAX_US) wait = DEFERRED_POLL_MAX_US;
    __atomic_store_n(&fb()->backoff[s].poll_at_us, now_us() + wait, __ATOMIC_RELAXED);
}

/* The look found an answer (a program, or a refusal): back-off by count alone. */
static void backoff_answered(uint32_t s)
{
    if (__atomic_load_n(&fb()->backoff[s].poll_at_us, __ATOMIC_RELAXED))
        __atomic_store_n(&fb()->backoff[s].poll_at_us, 0, __ATOMIC_RELAXED);
}

/* Sequence s was refused (`lasting`: FB_REFUSED_*): the occurrences it now
 * sits out, BACKOFF_NEVER for all. */
static uint32_t backoff_refused(uint32_t s, int lasting)
{
    if (lasting == FB_REFUSED_ALWAYS) {
        __atomic_store_n(&fb()->backoff[s].skip, BACKOFF_NEVER, __ATOMIC_RELAXED);
        fb_retired();
        return BACKOFF_NEVER;
    }
    uint32_t row = __atomic_add_fetch(&fb()->backoff[s].refusals, 1, __ATOMIC_RELAXED);
    if (row > 32) __atomic_store_n(&fb()->backoff[s].refusals, row = 32, __ATOMIC_RELAXED); /* never wraps */
    uint32_t max = lasting == FB_REFUSED_KEY ? BACKOFF_LASTING : BACKOFF_TRANSIENT;
    uint32_t skip = row > 31 ? max : 1u << (row - 1);
    if (skip > max) skip = max;
    uint32_t cur = __atomic_load_n(&fb()->backoff[s].skip, __ATOMIC_RELAXED);
    do
        if (cur == BACKOFF_NEVER) return cur; /* another thread's refusal ended it: it stays ended */
    while (!__atomic_compare_exchange_n(&fb()->backoff[s].skip, &cur, skip, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    if (fb_rests(s)) fb_retired(); /* it rests: its kernels may now be quiet */
    return skip;
}

/* After backoff_refused: whether learned sequence s, refused for its key
 * BACKOFF_RETIRE_ROW times in a row (and left backing off: no window
 * learned), is retired now. */
static int backoff_retires(uint32_t s, int lasting)
{
    if (!fb()->automatic || s < fb()->plan_user || lasting != FB_REFUSED_KEY ||
        __atomic_load_n(&fb()->backoff[s].refusals, __ATOMIC_RELAXED) < BACKOFF_RETIRE_ROW)
        return 0;
    uint32_t cur = __atomic_load_n(&fb()->backoff[s].skip, __ATOMIC_RELAXED);
    while (cur != BACKOFF_NEVER &&
           !__atomic_compare_exchange_n(&fb()->backoff[s].skip, &cur, BACKOFF_NEVER, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        continue;
    fb_retired(); /* its kernels may now be quiet */
    return 1;
}

void fb_backoff_skip(uint32_t s, uint32_t n)
{
    uint32_t cur = __atomic_load_n(&fb()->backoff[s].skip, __ATOMIC_RELAXED);
    while (cur != BACKOFF_NEVER &&
           !__atomic_compare_exchange_n(&fb()->backoff[s].skip, &cur, n, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        continue;
    if (cur != BACKOFF_NEVER && fb_rests(s)) fb_retired(); /* it rests: its kernels may now be quiet */
}

int fb_rest_counts(uint32_t s)
{
    if (fb_backoff_skips(s)) return 1;
    fb_retired(); /* the rest ended: its kernels are decided again, on the locked path */
    return 0;
}

/* Automatic fusion: another kernel broke the held kernels off before they
 * completed a learned candidate; holding them cost the application the
 * time they waited, for nothing. Each learned candidate backs off as after
 * a refusal that holds for one occurrence (1, 2, 4, ... up to
 * BACKOFF_TRANSIENT occurrences, reset when it fuses), so a learned
 * sequence the application does not complete where it starts stops being
 * held. A user's plan is the user's word: not backed off. Before the held
 * kernels are submitted. */
void fb_backoff_broken(const struct fq *q)
{
    if (!CLSHIM_ASSERT_HELD(&q->lock)) return;
    if (!fb()->automatic || q->ext) return;
    for (uint32_t c = 0; c < q->ncand; c++)
        if (q->cand[c] >= fb()->plan_user) backoff_refused(q->cand[c], FB_REFUSED_ONCE);
}

static void backoff_fused(uint32_t s)
{
    backoff_answered(s);
    if (__atomic_load_n(&fb()->backoff[s].refusals, __ATOMIC_RELAXED))
        __atomic_store_n(&fb()->backoff[s].refusals, 0, __ATOMIC_RELAXED);
    if (!__atomic_load_n(&fb()->backoff[s].fused, __ATOMIC_RELAXED)) { /* once: a window search goes on after it */
        __atomic_store_n(&fb()->backoff[s].fused, 1, __ATOMIC_RELAXED);
        if (fb()->automatic) fa_first_fused(s);
    }
}

/* Fuses the held kernels or, failing that, submits them (q->lock: fq_check asserts it). */
void fb_fuse_or_submit(struct fq *q, int flags, const char *internal_args, int seq, struct fb_pending *p,
                       cl_event *out)
{
    char why[600], names[512];
    names[0] = 0;
    if (fq_check(q, "fusing held kernels")) {
        fb_submit_held(q, p);
        return;
    }
    uint32_t n = q->nheld, nargs = 0;
    if (log_enabled(LOG_INFO)) { /* costly: only for the log */
        fb_names_of(q, names, sizeof names);
        for (uint32_t i = 0; i < n; i++) nargs += q->held[i].nargs;
    }
    uint32_t nparams = 0;
    struct fs_ticket tk = {0, 0};
    /* One measurement follows an occurrence on a queue at a time: windows
     * of one run complete one after the other, and a second one's
     * fs_follow_next would end the first's. */
    if (seq >= 0) __atomic_add_fetch(&fb()->backoff[seq].occurrences, 1, __ATOMIC_RELAXED);
    int way = seq >= 0 && (!q->fs_follow || q->fs_follow == (uint32_t)seq + 1) ? fs_way((uint32_t)seq, &tk) : FS_FUSE;
    if (way == FS_UNFUSED) { /* never slower: measured slower fused */
        fb_submit_held(q, p);
        return;
    }
    if (seq >= 0 && fb()->test_slowdown_us) { /* CLSHIM_FUSION_TEST_SLOWDOWN_US: tests of the never-slower rule */
        struct timespec ts = {(time_t)(fb()->test_slowdown_us / 1000000), (long)(fb()->test_slowdown_us % 1000000) * 1000};
        nanosleep(&ts, NULL);
    }
    int timed = fb()->reporting && seq >= 0; /* the report times the fused launch */
    int lasting = FB_REFUSED_ONCE;
    cl_event timing = NULL;
    if (fb_fuse_held(q, flags, internal_args, seq, p, out ? out : timed || way == FS_TIME_FUSED ? &timing : NULL,
                     &nparams, &lasting, why, sizeof why) == 0) {
        STAT_ADD(fb()->stat_fused, 1);
        STAT_ADD(fb()->stat_replaced, n);
        if (q->replayed == n) STAT_ADD(fb()->stat_replays, 1);
        if (seq >= 0) backoff_fused((uint32_t)seq);
        cl_event launch = out && *out ? *out : timing;
        if (way == FS_TIME_FUSED && launch) {
            fb()->real->clRetainEvent(launch);
            fs_time(q, (uint32_t)seq, &tk, 1, launch);
            if (tk.follow) fs_follow_next(q, (uint32_t)seq, &tk);
        }
        if (timed) {
            if (out && *out) fb()->real->clRetainEvent(timing = *out);
            fa_fused(q, seq, timing, NULL);
        } else if (timing) {
            fb()->real->clReleaseEvent(timing);
        }
        if (log_enabled(LOG_INFO)) /* no call with its variable arguments for nothing */
            fb_log_kind("fused %s into one launch (%u parameters for %u arguments)", names, (unsigned)nparams,
                        (unsigned)nargs);
        return;
    }
    if (lasting == FB_NOT_YET) { /* its back-off is set: not held until it may pay */
        fb_submit_held(q, p);
        return;
    }
    if (lasting == FB_DEFERRED) {
        /* Made off this thread: unfused, and not held until the next look. */
        if (seq >= 0) backoff_deferred((uint32_t)seq);
        fb_submit_held(q, p);
        return;
    }
    STAT_ADD(fb()->stat_refused, 1);
    if (timed) fa_fused(q, seq, NULL, why);
    if (seq >= 0) {
        backoff_answered((uint32_t)seq);
        uint32_t skip = backoff_refused((uint32_t)seq, lasting);
        int windowed = fb()->automatic && lasting != FB_REFUSED_ONCE && fa_refused((uint32_t)seq);
        int row = !windowed && skip != BACKOFF_NEVER && backoff_retires((uint32_t)seq, lasting);
        if (row) skip = BACKOFF_NEVER;
        fb_log_kind("fusion of %s (plan %s) refused: %s; submitted unfused, %s", names, fb()->plan->seqs[seq].where, why,
                    windowed ? "not tried again: a shorter window of it is learned instead"
                    : row ? "not tried again in this process: refused for its key 3 times in a row"
                    : skip == BACKOFF_NEVER ? "not tried again in this process" : "tried again after a back-off");
        if (windowed) skip = BACKOFF_NEVER;
        if (skip != BACKOFF_NEVER)
            log_msg(LOG_DEBUG, "fusion: %s (plan %s) is not held for its next %u occurrence%s", names,
                    fb()->plan->seqs[seq].where, (unsigned)skip, skip == 1 ? "" : "s");
    } else {
        log_msg(LOG_INFO, "fusion of %s refused: %s; submitted unfused", names, why);
    }
    fb_submit_held(q, p);
}

/* ---- replays ------------------------------------------------------------------------ */

/* Whether a kernel enqueue on q may be held as the next kernel of a repeat
 * of q's last fused launch (fb_repeat_seq, into *seq): every kernel held so
 * far was, and q's mode says the outcome is the same without matching
 * (fb_mode.replays). Under q->lock: not asserted here, nor in replay and
 * fb_repeat_seq, _same: a loop fusing its chain passes them for every
 * kernel, and the check would cost more than the rest of the replay. */
static int may_replay(struct fq *q, const struct fb_mode *m, cl_uint nw, const cl_event *wl, int *seq)
{
    if (nw || wl || q->replayed != q->nheld || q->dead) return 0; /* a list without a count: the driver's to refuse */
    return m->replays(q, *seq = fb_repeat_seq(q, __atomic_load_n(&module.mem_gen, __ATOMIC_ACQUIRE)));
}

/* Holds the enqueue when kernel r with this ND-range is the launch's next
 * kernel (fb_repeat_same) and its queue slot already holds the snapshot of
 * r's arguments at their present count. Then every check can_hold made of
 * it then holds now (the count changes with anything that would fail one),
 * and nothing of r is read but its count: no kernel lock. 1 when held, 0
 * with nothing changed. Under q->lock (see may_replay). */
static HOT int replay(struct fq *q, struct fk_kernel *r, cl_kernel k, cl_uint dim, const size_t *off,
                  const size_t *gws, const size_t *lws, cl_event *ev)
{
    uint64_t gen = fk_args_gen(r);
    if (dim - 1u > 2u || !gws || q->nheld == q->cap) return 0; /* what can_hold refuses, the driver answers */
    struct held *h = &q->held[q->nheld];
    if (h->snap_id != r->id || h->snap_gen != gen) return 0;
    /* Written first, compared after (in place, no copies): a slot past
     * nheld is free, and on a mismatch it is marked empty again. */
    h->rec = r;
    h->nargs = r->nargs;
    h->args_gen = gen;
    h->dim = dim;
    copy_range(h->gws, gws, dim, 1);
    copy_range(h->lws, lws, dim, 0);
    copy_range(h->off, off, dim, 0);
    h->has_lws = lws != NULL;
    h->has_off = off != NULL;
    if (!fb_repeat_same(q, h) || (ev && !(h->ev = fev_new(q, CL_COMMAND_NDRANGE_KERNEL)))) {
        h->rec = NULL;
        h->nargs = 0;
        return 0;
    }
    h->k = k;
    if (ev) *ev = h->ev->ue;
    __atomic_store_n(&q->nheld, q->nheld + 1, __ATOMIC_RELEASE);
    __atomic_add_fetch(&fb()->held_total, 1, __ATOMIC_RELEASE);
    q->replayed++;
    return 1;
}

/* ---- the kernel enqueue ---------------------------------------------------------------- */

/* What a kernel enqueue asks for beside its kernel, as the application passed it. */
struct enq {
    cl_uint dim;
    const size_t *off, *gws, *lws;
    cl_uint nw;
    const cl_event *wl;
    cl_event *ev;
    int task; /* clEnqueueTask */
};

/* The enqueue, to the driver as it came (but for held events in its wait
 * list, replaced by the real ones behind them), its event into ev. */
static cl_int forward(struct fq *q, struct fk_kernel *r, cl_kernel k, cl_uint dim, const size_t *off,
                      const size_t *gws, const size_t *lws, cl_uint nw, const cl_event *wl, cl_event *ev, int task)
{
    cl_event buf[16];
    cl_event *waits =
        wl && __atomic_load_n(&fb()->tracked_events, __ATOMIC_ACQUIRE) ? fb_subst_waits(nw, wl, buf, 16) : (cl_event *)wl;
    /* The kernel lock keeps a held kernel's submission (fb_submit_held,
     * maybe on the idle timer's thread) from changing the driver's
     * arguments under this launch. While nothing is held anywhere no such
     * submission runs, nor can start with arguments other than the
     * driver's: a kernel held later was snapshotted with the arguments it
     * has now (changing them meanwhile, on another thread, would race with
     * this launch in the plain driver as well). So the common case, a
     * kernel that is not fused, takes no lock of its own. */
    int locked = r && r->track && __atomic_load_n(&fb()->held_total, __ATOMIC_ACQUIRE);
    if (locked) pthread_mutex_lock(&r->lock);
    cl_int rc = task ? fb()->enqueue_task(q ? q->q : NULL, k, nw, waits, ev)
                     : fb()->enqueue_ndrange(q ? q->q : NULL, k, dim, off, gws, lws, nw, waits, ev);
    if (locked) pthread_mutex_unlock(&r->lock);
    if (waits != wl) fb_done_waits(nw, wl, waits, buf);
    return rc;
}

/* Submits events of other queues' held commands in the wait list (no lock held). */
static void unhold_foreign(struct fq *own, cl_uint nw, const cl_event *wl)
{
    if (!wl || !__atomic_load_n(&fb()->tracked_events, __ATOMIC_ACQUIRE)) return;
    for (cl_uint i = 0; i < nw; i++) {
        struct fev *ev = fev_find(wl[i]);
        if (ev && ev->q != own) fb_subst(own, wl[i], "a command on another queue waits for a held event");
    }
}

static cl_int enqueue_locked(struct fq *q, struct fk_kernel *r, cl_kernel k, const struct enq *e);

cl_int fusion_enqueue_kernel(cl_command_queue queue, cl_kernel k, cl_uint dim, const size_t *off, const size_t *gws,
                             const size_t *lws, cl_uint nw, const cl_event *wl, cl_event *ev, int task)
{
    struct fk_kernel *r = fk_get(k, __atomic_load_n(&fb()->arm_gen, __ATOMIC_ACQUIRE));
    struct fq *q = fq_get(queue, 1);
    if (!q) return forward(NULL, r, k, dim, off, gws, lws, nw, wl, ev, task);
    unhold_foreign(q, nw, wl);
    /* Automatic fusion's steady state: the kernel enqueued last here comes
     * again (a loop of one kernel, nothing to fuse). Its enqueue would hold
     * nothing, leave the queue's run as it is and only be forwarded, so it
     * is, without the queue lock: fq.steady says the queue is as the last
     * enqueue of r left it (anything taking the lock since cleared it), and
     * the plan has not grown a sequence that r starts since. Other threads
     * changing the queue meanwhile are concurrent with this call: it is
     * ordered before them. */
    if (r && !task && __atomic_load_n(&q->steady, __ATOMIC_ACQUIRE) == r &&
        __atomic_load_n(&r->starts_none, __ATOMIC_RELAXED) == fb_plan_nseqs() + 1 && gws && dim - 1u <= 2u) {
        fa_again(q);
        return forward(q, r, k, dim, off, gws, lws, nw, wl, ev, 0);
    }
    /* A quiet kernel: every learned sequence with it was retired (refused
     * for good: a stencil, no clang) or rests (the history deferred it for a
     * short run), so its enqueue would hold nothing and only extend the run
     * the learner watches, which learns nothing new from it. Where the
     * queue is as the last forwarded enqueue left it (fq.quiet: nothing
     * held, measured or passing), it is forwarded without the lock, and the
     * run is dropped (fa_skipped): a program whose sequences were all
     * refused pays for the lock, the match and the learner no more (PoCL:
     * about 880 instructions a launch before). A resting sequence's first
     * kernel counts its occurrence here; the one after the rest takes the
     * locked path. */
    if (r && !task && __atomic_load_n(&q->quiet, __ATOMIC_ACQUIRE) && gws && dim - 1u <= 2u &&
        __atomic_load_n(&r->quiet_key, __ATOMIC_ACQUIRE) == fb_quiet_key() && __atomic_load_n(&r->quiet, __ATOMIC_RELAXED)) {
        uint32_t rest = __atomic_load_n(&r->rest_seq, __ATOMIC_RELAXED);
        if (!rest || fb_rest_counts(rest - 1)) {
            fa_skipped(q);
            return forward(q, r, k, dim, off, gws, lws, nw, wl, ev, 0);
        }
    }
    const struct enq e = {dim, off, gws, lws, nw, wl, ev, task};
    return enqueue_locked(q, r, k, &e);
}

/* Holds kernel r on q, as q's mode m admitted it: as a replay of q's last
 * fused launch, or matched and checked. 1 when held (and fused, when it
 * completed a sequence; *kick when the idle timer is to watch q); 0 when
 * not, with *why set when it could not be. Under q->lock (enqueue_locked):
 * can_hold asserts it before a kernel is first held. */
static inline __attribute__((always_inline)) int take(struct fq *q, const struct fb_mode *m, struct fk_kernel *r, cl_kernel k, const struct enq *e,
                struct fb_pending *p, const char **why, int *kick)
{
    int seq = FB_NO_REPEAT;
    if (!may_replay(q, m, e->nw, e->wl, &seq) || !replay(q, r, k, e->dim, e->off, e->gws, e->lws, e->ev)) {
        seq = FB_NO_REPEAT;
        if (m->match && !m->match(q, r, p)) return 0;
        size_t wg = 0;
        struct held *h = NULL;
        pthread_mutex_lock(&r->lock);
        int held = can_hold(q, r, e->dim, e->gws, e->lws, e->nw, e->wl, &wg, why) &&
                   fk_take(r, q->dev, wg, h = next_slot(q), why) && h &&
                   hold(q, h, r, k, e->dim, e->off, e->gws, e->lws, e->nw, e->wl, e->ev) == 0;
        pthread_mutex_unlock(&r->lock);
        if (!held) {
            if (!*why) *why = "out of memory";
            return 0;
        }
    }
    __atomic_store_n(&q->holds, q->holds + 1, __ATOMIC_RELAXED); /* the idle timer's clock */
    if (q->nheld == 1 && __atomic_load_n(&fb()->sampling, __ATOMIC_RELAXED)) q->fs_t0 = fs_now_ms();
    *kick = m->held(q, r, seq, e->dim, e->gws, p);
    return 1;
}

/* Kernel r is not held (`why` it could not be, NULL when q's mode did not
 * admit it): what q holds is submitted before it, and it goes to the
 * driver, watched by q's mode. Under q->lock, taken just before by
 * enqueue_locked: not asserted, this is the plain forwarded enqueue's path. */
static inline __attribute__((always_inline)) cl_int pass(struct fq *q, struct fk_kernel *r, cl_kernel k, const struct enq *e, const char *why,
                   struct fb_pending *p)
{
    if (q->nheld) {
        char names[512];
        fb_names_of(q, names, sizeof names);
        fb_log_kind("fusion: held %s submitted unfused: '%s' cannot be held (%s)", names,
                    r && r->name ? r->name : "?", why ? why : e->task ? "clEnqueueTask" : "not in the sequence");
        fb_backoff_broken(q);
        fb_submit_held(q, p);
    }
    const struct fb_mode *m = q->mode; /* submitting may have ended the extension API's */
    int watch = m->passed ? m->passed(q, r, e->dim, e->gws, e->task, why) : 0;
    /* Never slower: the unfused occurrence of a measurement, timed as it passes. */
    uint32_t follow_done = q->fs_follow && r && r->name ? fs_follow(q, r->name) : 0;
    if (!watch && !follow_done)
        return forward(q, r, k, e->dim, e->off, e->gws, e->lws, e->nw, e->wl, e->ev, e->task);
    cl_event timing = NULL; /* the report times the run through its last kernel's event */
    cl_int rc = forward(q, r, k, e->dim, e->off, e->gws, e->lws, e->nw, e->wl,
                        ((watch & FM_REPORT) || follow_done) && !e->ev ? &timing : e->ev, e->task);
    cl_event last = rc != CL_SUCCESS ? NULL : timing ? timing : e->ev ? *e->ev : NULL;
    if (follow_done && last) {
        fb()->real->clRetainEvent(last);
        fs_time(q, follow_done - 1, &q->fs_tk, 0, last);
    }
    if (watch & FM_NOTED) q->mode->forwarded(q, r, watch & FM_REPORT ? last : NULL, follow_done);
    if (timing) fb()->real->clReleaseEvent(timing);
    return rc;
}

/* Mode m's decision on kernel r, under q's lock: held (and fused when it
 * completes a sequence) or passed to the driver. Inlined with m a constant
 * where the caller knows the mode, so its hooks are direct calls. */
static inline __attribute__((always_inline)) cl_int decide(struct fq *q, const struct fb_mode *m, struct fk_kernel *r,
                                                          cl_kernel k, const struct enq *e, struct fb_pending *p,
                                                          int *kick)
{
    const char *why = NULL;
    if (m->arrive) m->arrive(q, r);
    if (e->task || !r || q->off || !m->admit(q, r) || !take(q, m, r, k, e, p, &why, kick))
        return pass(q, r, k, e, why, p);
    return CL_SUCCESS;
}

/* The enqueue under q's lock: held, fused, or forwarded and watched. Not
 * inlined: the fast path above pays no stack frame of its own. */
__attribute__((noinline)) static cl_int enqueue_locked(struct fq *q, struct fk_kernel *r, cl_kernel k,
                                                       const struct enq *e)
{
    struct fb_pending p = {0};
    int kick = 0;
    fq_lock(q);
    const struct fb_mode *m = q->mode;
    if (!q->nheld) q->replayed = 0;
    /* The plan's mode, the common one, by name: its hooks inline here. */
    cl_int rc = m == &plan_mode ? decide(q, &plan_mode, r, k, e, &p, &kick) : decide(q, m, r, k, e, &p, &kick);
    kick &= q->nheld > 0; /* still held: the sequence did not complete */
    pthread_mutex_unlock(&q->lock);
    fb_pending_flush(&p);
    if (kick) fi_kick();
    return rc;
}
