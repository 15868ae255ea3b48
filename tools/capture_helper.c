/* capture_helper.c — `clshim-tool capture-helper`: the process that captures
 * binaries for an application (program/capture_proc.h says why and how).
 *
 * Started by the application with the request socket as stdin. It forks the
 * helper proper into a session of its own and exits, so the application
 * reaps it at once and never has the helper as a child. Captures run at
 * nice 19 while the application lives, at normal priority once it exited
 * or another process waits for one (see "priority"). Each
 * request carries a shared flock on <cache dir>/capture.lock, closed once
 * the request is stored or dropped (`clshim cache wait` takes it
 * exclusively). The helper: a reader thread takes every request off
 * the socket as it comes (the application's sends never find it full while
 * the helper builds) and takes the key's cross-process claim over from the
 * application; the main thread runs the captures in order, one at a time,
 * each in a process of its own (`clshim-tool capture-one`: the build under
 * the request's snapshot and the read, within a CPU budget), and stores
 * what comes back. The helper itself never calls OpenCL. At end of file
 * (the application has exited) the helper lets go of the application's
 * standard error (a shell reading it would wait for the helper) and stores
 * what is left within CLSHIM_CAPTURE_HELPER_BUDGET seconds. Every capture's
 * outcome goes to the journal `cache wait` reads (tools/capture_wait.h).
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <sys/uio.h>
#include <spawn.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cache/device.h"
#include "cache/key.h"
#include "cache/pipeline.h"
#include "cache/quirks.h"
#include "cache/sandbox.h"
#include "cache/snapshot.h"
#include "common/busy.h"
#include "common/clapi.h"
#include "common/config.h"
#include "common/error.h"
#include "common/log.h"
#include "compiler/llvmload.h"
#include "fusion/fjob.h"
#include "program/capture_proc.h"
#include "cache/store.h"
#include "tools/capture_child.h"
#include "tools/capture_wait.h"
#include "tools/commands.h"

extern char **environ;

#define HELPER_NICE 19
#define URGENCY_LOOKS 10 /* the capture's urgency is looked at every 10th watch period */

struct request {
    struct request *next;
    char *bytes;
    size_t len;
    int lock;       /* the request's shared lock on capture.lock; -1: none */
    double came_at; /* now_s() when it was read off the socket */
    struct cache_hash hash; /* of its key; zero when it does not decode */
    int again;      /* the application built it again: captured without waiting */
    int claimed;    /* the helper holds the key's claim (taken from the application) */
    int wanted;     /* another process waits for it (store_build_wanted): captured first, at normal priority */
    int fused;      /* a fused program the application would switch to (fusion/fjob.h): made first */
};

static void journal(const char *fmt, const char *a, const char *b, const char *c);

/* Done with a request: its push is sent (or refused: the journal says so),
 * its counters reach the store, then its lock goes (`clshim cache wait`
 * returns once every request's lock went, and tells what the journal holds). */
static void request_free(struct request *rq)
{
    if (!rq) return;
    char refusal[512], n[16];
    unsigned refused = pipeline_remote_settle(refusal, sizeof refusal);
    snprintf(n, sizeof n, "%u", refused);
    if (refused) journal("push_refused %s %s%s", n, refusal, "");
    pipeline_flush_stats();
    if (rq->claimed && pipeline_store()) store_release_build(pipeline_store(), rq->hash);
    if (rq->lock >= 0) close(rq->lock);
    free(rq->bytes);
    free(rq);
}

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t arrived = PTHREAD_COND_INITIALIZER;
static struct request *first, *last;
static int ended;          /* end of file: the application is gone */
static time_t ended_at;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The application built a key again before it was answered (lock held):
 * its queued request moves to the front and is captured without waiting
 * for the application to be idle, whose next builds of it are then memory
 * hits. The repeat itself is only that signal: not queued. Not found: being
 * captured now, or answered already. */
static void hurry(struct request *again)
{
    struct request **at = &first, *prev = NULL;
    while (*at && memcmp(&(*at)->hash, &again->hash, sizeof again->hash)) {
        prev = *at;
        at = &(*at)->next;
    }
    struct request *found = *at;
    if (found && found != first) {
        *at = found->next;
        if (last == found) last = prev;
        found->next = first;
        first = found;
    }
    if (found) found->again = 1;
    if (again->lock >= 0) close(again->lock);
    free(again->bytes);
    free(again);
}

/* One request off the socket: its bytes (malloc'd) from the memfd it
 * carries. 1 when read, 0 at end of file, -1 on a malformed message. */
static int receive(int fd, struct request **out)
{
    int fds[2];
    if (capture_proc_recv(fd, 0, fds) <= 0) return 0;
    if (fds[0] < 0) {
        if (fds[1] >= 0) close(fds[1]);
        return -1;
    }
    int mfd = fds[0];
    struct stat st;
    struct request *rq = NULL;
    if (fstat(mfd, &st) == 0 && st.st_size > 0 && (rq = calloc(1, sizeof *rq)) &&
        (rq->bytes = malloc((size_t)st.st_size))) {
        rq->len = (size_t)st.st_size;
        if (pread(mfd, rq->bytes, rq->len, 0) != (ssize_t)rq->len) free(rq->bytes), rq->bytes = NULL;
    }
    close(mfd);
    if (!rq || !rq->bytes) {
        free(rq);
        if (fds[1] >= 0) close(fds[1]);
        return -1;
    }
    rq->lock = fds[1];
    *out = rq;
    return 1;
}

/* The application's claim of the key becomes the helper's at once, so a
 * process that wants the key waits for this capture rather than compiling
 * it again (cache/store.h store_take_claim()). */
static void take_claim(struct request *rq, pid_t app)
{
    store *st = pipeline_store();
    rq->claimed = st && store_take_claim(st, rq->hash, app, config_get()->build_wait_ms) == CLSHIM_OK;
}

