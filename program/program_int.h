/* program_int.h — what the files of program/ share (not for other rooms).
 *
 * program.h is the room's contract with interpose/, origin.h with fusion/;
 * this header is the records and helpers the files of the room use among
 * themselves, one concern per file (each file's comment says which).
 *
 * Invariants:
 *  1. rec->refs mirrors the handle's reference count as the app and our
 *     substituted kernels hold it; the record dies with the handle.
 *  2. rec->effective, when set, is a built program holding one reference
 *     of ours; kernels created from it hold their own (driver) references.
 *  3. A flight that pipeline_begin() left filling is filled or abandoned, and
 *     a cross-process claim released, before pc_build returns.
 * Lock order: pc_pending_lock, then a record's lock, then pc_binary_reads.
 */
#ifndef CLSHIM_PROGRAM_INT_H
#define CLSHIM_PROGRAM_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/device.h"
#include "cache/key.h"
#include "cache/pipeline.h"
#include "cache/quirks.h"
#include "common/check.h"
#include "common/clapi.h"
#include "common/config.h"
#include "common/log.h"
#include "common/objmap.h"
#include "program/program.h"

struct capture_reply; /* program/capture_proc.h */

struct pc_dev {
    cl_device_id dev;
    struct pipeline_flight f; /* key (NULL: not cacheable), hash, compile time, the lookup */
    char *log;              /* the original build's log when served from the cache */
    void *object;           /* a compile hit: the compiled object in hand (owned) */
    size_t object_size;
    int needs_capture;      /* built by the driver here: store (again) at use, release or exit */
    int refresh;            /* ... or a hit of an entry built before any run: captured again
                             * after its first use (run.c, owe_refresh()) */
    cl_program attached;    /* the built program lent to the in-memory tier */
};

struct spec_value {
    cl_uint id;
    size_t size;
    unsigned char value[8];
};

struct pc_program {
    int ran;                /* a kernel of it was enqueued (late capture) */
    /* The names of its kernels enqueued since its build, as xxh64 hashes
     * (pc_ran_names_lock): whether reading its binary here would generate
     * code only for kernels the application ran (late_capture.c). */
    uint64_t *ran_names;
    size_t nran_names, ran_names_cap;
    int pending;            /* on the pending-capture list */
    int queued;             /* with the capture worker (pc_pending_lock; it holds a driver reference) */
    int orphaned;           /* released by the app while queued: the worker frees it (pc_pending_lock) */
    int source_build;       /* built from source by clBuildProgram here (rec->lock) */
    int handed_off;         /* its captures went to the capture helper (rec->lock) */
    int captured_here;      /* built again before the helper answered: captured here (rec->lock) */
    uint64_t built_cpu_ns;  /* the process's CPU time when its build ended (rec->lock) */
    uint64_t synced_cpu_ns; /* and at the synchronisation after its first run; 0: none yet (rec->lock) */
    cl_program handle;
    cl_context context;
    enum key_kind kind;     /* KEY_SOURCE or KEY_IL */
    int translated;         /* IL for a device without IL: the handle is a placeholder */
    int to_ptx;             /* translated IL for devices that take PTX: route (a) (compiler/route_a.h) */
    char *input;            /* source (concatenated) or IL bytes */
    size_t input_len;
    struct spirv_scan *scan; /* translated IL: its spec ids */
    unsigned nkernels;      /* live kernels (atomic): a build or compile is refused then */
    pthread_mutex_t lock;   /* guards everything below */
    /* The source as the last build keyed it and the driver built it, when it
     * ends with an application's cache-defeating marker: its neutral form
     * (cache/quirks.h), input_len bytes; NULL: the input itself. */
    char *keyed;
    struct app_marker marker; /* that marker (keyed set) */
    unsigned refs;
    struct spec_value *specs;
    size_t nspecs;
    cl_program effective;
    int answers_options;    /* a compile served from the cache: the driver never saw the options */
    int arg_info_added;     /* clshim added -cl-kernel-arg-info (fusion armed): not the app's */
    char *compile_options;  /* a compile hit's options as the driver would have had them */
    char *compile_answer;   /* what the driver answers for them (options_answer), once asked */
    int failed;             /* the last build's failure was shared: status is CL_BUILD_ERROR */
    char *options;
    char *driver_options;   /* what the driver was given (the key's), for a capture's build */
    char *cwd;              /* the working directory at the build (relative header paths) */
    struct pc_dev *devs;
    struct pipeline_flight *flights; /* one per device, parallel to devs */
    size_t ndevs;
};

