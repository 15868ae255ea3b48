/* capture_proc.c — late captures done by another process (capture_proc.h). */
#include "program/capture_proc.h"

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
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/childenv.h"
#include "common/config.h"
#include "common/log.h"

extern char **environ;

/* ---- the request as bytes --------------------------------------------------
 * "CLSHCAP2", kind (u32), compile_ns (u64), then identity, device, options,
 * source, key, log, cwd: each a u64 length and the bytes, then a NUL. */

static const char magic[8] = {'C', 'L', 'S', 'H', 'C', 'A', 'P', '2'};
#define NFIELDS 7

static void fields_of(const struct capture_request *rq, const void *p[NFIELDS], uint64_t n[NFIELDS])
{
    p[0] = rq->identity, n[0] = strlen(rq->identity);
    p[1] = rq->device, n[1] = strlen(rq->device);
    p[2] = rq->options, n[2] = strlen(rq->options);
    p[3] = rq->source, n[3] = rq->source_len;
    p[4] = rq->key, n[4] = rq->key_len;
    p[5] = rq->log ? rq->log : "", n[5] = strlen(p[5]);
    p[6] = rq->cwd, n[6] = strlen(rq->cwd);
}

/* Writes the request into a new memfd; -1 on failure. */
static int encode(const struct capture_request *rq)
{
    const void *p[NFIELDS];
    uint64_t n[NFIELDS];
    fields_of(rq, p, n);
    uint32_t kind = rq->kind;
    uint64_t compile_ns = rq->compile_ns;
    static const char nul = 0;
    struct iovec iov[3 + 3 * NFIELDS];
    size_t k = 0, total = 0;
    iov[k++] = (struct iovec){(void *)magic, sizeof magic};
    iov[k++] = (struct iovec){&kind, sizeof kind};
    iov[k++] = (struct iovec){&compile_ns, sizeof compile_ns};
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
    if (len < sizeof magic + 12 || memcmp(b, magic, sizeof magic)) return -1;
    b += sizeof magic;
    uint32_t kind;
    memcpy(&kind, b, sizeof kind), b += sizeof kind;
    memcpy(&out->compile_ns, b, sizeof out->compile_ns), b += sizeof out->compile_ns;
    out->kind = kind;
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
    return b == end ? 0 : -1;
}

/* ---- the application's side ------------------------------------------------ */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int sock = -1; /* to the helper */
static int gave_up;   /* no helper: capture here from now on */

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
    posix_spawnattr_init(&attr);
    sigset_t none, def;
    sigemptyset(&none);
    sigfillset(&def);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &def);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
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
    sock = sv[0];
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

int capture_proc_send(const struct capture_request *rq)
{
    int rc = -1;
    pthread_mutex_lock(&lock);
    if (gave_up || (sock < 0 && start_helper() != 0)) {
        gave_up = 1;
        pthread_mutex_unlock(&lock);
        return -1;
    }
    int fd = encode(rq);
    int lockfd = fd >= 0 ? request_lock() : -1;
    if (lockfd < 0 && fd >= 0) {
        LOG_ONCE(LOG_INFO, "cannot lock %s in the cache directory: binaries are captured in this process",
                 CAPTURE_PROC_LOCK);
        close(fd);
        fd = -1;
    }
    if (fd >= 0) {
        char byte = 0;
        union {
            struct cmsghdr h;
            char space[CMSG_SPACE(2 * sizeof(int))];
        } ctl;
        memset(&ctl, 0, sizeof ctl);
        struct iovec iov = {&byte, 1};
        struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.space,
                             .msg_controllen = sizeof ctl.space};
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(2 * sizeof(int));
        int fds[2] = {fd, lockfd};
        memcpy(CMSG_DATA(c), fds, sizeof fds);
        ssize_t w;
        while ((w = sendmsg(sock, &msg, MSG_DONTWAIT | MSG_NOSIGNAL)) < 0 && errno == EINTR) {
        }
        if (w == 1) {
            rc = 0;
        } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOBUFS && errno != ETOOMANYREFS) {
            /* Gone (it died, or ran past its budget): not started again. */
            log_msg(LOG_WARN, "the capture helper is gone (%s): binaries are captured in this process",
                    strerror(errno));
            close(sock);
            sock = -1;
            gave_up = 1;
        }
        close(fd);
        close(lockfd); /* the copy in flight keeps the lock */
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

void capture_proc_after_fork_in_child(void)
{
    /* Single-threaded here. The parent's helper is the parent's: closing
     * this copy leaves its socket open in the parent. */
    lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    if (sock >= 0) close(sock);
    sock = -1;
    gave_up = 0;
}