static pid_t peer_pid(void)
{
    struct ucred peer;
    socklen_t len = sizeof peer;
    return getsockopt(0, SOL_SOCKET, SO_PEERCRED, &peer, &len) == 0 && peer.pid > 0 ? peer.pid : 0;
}

static void *reader(void *arg)
{
    (void)arg;
    pid_t app = peer_pid();
    for (;;) {
        struct request *rq = NULL;
        int r = receive(0, &rq);
        if (r < 0) {
            log_msg(LOG_WARN, "capture helper: a malformed request was dropped");
            pipeline_count_capture_lost(CAPTURE_LOST_REQUEST, 1);
            continue;
        }
        if (r > 0) {
            struct capture_request cr;
            if (capture_proc_decode(rq->bytes, rq->len, &cr) == 0) {
                rq->hash = key_hash(cr.key, cr.key_len);
                rq->again = cr.again;
                rq->fused = cr.kind == KEY_FUSION;
                if (!rq->again) take_claim(rq, app);
            }
        }
        pthread_mutex_lock(&lock);
        if (r == 0) {
            ended = 1;
            ended_at = time(NULL);
        } else if (rq->again) {
            hurry(rq);
        } else {
            rq->came_at = now_s();
            if (last) last->next = rq;
            else first = rq;
            last = rq;
        }
        pthread_cond_signal(&arrived);
        pthread_mutex_unlock(&lock);
        if (r == 0) break;
    }
    /* The application's stderr may be a pipe its caller reads to the end:
     * it goes now (`cache wait` tells the outcomes). A terminal has no end
     * to wait for, so there the lines after the application's exit (at
     * CLSHIM_LOG=info, each "stored") still reach the user. */
    if (!isatty(2)) {
        int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
        if (null >= 0) dup2(null, 2), close(null);
    }
    return NULL;
}

/* ---- building and storing -------------------------------------------------- */

static struct cl_api api;

struct known_device {
    struct known_device *next;
    const char *identity; /* device_info()'s */
    cl_device_id dev;
    cl_context ctx;
};
static struct known_device *devices;

/* The device of that key identity, with a context on it; NULL when none. */
static struct known_device *find_device(const char *identity)
{
    for (struct known_device *k = devices; k; k = k->next)
        if (!strcmp(k->identity, identity)) return k;
    cl_platform_id plats[16];
    cl_uint np = 0;
    if (api.clGetPlatformIDs(16, plats, &np) != CL_SUCCESS) return NULL;
    for (cl_uint p = 0; p < np && p < 16; p++) {
        cl_device_id devs[64];
        cl_uint nd = 0;
        if (api.clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 64, devs, &nd) != CL_SUCCESS) continue;
        for (cl_uint d = 0; d < nd && d < 64; d++) {
            const struct device_info *info = device_info(&api, devs[d]);
            if (!info || strcmp(info->identity, identity)) continue;
            struct known_device *k = calloc(1, sizeof *k);
            if (!k) return NULL;
            cl_int err;
            k->ctx = api.clCreateContext(NULL, 1, &devs[d], NULL, NULL, &err);
            if (!k->ctx) {
                free(k);
                return NULL;
            }
            k->identity = info->identity;
            k->dev = devs[d];
            k->next = devices;
            devices = k;
            return k;
        }
    }
    return NULL;
}

/* One line of the capture journal (tools/capture_wait.h): what `cache
 * wait` tells, also after the application's standard error is gone. */
static void journal(const char *fmt, const char *a, const char *b, const char *c)
{
    char dir[4096], line[1024];
    if (config_cache_dir(config_get(), dir, sizeof dir) != 0) return;
    snprintf(line, sizeof line, fmt, a, b, c);
    capture_journal_note(dir, line);
}

static void not_stored(enum capture_lost why, const char *prefix, const char *fmt, const char *detail)
{
    char line[2048];
    snprintf(line, sizeof line, fmt, detail);
    log_msg(LOG_WARN, "capture helper: %s: %s not stored", line, prefix);
    pipeline_count_capture_lost(why, 1);
    journal("lost %s %s %.900s", capture_lost_name(why), prefix, line);
}

/* ---- one capture, in a process of its own (`clshim-tool capture-one`) ------
 * A capture's cost is the driver's: PoCL generates code for every kernel of
 * the program when its binary is read (2,001 kernels of which one ran: 141.6
 * s of CPU against a 3.0 s compile). No driver call can be abandoned, so
 * each capture runs in a child process with a CPU budget it cannot
 * overrun: twice the application's own build CPU, at least
 * CAPTURE_COST_FLOOR_NS (the child's start, driver start and cache lookup).
 * Past it the kernel stops the child (a CPU-time timer's SIGKILL): the
 * capture is not made, counted as over_cost and said. The child builds
 * under the sandbox from the request's snapshot and hands the binary back
 * through its standard output (a memory file); the helper stores it (the
 * store is the helper's: an LMDB environment is not shared with a child). */

/* The child's answer: status (0, or 1 + enum capture_lost), the CPU time of
 * the read, the binary's size, then the binary or a message. */
struct child_answer {
    uint32_t status;
    uint64_t read_ns;
    uint64_t size;
};

static uint64_t budget_ns(const struct capture_request *rq)
{
    return capture_budget_ns(rq->compile_ns, rq->first_use_ns);
}

/* The child's side: answers on fd 1 and exits. */
static int answer(uint32_t status, uint64_t read_ns, const void *bytes, size_t size)
{
    struct child_answer a = {status, read_ns, size};
    struct iovec iov[2] = {{&a, sizeof a}, {(void *)bytes, size}};
    ssize_t want = (ssize_t)(sizeof a + size);
    return writev(1, iov, 2) == want ? 0 : 1;
}
static int fail_with(enum capture_lost why, const char *fmt, const char *detail)
{
    char msg[1024];
    snprintf(msg, sizeof msg, fmt, detail);
    return answer(1u + (uint32_t)why, 0, msg, strlen(msg));
}

