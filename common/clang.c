/* clang.c — runs clang as a child process (clang.h). */
#include "common/clang.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/childenv.h"
#include "common/config.h"
#include "common/error.h"

extern char **environ;

#define CLANG_TIMEOUT_MS 120000
#define CLANG_MAX_ARGS 512

struct byte_buf {
    char *data;
    size_t len, cap;
};

static int set_err(char *err, size_t err_len, int code, const char *fmt, const char *detail)
{
    if (err && err_len) snprintf(err, err_len, fmt, detail ? detail : "");
    return code;
}

static int buf_append(struct byte_buf *b, const char *p, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 65536;
        while (cap < b->len + n + 1) cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d) return CLSHIM_ENOMEM;
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

/* The first line of clang's stderr that says "error", else its first line. */
static void first_error(const struct byte_buf *errs, char *err, size_t err_len)
{
    const char *text = errs->data ? errs->data : "";
    const char *line = strstr(text, "error:");
    if (line) {
        while (line > text && line[-1] != '\n') line--;
    } else {
        line = text;
    }
    size_t n = strcspn(line, "\n");
    if (n == 0) snprintf(err, err_len, "clang failed to compile the source");
    else snprintf(err, err_len, "clang: %.*s", (int)n, line);
}

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* An unnamed file, closed at exec: memfd, else an O_TMPFILE in TMPDIR. clang
 * talks to clshim through files, not pipes: a fork() of the app (without
 * exec) while clang runs inherits copies of every descriptor, and a pipe end
 * such a child holds would keep clang waiting for stdin's EOF, or clshim for
 * stdout's, until that child exits. A file ends where it ends. */
static int anonymous_file(void)
{
    int fd = memfd_create("clshim-clang", MFD_CLOEXEC);
    if (fd >= 0) return fd;
    const char *dir = getenv("TMPDIR");
    return open(dir && *dir ? dir : "/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return lseek(fd, 0, SEEK_SET) == 0 ? 0 : -1;
}

/* Appends at most `max` bytes of file `fd` (from its start) to `b`. */
static int read_file(int fd, struct byte_buf *b, size_t max)
{
    char buf[65536];
    off_t at = 0;
    while (b->len < max) {
        size_t want = max - b->len < sizeof buf ? max - b->len : sizeof buf;
        ssize_t r = pread(fd, buf, want, at);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) break;
        if (buf_append(b, buf, (size_t)r) != 0) return CLSHIM_ENOMEM;
        at += r;
    }
    return 0;
}

/* Waits until `pid` exits or the deadline passes: 0, or -1 on timeout. It
 * waits for the process, not for descriptors, and does not reap it (the
 * caller does). A pidfd where the kernel has one, else short sleeps. */
static int wait_exit(pid_t pid, long deadline)
{
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    for (long nap_us = 200;;) {
        siginfo_t info;
        info.si_pid = 0;
        int w = waitid(P_PID, (id_t)pid, &info, WEXITED | WNOHANG | WNOWAIT);
        if ((w == 0 && info.si_pid == pid) || (w < 0 && errno == ECHILD)) break; /* exited, or reaped by the app */
        long left = deadline - now_ms();
        if (left <= 0) {
            if (pidfd >= 0) close(pidfd);
            return -1;
        }
        if (pidfd >= 0) {
            struct pollfd pfd = {pidfd, POLLIN, 0};
            poll(&pfd, 1, (int)left);
        } else {
            struct timespec nap = {0, nap_us * 1000};
            nanosleep(&nap, NULL);
            if (nap_us < 10000) nap_us *= 2;
        }
    }
    if (pidfd >= 0) close(pidfd);
    return 0;
}

