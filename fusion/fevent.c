/* fevent.c — the events handed out for held commands.
 *
 * A held enqueue that asks for an event gets a user event of the queue's
 * context. Once the command is submitted (alone or inside a fused launch),
 * the record learns the driver's event carrying the work, and a CL_COMPLETE
 * callback on that event completes the user event with the same status.
 * Until then the record holds one reference of its own on the user event,
 * so the application may release it at any time.
 *
 * Queries are answered as for the command itself: CL_EVENT_COMMAND_TYPE and
 * CL_EVENT_COMMAND_QUEUE from the record, execution status and profiling
 * from the real event (a held one is submitted first; a part of a fused
 * launch gets its share of the launch's run, in order), the reference
 * count without clshim's own reference.
 */
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/objmap.h"
#include "fusion/batch.h"
#include "fusion/batch_int.h"

static objmap *events;
static pthread_once_t events_once = PTHREAD_ONCE_INIT;

static void events_init(void) { events = objmap_new(); }

struct fev *fev_find(cl_event e)
{
    if (!e || !__atomic_load_n(&fb()->tracked_events, __ATOMIC_ACQUIRE) || !events) return NULL;
    return objmap_get(events, e);
}

/* Under the map's stripe lock: fev_unref removes the record from the map
 * before it releases the real event and frees the record, so both outlive
 * this call; the retain keeps the real event for the caller. */
static void look(void *value, void *ctx)
{
    const struct fev *ev = value;
    struct fev_look *out = ctx;
    out->q = ev->q;
    out->held = ev->held;
    out->real = __atomic_load_n(&ev->real, __ATOMIC_ACQUIRE);
    if (out->real) fb()->real->clRetainEvent(out->real);
}

int fev_look(cl_event e, struct fev_look *out)
{
    *out = (struct fev_look){NULL, 0, NULL};
    if (!e || !__atomic_load_n(&fb()->tracked_events, __ATOMIC_ACQUIRE) || !events) return 0;
    return objmap_with(events, e, look, out);
}

struct fev *fev_new(struct fq *q, cl_command_type type)
{
    pthread_once(&events_once, events_init);
    if (!events) return NULL;
    struct fev *ev = calloc(1, sizeof *ev);
    if (!ev) return NULL;
    cl_int rc = CL_SUCCESS;
    ev->ue = fb()->real->clCreateUserEvent(q->ctx, &rc);
    if (!ev->ue || rc != CL_SUCCESS) {
        free(ev);
        return NULL;
    }
    fb()->real->clRetainEvent(ev->ue); /* ours, until completion is wired */
    ev->q = q;
    ev->type = type;
    ev->refs = 2;
    ev->held = 1;
    __atomic_add_fetch(&fb()->tracked_events, 1, __ATOMIC_RELEASE);
    if (objmap_put(events, ev->ue, ev) != 0) {
        __atomic_sub_fetch(&fb()->tracked_events, 1, __ATOMIC_RELEASE);
        fb()->real->clReleaseEvent(ev->ue);
        fb()->real->clReleaseEvent(ev->ue);
        free(ev);
        return NULL;
    }
    return ev;
}

