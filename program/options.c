/* options.c — the build options clshim adds, and what queries answer then.
 *
 * CLSHIM_BUILD_OPTIONS_APPEND (and _LINK_) and fusion's -cl-kernel-arg-info
 * change what the driver gets; kept apart from the build so the rule that
 * queries answer the application's options lives in one place.
 */
#include "program/program_int.h"

#include <stdlib.h>
#include <string.h>

/* "options more" (just `more` when options is empty); NULL on no memory. */
static char *join_options(const char *options, const char *more)
{
    if (!options || !*options) return strdup(more);
    size_t len = strlen(options), add = strlen(more);
    char *out = malloc(len + add + 2);
    if (!out) return NULL;
    memcpy(out, options, len);
    out[len] = ' ';
    memcpy(out + len + 1, more, add + 1);
    return out;
}

/* `options` plus -cl-kernel-arg-info, or NULL when nothing needs adding:
 * PoCL answers clGetKernelArgInfo only for programs built with that option
 * or with no options at all. */
char *options_with_arg_info(const char *options)
{
    static const char flag[] = "-cl-kernel-arg-info";
    if (!options) return NULL;
    for (const char *p = options; (p = strstr(p, flag)); p += sizeof flag - 1)
        if ((p == options || p[-1] == ' ' || p[-1] == '\t' || p[-1] == '\n') &&
            (!p[sizeof flag - 1] || p[sizeof flag - 1] == ' ' || p[sizeof flag - 1] == '\t' ||
             p[sizeof flag - 1] == '\n'))
            return NULL;
    return join_options(options, flag);
}

/* The application's options with CLSHIM_BUILD_OPTIONS_APPEND (or
 * _LINK_) appended: what the driver gets, the key holds and
 * CL_PROGRAM_BUILD_OPTIONS answers, as if the application had passed them.
 * NULL when nothing is appended (or, logged, on no memory: the build then
 * goes on with the application's options alone). */
char *options_appended(const char *options, const char *append)
{
    if (!append || !*append) return NULL;
    char *out = join_options(options, append);
    if (!out) LOG_ONCE(LOG_WARN, "out of memory: a build went on without the appended options");
    return out;
}

/* After a build with added options: queries answer the application's. */
void restore_app_options(cl_program prog, const char *options)
{
    struct pc_program *rec = objmap_get(pc_programs, prog);
    char *app = strdup(options ? options : "");
    if (!rec || !app) {
        free(app);
        return;
    }
    pthread_mutex_lock(&rec->lock);
    free(rec->options);
    rec->options = app;
    rec->arg_info_added = 1;
    pthread_mutex_unlock(&rec->lock);
}
