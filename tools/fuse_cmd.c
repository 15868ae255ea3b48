/* fuse_cmd.c — `clshim fuse`: what the fuser makes of a plan, offline.
 *
 *   clshim fuse --plan "a+b+c" [--emit=cl|ll|spir|ptx] [--global N[,N[,N]]]
 *               [--local N[,N[,N]]] [--options "BUILD OPTIONS"]
 *               [--force-barrier] [--internal | --internal=K.A,...] [--sm N] [-o FILE] FILE.cl
 *
 * The source is compiled to clshim's IR (fusion/frontend.h) and the plan's
 * kernels are fused as if launched in that order over one ND-range (the
 * --global size, default 1048576, and --local, default none). Without a
 * running program the arguments are not known; parameters with the same
 * name in different kernels are taken to receive the same argument (the
 * chain's intermediate buffers usually do), every other parameter a
 * distinct one. --emit=cl (default) prints the fused kernel as generated
 * OpenCL C (route (b), fusion/fuse_source.h), ll the fused SPIR module of
 * the IR route as LLVM assembly, spir that module as bitcode (to -o FILE,
 * or standard output when it is not a terminal), ptx that module lowered to
 * PTX by route (a) for sm_N as `clshim ptx` does (tools/ptx_cmd.c; the
 * fused kernel may call built-ins whose results differ from NVIDIA's: they
 * are named on standard error). --internal=K.A,... is the plan option
 * internal= (fusion/plan.h). A refused plan prints
 * "clshim fuse: refused: REASON" and exits 1; bad usage exits 2.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fusion/frontend.h"
#include "fusion/fuse_source.h"
#include "compiler/llvmload.h"
#include "fusion/plan.h"
#include "tools/commands.h"
#include "tools/help.h"

#define MAX_KERNELS 64

static int usage(void)
{
    fprintf(stderr, "usage: clshim fuse --plan \"a+b+c\" [--emit=cl|ll|spir|ptx] [--global N[,N[,N]]] "
                    "[--local N[,N[,N]]] [--options \"BUILD OPTIONS\"] [--force-barrier] "
                    "[--internal | --internal=K.A,...] [--sm N] [-o FILE] FILE.cl\n");
    return 2;
}

/* "N[,N[,N]]" into sizes (unused dimensions 1); the dimension count, or 0. */
static unsigned parse_sizes(const char *text, size_t sizes[3])
{
    unsigned dim = 0;
    sizes[0] = sizes[1] = sizes[2] = 1;
    for (const char *p = text; *p && dim < 3; dim++) {
        char *end;
        unsigned long long v = strtoull(p, &end, 10);
        if (end == p || v == 0) return 0;
        sizes[dim] = (size_t)v;
        p = end;
        if (*p == ',') p++;
        else if (*p) return 0;
    }
    return dim;
}

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap + 1);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += got;
        if (n == cap) {
            char *more = realloc(buf, cap * 2 + 1);
            if (!more) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = more;
            cap *= 2;
        }
    }
    fclose(f);
    if (buf) buf[n] = 0;
    *len = n;
    return buf;
}

struct job {
    const char *plan, *emit, *options, *out_path, *file, *internal_args;
    size_t global[3], local[3];
    unsigned dim, local_dim;
    int force_barrier, internal;
    uint32_t sm;
};

/* 0, -1 for a usage error (the usage is printed), or the exit status
 * after saying in one line what is wrong (tools/help.h). */
