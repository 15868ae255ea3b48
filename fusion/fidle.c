/* fidle.c — the idle timer: a bound on how long a queue holds kernels while
 * the application enqueues nothing more on it (CLSHIM_FUSION_HOLD_MS).
 *
 * Why. Holding is invisible to the driver, and every OpenCL call that can
 * observe held work submits it first (batch.h). But an application can
 * also wait by means clshim never sees — memory the device writes in place
 * (CL_MEM_USE_HOST_PTR on a CPU device), output of the kernels, a clock —
 * and the plain driver would have run the kernels meanwhile. So a queue
 * that holds work and has held nothing new for a whole tick submits it, as
 * the plain driver would have had it: unfused, in order, with no flush
 * (the driver gets the same calls, only later).
 *
 * How, without a lock on the enqueue path. Each queue counts the kernels
 * held on it (fq.holds, one relaxed store under the queue lock the batcher
 * holds anyway). One timer thread wakes every CLSHIM_FUSION_HOLD_MS while
 * any queue holds work, and submits the work of each queue whose count has
 * not moved since its previous tick (so held work is submitted after 1 to 2
 * periods of idleness). A program build, compile or link on any thread is
 * the application issuing something too (PyOpenCL compiles a kernel at its
 * first call, between the kernels of a sequence): while one runs, and for
 * the tick after one ended, no queue counts as idle (two counters the build
 * wrappers bump: builds take milliseconds, not the enqueue path's
 * nanoseconds). While nothing is held it sleeps on a semaphore; the
 * enqueue that holds a queue's first kernel (fi_kick) wakes it only when it
 * sleeps — one relaxed-ordered load of a global otherwise, and at most one
 * sem_post per period. The timer starts when fusion arms (fi_start_early),
 * or, in a child of fork(), on the first kernel held.
 *
 * The lost wake-up (a kick between the timer's last scan and its sleep) is
 * excluded by a Dekker pair: the kicker makes fb()->held_total nonzero, reads
 * it again by a sequentially consistent read-modify-write (+0), then reads
 * the state; the timer sets SLEEPING (a seq_cst CAS) and then reads
 * fb()->held_total (seq_cst): in the single order of these operations at
 * least one sees the other. (No fences: ThreadSanitizer does not model
 * them.) The sleep is bounded (a second) anyway.
 *
 * At exit (fi_stop) the timer stops before the batcher submits what is
 * held, and never calls the driver again; a scan in progress is waited for.
 * In a child of fork() the timer is not running: the next kick starts one.
 * The extension API (clStartFusionCLSHIM) holds until the application
 * completes or cancels, as it asked: its queues are left alone.
 */
#include <errno.h>
#include <semaphore.h>
#include <time.h>

#include "common/config.h"
#include "common/log.h"
#include "fusion/batch_int.h"

enum { FI_OFF, FI_TICKING, FI_SLEEPING, FI_STOPPED };

static int state = FI_OFF;
static sem_t wake;
static pthread_mutex_t tick_lock = PTHREAD_MUTEX_INITIALIZER; /* a scan; fi_stop waits for it */
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
static unsigned period_ms;
static int builds_running; /* program builds, compiles and links in progress (atomic) */
static unsigned builds_ended, builds_seen; /* ended so far (atomic); as of the last tick (the timer's) */

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) continue;
}

/* One tick: submits the work of every queue idle since the last tick.
 * Returns how many queues still hold work. Only the timer thread writes
 * idle_seen and idle_valid. Under tick_lock (asserted). */
static unsigned scan(void)
{
    if (!CLSHIM_ASSERT_HELD(&tick_lock)) return 1; /* no scan: the timer ticks again */
    unsigned holding = 0, ended = __atomic_load_n(&builds_ended, __ATOMIC_ACQUIRE);
    int building = __atomic_load_n(&builds_running, __ATOMIC_ACQUIRE) > 0 || ended != builds_seen;
    builds_seen = ended;
    for (struct fq *q = fb_queues(); q; q = q->next_all) {
        uint32_t held = __atomic_load_n(&q->nheld, __ATOMIC_ACQUIRE);
        if (!held || building) {
            q->idle_valid = 0; /* nothing held, or the application is busy building: not idle */
            holding += held > 0;
            continue;
        }
        uint32_t holds = __atomic_load_n(&q->holds, __ATOMIC_RELAXED);
        if (q->idle_valid && q->idle_seen == holds && fb_submit_idle(q, holds, period_ms)) {
            q->idle_valid = 0;
            continue;
        }
        q->idle_seen = holds;
        q->idle_valid = 1;
        holding++;
    }
    return holding;
}

