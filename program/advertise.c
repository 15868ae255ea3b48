/* advertise.c — CLSHIM_ADVERTISE_IL: IL versions a device gains through translation.
 *
 * A device query, unlike the rest of the layer; here so its extension lists
 * stay beside the translation (il.c) that makes them true.
 */
#include "program/program_int.h"

#include <stdio.h>
#include <string.h>

#include "common/extstr.h"

#define ADVERTISED_IL "SPIR-V_1.0 SPIR-V_1.1 SPIR-V_1.2 SPIR-V_1.3 SPIR-V_1.4"

cl_int pc_get_device_info(cl_device_id dev, cl_device_info param, size_t size, void *value, size_t *size_ret,
                          const char *also)
{
    const struct clshim_config *cfg = config_get();
    const struct device_info *info = NULL;
    if (cfg->advertise_il && cfg->spirv &&
        (param == CL_DEVICE_IL_VERSION || extstr_param(param) || param == CL_DEVICE_ILS_WITH_VERSION))
        info = device_info(pc_real, dev);
    int il = info && !info->has_native_il && info->has_spir; /* clshim advertises IL here */
    if (il && param == CL_DEVICE_IL_VERSION) return answer(ADVERTISED_IL, sizeof ADVERTISED_IL, size, value, size_ret);
    if (il && param == CL_DEVICE_ILS_WITH_VERSION) {
        cl_name_version v[5];
        memset(v, 0, sizeof v);
        for (int i = 0; i < 5; i++) {
            v[i].version = CL_MAKE_VERSION(1, i, 0);
            snprintf(v[i].name, sizeof v[i].name, "SPIR-V");
        }
        return answer(v, sizeof v, size, value, size_ret);
    }
    if (extstr_param(param) && (il || also)) { /* CL_DEVICE_EXTENSIONS[_WITH_VERSION] */
        const char *add[2] = {il ? "cl_khr_il_program" : NULL, also};
        return extstr_device(pc_real, dev, param, add, 2, size, value, size_ret);
    }
    return pc_real->clGetDeviceInfo(dev, param, size, value, size_ret);
}
