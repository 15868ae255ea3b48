/* capture_proc.h — late captures done by another process (issue 16).
 *
 * Reading a PoCL binary makes PoCL generate code once more, and PoCL runs
 * all code generation of a process under one process-wide lock: a capture
 * on a thread of the application (program/capture.h) still takes turns
 * with the application's next builds. So where the driver's own code cache
 * is shared between processes (device_info()->shared_codegen_cache: PoCL
 * with its kernel cache on), the program layer hands the capture of a
 * program built from source to a helper process instead:
 *
 *  - capture_proc_send() is the application's side: one request, the
 *    program's inputs (source, the options the driver got, the device's
 *    key identity, the working directory) and the key the application
 *    computed, written into a memfd that one non-blocking sendmsg() passes
 *    over a SOCK_SEQPACKET socket (each request arrives whole or not at
 *    all), with a new open of <cache dir>/capture.lock holding a shared
 *    flock: the request holds the lock until the helper stored or dropped
 *    it, so `clshim cache wait` (the lock taken exclusively) waits for
 *    captures, never for the application. A full socket, no helper, or no
 *    lock returns -1: the caller captures in this process as before.
 *  - Requests come from the capture worker (program/capture.h) when it
 *    would have read the binary itself: the application idle, or
 *    exiting, or CLSHIM_CAPTURE_DEFER_MAX after the synchronisation (the
 *    helper's start is background work too: at the synchronisation it
 *    cost a short run its first chain); without the worker, at the
 *    synchronisation. Automatic fusion's jobs (program/origin.h) are made
 *    at the application's first look at a sequence: they wait here
 *    (capture_proc_queue()) for the worker's turn the same way.
 *  - The helper is started at the first request: posix_spawn (no fork: no
 *    atfork handler of the application runs) of `clshim-tool
 *    capture-helper` (CLSHIM_CAPTURE_HELPER, or the one next to this
 *    library), with the application's environment without clshim
 *    (common/childenv.h). That process forks the helper into a session of
 *    its own and exits; the caller reaps it at once (waitpid on its pid
 *    only), so the application has no child left.
 *  - The helper (capture_helper_main(), tools/) builds each program again
 *    in its own process (at nice 19 while the application lives and
 *    nobody waits for the key, else at normal priority): a hit in the
 *    driver's cache, which
 *    holds the code the application generated at first enqueue, so the
 *    binary it reads holds the same work-group functions. Its build reads
 *    no file the key names from the file system: the request carries the
 *    bytes the application's key was made of (its snapshot), and the build
 *    runs under cache/sandbox.h, served those bytes. It stores the binary
 *    under the application's key (pipeline_store_late()) only when the
 *    snapshot is exactly what the key names and the sandbox saw the build
 *    read nothing else of the user's: exact by construction, whatever
 *    happens to the files meanwhile (a header rewritten and restored, a
 *    generated header deleted after the run). Each capture runs in a
 *    process of its own, stopped at twice the application's build CPU
 *    (reading a PoCL binary generates code for every kernel): such a key
 *    is noted (pipeline_note_over_cost) and not handed over again. The
 *    helper takes the key's cross-process claim over from the
 *    application at once, so a process wanting the key waits for the
 *    capture rather than compiling it again. It answers each
 *    request on the same socket (capture_proc_reply(): the bytes when
 *    stored), which the application reads at its next build
 *    (capture_proc_poll()) into its in-process tier. Not while the
 *    application is busy (its threads' CPU demand, from /proc; its pid is
 *    the socket's peer): when it is idle, has exited, or after a request
 *    waited CLSHIM_CAPTURE_DEFER_MAX seconds (then at most a fifth of the
 *    time). After the application exits (end of file on the socket) it
 *    stores what is left for CLSHIM_CAPTURE_HELPER_BUDGET seconds at most,
 *    then exits.
 *  - Failures: a helper that cannot be started or is gone is one line, and
 *    captures stay in the application from then on; the helper's own
 *    failures (device not found, build or store failed) are one line each,
 *    and the next run compiles again. Nothing the application sees changes.
 *  - fork(): capture_proc_after_fork_in_child() closes the child's copy of
 *    the socket (the child starts its own helper if it needs one).
 */
