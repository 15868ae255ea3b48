/* ptx_builtins.c — which OpenCL built-ins route (a) lowers to NVIDIA's own
 * results, bit for bit (glue.h: ptx_builtin_matched).
 *
 * Route (a) takes its built-ins from libclc (ptx.c); NVIDIA's compiler has
 * its own. Where they compute the same function the same way the results
 * are identical, elsewhere they may differ in the last bits (both within
 * OpenCL's ulp bounds). tests/compat/nvidia_builtins.sh measures each
 * built-in on the GPU over 1 Mi+ inputs, special values included, under
 * each build-option set; docs/spirv.md has the table. Only what that
 * measurement found identical is listed here: a module calling anything
 * else is refused by route (a) unless the user allows differences.
 *
 * Work-item functions and synchronisation compute no floating-point
 * value; they are listed as matched whatever the options.
 */
#include <string.h>

#include "fusion/llvm/glue.h"

#define ANY 0u
#define DEFAULT_ONLY 1u  /* matched without -cl-fast-relaxed-math / -cl-denorms-are-zero */

struct builtin {
    const char *mangled;
    unsigned when;
};

static const struct builtin matched[] = {
    /* work-item functions and synchronisation */
    {"_Z13get_global_idj", ANY},
    {"_Z12get_local_idj", ANY},
    {"_Z12get_group_idj", ANY},
    {"_Z15get_global_sizej", ANY},
    {"_Z14get_local_sizej", ANY},
    {"_Z14get_num_groupsj", ANY},
    {"_Z12get_work_dimv", ANY},
    {"_Z17get_global_offsetj", ANY},
    {"_Z20get_global_linear_idv", ANY},
    {"_Z19get_local_linear_idv", ANY},
    {"_Z23get_enqueued_local_sizej", ANY},
    {"_Z7barrierj", ANY},
    {"_Z9mem_fencej", ANY},
    {"_Z14read_mem_fencej", ANY},
    {"_Z15write_mem_fencej", ANY},
};

int ptx_builtin_matched(const char *mangled, int fast_relaxed_math, int denorms_are_zero)
{
    int plain = !fast_relaxed_math && !denorms_are_zero;
    for (size_t i = 0; i < sizeof matched / sizeof matched[0]; i++)
        if (!strcmp(matched[i].mangled, mangled)) return matched[i].when == ANY || plain;
    return 0;
}
