/* fspeed.c — fusion never makes an application slower: per plan sequence,
 * occurrences run fused and unfused are timed against each other now and
 * then, and the faster way is kept.
 *
 * A fused kernel is not always faster: on PoCL it can lose the work-group
 * vectorisation one of its bodies had alone, or stream more buffers at once
 * than the caches hold (docs/fusion.md, "Never slower"). Only a measurement
 * tells. A sequence is fused for its first FS_START occurrences as before
 * (FS_PLAN_START for a plan's); then a measurement runs 1 + FS_N
 * occurrences fused, then 1 + FS_N not held (they run as without clshim,
 * host and device overlapping) and timed as their kernels pass. Each is
 * timed against the previous occurrence on its queue, when that was of the
 * same measurement and the same way: the time between their completions
 * (a completion callback on an event clshim asks for) or between their
 * beginnings (the first hold or enqueue), whichever is longer. That is
 * what one more occurrence costs in the application's own rhythm: the
 * device's time where it is the bottleneck, the host's where the
 * application issues slower than the device runs (PyOpenCL on an H200: a
 * held kernel costs the host more than an enqueue, which saves the device
 * time nobody waits for; completions on a driver's callback thread come in
 * bursts). An application that enqueues without syncs pipelines the
 * occurrences, and one way's host work then overlaps the other's device
 * work: timing them alternately, or from the first enqueue to the
 * completion, charged the fused way with its device time twice (measured
 * 1.2 against 0.43 ms unfused on PyOpenCL array code 1.7x faster fused).
 * With FS_N timed each way, the medians decide:
 *   - automatic fusion keeps the faster way: a sequence slower fused sits
 *     out the back-off's next `period` occurrences (not even held: plain
 *     speed), and is measured again after them; a faster one is fused for
 *     `period` occurrences and measured again. The period doubles while the
 *     verdict stays, from FS_PERIOD_MIN to FS_PERIOD_MAX;
 *   - a plan's sequence is the user's word: it stays fused, measured once,
 *     and one line says when it measured slower.
 * Where an earlier run measured a learned sequence faster fused (the
 * run-length history, fhistory.h), this run's first measurement comes
 * after FS_PERIOD_KNOWN fused occurrences instead of FS_START: the 6
 * unfused occurrences of each early measurement cost a 300-chain run on
 * PoCL a tenth of what fusing gains.
 * Cost outside a measurement: one atomic load and add per completed
 * sequence, and a load per first held kernel (the clock is read only while
 * some sequence is measured). Inside one, a callback per occurrence.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "common/profile.h"
#include "fusion/batch_int.h"

#define FS_PERIOD_MIN 64    /* occurrences between measurements, doubled while the verdict stays */
#define FS_PERIOD_MAX 4096
#define FS_PERIOD_KNOWN 1024 /* before the first measurement, where an earlier run measured it faster fused */
#define FS_WAIT_MAX 256     /* occurrences a measurement's callbacks may take before it is given up */

enum { FS_COUNT = 0, FS_AGAIN, FS_SAMPLE, FS_WAIT, FS_DONE };


static pthread_mutex_t fs_lock = PTHREAD_MUTEX_INITIALIZER; /* a leaf: measurements and their callbacks only */

