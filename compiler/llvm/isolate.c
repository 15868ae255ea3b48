/* isolate.c — one step of LLVM work in a child process (glue.h).
 *
 * Debian's SPIR-V translator asserts, loops or grows without bound on some
 * corrupted modules, and LLVM's NVPTX back end ends the process on some
 * inputs: neither may be the application's end. Such a step runs in
 * `clshim-tool llvm-child MODULE`, a fresh process that loads this module
 * and calls glue_child_main(). Not in a fork() of the application: the child
 * of a threaded process may only make async-signal-safe calls until it
 * execs, and a translation allocates; in a copy taken while another thread
 * held an allocator's lock (ASan's, under load) or one of LLVM's (PoCL
 * compiling on another thread) it would wait until the timeout.
 *
 * The request (a wire header, then the step's head and body) and the reply
 * (int32 rc, uint32 reason length, uint64 output length, the reason, the
 * output) travel in unnamed files (common/spawn.h). The reply's lengths say
 * whether it is whole; without a whole reply, a crash, a timeout (60 s by
 * default; the child is killed) or an exit becomes CLSHIM_EINVAL with the
 * child's last stderr line as the reason. The child's data limit
 * (RLIMIT_DATA) is what it had when the request arrived plus
 * CLSHIM_TRANSLATE_MAX_MEMORY, so runaway memory is an error there too.
 */
#include "compiler/llvm/glue.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <llvm-c/ErrorHandling.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/error.h"
#include "common/spawn.h"

extern char **environ;

#define WIRE_MAGIC 0x434c5331u /* "CLS1" */
#define DEFAULT_TIMEOUT_MS 60000u
#define STDERR_TAIL 8192

struct wire_head {
    uint32_t magic, work;
    uint64_t head_len, body_len;
    uint64_t max_memory; /* the child's allowance (CLSHIM_TRANSLATE_MAX_MEMORY); 0: none */
};

struct wire_reply {
    int32_t rc;
    uint32_t why_len;
    uint64_t size;
};

static uint32_t timeout_ms = DEFAULT_TIMEOUT_MS;
static uint64_t max_memory;

/* The helper and its environment (glue_set_helper), copied; NULL: the
 * clshim-tool beside this module, and environ. */
static pthread_mutex_t helper_lock = PTHREAD_MUTEX_INITIALIZER;
static char *helper_tool;
static char **helper_env;

void glue_set_translate_limits(uint32_t timeout, uint64_t memory)
{
    __atomic_store_n(&timeout_ms, timeout, __ATOMIC_RELAXED);
    __atomic_store_n(&max_memory, memory, __ATOMIC_RELAXED);
}

static char **copy_env(char *const *env)
{
    size_t n = 0;
    while (env[n]) n++;
    char **copy = calloc(n + 1, sizeof *copy);
    for (size_t i = 0; copy && i < n; i++) {
        if (!(copy[i] = strdup(env[i]))) {
            while (i) free(copy[--i]);
            free(copy);
            return NULL;
        }
    }
    return copy;
}

static void free_env(char **env)
{
    for (size_t i = 0; env && env[i]; i++) free(env[i]);
    free(env);
}

void glue_set_helper(const char *tool, char *const *env)
{
    char *t = tool && *tool ? strdup(tool) : NULL;
    char **e = env ? copy_env(env) : NULL;
    pthread_mutex_lock(&helper_lock);
    char *old_t = helper_tool;
    char **old_e = helper_env;
    helper_tool = t, helper_env = e;
    pthread_mutex_unlock(&helper_lock);
    free(old_t);
    free_env(old_e);
}

static int fail(char *err, size_t err_len, int code, const char *why)
{
    if (err && err_len) snprintf(err, err_len, "%s", why);
    return code;
}

/* This module's path (links resolved), and the clshim-tool to run: the
 * helper set, else the one beside the module (build/, lib/clshim/), else one
 * level up. */
static int paths(char *module, char *tool, size_t len)
{
    Dl_info info;
    char real[PATH_MAX];
    if (!dladdr((void *)paths, &info) || !info.dli_fname || !realpath(info.dli_fname, real)) {
        snprintf(tool, len, "(the path of libclshim-llvm.so is unknown)");
        return -1;
    }
    snprintf(module, len, "%s", real);
    pthread_mutex_lock(&helper_lock);
    int set = helper_tool != NULL;
    if (set) snprintf(tool, len, "%s", helper_tool);
    pthread_mutex_unlock(&helper_lock);
    if (set) return access(tool, X_OK);
    const char *slash = strrchr(module, '/');
    int dir = (int)(slash - module);
    snprintf(tool, len, "%.*s/clshim-tool", dir, module);
    if (access(tool, X_OK) == 0) return 0;
    snprintf(tool, len, "%.*s/../clshim-tool", dir, module);
    return access(tool, X_OK);
}