static int parse_args(int argc, char **argv, struct job *j)
{
    memset(j, 0, sizeof *j);
    j->emit = "cl";
    j->options = "";
    j->dim = parse_sizes("1048576", j->global);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--plan") && i + 1 < argc) j->plan = argv[++i];
        else if (!strncmp(a, "--emit=", 7)) j->emit = a + 7;
        else if (!strcmp(a, "--global") && i + 1 < argc) j->dim = parse_sizes(argv[++i], j->global);
        else if (!strcmp(a, "--local") && i + 1 < argc) j->local_dim = parse_sizes(argv[++i], j->local);
        else if (!strcmp(a, "--options") && i + 1 < argc) j->options = argv[++i];
        else if (!strcmp(a, "--force-barrier")) j->force_barrier = 1;
        else if (!strcmp(a, "--internal")) j->internal = 1;
        else if (!strncmp(a, "--internal=", 11) && plan_internal_args_valid(a + 11) == 0)
            j->internal = 1, j->internal_args = a + 11;
        else if (!strcmp(a, "--sm") && i + 1 < argc) j->sm = (uint32_t)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(a, "-o") && i + 1 < argc) j->out_path = argv[++i];
        else if (a[0] == '-') return help_unknown("clshim fuse", "fuse", a);
        else if (j->file) return -1;
        else j->file = a;
    }
    if (!j->plan || !j->file || !j->dim || (j->local_dim && j->local_dim != j->dim)) return -1;
    if (strcmp(j->emit, "cl") && strcmp(j->emit, "ll") && strcmp(j->emit, "spir") && strcmp(j->emit, "ptx"))
        return help_bad_value("clshim fuse", "fuse", "--emit", j->emit);
    if (!j->local_dim) j->local[0] = j->local[1] = j->local[2] = 0;
    return 0;
}

/* Splits "a+b+c" into names (pointers into `buf`); the count, or 0. */
static size_t split_plan(char *buf, const char **names)
{
    size_t n = 0;
    for (char *save = NULL, *t = strtok_r(buf, "+ ", &save); t; t = strtok_r(NULL, "+ ", &save)) {
        if (n == MAX_KERNELS) return 0;
        names[n++] = t;
    }
    return n;
}

static int write_out(const struct job *j, const void *data, size_t len)
{
    FILE *f = j->out_path ? fopen(j->out_path, "wb") : stdout;
    if (!f) return perror(j->out_path), 1;
    int bad = fwrite(data, 1, len, f) != len;
    if (j->out_path) bad |= fclose(f) != 0;
    else bad |= fflush(f) != 0;
    if (bad) fprintf(stderr, "clshim fuse: writing the output failed\n");
    return bad;
}

/* Arg classes by parameter name across kernels. */
static uint32_t *classes_by_name(const struct kernel_info *info, size_t n)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++) total += info[i].num_params;
    uint32_t *cls = calloc(total ? total : 1, sizeof *cls);
    const char **names = calloc(total ? total : 1, sizeof *names);
    if (!cls || !names) {
        free(cls);
        free(names);
        return NULL;
    }
    uint32_t next = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++)
        for (uint32_t p = 0; p < info[i].num_params; p++, at++) {
            const char *name = info[i].params[p].name;
            names[at] = name;
            size_t k = at;
            if (name[0] && info[i].params[p].addr_space != 3) /* __local arguments are never shared */
                for (k = 0; k < at && strcmp(names[k], name); k++) continue;
            cls[at] = k < at ? cls[k] : next++;
        }
    free(names);
    return cls;
}

