/* capture_proc.c — late captures done by another process (capture_proc.h). */
#include "program/capture_proc.h"

#include <assert.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cache/key.h"
#include "common/check.h"
#include "common/childenv.h"
#include "common/spawn.h"
#include "common/config.h"
#include "common/log.h"

extern char **environ;

/* ---- the request as bytes --------------------------------------------------
 * "CLSHCAP5", kind (u32; REQUEST_AGAIN set: capture_request.again;
 * REQUEST_REFRESH: capture_request.refresh),
 * compile_ns (u64), first_use_ns (u64), then identity, device, options,
 * source, key, log, cwd,
 * snapshot (cache/snapshot.h's encoding), parts: each a u64 length and the
 * bytes, then a NUL. */

static const char magic[8] = {'C', 'L', 'S', 'H', 'C', 'A', 'P', '5'};
#define NFIELDS 9
#define REQUEST_AGAIN 0x80000000u
#define REQUEST_REFRESH 0x40000000u

static void fields_of(const struct capture_request *rq, const void *p[NFIELDS], uint64_t n[NFIELDS])
{
    p[0] = rq->identity, n[0] = strlen(rq->identity);
    p[1] = rq->device, n[1] = strlen(rq->device);
    p[2] = rq->options, n[2] = strlen(rq->options);
    p[3] = rq->source, n[3] = rq->source_len;
    p[4] = rq->key, n[4] = rq->key_len;
    p[5] = rq->log ? rq->log : "", n[5] = strlen(p[5]);
    p[6] = rq->cwd, n[6] = strlen(rq->cwd);
    p[7] = rq->snapshot ? rq->snapshot : "", n[7] = rq->snapshot ? rq->snapshot_len : 0;
    p[8] = rq->parts ? rq->parts : "", n[8] = rq->parts ? rq->parts_len : 0;
}

int capture_proc_encode(const struct capture_request *rq)
{
    const void *p[NFIELDS];
    uint64_t n[NFIELDS];
    fields_of(rq, p, n);
    assert(!(rq->kind & (REQUEST_AGAIN | REQUEST_REFRESH)));
    uint32_t kind = rq->kind | (rq->again ? REQUEST_AGAIN : 0) | (rq->refresh ? REQUEST_REFRESH : 0);
    uint64_t compile_ns = rq->compile_ns, first_use_ns = rq->first_use_ns;
    static const char nul = 0;
    struct iovec iov[4 + 3 * NFIELDS];
    size_t k = 0, total = 0;
    iov[k++] = (struct iovec){(void *)magic, sizeof magic};
    iov[k++] = (struct iovec){&kind, sizeof kind};
    iov[k++] = (struct iovec){&compile_ns, sizeof compile_ns};
    iov[k++] = (struct iovec){&first_use_ns, sizeof first_use_ns};
    for (int i = 0; i < NFIELDS; i++) {
        iov[k++] = (struct iovec){&n[i], sizeof n[i]};
        iov[k++] = (struct iovec){(void *)p[i], n[i]};
        iov[k++] = (struct iovec){(void *)&nul, 1};
    }
    for (size_t i = 0; i < k; i++) total += iov[i].iov_len;
    int fd = memfd_create("clshim-capture", MFD_CLOEXEC);
    if (fd < 0) return -1;
    /* A memfd takes the whole write unless memory is out. */
    if (writev(fd, iov, (int)k) != (ssize_t)total) {
        close(fd);
        return -1;
    }
    return fd;
}

