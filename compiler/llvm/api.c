/* api.c — the function table libclshim-llvm.so exports (compiler/llvm_api.h).
 *
 * The only exported symbol is clshim_llvm_api(); everything else in the
 * module is hidden (-fvisibility=hidden and compiler/llvm/exports.map). The
 * entries check their arguments, clear the out-parameters and forward to the
 * translator glue (spirv_glue.cpp), the fuser (fuse.c) or the PTX route (ptx.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "compiler/llvm/glue.h"
#include "compiler/llvm_api.h"

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

/* Route (a) in a child process: LLVM's NVPTX back end ends the process on
 * some inputs (report_fatal_error), which must not be the application's.
 * The child sends back the result's fields, then the PTX. */
struct ptx_reply {
    uint32_t sm, unmatched_count;
    char unmatched[256];
};

static int ptx_in_child(void *arg, void **out, size_t *out_size, char *err, size_t err_len)
{
    struct ptx_result res;
    int rc = ptx_from_spir(arg, &res);
    if (rc) {
        snprintf(err, err_len, "%s", res.reason);
        return rc;
    }
    struct ptx_reply head = {res.sm, res.unmatched_count, {0}};
    memcpy(head.unmatched, res.unmatched, sizeof head.unmatched);
    char *buf = malloc(sizeof head + res.ptx_len + 1);
    if (!buf) return CLSHIM_ENOMEM;
    memcpy(buf, &head, sizeof head);
    memcpy(buf + sizeof head, res.ptx, res.ptx_len + 1);
    free(res.ptx);
    *out = buf;
    *out_size = sizeof head + res.ptx_len + 1;
    return 0;
}

static int api_spir_to_ptx(const struct ptx_request *req, struct ptx_result *res)
{
    memset(res, 0, sizeof *res);
    if (!req || !req->bitcode || !req->size) {
        snprintf(res->reason, sizeof res->reason, "spir_to_ptx: missing module");
        return CLSHIM_EINVAL;
    }
    void *out = NULL;
    size_t n = 0;
    int rc = glue_isolated(ptx_in_child, (void *)req, "PTX lowering (route (a))", &out, &n, res->reason,
                           sizeof res->reason);
    if (rc) return rc;
    struct ptx_reply head;
    if (n < sizeof head + 1) {
        free(out);
        snprintf(res->reason, sizeof res->reason, "PTX lowering (route (a)) sent a short reply");
        return CLSHIM_EINVAL;
    }
    memcpy(&head, out, sizeof head);
    res->sm = head.sm;
    res->unmatched_count = head.unmatched_count;
    memcpy(res->unmatched, head.unmatched, sizeof res->unmatched);
    res->unmatched[sizeof res->unmatched - 1] = '\0';
    res->ptx_len = n - sizeof head - 1;
    res->ptx = malloc(res->ptx_len + 1);
    if (!res->ptx) {
        free(out);
        return CLSHIM_ENOMEM;
    }
    memcpy(res->ptx, (char *)out + sizeof head, res->ptx_len);
    res->ptx[res->ptx_len] = '\0';
    free(out);
    return 0;
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
    .spir_to_ptx = api_spir_to_ptx,
};

__attribute__((visibility("default"))) const struct clshim_llvm_api *clshim_llvm_api(void)
{
    return &api_table;
}
