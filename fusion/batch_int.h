/* batch_int.h — the batcher's state and records, shared by fusion/enqueue.c
 * (the kernel enqueue: holding, replays, fusing; plan matching and the
 * plan's and automatic fusion's modes; the module's state), fusion/fext.c
 * (the extension API and its mode),
 * fusion/batch.c (queue records, start-up, submitting, cancelling),
 * fusion/fkernel.c (kernel records and argument snapshots), fusion/fevent.c
 * (events handed out for held commands) and fusion/flaunch.c (building and
 * launching fused kernels).
 * Not a public header: fusion/batch.h is the module's manual.
 *
 * Lock order (never taken the other way round):
 *     queue lock (struct fq.lock)  ->  kernel lock (struct fk_kernel.lock)
 *     queue lock  ->  fused-program lock (struct fb_memo.lock)
 *     queue lock  ->  memo list lock (briefly, never calling out while held)
 *     queue lock  ->  automatic fusion's learn lock (fauto.c; a leaf but for
 *                     the log's) and report lock (a leaf)
 * No lock is held while calling anything that can run application code:
 * user-event status changes and event-callback registrations are collected
 * in a struct fb_pending and run after the queue lock is dropped.
 */
#ifndef CLSHIM_BATCH_INT_H
#define CLSHIM_BATCH_INT_H

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "common/check.h"
#include "common/clapi.h"
#include "compiler/llvm_api.h"
#include "fusion/plan.h"

/* The batcher's state, one instance for the process (enqueue.c), reached
 * through fb(). Fields marked atomic are only read and written with the
 * __atomic builtins. */
struct fb_module {
    const struct cl_api *real;   /* the driver's entry points */
    /* real's two kernel enqueues, one load each on the enqueue path */
    __typeof__(((struct cl_api *)0)->clEnqueueNDRangeKernel) enqueue_ndrange;
    __typeof__(((struct cl_api *)0)->clEnqueueTask) enqueue_task;
    struct fusion_plan *plan;
    struct fb_backoff *backoff;  /* per plan sequence (enqueue.c) */
    uint32_t plan_cap;           /* sequences plan has room for (backoff, fq.cand) */
    uint32_t plan_user;          /* the user's plan sequences: the plan's first ones (learned ones follow) */
    int automatic;               /* CLSHIM_FUSION=auto: sequences are learned (fauto.c) */
    int history;                 /* CLSHIM_FUSION_HISTORY: loads decided by earlier runs (flaunch.c) */
    unsigned test_load_us;       /* CLSHIM_FUSION_TEST_LOAD_US: the load recorded, for tests (flaunch.c) */
    int build_by_helper;         /* CLSHIM_FUSION_BUILD=helper: their fused programs are made by the
                                    capture helper where it serves (flaunch.c, fjob.c) */
    int reporting;               /* CLSHIM_FUSION_REPORT is on (fauto.c) */
    int held_total;              /* kernels held on all queues (atomic) */
    uint32_t retirements;        /* times a sequence was retired, brought back, or rested (atomic; fb_retired) */
    int tracked_events;          /* live struct fev records (atomic) */
    int mem_gen;                 /* bumped by every buffer release while armed (atomic) */
    int arm_gen;                 /* the arming generation kernel records decide tracking in (fkernel.c) */
    int sampling;                /* sequences being measured (atomic): the clock is read at first holds only then */
    uint64_t stat_fused, stat_replaced, stat_unfused, stat_refused; /* atomic */
    uint64_t stat_replays;       /* fused launches whose kernels were each held as a replay (atomic) */
    uint64_t stat_unwatched;     /* runs a quiet kernel's enqueue left unwatched (atomic; fa_skipped) */
    unsigned test_slowdown_us;   /* CLSHIM_FUSION_TEST_SLOWDOWN_US: tests of the never-slower rule */
};
/* The module's state; the same address at every call. */
struct fb_module *fb(void) __attribute__((const));

#define STAT_ADD(v, n) __atomic_add_fetch(&(v), (n), __ATOMIC_RELAXED)

/* Never slower (fspeed.c): per plan sequence, the measurements of its
 * occurrences fused against unfused. Under fspeed.c's lock, but for
 * `sstate` and `count`, which the completion of a sequence reads and
 * counts without it. */
#define FS_N 5     /* timed occurrences each way per measurement */
#define FS_START 8        /* fused occurrences of a learned sequence before its first measurement */
#define FS_PLAN_START 256 /* of a plan's sequence: the plan is the user's word, measured later */
struct fs_speed {
    uint32_t sstate;        /* the state as published to fs_way (atomic) */
    uint32_t count;         /* fused occurrences since the last measurement (atomic) */
    uint32_t period;        /* occurrences between measurements (0: none yet; atomic read) */
    uint32_t state, i, gen; /* the state; occurrences of the measurement so far; its number */
    uint32_t nf, nu;        /* occurrences timed each way */
    float fused[FS_N], unfused[FS_N];       /* each occurrence's time: the later of its two intervals */
    int slower, measured;   /* the last verdict, and whether there is one */
    float fused_ms, unfused_ms; /* its medians */
};
/* Per plan sequence, the back-off after refused fusions (enqueue.c): how many
 * of its next occurrences are not held, and its refusals in a row. Atomic. */