int capture_proc_decode(const void *buf, size_t len, struct capture_request *out)
{
    const char *b = buf, *end = b + len;
    if (len < sizeof magic + 20 || memcmp(b, magic, sizeof magic)) return -1;
    b += sizeof magic;
    uint32_t kind;
    memcpy(&kind, b, sizeof kind), b += sizeof kind;
    memcpy(&out->compile_ns, b, sizeof out->compile_ns), b += sizeof out->compile_ns;
    memcpy(&out->first_use_ns, b, sizeof out->first_use_ns), b += sizeof out->first_use_ns;
    out->kind = kind & ~(REQUEST_AGAIN | REQUEST_REFRESH);
    out->again = !!(kind & REQUEST_AGAIN);
    out->refresh = !!(kind & REQUEST_REFRESH);
    const char *f[NFIELDS];
    uint64_t n[NFIELDS];
    for (int i = 0; i < NFIELDS; i++) {
        if ((size_t)(end - b) < sizeof n[i]) return -1;
        memcpy(&n[i], b, sizeof n[i]), b += sizeof n[i];
        if ((uint64_t)(end - b) < n[i] + 1 || b[n[i]] != '\0') return -1;
        f[i] = b;
        b += n[i] + 1;
    }
    out->identity = f[0];
    out->device = f[1];
    out->options = f[2];
    out->source = f[3], out->source_len = n[3];
    out->key = f[4], out->key_len = n[4];
    out->log = f[5];
    out->cwd = f[6];
    out->snapshot = f[7], out->snapshot_len = n[7];
    out->parts = f[8], out->parts_len = n[8];
    return b == end ? 0 : -1;
}

void capture_part_add(struct key_buf *out, const char *name, const void *bytes, size_t size)
{
    uint64_t n = strlen(name), z = size;
    key_append(out, &n, sizeof n);
    key_append(out, name, (size_t)n);
    key_append(out, &z, sizeof z);
    key_append(out, bytes, size);
}

int capture_part_next(const void *parts, size_t len, size_t *at, const char **name, size_t *name_len,
                      const void **bytes, size_t *size)
{
    const char *b = parts;
    if (*at == len) return 0;
    uint64_t n, z;
    if (*at > len || len - *at < sizeof n) return -1;
    memcpy(&n, b + *at, sizeof n);
    size_t p = *at + sizeof n;
    if (n > len - p || len - p - n < sizeof z) return -1;
    *name = b + p, *name_len = (size_t)n;
    p += (size_t)n;
    memcpy(&z, b + p, sizeof z);
    p += sizeof z;
    if (z > len - p) return -1;
    *bytes = b + p, *size = (size_t)z;
    *at = p + (size_t)z;
    return 1;
}

/* ---- answers -----------------------------------------------------------------
 * "CLSHREP1", hash lo and hi (u64 each), compile_ns (u64), the log (u64
 * length, bytes, NUL), the binary (u64 length, bytes), in a memfd passed
 * over the socket as a request is. */

static const char reply_magic[8] = {'C', 'L', 'S', 'H', 'R', 'E', 'P', '1'};

ssize_t capture_proc_recv(int sock, int flags, int fds[2])
{
    char byte;
    union {
        struct cmsghdr h;
        char space[CMSG_SPACE(2 * sizeof(int))];
    } ctl;
    struct iovec iov = {&byte, 1};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.space,
                         .msg_controllen = sizeof ctl.space};
    fds[0] = fds[1] = -1;
    ssize_t r;
    while ((r = recvmsg(sock, &msg, flags | MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR) {
    }
    struct cmsghdr *c = r > 0 ? CMSG_FIRSTHDR(&msg) : NULL;
    if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS && c->cmsg_len >= CMSG_LEN(sizeof(int)))
        memcpy(fds, CMSG_DATA(c), c->cmsg_len >= CMSG_LEN(2 * sizeof(int)) ? 2 * sizeof(int) : sizeof(int));
    return r;
}

/* Sends the memfd `fd` (and `lock`, when >= 0) over `sock` without waiting;
 * the number of bytes sendmsg() sent, or -1 with errno. */
static ssize_t send_fds(int sock, int fd, int lock)
{
    char byte = 0;
    union {
        struct cmsghdr h;
        char space[CMSG_SPACE(2 * sizeof(int))];
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    int n = lock >= 0 ? 2 : 1, fds[2] = {fd, lock};
    struct iovec iov = {&byte, 1};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.space,
                         .msg_controllen = CMSG_SPACE(n * sizeof(int))};
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(n * sizeof(int));
    memcpy(CMSG_DATA(c), fds, n * sizeof(int));
    ssize_t w;
    while ((w = sendmsg(sock, &msg, MSG_DONTWAIT | MSG_NOSIGNAL)) < 0 && errno == EINTR) {
    }
    return w;
}

