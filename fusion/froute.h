/* froute.h — which route a fused kernel takes, and route (a)'s part of
 * building it. Used by fusion/flaunch.c only (fusion/batch.h is the
 * module's manual; docs/fusion.md "Routes" is the user's).
 *
 * The routes:
 *   IR        (no route flag) a fused SPIR module, for drivers with
 *             cl_khr_spir (PoCL);
 *   route (b) FB_SOURCE: generated OpenCL C calling the original kernels
 *             (fusion/fuse_source.h), built by the driver: bit-identical by
 *             construction, but it needs the program's source and stores
 *             every intermediate (no `internal`);
 *   route (a) FB_PTX: clshim's fused IR (`internal` and `const` honoured)
 *             lowered to PTX (compiler/route_a.h), which NVIDIA's driver loads
 *             with clCreateProgramWithBinary. Results are bit-identical where
 *             the built-ins are matched to NVIDIA's (docs/spirv.md); an
 *             unmatched one is refused unless CLSHIM_PTX_BUILTINS opts in.
 *
 * Selection (fr_route): CLSHIM_FUSE_ROUTE=ir|source|ptx takes that route.
 * Under auto: IR where the device has cl_khr_spir; on a device that takes
 * PTX (device_info()->takes_ptx, or CLSHIM_FUSE_PTX_TEST) route (a) when a
 * kernel's program came from IL (no source exists) or the plan asks for
 * `internal` (route (b) cannot internalise), else route (b); on any other
 * device route (b). The device's part is decided once per queue (q->route),
 * the rest per fusion from the flags and the held kernels (no driver call).
 *
 * Fallback: when route (a) refuses a sequence, fr_fallback says whether
 * route (b) can take it instead (every held kernel from source; `internal`
 * and `const` are then dropped, with one line); otherwise the batcher's
 * refusal line is logged and the original kernels run.
 *
 * The test mode (CLSHIM_FUSE_PTX_TEST=SM[:DIR]) treats any device as an
 * NVIDIA one of compute capability SM up to the point where the PTX is made
 * and cached (apart from the device, see flaunch.c), writes each fused PTX
 * to DIR, and then refuses the launch (fr_test_refusal) since the device
 * cannot load PTX. It primes a cache here for a GPU machine that has
 * neither LLVM nor clang (tests/compat/nvidia_route_a.sh --pack).
 */
#ifndef CLSHIM_FROUTE_H
#define CLSHIM_FROUTE_H

#include <stddef.h>
#include <stdint.h>

#include "fusion/batch_int.h"
#include "compiler/llvm_api.h"

/* The route flag for fusing q's held kernels with the plan options `flags`:
 * 0 (IR), FB_SOURCE or FB_PTX. Caller holds q->lock. */
int fr_route(struct fq *q, int flags);

/* After route (a) refused q's held kernels with `why`: 1 when route (b) is
 * to be tried instead (logged once, with what is dropped), else 0. */
int fr_fallback(const struct fq *q, int flags, const char *why);

/* Whether q's device loads PTX: NVIDIA's, or any under the test mode. */
int fr_takes_ptx(const struct fq *q);

/* The compute capability route (a) makes PTX for on q's device (the test
 * mode's SM there), major*10+minor; 0: unknown (LLVM's newest). */
uint32_t fr_sm(const struct fq *q);

/* The key part of route (a)'s code: its version and the built-in policy
 * (route_a_key_part). */
const char *fr_key_part(void);

/* Route (a) in make(): the fused SPIR module `bc` (kernel `fused_name`,
 * `nparams` parameters) as PTX for q's device, built with `options`, and
 * per parameter whether it is a buffer (__global or __constant pointer, from
 * the module's kernel_arg_addr_space: the driver gives no argument info for
 * PTX). 0 with *ptx (NUL-terminated; *ptx_size counts the NUL) and *is_buf
 * (malloc'd), else a clshim_err with the reason in `why`:
 * CLSHIM_EUNSUPPORTED when route (a) refuses the module. */
int fr_lower(const struct fq *q, const struct clshim_llvm_api *api, const void *bc, size_t size,
             const char *fused_name, uint32_t nparams, const char *options, char **ptx, size_t *ptx_size,
             uint8_t **is_buf, char *why, size_t why_len);

/* Under the test mode: writes `ptx` to DIR/<label>.ptx (when DIR is set),
 * puts the refusal in `why` and returns 1; otherwise 0. */
int fr_test_refusal(const char *label, const char *ptx, size_t ptx_len, char *why, size_t why_len);

#endif