/* The driver's source directory here, as program/build.c names it (the
 * helper runs in the application's environment); NULL when none. */
static const char *driver_dir(const char *identity, char *out, size_t len)
{
    char platform[512] = "";
    const char *pn = strstr(identity, "platform.name=");
    if (pn) snprintf(platform, sizeof platform, "%.*s", (int)strcspn(pn + 14, "\n"), pn + 14);
    return quirk_source_dir(quirks_for(platform, NULL), out, len) == 0 ? out : NULL;
}

/* Arms the CPU budget: SIGKILL once the process has used budget_ns of CPU
 * (not SIGXCPU: LLVM's handler for it returns, and the process goes on). */
static int arm_budget(uint64_t ns)
{
    struct sigevent ev = {.sigev_notify = SIGEV_SIGNAL, .sigev_signo = SIGKILL};
    timer_t t;
    if (timer_create(CLOCK_PROCESS_CPUTIME_ID, &ev, &t) != 0) return -1;
    struct itimerspec when = {.it_value = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)}};
    return timer_settime(t, 0, &when, NULL);
}

/* The parts of a request (capture_proc.h) as programs: a compile's embedded
 * headers from their text, with their names (NUL-terminated copies), or a
 * link's inputs from their binaries. The count, or -1 when malformed or
 * a program cannot be made. */
static int programs_of_parts(struct known_device *k, const struct capture_request *rq, int binaries,
                             cl_program **progs, char ***names)
{
    size_t at = 0, n = 0, size, name_len;
    const char *name;
    const void *bytes;
    int more;
    *progs = NULL, *names = NULL;
    while ((more = capture_part_next(rq->parts, rq->parts_len, &at, &name, &name_len, &bytes, &size)) > 0) {
        cl_program *p = realloc(*progs, (n + 1) * sizeof *p);
        char **nm = p ? realloc(*names, (n + 1) * sizeof *nm) : NULL;
        if (p) *progs = p;
        if (nm) *names = nm;
        if (!p || !nm || !(nm[n] = strndup(name, name_len))) return -1;
        cl_int err, status;
        if (binaries) {
            const unsigned char *b = bytes;
            p[n] = api.clCreateProgramWithBinary(k->ctx, 1, &k->dev, &size, &b, &status, &err);
        } else {
            const char *text = bytes;
            p[n] = api.clCreateProgramWithSource(k->ctx, 1, &text, &size, &err);
        }
        if (!p[n]) return -1;
        n++;
    }
    return more < 0 ? -1 : (int)n;
}

static cl_int compile_parts(struct known_device *k, cl_program prog, const struct capture_request *rq)
{
    cl_program *hdrs;
    char **names;
    int n = programs_of_parts(k, rq, 0, &hdrs, &names);
    if (n < 0) return CL_INVALID_VALUE;
    return api.clCompileProgram(prog, 1, &k->dev, rq->options, (cl_uint)n, n ? hdrs : NULL,
                                n ? (const char **)names : NULL, NULL, NULL);
}

static cl_int link_parts(struct known_device *k, const struct capture_request *rq, cl_program *out)
{
    cl_program *inputs;
    char **names;
    int n = programs_of_parts(k, rq, 1, &inputs, &names);
    cl_int err = CL_INVALID_VALUE;
    *out = n > 0 ? api.clLinkProgram(k->ctx, 1, &k->dev, rq->options, (cl_uint)n, inputs, NULL, NULL, &err) : NULL;
    return err;
}

/* The fused program's first launch, over zero-filled buffers of the
 * application's sizes with its scalar values (fusion/fjob.h): the driver
 * generates the code of that launch now (PoCL does at a kernel's first
 * enqueue), and the binary read after it holds that code. Best effort: a
 * launch that fails leaves a binary without it (the application's first
 * launch then generates it). */
static void launch_once(struct known_device *k, cl_program prog, const struct fjob_made *m)
{
    cl_int err;
    cl_command_queue q = api.clCreateCommandQueue(k->ctx, k->dev, 0, &err);
    cl_kernel kern = q ? api.clCreateKernel(prog, m->name, &err) : NULL;
    cl_mem *bufs = calloc(m->nparams ? m->nparams : 1, sizeof *bufs);
    err = kern && bufs ? CL_SUCCESS : CL_OUT_OF_HOST_MEMORY;
    static const unsigned char zero = 0;
    for (uint32_t p = 0; p < m->nparams && err == CL_SUCCESS; p++) {
        const struct fjob_arg *a = &m->params[p];
        if (a->kind == FJOB_LOCAL) {
            err = api.clSetKernelArg(kern, p, a->size, NULL);
        } else if (a->kind == FJOB_VALUE) {
            err = api.clSetKernelArg(kern, p, a->size, a->value);
        } else {
            if (a->size && (bufs[p] = api.clCreateBuffer(k->ctx, CL_MEM_READ_WRITE, a->size, NULL, &err)))
                err = api.clEnqueueFillBuffer(q, bufs[p], &zero, 1, 0, a->size, 0, NULL, NULL);
            if (err == CL_SUCCESS) err = api.clSetKernelArg(kern, p, sizeof(cl_mem), a->size ? &bufs[p] : NULL);
        }
    }
    int has_lws = m->lws[0] || m->lws[1] || m->lws[2], has_off = m->off[0] || m->off[1] || m->off[2];
    if (err == CL_SUCCESS)
        err = api.clEnqueueNDRangeKernel(q, kern, m->dim, has_off ? m->off : NULL, m->gws, has_lws ? m->lws : NULL,
                                         0, NULL, NULL);
    if (q) api.clFinish(q);
    if (err != CL_SUCCESS)
        log_msg(LOG_DEBUG, "capture helper: the fused kernel's first launch failed (error %d)", (int)err);
    for (uint32_t p = 0; bufs && p < m->nparams; p++)
        if (bufs[p]) api.clReleaseMemObject(bufs[p]);
    free(bufs);
    if (kern) api.clReleaseKernel(kern);
    if (q) api.clReleaseCommandQueue(q);
}