double fs_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static float median(float *v, uint32_t n)
{
    for (uint32_t i = 1; i < n; i++) /* insertion sort: n is FS_N */
        for (uint32_t j = i; j && v[j - 1] > v[j]; j--) {
            float t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}


static int is_auto(uint32_t s) { return s >= fb()->plan_user; }

static void start(struct fs_speed *f)
{
    f->state = FS_SAMPLE;
    f->i = 0;
    f->nf = f->nu = 0;
    f->gen++;
    __atomic_add_fetch(&fb()->sampling, 1, __ATOMIC_RELAXED);
}

/* The measurement of s is complete: keeps the faster way (under fs_lock, asserted). */
static void decide(uint32_t s, struct fs_speed *f)
{
    if (!CLSHIM_ASSERT_HELD(&fs_lock)) return; /* no verdict: the measurement stays open */
    float fm = median(f->fused, f->nf), um = median(f->unfused, f->nu);
    int slower = fm > um;
    __atomic_sub_fetch(&fb()->sampling, 1, __ATOMIC_RELAXED);
    uint32_t period = f->period && slower == f->slower ? f->period * 2 : FS_PERIOD_MIN;
    __atomic_store_n(&f->period, period > FS_PERIOD_MAX ? FS_PERIOD_MAX : period, __ATOMIC_RELAXED);
    f->slower = slower;
    f->fused_ms = fm;
    f->unfused_ms = um;
    f->measured = 1;
    char names[512];
    fa_seq_names(&fb()->plan->seqs[s], names, sizeof names);
    if (__atomic_load_n(&profile_active, __ATOMIC_RELAXED)) profile_fused_speed(names, um * 1e6, fm * 1e6);
    if (!is_auto(s)) {
        /* One line, at the default level: the user asked for this fusion. */
        if (slower)
            log_msg(LOG_WARN, "fusion: plan %s: %s measured slower fused (median %.3f ms against %.3f ms unfused, "
                              "%d occurrences each); fused as the plan says", fb()->plan->seqs[s].where, names, fm, um,
                    FS_N);
        f->state = FS_DONE;
        return;
    }
    if (!slower) {
        log_msg(LOG_DEBUG, "fusion: auto: %s measured faster fused (median %.3f ms against %.3f ms unfused); "
                           "measured again after %u occurrences", names, fm, um, (unsigned)f->period);
        __atomic_store_n(&f->count, 0, __ATOMIC_RELAXED);
        f->state = FS_COUNT;
        return;
    }
    fb_log_kind("fusion: auto: %s measured slower fused than unfused; it runs unfused and is measured again now "
                "and then", names);
    log_msg(LOG_DEBUG, "fusion: auto: %s slower fused (median %.3f ms against %.3f ms unfused); not held for its "
                       "next %u occurrences", names, fm, um, (unsigned)f->period);
    fb_backoff_skip(s, f->period);
    f->state = FS_AGAIN;
}

void fs_known_faster(uint32_t s)
{
    struct fs_speed *f = &fb()->backoff[s].speed;
    pthread_mutex_lock(&fs_lock);
    if (f->state == FS_COUNT && !f->period && !f->measured) {
        f->slower = 0; /* the verdict this run's first measurement may confirm (the period doubles) */
        __atomic_store_n(&f->period, FS_PERIOD_KNOWN, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&fs_lock);
}

int fs_way_slow(uint32_t s, struct fs_ticket *t)
{
    struct fs_speed *f = &fb()->backoff[s].speed;
    int way = FS_FUSE;
    pthread_mutex_lock(&fs_lock);
    switch (f->state) {
    case FS_COUNT:
        if (__atomic_load_n(&f->count, __ATOMIC_RELAXED) < (f->period ? f->period : fs_start(s))) break; /* another thread started it */
        /* fall through */
    case FS_AGAIN:
        start(f);
        /* fall through */
    case FS_SAMPLE:
        /* 1 + FS_N held occurrences fused and timed; after the last, the
         * next 1 + FS_N are not held and are timed as they pass
         * (fs_follow). The first of each way is timed from the other way's
         * completion: not counted. */
        way = FS_TIME_FUSED;
        t->gen = f->gen;
        t->follow = 0;
        if (++f->i == 1 + FS_N) {
            t->follow = 1 + FS_N;
            f->state = FS_WAIT;
            f->i = 0;
        }
        break;
    case FS_WAIT:
        if (f->nf >= FS_N && f->nu >= FS_N) {
            decide(s, f);
            if (f->state == FS_AGAIN) way = FS_UNFUSED; /* the back-off starts with the next occurrence */
        } else if (++f->i > FS_WAIT_MAX) { /* events that never completed, occurrences broken off: later */
            __atomic_sub_fetch(&fb()->sampling, 1, __ATOMIC_RELAXED);
            __atomic_store_n(&f->count, 0, __ATOMIC_RELAXED);
            f->state = FS_COUNT;
        }
        break;
    default:
        break;
    }
    __atomic_store_n(&f->sstate, f->state, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&fs_lock);
    return way;
}

struct fs_timing {
    struct fq *q;
    uint32_t seq, gen;
    int fused;
    double t0; /* when the occurrence began */
};

static void CL_CALLBACK done(cl_event ev, cl_int status, void *arg)
{
    struct fs_timing *t = arg;
    double now = fs_now_ms();
    pthread_mutex_lock(&fs_lock);
    struct fq *q = t->q;
    /* The previous occurrence on this queue must be of the same
     * measurement and way, and complete, for the interval to be one
     * occurrence's cost in that way. */
    int follows = q->fs_last_seq == t->seq + 1 && q->fs_last_gen == t->gen && q->fs_last_fused == t->fused &&
                  now >= q->fs_last_done;
    /* The first occurrence of a measurement began before the clock was
     * read at holds (its t0 is 0): the next is timed by completions only. */
    double done_gap = now - q->fs_last_done;
    double begin_gap = t->t0 > 0 && q->fs_last_t0 > 0 && t->t0 > q->fs_last_t0 ? t->t0 - q->fs_last_t0 : 0;
    double took = done_gap > begin_gap ? done_gap : begin_gap;
    q->fs_last_done = now;
    q->fs_last_t0 = t->t0;
    q->fs_last_seq = status == CL_COMPLETE ? t->seq + 1 : 0;
    q->fs_last_gen = t->gen;
    q->fs_last_fused = t->fused;
    struct fs_speed *f = &fb()->backoff[t->seq].speed;
    if (status == CL_COMPLETE && follows && t->gen == f->gen) {
        uint32_t *n = t->fused ? &f->nf : &f->nu;
        float *v = t->fused ? f->fused : f->unfused;
        if (*n < FS_N) v[(*n)++] = (float)took;
        log_msg(LOG_DEBUG, "fusion: sequence %u measured %s: %.3f ms (%.3f between completions, %.3f between beginnings)",
                (unsigned)t->seq, t->fused ? "fused" : "unfused", took, done_gap, begin_gap);
    }
    pthread_mutex_unlock(&fs_lock);
    fb()->real->clReleaseEvent(ev);
    free(t);
}

void fs_follow_next(struct fq *q, uint32_t seq, const struct fs_ticket *tk)
{
    if (!CLSHIM_ASSERT_HELD(&q->lock)) return; /* nothing followed: no unfused occurrence timed */
    fb_backoff_skip(seq, tk->follow);
    q->fs_follow = seq + 1;
    q->fs_pos = 0;
    q->fs_left = tk->follow;
    q->fs_tk = *tk;
}

uint32_t fs_follow(struct fq *q, const char *name)
{
    uint32_t seq1 = q->fs_follow;
    const struct plan_seq *s = &fb()->plan->seqs[seq1 - 1];
    if (strcmp(s->names[q->fs_pos], name)) {
        /* Before its first kernel, other kernels may pass: the rest of the
         * run the sequence is a window of (fauto.c). Once begun, another
         * kernel ends the following (or one held elsewhere). */
        if (q->fs_pos) q->fs_follow = 0;
        return 0;
    }
    if (!q->fs_pos) q->fs_t0 = fs_now_ms();
    if (++q->fs_pos < s->n) return 0;
    q->fs_pos = 0;
    if (--q->fs_left == 0) q->fs_follow = 0;
    return seq1;
}

void fs_time(struct fq *q, uint32_t seq, const struct fs_ticket *tk, int fused, cl_event ev)
{
    struct fs_timing *t = ev ? malloc(sizeof *t) : NULL;
    if (t) {
        *t = (struct fs_timing){q, seq, tk->gen, fused, q->fs_t0};
        q->fs_t0 = 0; /* used: a later occurrence without a reading of its own gets none */
        if (fb()->real->clSetEventCallback(ev, CL_COMPLETE, done, t) == CL_SUCCESS) return;
        free(t);
    }
    if (ev) fb()->real->clReleaseEvent(ev);
}

int fs_measured(uint32_t s, double *fused_ms, double *unfused_ms)
{
    struct fs_speed *f = &fb()->backoff[s].speed;
    pthread_mutex_lock(&fs_lock);
    int m = f->measured;
    *fused_ms = f->fused_ms;
    *unfused_ms = f->unfused_ms;
    if (!m && f->nf >= FS_N / 2 + 1 && f->nu >= FS_N / 2 + 1) { /* a measurement the process ended in: most of it */
        float fused[FS_N], unfused[FS_N];
        memcpy(fused, f->fused, sizeof fused);
        memcpy(unfused, f->unfused, sizeof unfused);
        *fused_ms = median(fused, f->nf);
        *unfused_ms = median(unfused, f->nu);
        m = 1;
    }
    pthread_mutex_unlock(&fs_lock);
    return m;
}
