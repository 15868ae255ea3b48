/* real.c — resolving the real OpenCL entry points with dlsym(RTLD_NEXT). */
#include "interpose/real.h"

#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#include "common/log.h"

struct cl_api real_table;
int real_resolved;
static pthread_once_t resolve_once = PTHREAD_ONCE_INIT;

static void resolve_all(void)
{
    /* RTLD_NEXT finds the ICD loader because libclshim.so has DT_NEEDED on
     * libOpenCL.so.1, even when the app opened OpenCL with RTLD_LOCAL. */
#define REAL_RESOLVE(name) real_table.name = (__typeof__(name) *)dlsym(RTLD_NEXT, #name);
    CLAPI_FUNCTIONS(REAL_RESOLVE)
#undef REAL_RESOLVE
    __atomic_store_n(&real_resolved, 1, __ATOMIC_RELEASE);
}

void real_resolve(void)
{
    pthread_once(&resolve_once, resolve_all);
}

#define MISSING_MAX 64
static const char *missing_logged[MISSING_MAX];
static pthread_mutex_t missing_lock = PTHREAD_MUTEX_INITIALIZER;

void real_missing(const char *name)
{
    pthread_mutex_lock(&missing_lock);
    int i;
    for (i = 0; i < MISSING_MAX && missing_logged[i]; i++)
        if (!strcmp(missing_logged[i], name)) break;
    int first = i < MISSING_MAX && !missing_logged[i];
    if (first) missing_logged[i] = name;
    pthread_mutex_unlock(&missing_lock);
    if (first) log_msg(LOG_WARN, "the OpenCL loader has no %s; the call fails as it would without clshim", name);
}
