/* driver_caches.c — the drivers' own caches kept inside clshim's (see
 * driver_caches.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/driver_caches.h"
#include "common/log.h"

/* What driver_caches_apply set, for driver_caches_report: written by the
 * constructor before any other thread runs, read once later. */
static char applied[9000];
static size_t applied_len;
static int applied_asked; /* CLSHIM_DRIVER_CACHES=1, not auto */

static const struct {
    const char *var;
    const char *sub;
} drivers[] = {
    {"CUDA_CACHE_PATH", "nvidia"},
    {"POCL_CACHE_DIR", "pocl"},
};

int driver_caches_dir(const struct clshim_config *cfg, char *buf, size_t len)
{
    char dir[4096];
    if (config_cache_dir(cfg, dir, sizeof dir) != 0) return -1;
    int n = snprintf(buf, len, "%s/driver", dir);
    return n > 0 && (size_t)n < len ? 0 : -1;
}

/* mkdir -p with mode 0700 for the parts it creates. */
static int make_dirs(char *path)
{
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p) continue;
        char c = *p;
        *p = 0;
        int bad = mkdir(path, 0700) != 0 && errno != EEXIST;
        *p = c;
        if (bad) return -1;
        if (!c) return 0;
    }
}

/* Whether every directory from `dir` up to / that exists is a real
 * directory (no symbolic link), owned by root or this user, and not
 * writable by group or others unless sticky; and `dir` itself, if it
 * exists, this user's and not writable by others. The store applies the
 * same rule before it uses or creates a cache directory
 * (cache/store_open.c): a directory another user could swap would let them
 * choose the code the drivers load from their caches. */
static int safe_ancestry(const char *dir)
{
    char path[4096];
    if (dir[0] != '/' || snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) return 0;
    int first = 1;
    for (;;) {
        struct stat st;
        if (lstat(path, &st) == 0) {
            if (!S_ISDIR(st.st_mode)) return 0;
            if (first ? st.st_uid != geteuid() || (st.st_mode & 022)
                      : (st.st_uid != 0 && st.st_uid != geteuid()) ||
                            ((st.st_mode & 022) && !(st.st_mode & S_ISVTX)))
                return 0;
        } else if (errno != ENOENT) {
            return 0;
        }
        first = 0;
        char *slash = strrchr(path, '/');
        if (slash == path) {
            if (!path[1]) return 1;
            path[1] = 0;
        } else {
            *slash = 0;
        }
    }
}

/* Whether CLSHIM_DRIVER_CACHES=auto keeps the drivers' caches: only in a
 * cache directory the user named (a CI job names the directory it keeps;
 * with the default one the drivers' default caches persist beside it in the
 * same home), that this run may write. */
static int auto_applies(const struct clshim_config *cfg)
{
    return cfg->cache_dir && *cfg->cache_dir && cfg->cache && !cfg->cache_readonly;
}

void driver_caches_apply(const struct clshim_config *cfg)
{
    const char *mode = cfg->driver_caches ? cfg->driver_caches : "auto";
    if (!strcmp(mode, "0")) return;
    int automatic = strcmp(mode, "1") != 0;
    applied_asked = !automatic;
    if (automatic && !auto_applies(cfg)) return;
    /* Under auto a failure is not the user's request failing: quiet. */
    int level = automatic ? LOG_DEBUG : LOG_WARN;
    char base[4096], dir[4096];
    if (driver_caches_dir(cfg, base, sizeof base) != 0 || config_cache_dir(cfg, dir, sizeof dir) != 0) {
        log_msg(level, "driver caches: no cache directory; the drivers keep their own");
        return;
    }
    if (!safe_ancestry(dir)) {
        log_msg(level, "driver caches: %s, or a directory on its way, is not private (or is a symbolic "
                       "link); the drivers keep their own caches", dir);
        return;
    }
    for (size_t i = 0; i < sizeof drivers / sizeof drivers[0]; i++) {
        const char *set = getenv(drivers[i].var);
        if (set && *set) continue; /* the user's choice stands */
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", base, drivers[i].sub);
        if (make_dirs(path) != 0) {
            log_msg(level, "driver caches: cannot create %s (%s); %s stays unset", path, strerror(errno),
                    drivers[i].var);
            continue;
        }
        if (setenv(drivers[i].var, path, 0) == 0 && applied_len < sizeof applied) {
            int n = snprintf(applied + applied_len, sizeof applied - applied_len, "%s%s=%s",
                             applied_len ? " " : "", drivers[i].var, path);
            if (n > 0) applied_len += (size_t)n;
        }
    }
}

void driver_caches_report(void)
{
    /* Asked for (1): info. By default (auto): debug, or every run at info
     * would print it. */
    if (applied_len) log_msg(applied_asked ? LOG_INFO : LOG_DEBUG, "driver caches: %s", applied);
}
