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

static void api_set_helper(const char *tool, char *const *env)
{
    glue_set_helper(tool, env);
}

static void api_free(void *p)
{
    free(p);
}

/* Route (a) in a child process: LLVM's NVPTX back end ends the process on
 * some inputs (report_fatal_error), which must not be the application's.
 * The request's head is ptx_wire and the two library paths (each
 * NUL-terminated, empty for none), its body the bitcode; the child sends
 * back the result's fields (ptx_reply), then the PTX. */
struct ptx_wire {
    uint32_t sm, fast_relaxed_math, denorms_are_zero, allow_unmatched_builtins;
};
struct ptx_reply {
    uint32_t sm, unmatched_count;
    char unmatched[256];
};

int ptx_child_work(const void *head, size_t head_len, const void *body, size_t body_len, void **out,
                   size_t *out_size, char *err, size_t err_len)
{
    struct ptx_wire w;
    const char *paths = (const char *)head + sizeof w, *end = (const char *)head + head_len;
    const char *second = head_len > sizeof w ? memchr(paths, 0, (size_t)(end - paths)) : NULL;
    if (!second || !memchr(second + 1, 0, (size_t)(end - second - 1))) {
        snprintf(err, err_len, "PTX lowering: malformed request");
        return CLSHIM_EINVAL;
    }
    memcpy(&w, head, sizeof w);
    second++;
    struct ptx_request req = {
        .bitcode = body,
        .size = body_len,
        .sm = w.sm,
        .fast_relaxed_math = (int)w.fast_relaxed_math,
        .denorms_are_zero = (int)w.denorms_are_zero,
        .allow_unmatched_builtins = (int)w.allow_unmatched_builtins,
        .libclc_path = *paths ? paths : NULL,
        .libdevice_path = *second ? second : NULL,
    };
    struct ptx_result res;
    int rc = ptx_from_spir(&req, &res);
    if (rc) {
        snprintf(err, err_len, "%s", res.reason);
        return rc;
    }
    struct ptx_reply reply = {res.sm, res.unmatched_count, {0}};
    memcpy(reply.unmatched, res.unmatched, sizeof reply.unmatched);
    char *buf = malloc(sizeof reply + res.ptx_len + 1);
    if (!buf) return CLSHIM_ENOMEM;
    memcpy(buf, &reply, sizeof reply);
    memcpy(buf + sizeof reply, res.ptx, res.ptx_len + 1);
    free(res.ptx);
    *out = buf;
    *out_size = sizeof reply + res.ptx_len + 1;
    return 0;
}

/* ptx_wire and the paths, for the child (malloc'd, *len set). */
static char *ptx_request_head(const struct ptx_request *req, size_t *len)
{
    const char *clc = req->libclc_path ? req->libclc_path : "", *dev = req->libdevice_path ? req->libdevice_path : "";
    struct ptx_wire w = {req->sm, (uint32_t)req->fast_relaxed_math, (uint32_t)req->denorms_are_zero,
                         (uint32_t)req->allow_unmatched_builtins};
    size_t a = strlen(clc) + 1, b = strlen(dev) + 1;
    char *head = malloc(sizeof w + a + b);
    if (!head) return NULL;
    memcpy(head, &w, sizeof w);
    memcpy(head + sizeof w, clc, a);
    memcpy(head + sizeof w + a, dev, b);
    *len = sizeof w + a + b;
    return head;
}

static int api_spir_to_ptx(const struct ptx_request *req, struct ptx_result *res)
{
    memset(res, 0, sizeof *res);
    if (!req || !req->bitcode || !req->size) {
        snprintf(res->reason, sizeof res->reason, "spir_to_ptx: missing module");
        return CLSHIM_EINVAL;
    }
    size_t head_len = 0;
    char *head = ptx_request_head(req, &head_len);
    if (!head) {
        snprintf(res->reason, sizeof res->reason, "out of memory");
        return CLSHIM_ENOMEM;
    }
    void *out = NULL;
    size_t n = 0;
    int rc = glue_isolated(GLUE_TO_PTX, head, head_len, req->bitcode, req->size, "PTX lowering (route (a))", &out,
                           &n, res->reason, sizeof res->reason);
    free(head);
    if (rc) return rc;
    struct ptx_reply reply;
    if (n < sizeof reply + 1) {
        free(out);
        snprintf(res->reason, sizeof res->reason, "PTX lowering (route (a)) sent a short reply");
        return CLSHIM_EINVAL;
    }
    memcpy(&reply, out, sizeof reply);
    res->sm = reply.sm;
    res->unmatched_count = reply.unmatched_count;
    memcpy(res->unmatched, reply.unmatched, sizeof res->unmatched);
    res->unmatched[sizeof res->unmatched - 1] = '\0';
    res->ptx_len = n - sizeof reply - 1;
    res->ptx = malloc(res->ptx_len + 1);
    if (!res->ptx) {
        free(out);
        return CLSHIM_ENOMEM;
    }
    memcpy(res->ptx, (char *)out + sizeof reply, res->ptx_len);
    res->ptx[res->ptx_len] = '\0';
    free(out);
    return 0;
}

static const struct clshim_llvm_api api_table = {
    .version = CLSHIM_LLVM_API_VERSION,
    .set_limits = api_set_limits,
    .set_helper = api_set_helper,
    .child_main = glue_child_main,
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
