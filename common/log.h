/* log.h — clshim's log lines: "clshim: ..." on stderr or CLSHIM_LOG_FILE.
 *
 * The level comes from CLSHIM_LOG (default warn). log_enabled() is a
 * relaxed atomic load once the configuration is loaded, so a disabled debug
 * line costs a compare. LOG_ONCE prints a condition once per process, so a
 * fault that recurs on every call still logs one line.
 */
#ifndef CLSHIM_LOG_H
#define CLSHIM_LOG_H

enum log_level { LOG_ERROR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 };

/* Nonzero when lines of this level are printed. */
int log_enabled(enum log_level level);

/* Prints "clshim: <message>\n" atomically (one write) when enabled. */
void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Overrides the level (tests, the tool). */
void log_set_level(enum log_level level);

#define LOG_ONCE(level, ...)                                                   \
    do {                                                                       \
        static int log_once_flag_;                                             \
        if (!__atomic_exchange_n(&log_once_flag_, 1, __ATOMIC_RELAXED))         \
            log_msg((level), __VA_ARGS__);                                     \
    } while (0)

#endif
