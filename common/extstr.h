/* extstr.h — extension lists with clshim's own names added.
 *
 * Where clshim provides an extension itself (cl_khr_il_program through
 * SPIR-V translation, cl_clshim_kernel_fusion), the platform's and devices'
 * extension queries answer the driver's list with those names appended, each
 * only if the driver does not list it already: CL_*_EXTENSIONS as a
 * space-separated string, CL_*_EXTENSIONS_WITH_VERSION as more cl_name_version
 * entries (version 1.0.0), so the two answers agree. The answer keeps the
 * query protocol: param_value_size_ret is the size of the combined answer (a
 * string's NUL included), a non-NULL param_value with a smaller
 * param_value_size gets CL_INVALID_VALUE (as drivers answer), and a driver
 * error is returned unchanged. On an internal fault (no memory) the driver
 * answers alone, with one log line.
 */
#ifndef CLSHIM_EXTSTR_H
#define CLSHIM_EXTSTR_H

#include <stddef.h>

#include "common/clapi.h"

/* Nonzero for the four parameters extstr answers. */
int extstr_param(cl_uint param);

/* `param` is CL_PLATFORM_EXTENSIONS or CL_PLATFORM_EXTENSIONS_WITH_VERSION
 * (resp. the CL_DEVICE_ ones); `add` holds `nadd` names, NULL entries
 * skipped. */
cl_int extstr_platform(const struct cl_api *real, cl_platform_id platform, cl_platform_info param,
                       const char *const *add, size_t nadd, size_t size, void *value, size_t *size_ret);
cl_int extstr_device(const struct cl_api *real, cl_device_id device, cl_device_info param, const char *const *add,
                     size_t nadd, size_t size, void *value, size_t *size_ret);

#endif
