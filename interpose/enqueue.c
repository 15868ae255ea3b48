/* enqueue.c — the entry points of queues, commands, kernel arguments and
 * events, for fusion (fusion/batch.h).
 *
 * The hot path: with no fusion plan and no use of the extension API,
 * fusion_armed is 0 and every wrapper here is the real call behind one
 * relaxed load (SLOW() below) — no lock, no map lookup. The first call of
 * the process sees -1 and reads the configuration once.
 */
#include <pthread.h>

#include "program/program.h"
#include "common/log.h"
#include "fusion/batch.h"
#include "interpose/entry.h"
#include "interpose/profiled.h"

#define NEED_INT(name) if (!r->name) return entry_missing(#name)
#define NEED_PTR(name) if (!r->name) return entry_missing_ptr(#name, errcode_ret)

static int armed_now(const struct cl_api *r)
{
    int a = __atomic_load_n(&fusion_armed, __ATOMIC_RELAXED);
    return a < 0 ? fusion_init(r, entry_enabled) : a;
}

#define SLOW() (__builtin_expect(fusion_hot(), 0) && armed_now(r) > 0)

/* `clshim run --profile` (common/profile.h): one relaxed load while off. */
#define PROFILING() __builtin_expect(__atomic_load_n(&profile_active, __ATOMIC_RELAXED), 0)

/* Late captures of the program cache (progcache.h): one relaxed load each
 * while nothing is pending. */
#define NOTE_ENQUEUE(kernel) if (__builtin_expect(pc_capture_pending(), 0) && entry_enabled) pc_note_enqueue(kernel)
#define SYNC_POINT(blocking) if (__builtin_expect(pc_capture_pending(), 0) && (blocking) && entry_enabled) pc_sync_point()

/* Commands other than kernels: submit what the queue holds, and replace
 * held events in the wait list. Declares w_ and slow_. */
#define WAITS_BEGIN(name, queue, nw, wl)                                 \
    struct fusion_waits w_;                                              \
    int slow_ = SLOW();                                                  \
    if (slow_) fusion_before_command((queue), (nw), (wl), &w_, #name);   \
    else {                                                               \
        w_.n = (nw);                                                     \
        w_.list = (wl);                                                  \
    }
#define WAITS_END() if (slow_) fusion_after_command(&w_)

/* ---- queues -------------------------------------------------------------- */

SHIM_EXPORT cl_command_queue clCreateCommandQueue(cl_context context, cl_device_id device,
                                                  cl_command_queue_properties properties, cl_int *errcode_ret)
{
    const struct cl_api *r = entry_real();
    NEED_PTR(clCreateCommandQueue);
    cl_command_queue q = PROFILING() ? profiled_create_queue(r, context, device, properties, errcode_ret)
                                     : r->clCreateCommandQueue(context, device, properties, errcode_ret);
    if (q && SLOW()) fusion_queue_created(q);
    return q;
}

SHIM_EXPORT cl_command_queue clCreateCommandQueueWithProperties(cl_context context, cl_device_id device,
                                                                const cl_queue_properties *properties,
                                                                cl_int *errcode_ret)
{
    const struct cl_api *r = entry_real();
    NEED_PTR(clCreateCommandQueueWithProperties);
    cl_command_queue q = PROFILING() ? profiled_create_queue_props(r, context, device, properties, errcode_ret)
                                     : r->clCreateCommandQueueWithProperties(context, device, properties, errcode_ret);
    if (q && SLOW()) fusion_queue_created(q);
    return q;
}

SHIM_EXPORT cl_int clReleaseCommandQueue(cl_command_queue queue)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clReleaseCommandQueue);
    if (queue && SLOW()) fusion_release_queue(queue);
    if (queue && PROFILING()) profiled_release_queue(r, queue);
    return r->clReleaseCommandQueue(queue);
}

SHIM_EXPORT cl_int clGetCommandQueueInfo(cl_command_queue queue, cl_command_queue_info param_name,
                                         size_t param_value_size, void *param_value, size_t *param_value_size_ret)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clGetCommandQueueInfo);
    if (queue && PROFILING())
        return profiled_queue_info(r, queue, param_name, param_value_size, param_value, param_value_size_ret);
    return r->clGetCommandQueueInfo(queue, param_name, param_value_size, param_value, param_value_size_ret);
}