struct fb_backoff {
    uint32_t skip;       /* FB_BACKOFF_NEVER: never held again (a lasting refusal, a retired learned sequence) */
    uint32_t refusals;
    uint32_t fused;      /* it fused at least once */
    uint32_t polls;      /* looks for the capture helper's fused program so far (enqueue.c) */
    uint64_t poll_at_us; /* 0, or while the helper makes it: not held before this time (fs_now_ms, us) */
    uint32_t occurrences; /* seen in this run, fused or not (flaunch.c, history) */
    struct fs_speed speed;
};
#define FB_BACKOFF_NEVER UINT32_MAX
/* Sequence s sits out its next n occurrences unless it sits out all (enqueue.c). */
void fb_backoff_skip(uint32_t s, uint32_t n);
/* A sequence that sits out at least FB_REST_MIN more occurrences by count
 * alone (no look at the capture helper's pace pending) rests: its kernels
 * may be quiet, their enqueues forwarded without the queue lock while its
 * first kernel's count its occurrences (the history's deferral of a short
 * run: a 30-chain run on NVIDIA paid the lock, the match and the learner
 * for every kernel it then sent unfused). */
#define FB_REST_MIN 8u
static inline int fb_rests(uint32_t s)
{
    uint32_t skip = __atomic_load_n(&fb()->backoff[s].skip, __ATOMIC_RELAXED);
    return skip != FB_BACKOFF_NEVER && skip >= FB_REST_MIN && !__atomic_load_n(&fb()->backoff[s].poll_at_us, __ATOMIC_RELAXED);
}
/* The quiet enqueue of resting sequence s's first kernel (no lock): 1 when
 * the occurrence it starts was counted and sits out; 0 when the rest ended
 * (quietness is decided again: the enqueue takes the locked path). */
int fb_rest_counts(uint32_t s);

/* The plan's sequence count. Automatic fusion appends learned sequences
 * while other threads match against the plan: an entry is complete before
 * the count that covers it is published, and entries never move. */
static inline uint32_t fb_plan_nseqs(void) { return __atomic_load_n(&fb()->plan->nseqs, __ATOMIC_ACQUIRE); }
/* What a kernel's quietness was decided against (fk_kernel.quiet_key): the
 * plan's size and its retirements and rests so far. */
static inline uint64_t fb_quiet_key(void)
{
    return (uint64_t)(fb_plan_nseqs() + 1) << 32 | __atomic_load_n(&fb()->retirements, __ATOMIC_ACQUIRE);
}
/* A sequence was retired (its back-off set to FB_BACKOFF_NEVER), brought
 * back, or began or ended a rest (fb_rests): quietness is decided again. */
static inline void fb_retired(void) { __atomic_add_fetch(&fb()->retirements, 1, __ATOMIC_RELEASE); }

/* ---- kernels (fkernel.c) ---- */

enum fk_kind { FK_UNSET = 0, FK_VALUE, FK_LOCAL, FK_SVM };

struct fk_arg {
    uint8_t kind;   /* enum fk_kind */
    uint8_t mem;    /* 1: a buffer argument (global/constant pointer); 2: maybe one (no arg info) */
    uint32_t size;  /* bytes of the value (of local memory for FK_LOCAL) */
    union {
        unsigned char inl[16]; /* bytes past `size` are zero (records start zeroed) */
        unsigned char *heap;   /* size > 16 */
    } v;
};
#define FK_BYTES(a) ((a)->size <= 16 ? (const unsigned char *)(a)->v.inl : (const unsigned char *)(a)->v.heap)

/* Equal kind, size and value (SVM: pointer; local: size). Inline: the
 * launch path compares every argument of a fused sequence. */
static inline int fk_arg_equal(const struct fk_arg *a, const struct fk_arg *b)
{
    if (a->kind != b->kind || a->size != b->size) return 0;
    if (a->kind == FK_LOCAL || a->kind == FK_UNSET) return 1;
    if (a->size <= 16 || a->kind == FK_SVM) { /* two loads each, no call to memcmp */
        uint64_t x[2], y[2];
        memcpy(x, a->v.inl, 16);
        memcpy(y, b->v.inl, 16);
        return x[0] == y[0] && x[1] == y[1];
    }
    return !memcmp(a->v.heap, b->v.heap, a->size);
}

#define FK_MAX_SPECS 32 /* a kernel whose program sets more is never fused */

