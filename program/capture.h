/* capture.h — the background capture worker: reads and stores built
 * binaries off the application's threads (issue 16).
 *
 * Reading a PoCL binary makes PoCL generate code once more; done on the
 * application's thread (at its first synchronisation) that doubled a cold
 * run's time to first result. The program layer hands each program to
 * capture here instead, and one worker thread (nice 5: not idle priority,
 * as PoCL generates code under one process-wide lock that a starved worker
 * would hold while the application's next build waits) runs the capture.
 * Where the driver's code cache is shared between processes (PoCL), the
 * program layer first hands the capture to a helper process
 * (program/capture_proc.h): this worker is then the fallback.
 *
 * The queue holds opaque items (the program layer's records) with the
 * caller's run/done functions:
 *  - capture_submit(item) queues it once: an item already queued is not
 *    queued again (coalesced). While queued or running, the caller keeps
 *    the item alive; done(item) is called on the worker right after
 *    run(item), and the worker touches the item no more after it. Items
 *    dropped at exit get neither (the process is ending).
 *  - The queue is bounded (CAPTURE_QUEUE_MAX): a submit that does not fit
 *    returns -1 and the caller captures inline as before.
 *  - An item waits while the application is busy (its other threads and
 *    children), as the capture helper's requests do, at most
 *    capture_set_defer_max() seconds: the capture takes PoCL's process-wide
 *    code generation lock and would stall the application's work.
 *  - Only one item runs at a time, so the worker never reads a binary
 *    concurrently with another read by the worker (the program layer's
 *    one-reader lock orders it against reads on other threads: PoCL's quirk).
 *  - Exit: capture_exit(budget_ms) (from the program layer's exit handler)
 *    lets the worker finish what is queued for at most budget_ms, then
 *    drops the rest and returns how many were dropped; an item running at
 *    that moment is waited for (a driver call cannot be abandoned). A
 *    submit also registers a quiesce handler with atexit() when the worker
 *    is working or finished work since the last one: exit handlers run in
 *    reverse order, so the worker stops before the teardown of library
 *    state (LLVM's lazily made statics) created by the work it did before
 *    that submit. (The application's own build and first enqueue run the
 *    same code generation first, so such state rarely appears later.)
 *  - The first submit pins the library in memory (RTLD_NODELETE): a
 *    dlclose of clshim (loader mode) never runs the quiesce handler under
 *    the loader's lock nor unmaps the code the worker runs.
 *  - fork(): capture_after_fork_in_child() forgets the queue (the worker
 *    thread does not exist in the child; the items are the parent's).
 */
#ifndef CLSHIM_CAPTURE_H
#define CLSHIM_CAPTURE_H

#include <stddef.h>

#define CAPTURE_QUEUE_MAX 1024

struct capture_ops {
    void (*run)(void *item);           /* reads and stores; on the worker */
    void (*done)(void *item);          /* after run(), on the worker */
};

/* Sets the functions (once, before any submit). */
void capture_init(const struct capture_ops *ops);

/* Starts the worker (and pins the library) ahead of the first submit:
 * called where a capture becomes owed (a build), so that the submit at the
 * application's first synchronisation, inside its first kernels' time,
 * only queues. */
void capture_prepare(void);

/* 0 when queued (or already queued), -1 when the caller must capture
 * itself (no worker thread, queue full, exiting). */
int capture_submit(void *item);

/* Takes item back: 1 when it was queued (now removed; neither run() nor
 * done() will be called for it), 0 when it was not queued (if it was
 * running, this returned after its done()). Not from run() or done(). */
int capture_cancel_or_wait(void *item);

/* At exit: finishes within budget_ms, then stops the worker; returns the
 * number of items dropped. Later calls return 0. */
size_t capture_exit(unsigned budget_ms);

/* The worker waits while the application is busy (common/busy.h), at most
 * this long after an item was queued (CLSHIM_CAPTURE_DEFER_MAX; 0: never
 * waits); exit does not wait. */
void capture_set_defer_max(unsigned seconds);

/* The budget the atexit quiesce handler uses (default 2000 ms). */
void capture_set_exit_budget(unsigned ms);

void capture_after_fork_in_child(void);

#endif