SHIM_EXPORT cl_int clFlush(cl_command_queue queue)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clFlush);
    if (queue && SLOW()) {
        struct fusion_waits w;
        fusion_before_command(queue, 0, NULL, &w, "clFlush");
    }
    return r->clFlush(queue);
}

SHIM_EXPORT cl_int clFinish(cl_command_queue queue)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clFinish);
    if (queue && SLOW()) {
        struct fusion_waits w;
        fusion_before_command(queue, 0, NULL, &w, "clFinish");
    }
    cl_int rc = r->clFinish(queue);
    SYNC_POINT(rc == CL_SUCCESS);
    return rc;
}

/* ---- kernel arguments and launches ---------------------------------------- */

SHIM_EXPORT cl_int clSetKernelArg(cl_kernel kernel, cl_uint arg_index, size_t arg_size, const void *arg_value)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clSetKernelArg);
    if (kernel && SLOW()) return fusion_set_arg(kernel, arg_index, arg_size, arg_value);
    return r->clSetKernelArg(kernel, arg_index, arg_size, arg_value);
}

SHIM_EXPORT cl_int clSetKernelArgSVMPointer(cl_kernel kernel, cl_uint arg_index, const void *arg_value)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clSetKernelArgSVMPointer);
    if (kernel && SLOW()) return fusion_set_arg_svm(kernel, arg_index, arg_value);
    return r->clSetKernelArgSVMPointer(kernel, arg_index, arg_value);
}

static cl_int event_profiling(cl_event event, cl_profiling_info param_name, size_t param_value_size,
                              void *param_value, size_t *param_value_size_ret);

/* What a profiled launch's event is held and read with: clshim's own
 * entry points (a held kernel answers its share of the fused launch), the
 * driver's callback (clshim's would submit a held kernel). */
static struct profile_api profile_app_api;
static void fill_profile_api(void)
{
    profile_app_api = (struct profile_api){event_profiling, clRetainEvent, clReleaseEvent,
                                           entry_real()->clSetEventCallback};
}

/* A launch under `clshim run --profile`: with an event of clshim's own
 * where the application asked for none, timed at its completion. */
static cl_int profiled(const struct cl_api *r, cl_command_queue queue, cl_kernel kernel, cl_uint work_dim,
                       const size_t *off, const size_t *gws, const size_t *lws, cl_uint nw, const cl_event *wl,
                       cl_event *event, int task)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, fill_profile_api);
    cl_event mine = NULL, *ev = event ? event : &mine;
    cl_int rc;
    if (queue && kernel && SLOW()) rc = fusion_enqueue_kernel(queue, kernel, work_dim, off, gws, lws, nw, wl, ev, task);
    else if (task) rc = r->clEnqueueTask(queue, kernel, nw, wl, ev);
    else rc = r->clEnqueueNDRangeKernel(queue, kernel, work_dim, off, gws, lws, nw, wl, ev);
    if (rc == CL_SUCCESS) profiled_launch(r, &profile_app_api, queue, kernel, *ev);
    if (mine) clReleaseEvent(mine);
    return rc;
}

SHIM_EXPORT cl_int clEnqueueNDRangeKernel(cl_command_queue queue, cl_kernel kernel, cl_uint work_dim,
                                          const size_t *global_work_offset, const size_t *global_work_size,
                                          const size_t *local_work_size, cl_uint num_events_in_wait_list,
                                          const cl_event *event_wait_list, cl_event *event)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clEnqueueNDRangeKernel);
    NOTE_ENQUEUE(kernel);
    if (PROFILING())
        return profiled(r, queue, kernel, work_dim, global_work_offset, global_work_size, local_work_size,
                        num_events_in_wait_list, event_wait_list, event, 0);
    if (queue && kernel && SLOW())
        return fusion_enqueue_kernel(queue, kernel, work_dim, global_work_offset, global_work_size,
                                     local_work_size, num_events_in_wait_list, event_wait_list, event, 0);
    return r->clEnqueueNDRangeKernel(queue, kernel, work_dim, global_work_offset, global_work_size,
                                     local_work_size, num_events_in_wait_list, event_wait_list, event);
}

