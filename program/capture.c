/* capture.c — the background capture worker (see capture.h). */
#include "program/capture.h"

#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/busy.h"
#include "common/check.h"
#include "common/log.h"

static struct capture_ops ops;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed; /* CLOCK_MONOTONIC; initialised with the worker */
static void *queue[CAPTURE_QUEUE_MAX];
static double queued_at[CAPTURE_QUEUE_MAX]; /* busy_now_s() at each item's submit */
static size_t head, count;   /* a ring */
static void *running;        /* the item run() has now, or NULL */
static int worker_started, worker_failed, stopping;
static int exiting; /* capture_exit() runs: no more waiting for an idle application */
static unsigned defer_max_s = 60;
static pthread_t worker;
static unsigned long finished;      /* items run so far */
static unsigned long finished_seen; /* `finished` when the last quiesce handler was registered */
static unsigned exit_budget_ms = 2000;
#define CAPTURE_NICE 5

void capture_init(const struct capture_ops *o) { ops = *o; }
void capture_set_defer_max(unsigned seconds) { defer_max_s = seconds; }

/* With the lock held: waits while the application is busy (common/busy.h:
 * its other threads and children), at most until the oldest item waited
 * defer_max_s seconds, or exit. The capture takes PoCL's code generation
 * lock; beside a busy application it stalls it (a kernel latency loop read
 * 455-812 us instead of 5-19 us). */
static void wait_until_idle(void)
{
    (void)CLSHIM_ASSERT_HELD(&lock);
    if (!defer_max_s) return;
    /* The first look is one period after the submit (the watch counts the
     * application busy until its first window anyway): reading every
     * thread's schedstat at once ran beside the application's first
     * chain of kernels. A run that ends first has its captures made at
     * exit. */
    while (count && !exiting && !stopping && busy_now_s() - queued_at[head] < BUSY_PERIOD_S) {
        double at = queued_at[head] + BUSY_PERIOD_S;
        struct timespec until = {(time_t)at, (long)((at - (double)(time_t)at) * 1e9)};
        pthread_cond_timedwait(&changed, &lock, &until);
    }
    if (!count || exiting || stopping) return;
    struct busy_watch w;
    if (busy_watch_start(&w, getpid(), (pid_t)syscall(SYS_gettid)) != 0) return;
    int said = 0;
    while (count && !exiting && !stopping && busy_watch_busy(&w) &&
           busy_now_s() - queued_at[head] < defer_max_s) {
        if (!said++) log_msg(LOG_DEBUG, "capture worker: the application is busy: captures wait");
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_nsec += (long)(BUSY_PERIOD_S * 1e9);
        if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&changed, &lock, &until);
    }
}

static void *work(void *arg)
{
    (void)arg;
    /* Not SCHED_IDLE nor nice 19: PoCL generates code under one
     * process-wide lock, and a starved worker holding it stalls the
     * application's next build (a 100-variant tuner on a loaded machine
     * took 4.5x as long once). A mild nice still lets the application's
     * threads come first while the worker holds nothing of theirs. */
    (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), CAPTURE_NICE);
    pthread_mutex_lock(&lock);
    for (;;) {
        while (!count && !stopping) pthread_cond_wait(&changed, &lock);
        if (stopping) break;
        wait_until_idle();
        if (stopping) break;
        if (!count) continue; /* taken back meanwhile */
        void *item = queue[head];
        head = (head + 1) % CAPTURE_QUEUE_MAX;
        count--;
        running = item;
        pthread_mutex_unlock(&lock);
        ops.run(item);
        ops.done(item);
        pthread_mutex_lock(&lock);
        running = NULL;
        finished++;
        pthread_cond_broadcast(&changed);
    }
    pthread_mutex_unlock(&lock);
    return NULL;
}

static void quiesce_at_exit(void) { (void)capture_exit(exit_budget_ms); }

/* Called with lock held. */
static int start_worker(void)
{
    (void)CLSHIM_ASSERT_HELD(&lock);
    if (worker_started) return 0;
    if (worker_failed) return -1;
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&changed, &attr);
    pthread_condattr_destroy(&attr);
    if (pthread_create(&worker, NULL, work, NULL) != 0) {
        worker_failed = 1;
        log_msg(LOG_INFO, "cannot start the capture thread; binaries are stored on the application's threads");
        return -1;
    }
    worker_started = 1;
    return 0;
}