static void *tick(void *arg)
{
    (void)arg;
    for (;;) {
        sleep_ms(period_ms);
        pthread_mutex_lock(&tick_lock);
        if (__atomic_load_n(&state, __ATOMIC_SEQ_CST) == FI_STOPPED) {
            pthread_mutex_unlock(&tick_lock);
            return NULL;
        }
        unsigned holding = scan();
        pthread_mutex_unlock(&tick_lock);
        if (holding) continue;
        int s = FI_TICKING;
        if (!__atomic_compare_exchange_n(&state, &s, FI_SLEEPING, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
            if (s == FI_STOPPED) return NULL;
        }
        if (__atomic_load_n(&fb()->held_total, __ATOMIC_SEQ_CST) > 0) {
            s = FI_SLEEPING; /* work came between the scan and now: tick on, unless a kick already posted */
            if (__atomic_compare_exchange_n(&state, &s, FI_TICKING, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) continue;
        }
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 1; /* bounded, though the pair above leaves no wake-up lost */
        while (sem_timedwait(&wake, &until) != 0 && errno == EINTR) continue;
    }
}

static void after_fork_in_child(void)
{
    /* Single-threaded here: the parent's timer is not ours. */
    tick_lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    sem_init(&wake, 0, 0);
    if (__atomic_load_n(&state, __ATOMIC_RELAXED) != FI_STOPPED) __atomic_store_n(&state, FI_OFF, __ATOMIC_RELAXED);
}

static void register_fork(void) { pthread_atfork(NULL, NULL, after_fork_in_child); }

/* Starts the timer thread (state was FI_OFF; this caller moved it to FI_TICKING). */
static void start(void)
{
    uint64_t ms = config_get()->fusion_hold_ms;
    period_ms = ms > 60000 ? 60000 : (unsigned)ms;
    pthread_once(&fork_once, register_fork);
    pthread_t t;
    pthread_attr_t attr;
    int ok = sem_init(&wake, 0, 0) == 0 && pthread_attr_init(&attr) == 0;
    if (ok) {
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        ok = pthread_create(&t, &attr, tick, NULL) == 0;
        pthread_attr_destroy(&attr);
    }
    if (!ok) {
        __atomic_store_n(&state, FI_STOPPED, __ATOMIC_SEQ_CST);
        log_msg(LOG_WARN, "fusion: the idle timer cannot start; held kernels wait for the application's next call "
                          "on their queue");
    }
}

void fi_kick(void)
{
    __atomic_fetch_add(&fb()->held_total, 0, __ATOMIC_SEQ_CST); /* raised by the hold: see the pair above */
    int s = __atomic_load_n(&state, __ATOMIC_SEQ_CST);
    while (s != FI_TICKING && s != FI_STOPPED) {
        int to = FI_TICKING;
        if (s == FI_OFF && !config_get()->fusion_hold_ms) to = FI_STOPPED; /* the bound is off */
        if (!__atomic_compare_exchange_n(&state, &s, to, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) continue;
        if (s == FI_OFF && to == FI_TICKING) start();
        else if (s == FI_SLEEPING) sem_post(&wake);
        return;
    }
}

/* Thread creation costs the caller 76 us on an H100's host (the NVIDIA
 * driver's process has many threads), a tenth of a 30-chain run's gain. */
void fi_start_early(void) { fi_kick(); }

void fusion_build_begin(void) { __atomic_add_fetch(&builds_running, 1, __ATOMIC_ACQ_REL); }

void fusion_build_end(void)
{
    __atomic_add_fetch(&builds_ended, 1, __ATOMIC_ACQ_REL);
    __atomic_sub_fetch(&builds_running, 1, __ATOMIC_ACQ_REL);
}

void fi_stop(void)
{
    pthread_mutex_lock(&tick_lock); /* a scan under way ends first */
    int s = __atomic_exchange_n(&state, FI_STOPPED, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&tick_lock);
    if (s == FI_SLEEPING) sem_post(&wake);
}
