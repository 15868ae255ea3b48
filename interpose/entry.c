/* entry.c — the OpenCL entry points clshim defines.
 *
 * Thin by design: each wrapper resolves the real function once (entry_real),
 * hands the call to the module that owns it when the shim is enabled, and
 * otherwise forwards it unchanged — same arguments, same return value, same
 * out-parameters. The logic lives in cache/ and fusion/.
 */
#include <pthread.h>
#include <string.h>

#include "cache/driver_caches.h"
#include "program/program.h"
#include "common/config.h"
#include "common/extstr.h"
#include "common/log.h"
#include "common/profile.h"
#include "fusion/batch.h"
#include "CL/clshim_ext.h"
#include "interpose/entry.h"

int entry_initialized;
int entry_enabled;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

/* At load time, so the driver finds the variables however early the
 * program makes its first OpenCL call (clGetPlatformIDs goes straight to
 * the loader, and the driver reads them while it initialises). */
__attribute__((constructor)) static void set_driver_caches(void)
{
    const struct clshim_config *cfg = config_get();
    if (!cfg->disable) driver_caches_apply(cfg);
}

static void init_modules(void)
{
    real_resolve();
    const struct clshim_config *cfg = config_get();
    /* real_defers(): another clshim copy closer to the driver intercepts
     * (modes combined, docs/modes.md); this one only forwards. */
    if (!cfg->disable && !real_defers()) {
        pc_init(&real_table);
        profile_init();
        entry_enabled = 1;
    }
    log_msg(LOG_DEBUG, "clshim %s active%s", CLSHIM_VERSION, entry_enabled ? "" : " (disabled: pass-through)");
    driver_caches_report();
    __atomic_store_n(&entry_initialized, 1, __ATOMIC_RELEASE);
}

void entry_init(void) { pthread_once(&init_once, init_modules); }

cl_int entry_missing(const char *name)
{
    real_missing(name);
    return CL_INVALID_OPERATION;
}

void *entry_missing_ptr(const char *name, cl_int *errcode_ret)
{
    real_missing(name);
    if (errcode_ret) *errcode_ret = CL_INVALID_OPERATION;
    return NULL;
}

#define NEED_INT(name) if (!r->name) return entry_missing(#name)
#define NEED_PTR(name) if (!r->name) return entry_missing_ptr(#name, errcode_ret)

/* ---- programs ------------------------------------------------------------ */

SHIM_EXPORT cl_program clCreateProgramWithSource(cl_context context, cl_uint count, const char **strings,
                                                 const size_t *lengths, cl_int *errcode_ret)
{
    const struct cl_api *r = entry_real();
    NEED_PTR(clCreateProgramWithSource);
    if (!entry_enabled || !context || !count || !strings)
        return r->clCreateProgramWithSource(context, count, strings, lengths, errcode_ret);
    for (cl_uint i = 0; i < count; i++)
        if (!strings[i]) return r->clCreateProgramWithSource(context, count, strings, lengths, errcode_ret);
    return pc_create_with_source(context, count, strings, lengths, errcode_ret);
}

SHIM_EXPORT cl_program clCreateProgramWithIL(cl_context context, const void *il, size_t length,
                                             cl_int *errcode_ret)
{
    const struct cl_api *r = entry_real();
    if (!entry_enabled || !context || !il || !length) {
        NEED_PTR(clCreateProgramWithIL);
        return r->clCreateProgramWithIL(context, il, length, errcode_ret);
    }
    return pc_create_with_il(context, il, length, errcode_ret);
}

/* clCreateProgramWithILKHR, handed out by clGetExtensionFunctionAddress*. */
static cl_program CL_API_CALL create_program_with_il_khr(cl_context context, const void *il, size_t length,
                                                         cl_int *errcode_ret)
{
    return clCreateProgramWithIL(context, il, length, errcode_ret);
}

SHIM_EXPORT cl_int clBuildProgram(cl_program program, cl_uint num_devices, const cl_device_id *device_list,
                                  const char *options, void(CL_CALLBACK *pfn_notify)(cl_program, void *),
                                  void *user_data)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clBuildProgram);
    if (!entry_enabled || !program)
        return r->clBuildProgram(program, num_devices, device_list, options, pfn_notify, user_data);
    int armed = fusion_hot() && fusion_init(r, entry_enabled) > 0;
    if (armed) fusion_build_begin();
    cl_int rc = pc_build(program, num_devices, device_list, options, armed && fusion_wants_arg_info(program),
                         pfn_notify, user_data);
    if (armed) fusion_build_end();
    return rc;
}

