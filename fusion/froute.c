/* froute.c — the route of a fused kernel, and route (a)'s lowering
 * (froute.h). */
#include "fusion/froute.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/device.h"
#include "common/config.h"
#include "common/error.h"
#include "common/log.h"
#include "compiler/route_a.h"

/* What q->route holds once decided: the device's part of the choice. */
enum {
    ROUTE_IR = -1,   /* CLSHIM_FUSE_ROUTE=ir, or a device with cl_khr_spir */
    ROUTE_SOURCE = 1, /* route (b) always */
    ROUTE_PTX = 2,   /* route (a) always (CLSHIM_FUSE_ROUTE=ptx) */
    ROUTE_NVIDIA = 3 /* a device that takes PTX: route (a) or (b) per fusion */
};

/* CLSHIM_FUSE_PTX_TEST=SM[:DIR]: the SM (0: off) and DIR ("" when none). */
static uint32_t test_sm(const char **dir)
{
    const char *knob = config_get()->fuse_ptx_test;
    char *end = NULL;
    *dir = "";
    if (!knob || !*knob) return 0;
    errno = 0;
    unsigned long sm = strtoul(knob, &end, 10);
    if (errno || end == knob || sm == 0 || sm > 1000 || (*end && *end != ':')) {
        LOG_ONCE(LOG_WARN, "CLSHIM_FUSE_PTX_TEST=%s: expected SM[:DIR] (e.g. 90:/tmp/ptx); ignored", knob);
        return 0;
    }
    if (*end == ':') *dir = end + 1;
    return (uint32_t)sm;
}

static const struct device_info *device_of(const struct fq *q)
{
    /* A table without the device queries (the batcher's fuzz target) has no device. */
    return fb()->real->clGetDeviceInfo && fb()->real->clGetPlatformInfo ? device_info(fb()->real, q->dev) : NULL;
}

int fr_takes_ptx(const struct fq *q)
{
    const char *dir;
    if (test_sm(&dir)) return 1;
    const struct device_info *info = device_of(q);
    return info && info->takes_ptx;
}

uint32_t fr_sm(const struct fq *q)
{
    const char *dir;
    uint32_t sm = test_sm(&dir);
    if (sm) return sm;
    const struct device_info *info = device_of(q);
    return info ? info->nv_sm : 0;
}

const char *fr_key_part(void)
{
    return route_a_key_part();
}

static int device_route(const struct fq *q)
{
    const char *route = config_get()->fuse_route;
    if (route && !strcmp(route, "ir")) return ROUTE_IR;
    if (route && !strcmp(route, "source")) return ROUTE_SOURCE;
    if (route && !strcmp(route, "ptx")) return ROUTE_PTX;
    if (fr_takes_ptx(q)) return ROUTE_NVIDIA;
    const struct device_info *info = device_of(q);
    return info && !info->has_spir ? ROUTE_SOURCE : ROUTE_IR;
}

int fr_route(struct fq *q, int flags)
{
    if (!q->route) q->route = device_route(q);
    switch (q->route) {
    case ROUTE_SOURCE:
        return FB_SOURCE;
    case ROUTE_PTX:
        return FB_PTX;
    case ROUTE_NVIDIA:
        if (flags & FB_INTERNAL) return FB_PTX; /* route (b) cannot keep intermediates in registers */
        for (uint32_t i = 0; i < q->nheld; i++)
            if (q->held[i].rec->from_il) return FB_PTX; /* no source to generate from */
        return FB_SOURCE;
    default:
        return 0;
    }
}

int fr_fallback(const struct fq *q, int flags, const char *why)
{
    for (uint32_t i = 0; i < q->nheld; i++)
        if (q->held[i].rec->from_il) return 0; /* route (b) needs the source: the original kernels run */
    fb_log_kind("fusion of %s..%s: %s; generated OpenCL C (route (b)) instead%s%s", q->held[0].rec->name,
                q->held[q->nheld - 1].rec->name, why,
                flags & FB_INTERNAL ? ", which stores every intermediate (internal dropped)" : "",
                flags & FB_CONST ? ", and passes every scalar as an argument (const dropped)" : "");
    return 1;
}

int fr_lower(const struct fq *q, const struct clshim_llvm_api *api, const void *bc, size_t size,
             const char *fused_name, uint32_t nparams, const char *options, char **ptx, size_t *ptx_size,
             uint8_t **is_buf, char *why, size_t why_len)
{
    *ptx = NULL;
    *is_buf = NULL;
    struct kernel_info info;
    char err[256] = "";
    int rc = api->kernel_info(bc, size, fused_name, &info, err, sizeof err);
    if (rc) return snprintf(why, why_len, "route (a): the fused kernel's parameters: %s", err), rc;
    if (info.num_params != nparams) {
        api->free(info.params);
        return snprintf(why, why_len, "route (a): the fused kernel has %u parameters, not %u",
                        (unsigned)info.num_params, (unsigned)nparams), CLSHIM_EINVAL;
    }
    if (!(*is_buf = malloc(nparams ? nparams : 1))) {
        api->free(info.params);
        return snprintf(why, why_len, "out of memory"), CLSHIM_ENOMEM;
    }
    for (uint32_t p = 0; p < nparams; p++)
        (*is_buf)[p] = info.params[p].addr_space == 1 || info.params[p].addr_space == 2;
    api->free(info.params);
    rc = route_a_ptx_sm(api, bc, size, fr_sm(q), options, ptx, ptx_size, why, why_len);
    if (rc) {
        free(*is_buf);
        *is_buf = NULL;
    }
    return rc;
}

int fr_test_refusal(const char *label, const char *ptx, size_t ptx_len, char *why, size_t why_len)
{
    const char *dir;
    uint32_t sm = test_sm(&dir);
    if (!sm) return 0;
    char path[4096] = "";
    if (*dir) {
        snprintf(path, sizeof path, "%s/%s.ptx", dir, label);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(ptx, 1, ptx_len, f) != ptx_len) snprintf(path, sizeof path, "(not written: %s)", dir);
        if (f) fclose(f);
    }
    snprintf(why, why_len, "route (a): PTX for sm_%u made%s%s, but this device does not load PTX "
             "(CLSHIM_FUSE_PTX_TEST)", (unsigned)sm, path[0] ? ": " : "", path);
    return 1;
}
