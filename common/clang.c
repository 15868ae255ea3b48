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

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Feeds stdin, drains stdout and stderr until both close. -1 on timeout or error. */
static int pump(int in_fd, const char *src, size_t len, int out_fd, int err_fd,
                struct byte_buf *out, struct byte_buf *errs)
{
    size_t sent = 0;
    long deadline = now_ms() + CLANG_TIMEOUT_MS;
    struct pollfd fds[3] = {{in_fd, POLLOUT, 0}, {out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
    if (len == 0) {
        close(in_fd);
        fds[0].fd = -1;
    }
    char buf[65536];
    while (fds[1].fd >= 0 || fds[2].fd >= 0) {
        long left = deadline - now_ms();
        if (left <= 0) return -1;
        int n = poll(fds, 3, (int)left);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -1;
        if (fds[0].fd >= 0 && fds[0].revents) {
            ssize_t w = write(fds[0].fd, src + sent, len - sent);
            if (w > 0) sent += (size_t)w;
            if ((w < 0 && errno != EINTR && errno != EAGAIN) || sent == len) {
                close(fds[0].fd); /* EPIPE: clang is gone; its exit status tells */
                fds[0].fd = -1;
            }
        }
        for (int i = 1; i < 3; i++) {
            if (fds[i].fd < 0 || !fds[i].revents) continue;
            ssize_t r = read(fds[i].fd, buf, sizeof buf);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) {
                fds[i].fd = -1;
                continue;
            }
            struct byte_buf *dst = i == 1 ? out : errs;
            if (i == 2 && errs->len > 65536) continue; /* enough diagnostics */
            if (buf_append(dst, buf, (size_t)r) != 0) return -1;
        }
    }
    if (fds[0].fd >= 0) close(fds[0].fd);
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

static int spawn_and_pump(char *const *argv, const char *source, size_t len, struct byte_buf *out,
                          char *err, size_t err_len)
{
    int pin[2], pout[2], perr[2];
    if (pipe2(pin, O_CLOEXEC)) return set_err(err, err_len, CLSHIM_EIO, "pipe: %s", strerror(errno));
    if (pipe2(pout, O_CLOEXEC)) {
        close(pin[0]), close(pin[1]);
        return set_err(err, err_len, CLSHIM_EIO, "pipe: %s", strerror(errno));
    }
    if (pipe2(perr, O_CLOEXEC)) {
        close(pin[0]), close(pin[1]), close(pout[0]), close(pout[1]);
        return set_err(err, err_len, CLSHIM_EIO, "pipe: %s", strerror(errno));
    }
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pin[0], 0);
    posix_spawn_file_actions_adddup2(&fa, pout[1], 1);
    posix_spawn_file_actions_adddup2(&fa, perr[1], 2);
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
    close(pin[0]), close(pout[1]), close(perr[1]);
    if (sp != 0) {
        close(pin[1]), close(pout[0]), close(perr[0]);
        if (err && err_len) snprintf(err, err_len, "cannot run %s: %s", argv[0], strerror(sp));
        return CLSHIM_EIO;
    }

    /* Non-blocking, so a write never waits past what poll() promised. */
    fcntl(pin[1], F_SETFL, fcntl(pin[1], F_GETFL) | O_NONBLOCK);
    /* A clang that exits before reading all of stdin must not SIGPIPE the app. */
    sigset_t pipe_set, old;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    struct byte_buf errs = {0};
    int pumped = pump(pin[1], source, len, pout[0], perr[0], out, &errs);
    if (!sigismember(&old, SIGPIPE)) {
        struct timespec zero = {0, 0};
        while (sigtimedwait(&pipe_set, NULL, &zero) > 0) {
        }
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    close(pout[0]), close(perr[0]);
    if (pumped != 0) kill(pid, SIGKILL);
    int status = 0;
    pid_t waited;
    while ((waited = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
    }
    int rc = 0;
    if (waited < 0) {
        /* An app reaping every child (waitpid(-1) in a SIGCHLD handler) took
         * clang's status: unknown is a failure, never a success. */
        rc = set_err(err, err_len, CLSHIM_EIO, "%s: its exit status was taken by the application", argv[0]);
    } else if (pumped != 0) {
        rc = set_err(err, err_len, CLSHIM_EIO, "%s ran too long or its output failed; killed",
                     argv[0]);
    } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        if (err && err_len) first_error(&errs, err, err_len);
        rc = CLSHIM_EINVAL;
    }
    free(errs.data);
    return rc;
}

const char *clang_name(void)
{
    const char *clang = config_get()->clang;
    return clang && *clang ? clang : "clang-15";
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
    int rc = spawn_and_pump(argv, input, len, &buf, err, err_len);
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
