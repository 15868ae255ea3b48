/* log.c — "clshim: " lines, one write(2) each so threads never interleave. */
#include "common/log.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include "common/config.h"

static int log_level = -1; /* -1: not yet read from the configuration */
static int log_fd = -1;
static pthread_once_t log_fd_once = PTHREAD_ONCE_INIT;

void log_set_level(enum log_level level)
{
    __atomic_store_n(&log_level, (int)level, __ATOMIC_RELAXED);
}

int log_enabled(enum log_level level)
{
    int current = __atomic_load_n(&log_level, __ATOMIC_RELAXED);
    if (current < 0) {
        config_get(); /* sets the level */
        current = __atomic_load_n(&log_level, __ATOMIC_RELAXED);
    }
    return (int)level <= current;
}

static void open_log_fd(void)
{
    const char *path = config_get()->log_file;
    log_fd = 2;
    if (path && *path) {
        int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
        if (fd >= 0) log_fd = fd;
    }
}

void log_msg(enum log_level level, const char *fmt, ...)
{
    if (!log_enabled(level)) return;
    pthread_once(&log_fd_once, open_log_fd);
    char line[2048];
    int n = snprintf(line, sizeof line, "clshim: ");
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (m < 0) return;
    n += m;
    if (n > (int)sizeof line - 2) n = (int)sizeof line - 2;
    line[n++] = '\n';
    ssize_t w = write(log_fd, line, (size_t)n);
    (void)w;
}
