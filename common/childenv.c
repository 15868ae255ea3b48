/* childenv.c — the environment of a process clshim starts (childenv.h). */
#include "common/childenv.h"

#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

/* The directory this library was loaded from when it is clshim's
 * libOpenCL.so.1 (loader mode), else "". */
static void loader_dir(char *out, size_t len)
{
    Dl_info info;
    out[0] = '\0';
    if (!dladdr((void *)loader_dir, &info) || !info.dli_fname) return;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s", info.dli_fname);
    if (strncmp(basename(path), "libOpenCL.so", 12) != 0) return;
    snprintf(path, sizeof path, "%s", info.dli_fname);
    snprintf(out, len, "%s", dirname(path));
}

/* "NAME=a:b:c" without the entries `drop` says to drop; NULL when none is
 * left (the variable goes) or out of memory (*oom set). */
static char *filter_list(const char *var, size_t name_len, int (*drop)(const char *p, size_t len, const void *ctx),
                         const void *ctx, int *oom)
{
    char *kept = malloc(strlen(var) + 1);
    if (!kept) {
        *oom = 1;
        return NULL;
    }
    char *o = kept + sprintf(kept, "%.*s", (int)name_len, var);
    int any = 0;
    for (const char *p = var + name_len; *p;) {
        size_t len = strcspn(p, ": ");
        if (len && !drop(p, len, ctx)) {
            o += sprintf(o, "%s%.*s", any ? ":" : "", (int)len, p);
            any = 1;
        }
        p += len;
        p += strspn(p, ": ");
    }
    if (!any) {
        free(kept);
        return NULL;
    }
    return kept;
}

static int names_shim(const char *p, size_t len, const void *ctx)
{
    (void)ctx;
    return memmem(p, len, "libclshim", 9) != NULL;
}

static int is_dir(const char *p, size_t len, const void *ctx)
{
    const char *dir = ctx;
    return *dir && strlen(dir) == len && !memcmp(p, dir, len);
}

char **child_environ(void)
{
    char dir[PATH_MAX];
    loader_dir(dir, sizeof dir);
    size_t n = 0;
    while (environ[n]) n++;
    char **env = calloc(n + 1, sizeof *env);
    if (!env) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        int oom = 0;
        if (!strncmp(environ[i], "LD_PRELOAD=", 11))
            env[k] = filter_list(environ[i], 11, names_shim, NULL, &oom);
        else if (!strncmp(environ[i], "OPENCL_LAYERS=", 14)) /* a layer changes what the driver answers */
            env[k] = filter_list(environ[i], 14, names_shim, NULL, &oom);
        else if (!strncmp(environ[i], "LD_LIBRARY_PATH=", 16))
            env[k] = filter_list(environ[i], 16, is_dir, dir, &oom);
        else if (!(env[k] = strdup(environ[i])))
            oom = 1;
        if (oom) {
            free_environ(env);
            return NULL;
        }
        if (env[k]) k++;
    }
    return env;
}

void free_environ(char **env)
{
    for (size_t i = 0; env && env[i]; i++) free(env[i]);
    free(env);
}
