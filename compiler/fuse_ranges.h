/* fuse_ranges.h — the ND-range rules of a fused launch, in one place for
 * both sides of the fuser: libclshim-llvm.so checks its request with them
 * (compiler/llvm/fuse.c, step 1), and the batcher (fusion/flaunch.c) checks
 * the held kernels with them before anything is compiled or built, so a
 * sequence refused for its ranges alone costs no compile and no failed
 * build. Header-only (static inline): the two libraries share no object.
 *
 * The rules (docs/fusion.md, "Different work dimensions"):
 *   - one work_dim: one global offset, local sizes all absent or all
 *     equal and dividing every global size; the fused range is the largest
 *     global size per dimension;
 *   - different work_dims ("remapped" over one 1-D range): no local sizes,
 *     no offsets, one number of work-items; only where the route remaps
 *     work-items (`remap`: the IR routes; generated OpenCL C does not).
 */
#ifndef CLSHIM_FUSE_RANGES_H
#define CLSHIM_FUSE_RANGES_H

#include <stdio.h>

#include "common/error.h"
#include "compiler/llvm_api.h"

struct fuse_ranges {
    size_t fused_gs[3]; /* the fused global size (remapped: the work-items, then 1, 1) */
    int has_local;      /* the kernels give a local size */
    int linear;         /* the work dimensions differ: remapped over one 1-D range */
};

static inline size_t fuse_work_items(const struct fuse_kernel *k)
{
    size_t n = 1;
    for (unsigned d = 0; d < k->work_dim; d++) n *= k->global_size[d];
    return n;
}

/* Checks the ranges of kernels[0..n) (work_dim already 1..3). 0 with *out
 * filled; CLSHIM_EINVAL (a global size of 0) or CLSHIM_EUNSUPPORTED (not
 * fusable as launched), the reason in `why`. */
static inline int fuse_ranges_check(const struct fuse_kernel *ks, size_t n, int remap, struct fuse_ranges *out,
                                    char *why, size_t why_len)
{
    const struct fuse_kernel *k0 = &ks[0];
    out->fused_gs[0] = out->fused_gs[1] = out->fused_gs[2] = 0;
    out->has_local = out->linear = 0;
    for (size_t i = 0; i < n; i++) out->linear |= ks[i].work_dim != k0->work_dim;
    for (size_t i = 0; i < n; i++) {
        const struct fuse_kernel *k = &ks[i];
        int has_local = 0;
        for (unsigned d = 0; d < 3; d++) {
            size_t gs = d < k->work_dim ? k->global_size[d] : 1;
            if (gs == 0) return snprintf(why, why_len, "kernel '%s' has global size 0", k->name), CLSHIM_EINVAL;
            if (out->linear) {
                if (k->local_size[d] || k->global_offset[d])
                    return snprintf(why, why_len, "the kernels have different work dimensions and kernel '%s' "
                                    "(work_dim %u) has a %s: work-items are remapped only without local sizes "
                                    "and global offsets", k->name, k->work_dim,
                                    k->local_size[d] ? "local size" : "global offset"), CLSHIM_EUNSUPPORTED;
                continue;
            }
            if (k->global_offset[d] != k0->global_offset[d])
                return snprintf(why, why_len, "kernels '%s' and '%s' have different global offsets", k0->name,
                                k->name), CLSHIM_EUNSUPPORTED;
            if (k->local_size[d] != k0->local_size[d])
                return snprintf(why, why_len, "kernels '%s' and '%s' have different local sizes", k0->name,
                                k->name), CLSHIM_EUNSUPPORTED;
            if (d < k->work_dim && k->local_size[d]) has_local = 1;
            if (gs > out->fused_gs[d]) out->fused_gs[d] = gs;
        }
        if (out->linear) {
            if (fuse_work_items(k) != fuse_work_items(k0))
                return snprintf(why, why_len, "kernels '%s' (work_dim %u, %zu work-items) and '%s' (work_dim %u, "
                                "%zu work-items) have different work dimensions and numbers of work-items: not "
                                "remapped", k0->name, k0->work_dim, fuse_work_items(k0), k->name, k->work_dim,
                                fuse_work_items(k)), CLSHIM_EUNSUPPORTED;
            continue;
        }
        if (i == 0) out->has_local = has_local;
        for (unsigned d = 0; has_local && d < k->work_dim; d++)
            if (!k->local_size[d] || k->global_size[d] % k->local_size[d])
                return snprintf(why, why_len, "kernel '%s': local size does not divide the global size", k->name),
                       CLSHIM_EUNSUPPORTED;
    }
    if (out->linear && !remap)
        return snprintf(why, why_len, "the kernels have different work dimensions: generated OpenCL C does not "
                        "remap work-items (the IR route does)"), CLSHIM_EUNSUPPORTED;
    if (out->linear) {
        out->fused_gs[0] = fuse_work_items(k0);
        out->fused_gs[1] = out->fused_gs[2] = 1;
    }
    return 0;
}

#endif