struct fk_kernel {
    pthread_mutex_t lock; /* args, and the driver's copy of them (see fk_submit) */
    cl_kernel k;
    uint64_t id;          /* unique for the process's lifetime (records are freed, ids not reused) */
    char *name;
    cl_context ctx;
    int track;            /* arguments are recorded */
    int arm_gen;          /* the arming generation `track` was decided in */
    int in_plan;
    int svm;              /* an SVM pointer argument was set: never held */
    int origin_ok;        /* pc_kernel_origin knows it: it can be fused */
    int from_il;          /* its program was created from IL (no source exists: route (a) on NVIDIA) */
    unsigned char origin_hash[16]; /* XXH3-128 of its program's kind, options, input, spec constants */
    char *options;        /* its program's build options ("" when unknown) */
    uint32_t nspecs;      /* its IL program's specialization constants, sorted by id */
    struct llvm_spec_const specs[FK_MAX_SPECS];
    cl_uint nargs;
    struct fk_arg *args;  /* the arguments as the application last set them */
    uint64_t args_gen;    /* bumped whenever a value in args changes: two snapshots of one record
                             with the same args_gen hold the same bytes (repeat_match); also when
                             track, svm or all_set change, so an unchanged count means the record
                             may still be held. Written under lock by fk_args_changed, read
                             without it by replays (fk_args_gen) */
    int all_set;          /* fk_complete found every argument set; cleared with any of them */
    cl_uint nheap;        /* arguments whose value is on the heap (size > 16) */
    uint32_t starts_none; /* 1 + the plan's sequence count when none of them started with this kernel
                             (atomic: plan_start on any queue) */
    uint64_t quiet_key;   /* fb_quiet_key() when quiet was last decided (atomic; auto_forwarded) */
    int quiet;            /* automatic fusion: sequences with this kernel were learned and every one
                             was retired (refused for good) or rests (fb_rests): its enqueues may
                             skip the lock and the learner */
    uint32_t rest_seq;    /* quiet: 1 + the resting sequence it starts, whose occurrences its
                             enqueues count (fb_rest_counts); 0: none */
    cl_device_id wg_dev;  /* CL_KERNEL_WORK_GROUP_SIZE cached for this device */
    size_t wg_max;
};


/* r->args_gen, read without r->lock (fkernel.c bumps it under the lock). */
static inline uint64_t fk_args_gen(const struct fk_kernel *r) { return __atomic_load_n(&r->args_gen, __ATOMIC_ACQUIRE); }

/* The record of `k`, created on first sight; NULL when `k` is not a kernel
 * the driver knows or memory runs out. arm_gen: fb()->arm_gen as the caller
 * read it (the enqueue path reads it without a call). */
struct fk_kernel *fk_get(cl_kernel k, int arm_gen);
/* Removes and frees the record of `k` (kernel destroyed). */
void fk_forget(cl_kernel k);
/* Records clSetKernelArg; the real call is made under the kernel lock. */
cl_int fk_set_arg(struct fk_kernel *r, cl_uint index, size_t size, const void *value);
/* Records clSetKernelArgSVMPointer; the real call is made under the kernel lock. */
cl_int fk_set_arg_svm(struct fk_kernel *r, cl_uint index, const void *value);
struct held;
/* The kernel's side of whether an enqueue of r can be held (the queue's is
 * enqueue.c's): on a queue of device dev, with work-groups of wg items (0:
 * no local size), every argument recorded. When it can, and h is not
 * NULL, r's arguments are copied into h's array (kept when it holds them
 * already): holding a kernel allocates nothing once warm. 1 when it can (and
 * was copied); 0 with *why set when it cannot, left as it was when out of
 * memory. Under r->lock (asserted). */
int fk_take(struct fk_kernel *r, cl_device_id dev, size_t wg, struct held *h, const char **why);
void fk_free_args(struct fk_arg *args, cl_uint n);
/* Frees the values kept on the heap (size > 16) of a snapshot array that
 * is kept for reuse; the other entries are left as they are (the next
 * snapshot overwrites them all): cheaper than clearing each. */
void fk_args_release(struct fk_arg *args, cl_uint n);
/* Deep copy (0, or -1 on OOM with *dst cleared); clear frees the value. */
int fk_arg_copy(struct fk_arg *dst, const struct fk_arg *src);
void fk_arg_clear(struct fk_arg *a);
/* Sets `args` on the driver's kernel where they differ from r->args
 * (direction 0), or back to r->args where they differ (direction 1).
 * Caller holds r->lock. */
cl_int fk_apply(struct fk_kernel *r, const struct fk_arg *args, int back);

/* ---- events (fevent.c) ---- */

struct fq;

struct fev {
    cl_event ue;          /* the user event the application holds */
    struct fq *q;         /* the queue the command was held on (records are never freed) */
    cl_command_type type;
    int refs;             /* application references + 1 until completion is wired */
    int held;             /* under q->lock: the command has not been submitted */
    cl_event real;        /* the driver's event of the command carrying the work (atomic;
                             set under q->lock at submission, retained by the record) */
    int done;             /* the completion callback ran (atomic) */
    uint32_t part, parts; /* of a fused launch: this command's place among its parts (0 of 0
                             otherwise; set under q->lock before `real`, read after it) */
};