/* A kernel of a tracked program (kernel.c). */
struct pc_kernel_rec {
    struct pc_program *prog;
    unsigned refs;
    int substituted;
    int ran; /* enqueued once at least (atomic) */
    char name[];
};

extern const struct cl_api *pc_real;
extern objmap *pc_programs;       /* app handle -> struct pc_program */
extern objmap *pc_kernels;        /* kernel of a tracked program -> struct pc_kernel_rec */
extern pthread_mutex_t pc_binary_reads; /* every read of a program's binaries (driver.c) */
extern pthread_mutex_t pc_pending_lock; /* the pending list and rec->queued, rec->orphaned */
extern pthread_mutex_t pc_ran_names_lock; /* every record's ran_names: held for an append or a scan only */
extern atomic_ulong pc_foreign_builds;  /* builds of programs clshim did not create */

/* The text the key names and the driver builds (rec->lock held). */
static inline const char *built_input(const struct pc_program *rec) { return rec->keyed ? rec->keyed : rec->input; }

/* record.c: records, their devices and flights, references. */
void free_devs(struct pc_program *rec);
void free_record(struct pc_program *rec);
struct pc_program *new_record(cl_program handle, cl_context ctx, enum key_kind kind, char *input, size_t len);
int context_devices(cl_context ctx, cl_device_id **devs, cl_uint *n);
void set_effective(struct pc_program *rec, cl_program p);
int new_devs(struct pc_program *rec, cl_uint ndev, const cl_device_id *devs, enum key_kind kind);
/* The call's devices, or (list NULL) the context's in *owned (freed by
 * the caller); -1 when they cannot be had. */
int device_list(cl_context ctx, cl_uint n, const cl_device_id *list, cl_device_id **owned, cl_uint *ndev,
                const cl_device_id **devs);
void before_last_reference(struct pc_program *rec);
void drop_reference(struct pc_program *rec);

/* driver.c: clocks, binaries and logs read from the driver, the retry. */
uint64_t now_ns(void);
uint64_t process_cpu_ns(void);
int retry_after_emptying_tier(cl_int err, const char *what);
int binaries_unsafe(cl_program prog, size_t n, const struct pc_dev *want);
int read_binaries(cl_program prog, size_t n, const struct pc_dev *want, void **bins, size_t *sizes);
char *read_build_log(cl_program prog, cl_device_id dev);

/* exit.c: exit handlers and fork. */
void need_exit_handler(void);
void arm_owed_capture_at_exit(void);
void after_fork_in_child(void);

/* late_capture.c: the pending list and the capture (pc_pending_lock, then rec->lock). */
void add_pending(struct pc_program *rec);
void pending_captures_reset(void);
void remove_pending(struct pc_program *rec);
/* Has the capture worker send capture_proc's queued requests at its turn
 * (the application idle, exiting, or CLSHIM_CAPTURE_DEFER_MAX later); at
 * once where no worker takes it. */
void pc_hand_queued_later(void);
void run_capture(void *item);
void capture_done(void *item);
int capture_late(const struct pc_program *rec);
void keep_reply_in_memory(const struct capture_reply *r);
void capture(struct pc_program *rec);
void capture_owed_at_exit(unsigned budget_ms);

/* il.c: IL translation. */
int cmp_spec(const void *a, const void *b);
cl_program translate_il(struct pc_program *rec, cl_uint ndev, const cl_device_id *devs, const char *options,
                        cl_int *err, char *why, size_t why_len);

/* build.c: a device clshim caches nothing on (also compile.c, derived.c). */
int stands_aside(const struct device_info *info);

