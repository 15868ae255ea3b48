/* busy.h — whether a process is busy, for work that must not slow it down.
 *
 * A capture generates code; beside a busy application it slows it even on
 * another core (two vCPUs share caches and memory bandwidth; nice does not
 * reach across CPUs) and, in the same process, it takes PoCL's code
 * generation lock. So such work waits while the application is busy. Its
 * demand is the time its threads ran *or waited to run*
 * (/proc/PID/task/TID/schedstat: an application starved by other load is
 * busy too), with its children's (PoCL links each kernel with a child `ld`;
 * live ones by their schedstat to two levels, reaped ones by the CPU time in
 * /proc/PID/stat); one thread may be left out (the watcher's own).
 * Busy: a demand over BUSY_CORES of one core in a window of at least
 * BUSY_PERIOD_S; idle: no busy window for BUSY_IDLE_SPAN_S (a build also
 * blocks now and then for a moment, in PoCL's fdatasync of its cache
 * files). Not thread-safe: one watch per watcher.
 */
#ifndef CLSHIM_BUSY_H
#define CLSHIM_BUSY_H

#include <stdint.h>
#include <sys/types.h>

#define BUSY_PERIOD_S 0.25
#define BUSY_IDLE_SPAN_S 1.0
#define BUSY_CORES 0.25

struct busy_watch {
    pid_t pid;         /* 0: nothing watched (never busy) */
    pid_t skip_tid;    /* a thread left out (0: none) */
    double at;         /* when demand_ns was read */
    uint64_t demand_ns;
    double idle_since; /* start of the idle windows since the last busy one; 0: busy */
};

/* Starts watching `pid` (busy until measured otherwise): 0, or -1 (w->pid
 * then 0) when it cannot be read. */
int busy_watch_start(struct busy_watch *w, pid_t pid, pid_t skip_tid);

/* Whether it is busy, measured again once the last window is BUSY_PERIOD_S
 * old. A process gone is not busy. */
int busy_watch_busy(struct busy_watch *w);

/* CLOCK_MONOTONIC in seconds. */
double busy_now_s(void);

#endif
