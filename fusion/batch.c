/* batch.c — the batcher's queue records and their life (see batch.h for the
 * design): start-up and exit, submitting held kernels, other commands and
 * releases that end what a queue holds. The kernel enqueue and the plan's
 * and automatic fusion's modes are enqueue.c's, the extension API's fext.c's.
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
 *   5. fb()->held_total is the sum of nheld over all queues.
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

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static int init_enabled;
static objmap *queues;
static struct fq *all_queues; /* every record ever made, pushed lock-free, never freed */
static pthread_mutex_t create_lock = PTHREAD_MUTEX_INITIALIZER;

/* The first broken invariant of q (see the top of this file), or NULL.
 * Cheap: run before every submission or fusion of held kernels, never on
 * the path of a kernel that is only held. Under q->lock (fq_check). */
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
            const struct plan_seq *s = &fb()->plan->seqs[q->cand[c]];
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
 * so the application goes on with plain results. Returns 1 when an
 * invariant was broken (or q->lock is not held: then nothing is read). */
int fq_check(struct fq *q, const char *where)
{
    const char *broken = fq_broken(q);
    if (!broken) return 0;
    if (check_fatal()) {
        log_msg(LOG_ERROR, "fusion: internal error in %s: %s; aborting (CLSHIM_STRICT=1)", where, broken);
        abort();
    }
    log_msg(LOG_ERROR, "fusion: internal error in %s: %s; held kernels submitted unfused, fusion off for this queue",
            where, broken);
    q->off = 1;
    fm_end_ext(q);
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
            fb()->real->clFlush(q->q);
        }
    const struct clshim_config *cfg = config_get();
    if (__atomic_load_n(&fusion_armed, __ATOMIC_RELAXED) <= 0) return; /* no plan, no extension use */
    fa_write_report();
    if (!cfg->stats && !log_enabled(LOG_INFO)) return;
    log_kinds_summary();
    if (!log_enabled(LOG_INFO)) log_set_level(LOG_INFO); /* CLSHIM_STATS below level info */
    char unwatched[96] = "";
    if (fb()->automatic) /* automatic fusion's second fast path (fusion_enqueue_kernel) */
        snprintf(unwatched, sizeof unwatched, "; %llu runs not watched (every sequence of their kernels refused for good or resting)",
                 (unsigned long long)fb()->stat_unwatched);
    log_msg(LOG_INFO,
            "fusion summary: %llu fused launches replaced %llu kernel launches; %llu held kernels submitted "
            "unfused; %llu fusions refused; %llu replays%s",
            (unsigned long long)fb()->stat_fused, (unsigned long long)fb()->stat_replaced,
            (unsigned long long)fb()->stat_unfused, (unsigned long long)fb()->stat_refused,
            (unsigned long long)fb()->stat_replays, unwatched);
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
            fb()->plan_cap = fb()->plan_user = plan ? plan->nseqs : 0;
            if ((automatic && fa_init(&plan) != 0) || !(fb()->backoff = calloc(fb()->plan_cap, sizeof *fb()->backoff))) {
                plan_free(plan);
                log_msg(LOG_WARN, "fusion: out of memory at start-up; fusion is off");
            } else {
                fb()->plan = plan;
                fb()->automatic = automatic;
                fb()->build_by_helper = strcmp(cfg->fusion_build, "app") != 0;
                fb()->history = cfg->fusion_history;
                fb()->test_load_us = (unsigned)cfg->fusion_test_load_us;
                fb()->test_slowdown_us = (unsigned)cfg->fusion_test_slowdown_us;
                armed = (plan->nseqs ? FUSION_ARMED_PLAN : 0) | (automatic ? FUSION_ARMED_AUTO : 0);
                if (plan->nseqs)
                    log_msg(LOG_INFO, "fusion plan: %u sequence%s", (unsigned)plan->nseqs,
                            plan->nseqs == 1 ? "" : "s");
                if (automatic) log_msg(LOG_INFO, "fusion: automatic (CLSHIM_FUSION=auto)");
                fi_start_early();
            }
        } else {
            plan_free(plan);
        }
        atexit(at_exit);
    }
    __atomic_store_n(&fb()->arm_gen, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&fusion_armed, armed, __ATOMIC_RELEASE);
}