SHIM_EXPORT cl_int clEnqueueTask(cl_command_queue queue, cl_kernel kernel, cl_uint num_events_in_wait_list,
                                 const cl_event *event_wait_list, cl_event *event)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clEnqueueTask);
    NOTE_ENQUEUE(kernel);
    if (PROFILING())
        return profiled(r, queue, kernel, 1, NULL, NULL, NULL, num_events_in_wait_list, event_wait_list, event, 1);
    if (queue && kernel && SLOW())
        return fusion_enqueue_kernel(queue, kernel, 1, NULL, NULL, NULL, num_events_in_wait_list,
                                     event_wait_list, event, 1);
    return r->clEnqueueTask(queue, kernel, num_events_in_wait_list, event_wait_list, event);
}

SHIM_EXPORT cl_int clEnqueueNativeKernel(cl_command_queue queue, void(CL_CALLBACK *user_func)(void *), void *args,
                                         size_t cb_args, cl_uint num_mem_objects, const cl_mem *mem_list,
                                         const void **args_mem_loc, cl_uint nw, const cl_event *wl, cl_event *ev)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clEnqueueNativeKernel);
    WAITS_BEGIN(clEnqueueNativeKernel, queue, nw, wl);
    cl_int rc = r->clEnqueueNativeKernel(queue, user_func, args, cb_args, num_mem_objects, mem_list, args_mem_loc,
                                         w_.n, w_.list, ev);
    WAITS_END();
    return rc;
}

/* ---- buffers and images ----------------------------------------------------- */

SHIM_EXPORT cl_int clEnqueueReadBuffer(cl_command_queue queue, cl_mem buffer, cl_bool blocking, size_t offset,
                                       size_t size, void *ptr, cl_uint nw, const cl_event *wl, cl_event *ev)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clEnqueueReadBuffer);
    WAITS_BEGIN(clEnqueueReadBuffer, queue, nw, wl);
    cl_int rc = r->clEnqueueReadBuffer(queue, buffer, blocking, offset, size, ptr, w_.n, w_.list, ev);
    WAITS_END();
    SYNC_POINT(blocking && rc == CL_SUCCESS);
    return rc;
}

SHIM_EXPORT cl_int clEnqueueReadBufferRect(cl_command_queue queue, cl_mem buffer, cl_bool blocking,
                                           const size_t *buffer_origin, const size_t *host_origin,
                                           const size_t *region, size_t buffer_row_pitch, size_t buffer_slice_pitch,
                                           size_t host_row_pitch, size_t host_slice_pitch, void *ptr, cl_uint nw,
                                           const cl_event *wl, cl_event *ev)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clEnqueueReadBufferRect);
    WAITS_BEGIN(clEnqueueReadBufferRect, queue, nw, wl);
    cl_int rc = r->clEnqueueReadBufferRect(queue, buffer, blocking, buffer_origin, host_origin, region,
                                           buffer_row_pitch, buffer_slice_pitch, host_row_pitch, host_slice_pitch,
                                           ptr, w_.n, w_.list, ev);
    WAITS_END();
    SYNC_POINT(blocking && rc == CL_SUCCESS);
    return rc;
}

SHIM_EXPORT cl_int clEnqueueWriteBuffer(cl_command_queue queue, cl_mem buffer, cl_bool blocking, size_t offset,
                                        size_t size, const void *ptr, cl_uint nw, const cl_event *wl, cl_event *ev)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clEnqueueWriteBuffer);
    WAITS_BEGIN(clEnqueueWriteBuffer, queue, nw, wl);
    cl_int rc = r->clEnqueueWriteBuffer(queue, buffer, blocking, offset, size, ptr, w_.n, w_.list, ev);
    WAITS_END();
    return rc;
}

SHIM_EXPORT cl_int clEnqueueWriteBufferRect(cl_command_queue queue, cl_mem buffer, cl_bool blocking,
                                            const size_t *buffer_origin, const size_t *host_origin,
                                            const size_t *region, size_t buffer_row_pitch,
                                            size_t buffer_slice_pitch, size_t host_row_pitch,
                                            size_t host_slice_pitch, const void *ptr, cl_uint nw,
                                            const cl_event *wl, cl_event *ev)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clEnqueueWriteBufferRect);
    WAITS_BEGIN(clEnqueueWriteBufferRect, queue, nw, wl);
    cl_int rc = r->clEnqueueWriteBufferRect(queue, buffer, blocking, buffer_origin, host_origin, region,
                                            buffer_row_pitch, buffer_slice_pitch, host_row_pitch, host_slice_pitch,
                                            ptr, w_.n, w_.list, ev);
    WAITS_END();
    return rc;
}