void capture_proc_reply(int fd, const struct capture_reply *r)
{
    uint64_t head[3] = {r->hash.lo, r->hash.hi, r->compile_ns};
    const char *log = r->log ? r->log : "";
    uint64_t log_len = strlen(log), size = r->binary ? r->size : 0;
    static const char nul = 0;
    struct iovec iov[] = {{(void *)reply_magic, sizeof reply_magic}, {head, sizeof head}, {&log_len, sizeof log_len},
                          {(void *)log, log_len}, {(void *)&nul, 1}, {&size, sizeof size},
                          {(void *)r->binary, size}};
    size_t total = 0;
    for (size_t i = 0; i < sizeof iov / sizeof *iov; i++) total += iov[i].iov_len;
    int m = memfd_create("clshim-capture-reply", MFD_CLOEXEC);
    if (m < 0) return;
    if (writev(m, iov, (int)(sizeof iov / sizeof *iov)) == (ssize_t)total) (void)send_fds(fd, m, -1);
    close(m);
}

/* A reply's fields from its bytes (pointers into buf); -1 when malformed. */
static int decode_reply(const char *b, size_t len, struct capture_reply *r)
{
    const char *end = b + len;
    uint64_t head[3], log_len, size;
    if (len < sizeof reply_magic + sizeof head + 8 || memcmp(b, reply_magic, sizeof reply_magic)) return -1;
    b += sizeof reply_magic;
    memcpy(head, b, sizeof head), b += sizeof head;
    memcpy(&log_len, b, 8), b += 8;
    if ((uint64_t)(end - b) < log_len + 1 + 8 || b[log_len] != '\0') return -1;
    r->log = b, b += log_len + 1;
    memcpy(&size, b, 8), b += 8;
    if ((uint64_t)(end - b) != size) return -1;
    r->hash = (struct cache_hash){head[0], head[1]};
    r->compile_ns = head[2];
    r->binary = size ? b : NULL;
    r->size = size;
    return 0;
}

/* ---- the application's side ------------------------------------------------ */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int sock = -1; /* to the helper */
static int gave_up;   /* no helper: capture here from now on */

/* Keys handed over and not answered yet (lock held): an open-addressing
 * set, so a program released and built again while the helper still has
 * its request is not handed (and captured) twice. Full: no deduplication. */
#define HANDED_MAX 4096
static struct cache_hash handed[HANDED_MAX];
static unsigned char hurried[HANDED_MAX]; /* handed[i] was sent again, marked `again` */
static uint64_t handed_compile_ns[HANDED_MAX];   /* what the handed request's build cost */
static uint64_t handed_first_use_ns[HANDED_MAX]; /* and its first use (code generation on PoCL) */
static size_t nhanded;

static size_t handed_slot(struct cache_hash h) { return (size_t)(h.lo ^ (h.hi >> 7)) % HANDED_MAX; }
static int is_empty(struct cache_hash h) { return !h.lo && !h.hi; }
static int same_hash(struct cache_hash a, struct cache_hash b) { return a.lo == b.lo && a.hi == b.hi; }

static int handed_find(struct cache_hash h)
{
    (void)CLSHIM_ASSERT_HELD(&lock);
    for (size_t i = handed_slot(h), n = 0; n < HANDED_MAX && !is_empty(handed[i]); i = (i + 1) % HANDED_MAX, n++)
        if (same_hash(handed[i], h)) return (int)i;
    return -1;
}

static void handed_add(struct cache_hash h, uint64_t compile_ns, uint64_t first_use_ns)
{
    if (is_empty(h) || nhanded >= HANDED_MAX / 2 || handed_find(h) >= 0) return;
    size_t i = handed_slot(h);
    while (!is_empty(handed[i])) i = (i + 1) % HANDED_MAX;
    handed[i] = h;
    hurried[i] = 0;
    handed_compile_ns[i] = compile_ns;
    handed_first_use_ns[i] = first_use_ns;
    nhanded++;
}

/* Removal with backward shift, so later probes still find their keys. */
static void handed_remove(struct cache_hash h)
{
    int at = handed_find(h);
    if (at < 0) return;
    size_t i = (size_t)at, j = i;
    for (;;) {
        handed[i] = (struct cache_hash){0, 0};
        hurried[i] = 0;
        for (;;) {
            j = (j + 1) % HANDED_MAX;
            if (is_empty(handed[j])) {
                nhanded--;
                return;
            }
            size_t home = handed_slot(handed[j]);
            /* handed[j] may move to i when its home is not within (i, j]. */
            if (i <= j ? (home <= i || home > j) : (home <= i && home > j)) break;
        }
        handed[i] = handed[j];
        hurried[i] = hurried[j];
        handed_compile_ns[i] = handed_compile_ns[j];
        handed_first_use_ns[i] = handed_first_use_ns[j];
        i = j;
    }
}

