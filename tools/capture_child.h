/* capture_child.h — one capture in a process of its own: `clshim-tool
 * capture-one` (tools/capture_helper.c), for the capture helper and for
 * `clshim cache warm` (tools/warm_cmd.c).
 *
 * The child reads a request (program/capture_proc.h's encoding) on its
 * standard input, builds it on the request's device under cache/sandbox.h,
 * served the request's snapshot (a source or compile build), reads the
 * binary and answers through a memory file. No driver call can be
 * abandoned, so the budget is the child's CPU time with its children's
 * (PoCL's linker runs), looked at by capture_child_done(): past it, the
 * child is killed and the capture is over_cost. The caller stores what
 * comes back (an LMDB environment is not shared with a child).
 */
#ifndef CLSHIM_CAPTURE_CHILD_H
#define CLSHIM_CAPTURE_CHILD_H

#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

#include "cache/store.h"

struct capture_child {
    pid_t pid;
    int in, out;        /* the request's memory file, the answer's */
    uint64_t budget_ns; /* CPU of the child and its children */
    int over;           /* killed at its budget */
    int status;         /* wait status, once done */
    struct rusage ru;   /* the child's, once done */
};

/* Starts the capture of req[0..len) in a child; 0, or -1 with *msg. */
int capture_child_start(struct capture_child *c, const void *req, size_t len, uint64_t budget_ns, char *msg,
                        size_t msg_len);
/* Looks once, without waiting: 1 when the child ended (reaped), 0 while it
 * runs (killed when past its budget; a later look reaps it). */
int capture_child_done(struct capture_child *c);
/* A fused program the fusion's analysis refused (fusion/fjob.h): the
 * capture's answer, not a loss (capture_child_answer()'s *why). */
#define CAPTURE_REFUSED CAPTURE_LOST_COUNT

/* A done child's answer: 0 with *bin (malloc'd), *size and the CPU time of
 * the read, or -1 with *why and msg. Closes the child's files either way. */
int capture_child_answer(struct capture_child *c, void **bin, size_t *size, uint64_t *read_ns,
                         enum capture_lost *why, char *msg, size_t msg_len);
/* The CPU time a done child used. */
uint64_t capture_child_cpu_ns(const struct capture_child *c);

#endif
