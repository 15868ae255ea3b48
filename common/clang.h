/* clang.h — runs clang as a child process, for the layers that need it: the
 * program cache's preprocessor mode (cache/preproc.c: clang -M) and fusion's
 * front end (fusion/frontend.c: OpenCL C to SPIR bitcode). It lives here,
 * below both, so cache/ needs nothing of fusion/.
 *
 * clang (CLSHIM_CLANG, default clang-15) is started with posix_spawnp and a
 * fixed argv, never a shell, with clshim taken out of its LD_PRELOAD (clang
 * makes no OpenCL call, and a sanitizer-built shim would stop it from
 * starting). Its standard input, output and error are unnamed files
 * (memfd), not pipes: clshim waits for clang's exit, not for an EOF, so a
 * child the app forks meanwhile (holding copies of every descriptor) holds
 * nothing up, and neither side blocks the other however much clang prints.
 * The child is always reaped, killed first when it runs past 120 s.
 */
#ifndef CLSHIM_CLANG_H
#define CLSHIM_CLANG_H

#include <stddef.h>

/* The clang to run: CLSHIM_CLANG, or "clang-15". Never NULL. */
const char *clang_name(void);

/* Whether clang_name() names an executable (looked up in PATH once per
 * process): where it does not, nothing that needs it is worth starting. */
int clang_available(void);

/* Runs clang with `args` (NULL-terminated, after clang's name) and `input`
 * (`len` bytes) on its standard input. Returns 0 with *out (malloc'd,
 * NUL-terminated, free()) holding its standard output and *out_len its
 * length, or:
 *   CLSHIM_EINVAL  clang exited non-zero (err: its first error line) or an
 *                  argument list too long;
 *   CLSHIM_EIO     clang cannot be run, its files fail, or it ran too long;
 *   CLSHIM_ENOMEM  out of memory.
 * On failure *out is NULL. `err` (may be NULL) receives a one-line reason.
 * Thread-safe; no pipe, so no SIGPIPE can reach the app. */
int clang_run(const char *const *args, const char *input, size_t len, char **out, size_t *out_len, char *err,
              size_t err_len);

#endif