/* The library holding this code stays loaded until the process ends: an
 * application that dlcloses its libOpenCL (clshim in loader mode) would
 * otherwise run the quiesce handler inside dlclose, holding the loader's
 * lock the worker may need (PoCL dlopens kernels while it captures), and
 * then unmap the code the worker runs. */
static pthread_once_t pinned = PTHREAD_ONCE_INIT;
static void pin_library(void)
{
    Dl_info info;
    if (!dladdr((void *)pin_library, &info) || !info.dli_fname || !*info.dli_fname) return;
    void *self = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE);
    if (!self) log_msg(LOG_INFO, "cannot pin %s in memory (%s)", info.dli_fname, dlerror());
    /* The reference dlopen took is kept: the library is never unloaded. */
}

void capture_prepare(void)
{
    pthread_once(&pinned, pin_library);
    pthread_mutex_lock(&lock);
    if (!stopping) (void)start_worker();
    pthread_mutex_unlock(&lock);
}

int capture_submit(void *item)
{
    int rc = -1, register_quiesce = 0;
    pthread_once(&pinned, pin_library);
    pthread_mutex_lock(&lock);
    if (!stopping && start_worker() == 0) {
        for (size_t i = 0; i < count; i++)
            if (queue[(head + i) % CAPTURE_QUEUE_MAX] == item) {
                rc = 0; /* coalesced */
                break;
            }
        if (rc != 0 && count < CAPTURE_QUEUE_MAX) {
            queue[(head + count) % CAPTURE_QUEUE_MAX] = item;
            queued_at[(head + count) % CAPTURE_QUEUE_MAX] = busy_now_s();
            count++;
            pthread_cond_broadcast(&changed);
            rc = 0;
        }
        /* The first submit, and any while the worker works or after it
         * did work since the last registration: a quiesce handler that
         * runs before the exit teardown of whatever that work created. */
        register_quiesce = rc == 0 && (finished_seen != finished || !finished_seen || running);
        if (register_quiesce) finished_seen = finished ? finished : 1;
    }
    pthread_mutex_unlock(&lock);
    if (register_quiesce) atexit(quiesce_at_exit);
    return rc;
}

int capture_cancel_or_wait(void *item)
{
    int dequeued = 0;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < count && !dequeued; i++) {
        if (queue[(head + i) % CAPTURE_QUEUE_MAX] != item) continue;
        for (size_t j = i; j + 1 < count; j++) {
            queue[(head + j) % CAPTURE_QUEUE_MAX] = queue[(head + j + 1) % CAPTURE_QUEUE_MAX];
            queued_at[(head + j) % CAPTURE_QUEUE_MAX] = queued_at[(head + j + 1) % CAPTURE_QUEUE_MAX];
        }
        count--;
        dequeued = 1;
    }
    while (!dequeued && running == item) pthread_cond_wait(&changed, &lock);
    pthread_mutex_unlock(&lock);
    return dequeued;
}

void capture_set_exit_budget(unsigned ms) { exit_budget_ms = ms; }

size_t capture_exit(unsigned budget_ms)
{
    pthread_mutex_lock(&lock);
    if (!worker_started || stopping) {
        stopping = 1;
        pthread_mutex_unlock(&lock);
        return 0;
    }
    exiting = 1; /* the worker stops waiting for an idle application */
    pthread_cond_broadcast(&changed);
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += budget_ms / 1000;
    until.tv_nsec += (long)(budget_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
    while (count && pthread_cond_timedwait(&changed, &lock, &until) == 0) {
    }
    size_t dropped = count;
    count = 0; /* dropped: the process is ending, the items are not released */
    stopping = 1;
    pthread_cond_broadcast(&changed);
    pthread_mutex_unlock(&lock);
    /* A capture under way is a driver call: it cannot be abandoned. */
    pthread_join(worker, NULL);
    if (dropped)
        log_msg(LOG_WARN, "%zu binar%s not stored: the capture did not finish within the exit budget "
                          "(CLSHIM_CAPTURE_EXIT_BUDGET=%u ms)",
                dropped, dropped == 1 ? "y" : "ies", budget_ms);
    return dropped;
}

void capture_after_fork_in_child(void)
{
    /* Single-threaded here: the parent's worker and queue are not ours. */
    lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    head = count = 0;
    running = NULL;
    worker_started = worker_failed = stopping = exiting = 0;
    finished = finished_seen = 0;
}