SHIM_EXPORT cl_int clEnqueueFillBuffer(cl_command_queue queue, cl_mem buffer, const void *pattern,
                                       size_t pattern_size, size_t offset, size_t size, cl_uint nw,
                                       const cl_event *wl, cl_event *ev)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clEnqueueFillBuffer);
    WAITS_BEGIN(clEnqueueFillBuffer, queue, nw, wl);
    cl_int rc = r->clEnqueueFillBuffer(queue, buffer, pattern, pattern_size, offset, size, w_.n, w_.list, ev);
    WAITS_END();
    return rc;
}

SHIM_EXPORT cl_int clEnqueueCopyBuffer(cl_command_queue queue, cl_mem src, cl_mem dst, size_t src_offset,
                                       size_t dst_offset, size_t size, cl_uint nw, const cl_event *wl, cl_event *ev)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clEnqueueCopyBuffer);
    WAITS_BEGIN(clEnqueueCopyBuffer, queue, nw, wl);
    cl_int rc = r->clEnqueueCopyBuffer(queue, src, dst, src_offset, dst_offset, size, w_.n, w_.list, ev);
    WAITS_END();
    return rc;
}

SHIM_EXPORT cl_int clEnqueueCopyBufferRect(cl_command_queue queue, cl_mem src, cl_mem dst, const size_t *src_origin,
                                           const size_t *dst_origin, const size_t *region, size_t src_row_pitch,
                                           size_t src_slice_pitch, size_t dst_row_pitch, size_t dst_slice_pitch,
                                           cl_uint nw, const cl_event *wl, cl_event *ev)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clEnqueueCopyBufferRect);
    WAITS_BEGIN(clEnqueueCopyBufferRect, queue, nw, wl);
    cl_int rc = r->clEnqueueCopyBufferRect(queue, src, dst, src_origin, dst_origin, region, src_row_pitch,
                                           src_slice_pitch, dst_row_pitch, dst_slice_pitch, w_.n, w_.list, ev);
    WAITS_END();
    return rc;
}

SHIM_EXPORT cl_int clEnqueueReadImage(cl_command_queue queue, cl_mem image, cl_bool blocking, const size_t *origin,
                                      const size_t *region, size_t row_pitch, size_t slice_pitch, void *ptr,
                                      cl_uint nw, const cl_event *wl, cl_event *ev)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clEnqueueReadImage);
    WAITS_BEGIN(clEnqueueReadImage, queue, nw, wl);
    cl_int rc = r->clEnqueueReadImage(queue, image, blocking, origin, region, row_pitch, slice_pitch, ptr, w_.n,
                                      w_.list, ev);
    WAITS_END();
    SYNC_POINT(blocking && rc == CL_SUCCESS);
    return rc;
}

SHIM_EXPORT cl_int clEnqueueWriteImage(cl_command_queue queue, cl_mem image, cl_bool blocking, const size_t *origin,
                                       const size_t *region, size_t row_pitch, size_t slice_pitch, const void *ptr,
                                       cl_uint nw, const cl_event *wl, cl_event *ev)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clEnqueueWriteImage);
    WAITS_BEGIN(clEnqueueWriteImage, queue, nw, wl);
    cl_int rc = r->clEnqueueWriteImage(queue, image, blocking, origin, region, row_pitch, slice_pitch, ptr, w_.n,
                                       w_.list, ev);
    WAITS_END();
    return rc;
}

SHIM_EXPORT cl_int clEnqueueFillImage(cl_command_queue queue, cl_mem image, const void *fill_color,
                                      const size_t *origin, const size_t *region, cl_uint nw, const cl_event *wl,
                                      cl_event *ev)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clEnqueueFillImage);
    WAITS_BEGIN(clEnqueueFillImage, queue, nw, wl);
    cl_int rc = r->clEnqueueFillImage(queue, image, fill_color, origin, region, w_.n, w_.list, ev);
    WAITS_END();
    return rc;
}

SHIM_EXPORT cl_int clEnqueueCopyImage(cl_command_queue queue, cl_mem src, cl_mem dst, const size_t *src_origin,
                                      const size_t *dst_origin, const size_t *region, cl_uint nw,
                                      const cl_event *wl, cl_event *ev)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clEnqueueCopyImage);
    WAITS_BEGIN(clEnqueueCopyImage, queue, nw, wl);
    cl_int rc = r->clEnqueueCopyImage(queue, src, dst, src_origin, dst_origin, region, w_.n, w_.list, ev);
    WAITS_END();
    return rc;
}

