/* route_a.c — SPIR-V on NVIDIA's driver through route (a) (route_a.h). */
#include "compiler/route_a.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/config.h"
#include "common/error.h"
#include "common/log.h"

#define STR2(x) #x
#define STR(x) STR2(x)

const char *route_a_key_part(void)
{
    return strcmp(config_get()->ptx_builtins, "vendor-differs-ok") ? "spirv->ptx/" STR(CLSHIM_PTX_ROUTE_VERSION)
                                                                  : "spirv->ptx/" STR(CLSHIM_PTX_ROUTE_VERSION)
                                                                    "/vendor-differs-ok";
}

/* Whether the space-separated options hold `word`. */
static int has_option(const char *options, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = options; p && (p = strstr(p, word)); p += n)
        if ((p == options || p[-1] == ' ') && (p[n] == '\0' || p[n] == ' ')) return 1;
    return 0;
}

/* CLSHIM_LIBDEVICE, else $CUDA_HOME's or /usr/local/cuda's, when readable. */
static const char *libdevice(char *path, size_t len)
{
    const char *knob = config_get()->libdevice, *cuda = getenv("CUDA_HOME");
    if (knob[0]) snprintf(path, len, "%s", knob);
    else snprintf(path, len, "%s/nvvm/libdevice/libdevice.10.bc", cuda && *cuda ? cuda : "/usr/local/cuda");
    return access(path, R_OK) == 0 ? path : NULL;
}

int route_a_ptx_sm(const struct clshim_llvm_api *api, const void *bc, size_t bc_size, uint32_t sm, const char *options,
                   char **ptx, size_t *ptx_size, char *why, size_t why_len)
{
    *ptx = NULL;
    *ptx_size = 0;
    char found[4096];
    const struct clshim_config *cfg = config_get();
    int fast = has_option(options, "-cl-fast-relaxed-math");
    struct ptx_request req = {
        .bitcode = bc,
        .size = bc_size,
        .sm = sm,
        .fast_relaxed_math = fast,
        .denorms_are_zero = fast || has_option(options, "-cl-denorms-are-zero"),
        .allow_unmatched_builtins = !strcmp(cfg->ptx_builtins, "vendor-differs-ok"),
        .libclc_path = cfg->libclc,
        .libdevice_path = libdevice(found, sizeof found),
    };
    struct ptx_result res;
    int rc = api->spir_to_ptx(&req, &res);
    if (rc) {
        snprintf(why, why_len, "route (a): %s", res.reason);
        return rc;
    }
    if (res.unmatched_count)
        LOG_ONCE(LOG_WARN, "route (a): built-ins whose results differ from NVIDIA's compile, built because "
                           "CLSHIM_PTX_BUILTINS=vendor-differs-ok: %s", res.unmatched);
    *ptx = malloc(res.ptx_len + 1);
    if (!*ptx) {
        api->free(res.ptx);
        snprintf(why, why_len, "out of memory");
        return CLSHIM_ENOMEM;
    }
    memcpy(*ptx, res.ptx, res.ptx_len + 1);
    *ptx_size = res.ptx_len + 1;
    api->free(res.ptx);
    return 0;
}