/* A fused program (fusion/fjob.h): made from the job, built, launched once,
 * read; the answer is the value a derived program is stored as (the u64
 * metadata length, the metadata, the binary: program/derived.c). */
static int capture_fused(struct known_device *k, const struct capture_request *rq)
{
    (void)llvm_api(); /* found beside this program, before a relative path would mean another place */
    if (chdir(rq->cwd) != 0) /* a kernel's relative -I directories are the application's */
        return fail_with(CAPTURE_LOST_INPUTS, "cannot enter the application's directory %s", rq->cwd);
    struct fjob_made m;
    char why[1400];
    int made = fjob_make(rq->parts, rq->parts_len, rq->identity, rq->device, rq->options, &m, why, sizeof why);
    if (made == FJOB_REFUSED) return fail_with(CAPTURE_REFUSED, "%s", why);
    if (made != 0) return fail_with(CAPTURE_LOST_BUILD, "the fused program was not made: %s", why);
    cl_int err = CL_SUCCESS;
    cl_program prog;
    if (m.is_source) {
        const char *text = m.program;
        prog = api.clCreateProgramWithSource(k->ctx, 1, &text, &m.program_size, &err);
    } else {
        const unsigned char *bc = m.program;
        prog = api.clCreateProgramWithBinary(k->ctx, 1, &k->dev, &m.program_size, &bc, NULL, &err);
    }
    if (prog) err = api.clBuildProgram(prog, 1, &k->dev, rq->options, NULL, NULL);
    if (!prog || err != CL_SUCCESS) {
        if (err == CL_BUILD_PROGRAM_FAILURE) fjob_note_build_failed(&m, rq->identity, rq->device, rq->options, err);
        char code[16];
        snprintf(code, sizeof code, "%d", err);
        return fail_with(CAPTURE_LOST_BUILD, "building the fused program failed here (error %s)", code);
    }
    launch_once(k, prog, &m);
    struct pipeline_clock clk;
    pipeline_clock_start(&clk);
    size_t size = 0;
    unsigned char *value = NULL;
    if (api.clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL) != CL_SUCCESS || !size ||
        !(value = malloc(8 + m.meta_size + size)))
        return fail_with(CAPTURE_LOST_READ, "%s", "cannot read the binary");
    unsigned char *bin = value + 8 + m.meta_size;
    if (api.clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof bin, &bin, NULL) != CL_SUCCESS)
        return fail_with(CAPTURE_LOST_READ, "%s", "cannot read the binary");
    pipeline_clock_stop(&clk);
    uint64_t ml = m.meta_size;
    memcpy(value, &ml, 8);
    memcpy(value + 8, m.meta, m.meta_size);
    int rc = answer(0, clk.cpu_ns, value, 8 + m.meta_size + size);
    fflush(NULL);
    _exit(rc); /* the driver's teardown is not the capture's */
}

int capture_one_main(int argc, char **argv)
{
    (void)argv;
    if (argc != 1) {
        fprintf(stderr, "usage: clshim-tool capture-one (started by the capture helper)\n");
        return 2;
    }
    struct stat st;
    char *bytes = NULL;
    if (fstat(0, &st) != 0 || st.st_size <= 0 || !(bytes = malloc((size_t)st.st_size)) ||
        pread(0, bytes, (size_t)st.st_size, 0) != st.st_size)
        return fail_with(CAPTURE_LOST_REQUEST, "%s", "the request cannot be read");
    struct capture_request rq;
    if (capture_proc_decode(bytes, (size_t)st.st_size, &rq) != 0)
        return fail_with(CAPTURE_LOST_REQUEST, "%s", "the request cannot be decoded");
    if (arm_budget(budget_ns(&rq)) != 0) return fail_with(CAPTURE_LOST_BUILD, "%s", "no CPU budget can be set");
    if (!dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_GLOBAL))
        return fail_with(CAPTURE_LOST_DEVICE, "cannot load libOpenCL.so.1 (%s)", dlerror());
    clapi_from_loader(&api);
    struct known_device *k = find_device(rq.identity);
    if (!k) return fail_with(CAPTURE_LOST_DEVICE, "no device '%s' here", rq.device);
    if (rq.kind == KEY_FUSION) return capture_fused(k, &rq);
    struct key_snapshot *snap = snapshot_decode(rq.snapshot, rq.snapshot_len);
    if (!snap) return fail_with(CAPTURE_LOST_REQUEST, "%s", "the request's snapshot cannot be read");
    if (chdir(rq.cwd) != 0) /* relative -I directories are the application's */
        return fail_with(CAPTURE_LOST_INPUTS, "cannot enter the application's directory %s", rq.cwd);
    cl_int err = CL_SUCCESS;
    char ddir[4096], why[1400] = "";
    cl_program prog = NULL;
    int exact = 1;
    if (rq.kind == KEY_LINK) {
        /* The compiled inputs as the request has them: the bytes stored
         * under the input keys the link's key names; no file is read. */
        err = link_parts(k, &rq, &prog);
    } else {
        const char *src = rq.source;
        size_t len = rq.source_len;
        prog = api.clCreateProgramWithSource(k->ctx, 1, &src, &len, &err);
        struct sandbox *sb = sandbox_begin(snap, rq.key, rq.key_len, driver_dir(rq.identity, ddir, sizeof ddir));
        if (prog && rq.kind == KEY_COMPILE) err = compile_parts(k, prog, &rq);
        else if (prog) err = api.clBuildProgram(prog, 1, &k->dev, rq.options, NULL, NULL);
        exact = sandbox_end(sb, why, sizeof why) == 0;
    }
    if (!prog || err != CL_SUCCESS) {
        char code[16];
        snprintf(code, sizeof code, "%d", err);
        return fail_with(CAPTURE_LOST_BUILD, "the build failed here (%s)", code);
    }
    if (!exact) return fail_with(CAPTURE_LOST_INPUTS, "%s", why);
    size_t size = 0;
    unsigned char *bin = NULL;
    /* Reading makes PoCL generate and link the code (ld, a child process):
     * timed with its children (pipeline_clock), or the compile it stores
     * would be short of the link's CPU time. */
    struct pipeline_clock clk;
    pipeline_clock_start(&clk);
    if (api.clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL) != CL_SUCCESS || !size ||
        !(bin = malloc(size)) || api.clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof bin, &bin, NULL) != CL_SUCCESS)
        return fail_with(CAPTURE_LOST_READ, "%s", "cannot read the binary");
    pipeline_clock_stop(&clk);
    int rc = answer(0, clk.cpu_ns, bin, size);
    /* Leaves at once: the driver's teardown is not the capture's. */
    fflush(NULL);
    _exit(rc);
}

