/* profiled.c — the entry points' part in `clshim run --profile`
 * (common/profile.h): queues made with profiling on and answering as the
 * application made them, and every kernel launch's event timed.
 *
 * A queue the application made without CL_QUEUE_PROFILING_ENABLE gets it
 * all the same (the device times are the point); then, as from the plain
 * driver, its properties read without the bit, its properties array as
 * the application passed it, and its events' profiling queries answer
 * CL_PROFILING_INFO_NOT_AVAILABLE. Nothing of this runs unless
 * profile_active (one relaxed load in each entry point, interpose/enqueue.c).
 */
#include "interpose/profiled.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/profile.h"

/* The properties array the application made a queue with (copied), for
 * CL_QUEUE_PROPERTIES_ARRAY. Few queues: a list under a mutex. */
struct app_props {
    struct app_props *next;
    const void *queue;
    size_t bytes;
    cl_queue_properties props[];
};
static struct app_props *props_list;
static pthread_mutex_t props_lock = PTHREAD_MUTEX_INITIALIZER;

cl_command_queue profiled_create_queue(const struct cl_api *r, cl_context context, cl_device_id device,
                                       cl_command_queue_properties properties, cl_int *errcode_ret)
{
    cl_command_queue q = r->clCreateCommandQueue(context, device, properties | CL_QUEUE_PROFILING_ENABLE, errcode_ret);
    if (q && !(properties & CL_QUEUE_PROFILING_ENABLE)) profile_queue_added(q);
    return q;
}

cl_command_queue profiled_create_queue_props(const struct cl_api *r, cl_context context, cl_device_id device,
                                             const cl_queue_properties *properties, cl_int *errcode_ret)
{
    size_t n = 0;
    int has = 0, asked = 0;
    for (; properties && properties[n]; n += 2)
        if (properties[n] == CL_QUEUE_PROPERTIES) has = 1, asked = (properties[n + 1] & CL_QUEUE_PROFILING_ENABLE) != 0;
    if (asked) return r->clCreateCommandQueueWithProperties(context, device, properties, errcode_ret);
    /* The same list with the bit, or with CL_QUEUE_PROPERTIES added. */
    cl_queue_properties *mine = malloc((n + 3) * sizeof *mine);
    if (!mine) return r->clCreateCommandQueueWithProperties(context, device, properties, errcode_ret);
    if (n) memcpy(mine, properties, n * sizeof *mine);
    size_t m = n;
    for (size_t i = 0; has && i < n; i += 2)
        if (mine[i] == CL_QUEUE_PROPERTIES) mine[i + 1] |= CL_QUEUE_PROFILING_ENABLE;
    if (!has) mine[m++] = CL_QUEUE_PROPERTIES, mine[m++] = CL_QUEUE_PROFILING_ENABLE;
    mine[m] = 0;
    cl_command_queue q = r->clCreateCommandQueueWithProperties(context, device, mine, errcode_ret);
    free(mine);
    if (!q) return q;
    profile_queue_added(q);
    size_t bytes = properties ? (n + 1) * sizeof *properties : 0;
    struct app_props *p = malloc(sizeof *p + bytes);
    if (p) {
        p->queue = q, p->bytes = bytes;
        if (bytes) memcpy(p->props, properties, bytes);
        pthread_mutex_lock(&props_lock);
        p->next = props_list, props_list = p;
        pthread_mutex_unlock(&props_lock);
    }
    return q;
}

static cl_int answer(const void *v, size_t n, size_t size, void *value, size_t *size_ret)
{
    if (value && size < n) return CL_INVALID_VALUE;
    if (value && n) memcpy(value, v, n);
    if (size_ret) *size_ret = n;
    return CL_SUCCESS;
}

cl_int profiled_queue_info(const struct cl_api *r, cl_command_queue q, cl_command_queue_info param, size_t size,
                           void *value, size_t *size_ret)
{
    if (!profile_queue_forced(q) || (param != CL_QUEUE_PROPERTIES && param != CL_QUEUE_PROPERTIES_ARRAY))
        return r->clGetCommandQueueInfo(q, param, size, value, size_ret);
    if (param == CL_QUEUE_PROPERTIES) {
        cl_command_queue_properties p;
        cl_int rc = r->clGetCommandQueueInfo(q, param, sizeof p, &p, NULL);
        if (rc != CL_SUCCESS) return r->clGetCommandQueueInfo(q, param, size, value, size_ret);
        p &= ~(cl_command_queue_properties)CL_QUEUE_PROFILING_ENABLE;
        return answer(&p, sizeof p, size, value, size_ret);
    }
    pthread_mutex_lock(&props_lock);
    struct app_props *p = props_list;
    while (p && p->queue != q) p = p->next;
    cl_int rc = p ? answer(p->props, p->bytes, size, value, size_ret)
                  : answer(NULL, 0, size, value, size_ret); /* made with clCreateCommandQueue: none */
    pthread_mutex_unlock(&props_lock);
    return rc;
}

void profiled_release_queue(const struct cl_api *r, cl_command_queue q)
{
    cl_uint refs = 0;
    if (r->clGetCommandQueueInfo(q, CL_QUEUE_REFERENCE_COUNT, sizeof refs, &refs, NULL) != CL_SUCCESS || refs != 1)
        return;
    profile_queue_released(q); /* the handle may come back as another queue */
    pthread_mutex_lock(&props_lock);
    for (struct app_props **at = &props_list; *at; at = &(*at)->next)
        if ((*at)->queue == q) {
            struct app_props *gone = *at;
            *at = gone->next;
            free(gone);
            break;
        }
    pthread_mutex_unlock(&props_lock);
}

int profiled_hidden(const struct cl_api *r, cl_event ev,
                    cl_int (*event_info)(cl_event, cl_event_info, size_t, void *, size_t *))
{
    cl_command_queue q = NULL;
    (void)r;
    return event_info(ev, CL_EVENT_COMMAND_QUEUE, sizeof q, &q, NULL) == CL_SUCCESS && q && profile_queue_forced(q);
}

void profiled_launch(const struct cl_api *r, const struct profile_api *api, cl_command_queue q, cl_kernel kernel,
                     cl_event ev)
{
    char name[256];
    if (r->clGetKernelInfo(kernel, CL_KERNEL_FUNCTION_NAME, sizeof name, name, NULL) != CL_SUCCESS)
        snprintf(name, sizeof name, "(unnamed kernel)");
    if (ev) profile_launch(api, ev, name, PROFILE_KERNEL, q);
    else profile_untimed(name, PROFILE_KERNEL);
}