/* A held event for `e`, or NULL (also when none are tracked). Only for an
 * event the application holds (one it passes in): the record can be freed
 * by a completion callback on another thread once only clshim holds the
 * event, as for the wait list of a held command; read those with fev_look. */
struct fev *fev_find(cl_event e);
/* What a held event `e` stands for, read safely whoever holds it: whether
 * it is one (0: not tracked), its queue, whether its command is still held
 * (meaningful under that queue's lock), and the driver's event behind it,
 * retained for the caller (release it), or NULL while none. */
struct fev_look {
    struct fq *q;
    int held;
    cl_event real;
};
int fev_look(cl_event e, struct fev_look *out);
/* New held event for a command of `type` on q; NULL on failure. */
struct fev *fev_new(struct fq *q, cl_command_type type);
/* Drops one reference; frees at zero. */
void fev_unref(struct fev *ev);

/* Work to run once no lock is held. */
struct fb_pending_item {
    struct fev *ev;
    cl_event real;   /* retained; NULL when submission failed */
    cl_int status;   /* the error that failed it */
};
struct fb_pending {
    struct fb_pending_item *items;
    size_t n, cap;
};
void fb_pending_add(struct fb_pending *p, struct fev *ev, cl_event real, cl_int status);
/* Wires every item's user event to its real event (already stored in
 * ev->real at submission); frees the list. */
void fb_pending_run(struct fb_pending *p);
/* fb_pending_run where there is something to run (the hot paths' case: nothing). */
static inline void fb_pending_flush(struct fb_pending *p)
{
    if (p->n || p->items) fb_pending_run(p);
}

/* ---- queues (batch.c; the enqueue, enqueue.c) ---- */

struct held {
    cl_kernel k;
    struct fk_kernel *rec;
    cl_uint dim;
    size_t off[3], gws[3], lws[3];
    int has_off, has_lws;
    struct fk_arg *args;  /* snapshot, rec->nargs entries (array kept for reuse) */
    uint64_t args_gen;    /* rec->args_gen when the snapshot was taken */
    const char *plan_name;/* plan mode: the first candidate's name it matched (fq_broken), else NULL */
    cl_uint nargs;
    int heap_args;        /* some entry of args owns a heap value (fk_args_release) */
    uint32_t args_cap;    /* entries allocated in args */
    uint64_t snap_id, snap_gen; /* kept across uses of the slot: args already holds the snapshot of
                                   the record with this id at this args_gen (no heap values); 0: none */
    cl_event *waits;      /* retained */
    cl_uint nwaits;
    struct fev *ev;       /* NULL when the application asked for no event */
};

struct fb_memo;

/* A timed occurrence's measurement (fspeed.c). */
struct fs_ticket {
    uint32_t gen;    /* the measurement it belongs to */
    uint32_t follow; /* after this fused occurrence, this many are timed unfused (fs_follow_next) */
};

struct fq {
    pthread_mutex_t lock;
    cl_command_queue q;
    cl_context ctx;
    cl_device_id dev;
    int in_order;
    int dead;             /* the queue was destroyed; the record stays reachable */
    int ext;              /* clStartFusionCLSHIM is active (mode is then the extension API's) */
    unsigned char ext_open;   /* the app called Start and not yet Complete or Cancel (ext may have ended early) */
    unsigned char ext_warned; /* a Complete or Cancel without Start was reported for this queue */
    int off;              /* an internal invariant broke here: never hold again */
    int route;            /* 0 not decided yet, else what the device takes (fusion/froute.h) */
    /* How this queue holds and fuses (enqueue.c, fext.c): chosen when the record is
     * made, the extension API's while ext. In the padding before `held`:
     * the record keeps its size (and so the heap's layout: kernel handles
     * made after it fall where they did for the recent-record sets of
     * fkernel.c). */
    const struct fb_mode *mode;
    struct held *held;
    uint32_t nheld;       /* written under lock, read atomically */
    uint32_t cap;
    uint32_t *cand;       /* plan sequences the held kernels still match */
    uint32_t ncand;
    struct fb_memo *last; /* the fused program used last here */
    struct fb_repeat *repeat; /* the last fused launch's held kernels (flaunch.c) */
    uint32_t replayed;    /* the first `replayed` held kernels were each found equal to the same
                             kernel of that launch as they came (fb_repeat_same): repeat_match
                             needs no comparison when all were; reset when nothing is held */
    uint32_t alone_seq, alone_nseqs; /* plan sequence alone_seq is the only one starting with its
                                        first kernel, as of a plan of alone_nseqs sequences */
    cl_mem *checked;      /* the buffers of the last fusion, found not to alias ... */
    uint32_t nchecked;
    int checked_gen;      /* ... while fb()->mem_gen had this value */
    double fs_t0;         /* when the current occurrence began (its first hold or enqueue), while measuring */
    double fs_last_done;  /* when the queue's last timed occurrence completed ... (under fspeed.c's lock) */
    double fs_last_t0;    /* ... when it began ... */
    uint32_t fs_last_seq, fs_last_gen; /* ... 1 + its sequence (0: it failed), its measurement ... */
    int fs_last_fused;    /* ... and its way */
    uint32_t passing;     /* 1 + the plan sequence whose occurrence passes unheld (back-off or
                             measurement): its kernels start no hold; 0: none */
    uint32_t passing_pos; /* its kernels seen so far */
    uint32_t fs_follow;   /* 1 + the plan sequence whose next occurrences, not held, are timed; 0: none */
    uint32_t fs_pos;      /* the current one's kernels seen so far */
    uint32_t fs_left;     /* occurrences still to time */
    struct fs_ticket fs_tk; /* its measurement */
    struct fa_watch *watch; /* automatic fusion: the run of kernels seen since the last break (fauto.c) */
    struct fk_kernel *steady; /* automatic fusion: an enqueue of this kernel here would change nothing but
                                 be forwarded (fusion_enqueue_kernel's fast path). Set at the end of an
                                 enqueue, cleared whenever q->lock is taken (fq_lock); read without it */
    int quiet;            /* automatic fusion: an enqueue of a quiet kernel (fk_kernel.quiet_at) here
                             would only be forwarded and extend the run (the second fast path);
                             set and cleared as steady */
    uint32_t holds;       /* kernels held here so far (written under lock, read atomically by the idle timer) */
    uint32_t idle_seen;   /* the idle timer's own (fidle.c): holds at its last tick ... */
    int idle_valid;       /* ... while work was held */
    struct fq *next_all;
};