SHIM_EXPORT cl_int clCompileProgram(cl_program program, cl_uint num_devices, const cl_device_id *device_list,
                                    const char *options, cl_uint num_input_headers,
                                    const cl_program *input_headers, const char **header_include_names,
                                    void(CL_CALLBACK *pfn_notify)(cl_program, void *), void *user_data)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clCompileProgram);
    if (!entry_enabled || !program)
        return r->clCompileProgram(program, num_devices, device_list, options, num_input_headers, input_headers,
                                   header_include_names, pfn_notify, user_data);
    int armed = fusion_hot() && fusion_init(r, entry_enabled) > 0;
    if (armed) fusion_build_begin();
    cl_int rc = pc_compile(program, num_devices, device_list, options, armed && fusion_wants_arg_info(program),
                           num_input_headers, input_headers, header_include_names, pfn_notify, user_data);
    if (armed) fusion_build_end();
    return rc;
}

SHIM_EXPORT cl_program clLinkProgram(cl_context context, cl_uint num_devices, const cl_device_id *device_list,
                                     const char *options, cl_uint num_input_programs,
                                     const cl_program *input_programs,
                                     void(CL_CALLBACK *pfn_notify)(cl_program, void *), void *user_data,
                                     cl_int *errcode_ret)
{
    const struct cl_api *r = entry_real();
    NEED_PTR(clLinkProgram);
    if (!entry_enabled || !context)
        return r->clLinkProgram(context, num_devices, device_list, options, num_input_programs, input_programs,
                                pfn_notify, user_data, errcode_ret);
    int armed = fusion_hot() && fusion_init(r, entry_enabled) > 0;
    if (armed) fusion_build_begin();
    cl_program p = pc_link(context, num_devices, device_list, options, num_input_programs, input_programs, pfn_notify,
                           user_data, errcode_ret);
    if (armed) fusion_build_end();
    return p;
}

SHIM_EXPORT cl_int clGetProgramInfo(cl_program program, cl_program_info param_name, size_t param_value_size,
                                    void *param_value, size_t *param_value_size_ret)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clGetProgramInfo);
    if (!entry_enabled || !program)
        return r->clGetProgramInfo(program, param_name, param_value_size, param_value, param_value_size_ret);
    return pc_get_program_info(program, param_name, param_value_size, param_value, param_value_size_ret);
}

SHIM_EXPORT cl_int clGetProgramBuildInfo(cl_program program, cl_device_id device, cl_program_build_info param_name,
                                         size_t param_value_size, void *param_value,
                                         size_t *param_value_size_ret)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clGetProgramBuildInfo);
    if (!entry_enabled || !program)
        return r->clGetProgramBuildInfo(program, device, param_name, param_value_size, param_value,
                                        param_value_size_ret);
    return pc_get_build_info(program, device, param_name, param_value_size, param_value, param_value_size_ret);
}

SHIM_EXPORT cl_int clSetProgramSpecializationConstant(cl_program program, cl_uint spec_id, size_t spec_size,
                                                      const void *spec_value)
{
    const struct cl_api *r = entry_real();
    if (!entry_enabled || !program) {
        NEED_INT(clSetProgramSpecializationConstant);
        return r->clSetProgramSpecializationConstant(program, spec_id, spec_size, spec_value);
    }
    return pc_set_spec_constant(program, spec_id, spec_size, spec_value);
}

SHIM_EXPORT cl_int clRetainProgram(cl_program program)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clRetainProgram);
    if (!entry_enabled || !program) return r->clRetainProgram(program);
    return pc_retain_program(program);
}

SHIM_EXPORT cl_int clReleaseProgram(cl_program program)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clReleaseProgram);
    if (!entry_enabled || !program) return r->clReleaseProgram(program);
    return pc_release_program(program);
}

/* ---- kernels ------------------------------------------------------------- */

SHIM_EXPORT cl_kernel clCreateKernel(cl_program program, const char *kernel_name, cl_int *errcode_ret)
{
    const struct cl_api *r = entry_real();
    NEED_PTR(clCreateKernel);
    if (!entry_enabled || !program || !kernel_name) return r->clCreateKernel(program, kernel_name, errcode_ret);
    cl_kernel k = pc_create_kernel(program, kernel_name, errcode_ret);
    if (k && fusion_hot()) fusion_kernels_created(&k, 1);
    return k;
}

SHIM_EXPORT cl_int clCreateKernelsInProgram(cl_program program, cl_uint num_kernels, cl_kernel *kernels,
                                            cl_uint *num_kernels_ret)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clCreateKernelsInProgram);
    if (!entry_enabled || !program) return r->clCreateKernelsInProgram(program, num_kernels, kernels, num_kernels_ret);
    cl_int rc = pc_create_kernels(program, num_kernels, kernels, num_kernels_ret);
    if (rc == CL_SUCCESS && kernels && fusion_hot()) fusion_kernels_created(kernels, num_kernels);
    return rc;
}