SHIM_EXPORT cl_int clEnqueueCopyImageToBuffer(cl_command_queue queue, cl_mem src, cl_mem dst,
                                              const size_t *src_origin, const size_t *region, size_t dst_offset,
                                              cl_uint nw, const cl_event *wl, cl_event *ev)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clEnqueueCopyImageToBuffer);
    WAITS_BEGIN(clEnqueueCopyImageToBuffer, queue, nw, wl);
    cl_int rc = r->clEnqueueCopyImageToBuffer(queue, src, dst, src_origin, region, dst_offset, w_.n, w_.list, ev);
    WAITS_END();
    return rc;
}

SHIM_EXPORT cl_int clEnqueueCopyBufferToImage(cl_command_queue queue, cl_mem src, cl_mem dst, size_t src_offset,
                                              const size_t *dst_origin, const size_t *region, cl_uint nw,
                                              const cl_event *wl, cl_event *ev)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clEnqueueCopyBufferToImage);
    WAITS_BEGIN(clEnqueueCopyBufferToImage, queue, nw, wl);
    cl_int rc = r->clEnqueueCopyBufferToImage(queue, src, dst, src_offset, dst_origin, region, w_.n, w_.list, ev);
    WAITS_END();
    return rc;
}

SHIM_EXPORT void *clEnqueueMapBuffer(cl_command_queue queue, cl_mem buffer, cl_bool blocking, cl_map_flags flags,
                                     size_t offset, size_t size, cl_uint nw, const cl_event *wl, cl_event *ev,
                                     cl_int *errcode_ret)
{
    const struct cl_api *r = entry_real();
    NEED_PTR(clEnqueueMapBuffer);
    WAITS_BEGIN(clEnqueueMapBuffer, queue, nw, wl);
    void *p = r->clEnqueueMapBuffer(queue, buffer, blocking, flags, offset, size, w_.n, w_.list, ev, errcode_ret);
    WAITS_END();
    SYNC_POINT(blocking && p);
    return p;
}

SHIM_EXPORT void *clEnqueueMapImage(cl_command_queue queue, cl_mem image, cl_bool blocking, cl_map_flags flags,
                                    const size_t *origin, const size_t *region, size_t *row_pitch,
                                    size_t *slice_pitch, cl_uint nw, const cl_event *wl, cl_event *ev,
                                    cl_int *errcode_ret)
{
    const struct cl_api *r = entry_real();
    NEED_PTR(clEnqueueMapImage);
    WAITS_BEGIN(clEnqueueMapImage, queue, nw, wl);
    void *p = r->clEnqueueMapImage(queue, image, blocking, flags, origin, region, row_pitch, slice_pitch, w_.n,
                                   w_.list, ev, errcode_ret);
    WAITS_END();
    SYNC_POINT(blocking && p);
    return p;
}

SHIM_EXPORT cl_int clEnqueueUnmapMemObject(cl_command_queue queue, cl_mem memobj, void *mapped_ptr, cl_uint nw,
                                           const cl_event *wl, cl_event *ev)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clEnqueueUnmapMemObject);
    WAITS_BEGIN(clEnqueueUnmapMemObject, queue, nw, wl);
    cl_int rc = r->clEnqueueUnmapMemObject(queue, memobj, mapped_ptr, w_.n, w_.list, ev);
    WAITS_END();
    return rc;
}

SHIM_EXPORT cl_int clEnqueueMigrateMemObjects(cl_command_queue queue, cl_uint num_mem_objects,
                                              const cl_mem *mem_objects, cl_mem_migration_flags flags, cl_uint nw,
                                              const cl_event *wl, cl_event *ev)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clEnqueueMigrateMemObjects);
    WAITS_BEGIN(clEnqueueMigrateMemObjects, queue, nw, wl);
    cl_int rc = r->clEnqueueMigrateMemObjects(queue, num_mem_objects, mem_objects, flags, w_.n, w_.list, ev);
    WAITS_END();
    return rc;
}

/* ---- markers, barriers, waits ----------------------------------------------- */