#ifndef CLSHIM_CAPTURE_PROC_H
#define CLSHIM_CAPTURE_PROC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cache/store.h"

struct capture_request {
    const char *identity;   /* device_info()->identity of the device */
    const char *device;     /* its name, for log lines and the record */
    unsigned kind;          /* enum key_kind (KEY_SOURCE) */
    const char *options;    /* the build options the driver was given (the key's: with
                             * what clshim added, e.g. -cl-kernel-arg-info) */
    const char *source;     /* the program's source, as the driver got it */
    size_t source_len;
    const void *key;        /* the finished key material (the helper hashes it) */
    size_t key_len;
    uint64_t compile_ns;    /* the build's CPU time in the application */
    uint64_t first_use_ns;  /* the code generation PoCL deferred to the first enqueue: the
                             * process's CPU from the build to the synchronisation after
                             * its first run (else to the hand-over), at most
                             * CAPTURE_FIRST_USE_MAX times compile_ns */
    const char *log;        /* the application's build log */
    const char *cwd;        /* the application's working directory at the build */
    const void *snapshot;   /* the bytes of every file the key names, as the key read them
                             * (cache/snapshot.h's encoding): all the helper's build may read */
    size_t snapshot_len;
    /* What else the build takes, as parts (capture_part_add()): a compile
     * (KEY_COMPILE) its embedded headers, by name, with their text; a link
     * (KEY_LINK) its compiled inputs, in order, as binaries (`clshim cache
     * warm`). Empty for a build from source (KEY_SOURCE). */
    const void *parts;
    size_t parts_len;
    int refresh;            /* the key's entry is stored, built before any run (`clshim cache
                             * warm`: cache/pipeline.h, pipeline_provisional()): captured
                             * again all the same, with the code this run generated */
    int again;              /* set by capture_proc_send: the application built the key
                             * again before the answer, so the helper captures it now */
};

/* 0: the helper has the request; 1: it has one for this key already, not
 * yet answered: the program is built repeatedly, so the helper is asked
 * (once) to capture it at once rather than wait for the application to be
 * idle; its answer makes the next builds memory hits. The caller reads
 * such a program's binary itself only at a third build still unanswered,
 * and only when every kernel of it ran here (late_capture.c): reading a
 * binary is the code generation of every kernel of the program, up to
 * seconds of the application's CPU for kernels it never ran (PyOpenCL's
 * scan programs, built twice before use). -1: capture in this process. */
int capture_proc_send(const struct capture_request *rq);
/* capture_proc_send() for a request that may wait for the capture
 * worker's turn (a fused program's job): while no helper runs yet it is
 * queued here (encoded), and capture_proc_send_queued() starts the helper
 * and sends it, so the application's thread never waits for a process to
 * start nor has one start beside its busy threads. 0: queued or handed;
 * 1: as capture_proc_send()'s (queued already); -1: make it in this
 * process. A queued request counts as owed (capture_proc_owed()). */
int capture_proc_queue(const struct capture_request *rq);
/* Starts the helper where none runs and sends the queued requests (the
 * worker's turn, or the exit handler after it): how many reached it; one
 * line for those that did not (a helper that cannot start says so, and
 * capture_proc_gave_up() is 1 from then on). At once when none is queued. */
size_t capture_proc_send_queued(void);
/* Whether no helper serves this process any more (it could not start, or
 * is gone): requests return -1 from now on. */
int capture_proc_gave_up(void);
/* Whether a request for this key went to the helper and is not answered
 * yet (capture_proc_send() would return 1); then *compile_ns and
 * *first_use_ns are what that request's build and first use cost, and
 * *hurried_already whether the helper was asked to hurry already. */
int capture_proc_owed(const void *key, size_t key_len, uint64_t *compile_ns, uint64_t *first_use_ns,
                      int *hurried_already);