/* Takes q's lock. Whoever takes it may change what an enqueue would do
 * there: the fast path of automatic fusion's steady state (fq.steady) ends
 * until an enqueue finds it again. */
static inline void fq_lock(struct fq *q)
{
    pthread_mutex_lock(&q->lock);
    __atomic_store_n(&q->steady, NULL, __ATOMIC_RELAXED);
    __atomic_store_n(&q->quiet, 0, __ATOMIC_RELAXED);
}

/* Every queue record ever made, newest first (lock-free; never freed). */
struct fq *fb_queues(void);
/* The record of queue q, made on first sight when `create`; NULL when
 * fusion is off or q is not a queue the driver knows. */
struct fq *fq_get(cl_command_queue q, int create);
/* The idle timer's submission (fidle.c): when q holds work, not for the
 * extension API, and has held nothing since `holds` (fq.holds), submits it
 * with a line saying so. 1 when submitted. Tries q->lock only: a queue
 * whose lock is taken is not idle. */
int fb_submit_idle(struct fq *q, uint32_t holds, unsigned period_ms);

/* ---- the modes (enqueue.c; the extension API's in fext.c) ---- */

/* How a queue holds kernels and when it fuses them: a strategy. The plan's
 * (CLSHIM_FUSE, CLSHIM_FUSION_PLAN) and automatic fusion's (CLSHIM_FUSION=auto:
 * the plan grows with the sequences fauto.c learns) hold the kernels that
 * continue a plan sequence and fuse each sequence they complete; the
 * extension API's holds every kernel from clStartFusionCLSHIM to
 * clCompleteFusionCLSHIM, which fuses them. The enqueue path (enqueue.c)
 * calls q->mode's hooks under q->lock; a NULL hook does nothing. */
struct fb_mode {
    /* A kernel r comes, before anything is decided (automatic fusion: the
     * run's period may complete). */
    void (*arrive)(struct fq *q, const struct fk_kernel *r);
    /* Whether r, a kernel that may be held at all, is one this mode holds. */
    int (*admit)(struct fq *q, struct fk_kernel *r);
    /* Whether an admitted r may be held as the next kernel of a repeat of
     * q's last fused launch, of plan sequence seq (fb_repeat_seq). */
    int (*replays)(struct fq *q, int seq);
    /* Matches an admitted r that is no replay against what q holds,
     * submitting (into p) the kernels it breaks off: 1 when r may be held. */
    int (*match)(struct fq *q, struct fk_kernel *r, struct fb_pending *p);
    /* r was held, q's last held kernel (a replay of sequence seq, else
     * seq is FB_NO_REPEAT): fuses what q holds when it is complete. 1 when
     * the idle timer is to watch q. */
    int (*held)(struct fq *q, struct fk_kernel *r, int seq, cl_uint dim, const size_t *gws, struct fb_pending *p);
    /* r is not held (it goes to the driver; q holds nothing): `why` it
     * could not be, NULL when it was not admitted. FM_NOTED when automatic
     * fusion watches it, with FM_REPORT when the report wants its event. */
    int (*passed)(struct fq *q, struct fk_kernel *r, cl_uint dim, const size_t *gws, int task, const char *why);
    /* After a kernel passed (FM_NOTED) was forwarded: ev its event (NULL
     * when the enqueue failed, or no report wants it), follow_done as from
     * fs_follow. */
    void (*forwarded)(struct fq *q, struct fk_kernel *r, cl_event ev, uint32_t follow_done);
};
enum { FM_NOTED = 1, FM_REPORT = 2 };
/* The mode a queue record starts in (the plan's or automatic fusion's). */
const struct fb_mode *fm_standing(void);
/* Fusion mode (the extension API) ends on q, which goes back to its
 * standing mode (under q->lock, asserted). */
