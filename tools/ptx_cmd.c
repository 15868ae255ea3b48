/* ptx_cmd.c — `clshim ptx`: a program as route (a) builds it for NVIDIA,
 * offline.
 *
 *   clshim ptx [--sm N] [--options "BUILD OPTIONS"] [--builtins=vendor-differs-ok]
 *              [--libdevice PATH] [-o FILE] FILE.cl|FILE.spv
 *
 * OpenCL C is compiled to clshim's IR (fusion/frontend.h) with the build
 * options; a SPIR-V module (recognised by its magic number) is translated
 * (llvm_api.h spirv_to_spir). Either is lowered to PTX for sm_N (default:
 * LLVM's newest, sm_86) by llvm_api.h spir_to_ptx, as clshim would do on
 * an NVIDIA device, and printed. The options -cl-fast-relaxed-math and
 * -cl-denorms-are-zero select the lowering. A module calling built-ins
 * whose results differ from NVIDIA's own compile is refused
 * ("clshim ptx: refused: ...", exit 1) unless --builtins=vendor-differs-ok,
 * which prints them on standard error and goes on. The math functions whose
 * NVIDIA code is CUDA's come from libdevice: --libdevice PATH, default
 * $CUDA_HOME (or /usr/local/cuda)/nvvm/libdevice/libdevice.10.bc where it
 * exists; --libdevice "" uses none. Bad usage exits 2.
 * `clshim fuse --emit=ptx` lowers a fused module the same way (ptx_print).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fusion/frontend.h"
#include "compiler/llvmload.h"
#include "tools/commands.h"
#include "tools/help.h"

static int usage(void)
{
    fprintf(stderr, "usage: clshim ptx [--sm N] [--options \"BUILD OPTIONS\"] [--builtins=vendor-differs-ok] "
                    "[--libdevice PATH] [-o FILE] FILE.cl|FILE.spv\n");
    return 2;
}

/* Whether the space-separated `options` hold `word`. */
static int has_option(const char *options, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = options; p && (p = strstr(p, word)); p += n)
        if ((p == options || p[-1] == ' ') && (p[n] == '\0' || p[n] == ' ')) return 1;
    return 0;
}

int ptx_print(const struct clshim_llvm_api *api, const void *bc, size_t size, const struct ptx_cmd_opts *o,
              const char *tag)
{
    struct ptx_request req = {
        .bitcode = bc,
        .size = size,
        .sm = o->sm,
        .fast_relaxed_math = has_option(o->options, "-cl-fast-relaxed-math"),
        .denorms_are_zero = has_option(o->options, "-cl-denorms-are-zero") ||
                            has_option(o->options, "-cl-fast-relaxed-math"),
        .allow_unmatched_builtins = o->allow_unmatched,
        .libdevice_path = o->libdevice,
    };
    struct ptx_result res;
    if (api->spir_to_ptx(&req, &res)) {
        fprintf(stderr, "%s: refused: %s\n", tag, res.reason);
        return 1;
    }
    if (res.unmatched_count)
        fprintf(stderr, "%s: %u built-ins whose results differ from NVIDIA's compile: %s\n", tag,
                (unsigned)res.unmatched_count, res.unmatched);
    FILE *f = o->out_path ? fopen(o->out_path, "w") : stdout;
    int bad = !f;
    if (f) {
        bad = fwrite(res.ptx, 1, res.ptx_len, f) != res.ptx_len;
        bad |= o->out_path ? fclose(f) != 0 : fflush(f) != 0;
    }
    if (bad) fprintf(stderr, "%s: writing the output failed\n", tag);
    api->free(res.ptx);
    return bad;
}

const char *ptx_find_libdevice(char *path, size_t len)
{
    const char *cuda = getenv("CUDA_HOME");
    snprintf(path, len, "%s/nvvm/libdevice/libdevice.10.bc", cuda && *cuda ? cuda : "/usr/local/cuda");
    return access(path, R_OK) == 0 ? path : NULL;
}

static unsigned char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    unsigned char *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n == cap) {
            unsigned char *more = realloc(buf, cap = cap ? cap * 2 : 65536);
            if (!more) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = more;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        if (!got) break;
        n += got;
    }
    fclose(f);
    *len = n;
    return buf;
}

int ptx_cmd_main(int argc, char **argv)
{
    struct ptx_cmd_opts o = {.options = ""};
    const char *file = NULL;
    if (help_asked(argc, argv)) return help_print(stdout, "ptx") != 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--sm") && i + 1 < argc) o.sm = (uint32_t)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(a, "--options") && i + 1 < argc) o.options = argv[++i];
        else if (!strcmp(a, "--builtins=vendor-differs-ok")) o.allow_unmatched = 1;
        else if (!strcmp(a, "-o") && i + 1 < argc) o.out_path = argv[++i];
        else if (!strcmp(a, "--libdevice") && i + 1 < argc) o.libdevice = argv[++i];
        else if (a[0] == '-') return help_unknown("clshim ptx", "ptx", a);
        else if (file) return usage();
        else file = a;
    }
    if (!file) return usage();
    char found[4096];
    if (!o.libdevice) o.libdevice = ptx_find_libdevice(found, sizeof found);
    if (o.libdevice && !*o.libdevice) o.libdevice = NULL; /* --libdevice "": none */
    size_t len = 0;
    unsigned char *data = read_file(file, &len);
    if (!data) {
        perror(file);
        return 2;
    }
    const struct clshim_llvm_api *api = llvm_api();
    void *bc = NULL;
    size_t bc_size = 0;
    char err[512] = "";
    int rc = 1;
    int spirv = len >= 4 && ((data[0] == 0x03 && data[1] == 0x02 && data[2] == 0x23 && data[3] == 0x07) ||
                             (data[0] == 0x07 && data[1] == 0x23 && data[2] == 0x02 && data[3] == 0x03));
    if (!api) {
        fprintf(stderr, "clshim ptx: libclshim-llvm.so cannot be loaded\n");
    } else if (spirv) {
        if (api->spirv_to_spir(data, len, NULL, 0, &bc, &bc_size, err, sizeof err))
            fprintf(stderr, "clshim ptx: %s is not a module the translator accepts: %s\n", file, err);
        else rc = ptx_print(api, bc, bc_size, &o, "clshim ptx");
        api->free(bc);
    } else if (frontend_compile_source((const char *)data, len, o.options, &bc, &bc_size, err, sizeof err)) {
        fprintf(stderr, "clshim ptx: %s does not compile: %s\n", file, err);
    } else {
        rc = ptx_print(api, bc, bc_size, &o, "clshim ptx");
        free(bc);
    }
    free(data);
    return rc;
}