/* The helper's answer to a request, on the same socket: the key's hash and,
 * when it stored the binary, its bytes (size 0: not stored), so the
 * application's in-process tier gets them without generating code. */
struct capture_reply {
    struct cache_hash hash;
    uint64_t compile_ns;
    const char *log;
    const void *binary;
    size_t size;
};
/* The helper's side: one answer, never blocking (dropped when the socket is
 * full or the application is gone). */
void capture_proc_reply(int fd, const struct capture_reply *r);
/* The application's side: hands every answer that arrived to `fn` (on the
 * calling thread), without waiting for more. Cheap when there is none. */
void capture_proc_poll(void (*fn)(const struct capture_reply *r));

/* One message off the socket (recvmsg() with `flags`, EINTR retried): its
 * descriptors in fds, -1 where none (the caller closes them). Returns what
 * recvmsg() returned: 0 at end of file, -1 with errno. */
ssize_t capture_proc_recv(int sock, int flags, int fds[2]);

void capture_proc_after_fork_in_child(void);

/* The request in a new memory file (what capture_proc_send() hands over
 * and `clshim-tool capture-one` reads on its standard input); -1 when it
 * cannot be made. rq->again is encoded too. */
int capture_proc_encode(const struct capture_request *rq);

/* Parts (capture_request.parts): each a u64 name length, the name, a u64
 * size and the bytes. capture_part_add() appends one to `out` (a byte
 * buffer: a zeroed struct key_buf); capture_part_next() reads the one at
 * *at (0: the first) and moves *at past it: 1, 0 at the end, -1 when the
 * parts are malformed. */
struct key_buf;
void capture_part_add(struct key_buf *out, const char *name, const void *bytes, size_t size);
int capture_part_next(const void *parts, size_t len, size_t *at, const char **name, size_t *name_len,
                      const void **bytes, size_t *size);

/* The helper's side: a request as received (pointers into buf, whose
 * strings are NUL-terminated); -1 when buf is not a well-formed request. */
int capture_proc_decode(const void *buf, size_t len, struct capture_request *out);

/* A capture's CPU budget: CAPTURE_COST_FACTOR times what the program's
 * build cost the application, CAPTURE_COST_FLOOR_NS at least (a capture
 * process's start and the driver's, 0.08 s for a small program, and the
 * code generation of programs handed over before any kernel ran: PyOpenCL
 * builds some twice before use, and their captures take 1.4 s beside 0.1 s
 * builds; measured in PyOpenCL's suite, 0.08-1.42 s in all, on a quiet
 * machine. A floor of 2 s refused one of them on a busy one — CPU time
 * grows beside other work — so PyOpenCL's warm runs compiled it again:
 * tests/compat/pyopencl_smoke.py beside `make check`'s second job, 3 runs
 * of 3). On PoCL
 * that build is clBuildProgram plus the code generation it defers to the
 * first enqueue (bench_ttfr: 0.5 s build and 0.8 s first run for 15
 * kernels; 0.56 s and 3.0 s for 63), which the capture's read does again
 * for every kernel; it runs on PoCL's threads, so it is taken as the
 * process's CPU from the build to the synchronisation after its first run
 * (or to the hand-over), at most CAPTURE_FIRST_USE_MAX times the build's
 * (the application computes too). */
#define CAPTURE_COST_FACTOR 2
#define CAPTURE_COST_FLOOR_NS 5000000000ull
#define CAPTURE_FIRST_USE_MAX 10
static inline uint64_t capture_budget_ns(uint64_t compile_ns, uint64_t first_use_ns)
{
    uint64_t cap = CAPTURE_FIRST_USE_MAX * compile_ns;
    uint64_t b = CAPTURE_COST_FACTOR * (compile_ns + (first_use_ns < cap ? first_use_ns : cap));
    return b > CAPTURE_COST_FLOOR_NS ? b : CAPTURE_COST_FLOOR_NS;
}

/* The lock file helpers hold (shared) in a cache directory. */
#define CAPTURE_PROC_LOCK "capture.lock"

#endif
