/* batch.c — the per-queue state machine (see batch.h for the design).
 *
 * Invariants of a queue record (checked by fq_check() before held kernels
 * are submitted or fused; a broken one aborts under CLSHIM_STRICT, else
 * turns fusion off for the queue):
 *   1. nheld > 0 only on an in-order, live queue;
 *   2. held entries are in enqueue order, each with a complete snapshot
 *      (rec->nargs arguments) and retained wait events; the kernel is not
 *      retained: clReleaseKernel submits the held kernels that use it
 *      before the driver sees the release (fusion_release_kernel), and a
 *      retain per held kernel costs a driver lock on the launch path;
 *   3. every held entry's event, if any, has ev->held == 1 and ev->q == q;
 *      once submitted, ev->held == 0 and ev->real is set (or its user event
 *      was failed), and it is never held again;
 *   4. in plan mode (ext == 0), the held kernels' names are a prefix
 *      of every candidate sequence in cand[0..ncand), and ncand > 0;
 *   5. fb_held_total is the sum of nheld over all queues.
 * State changes happen under q->lock; application-visible side effects
 * (completing user events) run after it is dropped (struct fb_pending).
 */
#include "fusion/batch.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "CL/clshim_ext.h"
#include "cache/key.h"
#include "program/origin.h"
#include "common/config.h"
#include "common/log.h"
#include "common/objmap.h"
#include "fusion/batch_int.h"

const struct cl_api *fb_real;
struct fusion_plan *fb_plan;
struct fb_backoff *fb_backoff;
int fb_held_total;
int fb_mem_gen;
uint64_t fb_stat_fused, fb_stat_replaced, fb_stat_unfused, fb_stat_refused, fb_stat_replays;
int fusion_armed = -1;
static unsigned fb_test_slowdown_us; /* CLSHIM_FUSION_TEST_SLOWDOWN_US */

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static int init_enabled;
static objmap *queues;
static struct fq *all_queues; /* every record ever made, pushed lock-free, never freed */
static pthread_mutex_t create_lock = PTHREAD_MUTEX_INITIALIZER;

#define STAT_ADD(v, n) __atomic_add_fetch(&(v), (n), __ATOMIC_RELAXED)

/* Takes q's lock. Whoever takes it may change what an enqueue would do
 * there: the fast path of automatic fusion's steady state (fq.steady) ends
 * until an enqueue finds it again. */
static void fq_lock(struct fq *q)
{
    pthread_mutex_lock(&q->lock);
    __atomic_store_n(&q->steady, NULL, __ATOMIC_RELAXED);
}

/* The first broken invariant of q (see the top of this file), or NULL.
 * Cheap: run before every submission or fusion of held kernels, never on
 * the path of a kernel that is only held. Caller holds q->lock. */
static const char *fq_broken(const struct fq *q)
{
    if (q->nheld && (!q->in_order || q->dead)) return "kernels held on an out-of-order or destroyed queue";
    for (uint32_t i = 0; i < q->nheld; i++) {
        const struct held *h = &q->held[i];
        if (!h->k || !h->rec || (h->nargs && !h->args) || h->nargs != h->rec->nargs)
            return "a held kernel without its argument snapshot";
        if (h->ev && (h->ev->held != 1 || h->ev->q != q)) return "a held event not marked held on its queue";
    }
    if (!q->ext && q->nheld) {
        if (!q->ncand) return "held kernels matching no plan sequence";
        for (uint32_t c = 0; c < q->ncand; c++) {
            const struct plan_seq *s = &fb_plan->seqs[q->cand[c]];
            if (s->n < q->nheld) return "more kernels held than a candidate sequence has";
            for (uint32_t i = 0; i < q->nheld; i++) /* the same string, mostly the same pointer */
                if (s->names[i] != q->held[i].plan_name && strcmp(s->names[i], q->held[i].rec->name))
                    return "held kernels not a prefix of a candidate";
        }
    }
    return NULL;
}

/* A broken invariant is a clshim bug. Under CLSHIM_STRICT (tests, debugging)
 * it aborts, where it is found; otherwise fusion is turned off for the
 * queue, one line is logged, and the caller submits what is held unfused,
 * so the application goes on with plain results. Caller holds q->lock.
 * Returns 1 when an invariant was broken. */
int fq_check(struct fq *q, const char *where)
{
    const char *broken = fq_broken(q);
    if (!broken) return 0;
    if (config_get()->strict) {
        log_msg(LOG_ERROR, "fusion: internal error in %s: %s; aborting (CLSHIM_STRICT=1)", where, broken);
        abort();
    }
    log_msg(LOG_ERROR, "fusion: internal error in %s: %s; held kernels submitted unfused, fusion off for this queue",
            where, broken);
    q->off = 1;
    q->ext = 0;
    return 1;
}

/* ---- log lines, one per kind ---------------------------------------------------- */

/* A loop that fuses (or cancels) the same way each iteration would log a
 * line per iteration: each distinct line is logged once at info level, its
 * repeats at debug level, and the exit summary says how often it recurred. */
#define LOG_KINDS 256
static struct log_kind {
    uint64_t hash;
    uint64_t again;
    char *text;
} log_kinds[LOG_KINDS];
static uint32_t log_nkinds;
static pthread_mutex_t log_kinds_lock = PTHREAD_MUTEX_INITIALIZER;