static int spawn_and_wait(char *const *argv, const char *source, size_t len, struct byte_buf *out,
                          char *err, size_t err_len)
{
    int in = anonymous_file(), outf = anonymous_file(), errf = anonymous_file();
    if (in < 0 || outf < 0 || errf < 0 || write_all(in, source, len) != 0) {
        int e = errno;
        if (in >= 0) close(in);
        if (outf >= 0) close(outf);
        if (errf >= 0) close(errf);
        return set_err(err, err_len, CLSHIM_EIO, "clang's input/output files: %s", strerror(e));
    }
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in, 0);
    posix_spawn_file_actions_adddup2(&fa, outf, 1);
    posix_spawn_file_actions_adddup2(&fa, errf, 2);
    posix_spawnattr_init(&attr);
    sigset_t none, def;
    sigemptyset(&none);
    sigemptyset(&def);
    sigaddset(&def, SIGPIPE);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &def);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    pid_t pid;
    char **envp = child_environ();
    int sp = posix_spawnp(&pid, argv[0], &fa, &attr, argv, envp ? envp : environ);
    free_environ(envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    close(in);
    if (sp != 0) {
        close(outf), close(errf);
        if (err && err_len) snprintf(err, err_len, "cannot run %s: %s", argv[0], strerror(sp));
        return CLSHIM_EIO;
    }

    int timed_out = wait_exit(pid, now_ms() + CLANG_TIMEOUT_MS) != 0;
    if (timed_out) kill(pid, SIGKILL);
    int status = 0;
    pid_t waited;
    while ((waited = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
    }
    struct byte_buf errs = {0};
    int rc = 0;
    if (waited < 0) {
        /* An app reaping every child (waitpid(-1) in a SIGCHLD handler) took
         * clang's status: unknown is a failure, never a success. */
        rc = set_err(err, err_len, CLSHIM_EIO, "%s: its exit status was taken by the application", argv[0]);
    } else if (timed_out) {
        rc = set_err(err, err_len, CLSHIM_EIO, "%s ran too long; killed", argv[0]);
    } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        if (read_file(errf, &errs, 65536) == 0 && err && err_len) first_error(&errs, err, err_len);
        else set_err(err, err_len, CLSHIM_EIO, "%s failed", argv[0]);
        rc = CLSHIM_EINVAL;
    } else {
        int r = read_file(outf, out, (size_t)-1 / 2);
        if (r != 0) rc = r == CLSHIM_ENOMEM ? r : set_err(err, err_len, CLSHIM_EIO, "%s: its output: %s", argv[0]);
    }
    free(errs.data);
    close(outf), close(errf);
    return rc;
}

const char *clang_name(void)
{
    const char *clang = config_get()->clang;
    return clang && *clang ? clang : "clang-15";
}

/* Whether name (a path, or a word looked up in PATH as posix_spawnp would)
 * is an executable file. */
static int executable(const char *name)
{
    if (strchr(name, '/')) return access(name, X_OK) == 0;
    const char *path = getenv("PATH");
    if (!path || !*path) path = "/bin:/usr/bin";
    for (const char *p = path; *p;) {
        size_t n = strcspn(p, ":");
        char full[4096];
        if (n && (size_t)snprintf(full, sizeof full, "%.*s/%s", (int)n, p, name) < sizeof full && access(full, X_OK) == 0)
            return 1;
        p += n;
        if (*p == ':') p++;
    }
    return 0;
}

static int clang_found = -1;
static void find_clang(void) { clang_found = executable(clang_name()); }

int clang_available(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, find_clang);
    return clang_found;
}

int clang_run(const char *const *args, const char *input, size_t len, char **out, size_t *out_len, char *err,
              size_t err_len)
{
    if (err && err_len) err[0] = '\0';
    *out = NULL;
    *out_len = 0;
    char *argv[CLANG_MAX_ARGS + 2];
    size_t n = 0;
    argv[n++] = (char *)clang_name();
    for (size_t i = 0; args[i]; i++) {
        if (n > CLANG_MAX_ARGS) return set_err(err, err_len, CLSHIM_EINVAL, "clang: %s", "too many arguments");
        argv[n++] = (char *)args[i];
    }
    argv[n] = NULL;
    struct byte_buf buf = {0};
    int rc = spawn_and_wait(argv, input, len, &buf, err, err_len);
    if (rc == 0 && !buf.data) rc = buf_append(&buf, "", 0);
    if (rc != 0) {
        free(buf.data);
        if (rc == CLSHIM_ENOMEM) set_err(err, err_len, rc, "out of memory%s", "");
        return rc;
    }
    *out = buf.data;
    *out_len = buf.len;
    return 0;
}
