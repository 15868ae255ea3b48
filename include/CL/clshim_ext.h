/* clshim_ext.h — clshim's OpenCL extension: user-driven kernel fusion.
 *
 * Programs that opt in look the functions up at run time and fall back when
 * clshim is absent (the lookup then returns NULL):
 *
 *     clStartFusionCLSHIM_fn start = (clStartFusionCLSHIM_fn)
 *         clGetExtensionFunctionAddressForPlatform(platform, "clStartFusionCLSHIM");
 *     if (start) start(queue);
 *     clEnqueueNDRangeKernel(queue, k1, ...);   // held, not yet run
 *     clEnqueueNDRangeKernel(queue, k2, ...);
 *     clCompleteFusionCLSHIM(queue, NULL, &ev);  // one fused launch
 *
 * Look the functions up before setting the arguments of the kernels to
 * fuse: the lookup arms argument recording, and a kernel whose arguments
 * were set before cannot be held until they are all set again.
 *
 * clStartFusionCLSHIM(queue): from now on, kernels enqueued on the in-order
 * `queue` are held (each enqueue still returns a usable event). Returns
 * CL_SUCCESS; CL_INVALID_COMMAND_QUEUE for NULL; CL_INVALID_OPERATION when
 * fusion is already active on the queue. On an out-of-order queue nothing is
 * held (logged once) and Complete returns a marker event.
 *
 * clCompleteFusionCLSHIM(queue, properties, event): fuses the held kernels
 * into one launch, or — when fusion is refused or fails, or fewer than two
 * kernels are held — submits them individually. Fusion mode ends. `event`
 * (may be NULL) receives an event that completes when all the held work has
 * completed (the fused launch's event, or a marker). `properties` is NULL
 * or a 0-terminated list of (name, value) pairs:
 *     CL_FUSION_FORCE_BARRIER_CLSHIM, 0 or 1 — fuse even where a barrier is
 *     needed (see docs/fusion.md for what the caller promises).
 *     CL_FUSION_INTERNAL_CLSHIM, 0 or 1 — every buffer written by one held
 *     kernel and read by a later one is not needed after the sequence: the
 *     fused kernel may keep it in registers and never store it, so its
 *     contents afterwards are undefined (docs/fusion.md, "Internalisation").
 *     CL_FUSION_CONST_CLSHIM, 0 or 1 — bake the held kernels' scalar
 *     arguments into the fused kernel as constants; other values make
 *     another fused program (docs/fusion.md, "Constant propagation").
 *     CL_FUSION_INTERNAL_ARGS_CLSHIM, (cl_properties)(uintptr_t) a string
 *     "KERNEL.ARG,..." — the same promise for the named buffers only (the
 *     syntax of the plan option internal=: a held kernel's name and its
 *     parameter's name or 0-based index, e.g. "k1.t1,k2.1"); the string is
 *     read during the call only. A name the held kernels lack makes the
 *     fusion refused (the kernels then run unfused).
 * Returns CL_SUCCESS, CL_INVALID_COMMAND_QUEUE, CL_INVALID_VALUE (bad
 * properties), or the error of the enqueue that carried the work.
 *
 * clCancelFusionCLSHIM(queue): submits the held kernels individually, in
 * order, and ends fusion mode. CL_SUCCESS (also when not in fusion mode).
 *
 * A Complete or Cancel with no Start before it on the queue (since the
 * queue's last Complete or Cancel) does nothing more than the above; the
 * first such call on each queue logs one "clshim:" warning line. A Start
 * whose fusion mode ended early (below) still counts as a Start.
 *
 * clQueryFusionCLSHIM(queue, in_fusion_mode): sets *in_fusion_mode to
 * CL_TRUE while the queue is in fusion mode — kernels enqueued on it now
 * are held, and clStartFusionCLSHIM would return CL_INVALID_OPERATION —
 * else CL_FALSE (never started, completed, cancelled, ended early, or an
 * out-of-order queue). No side effect. Returns CL_SUCCESS;
 * CL_INVALID_COMMAND_QUEUE for NULL or a queue the driver does not know;
 * CL_INVALID_VALUE when in_fusion_mode is NULL.
 *
 * The capability: under clshim (and only there), where the extension API is
 * served, CL_PLATFORM_EXTENSIONS and CL_DEVICE_EXTENSIONS name
 * cl_clshim_kernel_fusion (and the _WITH_VERSION lists, at 1.0.0), so a
 * library can test for it before looking the functions up.
 *
 * Fusion mode also ends early whenever the held work could be observed (a
 * sync, another command on the queue, a wait on a held event, ...): the
 * kernels are then submitted individually and Complete returns a marker.
 */
#ifndef CL_CLSHIM_EXT_H
#define CL_CLSHIM_EXT_H

/* The Khronos headers' own default, set here so that a program including
 * this header first compiles without their "not defined" message; a program
 * that chose a version before including this keeps it. */
#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 300
#endif
#include <CL/cl.h>

#ifdef __cplusplus
extern "C" {
#endif

#define cl_clshim_kernel_fusion 1
#define CL_CLSHIM_KERNEL_FUSION_EXTENSION_NAME "cl_clshim_kernel_fusion"

typedef cl_ulong cl_fusion_properties_clshim; /* a cl_properties list */

#define CL_FUSION_FORCE_BARRIER_CLSHIM 0x4C01
#define CL_FUSION_INTERNAL_CLSHIM 0x4C02
#define CL_FUSION_CONST_CLSHIM 0x4C03
#define CL_FUSION_INTERNAL_ARGS_CLSHIM 0x4C04

typedef cl_int(CL_API_CALL *clStartFusionCLSHIM_fn)(cl_command_queue queue);
typedef cl_int(CL_API_CALL *clCompleteFusionCLSHIM_fn)(cl_command_queue queue,
                                                       const cl_fusion_properties_clshim *properties,
                                                       cl_event *event);
typedef cl_int(CL_API_CALL *clCancelFusionCLSHIM_fn)(cl_command_queue queue);
typedef cl_int(CL_API_CALL *clQueryFusionCLSHIM_fn)(cl_command_queue queue, cl_bool *in_fusion_mode);

#ifdef __cplusplus
}
#endif

#endif