void fm_end_ext(struct fq *q);

/* ---- the idle timer (fidle.c) ---- */

/* After a kernel was held on a queue that held nothing (no lock held):
 * makes sure the timer ticks. Costs one load while it does. */
void fi_kick(void);
/* When fusion arms (a plan, or automatic fusion): the timer thread starts
 * now, so that its start does not fall on the enqueue that holds the
 * first kernel, in the application's loop; it finds nothing held and
 * sleeps. */
void fi_start_early(void);
/* At exit, before held work is submitted: the timer stops and never calls
 * the driver again. */
void fi_stop(void);

/* Checks q's invariants (batch.c): 0 when they hold; 1 when one is broken,
 * after logging it and turning fusion off for q (held kernels must then be
 * submitted unfused by the caller) — or abort()s under CLSHIM_STRICT=1.
 * Under q->lock (not asserted: every fused launch passes here, and
 * bench/callgrind_chain.sh counts it). */
int fq_check(struct fq *q, const char *where);

/* Submits every held kernel individually, in order (under q->lock, asserted). */
void fb_submit_held(struct fq *q, struct fb_pending *p);
/* "a+b+c": the names of q's held kernels, for the log (under q->lock, asserted). */
void fb_names_of(const struct fq *q, char *out, size_t len);
/* A wait list with held events replaced by the real events behind them,
 * each retained (buf when n <= buf_len; wl itself when none could be
 * made); fb_done_waits releases them. */
cl_event *fb_subst_waits(cl_uint n, const cl_event *wl, cl_event *buf, size_t buf_len);
void fb_done_waits(cl_uint n, const cl_event *wl, cl_event *waits, cl_event *buf);
/* Releases what a held entry owns (not its event); keeps its argument
 * array for the next kernel held in that slot. */
void fb_held_clear(struct held *h);
/* Cancels fusion on q: lock, submit, unlock, run pending. */
void fb_cancel(struct fq *q, const char *why);
/* fb_cancel(); `broken`: the application itself ended what the queue held
 * (a release), so the learned candidates back off (fb_backoff_broken). */
void fb_cancel_held(struct fq *q, const char *why, int broken);
/* Fuses q's held kernels (plan sequence seq, -1 for the extension API,
 * with the FB_* flags and internal= list of its fusion) or, failing that,
 * submits them; *out as fb_fuse_held's out_event. Under q->lock. */
void fb_fuse_or_submit(struct fq *q, int flags, const char *internal_args, int seq, struct fb_pending *p,
                       cl_event *out);
/* Whether plan sequence s sits out this occurrence (counting it: its back-off). */
int fb_backoff_skips(uint32_t s);
/* Automatic fusion: the held kernels were broken off before they completed
 * a learned candidate, which backs off (under q->lock, asserted). */
void fb_backoff_broken(const struct fq *q);
/* The real event carrying a held-or-submitted event's work, else e itself;
 * a held event of a queue other than `own` is submitted first, `why` the
 * reason logged. */
cl_event fb_subst(struct fq *own, cl_event e, const char *why);

/* Logs a line at info level the first time this text comes, at debug level
 * after that; the exit summary counts the repeats ("again N times: ..."). */