/* The last non-empty line of `text`, at most 300 bytes, into why. */
static void last_line(const char *text, size_t len, char *why, size_t why_len)
{
    while (len && (text[len - 1] == '\n' || text[len - 1] == '\r')) len--;
    size_t begin = len;
    while (begin && text[begin - 1] != '\n') begin--;
    const char *line = text + begin;
    size_t n = len - begin;
    const char *at = memmem(line, n, "Assertion", 9);
    if (at) { /* "file:line: func: Assertion `x' failed." -> "assertion `x' failed." */
        n -= (size_t)(at + 10 - line), line = at + 10;
        snprintf(why, why_len, "assertion %.*s", (int)(n > 300 ? 300 : n), line);
    } else {
        snprintf(why, why_len, "%.*s", (int)(n > 300 ? 300 : n), line);
    }
}

/* The child's answer, when its reply is whole. */
static int read_reply(const struct spawn_result *res, void **out, size_t *out_size, char *err, size_t err_len,
                      int *rc)
{
    struct wire_reply r;
    if (res->out_len < sizeof r) return 0;
    memcpy(&r, res->out, sizeof r);
    if (res->out_len - sizeof r != (uint64_t)r.why_len + r.size) return 0;
    const char *why = res->out + sizeof r, *data = why + r.why_len;
    if (r.rc != CLSHIM_OK) {
        if (err && err_len) snprintf(err, err_len, "%.*s", (int)r.why_len, why);
        *rc = r.rc ? r.rc : CLSHIM_EINVAL;
        return 1;
    }
    void *p = malloc(r.size ? r.size : 1);
    if (!p) {
        *rc = fail(err, err_len, CLSHIM_ENOMEM, "out of memory");
        return 1;
    }
    memcpy(p, data, r.size);
    *out = p;
    *out_size = r.size;
    *rc = CLSHIM_OK;
    return 1;
}

int glue_isolated(uint32_t work, const void *head, size_t head_len, const void *body, size_t body_len,
                  const char *what, void **out, size_t *out_size, char *err, size_t err_len)
{
    char module[PATH_MAX], tool[PATH_MAX], why[600];
    if (paths(module, tool, sizeof tool) != 0) {
        if (err && err_len)
            snprintf(err, err_len, "%s needs clshim-tool, not found at %s (CLSHIM_CAPTURE_HELPER names it)", what,
                     tool);
        return CLSHIM_EIO;
    }
    struct wire_head w = {WIRE_MAGIC, work, head_len, body_len, __atomic_load_n(&max_memory, __ATOMIC_RELAXED)};
    char *request = malloc(sizeof w + head_len);
    if (!request) return fail(err, err_len, CLSHIM_ENOMEM, "out of memory");
    memcpy(request, &w, sizeof w);
    if (head_len) memcpy(request + sizeof w, head, head_len);

    char *argv[] = {tool, "llvm-child", module, NULL};
    uint32_t limit_ms = __atomic_load_n(&timeout_ms, __ATOMIC_RELAXED);
    struct spawn_result res;
    pthread_mutex_lock(&helper_lock);
    char **env = helper_env ? copy_env(helper_env) : NULL;
    pthread_mutex_unlock(&helper_lock);
    int rc = spawn_collect(argv, env ? env : environ, request, sizeof w + head_len, body, body_len, (long)limit_ms,
                           STDERR_TAIL, SPAWN_ERR_TAIL, &res);
    free_env(env);
    free(request);
    if (rc) return fail(err, err_len, rc, rc == CLSHIM_ENOMEM ? "out of memory" : "cannot make the request's files");
    if (res.start_error) {
        if (err && err_len) snprintf(err, err_len, "cannot run %s for the %s: %s", tool, what, strerror(res.start_error));
        spawn_result_free(&res);
        return CLSHIM_EIO;
    }
    if (!res.timed_out && read_reply(&res, out, out_size, err, err_len, &rc)) {
        spawn_result_free(&res);
        return rc;
    }
    if (res.timed_out) {
        snprintf(why, sizeof why, "%s timed out after %g s; module rejected", what, limit_ms / 1000.0);
    } else {
        int n = snprintf(why, sizeof why, "%s crashed on the module", what);
        if (res.status_known && WIFSIGNALED(res.status))
            n += snprintf(why + n, sizeof why - (size_t)n, " (signal %d)", WTERMSIG(res.status));
        if (res.status_known && WIFEXITED(res.status)) n = snprintf(why, sizeof why, "%s gave up on the module", what);
        char line[320] = "";
        if (res.err) last_line(res.err, res.err_len, line, sizeof line);
        if (line[0]) snprintf(why + n, sizeof why - (size_t)n, ": %s", line);
    }
    spawn_result_free(&res);
    return fail(err, err_len, CLSHIM_EINVAL, why);
}

