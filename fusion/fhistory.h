/* fhistory.h — automatic fusion's run-length history: whether loading a
 * cached fused program pays in this run.
 *
 * Loading a fused program costs the application's thread once (NVIDIA:
 * about 275 us for PTX its ComputeCache has compiled, 16-26 ms without)
 * and each fused occurrence then saves a little (8 us for bench_short's
 * chain there): a run of 30 chains loses, one of 300 gains. Only the run's
 * length decides, and only an earlier run can tell it. So, per fused
 * program and device, the cache keeps the last run's count of the
 * sequence's occurrences, the last load measured (the load and the first
 * fused launch, on the application's thread) and what an occurrence saved
 * (fspeed.c's medians), written at exit (program/origin.h
 * pc_derived_history), kept under the sequence's kernels (their programs
 * and names) so that it is read when the sequence is learned (fh_learned),
 * before any occurrence is held. The program is loaded when the
 * occurrences expected from now on save more than the load costs
 * (fh_wait); else the sequence sits out from its first occurrence on, not
 * held nor keyed, until the run has gone on long enough to pay, and is
 * decided again then (fh_defers). Plans and the extension API are the
 * user's word: never deferred. A wrong prediction costs speed, never a
 * result.
 */
#ifndef CLSHIM_FUSION_FHISTORY_H
#define CLSHIM_FUSION_FHISTORY_H

#include <stddef.h>
#include <stdint.h>

struct fq;
struct fh_entry;
struct fk_kernel;

/* What the gain expected must cover: FH_MARGIN times the load. A load is
 * a sure cost, the gain per occurrence a few occurrences' medians, which on
 * an H100 came out at 3.3 us in one session and 11-33 us in another where
 * the chains' own medians said 10-12 us; a program loaded for a gain that
 * only just covers it makes the run slower (a 30-chain run: 0.92x). */
#define FH_MARGIN 2

/* The occurrences to sit out before loading pays (0: load now), for a
 * sequence seen `seen` times in this run whose last run saw `last`, by a
 * load of load_us and a gain of gain_ns per occurrence: the occurrences
 * expected from now on are the last run's less those seen, but at least as
 * many as seen (a run that outlasts the last one is taken to go on as long
 * again), and their gain must cover FH_MARGIN loads; it waits until seen *
 * gain does. A gain not measured
 * (<= 0) or fewer than two loads measured (a program's first load often
 * compiles what the driver's own cache then keeps: NVIDIA's JIT, so it says
 * little about the next) predicts nothing: load. Pure. */
uint32_t fh_wait(uint32_t last, uint64_t seen, uint32_t load_us, uint32_t loads, int32_t gain_ns);

/* Sequence seq was just learned on q (its kernels run[0..n)): its
 * record read, and where loading its fused program does not pay in this
 * run, its back-off set so that its occurrences sit out. Under q->lock. */
void fh_learned(const struct fq *q, uint32_t seq, struct fk_kernel *const *run, uint32_t n);

/* Whether q's held kernels (plan sequence seq) sit out instead of loading
 * their fused program now: 1 with the sequence's back-off set and `why`; 0
 * to go on, *entry the record to time the load in (NULL: not kept: a
 * plan's, the extension API's, the cache or the history off). The record
 * is the one fh_learned read, or read now (another device, a window
 * learned later). Under q->lock. */
int fh_defers(const struct fq *q, int seq, struct fh_entry **entry, char *why, size_t why_len);

/* The program of `entry` was loaded (not made) and first launched in us
 * microseconds on the application's thread: the load this run records. */
void fh_loaded(struct fh_entry *entry, double us);

#endif
