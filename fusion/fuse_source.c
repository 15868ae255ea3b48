/* fuse_source.c — the fused kernel as generated OpenCL C (route (b); see
 * fuse_source.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "fusion/fuse_source.h"

struct text {
    char *p;
    size_t len, cap;
    int oom;
};

static void add(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(struct text *t, const char *fmt, ...)
{
    if (t->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->p ? t->p + t->len : NULL, t->p ? t->cap - t->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->oom = 1;
            return;
        }
        if (t->p && t->len + (size_t)n < t->cap) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = t->cap ? t->cap : 4096;
        while (cap <= t->len + (size_t)n) cap *= 2;
        char *p = realloc(t->p, cap);
        if (!p) {
            t->oom = 1;
            return;
        }
        t->p = p;
        t->cap = cap;
    }
}

static void add_bytes(struct text *t, const char *s, size_t n)
{
    add(t, "%.*s", (int)n, s);
}

static int occurs(const char *hay, size_t len, const char *needle)
{
    return memmem(hay, len, needle, strlen(needle)) != NULL;
}

/* The fused parameter that kernel i's parameter j receives; -1 when none. */
static int param_of(const struct fuse_request *req, const struct fuse_result *res, uint32_t i, uint32_t j)
{
    for (uint32_t p = 0; p < res->num_params; p++)
        if (res->param_kernel[p] == i && res->param_index[p] == j) return (int)p;
    uint32_t cls = req->kernels[i].arg_class[j];
    for (uint32_t p = 0; p < res->num_params; p++)
        if (req->kernels[res->param_kernel[p]].arg_class[res->param_index[p]] == cls) return (int)p;
    return -1;
}

static int guarded(const struct fuse_request *req, const struct fuse_result *res, uint32_t i)
{
    const struct fuse_kernel *k = &req->kernels[i];
    for (uint32_t d = 0; d < k->work_dim; d++)
        if (k->global_size[d] < res->global_size[d]) return 1;
    return 0;
}

static int refuse(char *why, size_t why_len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int refuse(char *why, size_t why_len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, why_len, fmt, ap);
    va_end(ap);
    return CLSHIM_EUNSUPPORTED;
}

static int check(const struct fuse_request *req, const struct fuse_result *res, const struct kernel_info *info,
                 char *why, size_t why_len)
{
    int has_local = res->local_size[0] || res->local_size[1] || res->local_size[2];
    for (uint32_t i = 0; i < req->num_kernels; i++) {
        const struct fuse_kernel *k = &req->kernels[i];
        if (info[i].num_params != k->num_args)
            return refuse(why, why_len, "kernel '%s': %u parameters in the IR, %u arguments set", k->name,
                          (unsigned)info[i].num_params, (unsigned)k->num_args);
        if (info[i].kernel_scope_locals)
            return refuse(why, why_len, "kernel '%s' declares __local variables at kernel scope "
                          "(generated OpenCL C cannot call it)", k->name);
        if (!guarded(req, res, i)) continue;
        uint32_t bad = KI_CALLS_GLOBAL_SIZE | KI_CALLS_NUM_GROUPS | KI_CALLS_LINEAR | (has_local ? 0 : KI_CALLS_LOCAL);
        if (info[i].calls & bad)
            return refuse(why, why_len, "kernel '%s' runs over a smaller range than the fused one and its "
                          "program queries the range (generated OpenCL C cannot remap that)", k->name);
    }
    for (uint32_t p = 0; p < res->num_params; p++) {
        const struct kernel_param_info *fp = &info[res->param_kernel[p]].params[res->param_index[p]];
        for (uint32_t i = 0; i < req->num_kernels; i++)
            for (uint32_t j = 0; j < req->kernels[i].num_args; j++) {
                if (param_of(req, res, i, j) != (int)p) continue;
                const struct kernel_param_info *kp = &info[i].params[j];
                if (kp->addr_space != fp->addr_space || strcmp(kp->type, fp->type))
                    return refuse(why, why_len, "kernel '%s' parameter %u (%s) receives the same argument "
                                  "as a parameter of type %s", req->kernels[i].name, (unsigned)j, kp->type,
                                  fp->type);
            }
    }
    for (uint32_t i = 0; i < req->num_kernels; i++)
        for (uint32_t j = 0; j < req->kernels[i].num_args; j++)
            if (param_of(req, res, i, j) < 0)
                return refuse(why, why_len, "kernel '%s' parameter %u has no fused parameter", req->kernels[i].name,
                              (unsigned)j);
    return 0;
}

static void add_param(struct text *t, const struct kernel_param_info *p, const char *name, uint32_t index)
{
    static const char *const space[] = {"", "__global ", "__constant ", "__local "};
    add(t, "%s", p->addr_space < 4 ? space[p->addr_space] : "");
    if (p->qual & KI_CONST) add(t, "const ");
    if (p->qual & KI_VOLATILE) add(t, "volatile ");
    add(t, "%s %s%s_%u", p->type, p->qual & KI_RESTRICT ? "restrict " : "", name, (unsigned)index);
}

