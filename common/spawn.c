/* spawn.c — runs a program as a child process (spawn.h). */
#include "common/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/error.h"

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* An unnamed file, closed at exec. */
static int anonymous_file(void)
{
    int fd = memfd_create("clshim-child", MFD_CLOEXEC);
    if (fd >= 0) return fd;
    const char *dir = getenv("TMPDIR");
    return open(dir && *dir ? dir : "/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
}

int write_fully(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* `want` bytes of file `fd` from offset `at` into a malloc'd, NUL-terminated
 * buffer (short when the file is). */
static int read_range(int fd, off_t at, size_t want, char **out, size_t *out_len)
{
    *out = NULL;
    *out_len = 0;
    if (!want) return 0;
    char *buf = malloc(want + 1);
    if (!buf) return CLSHIM_ENOMEM;
    size_t got = 0;
    while (got < want) {
        ssize_t r = pread(fd, buf + got, want - got, at + (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            free(buf);
            return CLSHIM_EIO;
        }
        if (r == 0) break;
        got += (size_t)r;
    }
    buf[got] = '\0';
    *out = buf;
    *out_len = got;
    return 0;
}

/* Waits until `pid` exits or the deadline (0: none) passes: 0, or -1 on
 * timeout. It waits for the process, not for descriptors, and does not reap
 * it. A pidfd where the kernel has one, else short sleeps. */
static int wait_exit(pid_t pid, long deadline)
{
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    for (long nap_us = 200;;) {
        siginfo_t info;
        info.si_pid = 0;
        int w = waitid(P_PID, (id_t)pid, &info, WEXITED | WNOHANG | WNOWAIT);
        if ((w == 0 && info.si_pid == pid) || (w < 0 && errno == ECHILD)) break; /* exited, or reaped by the app */
        long left = deadline ? deadline - now_ms() : 1000;
        if (left <= 0) {
            if (pidfd >= 0) close(pidfd);
            return -1;
        }
        if (pidfd >= 0) {
            struct pollfd pfd = {pidfd, POLLIN, 0};
            poll(&pfd, 1, left > INT32_MAX ? INT32_MAX : (int)left);
        } else {
            struct timespec nap = {0, nap_us * 1000};
            nanosleep(&nap, NULL);
            if (nap_us < 10000) nap_us *= 2;
        }
    }
    if (pidfd >= 0) close(pidfd);
    return 0;
}

static off_t file_size(int fd)
{
    struct stat st;
    return fstat(fd, &st) == 0 ? st.st_size : 0;
}

void spawn_attr_init(posix_spawnattr_t *attr)
{
    posix_spawnattr_init(attr);
    sigset_t none, def;
    sigemptyset(&none);
    sigfillset(&def);
    posix_spawnattr_setsigmask(attr, &none);
    posix_spawnattr_setsigdefault(attr, &def);
    posix_spawnattr_setflags(attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
}

int spawn_collect(char *const *argv, char *const *envp, const void *input, size_t input_len, const void *input2,
                  size_t input2_len, long timeout_ms, size_t max_err, int flags, struct spawn_result *res)
{
    memset(res, 0, sizeof *res);
    int in = anonymous_file(), outf = anonymous_file(), errf = anonymous_file();
    int rc = in < 0 || outf < 0 || errf < 0 ? CLSHIM_EIO : 0;
    if (!rc && (write_fully(in, input, input_len) != 0 || write_fully(in, input2, input2_len) != 0 ||
                lseek(in, 0, SEEK_SET) != 0))
        rc = CLSHIM_EIO;
    if (rc) {
        if (in >= 0) close(in);
        if (outf >= 0) close(outf);
        if (errf >= 0) close(errf);
        return rc;
    }
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in, 0);
    posix_spawn_file_actions_adddup2(&fa, outf, 1);
    posix_spawn_file_actions_adddup2(&fa, errf, 2);
    spawn_attr_init(&attr);
    pid_t pid;
    res->start_error = posix_spawnp(&pid, argv[0], &fa, &attr, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    close(in);
    if (!res->start_error) {
        res->timed_out = wait_exit(pid, timeout_ms > 0 ? now_ms() + timeout_ms : 0) != 0;
        if (res->timed_out) kill(pid, SIGKILL);
        pid_t waited;
        while ((waited = waitpid(pid, &res->status, 0)) < 0 && errno == EINTR) {
        }
        res->status_known = waited == pid;
        rc = read_range(outf, 0, (size_t)file_size(outf), &res->out, &res->out_len);
        size_t err_size = (size_t)file_size(errf), take = err_size < max_err ? err_size : max_err;
        off_t from = flags & SPAWN_ERR_TAIL ? (off_t)(err_size - take) : 0;
        if (!rc) rc = read_range(errf, from, take, &res->err, &res->err_len);
    }
    close(outf);
    close(errf);
    if (rc) spawn_result_free(res);
    return rc;
}

int spawn_exited_ok(const struct spawn_result *res)
{
    return !res->start_error && !res->timed_out && res->status_known && WIFEXITED(res->status) &&
           WEXITSTATUS(res->status) == 0;
}

void spawn_result_free(struct spawn_result *res)
{
    free(res->out);
    free(res->err);
    res->out = res->err = NULL;
    res->out_len = res->err_len = 0;
}