/* options.c: added build options. */
char *options_with_arg_info(const char *options);
char *options_appended(const char *options, const char *append);
/* After a failed build (link) with CLSHIM_BUILD_OPTIONS_APPEND (_LINK_)
 * options: one warning when the application's options alone succeed. */
void options_blame_build(cl_program prog, cl_uint ndev, const cl_device_id *devs, const char *app_options,
                         const char *append);
void options_blame_link(cl_context ctx, cl_uint ndev, const cl_device_id *devs, const char *app_options,
                        cl_uint ninputs, const cl_program *inputs, const char *append);
void restore_app_options(cl_program prog, const char *options);

/* query.c: queries. */
cl_int answer(const void *data, size_t n, size_t size, void *value, size_t *size_ret);
cl_int program_for(struct pc_program *rec, int about_build, cl_program *out);

/* kernel.c: kernel records. */
struct pc_kernel_rec *kernel_record(cl_kernel k);
struct pc_program *kernel_program(struct pc_kernel_rec *kr);

/* run.c: the pipeline protocol (cache/pipeline.h), once for every kind
 * of cached program. A run is one build, compile, link or derived program
 * on n devices; its kind says, as data, how each step is done. */
struct run;
struct run_kind {
    unsigned begin_flags; /* pipeline_begin()'s */
    unsigned store;       /* RUN_* below */
    cl_int no_program;    /* stored as the error when the driver said CL_SUCCESS but made nothing */
    /* A failure of this key shared with this run; NULL: the kind builds. */
    void (*failed)(struct run *r, cl_int *err);
    /* Every flight hit: the program from the cached binaries, or NULL with
     * *err (the driver refused them); took_hit (may be NULL): the record
     * keeps what it answers queries with. */
    cl_program (*from_hits)(struct run *r, cl_int *err);
    void (*took_hit)(struct run *r, cl_program p);
    /* The driver's work (timed): the program built, or NULL with *err. */
    cl_program (*driver)(struct run *r, cl_int *err);
    /* Right after the driver, before the outputs are stored (may be NULL):
     * returns the program (or NULL, *err set, having released it). */
    cl_program (*finish)(struct run *r, cl_program p, cl_int *err);
    /* The stored value made of a device's binary (NULL: the binary). */
    void *(*value)(struct run *r, const void *bin, size_t size, size_t *total);
    /* Built while the cache takes no part (may be NULL). */
    void (*uncached)(struct run *r, const struct pipeline_clock *clk);
};
#define RUN_SHARE_FAILURE 1u /* a failed build is shared with the threads waiting for it */
#define RUN_CAPTURE 2u       /* rec's program: stored late where its driver wants it (late_capture.c),
                              * its binaries checked for the read quirk, an unreadable one logged */
#define RUN_LOGS 4u          /* build logs are stored with the binaries */
struct run {
    const struct run_kind *kind;
    struct pc_program *rec;     /* the record built; NULL for a derived program */
    struct pipeline_flight *fl; /* n flights, parallel to devs */
    struct pc_dev *devs;
    size_t n;
    int cached;                 /* the pipeline takes part (begin ... end) */
    int nothing_built;          /* set by the driver step: nothing to store (a refused make()) */
    int built;                  /* set by the run: the driver built */
    int refresh;                /* set by the run: a hit owes a capture after its first use */
    cl_context ctx;
    const cl_device_id *devlist; /* n devices */
    const char *options;
    const void *handle;         /* named in pipeline_rejected()'s line */
    void *arg;                  /* the kind's own */
};
cl_program run_pipeline(struct run *r, cl_int *err);

/* The devices, options and callback of the application's compile or link
 * call, as it made it (compile.c, link.c). */
struct app_call {
    cl_uint num_devices;
    const cl_device_id *devices;
    const char *options;
    void(CL_CALLBACK *notify)(cl_program, void *);
    void *user_data;
};
cl_program program_from_hits(cl_context ctx, struct pipeline_flight *fl, cl_uint ndev, const cl_device_id *devs,
                             const char *options, int build, cl_int *err);
void logs_from_hits(struct pc_program *rec);
cl_program run_hits_built(struct run *r, cl_int *err);

#endif