#define WATCH_PERIOD_MS 10

/* A live child's CPU time and its waited-for children's (/proc/PID/stat
 * fields 14-17); 0 when it cannot be read. */
static uint64_t child_cpu_ns(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = 0;
    const char *p = strrchr(buf, ')'); /* the command name may hold spaces */
    unsigned long long t[4] = {0};
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %llu %llu", &t[0], &t[1],
                     &t[2], &t[3]) != 4)
        return 0;
    long hz = sysconf(_SC_CLK_TCK);
    return (t[0] + t[1] + t[2] + t[3]) * (1000000000ull / (unsigned long long)(hz > 0 ? hz : 100));
}

/* ---- priority --------------------------------------------------------------
 * A capture nobody waits for runs at nice 19 while the application lives:
 * beside it, it must not slow it (a tuner's cold run stayed 1.36x plain with
 * the helper's session at normal priority). Once the application has
 * exited, or another process waits for the key or for one queued behind it
 * (store_build_wanted), the capture is on somebody's way: it runs at normal
 * priority. At nice 19
 * beside four busy loops a capture got about 1.5% of a core, and the run
 * started right after a cold one compiled the program again itself.
 * Where the kernel groups processes by session (sched_autogroup_enabled:
 * nice then only weighs within a group) the helper's session group takes
 * the same nice; its value may go down again without privilege, a
 * process's may not, so the helper itself stays at 0 and sets each capture
 * process's nice (raising one again may be refused: it then stays at 19). */
static int group_nice = -1; /* the session group's, as last set; -1: not yet */

static void set_group_nice(int nice)
{
    if (nice == group_nice) return;
    int fd = open("/proc/self/autogroup", O_WRONLY | O_CLOEXEC);
    if (fd < 0) return; /* no autogroups: each process's nice is enough */
    char text[8];
    int n = snprintf(text, sizeof text, "%d", nice);
    ssize_t w = write(fd, text, (size_t)n);
    if (w < 0 && errno == EAGAIN) { /* the kernel takes one change per 100 ms */
        nanosleep(&(struct timespec){0, 110 * 1000000L}, NULL);
        w = write(fd, text, (size_t)n);
    }
    close(fd);
    if (w == n) group_nice = nice;
    else log_msg(LOG_DEBUG, "capture helper: its session's group keeps its priority (%s)", strerror(errno));
}

static int app_gone(void)
{
    pthread_mutex_lock(&lock);
    int gone = ended;
    pthread_mutex_unlock(&lock);
    return gone;
}

static void set_urgency(pid_t child, int urgent)
{
    int nice = urgent ? 0 : HELPER_NICE;
    set_group_nice(nice);
    if (child > 0) (void)setpriority(PRIO_PROCESS, (id_t)child, nice);
}

