/* clang.c — runs clang as a child process (clang.h). */
#include "common/clang.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/childenv.h"
#include "common/config.h"
#include "common/error.h"
#include "common/spawn.h"

extern char **environ;

#define CLANG_TIMEOUT_MS 120000
#define CLANG_MAX_ARGS 512

static int set_err(char *err, size_t err_len, int code, const char *fmt, const char *detail)
{
    if (err && err_len) snprintf(err, err_len, fmt, detail ? detail : "");
    return code;
}

/* The first line of clang's stderr that says "error", else its first line. */
static void first_error(const char *text, char *err, size_t err_len)
{
    text = text ? text : "";
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

/* clang's standard error is read up to here for the reason. */
#define CLANG_ERR_MAX 65536

static int spawn_and_wait(char *const *argv, const char *source, size_t len, char **out, size_t *out_len, char *err,
                          size_t err_len)
{
    char **envp = child_environ();
    struct spawn_result res;
    int rc = spawn_collect(argv, envp ? envp : environ, source, len, NULL, 0, CLANG_TIMEOUT_MS, CLANG_ERR_MAX, 0,
                           &res);
    free_environ(envp);
    if (rc == CLSHIM_ENOMEM) return set_err(err, err_len, rc, "out of memory%s", "");
    if (rc) return set_err(err, err_len, rc, "clang's input/output files: %s", strerror(errno));
    if (res.start_error) {
        if (err && err_len) snprintf(err, err_len, "cannot run %s: %s", argv[0], strerror(res.start_error));
        rc = CLSHIM_EIO;
    } else if (!res.status_known) {
        /* An app reaping every child (waitpid(-1) in a SIGCHLD handler) took
         * clang's status: unknown is a failure, never a success. */
        rc = set_err(err, err_len, CLSHIM_EIO, "%s: its exit status was taken by the application", argv[0]);
    } else if (res.timed_out) {
        rc = set_err(err, err_len, CLSHIM_EIO, "%s ran too long; killed", argv[0]);
    } else if (!spawn_exited_ok(&res)) {
        if (res.err) first_error(res.err, err, err_len);
        else set_err(err, err_len, CLSHIM_EIO, "%s failed", argv[0]);
        rc = CLSHIM_EINVAL;
    } else {
        *out = res.out ? res.out : strdup("");
        *out_len = res.out_len;
        res.out = NULL;
        if (!*out) rc = set_err(err, err_len, CLSHIM_ENOMEM, "out of memory%s", "");
    }
    spawn_result_free(&res);
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
    return spawn_and_wait(argv, input, len, out, out_len, err, err_len);
}
