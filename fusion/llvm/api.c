/* api.c — the function table libclshim-llvm.so exports (fusion/llvm_api.h).
 *
 * The only exported symbol is clshim_llvm_api(); everything else in the
 * module is hidden (-fvisibility=hidden and fusion/llvm/exports.map). The
 * entries check their arguments, clear the out-parameters and forward to the
 * translator glue (spirv_glue.cpp), the fuser (fuse.c) or the PTX route (ptx.c).
 */
#include <stdio.h>
#include <stdlib.h>

#include "common/error.h"
#include "fusion/llvm/glue.h"
#include "fusion/llvm_api.h"

static int api_spirv_to_spir(const void *spirv, size_t size, const struct llvm_spec_const *consts,
                             size_t num_consts, void **bitcode, size_t *bitcode_size, char *err,
                             size_t err_len)
{
    if (err && err_len) err[0] = '\0';
    if (!bitcode || !bitcode_size || (num_consts && !consts)) {
        if (err && err_len) snprintf(err, err_len, "spirv_to_spir: missing argument");
        return CLSHIM_EINVAL;
    }
    *bitcode = NULL;
    *bitcode_size = 0;
    return glue_spirv_to_bitcode(spirv, size, consts, num_consts, bitcode, bitcode_size, err,
                                 err_len);
}

static int api_spir_to_spirv(const void *bitcode, size_t size, void **spirv, size_t *spirv_size,
                             char *err, size_t err_len)
{
    if (err && err_len) err[0] = '\0';
    if (!spirv || !spirv_size) {
        if (err && err_len) snprintf(err, err_len, "spir_to_spirv: missing argument");
        return CLSHIM_EINVAL;
    }
    *spirv = NULL;
    *spirv_size = 0;
    return glue_bitcode_to_spirv(bitcode, size, spirv, spirv_size, err, err_len);
}

static void api_set_limits(const struct llvm_limits *limits)
{
    if (limits) glue_set_translate_limits(limits->translate_timeout_ms, limits->translate_max_memory);
}

static void api_free(void *p)
{
    free(p);
}

static const struct clshim_llvm_api api_table = {
    .version = CLSHIM_LLVM_API_VERSION,
    .set_limits = api_set_limits,
    .spirv_to_spir = api_spirv_to_spir,
    .spir_to_spirv = api_spir_to_spirv,
    .fuse = fuse_kernels,
    .free = api_free,
    .kernel_info = kinfo_kernel,
    .bitcode_to_text = kinfo_text,
    .spir_to_ptx = ptx_from_spir,
};

__attribute__((visibility("default"))) const struct clshim_llvm_api *clshim_llvm_api(void)
{
    return &api_table;
}