void fb_log_kind(const char *fmt, ...)
{
    if (!log_enabled(LOG_INFO)) return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    uint64_t h = 1469598103934665603ull;
    for (const char *c = line; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ull;
    int repeat = 0;
    pthread_mutex_lock(&log_kinds_lock);
    for (uint32_t i = 0; i < log_nkinds && !repeat; i++)
        if (log_kinds[i].hash == h && !strcmp(log_kinds[i].text, line)) repeat = 1, log_kinds[i].again++;
    if (!repeat && log_nkinds < LOG_KINDS && (log_kinds[log_nkinds].text = strdup(line)))
        log_kinds[log_nkinds++].hash = h;
    pthread_mutex_unlock(&log_kinds_lock);
    log_msg(repeat ? LOG_DEBUG : LOG_INFO, "%s", line);
}

static void log_kinds_summary(void)
{
    pthread_mutex_lock(&log_kinds_lock);
    for (uint32_t i = 0; i < log_nkinds; i++)
        if (log_kinds[i].again)
            log_msg(LOG_INFO, "fusion: again %llu times: %s", (unsigned long long)log_kinds[i].again,
                    log_kinds[i].text);
    pthread_mutex_unlock(&log_kinds_lock);
}

/* ---- start-up and exit ------------------------------------------------------ */

static void at_exit(void)
{
    fi_stop();
    for (struct fq *q = __atomic_load_n(&all_queues, __ATOMIC_ACQUIRE); q; q = q->next_all)
        if (__atomic_load_n(&q->nheld, __ATOMIC_ACQUIRE)) {
            fb_cancel(q, "process exit");
            fb_real->clFlush(q->q);
        }
    const struct clshim_config *cfg = config_get();
    if (__atomic_load_n(&fusion_armed, __ATOMIC_RELAXED) <= 0) return; /* no plan, no extension use */
    fa_write_report();
    if (!cfg->stats && !log_enabled(LOG_INFO)) return;
    log_kinds_summary();
    if (!log_enabled(LOG_INFO)) log_set_level(LOG_INFO); /* CLSHIM_STATS below level info */
    log_msg(LOG_INFO,
            "fusion summary: %llu fused launches replaced %llu kernel launches; %llu held kernels submitted "
            "unfused; %llu fusions refused; %llu replays",
            (unsigned long long)fb_stat_fused, (unsigned long long)fb_stat_replaced,
            (unsigned long long)fb_stat_unfused, (unsigned long long)fb_stat_refused,
            (unsigned long long)fb_stat_replays);
}

static void do_init(void)
{
    int armed = 0;
    if (init_enabled && (queues = objmap_new())) {
        const struct clshim_config *cfg = config_get();
        char err[1024];
        struct fusion_plan *plan = NULL;
        int rc = plan_load(cfg->fusion_plan, cfg->fuse, &plan, err, sizeof err);
        int automatic = !strcmp(cfg->fusion, "auto");
        if (rc) {
            log_msg(LOG_WARN, "invalid fusion plan: %s; fusion is off", err);
        } else if ((plan && plan->nseqs) || automatic) {
            /* The program layer knows the kernels' source or IL whenever
             * clshim is enabled, also with CLSHIM_CACHE=0. */
            fb_plan_cap = fb_plan_user = plan ? plan->nseqs : 0;
            if ((automatic && fa_init(&plan) != 0) || !(fb_backoff = calloc(fb_plan_cap, sizeof *fb_backoff))) {
                plan_free(plan);
                log_msg(LOG_WARN, "fusion: out of memory at start-up; fusion is off");
            } else {
                fb_plan = plan;
                fb_auto = automatic;
                fb_test_slowdown_us = (unsigned)cfg->fusion_test_slowdown_us;
                armed = (plan->nseqs ? FUSION_ARMED_PLAN : 0) | (automatic ? FUSION_ARMED_AUTO : 0);
                if (plan->nseqs)
                    log_msg(LOG_INFO, "fusion plan: %u sequence%s", (unsigned)plan->nseqs,
                            plan->nseqs == 1 ? "" : "s");
                if (automatic) log_msg(LOG_INFO, "fusion: automatic (CLSHIM_FUSION=auto)");
            }
        } else {
            plan_free(plan);
        }
        atexit(at_exit);
    }
    __atomic_store_n(&fb_arm_gen, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&fusion_armed, armed, __ATOMIC_RELEASE);
}

int fusion_init(const struct cl_api *real, int enabled)
{
    if (__atomic_load_n(&fusion_armed, __ATOMIC_ACQUIRE) < 0) {
        pthread_mutex_lock(&create_lock);
        if (!fb_real) {
            fb_real = real;
            init_enabled = enabled;
        }
        pthread_mutex_unlock(&create_lock);
        pthread_once(&init_once, do_init);
    }
    return __atomic_load_n(&fusion_armed, __ATOMIC_ACQUIRE);
}

int fusion_wants_arg_info(cl_program prog)
{
    int armed = __atomic_load_n(&fusion_armed, __ATOMIC_ACQUIRE);
    if (armed <= 0) return 0;
    if (armed & (FUSION_ARMED_EXT | FUSION_ARMED_AUTO)) return 1;
    enum key_kind kind;
    void *input;
    size_t len;
    if (pc_program_input(prog, &kind, &input, &len) != 0) return 0; /* untracked: its kernels are never held */
    int named = plan_names_in_program(fb_plan, input, len, kind == KEY_IL);
    free(input);
    return named;
}

/* ---- queue records ------------------------------------------------------------ */

struct fq *fb_queues(void) { return __atomic_load_n(&all_queues, __ATOMIC_ACQUIRE); }

static struct fq *fq_get(cl_command_queue q, int create)
{
    /* Records are never freed, so the thread's last one can be checked
     * without a lock: a fused sequence makes several calls on one queue. */
    static __thread struct fq *last;
    struct fq *r = last;
    if (r && r->q == q && !__atomic_load_n(&r->dead, __ATOMIC_ACQUIRE)) return r;
    if (!queues || !q) return NULL;
    r = objmap_get(queues, q);
    if (r) last = r;
    if (r || !create) return r;
    cl_command_queue_properties props = 0;
    cl_context ctx = NULL;
    cl_device_id dev = NULL;
    if (fb_real->clGetCommandQueueInfo(q, CL_QUEUE_PROPERTIES, sizeof props, &props, NULL) != CL_SUCCESS ||
        fb_real->clGetCommandQueueInfo(q, CL_QUEUE_CONTEXT, sizeof ctx, &ctx, NULL) != CL_SUCCESS ||
        fb_real->clGetCommandQueueInfo(q, CL_QUEUE_DEVICE, sizeof dev, &dev, NULL) != CL_SUCCESS)
        return NULL;
    pthread_mutex_lock(&create_lock);
    r = objmap_get(queues, q);
    if (!r && (r = calloc(1, sizeof *r))) {
        pthread_mutex_init(&r->lock, NULL);
        r->q = q;
        r->ctx = ctx;
        r->dev = dev;
        r->in_order = !(props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE);
        if (objmap_put(queues, q, r) != 0) {
            pthread_mutex_destroy(&r->lock);
            free(r);
            r = NULL;
        } else {
            r->next_all = all_queues;
            __atomic_store_n(&all_queues, r, __ATOMIC_RELEASE);
        }
    }
    pthread_mutex_unlock(&create_lock);
    if (r && !r->in_order) LOG_ONCE(LOG_INFO, "fusion: out-of-order queues are never fused");
    return r;
}

void fusion_queue_created(cl_command_queue q)
{
    if (!queues || !q) return;
    pthread_mutex_lock(&create_lock);
    struct fq *stale = objmap_get(queues, q);
    if (stale) { /* its queue was destroyed with the driver's references outstanding */
        objmap_remove(queues, q);
        __atomic_store_n(&stale->dead, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&create_lock);
    if (stale) log_msg(LOG_DEBUG, "fusion: a new queue has the handle of a destroyed one; its record is dropped");
    fq_get(q, 1);
}

/* Before the record of k is freed: no queue's run of kernels may keep it. */
static void unwatch_kernel(cl_kernel k)
{
    if (!fb_auto) return;
    for (struct fq *q = __atomic_load_n(&all_queues, __ATOMIC_ACQUIRE); q; q = q->next_all) {
        if (!fa_running(q)) continue;
        fq_lock(q);
        fa_forget_kernel(q, k);
        pthread_mutex_unlock(&q->lock);
    }
}

void fusion_kernels_created(const cl_kernel *kernels, cl_uint n)
{
    for (cl_uint i = 0; i < n; i++)
        if (kernels[i]) {
            unwatch_kernel(kernels[i]);
            fk_forget(kernels[i]);
        }
}

void fusion_release_queue(cl_command_queue q)
{
    struct fq *r = fq_get(q, 0);
    if (!r) return;
    struct fb_pending p = {0};
    cl_uint refs = 0;
    fq_lock(r);
    if (r->nheld) fb_submit_held(r, &p);
    fa_break(r);
    r->ext = 0;
    if (fb_real->clGetCommandQueueInfo(q, CL_QUEUE_REFERENCE_COUNT, sizeof refs, &refs, NULL) == CL_SUCCESS &&
        refs == 1) {
        objmap_remove(queues, q);
        __atomic_store_n(&r->dead, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&r->lock);
    fb_pending_run(&p);
}

/* ---- submitting held kernels ---------------------------------------------------- */

void fb_held_clear(struct held *h)
{
    if (h->waits) {
        for (cl_uint i = 0; i < h->nwaits; i++) fb_real->clReleaseEvent(h->waits[i]);
        free(h->waits);
    }
    if (h->heap_args) fk_args_release(h->args, h->nargs); /* the slot's next snapshot overwrites every entry */
    /* hold() sets every other field; these mark the slot empty. */
    h->k = NULL;
    h->rec = NULL;
    h->plan_name = NULL;
    h->nargs = 0;
    h->heap_args = 0;
    h->waits = NULL;
    h->nwaits = 0;
    h->ev = NULL;
}

/* A wait list with our user events replaced by the real events behind
 * them, each retained (a held command's wait list is held by clshim alone:
 * a completion callback may drop the record's real event at any time);
 * done_waits releases them. */
static cl_event *subst_waits(cl_uint n, const cl_event *wl, cl_event *buf, size_t buf_len)
{
    if (!n) return NULL;
    cl_event *out = n <= buf_len ? buf : malloc(n * sizeof *out);
    if (!out) return (cl_event *)wl;
    for (cl_uint i = 0; i < n; i++) {
        struct fev_look v;
        fev_look(wl[i], &v);
        out[i] = v.real ? v.real : wl[i];
    }
    return out;
}

static void done_waits(cl_uint n, const cl_event *wl, cl_event *waits, cl_event *buf)
{
    if (!waits || waits == wl) return;
    for (cl_uint i = 0; i < n; i++)
        if (waits[i] != wl[i]) fb_real->clReleaseEvent(waits[i]);
    if (waits != buf) free(waits);
}

void fb_submit_held(struct fq *q, struct fb_pending *p)
{
    fq_check(q, "submitting held kernels");
    uint32_t n = q->nheld;
    for (uint32_t i = 0; i < n; i++) {
        struct held *h = &q->held[i];
        if (!h->k || !h->rec || (h->nargs && !h->args)) { /* only after a broken invariant (logged) */
            if (h->ev) {
                h->ev->held = 0;
                fb_pending_add(p, h->ev, NULL, CL_OUT_OF_RESOURCES);
            }
            fb_held_clear(h);
            continue;
        }
        cl_event buf[16], rev = NULL;
        cl_event *waits = subst_waits(h->nwaits, h->waits, buf, 16);
        pthread_mutex_lock(&h->rec->lock);
        cl_int rc = fk_apply(h->rec, h->args, 0);
        if (rc == CL_SUCCESS)
            rc = fb_real->clEnqueueNDRangeKernel(q->q, h->k, h->dim, h->has_off ? h->off : NULL, h->gws,
                                                 h->has_lws ? h->lws : NULL, h->nwaits, waits,
                                                 h->ev ? &rev : NULL);
        fk_apply(h->rec, h->args, 1);
        pthread_mutex_unlock(&h->rec->lock);
        done_waits(h->nwaits, h->waits, waits, buf);
        if (rc != CL_SUCCESS)
            log_msg(LOG_WARN, "fusion: held kernel '%s' failed when submitted (error %d); its event reports it",
                    h->rec->name, rc);
        if (h->ev) {
            if (rc == CL_SUCCESS) __atomic_store_n(&h->ev->real, rev, __ATOMIC_RELEASE);
            h->ev->held = 0;
            fb_pending_add(p, h->ev, rc == CL_SUCCESS ? rev : NULL, rc);
        }
        fb_held_clear(h);
    }
    __atomic_store_n(&q->nheld, 0, __ATOMIC_RELEASE); /* read unlocked by cancel_where */
    q->ncand = 0;
    __atomic_sub_fetch(&fb_held_total, (int)n, __ATOMIC_RELEASE);
    STAT_ADD(fb_stat_unfused, n);
}

static void names_of(const struct fq *q, char *out, size_t len)
{
    size_t o = 0;
    out[0] = 0;
    for (uint32_t i = 0; i < q->nheld && o + 1 < len; i++) {
        int m = snprintf(out + o, len - o, "%s%s", i ? "+" : "", q->held[i].rec->name);
        if (m < 0) break;
        o += (size_t)m;
    }
}

int fb_submit_idle(struct fq *q, uint32_t holds, unsigned period_ms)
{
    struct fb_pending p = {0};
    int idle = 0;
    if (pthread_mutex_trylock(&q->lock) != 0) return 0; /* someone works on the queue (fusing it): not idle */
    __atomic_store_n(&q->steady, NULL, __ATOMIC_RELAXED); /* as fq_lock */
    if (q->nheld && !q->ext && q->holds == holds) { /* nothing held since the timer looked */
        idle = 1;
        if (log_enabled(LOG_INFO)) {
            char names[512];
            names_of(q, names, sizeof names);
            fb_log_kind("fusion: held %s submitted unfused: nothing enqueued on its queue for %u ms "
                        "(CLSHIM_FUSION_HOLD_MS)", names, period_ms);
        }
        fb_submit_held(q, &p);
        if (fb_auto) fa_break(q);
    }
    pthread_mutex_unlock(&q->lock);
    fb_pending_run(&p);
    return idle;
}

void fb_cancel(struct fq *q, const char *why)
{
    struct fb_pending p = {0};
    fq_lock(q);
    if (q->nheld) {
        if (log_enabled(LOG_INFO)) {
            char names[512];
            names_of(q, names, sizeof names);
            fb_log_kind("fusion: held %s submitted unfused: %s", names, why);
        }
        fb_submit_held(q, &p);
    }
    if (q->ext) log_msg(LOG_INFO, "fusion: fusion mode cancelled on a queue: %s", why);
    q->ext = 0;
    pthread_mutex_unlock(&q->lock);
    fb_pending_run(&p);
}

/* ---- holding ---------------------------------------------------------------------- */

/* Whether a kernel enqueue can be held; why not in *why. Caller holds q->lock. */
static int can_hold(struct fq *q, struct fk_kernel *r, cl_uint dim, const size_t *gws, const size_t *lws,
                    cl_uint nw, const cl_event *wl, const char **why)
{
    if (!q->in_order || q->dead) return *why = "out-of-order queue", 0;
    if (!r) return *why = "unknown kernel", 0;
    if (!r->origin_ok)
        return *why = "its program was not created from source or IL while caching was on", 0;
    if (r->ctx != q->ctx) return *why = "kernel and queue contexts differ", 0;
    if (dim < 1 || dim > 3 || !gws) return *why = "invalid ND-range", 0;
    size_t wg = 1;
    for (cl_uint d = 0; d < dim; d++) {
        if (!gws[d] || (lws && (!lws[d] || gws[d] % lws[d]))) return *why = "non-uniform or empty ND-range", 0;
        if (lws) wg *= lws[d];
    }
    if ((nw > 0) != (wl != NULL)) return *why = "invalid wait list", 0;
    for (cl_uint i = 0; i < nw; i++)
        if (!wl[i]) return *why = "invalid wait list", 0;
    if (lws) {
        size_t max = fk_wg_max(r, q->dev);
        if (!max || wg > max) return *why = "work-group size above the kernel's limit", 0;
    }
    if (!fk_complete(r)) return *why = r->svm ? "SVM arguments" : "arguments set before fusion was armed", 0;
    return 1;
}

/* dst = the first dim of src's 3 sizes, `fill` for the others (all when src is NULL). */
static inline void copy_range(size_t dst[3], const size_t *src, cl_uint dim, size_t fill)
{
    dst[0] = src ? src[0] : fill;
    dst[1] = src && dim > 1 ? src[1] : fill;
    dst[2] = src && dim > 2 ? src[2] : fill;
}

/* Appends a held entry; caller holds q->lock and r->lock. 0 or -1. */
static int hold(struct fq *q, struct fk_kernel *r, cl_kernel k, cl_uint dim, const size_t *off, const size_t *gws,
                const size_t *lws, cl_uint nw, const cl_event *wl, cl_event *ev)
{
    if (q->nheld == q->cap) {
        uint32_t cap = q->cap ? q->cap * 2 : 8;
        struct held *nh = realloc(q->held, cap * sizeof *nh);
        if (!nh) return -1;
        memset(nh + q->cap, 0, (cap - q->cap) * sizeof *nh);
        q->held = nh;
        q->cap = cap;
    }
    struct held *h = &q->held[q->nheld]; /* cleared, but for its argument array */
    int copied = 1;
    /* A loop holding the same kernels with the same arguments finds each
     * slot's array already holding the snapshot: no copy. */
    if (h->snap_id != r->id || h->snap_gen != r->args_gen || r->nheap) {
        copied = fk_snapshot_into(r, &h->args, &h->args_cap) == 0;
        h->snap_id = copied && !r->nheap ? r->id : 0;
        h->snap_gen = r->args_gen;
    }
    h->waits = nw ? malloc(nw * sizeof *h->waits) : NULL;
    h->ev = ev ? fev_new(q, CL_COMMAND_NDRANGE_KERNEL) : NULL;
    if (!copied || (nw && !h->waits) || (ev && !h->ev)) {
        if (copied)
            for (cl_uint i = 0; i < r->nargs; i++) fk_arg_clear(&h->args[i]);
        h->snap_id = 0;
        free(h->waits);
        h->waits = NULL;
        if (h->ev) { /* nobody has seen it: complete and drop it */
            struct fev *e = h->ev;
            cl_event ue = e->ue;
            e->held = 0;
            fb_real->clSetUserEventStatus(ue, CL_COMPLETE);
            fev_unref(e);
            fev_unref(e);
            fb_real->clReleaseEvent(ue);
            fb_real->clReleaseEvent(ue);
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
        fb_real->clRetainEvent(wl[i]);
    }
    h->nwaits = nw;
    if (ev) *ev = h->ev->ue;
    __atomic_store_n(&q->nheld, q->nheld + 1, __ATOMIC_RELEASE);
    __atomic_add_fetch(&fb_held_total, 1, __ATOMIC_RELEASE);
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
 * A few words per sequence (struct fb_backoff). */
#define BACKOFF_LASTING 1024u
#define BACKOFF_TRANSIENT 16u
#define BACKOFF_NEVER FB_BACKOFF_NEVER

/* Whether sequence s sits out this occurrence (counting it). */
static int backoff_skips(uint32_t s)
{
    uint32_t left = __atomic_load_n(&fb_backoff[s].skip, __ATOMIC_RELAXED);
    while (left && left != BACKOFF_NEVER &&
           !__atomic_compare_exchange_n(&fb_backoff[s].skip, &left, left - 1, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        continue;
    return left != 0;
}

/* Sequence s was refused (`lasting`: FB_REFUSED_*): the occurrences it now
 * sits out, BACKOFF_NEVER for all. */
static uint32_t backoff_refused(uint32_t s, int lasting)
{
    if (lasting == FB_REFUSED_ALWAYS) {
        __atomic_store_n(&fb_backoff[s].skip, BACKOFF_NEVER, __ATOMIC_RELAXED);
        return BACKOFF_NEVER;
    }
    uint32_t row = __atomic_add_fetch(&fb_backoff[s].refusals, 1, __ATOMIC_RELAXED);
    if (row > 32) __atomic_store_n(&fb_backoff[s].refusals, row = 32, __ATOMIC_RELAXED); /* never wraps */
    uint32_t max = lasting == FB_REFUSED_KEY ? BACKOFF_LASTING : BACKOFF_TRANSIENT;
    uint32_t skip = row > 31 ? max : 1u << (row - 1);
    if (skip > max) skip = max;
    uint32_t cur = __atomic_load_n(&fb_backoff[s].skip, __ATOMIC_RELAXED);
    do
        if (cur == BACKOFF_NEVER) return cur; /* another thread's refusal ended it: it stays ended */
    while (!__atomic_compare_exchange_n(&fb_backoff[s].skip, &cur, skip, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    return skip;
}

void fb_backoff_skip(uint32_t s, uint32_t n)
{
    uint32_t cur = __atomic_load_n(&fb_backoff[s].skip, __ATOMIC_RELAXED);
    while (cur != BACKOFF_NEVER &&
           !__atomic_compare_exchange_n(&fb_backoff[s].skip, &cur, n, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        continue;
}

/* Automatic fusion: another kernel broke the held kernels off before they
 * completed a learned candidate; holding them cost the application the
 * time they waited, for nothing. Each learned candidate backs off as after
 * a refusal that holds for one occurrence (1, 2, 4, ... up to
 * BACKOFF_TRANSIENT occurrences, reset when it fuses), so a learned
 * sequence the application does not complete where it starts stops being
 * held. A user's plan is the user's word: not backed off. Caller holds
 * q->lock, before the held kernels are submitted. */
static void backoff_broken(const struct fq *q)
{
    if (!fb_auto || q->ext) return;
    for (uint32_t c = 0; c < q->ncand; c++)
        if (q->cand[c] >= fb_plan_user) backoff_refused(q->cand[c], FB_REFUSED_ONCE);
}

static void backoff_fused(uint32_t s)
{
    if (__atomic_load_n(&fb_backoff[s].refusals, __ATOMIC_RELAXED))
        __atomic_store_n(&fb_backoff[s].refusals, 0, __ATOMIC_RELAXED);
    if (!__atomic_load_n(&fb_backoff[s].fused, __ATOMIC_RELAXED)) { /* once: a window search goes on after it */
        __atomic_store_n(&fb_backoff[s].fused, 1, __ATOMIC_RELAXED);
        if (fb_auto) fa_first_fused(s);
    }
}

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
    if (!q->cand && !(q->cand = malloc(fb_plan_cap * sizeof *q->cand))) return 0;
    int starts = 0;
    for (uint32_t s = 0; s < nseqs; s++) {
        if (strcmp(fb_plan->seqs[s].names[0], r->name)) continue;
        starts = 1;
        if (!backoff_skips(s)) q->cand[q->ncand++] = s;
        else if (fb_plan->seqs[s].n > 1 && __atomic_load_n(&fb_backoff[s].skip, __ATOMIC_RELAXED) != BACKOFF_NEVER &&
                 (!passing || fb_plan->seqs[s].n > fb_plan->seqs[passing - 1].n))
            passing = s + 1; /* a retired one (BACKOFF_NEVER) lets its windows start anywhere in it */
    }
    if (!starts) __atomic_store_n(&r->starts_none, nseqs + 1, __ATOMIC_RELAXED);
    q->passing = q->ncand ? 0 : passing;
    q->passing_pos = 1;
    return q->ncand > 0;
}

/* Whether kernel `name` belongs to the occurrence passing unheld (plan_start). */
static int passes(struct fq *q, const char *name)
{
    const struct plan_seq *s = &fb_plan->seqs[q->passing - 1];
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
        const struct plan_seq *s = &fb_plan->seqs[q->cand[c]];
        if (s->n > q->nheld && !strcmp(s->names[q->nheld], name) &&
            !__atomic_load_n(&fb_backoff[q->cand[c]].skip, __ATOMIC_RELAXED))
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
        const struct plan_seq *s = &fb_plan->seqs[q->cand[c]];
        if (s->n <= q->nheld) continue;
        const char *next = s->names[q->nheld];
        int seen = 0;
        for (uint32_t d = 0; d < c && !seen; d++) {
            const struct plan_seq *t = &fb_plan->seqs[q->cand[d]];
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
        if (fb_plan->seqs[q->cand[c]].n == q->nheld) return (int)q->cand[c];
    return -1;
}

static int plan_flags(const struct plan_seq *s)
{
    return (s->force_barrier ? FB_FORCE_BARRIER : 0) | (s->internal ? FB_INTERNAL : 0) | (s->consts ? FB_CONST : 0);
}

/* Fuses the held kernels or, failing that, submits them; caller holds q->lock. */
static void fuse_or_submit(struct fq *q, int flags, const char *internal_args, int seq, struct fb_pending *p,
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
        names_of(q, names, sizeof names);
        for (uint32_t i = 0; i < n; i++) nargs += q->held[i].nargs;
    }
    uint32_t nparams = 0;
    struct fs_ticket tk = {0, 0};
    /* One measurement follows an occurrence on a queue at a time: windows
     * of one run complete one after the other, and a second one's
     * fs_follow_next would end the first's. */
    int way = seq >= 0 && (!q->fs_follow || q->fs_follow == (uint32_t)seq + 1) ? fs_way((uint32_t)seq, &tk) : FS_FUSE;
    if (way == FS_UNFUSED) { /* never slower: measured slower fused */
        fb_submit_held(q, p);
        return;
    }
    if (seq >= 0 && fb_test_slowdown_us) { /* CLSHIM_FUSION_TEST_SLOWDOWN_US: tests of the never-slower rule */
        struct timespec ts = {(time_t)(fb_test_slowdown_us / 1000000), (long)(fb_test_slowdown_us % 1000000) * 1000};
        nanosleep(&ts, NULL);
    }
    int timed = fa_reporting && seq >= 0; /* the report times the fused launch */
    int lasting = FB_REFUSED_ONCE;
    cl_event timing = NULL;
    if (fb_fuse_held(q, flags, internal_args, seq, p, out ? out : timed || way == FS_TIME_FUSED ? &timing : NULL,
                     &nparams, &lasting, why, sizeof why) == 0) {
        STAT_ADD(fb_stat_fused, 1);
        STAT_ADD(fb_stat_replaced, n);
        if (q->replayed == n) STAT_ADD(fb_stat_replays, 1);
        if (seq >= 0) backoff_fused((uint32_t)seq);
        cl_event launch = out && *out ? *out : timing;
        if (way == FS_TIME_FUSED && launch) {
            fb_real->clRetainEvent(launch);
            fs_time(q, (uint32_t)seq, &tk, 1, launch);
            if (tk.follow) fs_follow_next(q, (uint32_t)seq, &tk);
        }
        if (timed) {
            if (out && *out) fb_real->clRetainEvent(timing = *out);
            fa_fused(q, seq, timing, NULL);
        } else if (timing) {
            fb_real->clReleaseEvent(timing);
        }
        if (log_enabled(LOG_INFO)) /* no call with its variable arguments for nothing */
            fb_log_kind("fused %s into one launch (%u parameters for %u arguments)", names, (unsigned)nparams,
                        (unsigned)nargs);
        return;
    }
    STAT_ADD(fb_stat_refused, 1);
    if (timed) fa_fused(q, seq, NULL, why);
    if (seq >= 0) {
        uint32_t skip = backoff_refused((uint32_t)seq, lasting);
        int windowed = fb_auto && lasting != FB_REFUSED_ONCE && fa_refused((uint32_t)seq);
        fb_log_kind("fusion of %s (plan %s) refused: %s; submitted unfused, %s", names, fb_plan->seqs[seq].where, why,
                    windowed ? "not tried again: a shorter window of it is learned instead"
                    : skip == BACKOFF_NEVER ? "not tried again in this process" : "tried again after a back-off");
        if (windowed) skip = BACKOFF_NEVER;
        if (skip != BACKOFF_NEVER)
            log_msg(LOG_DEBUG, "fusion: %s (plan %s) is not held for its next %u occurrence%s", names,
                    fb_plan->seqs[seq].where, (unsigned)skip, skip == 1 ? "" : "s");
    } else {
        log_msg(LOG_INFO, "fusion of %s refused: %s; submitted unfused", names, why);
    }
    fb_submit_held(q, p);
}

/* ---- replays ------------------------------------------------------------------------ */

/* Whether plan sequence s is the only one starting with its first kernel,
 * so that a kernel starting it finds no other candidate. Remembered per
 * queue until the plan grows (automatic fusion; a sequence that stops
 * being held for good only makes s more alone). Caller holds q->lock. */
static int seq_alone(struct fq *q, uint32_t s)
{
    uint32_t nseqs = fb_plan_nseqs();
    if (s >= nseqs) return 0;
    if (q->alone_nseqs == nseqs && q->alone_seq == s) return 1;
    const char *first = fb_plan->seqs[s].names[0];
    for (uint32_t t = 0; t < nseqs; t++) /* one never held again (BACKOFF_NEVER) is no candidate */
        if (t != s && __atomic_load_n(&fb_backoff[t].skip, __ATOMIC_RELAXED) != BACKOFF_NEVER &&
            !strcmp(fb_plan->seqs[t].names[0], first))
            return 0;
    q->alone_seq = s;
    q->alone_nseqs = nseqs;
    return 1;
}

/* Whether a kernel enqueue on q may be held as the next kernel of a repeat
 * of q's last fused launch (fb_repeat_seq): every kernel held so far was,
 * and in plan mode the matching of a first occurrence would find that
 * launch's sequence as the only candidate — alone in starting with its
 * first kernel, not backing off — so the outcome is the same without it.
 * Caller holds q->lock. */
static int may_replay(struct fq *q, cl_uint nw, const cl_event *wl, int *seq)
{
    if (nw || wl || q->replayed != q->nheld || q->dead) return 0; /* a list without a count: the driver's to refuse */
    int s = *seq = fb_repeat_seq(q);
    if (q->ext) return s == -1;
    if (s < 0 || !q->cand || __atomic_load_n(&fb_backoff[s].skip, __ATOMIC_RELAXED)) return 0;
    return q->nheld || seq_alone(q, (uint32_t)s);
}

/* Holds the enqueue when kernel r with this ND-range is the launch's next
 * kernel (fb_repeat_same) and its queue slot already holds the snapshot of
 * r's arguments at their present count. Then every check can_hold made of
 * it then holds now (the count changes with anything that would fail one),
 * and nothing of r is read but its count: no kernel lock. 1 when held, 0
 * with nothing changed. Caller holds q->lock. */
static int replay(struct fq *q, int seq, struct fk_kernel *r, cl_kernel k, cl_uint dim, const size_t *off,
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
    if (!q->ext) {
        if (!q->nheld) {
            q->cand[0] = (uint32_t)seq;
            q->ncand = 1;
        }
        h->plan_name = fb_plan->seqs[seq].names[q->nheld];
    }
    __atomic_store_n(&q->nheld, q->nheld + 1, __ATOMIC_RELEASE);
    __atomic_add_fetch(&fb_held_total, 1, __ATOMIC_RELEASE);
    q->replayed++;
    return 1;
}

/* ---- the kernel enqueue ---------------------------------------------------------------- */

static cl_int forward(struct fq *q, struct fk_kernel *r, cl_kernel k, cl_uint dim, const size_t *off,
                      const size_t *gws, const size_t *lws, cl_uint nw, const cl_event *wl, cl_event *ev, int task)
{
    cl_event buf[16];
    cl_event *waits = wl && __atomic_load_n(&fb_tracked_events, __ATOMIC_ACQUIRE) ? subst_waits(nw, wl, buf, 16) : (cl_event *)wl;
    /* The kernel lock keeps a held kernel's submission (fb_submit_held,
     * maybe on the idle timer's thread) from changing the driver's
     * arguments under this launch. While nothing is held anywhere no such
     * submission runs, nor can start with arguments other than the
     * driver's: a kernel held later was snapshotted with the arguments it
     * has now (changing them meanwhile, on another thread, would race with
     * this launch in the plain driver as well). So the common case, a
     * kernel that is not fused, takes no lock of its own. */
    int locked = r && r->track && __atomic_load_n(&fb_held_total, __ATOMIC_ACQUIRE);
    if (locked) pthread_mutex_lock(&r->lock);
    cl_int rc = task ? fb_real->clEnqueueTask(q ? q->q : NULL, k, nw, waits, ev)
                     : fb_real->clEnqueueNDRangeKernel(q ? q->q : NULL, k, dim, off, gws, lws, nw, waits, ev);
    if (locked) pthread_mutex_unlock(&r->lock);
    if (waits != wl) done_waits(nw, wl, waits, buf);
    return rc;
}

/* Submits events of other queues' held commands in the wait list (no lock held). */
static void unhold_foreign(struct fq *own, cl_uint nw, const cl_event *wl)
{
    if (!wl || !__atomic_load_n(&fb_tracked_events, __ATOMIC_ACQUIRE)) return;
    for (cl_uint i = 0; i < nw; i++) {
        struct fev *ev = fev_find(wl[i]);
        if (ev && ev->q != own) fb_subst(own, wl[i], "a command on another queue waits for a held event");
    }
}

static cl_int enqueue_locked(struct fq *q, struct fk_kernel *r, cl_kernel k, cl_uint dim, const size_t *off,
                             const size_t *gws, const size_t *lws, cl_uint nw, const cl_event *wl, cl_event *ev,
                             int task);

cl_int fusion_enqueue_kernel(cl_command_queue queue, cl_kernel k, cl_uint dim, const size_t *off, const size_t *gws,
                             const size_t *lws, cl_uint nw, const cl_event *wl, cl_event *ev, int task)
{
    struct fk_kernel *r = fk_get(k);
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
    return enqueue_locked(q, r, k, dim, off, gws, lws, nw, wl, ev, task);
}

/* The enqueue under q's lock: held, fused, or forwarded and watched. Not
 * inlined: the fast path above pays no stack frame of its own. */
__attribute__((noinline)) static cl_int enqueue_locked(struct fq *q, struct fk_kernel *r, cl_kernel k, cl_uint dim,
                                                       const size_t *off, const size_t *gws, const size_t *lws,
                                                       cl_uint nw, const cl_event *wl, cl_event *ev, int task)
{
    struct fb_pending p = {0};
    cl_int rc = CL_SUCCESS;
    const char *why = NULL;
    fq_lock(q);
    if (!q->nheld) q->replayed = 0;
    if (fb_auto && !q->ext) fa_before_kernel(q, r);
    int want = !task && r && !q->off && (q->ext || (fb_plan && (r->in_plan || fb_auto) && q->in_order));
    if (want && q->passing && !q->ext && !q->nheld && passes(q, r->name)) want = 0;
    int seq = FB_NO_REPEAT;
    int held = want && may_replay(q, nw, wl, &seq) && replay(q, seq, r, k, dim, off, gws, lws, ev);
    if (want && !held && !q->ext) {
        /* Plan mode: does it continue (or start) a sequence? */
        if (q->nheld && !plan_filter(q, r->name)) {
            if (log_enabled(LOG_INFO)) {
                char names[512], next[512];
                names_of(q, names, sizeof names);
                expected_next(q, next, sizeof next);
                fb_log_kind("fusion: held %s submitted unfused: '%s' breaks the sequence (expected %s)",
                        names, r->name, next[0] ? next : "the sequence to end");
            }
            backoff_broken(q);
            fb_submit_held(q, &p);
        }
        if (!q->nheld && !plan_start(q, r)) want = 0;
    }
    if (want && !held) {
        pthread_mutex_lock(&r->lock);
        if (can_hold(q, r, dim, gws, lws, nw, wl, &why) && hold(q, r, k, dim, off, gws, lws, nw, wl, ev) == 0) {
            held = 1;
            if (!q->ext) q->held[q->nheld - 1].plan_name = fb_plan->seqs[q->cand[0]].names[q->nheld - 1];
        }
        pthread_mutex_unlock(&r->lock);
        if (!held && !why) why = "out of memory";
    }
    int kick = 0;
    if (held) {
        __atomic_store_n(&q->holds, q->holds + 1, __ATOMIC_RELAXED); /* the idle timer's clock */
        if (q->nheld == 1 && __atomic_load_n(&fs_sampling, __ATOMIC_RELAXED)) q->fs_t0 = fs_now_ms();
        kick = q->nheld == 1 && !q->ext;
        if (fb_auto) fa_held(q, r, dim, gws);
        int done = q->ext ? -1 : plan_done(q);
        if (done >= 0)
            fuse_or_submit(q, plan_flags(&fb_plan->seqs[done]), fb_plan->seqs[done].internal_args, done, &p, NULL);
        else if (q->ext && q->nheld >= PLAN_MAX_SEQ) {
            log_msg(LOG_INFO, "fusion: more than %d kernels held; fusion mode ends", PLAN_MAX_SEQ - 1);
            fb_submit_held(q, &p);
            q->ext = 0;
        }
    } else {
        if (q->nheld) {
            char names[512];
            names_of(q, names, sizeof names);
            fb_log_kind("fusion: held %s submitted unfused: '%s' cannot be held (%s)", names,
                    r && r->name ? r->name : "?", why ? why : task ? "clEnqueueTask" : "not in the sequence");
            backoff_broken(q);
            fb_submit_held(q, &p);
        }
        if (q->ext) {
            log_msg(LOG_INFO, "fusion: fusion mode cancelled: kernel '%s' cannot be held (%s)",
                    r && r->name ? r->name : "?", why ? why : "clEnqueueTask");
            q->ext = 0;
        }
        int noted = 0;
        if (fb_auto && !q->ext) {
            noted = !task && r && r->origin_ok && !r->svm && q->in_order && !q->off && gws && dim >= 1 && dim <= 3;
            if (noted) fa_note(q, r, dim, gws);
            else fa_break(q);
        }
        /* Never slower: the unfused occurrence of a measurement, timed as it passes. */
        uint32_t follow_done = q->fs_follow && r && r->name ? fs_follow(q, r->name) : 0;
        cl_event timing = NULL; /* the report times the run through its last kernel's event */
        rc = forward(q, r, k, dim, off, gws, lws, nw, wl,
                     ((noted && fa_reporting) || follow_done) && !ev ? &timing : ev, task);
        if (noted && fa_reporting && rc == CL_SUCCESS) fa_note_event(q, timing ? timing : *ev);
        if (follow_done && rc == CL_SUCCESS) {
            cl_event last = timing ? timing : *ev;
            fb_real->clRetainEvent(last);
            fs_time(q, follow_done - 1, &q->fs_tk, 0, last);
        }
        if (timing) fb_real->clReleaseEvent(timing);
        /* The next enqueue of r here may take the fast path (above) when
         * it would find what this one found: nothing held, no measurement
         * following, r alone in the run and starting no sequence. */
        if (noted && !fa_reporting && !follow_done && !q->nheld && !q->ext && !q->fs_follow && fa_run_is(q, r) &&
            __atomic_load_n(&r->starts_none, __ATOMIC_RELAXED) == fb_plan_nseqs() + 1)
            __atomic_store_n(&q->steady, r, __ATOMIC_RELEASE);
    }
    kick &= q->nheld > 0; /* still held: the sequence did not complete */
    pthread_mutex_unlock(&q->lock);
    fb_pending_flush(&p);
    if (kick) fi_kick();
    return rc;
}

/* ---- arguments ---------------------------------------------------------------------------- */

cl_int fusion_set_arg(cl_kernel k, cl_uint index, size_t size, const void *value)
{
    struct fk_kernel *r = fk_get(k);
    if (!r || !r->track) return fb_real->clSetKernelArg(k, index, size, value);
    return fk_set_arg(r, index, size, value);
}

cl_int fusion_set_arg_svm(cl_kernel k, cl_uint index, const void *value)
{
    struct fk_kernel *r = fk_get(k);
    if (!r) return fb_real->clSetKernelArgSVMPointer(k, index, value);
    pthread_mutex_lock(&r->lock);
    cl_int rc = fb_real->clSetKernelArgSVMPointer(k, index, value);
    if (rc == CL_SUCCESS && !r->svm) {
        r->svm = 1;
        fk_args_changed(r); /* never held again: no replay either */
    }
    pthread_mutex_unlock(&r->lock);
    return rc;
}

/* ---- other commands, releases -------------------------------------------------------------- */

/* A host wait is a sync of the queues whose commands it waits for, as
 * clFinish is: each such queue's run of kernels ends there, so what the
 * application enqueues after the wait is another run (a sequence learned
 * across the wait would be held, then submitted at the wait, every time). */
void fusion_host_wait(cl_uint n, const cl_event *list)
{
    if (!fb_auto || !n || !list) return;
    int any = 0;
    for (struct fq *q = __atomic_load_n(&all_queues, __ATOMIC_ACQUIRE); q && !any; q = q->next_all)
        any = fa_running(q);
    if (!any) return;
    int tracked = __atomic_load_n(&fb_tracked_events, __ATOMIC_ACQUIRE) > 0;
    for (cl_uint i = 0; i < n; i++) {
        if (!list[i]) continue;
        struct fev *ev = tracked ? fev_find(list[i]) : NULL;
        struct fq *q = ev ? ev->q : NULL;
        cl_command_queue cq = NULL;
        if (!q && fb_real->clGetEventInfo(list[i], CL_EVENT_COMMAND_QUEUE, sizeof cq, &cq, NULL) == CL_SUCCESS && cq)
            q = fq_get(cq, 0);
        if (!q || !fa_running(q)) continue;
        fq_lock(q);
        fa_break(q);
        pthread_mutex_unlock(&q->lock);
    }
}

void fusion_before_command(cl_command_queue queue, cl_uint n, const cl_event *list, struct fusion_waits *w,
                           const char *what)
{
    w->n = n;
    w->list = list;
    w->owned = NULL;
    if (__atomic_load_n(&fusion_armed, __ATOMIC_RELAXED) <= 0) return;
    if (queue && __atomic_load_n(&fb_held_total, __ATOMIC_ACQUIRE)) {
        struct fq *q = fq_get(queue, 0);
        if (q && __atomic_load_n(&q->nheld, __ATOMIC_ACQUIRE)) fb_cancel(q, what);
    }
    if (queue && fb_auto) { /* another command: the queue's run of kernels ends */
        struct fq *q = fq_get(queue, 0);
        if (q && fa_running(q)) {
            fq_lock(q);
            fa_break(q);
            pthread_mutex_unlock(&q->lock);
        }
    }
    if (!n || !list || !__atomic_load_n(&fb_tracked_events, __ATOMIC_ACQUIRE)) return;
    int any = 0;
    for (cl_uint i = 0; i < n && !any; i++) any = fev_find(list[i]) != NULL;
    if (!any) return;
    cl_event *out = n <= 8 ? w->buf : malloc(n * sizeof *out);
    if (!out) return;
    /* Without a queue the call is a host wait (clWaitForEvents): its name
     * is the reason, as clFinish's is for a queue's own held kernels. */
    const char *why = queue ? "a command on another queue waits for a held event" : what;
    for (cl_uint i = 0; i < n; i++) out[i] = fb_subst(NULL, list[i], why);
    if (out != w->buf) w->owned = out;
    w->list = out;
}

void fusion_after_command(struct fusion_waits *w)
{
    free(w->owned);
    w->owned = NULL;
}

/* Cancels every queue holding something that matches; no lock held by the caller. */
static void cancel_where(int (*match)(const struct held *, const void *), const void *what, const char *why)
{
    if (!__atomic_load_n(&fb_held_total, __ATOMIC_ACQUIRE)) return;
    for (struct fq *q = __atomic_load_n(&all_queues, __ATOMIC_ACQUIRE); q; q = q->next_all) {
        if (!__atomic_load_n(&q->nheld, __ATOMIC_ACQUIRE)) continue;
        int hit = 0;
        fq_lock(q);
        for (uint32_t i = 0; i < q->nheld && !hit; i++) hit = match(&q->held[i], what);
        pthread_mutex_unlock(&q->lock);
        if (hit) fb_cancel(q, why);
    }
}

static int uses_mem(const struct held *h, const void *m)
{
    for (cl_uint i = 0; i < h->nargs; i++) {
        const struct fk_arg *a = &h->args[i];
        if (a->kind == FK_VALUE && a->mem && a->size == sizeof(cl_mem) && !memcmp(a->v.inl, &m, sizeof m))
            return 1;
    }
    return 0;
}

static int uses_kernel(const struct held *h, const void *k) { return h->k == (cl_kernel)k; }

void fusion_release_mem(cl_mem m)
{
    __atomic_add_fetch(&fb_mem_gen, 1, __ATOMIC_ACQ_REL); /* the handle may come back as another buffer */
    cancel_where(uses_mem, m, "release of a buffer a held kernel uses");
}

void fusion_release_kernel(cl_kernel k)
{
    cancel_where(uses_kernel, k, "release of a held kernel");
    cl_uint refs = 0;
    if (fb_real->clGetKernelInfo(k, CL_KERNEL_REFERENCE_COUNT, sizeof refs, &refs, NULL) == CL_SUCCESS && refs == 1) {
        unwatch_kernel(k);
        fk_forget(k);
    }
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
    }
    q->ext_open = 1;
    pthread_mutex_unlock(&q->lock);
    fb_pending_flush(&p);
    return rc;
}

/* Ends the app's Start on q; nonzero when this Complete or Cancel came
 * without one and is the queue's first such (reported then, once: it is
 * harmless, but usually a missing or misplaced Start). Caller holds q->lock. */
static int ext_close(struct fq *q)
{
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
    q->ext = 0;
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
    if (q->ext && q->nheld >= 2) fuse_or_submit(q, flags, internal_args, -1, &p, event ? &out : NULL);
    else if (q->nheld) fb_submit_held(q, &p);
    q->ext = 0;
    int report = ext_close(q);
    cl_int rc = CL_SUCCESS;
    if (event && !out) rc = fb_real->clEnqueueMarkerWithWaitList(queue, 0, NULL, &out);
    pthread_mutex_unlock(&q->lock);
    fb_pending_flush(&p);
    if (report) ext_report_unopened("clCompleteFusionCLSHIM");
    if (event) *event = out;
    return rc;
}

int fusion_available(void) { return queues != NULL; }

void *fusion_extension(const char *name)
{
    void *fn = NULL;
    if (!strcmp(name, "clStartFusionCLSHIM")) fn = (void *)ext_start;
    else if (!strcmp(name, "clCompleteFusionCLSHIM")) fn = (void *)ext_complete;
    else if (!strcmp(name, "clCancelFusionCLSHIM")) fn = (void *)ext_cancel;
    else if (!strcmp(name, "clQueryFusionCLSHIM")) fn = (void *)ext_query;
    if (!fn || !queues) return NULL; /* fusion_init() found the shim disabled */
    if (!(__atomic_fetch_or(&fusion_armed, FUSION_ARMED_EXT, __ATOMIC_ACQ_REL) & FUSION_ARMED_EXT))
        __atomic_add_fetch(&fb_arm_gen, 1, __ATOMIC_ACQ_REL);
    return fn;
}