int fusion_init(const struct cl_api *real, int enabled)
{
    if (__atomic_load_n(&fusion_armed, __ATOMIC_ACQUIRE) < 0) {
        pthread_mutex_lock(&create_lock);
        if (!fb()->real) {
            fb()->real = real;
            fb()->enqueue_ndrange = real->clEnqueueNDRangeKernel;
            fb()->enqueue_task = real->clEnqueueTask;
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
    int named = plan_names_in_program(fb()->plan, input, len, kind == KEY_IL);
    free(input);
    return named;
}

/* ---- queue records ------------------------------------------------------------ */

struct fq *fb_queues(void) { return __atomic_load_n(&all_queues, __ATOMIC_ACQUIRE); }

struct fq *fq_get(cl_command_queue q, int create)
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
    if (fb()->real->clGetCommandQueueInfo(q, CL_QUEUE_PROPERTIES, sizeof props, &props, NULL) != CL_SUCCESS ||
        fb()->real->clGetCommandQueueInfo(q, CL_QUEUE_CONTEXT, sizeof ctx, &ctx, NULL) != CL_SUCCESS ||
        fb()->real->clGetCommandQueueInfo(q, CL_QUEUE_DEVICE, sizeof dev, &dev, NULL) != CL_SUCCESS)
        return NULL;
    pthread_mutex_lock(&create_lock);
    r = objmap_get(queues, q);
    if (!r && (r = calloc(1, sizeof *r))) {
        pthread_mutex_init(&r->lock, NULL);
        r->q = q;
        r->ctx = ctx;
        r->dev = dev;
        r->in_order = !(props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE);
        r->mode = fm_standing();
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
    if (!fb()->automatic) return;
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
    fm_end_ext(r);
    if (fb()->real->clGetCommandQueueInfo(q, CL_QUEUE_REFERENCE_COUNT, sizeof refs, &refs, NULL) == CL_SUCCESS &&
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
        for (cl_uint i = 0; i < h->nwaits; i++) fb()->real->clReleaseEvent(h->waits[i]);
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
 * fb_done_waits releases them. */
cl_event *fb_subst_waits(cl_uint n, const cl_event *wl, cl_event *buf, size_t buf_len)
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

void fb_done_waits(cl_uint n, const cl_event *wl, cl_event *waits, cl_event *buf)
{
    if (!waits || waits == wl) return;
    for (cl_uint i = 0; i < n; i++)
        if (waits[i] != wl[i]) fb()->real->clReleaseEvent(waits[i]);
    if (waits != buf) free(waits);
}

void fb_submit_held(struct fq *q, struct fb_pending *p)
{
    /* q->lock: fq_check asserts it. */
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
        cl_event *waits = fb_subst_waits(h->nwaits, h->waits, buf, 16);
        pthread_mutex_lock(&h->rec->lock);
        cl_int rc = fk_apply(h->rec, h->args, 0);
        if (rc == CL_SUCCESS)
            rc = fb()->real->clEnqueueNDRangeKernel(q->q, h->k, h->dim, h->has_off ? h->off : NULL, h->gws,
                                                 h->has_lws ? h->lws : NULL, h->nwaits, waits,
                                                 h->ev ? &rev : NULL);
        fk_apply(h->rec, h->args, 1);
        pthread_mutex_unlock(&h->rec->lock);
        fb_done_waits(h->nwaits, h->waits, waits, buf);
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
    __atomic_sub_fetch(&fb()->held_total, (int)n, __ATOMIC_RELEASE);
    STAT_ADD(fb()->stat_unfused, n);
}

void fb_names_of(const struct fq *q, char *out, size_t len)
{
    if (!CLSHIM_ASSERT_HELD(&q->lock)) return (void)(out[0] = 0);
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
    __atomic_store_n(&q->quiet, 0, __ATOMIC_RELAXED);
    if (q->nheld && !q->ext && q->holds == holds) { /* nothing held since the timer looked */
        idle = 1;
        if (log_enabled(LOG_INFO)) {
            char names[512];
            fb_names_of(q, names, sizeof names);
            fb_log_kind("fusion: held %s submitted unfused: nothing enqueued on its queue for %u ms "
                        "(CLSHIM_FUSION_HOLD_MS)", names, period_ms);
        }
        fb_submit_held(q, &p);
        if (fb()->automatic) fa_break(q);
    }
    pthread_mutex_unlock(&q->lock);
    fb_pending_run(&p);
    return idle;
}

void fb_cancel(struct fq *q, const char *why) { fb_cancel_held(q, why, 0); }

void fb_cancel_held(struct fq *q, const char *why, int broken)
{
    struct fb_pending p = {0};
    fq_lock(q);
    if (q->nheld) {
        if (log_enabled(LOG_INFO)) {
            char names[512];
            fb_names_of(q, names, sizeof names);
            fb_log_kind("fusion: held %s submitted unfused: %s", names, why);
        }
        if (broken) fb_backoff_broken(q);
        fb_submit_held(q, &p);
    }
    if (q->ext) log_msg(LOG_INFO, "fusion: fusion mode cancelled on a queue: %s", why);
    fm_end_ext(q);
    pthread_mutex_unlock(&q->lock);
    fb_pending_run(&p);
}

/* ---- arguments ---------------------------------------------------------------------------- */

cl_int fusion_set_arg(cl_kernel k, cl_uint index, size_t size, const void *value)
{
    struct fk_kernel *r = fk_get(k, __atomic_load_n(&fb()->arm_gen, __ATOMIC_ACQUIRE));
    if (!r || !r->track) return fb()->real->clSetKernelArg(k, index, size, value);
    return fk_set_arg(r, index, size, value);
}

cl_int fusion_set_arg_svm(cl_kernel k, cl_uint index, const void *value)
{
    struct fk_kernel *r = fk_get(k, __atomic_load_n(&fb()->arm_gen, __ATOMIC_ACQUIRE));
    if (!r) return fb()->real->clSetKernelArgSVMPointer(k, index, value);
    return fk_set_arg_svm(r, index, value);
}

/* ---- other commands, releases -------------------------------------------------------------- */

/* Ends q's run of kernels (a sync, another command). A queue quiet before
 * (fq.quiet: nothing held, measured or passing) stays so: the end of a
 * run changes none of that, and a loop that syncs every step would
 * otherwise take the locked path at each step's first kernel, which, where
 * it starts a resting sequence, sends the whole occurrence that way. */
static void break_run(struct fq *q)
{
    int quiet = __atomic_load_n(&q->quiet, __ATOMIC_ACQUIRE);
    fq_lock(q);
    fa_break(q);
    if (quiet && !q->nheld && !q->ext && !q->fs_follow && !q->passing && !fb()->reporting)
        __atomic_store_n(&q->quiet, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&q->lock);
}

/* A host wait is a sync of the queues whose commands it waits for, as
 * clFinish is: each such queue's run of kernels ends there, so what the
 * application enqueues after the wait is another run (a sequence learned
 * across the wait would be held, then submitted at the wait, every time). */
void fusion_host_wait(cl_uint n, const cl_event *list)
{
    if (!fb()->automatic || !n || !list) return;
    int any = 0;
    for (struct fq *q = __atomic_load_n(&all_queues, __ATOMIC_ACQUIRE); q && !any; q = q->next_all)
        any = fa_running(q);
    if (!any) return;
    int tracked = __atomic_load_n(&fb()->tracked_events, __ATOMIC_ACQUIRE) > 0;
    for (cl_uint i = 0; i < n; i++) {
        if (!list[i]) continue;
        struct fev *ev = tracked ? fev_find(list[i]) : NULL;
        struct fq *q = ev ? ev->q : NULL;
        cl_command_queue cq = NULL;
        if (!q && fb()->real->clGetEventInfo(list[i], CL_EVENT_COMMAND_QUEUE, sizeof cq, &cq, NULL) == CL_SUCCESS && cq)
            q = fq_get(cq, 0);
        if (!q || !fa_running(q)) continue;
        break_run(q);
    }
}

void fusion_before_command(cl_command_queue queue, cl_uint n, const cl_event *list, struct fusion_waits *w,
                           const char *what)
{
    w->n = n;
    w->list = list;
    w->owned = NULL;
    if (__atomic_load_n(&fusion_armed, __ATOMIC_RELAXED) <= 0) return;
    if (queue && __atomic_load_n(&fb()->held_total, __ATOMIC_ACQUIRE)) {
        struct fq *q = fq_get(queue, 0);
        if (q && __atomic_load_n(&q->nheld, __ATOMIC_ACQUIRE)) fb_cancel(q, what);
    }
    if (queue && fb()->automatic) { /* another command: the queue's run of kernels ends */
        struct fq *q = fq_get(queue, 0);
        if (q && fa_running(q)) break_run(q);
        else if (q) fa_end_unwatched(q); /* a run of quiet kernels only ends here too */
    }
    if (!n || !list || !__atomic_load_n(&fb()->tracked_events, __ATOMIC_ACQUIRE)) return;
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
    if (!__atomic_load_n(&fb()->held_total, __ATOMIC_ACQUIRE)) return;
    for (struct fq *q = __atomic_load_n(&all_queues, __ATOMIC_ACQUIRE); q; q = q->next_all) {
        if (!__atomic_load_n(&q->nheld, __ATOMIC_ACQUIRE)) continue;
        int hit = 0;
        fq_lock(q);
        for (uint32_t i = 0; i < q->nheld && !hit; i++) hit = match(&q->held[i], what);
        pthread_mutex_unlock(&q->lock);
        /* The application ends what it started holding (a library that
         * releases each kernel right after its enqueue: CLBlast, 4,300
         * times a run): a learned sequence backs off as when another
         * kernel breaks it (fb_backoff_broken). */
        if (hit) fb_cancel_held(q, why, 1);
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
    __atomic_add_fetch(&fb()->mem_gen, 1, __ATOMIC_ACQ_REL); /* the handle may come back as another buffer */
    cancel_where(uses_mem, m, "release of a buffer a held kernel uses");
}

void fusion_release_kernel(cl_kernel k)
{
    cancel_where(uses_kernel, k, "release of a held kernel");
    cl_uint refs = 0;
    if (fb()->real->clGetKernelInfo(k, CL_KERNEL_REFERENCE_COUNT, sizeof refs, &refs, NULL) == CL_SUCCESS && refs == 1) {
        unwatch_kernel(k);
        fk_forget(k);
    }
}

int fusion_available(void) { return queues != NULL; }
