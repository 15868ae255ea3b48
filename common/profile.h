/* profile.h — what an application's kernels, fused sequences and builds
 * cost: `clshim run --profile` (CLSHIM_PROFILE=DIR; docs/profile.md).
 *
 * Design. Off unless CLSHIM_PROFILE names a directory: then every queue is
 * created with profiling on (interpose/enqueue.c; each query still answers
 * as the application made the queue), every kernel launch's event gets a
 * completion callback (the application's event, retained, or one clshim
 * asks for and releases), and the callback reads the launch's device
 * times through clshim's own clGetEventProfilingInfo, so a kernel held for
 * fusion reports its share of the fused launch as the application would
 * see it. Fused launches (fusion/flaunch.c), their measured gain
 * (fusion/fspeed.c) and every build's outcome (cache/pipeline.c) are
 * recorded beside. The tables live in this process under one mutex, taken
 * by callbacks and by the recorders, never on an enqueue path while
 * profiling is off (profile_active is one relaxed load there).
 *
 * At exit the process writes DIR/profile.PID.txt (the format below), which
 * `clshim-tool profile report DIR` sums over the processes of a run into
 * tables (or --json) and a Chrome trace (--trace FILE). Device times are
 * put on the host's clock at the first timed launch: its QUEUED time is
 * taken to be the moment of its enqueue.
 *
 * The file, one record a line, fields separated by tabs:
 *   clshim-profile	1	PID	COMMAND
 *   kernel	NAME	LAUNCHES	TIMED	TOTAL_NS	MIN_NS	MAX_NS
 *   fused	SEQUENCE	LAUNCHES	KERNELS_REPLACED	TOTAL_NS	UNFUSED_NS	FUSED_NS
 *   build	KIND	KEY16	OUTCOME	WALL_NS	CPU_NS	COMPILE_NS	DEVICE
 *   event	K|F	NAME	QUEUE	START_NS	END_NS	(host clock; at most PROFILE_EVENTS_MAX)
 *   bevent	KIND	KEY16	OUTCOME	START_NS	END_NS
 * UNFUSED_NS and FUSED_NS: the medians of the last speed measurement
 * (0: none ran).
 */
#ifndef CLSHIM_PROFILE_H
#define CLSHIM_PROFILE_H

#include <stdint.h>

#include "common/clapi.h"

#define PROFILE_EVENTS_MAX 200000u
#define PROFILE_FORMAT 1

/* 1 once profile_init() found CLSHIM_PROFILE set (0 before and without). */
extern int profile_active;
/* Reads the configuration once; idempotent. */
void profile_init(void);

/* How a launch's event is held and read: for the application's events,
 * clshim's own entry points (a kernel held for fusion then answers as the
 * application would see it: its share of the fused launch); for fusion's
 * own launches, the driver's. The completion callback is always the
 * driver's clSetEventCallback (clshim's would submit a held kernel). */
struct profile_api {
    cl_int (*info)(cl_event, cl_profiling_info, size_t, void *, size_t *);
    cl_int (*retain)(cl_event);
    cl_int (*release)(cl_event);
    cl_int (*set_callback)(cl_event, cl_int, void(CL_CALLBACK *)(cl_event, cl_int, void *), void *);
};

enum profile_kind { PROFILE_KERNEL, PROFILE_FUSED };

/* A launch to time: `ev` is retained here and released once its times
 * are read (at its completion). `name` is copied. `queue` is the queue's
 * handle, for the trace's rows. */
void profile_launch(const struct profile_api *api, cl_event ev, const char *name, enum profile_kind kind,
                    const void *queue);
/* A launch that could not be timed (the driver refused the callback): counted. */
void profile_untimed(const char *name, enum profile_kind kind);
/* A fused launch of `sequence` in place of `kernels` launches. */
void profile_fused(const char *sequence, unsigned kernels);
/* A speed measurement's medians for `sequence` (ns per occurrence). */
void profile_fused_speed(const char *sequence, double unfused_ns, double fused_ns);
/* One build's outcome ("hit", "hit (memory)", "hit (remote)", "miss",
 * "failed", ...); start_ns on CLOCK_MONOTONIC. */
void profile_build(const char *kind, const char *key16, const char *outcome, const char *device, uint64_t start_ns,
                   uint64_t wall_ns, uint64_t cpu_ns, uint64_t compile_ns);

/* The application's queue properties, remembered where --profile turned
 * profiling on: profile_queue_added() records a queue whose application
 * did not ask for profiling; profile_queue_forced() says whether one is. */
void profile_queue_added(const void *queue);
int profile_queue_forced(const void *queue);
void profile_queue_released(const void *queue);

#endif
