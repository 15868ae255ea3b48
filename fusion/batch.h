/* batch.h — queue batching: holding marked kernel sequences and fusing them.
 *
 * Design. With a fusion plan (fusion/plan.h), with automatic fusion
 * (CLSHIM_FUSION=auto: sequences seen twice are added to the plan, see
 * fusion/fauto.c) or once the application looks up the extension API
 * (include/CL/clshim_ext.h), clshim is "armed": it
 * records the arguments of the kernels that may be held (clSetKernelArg),
 * and on each in-order queue it holds back kernel enqueues that match a plan
 * sequence (or every kernel, between clStartFusionCLSHIM and
 * clCompleteFusionCLSHIM). A held enqueue keeps a snapshot of the kernel's
 * arguments, its ND-range and its wait list, and returns a user event that
 * completes when the real command carrying its work completes. When the
 * sequence is complete, the kernels are fused (compiler/llvm_api.h) into one
 * program built through the cache (pc_build_derived) and launched once;
 * otherwise — and whenever anything could observe the held work — they are
 * submitted individually, in order, exactly as the application asked
 * ("cancelled"). Unarmed, every wrapper costs one relaxed load of
 * fusion_armed and forwards.
 *
 * What cancels (submits the held kernels of a queue): clFinish, clFlush and
 * any other command on that queue (blocking or not); a kernel that breaks
 * the sequence or cannot be held; waits, status and profiling queries and
 * callback registrations on a held event; a command on another queue, or
 * clWaitForEvents, whose wait list contains a held event; release of a held
 * kernel, of a buffer a held kernel uses, or of the queue; a failed fusion;
 * clCancelFusionCLSHIM; and the queue holding work while the application
 * enqueues nothing on it for CLSHIM_FUSION_HOLD_MS (the idle timer).
 *
 * No deadlock, by construction: held work is only ever waited for through
 * (a) this queue's later commands, (b) events we hand out, or (c) buffers.
 * Every path that can start such a wait — any command on the queue, any API
 * call taking a held event, any release — first submits the held work to
 * the driver, while the queue lock guarantees that no new work is held in
 * between. Nothing the driver runs ever waits on a held command (held
 * commands are not in the driver at all), and the user events we return
 * are completed from callbacks on real events that depend only on work
 * already submitted.
 *
 * Records: kernel records live until the kernel is destroyed; queue records
 * are kept (marked dead) until exit, so an event can always reach its queue
 * safely; event records live while the application holds the event or its
 * completion is pending. Thread-safe; the queue lock is per queue.
 */
#ifndef CLSHIM_BATCH_H
#define CLSHIM_BATCH_H

#include "common/clapi.h"

/* -1 until the first armed-path call reads the configuration; 0 when
 * fusion is off; else FUSION_ARMED_* bits. */
extern int fusion_armed;
#define FUSION_ARMED_PLAN 1
#define FUSION_ARMED_EXT 2
#define FUSION_ARMED_AUTO 4

/* The hot-path check: nonzero when a wrapper must take the slow path. */
static inline int fusion_hot(void) { return __atomic_load_n(&fusion_armed, __ATOMIC_RELAXED) != 0; }

/* Reads the plan once (CLSHIM_FUSION_PLAN, CLSHIM_FUSE): an invalid plan is
 * reported once and leaves fusion off. `enabled` is 0 under CLSHIM_DISABLE.
 * Idempotent and thread-safe; returns the armed bits. */
int fusion_init(const struct cl_api *real, int enabled);

/* Whether a build of `prog` gets -cl-kernel-arg-info added (fusion needs
 * to know which arguments are buffers; PoCL answers clGetKernelArgInfo only
 * for programs built with it or without options): only while armed, and
 * under a plan only when the program's source or IL names a planned kernel,
 * so arming does not change the builds (and cache keys) of other programs.
 * With the extension API armed any kernel may be held: every program. */
int fusion_wants_arg_info(cl_program prog);

/* ---- the slow paths of the wrappers (only when fusion_hot()) ---- */

cl_int fusion_set_arg(cl_kernel k, cl_uint index, size_t size, const void *value);
cl_int fusion_set_arg_svm(cl_kernel k, cl_uint index, const void *value);
/* clEnqueueNDRangeKernel (task = 0) and clEnqueueTask (task = 1, dim 1, all sizes 1). */
cl_int fusion_enqueue_kernel(cl_command_queue q, cl_kernel k, cl_uint dim, const size_t *off, const size_t *gws,
                             const size_t *lws, cl_uint nw, const cl_event *wl, cl_event *ev, int task);

/* Before any other command (q may be NULL: clWaitForEvents): cancels q's
 * held kernels and those of queues holding events of the wait list, and
 * replaces events we handed out by the real events carrying their work. */
struct fusion_waits {
    cl_uint n;
    const cl_event *list;
    cl_event *owned;
    cl_event buf[8];
};
void fusion_before_command(cl_command_queue q, cl_uint n, const cl_event *list, struct fusion_waits *w,
                           const char *what);
void fusion_after_command(struct fusion_waits *w);
/* clWaitForEvents, before fusion_before_command: a host wait ends the
 * automatic-fusion run of kernels on every queue it waits for (a sync,
 * as clFinish is). */
void fusion_host_wait(cl_uint n, const cl_event *list);

/* Around clBuildProgram, clCompileProgram and clLinkProgram while armed:
 * the application is not idle while it builds (the idle timer, fidle.c). */
void fusion_build_begin(void);
void fusion_build_end(void);
/* clSetEventCallback, any callback type: the plain driver would run the
 * command the application now waits to hear from, so a held one is
 * submitted. */
void fusion_event_callback(cl_event e);
cl_int fusion_get_event_info(cl_event e, cl_event_info param, size_t size, void *value, size_t *size_ret);
cl_int fusion_get_event_profiling_info(cl_event e, cl_profiling_info param, size_t size, void *value,
                                       size_t *size_ret);
cl_int fusion_retain_event(cl_event e);
cl_int fusion_release_event(cl_event e);
void fusion_release_mem(cl_mem m);
void fusion_release_kernel(cl_kernel k);
void fusion_release_queue(cl_command_queue q);
/* A new queue or new kernels: a record kept under the same handle belongs
 * to a destroyed object whose handle the driver reused (records of objects
 * the driver still references at the application's last release linger),
 * and is dropped. */
void fusion_queue_created(cl_command_queue q);
void fusion_kernels_created(const cl_kernel *kernels, cl_uint n);

/* The extension functions by name (clStartFusionCLSHIM, ...), or NULL.
 * Looking one up arms argument recording for every kernel. */
void *fusion_extension(const char *name);

/* After fusion_init(): nonzero when fusion_extension() serves the
 * extension API (the shim is enabled), so cl_clshim_kernel_fusion is
 * reported in the platform's and devices' extensions. Arms nothing. */
int fusion_available(void);

#endif
