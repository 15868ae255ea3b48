/* check.c — CLSHIM_ASSERT's slow side (check.h). */
#include "common/check.h"

#include <stdlib.h>
#include <unistd.h>

#include "common/config.h"
#include "common/log.h"

/* The calling thread's id, cached: gettid() is a system call. A forked
 * child's thread has another id, so the cache is cleared in the child. */
static _Thread_local pid_t thread_id __attribute__((tls_model("initial-exec")));
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static void forget_thread_id(void) { thread_id = 0; }
static void register_atfork(void) { pthread_atfork(NULL, NULL, forget_thread_id); }

int check_failed(int *once, const char *cond, const char *file, int line, const char *func)
{
    const int fatal = check_fatal();
    if (fatal || !__atomic_exchange_n(once, 1, __ATOMIC_RELAXED))
        log_msg(LOG_ERROR, "internal error: %s:%d %s(): `%s` does not hold; %s", file, line, func, cond,
                fatal ? "aborting (CLSHIM_STRICT=1 or a sanitizer build)"
                      : "taking the driver's path (please report this line)");
    if (fatal) abort();
    return 0;
}

int check_fatal(void)
{
#ifdef CLSHIM_ASSERT_FATAL
    return 1;
#else
    return config_get()->strict;
#endif
}

int check_mutex_owned(const pthread_mutex_t *m)
{
#if defined(__GLIBC__) && defined(__linux__)
    if (!thread_id) {
        pthread_once(&atfork_once, register_atfork);
        thread_id = gettid();
    }
    int owner = __atomic_load_n(&m->__data.__owner, __ATOMIC_RELAXED);
    return owner == thread_id;
#else
    (void)m;
    return -1;
#endif
}
