/* spawn.h — runs a program as a child process and collects what it wrote:
 * clang (common/clang.c) and the LLVM module's isolated steps
 * (compiler/llvm/isolate.c, which links this file alone).
 *
 * spawn_collect() starts argv[0] (looked up in PATH when it has no '/') with
 * posix_spawnp, a fixed argv and `envp` (the caller's choice: childenv.h's
 * for a child without clshim), signals at their defaults and none blocked.
 * Its standard input, output and error are unnamed files (memfd, else
 * O_TMPFILE in TMPDIR), not pipes: clshim waits for the child's exit, not for
 * an EOF, so a child the application forks meanwhile (holding copies of
 * every descriptor) holds nothing up, and neither side blocks the other
 * however much the child prints. Nothing here needs the child's pipe ends
 * closed, and no SIGPIPE can reach the application. The child is always
 * reaped (killed first when it runs past the timeout), unless the
 * application reaped it itself (a SIGCHLD handler's waitpid(-1)): then its
 * status is unknown and only what it wrote tells. Thread-safe.
 */
#ifndef CLSHIM_SPAWN_H
#define CLSHIM_SPAWN_H

#include <spawn.h>
#include <stddef.h>

struct spawn_result {
    int start_error;  /* 0: it ran; else posix_spawn's error (not found, ...) */
    int timed_out;    /* it ran past the timeout and was killed */
    int status_known; /* 0: the application took its exit status */
    int status;       /* waitpid's status, when known */
    char *out;        /* its standard output, NUL-terminated (free()); */
    size_t out_len;   /*   NULL when it wrote nothing */
    char *err;        /* its standard error: the first max_err bytes, or */
    size_t err_len;   /*   the last with SPAWN_ERR_TAIL (NUL-terminated) */
};

#define SPAWN_ERR_TAIL 1

/* Runs argv with `input` then `input2` (either may be empty) on its
 * standard input; timeout_ms 0: no bound. Returns 0 with *res filled (the
 * child may still have failed: see start_error and status), CLSHIM_EIO when
 * the files cannot be made or read, CLSHIM_ENOMEM. */
int spawn_collect(char *const *argv, char *const *envp, const void *input, size_t input_len, const void *input2,
                  size_t input2_len, long timeout_ms, size_t max_err, int flags, struct spawn_result *res);

/* Whether the child ran to an exit of its own with status 0. */
int spawn_exited_ok(const struct spawn_result *res);

void spawn_result_free(struct spawn_result *res);

/* posix_spawn attributes for a child of clshim's: every signal at its
 * default, none blocked (the application's dispositions and mask are not
 * the child's). Destroy with posix_spawnattr_destroy. */
void spawn_attr_init(posix_spawnattr_t *attr);

/* Writes all n bytes (retrying short writes and EINTR): 0, or -1. */
int write_fully(int fd, const void *p, size_t n);

#endif