/* ---- the child (clshim-tool llvm-child) ---- */

static void child_say(const char *text)
{
    ssize_t n = write(2, text, strlen(text)); /* the parent reads it; nothing to do if it cannot */
    (void)n;
}

static void child_fatal_error(const char *reason)
{
    child_say("LLVM ERROR: ");
    child_say(reason);
    child_say("\n");
    _exit(70);
}

/* exit() in the child (the translator gives up that way on some modules) is
 * "gave up", whatever status it passed: registered first, this runs last. */
static void child_exit_now(void) { _exit(70); }

/* Bytes of private writable memory mapped now (VmData, what RLIMIT_DATA
 * counts); 0 when unknown. */
static uint64_t data_bytes_now(void)
{
    FILE *f = fopen("/proc/self/status", "re");
    if (!f) return 0;
    char line[256];
    uint64_t bytes = 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmData:", 7)) bytes = strtoull(line + 7, NULL, 10) * 1024;
    fclose(f);
    return bytes;
}

/* RLIMIT_DATA counts brk and private writable mappings, which include what
 * the process has already (libLLVM's data, a sanitizer's shadow), so the
 * limit is that plus the allowance. */
static void limit_memory(uint64_t allow)
{
    uint64_t now = data_bytes_now();
    struct rlimit rl;
    if (!allow || !now || getrlimit(RLIMIT_DATA, &rl) != 0) return;
    rlim_t want = now + allow < now ? RLIM_INFINITY : (rlim_t)(now + allow);
    if (rl.rlim_max != RLIM_INFINITY && want > rl.rlim_max) want = rl.rlim_max;
    rl.rlim_cur = want;
    setrlimit(RLIMIT_DATA, &rl);
}

/* All of standard input, malloc'd. */
static char *read_request(size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n == cap) {
            char *grown = realloc(buf, cap *= 2);
            if (!grown) break;
            buf = grown;
        }
        ssize_t r = read(0, buf + n, cap - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) break;
        if (r == 0) {
            *len = n;
            return buf;
        }
        n += (size_t)r;
    }
    free(buf);
    return NULL;
}

int glue_child_main(void)
{
    /* The reply goes to the original stdout; the translator's own writes to
     * stdout go nowhere. */
    int reply = dup(1);
    int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (reply < 0 || devnull < 0 || dup2(devnull, 1) < 0) return 1;
    close(devnull);
    atexit(child_exit_now);
    LLVMInstallFatalErrorHandler(child_fatal_error);
    size_t len = 0;
    char *request = read_request(&len);
    struct wire_head w;
    if (!request || len < sizeof w) _exit(2);
    memcpy(&w, request, sizeof w);
    if (w.magic != WIRE_MAGIC || len - sizeof w != w.head_len + w.body_len) _exit(2);
    limit_memory(w.max_memory);
    char why[512] = "";
    void *bytes = NULL;
    size_t size = 0;
    const char *head = request + sizeof w;
    int rc = glue_child_work(w.work, head, w.head_len, head + w.head_len, w.body_len, &bytes, &size, why,
                             sizeof why);
    if (rc != CLSHIM_OK) size = 0;
    if (rc != CLSHIM_OK && !why[0]) snprintf(why, sizeof why, "failed (%d)", rc);
    struct wire_reply r = {rc, (uint32_t)strlen(why), size};
    int ok = write_fully(reply, &r, sizeof r) == 0 && write_fully(reply, why, r.why_len) == 0 &&
             (!size || write_fully(reply, bytes, size) == 0);
    _exit(ok ? 0 : 1);
}
