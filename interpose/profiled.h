/* profiled.h — the entry points' part in `clshim run --profile`
 * (interpose/profiled.c; the recorder is common/profile.h). Each function
 * is called only while profile_active. */
#ifndef CLSHIM_INTERPOSE_PROFILED_H
#define CLSHIM_INTERPOSE_PROFILED_H

#include "common/clapi.h"
#include "common/profile.h"

/* The queue, made with profiling on; remembered when the application did
 * not ask for it. */
cl_command_queue profiled_create_queue(const struct cl_api *r, cl_context context, cl_device_id device,
                                       cl_command_queue_properties properties, cl_int *errcode_ret);
cl_command_queue profiled_create_queue_props(const struct cl_api *r, cl_context context, cl_device_id device,
                                             const cl_queue_properties *properties, cl_int *errcode_ret);
/* clGetCommandQueueInfo as the application made the queue. */
cl_int profiled_queue_info(const struct cl_api *r, cl_command_queue q, cl_command_queue_info param, size_t size,
                           void *value, size_t *size_ret);
/* Before the real release: forgets a queue whose last reference it is. */
void profiled_release_queue(const struct cl_api *r, cl_command_queue q);
/* Whether an event is of a queue whose profiling the application did not
 * ask for: its profiling queries answer CL_PROFILING_INFO_NOT_AVAILABLE. */
int profiled_hidden(const struct cl_api *r, cl_event ev,
                    cl_int (*event_info)(cl_event, cl_event_info, size_t, void *, size_t *));
/* A kernel launched on q with event ev (NULL: untimed, counted). */
void profiled_launch(const struct cl_api *r, const struct profile_api *api, cl_command_queue q, cl_kernel kernel,
                     cl_event ev);

#endif