static int run(const struct job *j, const struct clshim_llvm_api *api, const char *src, size_t len,
               const void *bc, size_t bc_size, const char **names, size_t n)
{
    struct kernel_info info[MAX_KERNELS];
    struct fuse_kernel fk[MAX_KERNELS];
    memset(info, 0, sizeof info);
    memset(fk, 0, sizeof fk);
    char why[600] = "";
    int rc = 1;
    uint32_t *cls = NULL;
    for (size_t i = 0; i < n; i++)
        if (api->kernel_info(bc, bc_size, names[i], &info[i], why, sizeof why)) {
            fprintf(stderr, "clshim fuse: %s\n", why);
            goto out;
        }
    if (!(cls = classes_by_name(info, n))) {
        fprintf(stderr, "clshim fuse: out of memory\n");
        goto out;
    }
    for (size_t i = 0, at = 0; i < n; at += info[i].num_params, i++) {
        fk[i] = (struct fuse_kernel){bc, bc_size, names[i], j->dim, {0}, {0}, {0}, cls + at, info[i].num_params};
        memcpy(fk[i].global_size, j->global, sizeof j->global);
        memcpy(fk[i].local_size, j->local, sizeof j->local);
    }
    struct fuse_request req = {fk, n, "clshim_fused", j->force_barrier, j->internal, NULL, 0, j->internal_args};
    struct fuse_result res;
    if (!strcmp(j->emit, "cl")) {
        struct fs_program prog;
        if (fs_fuse(api, src, len, &req, &res, &prog, why, sizeof why)) {
            fprintf(stderr, "clshim fuse: refused: %s\n", why);
            goto out;
        }
        rc = write_out(j, prog.text, prog.len);
        fs_program_free(&prog);
    } else {
        memset(&res, 0, sizeof res);
        int e = api->fuse(&req, &res);
        if (e) {
            fprintf(stderr, "clshim fuse: refused: %s\n", res.reason[0] ? res.reason : "unsupported");
            goto out;
        }
        if (!strcmp(j->emit, "ptx")) {
            char found[4096];
            struct ptx_cmd_opts o = {j->sm, j->options, 1, j->out_path, ptx_find_libdevice(found, sizeof found)};
            rc = ptx_print(api, res.bitcode, res.bitcode_size, &o, "clshim fuse");
        } else if (!strcmp(j->emit, "spir")) {
            if (!j->out_path && isatty(1)) fprintf(stderr, "clshim fuse: bitcode is not written to a terminal (-o FILE)\n");
            else rc = write_out(j, res.bitcode, res.bitcode_size);
        } else {
            char *text = NULL;
            if (api->bitcode_to_text(res.bitcode, res.bitcode_size, &text, why, sizeof why))
                fprintf(stderr, "clshim fuse: %s\n", why);
            else rc = write_out(j, text, strlen(text));
            api->free(text);
        }
        api->free(res.bitcode);
        api->free(res.param_kernel);
        api->free(res.param_index);
    }
    if (!rc && res.barrier_inserted) fprintf(stderr, "clshim fuse: barrier inserted (forced): %s\n", res.reason);
    if (!rc && !strcmp(j->emit, "cl")) {
        api->free(res.param_kernel);
        api->free(res.param_index);
    }
out:
    for (size_t i = 0; i < n; i++) api->free(info[i].params);
    free(cls);
    return rc;
}

int fuse_cmd_main(int argc, char **argv)
{
    struct job j;
    if (help_asked(argc, argv)) return help_print(stdout, "fuse") != 0;
    int bad = parse_args(argc, argv, &j);
    if (bad) return bad > 0 ? bad : usage();
    char *plan = strdup(j.plan);
    const char *names[MAX_KERNELS];
    size_t n = plan ? split_plan(plan, names) : 0;
    if (n < 2) {
        fprintf(stderr, "clshim fuse: the plan needs 2 to %d kernel names joined with '+'\n", MAX_KERNELS);
        free(plan);
        return 2;
    }
    size_t len = 0;
    char *src = read_all(j.file, &len);
    if (!src) {
        perror(j.file);
        free(plan);
        return 2;
    }
    int rc = 1;
    void *bc = NULL;
    size_t bc_size = 0;
    char err[512] = "";
    const struct clshim_llvm_api *api = llvm_api();
    if (!api) fprintf(stderr, "clshim fuse: libclshim-llvm.so cannot be loaded\n");
    else if (frontend_compile_source(src, len, j.options, &bc, &bc_size, err, sizeof err))
        fprintf(stderr, "clshim fuse: %s does not compile: %s\n", j.file, err);
    else rc = run(&j, api, src, len, bc, bc_size, names, n);
    free(bc);
    free(src);
    free(plan);
    return rc;
}