void fb_log_kind(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- never slower (fspeed.c) ---- */

/* How a completed plan sequence runs: fused as usual, fused and timed (a
 * measurement: after its last fused one, the next occurrences are timed
 * unfused, fs_follow_next),
 * or unfused (the back-off of a sequence measured slower fused starts). */
enum { FS_FUSE = 0, FS_TIME_FUSED, FS_UNFUSED };
double fs_now_ms(void);
int fs_way_slow(uint32_t s, struct fs_ticket *t);
static inline uint32_t fs_start(uint32_t s) { return s < fb()->plan_user ? FS_PLAN_START : FS_START; }
/* The way the completion of plan sequence s on a queue runs (caller holds
 * the queue's lock). One load and one add unless a measurement is due. */
static inline int fs_way(uint32_t s, struct fs_ticket *t)
{
    struct fs_speed *f = &fb()->backoff[s].speed;
    uint32_t st = __atomic_load_n(&f->sstate, __ATOMIC_ACQUIRE);
    if (st == 4 /* FS_DONE */) return FS_FUSE;
    if (!st) {
        uint32_t period = __atomic_load_n(&f->period, __ATOMIC_RELAXED);
        if (__atomic_add_fetch(&f->count, 1, __ATOMIC_RELAXED) < (period ? period : fs_start(s))) return FS_FUSE;
    }
    return fs_way_slow(s, t);
}
/* Times an occurrence of s on q, begun at q->fs_t0, through ev (taken
 * over) for the measurement of ticket tk, against q's previous timed
 * occurrence when it was of that measurement and way: the later of the
 * times between their beginnings and between their completions. */
void fs_time(struct fq *q, uint32_t seq, const struct fs_ticket *tk, int fused, cl_event ev);
/* After the last timed fused occurrence of seq on q (under q->lock,
 * asserted): its next tk->follow occurrences are not held, and are timed on
 * q as their kernels pass. */
void fs_follow_next(struct fq *q, uint32_t seq, const struct fs_ticket *tk);
/* A kernel not held passes on q while it follows a sequence: 1 + the
 * sequence when it completes an occurrence (time it through its event),
 * 0 otherwise (a kernel that breaks an occurrence off ends the following). */
uint32_t fs_follow(struct fq *q, const char *name);
/* The medians of the last measurement of s, when there was one, or of
 * the one in progress when it has most of its occurrences (1). */
int fs_measured(uint32_t s, double *fused_ms, double *unfused_ms);
/* An earlier run measured learned sequence s faster fused (fhistory.c):
 * its first measurement in this run comes later. */
void fs_known_faster(uint32_t s);

/* ---- automatic fusion (fauto.c) ---- */

/* "a+b+c": the names of plan sequence s. */
void fa_seq_names(const struct plan_seq *s, char *out, size_t len);

/* Makes room in *plan (allocated here when NULL) for the sequences
 * automatic fusion learns; sets fb()->plan_cap. 0, or -1 on OOM. */
int fa_init(struct fusion_plan **plan);
/* Before a kernel enqueue on q is matched against the plan: a repeat of
 * the run's first kernel may complete the run's period (fa_repeat), which
 * is then learned and matched from this kernel on. Under q->lock (asserted). */
void fa_before_kernel(struct fq *q, const struct fk_kernel *r);
/* A kernel that could be held was submitted as it came (fa_note) or was
 * held (fa_held): either way it extends q's current run (a run held in
 * part is learned as a whole, but is not an unfused occurrence for the
 * report). Held under the extension API, it ends the run. Under q->lock
 * (asserted). */
void fa_note(struct fq *q, struct fk_kernel *r, cl_uint dim, const size_t *gws);
void fa_held(struct fq *q, struct fk_kernel *r, cl_uint dim, const size_t *gws);

/* The report (CLSHIM_FUSION_REPORT; fb()->reporting is set when it is on):
 * fa_note_event gives the event of the kernel just noted (retained here);
 * fa_held's first kernel held starts the fused occurrence's clock; fa_fused after plan sequence `seq` completed on q
 * and was fused (`launch`: the fused launch's event, taken over) or refused
 * (`launch` NULL, `why` the reason). Under q->lock (asserted).
 * fa_write_report appends the entries to the file (at exit). */
void fa_note_event(struct fq *q, cl_event ev);
void fa_fused(struct fq *q, int seq, cl_event launch, const char *why);
void fa_write_report(void);
/* Anything else on q (another command, a sync, a kernel that cannot be
 * held): the current run ends. A run of 2 or more kernels
 * seen twice on q is learned as a plan sequence, so that its next
 * occurrences are held and fused (when the analysis proves it safe).
 * Under q->lock (asserted). */
void fa_break(struct fq *q);
/* The record of kernel k is about to be freed: q's run is dropped if it
 * holds it (a run's records are then always alive under q->lock). Under
 * q->lock (asserted). */
void fa_forget_kernel(struct fq *q, cl_kernel k);
/* The run's first kernel is enqueued again with no sync since it (a loop
 * enqueueing its step without syncs): learns the run's period when the
 * run so far repeats one. Under q->lock (asserted). */
void fa_repeat(struct fq *q);
/* Learned sequence `seq` was refused for a lasting reason (FB_REFUSED_KEY
 * or _ALWAYS). When it never fused, it is retired (never held again) and
 * its next window is learned instead (docs/fusion.md, "Automatic fusion"):
 * 1 then, 0 when nothing changed. Caller holds a queue lock. */
/* Whether kernels built from source can be fused in this process (clang, or
 * fused programs made elsewhere in the cache): decided once, logged when not. */
int fa_sources_fusable(void);
int fa_refused(uint32_t seq);
/* Learned sequence `seq` fused for the first time: when it is a window of
 * a longer run, the kernels of the run after it are learned as the next
 * window. Caller holds a queue lock. */
void fa_first_fused(uint32_t seq);
/* Kernel run[0] of q's run, its only kernel, came again (the steady fast
 * path, without q->lock): counted, appended when another kernel comes. */
void fa_again(struct fq *q);
/* A quiet kernel went past q's run unseen (the second fast path, no lock):
 * the run is not learned from; it starts afresh at the next kernel seen. */
void fa_skipped(struct fq *q);
/* q's run ends where nothing but quiet kernels came since the last end
 * (no lock; fa_break ends the others): the next quiet one is another run
 * not watched. */
void fa_end_unwatched(struct fq *q);
/* Whether q's run is kernel r alone (under q->lock, asserted). */
int fa_run_is(const struct fq *q, const struct fk_kernel *r);
/* Whether q has a run in progress (no lock; a hint to skip fa_break). */
int fa_running(const struct fq *q);

/* ---- fused launch (flaunch.c) ---- */

/* The plan options of one fusion, a bit set passed as `flags` (also part of
 * the fused program's key). */
enum {
    FB_FORCE_BARRIER = 1,
    FB_INTERNAL = 2,
    FB_SOURCE = 4, /* route (b): fusion/fuse_source.h */
    FB_CONST = 8,  /* scalar arguments baked into the fused kernel (their values in the key) */
    FB_PTX = 16    /* route (a): fused IR lowered to PTX (fusion/froute.h) */
};

/* How long a refused fusion stays refused (fb_fuse_held's *lasting). */
enum {
    FB_REFUSED_ONCE = 0, /* this occurrence only: its buffers may alias, memory, the launch */
    FB_REFUSED_KEY = 1,  /* the fused program's key (the kernels, ranges, argument classes and
                            options): the ranges, the analysis or the build said no; remembered
                            by key here and in the cache, so it is never made again */
    FB_REFUSED_ALWAYS = 2, /* the kernels or the machine, whatever the key: printf, image
                            arguments, no libclshim-llvm.so, route (b) with kernels of different
                            programs or from IL; the sequence is not tried again in this process */
    FB_DEFERRED = 3,      /* not refused: the fused program is being made by the capture helper
                            (fusion/fjob.h); the occurrence runs unfused */
    FB_NOT_YET = 4        /* not refused: loading the cached fused program would not pay in this
                            run yet (flaunch.c, history); the sequence sits out a back-off set */
};

/* Fuses and launches q's held kernels (under q->lock: its caller,
 * fb_fuse_or_submit, has fq_check assert it). Returns 0
 * when launched (held entries are then cleared and their events queued in
 * p; *out_event gets a retained event of the launch when not NULL; *nparams
 * the fused kernel's parameter count), or -1 with nothing submitted, `why`
 * set and *lasting one of FB_REFUSED_*. Nothing is compiled or built for a
 * request whose ranges alone refuse it (compiler/fuse_ranges.h), nor for one
 * refused before (in this process, or in the cache on this driver).
 * `seq` is the plan sequence index or
 * -1 for the extension API; `flags` holds FB_* options; `internal_args` is
 * the internal= list (plan.h) restricting FB_INTERNAL to the named buffers,
 * or NULL (every candidate). */
int fb_fuse_held(struct fq *q, int flags, const char *internal_args, int seq, struct fb_pending *p,
                 cl_event *out_event, uint32_t *nparams, int *lasting, char *why, size_t why_len);

/* Replays. A loop enqueueing the chain it had fused before holds each
 * kernel without the plan matching and checks of a first occurrence:
 * fb_repeat_seq is the plan sequence of q's last fused launch (-1: the
 * extension API), or FB_NO_REPEAT when there is none or a buffer was
 * released since (mem_gen: fb()->mem_gen, read by the caller); fb_repeat_same whether the entry h, written in slot
 * q->nheld but not yet counted, is that launch's next kernel: the same
 * record with the same argument count (args_gen) and the same ND-range —
 * so every check that let it be held then holds now. Under q->lock (not
 * asserted: every replayed kernel passes here). */
/* The capture helper's side of a fused program made off the application's
 * thread (fusion/fjob.h, fjob.c): fjob_encode() writes the job for q's held
 * kernels (their programs' inputs, ND-ranges, argument classes, each
 * argument's kind and size, a buffer's size, a value's bytes): 0, or -1
 * where it cannot (a buffer argument the argument info does not name, a
 * program no longer known, memory). In the helper's process, on a q
 * decoded from a job, fb_make_job() is make() with the job's origins
 * (1: *program is OpenCL C, 0: SPIR bitcode, else refused with why,
 * *by_key and *permanent as memo_build records them), fb_meta_shape() the
 * fused kernel's name, ND-range and parameter mapping from its metadata
 * (pk, pi: malloc'd), fb_refused_by() the name refusals are recorded by. */
struct key_buf;
struct pc_origin;
struct fb_shape {
    char name[32];
    uint32_t dim;
    size_t gws[3], lws[3], off[3];
    uint32_t nparams;
    uint32_t *pk, *pi; /* fused parameter -> (held kernel, its argument) */
};
int fjob_encode(const struct fq *q, int flags, const uint32_t *cls, const unsigned char *key, size_t key_len,
                struct key_buf *out);
int fb_make_job(const struct fq *q, int flags, const struct pc_origin *origins, const uint32_t *cls,
                const unsigned char *key, size_t key_len, const char *options, void **program, size_t *size,
                void **meta, size_t *meta_size, int *by_key, int *permanent, char *why, size_t why_len);
int fb_meta_shape(const struct fq *q, const void *meta, size_t meta_size, struct fb_shape *out);
const char *fb_refused_by(void);

#define FB_NO_REPEAT (-2)
int fb_repeat_seq(const struct fq *q, int mem_gen);
int fb_repeat_same(const struct fq *q, const struct held *h);

#endif