/* The clshim-tool to run: the knob, or the one next to this library
 * (build/ and lib/clshim/), or one level up (loader mode's loader/). */
static int helper_path(char *out, size_t len)
{
    const char *knob = config_get()->capture_helper;
    if (knob && *knob) {
        snprintf(out, len, "%s", knob);
        return access(out, X_OK);
    }
    Dl_info info;
    if (!dladdr((void *)helper_path, &info) || !info.dli_fname) return -1;
    char self[PATH_MAX];
    snprintf(self, sizeof self, "%s", info.dli_fname);
    const char *dir = dirname(self);
    snprintf(out, len, "%s/clshim-tool", dir);
    if (access(out, X_OK) == 0) return 0;
    snprintf(out, len, "%s/../clshim-tool", dir);
    return access(out, X_OK);
}

/* Starts the helper (lock held): 0, or -1 after one line. */
static int start_helper(void)
{
    (void)CLSHIM_ASSERT_HELD(&lock);
    char path[PATH_MAX];
    if (helper_path(path, sizeof path) != 0) {
        log_msg(LOG_WARN, "no capture helper (%s): binaries are captured in this process", path);
        return -1;
    }
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
        log_msg(LOG_WARN, "cannot start the capture helper (socketpair: %s): binaries are captured in this process",
                strerror(errno));
        return -1;
    }
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, sv[1], 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    spawn_attr_init(&attr);
    char *argv[] = {path, "capture-helper", NULL};
    char **envp = child_environ();
    pid_t pid;
    int sp = posix_spawn(&pid, path, &fa, &attr, argv, envp ? envp : environ);
    free_environ(envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    close(sv[1]);
    int status = 0;
    if (sp == 0) {
        /* The first process exits once the helper holds the cache's lock.
         * ECHILD: the application reaps its children itself (SIGCHLD
         * ignored, or a handler's wait): the helper is running then too. */
        pid_t w;
        while ((w = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
        }
        if (w < 0) status = 0;
    }
    if (sp != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        log_msg(LOG_WARN, "cannot start the capture helper %s (%s): binaries are captured in this process", path,
                sp ? strerror(sp) : "it failed");
        close(sv[0]);
        return -1;
    }
    __atomic_store_n(&sock, sv[0], __ATOMIC_RELEASE);
    return 0;
}

/* A new open file description of the cache directory's capture.lock with a
 * shared lock on it, for one request: the request holds it until the helper
 * is done with it (`clshim cache wait` takes the lock exclusively). -1 when
 * it cannot be had: the caller then captures in this process. A wait that
 * holds the lock exclusively has it for a moment only; past a few
 * milliseconds something else holds it, and the application must not wait. */
static int request_lock(void)
{
    char dir[4096], path[4200];
    if (config_cache_dir(config_get(), dir, sizeof dir) != 0) return -1;
    snprintf(path, sizeof path, "%s/%s", dir, CAPTURE_PROC_LOCK);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return -1;
    for (int tries = 0; tries < 20; tries++) {
        if (flock(fd, LOCK_SH | LOCK_NB) == 0) return fd;
        if (errno != EWOULDBLOCK && errno != EINTR) break;
        struct timespec pause = {0, 500000};
        nanosleep(&pause, NULL);
    }
    close(fd);
    return -1;
}

/* ---- requests queued for the worker's turn (capture_proc_queue) ------------
 * Starting the helper (posix_spawn, then the wait for its first process:
 * milliseconds of a thread and of a second core) cost a 30-chain run of
 * PoCL at 64 Ki floats 0.65x plain when the first fused program's job
 * started it on the application's thread; on a thread of its own at once,
 * beside the chains, about 0.8x. The helper makes nothing while the
 * application is busy anyway, so such a request waits here, encoded, for
 * the capture worker's turn (program/capture.h: the application idle, its
 * exit, or CLSHIM_CAPTURE_DEFER_MAX later), when capture_proc_send_queued()
 * starts the helper if needed and sends it. queue_lock guards the queue; it
 * is taken inside `lock`, never the other way round. */
#define QUEUED_MAX 64
struct queued_request {
    struct cache_hash hash;
    int fd;
    uint64_t compile_ns, first_use_ns;
};
static pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER;
static struct queued_request queued[QUEUED_MAX];
static size_t nqueued;

static int queued_find(struct cache_hash h)
{
    (void)CLSHIM_ASSERT_HELD(&queue_lock);
    for (size_t i = 0; i < nqueued; i++)
        if (same_hash(queued[i].hash, h)) return (int)i;
    return -1;
}

int capture_proc_queue(const struct capture_request *rq)
{
    if (__atomic_load_n(&sock, __ATOMIC_ACQUIRE) >= 0 || __atomic_load_n(&gave_up, __ATOMIC_RELAXED))
        return capture_proc_send(rq);
    struct cache_hash hash = key_hash(rq->key, rq->key_len);
    struct capture_request copy = *rq;
    copy.again = 0;
    int fd = capture_proc_encode(&copy), rc = -1;
    pthread_mutex_lock(&queue_lock);
    if (__atomic_load_n(&sock, __ATOMIC_ACQUIRE) >= 0 || __atomic_load_n(&gave_up, __ATOMIC_RELAXED)) {
        /* a start drained the queue meanwhile: sent the usual way below */
    } else if (fd >= 0 && queued_find(hash) >= 0) {
        rc = 1;
    } else if (fd >= 0 && nqueued < QUEUED_MAX) {
        queued[nqueued++] = (struct queued_request){hash, fd, rq->compile_ns, rq->first_use_ns};
        fd = -1;
        rc = 0;
    }
    pthread_mutex_unlock(&queue_lock);
    if (fd >= 0) close(fd);
    return rc < 0 ? capture_proc_send(rq) : rc;
}

size_t capture_proc_send_queued(void)
{
    pthread_mutex_lock(&queue_lock);
    size_t any = nqueued;
    pthread_mutex_unlock(&queue_lock);
    if (!any) return 0;
    pthread_mutex_lock(&lock);
    int up = !gave_up && (sock >= 0 || start_helper() == 0);
    if (!up) __atomic_store_n(&gave_up, 1, __ATOMIC_RELAXED); /* a start that failed said so */
    struct queued_request q[QUEUED_MAX];
    pthread_mutex_lock(&queue_lock);
    size_t n = nqueued;
    memcpy(q, queued, n * sizeof *q);
    nqueued = 0; /* sock or gave_up is set: nothing is queued from now on */
    pthread_mutex_unlock(&queue_lock);
    size_t sent = 0;
    for (size_t i = 0; i < n; i++) {
        int lockfd = up ? request_lock() : -1;
        if (lockfd >= 0 && send_fds(sock, q[i].fd, lockfd) == 1) {
            handed_add(q[i].hash, q[i].compile_ns, q[i].first_use_ns);
            sent++;
        }
        close(q[i].fd);
        if (lockfd >= 0) close(lockfd); /* the copy in flight keeps the lock */
    }
    pthread_mutex_unlock(&lock);
    if (up && sent < n)
        log_msg(LOG_WARN, "%zu request%s for the capture helper did not reach it (its socket is full, or no lock "
                          "on %s): made by a later run", n - sent, n - sent == 1 ? "" : "s", CAPTURE_PROC_LOCK);
    return sent;
}

int capture_proc_gave_up(void) { return __atomic_load_n(&gave_up, __ATOMIC_RELAXED); }

int capture_proc_owed(const void *key, size_t key_len, uint64_t *compile_ns, uint64_t *first_use_ns,
                      int *hurried_already)
{
    struct cache_hash hash = key_hash(key, key_len);
    pthread_mutex_lock(&queue_lock);
    int q = queued_find(hash);
    if (q >= 0) {
        *compile_ns = queued[q].compile_ns, *first_use_ns = queued[q].first_use_ns;
        *hurried_already = 0;
    }
    pthread_mutex_unlock(&queue_lock);
    if (q >= 0) return 1;
    if (__atomic_load_n(&sock, __ATOMIC_ACQUIRE) < 0) return 0; /* no helper: nothing handed (a start holds `lock`) */
    pthread_mutex_lock(&lock);
    int at = sock >= 0 && !gave_up ? handed_find(hash) : -1;
    if (at >= 0) {
        *compile_ns = handed_compile_ns[at], *first_use_ns = handed_first_use_ns[at];
        *hurried_already = hurried[at];
    }
    pthread_mutex_unlock(&lock);
    return at >= 0;
}

int capture_proc_send(const struct capture_request *rq)
{
    int rc = -1;
    pthread_mutex_lock(&lock);
    if (gave_up || (sock < 0 && start_helper() != 0)) {
        __atomic_store_n(&gave_up, 1, __ATOMIC_RELAXED);
        pthread_mutex_unlock(&lock);
        return -1;
    }
    struct cache_hash hash = key_hash(rq->key, rq->key_len);
    int at = handed_find(hash);
    if (at >= 0 && hurried[at]) {
        pthread_mutex_unlock(&lock);
        return 1; /* the helper has it already, and captures it now */
    }
    /* Handed already: the helper has it whether or not this hurry gets
     * through (a full socket); only a gone helper leaves it to the caller. */
    if (at >= 0) rc = 1;
    struct capture_request copy = *rq;
    copy.again = at >= 0;
    int fd = capture_proc_encode(&copy);
    int lockfd = fd >= 0 ? request_lock() : -1;
    if (lockfd < 0 && fd >= 0) {
        LOG_ONCE(LOG_INFO, "cannot lock %s in the cache directory: binaries are captured in this process",
                 CAPTURE_PROC_LOCK);
        close(fd);
        fd = -1;
    }
    if (fd >= 0) {
        ssize_t w = send_fds(sock, fd, lockfd);
        if (w == 1 && at >= 0) {
            hurried[at] = 1;
        } else if (w == 1) {
            rc = 0;
            handed_add(hash, rq->compile_ns, rq->first_use_ns);
        } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOBUFS && errno != ETOOMANYREFS) {
            /* Gone (it died, or ran past its budget): not started again. */
            log_msg(LOG_WARN, "the capture helper is gone (%s): binaries are captured in this process",
                    strerror(errno));
            close(sock);
            __atomic_store_n(&sock, -1, __ATOMIC_RELAXED);
            __atomic_store_n(&gave_up, 1, __ATOMIC_RELAXED);
            rc = -1;
        }
        close(fd);
        close(lockfd); /* the copy in flight keeps the lock */
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

void capture_proc_poll(void (*fn)(const struct capture_reply *r))
{
    if (__atomic_load_n(&sock, __ATOMIC_RELAXED) < 0) return;
    for (;;) {
        pthread_mutex_lock(&lock);
        int fds[2];
        ssize_t r = sock < 0 ? -1 : capture_proc_recv(sock, MSG_DONTWAIT, fds);
        int m = r > 0 ? fds[0] : -1;
        if (r > 0 && fds[1] >= 0) close(fds[1]); /* never sent with a reply */
        struct stat st;
        char *buf = NULL;
        struct capture_reply rep;
        int got = m >= 0 && fstat(m, &st) == 0 && st.st_size > 0 && (buf = malloc((size_t)st.st_size)) &&
                  pread(m, buf, (size_t)st.st_size, 0) == st.st_size &&
                  decode_reply(buf, (size_t)st.st_size, &rep) == 0;
        if (m >= 0) close(m);
        if (got) handed_remove(rep.hash);
        pthread_mutex_unlock(&lock);
        if (got && rep.size) fn(&rep);
        free(buf);
        if (r <= 0) return; /* nothing more now (or the helper is gone) */
    }
}

void capture_proc_after_fork_in_child(void)
{
    /* Single-threaded here. The parent's helper is the parent's: closing
     * this copy leaves its socket open in the parent. */
    lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    queue_lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    for (size_t i = 0; i < nqueued; i++) close(queued[i].fd); /* the parent's: it sends them */
    nqueued = 0;
    if (sock >= 0) close(sock);
    sock = -1;
    gave_up = 0;
    memset(handed, 0, sizeof handed);
    memset(hurried, 0, sizeof hurried);
    nhanded = 0;
}