SHIM_EXPORT cl_int clEnqueueMarkerWithWaitList(cl_command_queue queue, cl_uint nw, const cl_event *wl, cl_event *ev)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clEnqueueMarkerWithWaitList);
    WAITS_BEGIN(clEnqueueMarkerWithWaitList, queue, nw, wl);
    cl_int rc = r->clEnqueueMarkerWithWaitList(queue, w_.n, w_.list, ev);
    WAITS_END();
    return rc;
}

SHIM_EXPORT cl_int clEnqueueBarrierWithWaitList(cl_command_queue queue, cl_uint nw, const cl_event *wl,
                                                cl_event *ev)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clEnqueueBarrierWithWaitList);
    WAITS_BEGIN(clEnqueueBarrierWithWaitList, queue, nw, wl);
    cl_int rc = r->clEnqueueBarrierWithWaitList(queue, w_.n, w_.list, ev);
    WAITS_END();
    return rc;
}

SHIM_EXPORT cl_int clEnqueueMarker(cl_command_queue queue, cl_event *ev)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clEnqueueMarker);
    WAITS_BEGIN(clEnqueueMarker, queue, 0, NULL);
    (void)w_;
    return r->clEnqueueMarker(queue, ev);
}

SHIM_EXPORT cl_int clEnqueueBarrier(cl_command_queue queue)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clEnqueueBarrier);
    WAITS_BEGIN(clEnqueueBarrier, queue, 0, NULL);
    (void)w_;
    return r->clEnqueueBarrier(queue);
}

SHIM_EXPORT cl_int clEnqueueWaitForEvents(cl_command_queue queue, cl_uint num_events, const cl_event *event_list)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clEnqueueWaitForEvents);
    WAITS_BEGIN(clEnqueueWaitForEvents, queue, num_events, event_list);
    cl_int rc = r->clEnqueueWaitForEvents(queue, w_.n, w_.list);
    WAITS_END();
    return rc;
}

/* ---- shared virtual memory ---------------------------------------------------- */

SHIM_EXPORT cl_int clEnqueueSVMFree(cl_command_queue queue, cl_uint num_svm_pointers, void *svm_pointers[],
                                    void(CL_CALLBACK *pfn_free_func)(cl_command_queue, cl_uint, void *[], void *),
                                    void *user_data, cl_uint nw, const cl_event *wl, cl_event *ev)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clEnqueueSVMFree);
    WAITS_BEGIN(clEnqueueSVMFree, queue, nw, wl);
    cl_int rc = r->clEnqueueSVMFree(queue, num_svm_pointers, svm_pointers, pfn_free_func, user_data, w_.n, w_.list,
                                    ev);
    WAITS_END();
    return rc;
}

SHIM_EXPORT cl_int clEnqueueSVMMemcpy(cl_command_queue queue, cl_bool blocking, void *dst, const void *src,
                                      size_t size, cl_uint nw, const cl_event *wl, cl_event *ev)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clEnqueueSVMMemcpy);
    WAITS_BEGIN(clEnqueueSVMMemcpy, queue, nw, wl);
    cl_int rc = r->clEnqueueSVMMemcpy(queue, blocking, dst, src, size, w_.n, w_.list, ev);
    WAITS_END();
    return rc;
}

SHIM_EXPORT cl_int clEnqueueSVMMemFill(cl_command_queue queue, void *svm_ptr, const void *pattern,
                                       size_t pattern_size, size_t size, cl_uint nw, const cl_event *wl,
                                       cl_event *ev)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clEnqueueSVMMemFill);
    WAITS_BEGIN(clEnqueueSVMMemFill, queue, nw, wl);
    cl_int rc = r->clEnqueueSVMMemFill(queue, svm_ptr, pattern, pattern_size, size, w_.n, w_.list, ev);
    WAITS_END();
    return rc;
}

SHIM_EXPORT cl_int clEnqueueSVMMap(cl_command_queue queue, cl_bool blocking, cl_map_flags flags, void *svm_ptr,
                                   size_t size, cl_uint nw, const cl_event *wl, cl_event *ev)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clEnqueueSVMMap);
    WAITS_BEGIN(clEnqueueSVMMap, queue, nw, wl);
    cl_int rc = r->clEnqueueSVMMap(queue, blocking, flags, svm_ptr, size, w_.n, w_.list, ev);
    WAITS_END();
    return rc;
}

