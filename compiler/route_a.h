/* route_a.h — SPIR-V on NVIDIA's driver: a translated module lowered to PTX
 * (route (a), compiler/llvm/ptx.c; docs/spirv.md).
 *
 * NVIDIA's OpenCL takes neither IL nor SPIR, but loads PTX through
 * clCreateProgramWithBinary. program/il.c translates the app's SPIR-V to SPIR
 * as for other drivers; for devices whose binaries are PTX
 * (device_info()->takes_ptx) route_a_ptx_sm() then makes the PTX the driver
 * builds. Its result is the device binary program/ caches like any other,
 * under a key that names the route (route_a_key_part). */
#ifndef CLSHIM_ROUTE_A_H
#define CLSHIM_ROUTE_A_H

#include <stddef.h>
#include <stdint.h>

#include "compiler/llvm_api.h"

/* The key part that separates route (a)'s binaries from others: the route's
 * version and the built-in policy (CLSHIM_PTX_BUILTINS). */
const char *route_a_key_part(void);

/* SPIR bitcode -> PTX for compute capability `sm` (major*10+minor; 0: the
 * newest LLVM knows) with the app's build options (-cl-fast-relaxed-math,
 * -cl-denorms-are-zero select the lowering). The program layer passes the
 * lowest capability among the program's devices; fused kernels
 * (fusion/froute.c) pass theirs, and their PTX may be made on a machine
 * without the device. 0 with *ptx (NUL-terminated, free()) and *ptx_size
 * (with the NUL, as clCreateProgramWithBinary wants it); else a clshim_err
 * with the reason in why (a built-in whose results differ from NVIDIA's,
 * unless CLSHIM_PTX_BUILTINS=vendor-differs-ok; a construct the route cannot
 * lower; the lowering crashed in its child process). */
int route_a_ptx_sm(const struct clshim_llvm_api *api, const void *bc, size_t bc_size, uint32_t sm, const char *options,
                   char **ptx, size_t *ptx_size, char *why, size_t why_len);

#endif
