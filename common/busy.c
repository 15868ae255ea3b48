/* busy.c — whether a process is busy (busy.h). */
#include "common/busy.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CHILD_DEPTH 2 /* children and grandchildren (a compiler driver's) */

double busy_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static ssize_t read_small(const char *path, char *buf, size_t size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = read(fd, buf, size - 1);
    close(fd);
    if (n >= 0) buf[n] = '\0';
    return n;
}

/* Adds the demand of process `pid`'s threads (but `skip`) and of its live
 * children (to CHILD_DEPTH levels) to *sum; the number of threads read. */
static int add_demand(pid_t pid, pid_t skip, int depth, uint64_t *sum)
{
    char path[96], text[512];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (!d) return 0;
    int threads = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        threads++;
        if (skip && atoi(e->d_name) == skip) continue;
        unsigned long long ran, waited;
        snprintf(path, sizeof path, "/proc/%d/task/%.32s/schedstat", (int)pid, e->d_name);
        if (read_small(path, text, sizeof text) > 0 && sscanf(text, "%llu %llu", &ran, &waited) == 2)
            *sum += ran + waited;
        if (depth >= CHILD_DEPTH) continue;
        snprintf(path, sizeof path, "/proc/%d/task/%.32s/children", (int)pid, e->d_name);
        if (read_small(path, text, sizeof text) <= 0) continue;
        char *p = text, *end;
        for (long child; (child = strtol(p, &end, 10)) > 0 && end != p; p = end)
            add_demand((pid_t)child, 0, depth + 1, sum);
    }
    closedir(d);
    return threads;
}

/* The process's demand so far, in ns; -1 when it is gone. */
static int demand(pid_t pid, pid_t skip, uint64_t *out)
{
    uint64_t sum = 0;
    if (!add_demand(pid, skip, 0, &sum)) return -1;
    /* Children it reaped: their CPU time, cutime and cstime, the 14th and
     * 15th fields after the command's closing parenthesis. */
    char path[64], text[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    const char *p = read_small(path, text, sizeof text) > 0 ? strrchr(text, ')') : NULL;
    unsigned long long cutime, cstime;
    if (p && sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %llu %llu", &cutime,
                    &cstime) == 2)
        sum += (cutime + cstime) * (1000000000u / (uint64_t)sysconf(_SC_CLK_TCK));
    *out = sum;
    return 0;
}

int busy_watch_start(struct busy_watch *w, pid_t pid, pid_t skip_tid)
{
    w->pid = pid;
    w->skip_tid = skip_tid;
    w->at = busy_now_s();
    w->idle_since = 0; /* busy until measured otherwise */
    if (pid > 0 && demand(pid, skip_tid, &w->demand_ns) == 0) return 0;
    w->pid = 0;
    return -1;
}

int busy_watch_busy(struct busy_watch *w)
{
    if (!w->pid) return 0;
    double now = busy_now_s();
    if (now - w->at >= BUSY_PERIOD_S) {
        uint64_t d;
        if (demand(w->pid, w->skip_tid, &d) != 0) return 0;
        /* Less than before: a child ended between its schedstat and its
         * parent's reaping; busy is the safe guess. */
        int busy = d < w->demand_ns || (double)(d - w->demand_ns) / 1e9 > BUSY_CORES * (now - w->at);
        if (busy) w->idle_since = 0;
        else if (!w->idle_since) w->idle_since = w->at;
        w->at = now;
        w->demand_ns = d;
    }
    return !w->idle_since || now - w->idle_since < BUSY_IDLE_SPAN_S;
}