SHIM_EXPORT cl_int clEnqueueSVMUnmap(cl_command_queue queue, void *svm_ptr, cl_uint nw, const cl_event *wl,
                                     cl_event *ev)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clEnqueueSVMUnmap);
    WAITS_BEGIN(clEnqueueSVMUnmap, queue, nw, wl);
    cl_int rc = r->clEnqueueSVMUnmap(queue, svm_ptr, w_.n, w_.list, ev);
    WAITS_END();
    return rc;
}

SHIM_EXPORT cl_int clEnqueueSVMMigrateMem(cl_command_queue queue, cl_uint num_svm_pointers,
                                          const void **svm_pointers, const size_t *sizes,
                                          cl_mem_migration_flags flags, cl_uint nw, const cl_event *wl,
                                          cl_event *ev)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clEnqueueSVMMigrateMem);
    WAITS_BEGIN(clEnqueueSVMMigrateMem, queue, nw, wl);
    cl_int rc = r->clEnqueueSVMMigrateMem(queue, num_svm_pointers, svm_pointers, sizes, flags, w_.n, w_.list, ev);
    WAITS_END();
    return rc;
}

/* ---- events --------------------------------------------------------------------- */

SHIM_EXPORT cl_int clWaitForEvents(cl_uint num_events, const cl_event *event_list)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clWaitForEvents);
    if (SLOW()) fusion_host_wait(num_events, event_list);
    WAITS_BEGIN(clWaitForEvents, NULL, num_events, event_list);
    cl_int rc = r->clWaitForEvents(w_.n, w_.list);
    WAITS_END();
    SYNC_POINT(rc == CL_SUCCESS);
    return rc;
}

SHIM_EXPORT cl_int clGetEventInfo(cl_event event, cl_event_info param_name, size_t param_value_size,
                                  void *param_value, size_t *param_value_size_ret)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clGetEventInfo);
    if (event && SLOW())
        return fusion_get_event_info(event, param_name, param_value_size, param_value, param_value_size_ret);
    return r->clGetEventInfo(event, param_name, param_value_size, param_value, param_value_size_ret);
}

/* A launch's times as the application reads them, a held kernel's too. */
static cl_int event_profiling(cl_event event, cl_profiling_info param_name, size_t param_value_size,
                              void *param_value, size_t *param_value_size_ret)
{
    const struct cl_api *r = entry_real();
    if (event && SLOW())
        return fusion_get_event_profiling_info(event, param_name, param_value_size, param_value,
                                               param_value_size_ret);
    return r->clGetEventProfilingInfo(event, param_name, param_value_size, param_value, param_value_size_ret);
}

SHIM_EXPORT cl_int clGetEventProfilingInfo(cl_event event, cl_profiling_info param_name, size_t param_value_size,
                                           void *param_value, size_t *param_value_size_ret)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clGetEventProfilingInfo);
    /* Profiling the application did not ask for answers as without it. */
    if (event && PROFILING() && profiled_hidden(r, event, clGetEventInfo)) return CL_PROFILING_INFO_NOT_AVAILABLE;
    if (event && SLOW())
        return fusion_get_event_profiling_info(event, param_name, param_value_size, param_value,
                                               param_value_size_ret);
    return r->clGetEventProfilingInfo(event, param_name, param_value_size, param_value, param_value_size_ret);
}

SHIM_EXPORT cl_int clSetEventCallback(cl_event event, cl_int type,
                                      void(CL_CALLBACK *pfn_notify)(cl_event, cl_int, void *), void *user_data)
{
    /* The plain driver runs a command whose event the application asks to
     * hear from (it may wait for the callback and call nothing else), so a
     * held one is submitted first, whatever the callback type. */
    const struct cl_api *r = entry_real();
    NEED_INT(clSetEventCallback);
    if (event && SLOW()) fusion_event_callback(event);
    return r->clSetEventCallback(event, type, pfn_notify, user_data);
}

SHIM_EXPORT cl_int clRetainEvent(cl_event event)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clRetainEvent);
    if (event && SLOW()) return fusion_retain_event(event);
    return r->clRetainEvent(event);
}

SHIM_EXPORT cl_int clReleaseEvent(cl_event event)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clReleaseEvent);
    if (event && SLOW()) return fusion_release_event(event);
    return r->clReleaseEvent(event);
}

/* ---- memory objects --------------------------------------------------------------- */

SHIM_EXPORT cl_int clReleaseMemObject(cl_mem memobj)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clReleaseMemObject);
    if (memobj && SLOW()) fusion_release_mem(memobj);
    return r->clReleaseMemObject(memobj);
}
