/* fext.c — the extension API (CL/clshim_ext.h) and its mode of a queue.
 *
 * Between clStartFusionCLSHIM and clCompleteFusionCLSHIM a queue is in the
 * extension API's mode (struct fb_mode): every kernel is held, and the
 * completion fuses them. A kernel that cannot be held ends the mode and
 * goes back to the queue's standing mode (the plan's or automatic
 * fusion's, in enqueue.c, where they inline into the enqueue path).
 */
#include "fusion/batch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "CL/clshim_ext.h"
#include "common/log.h"
#include "fusion/batch_int.h"

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
