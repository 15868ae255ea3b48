/* frontend.c — runs clang to turn OpenCL C into SPIR bitcode (frontend.h).
 *
 * Invariant: nothing in clang's argv comes from the cache's files (only the
 * application's own build options); common/clang.c spawns and reaps it.
 */
#include "fusion/frontend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/key.h"
#include "common/clang.h"
#include "common/error.h"

#define FRONTEND_MAX_ARGS 512

struct argv_list {
    char *arg[FRONTEND_MAX_ARGS + 1];
    int count;
};

static int set_err(char *err, size_t err_len, int code, const char *fmt, const char *detail)
{
    if (err && err_len) snprintf(err, err_len, fmt, detail ? detail : "");
    return code;
}

static int argv_add(struct argv_list *av, const char *arg)
{
    if (av->count >= FRONTEND_MAX_ARGS) return CLSHIM_EINVAL;
    char *copy = strdup(arg);
    if (!copy) return CLSHIM_ENOMEM;
    av->arg[av->count++] = copy;
    av->arg[av->count] = NULL;
    return 0;
}

static void argv_free(struct argv_list *av)
{
    for (int i = 0; i < av->count; i++) free(av->arg[i]);
    av->count = 0;
}

/* Splits options into tokens as the program cache does (cache/key.h). */
static int tokenize(const char *options, struct argv_list *out)
{
    char **argv;
    int argc;
    int rc = key_split_options(options, &argv, &argc);
    for (int i = 0; rc == 0 && i < argc; i++) rc = argv_add(out, argv[i]);
    if (rc == 0) key_free_options(argv, argc);
    return rc;
}

/* -cl-* options clang 15 implements and that may change the IR. */
static int known_cl_option(const char *opt)
{
    static const char *const known[] = {
        "-cl-single-precision-constant", "-cl-denorms-are-zero",
        "-cl-fp32-correctly-rounded-divide-sqrt", "-cl-opt-disable", "-cl-mad-enable",
        "-cl-no-signed-zeros", "-cl-unsafe-math-optimizations", "-cl-finite-math-only",
        "-cl-fast-relaxed-math", "-cl-kernel-arg-info", "-cl-uniform-work-group-size",
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(opt, known[i]) == 0) return 1;
    return strncmp(opt, "-cl-std=", 8) == 0 || strncmp(opt, "-cl-ext=", 8) == 0;
}

/* Appends the application options clang should see; sets *has_std. */
static int add_app_options(const char *options, struct argv_list *av, int *has_std, char *err,
                           size_t err_len)
{
    struct argv_list toks = {.count = 0};
    int rc = tokenize(options, &toks);
    if (rc == CLSHIM_EINVAL) set_err(err, err_len, rc, "build options: %s", "unclosed quote");
    for (int i = 0; rc == 0 && i < toks.count; i++) {
        const char *t = toks.arg[i];
        if (strcmp(t, "-D") == 0 || strcmp(t, "-U") == 0 || strcmp(t, "-I") == 0) {
            if (i + 1 >= toks.count) {
                rc = set_err(err, err_len, CLSHIM_EINVAL, "build options: %s needs a value", t);
                break;
            }
            rc = argv_add(av, t);
            if (rc == 0) rc = argv_add(av, toks.arg[++i]);
        } else if (strncmp(t, "-D", 2) == 0 || strncmp(t, "-U", 2) == 0 ||
                   strncmp(t, "-I", 2) == 0 || strcmp(t, "-w") == 0 ||
                   strcmp(t, "-Werror") == 0 || known_cl_option(t)) {
            if (strncmp(t, "-cl-std=", 8) == 0) *has_std = 1;
            rc = argv_add(av, t);
        }
    }
    argv_free(&toks);
    if (rc == CLSHIM_ENOMEM) set_err(err, err_len, rc, "out of memory%s", "");
    else if (rc == CLSHIM_EINVAL && err && err_len && !err[0])
        set_err(err, err_len, rc, "build options: %s", "too many options");
    return rc;
}

int frontend_compile_source(const char *source, size_t len, const char *options, void **bitcode,
                            size_t *size, char *err, size_t err_len)
{
    if (err && err_len) err[0] = '\0';
    if (!bitcode || !size || (!source && len))
        return set_err(err, err_len, CLSHIM_EINVAL, "frontend: missing argument%s", "");
    *bitcode = NULL;
    *size = 0;
    static const char *const fixed[] = {"-x", "cl", "-target", "spir64", "-emit-llvm", "-c",
                                        "-O2", "-cl-kernel-arg-info", "-Xclang",
                                        "-no-opaque-pointers"};
    struct argv_list av = {.count = 0};
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < sizeof fixed / sizeof fixed[0]; i++) rc = argv_add(&av, fixed[i]);
    int has_std = 0;
    if (rc == 0) rc = add_app_options(options, &av, &has_std, err, err_len);
    if (rc == 0 && !has_std) rc = argv_add(&av, "-cl-std=CL1.2");
    if (rc == 0) rc = argv_add(&av, "-o");
    if (rc == 0) rc = argv_add(&av, "-");
    if (rc == 0) rc = argv_add(&av, "-");
    if (rc != 0) {
        argv_free(&av);
        if (err && err_len && !err[0]) set_err(err, err_len, rc, "frontend: %s", clshim_strerror(rc));
        return rc;
    }
    char *out = NULL;
    size_t out_len = 0;
    rc = clang_run((const char *const *)av.arg, source, len, &out, &out_len, err, err_len);
    argv_free(&av);
    if (rc == 0 && (out_len < 4 || memcmp(out, "BC\xc0\xde", 4) != 0))
        rc = set_err(err, err_len, CLSHIM_EINVAL, "%s wrote no bitcode", clang_name());
    if (rc != 0) {
        free(out);
        return rc;
    }
    *bitcode = out;
    *size = out_len;
    return 0;
}