SHIM_EXPORT cl_kernel clCloneKernel(cl_kernel source_kernel, cl_int *errcode_ret)
{
    const struct cl_api *r = entry_real();
    NEED_PTR(clCloneKernel);
    if (!entry_enabled || !source_kernel) return r->clCloneKernel(source_kernel, errcode_ret);
    cl_kernel k = pc_clone_kernel(source_kernel, errcode_ret);
    if (k && fusion_hot()) fusion_kernels_created(&k, 1);
    return k;
}

SHIM_EXPORT cl_int clGetKernelInfo(cl_kernel kernel, cl_kernel_info param_name, size_t param_value_size,
                                   void *param_value, size_t *param_value_size_ret)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clGetKernelInfo);
    if (!entry_enabled || !kernel)
        return r->clGetKernelInfo(kernel, param_name, param_value_size, param_value, param_value_size_ret);
    return pc_get_kernel_info(kernel, param_name, param_value_size, param_value, param_value_size_ret);
}

SHIM_EXPORT cl_int clRetainKernel(cl_kernel kernel)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clRetainKernel);
    if (!entry_enabled || !kernel) return r->clRetainKernel(kernel);
    return pc_retain_kernel(kernel);
}

SHIM_EXPORT cl_int clReleaseKernel(cl_kernel kernel)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clReleaseKernel);
    if (kernel && fusion_hot() && fusion_init(r, entry_enabled) > 0) fusion_release_kernel(kernel);
    if (!entry_enabled || !kernel) return r->clReleaseKernel(kernel);
    return pc_release_kernel(kernel);
}

/* ---- platforms, devices and extensions ------------------------------------ */

/* cl_clshim_kernel_fusion where clshim serves the extension API, else NULL. */
static const char *fusion_extension_name(void)
{
    return fusion_init(&real_table, entry_enabled) >= 0 && fusion_available() ? CL_CLSHIM_KERNEL_FUSION_EXTENSION_NAME
                                                                            : NULL;
}

SHIM_EXPORT cl_int clGetPlatformInfo(cl_platform_id platform, cl_platform_info param_name, size_t param_value_size,
                                     void *param_value, size_t *param_value_size_ret)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clGetPlatformInfo);
    const char *fusion = entry_enabled && platform && extstr_param(param_name) ? fusion_extension_name() : NULL;
    if (!fusion)
        return r->clGetPlatformInfo(platform, param_name, param_value_size, param_value, param_value_size_ret);
    return extstr_platform(r, platform, param_name, &fusion, 1, param_value_size, param_value,
                           param_value_size_ret);
}

SHIM_EXPORT cl_int clGetDeviceInfo(cl_device_id device, cl_device_info param_name, size_t param_value_size,
                                   void *param_value, size_t *param_value_size_ret)
{
    const struct cl_api *r = entry_real();
    NEED_INT(clGetDeviceInfo);
    if (!entry_enabled || !device)
        return r->clGetDeviceInfo(device, param_name, param_value_size, param_value, param_value_size_ret);
    return pc_get_device_info(device, param_name, param_value_size, param_value, param_value_size_ret,
                              extstr_param(param_name) ? fusion_extension_name() : NULL);
}

/* Extension functions clshim itself provides, or NULL. */
static void *own_extension(const char *name)
{
    if (!entry_enabled || !name) return NULL;
    if (!strcmp(name, "clCreateProgramWithILKHR") && config_get()->spirv) return (void *)create_program_with_il_khr;
    if (strstr(name, "FusionCLSHIM") && fusion_init(&real_table, entry_enabled) >= 0) return fusion_extension(name);
    return NULL;
}

SHIM_EXPORT void *clGetExtensionFunctionAddressForPlatform(cl_platform_id platform, const char *func_name)
{
    const struct cl_api *r = entry_real();
    void *own = own_extension(func_name);
    if (own) return own;
    if (!r->clGetExtensionFunctionAddressForPlatform) {
        real_missing("clGetExtensionFunctionAddressForPlatform");
        return NULL;
    }
    return r->clGetExtensionFunctionAddressForPlatform(platform, func_name);
}

SHIM_EXPORT void *clGetExtensionFunctionAddress(const char *func_name)
{
    const struct cl_api *r = entry_real();
    void *own = own_extension(func_name);
    if (own) return own;
    if (!r->clGetExtensionFunctionAddress) {
        real_missing("clGetExtensionFunctionAddress");
        return NULL;
    }
    return r->clGetExtensionFunctionAddress(func_name);
}