int fs_generate(const char *source, size_t len, const struct fuse_request *req, const struct fuse_result *res,
                const struct kernel_info *info, struct fs_program *out, char *why, size_t why_len)
{
    memset(out, 0, sizeof *out);
    int rc = check(req, res, info, why, why_len);
    if (rc) return rc;
    char name[32];
    for (unsigned n = 0;; n++) {
        snprintf(name, sizeof name, "clshim_f%u", n);
        if (!occurs(source, len, name)) break;
    }
    struct text t = {0};
    add_bytes(&t, source, len);
    add(&t, "\n\n/* clshim: the kernels ");
    for (uint32_t i = 0; i < req->num_kernels; i++) add(&t, "%s%s", i ? "+" : "", req->kernels[i].name);
    add(&t, " as one (generated, route (b)) */\n__kernel ");
    const uint32_t *wg = info[0].reqd_wg;
    if (wg[0] || wg[1] || wg[2])
        add(&t, "__attribute__((reqd_work_group_size(%u, %u, %u))) ", (unsigned)wg[0], (unsigned)wg[1],
            (unsigned)wg[2]);
    add(&t, "void %s(", name);
    for (uint32_t p = 0; p < res->num_params; p++) {
        if (p) add(&t, ", ");
        add_param(&t, &info[res->param_kernel[p]].params[res->param_index[p]], name, p);
    }
    add(&t, ")\n{\n");
    for (uint32_t i = 0; i < req->num_kernels; i++) {
        const struct fuse_kernel *k = &req->kernels[i];
        if (i && res->barrier_inserted) add(&t, "    barrier(CLK_GLOBAL_MEM_FENCE);\n");
        add(&t, "    ");
        if (guarded(req, res, i)) {
            add(&t, "if (");
            for (uint32_t d = 0, first = 1; d < k->work_dim; d++) {
                if (k->global_size[d] >= res->global_size[d]) continue;
                add(&t, "%sget_global_id(%u) < (size_t)%zu", first ? "" : " && ", (unsigned)d,
                    k->global_offset[d] + k->global_size[d]);
                first = 0;
            }
            add(&t, ") ");
        }
        add(&t, "%s(", k->name);
        for (uint32_t j = 0; j < k->num_args; j++)
            add(&t, "%s%s_%d", j ? ", " : "", name, param_of(req, res, i, j));
        add(&t, ");\n");
    }
    add(&t, "}\n");
    out->is_buf = malloc(res->num_params ? res->num_params : 1);
    if (t.oom || !out->is_buf) {
        free(t.p);
        free(out->is_buf);
        memset(out, 0, sizeof *out);
        snprintf(why, why_len, "out of memory");
        return CLSHIM_ENOMEM;
    }
    for (uint32_t p = 0; p < res->num_params; p++) {
        uint32_t as = info[res->param_kernel[p]].params[res->param_index[p]].addr_space;
        out->is_buf[p] = as == 1 || as == 2;
    }
    out->text = t.p;
    out->len = t.len;
    snprintf(out->name, sizeof out->name, "%s", name);
    return 0;
}

void fs_program_free(struct fs_program *p)
{
    free(p->text);
    free(p->is_buf);
    memset(p, 0, sizeof *p);
}

int fs_fuse(const struct clshim_llvm_api *api, const char *source, size_t len, const struct fuse_request *req,
            struct fuse_result *res, struct fs_program *out, char *why, size_t why_len)
{
    memset(out, 0, sizeof *out);
    memset(res, 0, sizeof *res);
    struct fuse_request analysis = *req;
    analysis.internal = 0;
    analysis.consts = NULL; /* the generated kernel passes every scalar as an argument */
    analysis.num_consts = 0;
    int rc = api->fuse(&analysis, res);
    if (rc) {
        snprintf(why, why_len, "%s", res->reason[0] ? res->reason : clshim_strerror(rc));
        return rc;
    }
    api->free(res->bitcode);
    res->bitcode = NULL;
    for (size_t i = 0; i < req->num_kernels && !rc; i++)
        if (req->kernels[i].work_dim != res->work_dim)
            rc = refuse(why, why_len, "the kernels have different work dimensions: generated OpenCL C does "
                        "not remap work-items (the IR route does)");
    struct kernel_info *info = calloc(req->num_kernels, sizeof *info);
    if (!info) {
        snprintf(why, why_len, "out of memory");
        rc = CLSHIM_ENOMEM;
    }
    for (size_t i = 0; i < req->num_kernels && !rc; i++) {
        const struct fuse_kernel *k = &req->kernels[i];
        char err[256] = "";
        rc = api->kernel_info(k->module_bc, k->module_size, k->name, &info[i], err, sizeof err);
        if (rc) snprintf(why, why_len, "kernel '%s': %s", k->name, err);
    }
    if (!rc) rc = fs_generate(source, len, req, res, info, out, why, why_len);
    for (size_t i = 0; info && i < req->num_kernels; i++) api->free(info[i].params);
    free(info);
    if (rc) {
        api->free(res->param_kernel);
        api->free(res->param_index);
        res->param_kernel = res->param_index = NULL;
    }
    return rc;
}
