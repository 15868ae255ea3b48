/* capture_wait.h — waiting for the captures outstanding in a cache
 * directory (`clshim cache wait`, `clshim cache export`).
 *
 * A capture handed to a capture helper (program/capture_proc.h) is
 * outstanding while a shared flock on <cache dir>/capture.lock stands for
 * it, so the exclusive lock is free once every capture is stored or
 * dropped: that is what capture_wait() waits for (not for the
 * applications, which may live long after their captures are stored).
 * While it waits it says, every CAPTURE_WAIT_REPORT_S seconds, how many
 * captures are outstanding (the FLOCK lines of the lock file's inode in
 * /proc/locks, one per capture) and which helpers hold them (processes
 * `... capture-helper` with the lock file open, from /proc/PID/fd). Each
 * helper it finds (again every second: new ones start) is raised to normal
 * priority: nice 0 on each of its threads and its session's scheduler
 * group (/proc/PID/autogroup). A helper runs at nice 19 so that it takes
 * only time the applications leave; once someone waits for it, its time is
 * that someone's wall time. Any user may bring a group's nice down to 0;
 * a thread's nice takes CAP_SYS_NICE (or root): where that is refused, one
 * line says so and what it means, and the wait goes on. (Another user's
 * helpers are not found: their /proc/PID/fd cannot be read.)
 */
#ifndef CLSHIM_CAPTURE_WAIT_H
#define CLSHIM_CAPTURE_WAIT_H

#define CAPTURE_WAIT_REPORT_S 5 /* seconds between the lines that say what it waits for */

/* Waits until no capture is outstanding in `dir`, at most timeout_s
 * seconds, raising the helpers it finds. `who` names the command in its
 * lines ("cache wait"). `waiting`: NULL for the lines every
 * CAPTURE_WAIT_REPORT_S seconds (the first after one second), else one
 * line printed instead when it has to wait (an export's). 0: none
 * outstanding (or no helper ever ran there); 1: some still are after
 * timeout_s. */
int capture_wait(const char *dir, unsigned long timeout_s, const char *who, const char *waiting);

/* ---- what became of the captures ------------------------------------------
 * The capture helper appends one line per capture to <dir>/CAPTURE_JOURNAL
 * (one write of O_APPEND: lines never interleave): "stored <key> <bytes>"
 * or "lost <reason> <key> <what happened>", <reason> one of `cache stats`'
 * captures_lost_by_reason names; and "push_refused <n> <line>" when the
 * remote tier's server refused n of its pushes (the first one's line).
 * After the applications exit nothing else would ever say so: the helper's
 * standard error is closed then.
 * capture_journal_take() (the waiting commands, once the captures are done)
 * moves the journal aside, reads it and removes it, so each outcome is told
 * once: 0 with the counts, -1 when there is none. The journal stops growing
 * at CAPTURE_JOURNAL_MAX bytes until someone takes it. */
#define CAPTURE_JOURNAL "captures.journal"
#define CAPTURE_JOURNAL_MAX (1u << 20)
void capture_journal_note(const char *dir, const char *line);
struct capture_outcomes {
    unsigned long stored, lost;
    unsigned long lost_by[16]; /* by enum capture_lost */
    char first_lost[512];     /* the first lost line's text */
    unsigned long pushes_refused; /* pushes the remote tier's server refused */
    char first_refusal[512];  /* the first one's line */
};
int capture_journal_take(const char *dir, struct capture_outcomes *out);

#endif
