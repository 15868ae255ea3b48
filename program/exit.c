/* exit.c — exit handlers, fork, and the per-process summary.
 *
 * Exit handler order matters with PoCL (LLVM's statics are torn down in
 * reverse order of creation), so registering them is a concern of its own,
 * as is what a child of fork() must forget.
 */
#include "program/program_int.h"

#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "program/capture.h"
#include "program/capture_proc.h"

static void at_exit(void);

static pthread_once_t exit_once = PTHREAD_ONCE_INIT;
static void register_exit(void) { atexit(at_exit); }

/* A child of fork() that has not built anything since: its exit handler
 * (inherited) prints and counts nothing. */
static atomic_int idle_child; /* builds on many threads clear it */
/* Builds of programs clshim did not create (build_program). */
atomic_ulong pc_foreign_builds;

/* The exit handler stores late captures, which can make PoCL compile. exit()
 * runs handlers in reverse order of registration, and libLLVM (loaded with
 * PoCL) registers its static destructors when it loads: registering ours
 * only once a program has been built puts it before LLVM's teardown. */
void need_exit_handler(void)
{
    if (atomic_load_explicit(&idle_child, memory_order_relaxed))
        atomic_store_explicit(&idle_child, 0, memory_order_relaxed);
    pthread_once(&exit_once, register_exit);
}

static void owed_at_exit(void)
{
    if (!atomic_load_explicit(&idle_child, memory_order_relaxed)) capture_owed_at_exit(config_get()->capture_exit_budget);
}

/* Binaries still owed at exit are read then (capture_owed_at_exit). Reading
 * a PoCL binary generates code, and exit destroys the driver's lazily made
 * statics (LLVM's, made at its first build and first code generation) in
 * reverse order of creation: a handler registered before them would read
 * after their teardown (that crashed GEGL). So the handler is registered
 * again after each build that leaves a binary owed and at the first
 * synchronisation after a program's first run (at most twice per program);
 * the last one registered runs first, the others find nothing owed. */
void arm_owed_capture_at_exit(void)
{
    if (config_get()->capture_exit_budget) atexit(owed_at_exit);
}

/* In the child of fork(): LMDB forbids using an environment opened before
 * the fork, and the parent's statistics and pending captures are the
 * parent's. The inherited store handle is dropped (not closed: closing
 * touches the parent's lock file) and reopened if the child builds. */
void after_fork_in_child(void)
{
    pc_binary_reads = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER; /* a worker may have held it */
    pipeline_after_fork_in_child();
    pending_captures_reset();
    capture_after_fork_in_child();
    capture_proc_after_fork_in_child();
    atomic_store_explicit(&idle_child, 1, memory_order_relaxed);
}

void pc_print_summary(void)
{
    unsigned long foreign = atomic_load_explicit(&pc_foreign_builds, memory_order_relaxed);
    struct pipeline_stats s;
    pipeline_stats(&s);
    if (foreign && !s.store.hits && !s.store.misses && !s.failed && !s.store.uncacheable) {
        log_msg(LOG_WARN, "summary: no build went through clshim's cache: %lu program%s built from the "
                          "application's own binaries (its binary cache, clCreateProgramWithBinary); clshim caches "
                          "programs built from source or IL", foreign, foreign == 1 ? "" : "s");
        return;
    }
    pipeline_print_summary();
    if (foreign)
        log_msg(LOG_WARN, "also %lu program%s built from the application's own binaries, not through "
                          "clshim's cache", foreign, foreign == 1 ? "" : "s");
}

/* CLSHIM_STATS_FILE: this process's counters as one line appended (one
 * write(2) with O_APPEND, so the lines of processes ending at once do not
 * mix), which `clshim run --stats` sums into the run's line (scripts/clshim,
 * run_summary()). Names are kept: the wrapper reads them by name. */
static void append_counters(const char *path)
{
    struct pipeline_stats s;
    pipeline_stats(&s);
    const struct store_stats *c = &s.store;
    char line[512];
    int n = snprintf(line, sizeof line,
                     "clshim-stats 1 pid=%ld hits=%llu memory_hits=%llu misses=%llu misses_evicted=%llu "
                     "misses_evicted_age=%llu keep_limit=%llu failed=%llu uncacheable=%llu stored=%llu handed=%llu "
                     "saved_ns=%llu foreign=%lu readonly=%d\n",
                     (long)getpid(), (unsigned long long)c->hits, (unsigned long long)s.memory_hits,
                     (unsigned long long)c->misses, (unsigned long long)c->misses_evicted,
                     (unsigned long long)c->misses_evicted_age, (unsigned long long)c->evicted_keep_limit,
                     (unsigned long long)s.failed, (unsigned long long)c->uncacheable, (unsigned long long)c->stores,
                     (unsigned long long)c->captures_handed, (unsigned long long)c->compile_ns_saved,
                     atomic_load_explicit(&pc_foreign_builds, memory_order_relaxed), config_get()->cache_readonly);
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0 || n <= 0 || (size_t)n >= sizeof line || write(fd, line, (size_t)n) != n)
        log_msg(LOG_WARN, "cannot append this process's counters to CLSHIM_STATS_FILE=%s", path);
    if (fd >= 0) close(fd);
}

static void (*_Atomic before_cache_exit)(void);

void pc_before_cache_exit(void (*fn)(void))
{
    atomic_store_explicit(&before_cache_exit, fn, memory_order_release);
    need_exit_handler(); /* registered at the first build already: a derived program is built after one */
}

static void at_exit(void)
{
    if (atomic_load_explicit(&idle_child, memory_order_relaxed)) return; /* a forked child that built nothing: the parent reports */
    void (*before)(void) = atomic_load_explicit(&before_cache_exit, memory_order_acquire);
    if (before) before();
    capture_owed_at_exit(config_get()->capture_exit_budget); /* nothing left when owed_at_exit ran */
    /* Captures still queued for the worker: within the exit budget. */
    size_t dropped = capture_exit(config_get()->capture_exit_budget); /* says so itself */
    pipeline_count_capture_lost(CAPTURE_LOST_EXIT, dropped);
    (void)capture_proc_send_queued(); /* jobs the worker did not send (dropped, or no worker): now */
    pipeline_exit();
    const struct clshim_config *cfg = config_get();
    if (cfg->stats_file && cfg->stats_file[0]) append_counters(cfg->stats_file);
    if (cfg->stats || log_enabled(LOG_INFO)) {
        if (!log_enabled(LOG_WARN)) log_set_level(LOG_WARN);
        pc_print_summary();
    }
}