void fev_unref(struct fev *ev)
{
    if (__atomic_sub_fetch(&ev->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
    objmap_remove(events, ev->ue);
    __atomic_sub_fetch(&fb()->tracked_events, 1, __ATOMIC_RELEASE);
    cl_event real = __atomic_load_n(&ev->real, __ATOMIC_ACQUIRE);
    if (real) fb()->real->clReleaseEvent(real);
    free(ev);
}

/* ---- completion ------------------------------------------------------------ */

static void CL_CALLBACK on_real_done(cl_event real, cl_int status, void *user)
{
    (void)real;
    struct fev *ev = user;
    cl_event ue = ev->ue;
    fb()->real->clSetUserEventStatus(ue, status < 0 ? status : CL_COMPLETE);
    __atomic_store_n(&ev->done, 1, __ATOMIC_RELEASE);
    fev_unref(ev);                /* the pending reference */
    fb()->real->clReleaseEvent(ue); /* our reference on the user event */
}

void fb_pending_add(struct fb_pending *p, struct fev *ev, cl_event real, cl_int status)
{
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 8;
        struct fb_pending_item *items = realloc(p->items, cap * sizeof *items);
        if (!items) {
            /* Cannot defer: complete it now with the status we know (the
             * caller holds a queue lock, but an application callback on a
             * user event that re-enters clshim on this queue is the only
             * risk, and only under out-of-memory). */
            LOG_ONCE(LOG_WARN, "fusion: out of memory while completing an event");
            struct fb_pending one = {&(struct fb_pending_item){ev, real, status}, 1, 1};
            fb_pending_run(&one);
            return;
        }
        p->items = items;
        p->cap = cap;
    }
    p->items[p->n++] = (struct fb_pending_item){ev, real, status};
}

/* The held commands of one fused launch share its event: one callback
 * completes all their user events (a clSetEventCallback each cost the
 * application about 2.7 us per held kernel on NVIDIA, H100). */
struct fev_group {
    size_t n;
    struct fev *ev[];
};

static void CL_CALLBACK on_group_done(cl_event real, cl_int status, void *user)
{
    struct fev_group *g = user;
    for (size_t i = 0; i < g->n; i++) on_real_done(real, status, g->ev[i]);
    free(g);
}

/* Wires items [i, j), which share one real event, with one callback; 0 when wired. */
static int wire_group(const struct fb_pending_item *items, size_t i, size_t j)
{
    struct fev_group *g = malloc(sizeof *g + (j - i) * sizeof g->ev[0]);
    if (!g) return -1;
    g->n = j - i;
    for (size_t k = i; k < j; k++) g->ev[k - i] = items[k].ev;
    if (fb()->real->clSetEventCallback(items[i].real, CL_COMPLETE, on_group_done, g) == CL_SUCCESS) return 0;
    free(g);
    return -1;
}

void fb_pending_run(struct fb_pending *p)
{
    for (size_t i = 0; i < p->n; i++) {
        struct fb_pending_item *it = &p->items[i];
        struct fev *ev = it->ev;
        if (it->real) {
            size_t j = i + 1;
            while (j < p->n && p->items[j].real == it->real) j++;
            if (j - i > 1 && wire_group(p->items, i, j) == 0) {
                i = j - 1;
                continue;
            }
            if (fb()->real->clSetEventCallback(it->real, CL_COMPLETE, on_real_done, ev) == CL_SUCCESS) continue;
            /* No callback: wait here (rare; the command is submitted). */
            LOG_ONCE(LOG_WARN, "fusion: clSetEventCallback failed; completing held events synchronously");
            cl_int st = fb()->real->clWaitForEvents(1, &it->real);
            on_real_done(it->real, st == CL_SUCCESS ? CL_COMPLETE : -1, ev);
        } else {
            on_real_done(NULL, it->status < 0 ? it->status : CL_OUT_OF_RESOURCES, ev);
        }
    }
    if (p->items != NULL && p->cap) free(p->items);
    p->items = NULL;
    p->n = p->cap = 0;
}

/* ---- queries --------------------------------------------------------------- */

static cl_int answer(const void *v, size_t n, size_t size, void *value, size_t *size_ret)
{
    if (value) {
        if (size < n) return CL_INVALID_VALUE;
        memcpy(value, v, n);
    }
    if (size_ret) *size_ret = n;
    return CL_SUCCESS;
}

/* Submits the held command behind ev, if still held. */
static void unhold(struct fev *ev, const char *why)
{
    struct fq *q = ev->q;
    pthread_mutex_lock(&q->lock);
    int held = ev->held;
    pthread_mutex_unlock(&q->lock);
    if (held) fb_cancel(q, why);
}

cl_int fusion_get_event_info(cl_event e, cl_event_info param, size_t size, void *value, size_t *size_ret)
{
    struct fev *ev = fev_find(e);
    if (!ev) return fb()->real->clGetEventInfo(e, param, size, value, size_ret);
    switch (param) {
    case CL_EVENT_COMMAND_QUEUE:
        return answer(&ev->q->q, sizeof(cl_command_queue), size, value, size_ret);
    case CL_EVENT_COMMAND_TYPE:
        return answer(&ev->type, sizeof ev->type, size, value, size_ret);
    case CL_EVENT_COMMAND_EXECUTION_STATUS: {
        unhold(ev, "a status query on a held event");
        cl_event real = __atomic_load_n(&ev->real, __ATOMIC_ACQUIRE);
        return fb()->real->clGetEventInfo(real ? real : e, param, size, value, size_ret);
    }
    case CL_EVENT_REFERENCE_COUNT: {
        cl_uint n = 0;
        cl_int rc = fb()->real->clGetEventInfo(e, param, sizeof n, &n, NULL);
        if (rc != CL_SUCCESS) return rc;
        /* Our own reference lasts until the completion callback ran. */
        cl_uint app = n > 1 && !__atomic_load_n(&ev->done, __ATOMIC_ACQUIRE) ? n - 1 : n;
        return answer(&app, sizeof app, size, value, size_ret);
    }
    default:
        return fb()->real->clGetEventInfo(e, param, size, value, size_ret);
    }
}

cl_int fusion_get_event_profiling_info(cl_event e, cl_profiling_info param, size_t size, void *value,
                                       size_t *size_ret)
{
    struct fev *ev = fev_find(e);
    if (!ev) return fb()->real->clGetEventProfilingInfo(e, param, size, value, size_ret);
    unhold(ev, "a profiling query on a held event");
    cl_event real = __atomic_load_n(&ev->real, __ATOMIC_ACQUIRE);
    if (!real || ev->parts < 2 || (param != CL_PROFILING_COMMAND_START && param != CL_PROFILING_COMMAND_END &&
                                   param != CL_PROFILING_COMMAND_COMPLETE))
        return fb()->real->clGetEventProfilingInfo(real ? real : e, param, size, value, size_ret);
    /* A part of a fused launch: the launch's run split evenly among its
     * parts, in order, so an in-order queue's commands still start after
     * the one before ended (END(k1) <= START(k2)), as with the plain
     * driver; QUEUED and SUBMIT are the launch's, before every START. */
    cl_ulong start, end;
    cl_int rc = fb()->real->clGetEventProfilingInfo(real, CL_PROFILING_COMMAND_START, sizeof start, &start, NULL);
    if (rc == CL_SUCCESS) rc = fb()->real->clGetEventProfilingInfo(real, CL_PROFILING_COMMAND_END, sizeof end, &end, NULL);
    if (rc != CL_SUCCESS) return fb()->real->clGetEventProfilingInfo(real, param, size, value, size_ret);
    if (value && size < sizeof(cl_ulong)) return CL_INVALID_VALUE;
    cl_ulong span = end > start ? end - start : 0;
    uint32_t at = param == CL_PROFILING_COMMAND_START ? ev->part : ev->part + 1;
    CLSHIM_ASSERT(ev->part < ev->parts);
    cl_ulong t = start + (cl_ulong)((unsigned __int128)span * at / ev->parts);
    if (value) *(cl_ulong *)value = t;
    if (size_ret) *size_ret = sizeof t;
    return CL_SUCCESS;
}

cl_int fusion_retain_event(cl_event e)
{
    cl_int rc = fb()->real->clRetainEvent(e);
    struct fev *ev = rc == CL_SUCCESS ? fev_find(e) : NULL;
    if (ev) __atomic_add_fetch(&ev->refs, 1, __ATOMIC_ACQ_REL);
    return rc;
}

cl_int fusion_release_event(cl_event e)
{
    struct fev *ev = fev_find(e);
    if (ev) fev_unref(ev); /* before the handle can die and be reused */
    return fb()->real->clReleaseEvent(e);
}

cl_event fb_subst(struct fq *own, cl_event e, const char *why)
{
    struct fev *ev = fev_find(e);
    if (!ev) return e;
    if (ev->q != own) unhold(ev, why);
    cl_event real = __atomic_load_n(&ev->real, __ATOMIC_ACQUIRE);
    return real ? real : e;
}

void fusion_event_callback(cl_event e)
{
    struct fev *ev = fev_find(e);
    if (ev) unhold(ev, "a callback registered on a held event");
}