int capture_child_start(struct capture_child *c, const void *req, size_t len, uint64_t budget_ns, char *msg,
                        size_t msg_len)
{
    *c = (struct capture_child){.pid = -1, .in = -1, .out = -1, .budget_ns = budget_ns};
    c->in = memfd_create("clshim-capture-one", MFD_CLOEXEC);
    c->out = memfd_create("clshim-capture-answer", MFD_CLOEXEC);
    if (c->in < 0 || c->out < 0 || write(c->in, req, len) != (ssize_t)len) {
        snprintf(msg, msg_len, "cannot hand the capture to a child process");
        goto fail;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, c->in, 0);
    posix_spawn_file_actions_adddup2(&fa, c->out, 1);
    char *args[] = {"clshim-tool", "capture-one", NULL};
    int spawned = posix_spawn(&c->pid, "/proc/self/exe", &fa, NULL, args, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (spawned == 0) return 0;
    snprintf(msg, msg_len, "cannot start a capture process (%s)", strerror(spawned));
fail:
    if (c->in >= 0) close(c->in);
    if (c->out >= 0) close(c->out);
    c->in = c->out = c->pid = -1;
    return -1;
}

int capture_child_done(struct capture_child *c)
{
    pid_t got = wait4(c->pid, &c->status, WNOHANG, &c->ru);
    if (got == c->pid) return 1;
    if (got < 0 && errno != EINTR) { /* not ours to wait for any more: nothing to answer */
        c->status = 0x7f00; /* exited 127 */
        return 1;
    }
    /* a 1/32 margin for what runs between two looks */
    if (got == 0 && !c->over && child_cpu_ns(c->pid) >= c->budget_ns - c->budget_ns / 32) {
        c->over = 1;
        kill(c->pid, SIGKILL);
    }
    return 0;
}

uint64_t capture_child_cpu_ns(const struct capture_child *c)
{
    return (uint64_t)(c->ru.ru_utime.tv_sec + c->ru.ru_stime.tv_sec) * 1000000000u +
           (uint64_t)(c->ru.ru_utime.tv_usec + c->ru.ru_stime.tv_usec) * 1000u;
}

int capture_child_answer(struct capture_child *c, void **bin, size_t *size, uint64_t *read_ns,
                         enum capture_lost *why, char *msg, size_t msg_len)
{
    int rc = -1, status = c->status;
    *bin = NULL;
    *why = CAPTURE_LOST_BUILD;
    uint64_t used_ns = capture_child_cpu_ns(c);
    struct child_answer a;
    struct stat st;
    char *data = NULL;
    if (c->over || (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL && used_ns >= c->budget_ns - c->budget_ns / 32)) {
        *why = CAPTURE_LOST_COST;
        snprintf(msg, msg_len, "it would cost more than %.2f s of CPU (%d times the application's build and first "
                               "use, %.2f s at least): reading the driver's binary generates code for every kernel",
                 c->budget_ns / 1e9, CAPTURE_COST_FACTOR, CAPTURE_COST_FLOOR_NS / 1e9);
    } else if (!WIFEXITED(status) || fstat(c->out, &st) != 0 || st.st_size < (off_t)sizeof a ||
               pread(c->out, &a, sizeof a, 0) != (ssize_t)sizeof a || (off_t)(sizeof a + a.size) != st.st_size) {
        snprintf(msg, msg_len, "the capture process ended with no answer (%s %d)",
                 WIFSIGNALED(status) ? "signal" : "status", WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
    } else if (!(data = malloc(a.size + 1)) || pread(c->out, data, a.size, sizeof a) != (ssize_t)a.size) {
        snprintf(msg, msg_len, "cannot read the capture's answer");
    } else {
        data[a.size] = 0;
        if (a.status) {
            *why = a.status - 1 <= CAPTURE_REFUSED ? (enum capture_lost)(a.status - 1) : CAPTURE_LOST_BUILD;
            snprintf(msg, msg_len, "%s", data);
        } else {
            *bin = data, data = NULL;
            *size = a.size;
            *read_ns = a.read_ns;
            rc = 0;
        }
    }
    free(data);
    close(c->in);
    close(c->out);
    c->in = c->out = -1;
    return rc;
}

/* The helper's side: the capture of rq (its request bytes as received) in
 * a child; 0 with the binary (malloc'd) and the CPU time of its read, or
 * -1 with *why (the child's message in msg). Urgent (see "priority"): at
 * normal priority from the start; otherwise it becomes so when the
 * application exits or another process waits for the key meanwhile. */
static int queue_wanted(void);

static int capture_in_child(const void *req, size_t req_len, const struct capture_request *rq, int urgent,
                            void **bin, size_t *size, uint64_t *read_ns, enum capture_lost *why, char *msg,
                            size_t msg_len)
{
    struct cache_hash hash = key_hash(rq->key, rq->key_len);
    struct capture_child c;
    *bin = NULL;
    *why = CAPTURE_LOST_BUILD;
    if (capture_child_start(&c, req, req_len, budget_ns(rq), msg, msg_len) != 0) return -1;
    set_urgency(c.pid, urgent);
    unsigned looks = 0;
    while (!capture_child_done(&c)) {
        /* In somebody's way: the application is gone, or a process waits
         * for this key or for one queued behind it. */
        if (!urgent && ++looks % URGENCY_LOOKS == 0 &&
            (app_gone() || store_build_wanted(pipeline_store(), hash) || queue_wanted()))
            set_urgency(c.pid, urgent = 1);
        nanosleep(&(struct timespec){0, WATCH_PERIOD_MS * 1000000L}, NULL);
    }
    log_msg(LOG_DEBUG, "capture helper: the capture's process used %.2f s of CPU (its budget %.2f s)",
            capture_child_cpu_ns(&c) / 1e9, c.budget_ns / 1e9);
    return capture_child_answer(&c, bin, size, read_ns, why, msg, msg_len);
}

/* Builds the program again (a hit in the driver's own cache) from the
 * application's snapshot of the files its key names, under a sandbox
 * (cache/sandbox.h), in a child within its CPU budget: the binary is
 * exactly the key's, whatever the files hold now. */
static void capture_one(const void *req, size_t req_len, const struct capture_request *rq, int urgent)
{
    struct cache_hash hash = key_hash(rq->key, rq->key_len);
    char prefix[33];
    key_hash_hex(hash, prefix);
    prefix[16] = '\0';
    /* Stored meanwhile (by another process, or by the application itself
     * for a program it built again): nothing to build; the bytes go back. */
    struct store_record sr;
    void *arena = NULL;
    store *st = pipeline_store();
    if (!rq->refresh && st && pipeline_local_get(st, hash, rq->key, rq->key_len, &sr, &arena) == CLSHIM_OK) {
        log_msg(LOG_INFO, "capture helper: %s is stored already", prefix);
        journal("stored %s %s%s", prefix, "(already)", "");
        capture_proc_reply(0, &(struct capture_reply){.hash = hash, .compile_ns = sr.compile_ns, .log = sr.build_log,
                                                       .binary = sr.binary, .size = sr.binary_size});
        store_record_free(arena);
        return;
    }
    int fused = rq->kind == KEY_FUSION; /* made from its job: no file is read (fusion/fjob.h) */
    struct key_snapshot *snap = fused ? NULL : snapshot_decode(rq->snapshot, rq->snapshot_len);
    char why[3100] = "";
    int stored = 0;
    int inputs_ok = fused;
    if (fused) {
        /* no snapshot: below */
    } else if (!snap) {
        not_stored(CAPTURE_LOST_REQUEST, prefix, "%s", "the request's snapshot cannot be read");
    } else if (snapshot_matches_key(snap, rq->key, rq->key_len, why, sizeof why) != 0) {
        not_stored(CAPTURE_LOST_INPUTS, prefix, "the snapshot is not what the key names (%s)", why);
    } else if (!key_input_is(rq->key, rq->key_len, rq->source, rq->source_len)) {
        /* The source is built as it is: it must be the key's (a program
         * keyed in a neutral form sends that form, cache/quirks.h). */
        not_stored(CAPTURE_LOST_INPUTS, prefix, "%s", "the request's source is not the input the key names");
    } else {
        inputs_ok = 1;
    }
    if (!inputs_ok) {
        /* said */
    } else if (!st) {
        not_stored(CAPTURE_LOST_STORE, prefix, "%s", "no cache to store into");
    } else {
        void *bin;
        size_t size;
        uint64_t read_ns;
        enum capture_lost lost;
        if (capture_in_child(req, req_len, rq, urgent, &bin, &size, &read_ns, &lost, why, sizeof why) != 0 &&
            lost == CAPTURE_REFUSED) {
            /* An answer: the application finds the refusal in the cache. */
            log_msg(LOG_INFO, "capture helper: fusion %s refused: %s", prefix, why);
            journal("refused %s %.900s%s", prefix, why, "");
        } else if (!bin) {
            not_stored(lost, prefix, "%s", why);
            if (lost == CAPTURE_LOST_COST) pipeline_note_over_cost(rq->key, rq->key_len, budget_ns(rq), why);
        } else {
            struct pipeline_flight f = {.device = rq->device, .kind = (enum key_kind)rq->kind,
                                        .key = (char *)rq->key, .key_len = rq->key_len, .hash = hash,
                                        .compile_ns = rq->compile_ns, .names_files = !fused, .exact = 1};
            stored = pipeline_store_late(&f, bin, size, rq->log, read_ns);
            /* A refresh (capture_proc.h): the entry has the code of a run now. */
            if (stored && rq->refresh) pipeline_note_provisional(rq->key, rq->key_len, 0);
            char bytes[32];
            snprintf(bytes, sizeof bytes, "%zu", size);
            if (stored) journal("stored %s %s bytes%s", prefix, bytes, "");
            else journal("lost %s %s %s", capture_lost_name(CAPTURE_LOST_STORE), prefix,
                         "the store refused it (full disk, read-only, or over the size limit)");
            /* The application's in-process tier gets the bytes too: a
             * program it releases and builds again is then a memory hit. */
            if (stored)
                capture_proc_reply(0, &(struct capture_reply){.hash = hash, .compile_ns = rq->compile_ns + read_ns,
                                                               .log = rq->log, .binary = bin, .size = size});
            free(bin);
        }
    }
    snapshot_free(snap);
    if (!stored) capture_proc_reply(0, &(struct capture_reply){.hash = hash}); /* not stored: the app may hand it again */
}

/* ---- when to capture ---------------------------------------------------------
 * A request waits while the application is busy (common/busy.h). The
 * helper captures when the application is idle, once it has exited (end of
 * file), and, so that a long busy application still gets its binaries,
 * beside it once the oldest request waited CLSHIM_CAPTURE_DEFER_MAX
 * seconds: then at most one BESIDE_SHARE-th of the time (after a capture of
 * d seconds it waits (BESIDE_SHARE - 1) * d). The application's pid is the
 * peer of the socket (SO_PEERCRED: the process that made the socket pair). */

#define BESIDE_SHARE 5

static void watch_start(struct busy_watch *w)
{
    pid_t app = peer_pid();
    w->pid = 0;
    if (app) (void)busy_watch_start(w, app, 0);
}

enum turn { TURN_NOW, TURN_IDLE, TURN_BESIDE, TURN_EXITED };

/* The first queued request (lock held) that another process waits for
 * (by = 0), or that is a fused program (by = 1): *prev is the one before it. */
static struct request **queued_first(int by, struct request **prev)
{
    struct request **at = &first;
    *prev = NULL;
    while (*at && !(by ? (*at)->fused : (*at)->wanted)) *prev = *at, at = &(*at)->next;
    return at;
}

/* Off the queue (lock held): the first request another process waits for,
 * else the first fused program (the application switches to it when it
 * is there), else the oldest. A fused program waits for its turn like a
 * capture: made beside the busy application at nice 19 it cost a 300-chain
 * run of bench_short 8 % (0.92x plain; waiting, 1.08x), a 3,000-chain run
 * 10 %. */
static struct request *take_next(void)
{
    struct request *prev;
    struct request **at = queued_first(0, &prev);
    if (!*at) at = queued_first(1, &prev);
    if (!*at) at = &first, prev = NULL;
    struct request *rq = *at;
    if (!rq) return NULL;
    *at = rq->next;
    if (last == rq) last = prev;
    rq->next = NULL;
    return rq;
}

/* Queued requests another process now waits for (lock held): 1 when any. */
static int mark_wanted(void)
{
    int any = 0;
    for (struct request *r = first; r; r = r->next) {
        if (r->claimed && !r->wanted) r->wanted = store_build_wanted(pipeline_store(), r->hash);
        any |= r->wanted;
    }
    return any;
}

/* A queued request's claim lives until it is captured (or the helper
 * exits): whoever waits for the key marks it wanted, and it is then
 * captured next at normal priority, so a waiter waits for the capture under
 * way and its own at most (CLSHIM_BUILD_WAIT_MS bounds it still). A claim
 * that expired on a clock instead let the run started right after a cold
 * one compile what sat in the queue while the application was busy:
 * test_capture_exact 5b beside twelve busy loops, 3 of 5 runs missed. */
static int queue_wanted(void)
{
    pthread_mutex_lock(&lock);
    int any = mark_wanted();
    pthread_mutex_unlock(&lock);
    return any;
}

/* Waits until a request may be captured (or the application exited and
 * nothing is left) and says why. */
static enum turn wait_turn(struct busy_watch *w, unsigned defer_max, double beside_after)
{
    int waited = 0;
    for (;;) {
        pthread_mutex_lock(&lock);
        while (!first && !ended) pthread_cond_wait(&arrived, &lock);
        int wanted = mark_wanted();
        int gone = ended;
        double oldest = first ? first->came_at : 0;
        int again = first && first->again;
        pthread_mutex_unlock(&lock);
        if (gone) return TURN_EXITED;
        if (!w->pid || !defer_max || again || wanted) return TURN_NOW;
        if (!busy_watch_busy(w)) return TURN_IDLE;
        double now = now_s();
        if (now - oldest >= defer_max && now >= beside_after) return TURN_BESIDE;
        if (!waited++)
            log_msg(LOG_DEBUG, "capture helper: the application is busy: captures wait (at most "
                               "CLSHIM_CAPTURE_DEFER_MAX=%u s)", defer_max);
        /* A nap that its end of file (or a request) cuts short. */
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += (long)(BUSY_PERIOD_S * 1e9);
        if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
        pthread_mutex_lock(&lock);
        if (!ended) pthread_cond_timedwait(&arrived, &lock, &until);
        pthread_mutex_unlock(&lock);
    }
}

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* The budget after the application's exit is the helper's own CPU time:
 * at nice 19 on a busy machine it may get almost none, and a wall-clock
 * budget then dropped most captures unstored (PyOpenCL's suite at load 5:
 * 930 of ~1,000). Wall time is still capped, at BUDGET_WALL_FACTOR times
 * the budget, so a starved helper ends too. */
#define BUDGET_WALL_FACTOR 10
static int past_budget(unsigned budget, double cpu_at_exit)
{
    double cpu_after = cpu_at_exit < 0 ? 0 : cpu_s() - cpu_at_exit;
    return cpu_after >= budget || time(NULL) - ended_at >= (time_t)budget * BUDGET_WALL_FACTOR;
}

static void serve(void)
{
    /* The helper itself never calls OpenCL: each capture's child does
     * (capture_one_main), loading the real loader, as the environment is
     * clshim's own no more. */
    pthread_t t;
    if (pthread_create(&t, NULL, reader, NULL) != 0) {
        log_msg(LOG_WARN, "capture helper: cannot start its reader: nothing stored");
        return;
    }
    unsigned budget = config_get()->capture_helper_budget;
    unsigned defer_max = config_get()->capture_defer_max;
    struct busy_watch w;
    watch_start(&w);
    double beside_after = 0, cpu_at_exit = -1;
    unsigned done[TURN_EXITED + 1] = {0};
    size_t left = 0;
    for (;;) {
        enum turn turn = wait_turn(&w, defer_max, beside_after);
        if (turn == TURN_EXITED && cpu_at_exit < 0) cpu_at_exit = cpu_s();
        /* One line when it first captures while idle, or beside. */
        if ((turn == TURN_IDLE || turn == TURN_BESIDE) && !done[turn])
            log_msg(LOG_INFO, "capture helper: %s", turn == TURN_IDLE
                                  ? "the application is idle: capturing"
                                  : "the application stays busy past CLSHIM_CAPTURE_DEFER_MAX: capturing beside it");
        pthread_mutex_lock(&lock);
        (void)mark_wanted();
        struct request *rq = take_next();
        int over = ended && past_budget(budget, cpu_at_exit);
        struct request *dropped = NULL;
        if (over && rq) {
            left = 1;
            for (struct request *r = first; r; r = r->next) left++;
            rq->next = first; /* every request left, dropped below */
            dropped = rq;
            first = last = NULL;
        }
        pthread_mutex_unlock(&lock);
        if (!rq || over) {
            pipeline_count_capture_lost(CAPTURE_LOST_BUDGET, left);
            for (size_t i = 0; i < left; i++)
                journal("lost %s %s %s", capture_lost_name(CAPTURE_LOST_BUDGET), "-",
                        "CLSHIM_CAPTURE_HELPER_BUDGET spent after the application exited");
            while (dropped) {
                struct request *next = dropped->next;
                request_free(dropped);
                dropped = next;
            }
            break;
        }
        double t0 = now_s();
        struct capture_request cr;
        if (capture_proc_decode(rq->bytes, rq->len, &cr) == 0 && (cr.kind == KEY_SOURCE || cr.kind == KEY_FUSION)) {
            capture_one(rq->bytes, rq->len, &cr, turn == TURN_EXITED || rq->wanted || app_gone());
        } else {
            not_stored(CAPTURE_LOST_REQUEST, "-", "%s", "a malformed request was dropped");
        }
        if (turn == TURN_BESIDE) beside_after = now_s() + (BESIDE_SHARE - 1) * (now_s() - t0);
        done[turn]++;
        request_free(rq);
    }
    if (left)
        log_msg(LOG_WARN, "capture helper: %zu binar%s not stored: CLSHIM_CAPTURE_HELPER_BUDGET=%u s (CPU) spent after "
                          "the application exited", left, left == 1 ? "y" : "ies", budget);
    double cpu = cpu_s();
    if (cpu_at_exit < 0) cpu_at_exit = cpu;
    log_msg(LOG_INFO, "capture helper: %u captured while the application was idle, %u beside it, %u after it "
                      "exited, %u without waiting; CPU %.2f s while it ran, %.2f s after",
            done[TURN_IDLE], done[TURN_BESIDE], done[TURN_EXITED], done[TURN_NOW], cpu_at_exit, cpu - cpu_at_exit);
    pthread_join(t, NULL);
    pipeline_exit();
}


int capture_helper_main(int argc, char **argv)
{
    (void)argv;
    if (argc != 1) {
        fprintf(stderr, "usage: clshim-tool capture-helper (started by the shim, requests on stdin)\n");
        return 2;
    }
    store_quiet_open_warnings(); /* the application said them */
    pipeline_hold_remote_refusals(); /* the journal says them: `cache wait` */
    /* No lock of its own: each request brings one (capture_proc.h), so
     * `clshim cache wait` waits for captures, never for the application. */
    pid_t pid = fork(); /* this process is single-threaded: safe */
    if (pid < 0) return 1;
    if (pid > 0) _exit(0);
    setsid();
    set_urgency(0, 0); /* its session's group; each capture's process gets its own (see "priority") */
    double t0 = now_s();
    serve();
    log_msg(LOG_DEBUG, "capture helper: done after %.1f s", now_s() - t0);
    return 0;
}
