/* driver_caches.c — the drivers' own caches kept inside clshim's (see
 * driver_caches.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cache/driver_caches.h"
#include "common/log.h"

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

void driver_caches_apply(const struct clshim_config *cfg)
{
    if (!cfg->driver_caches) return;
    char base[4096];
    if (driver_caches_dir(cfg, base, sizeof base) != 0) {
        log_msg(LOG_WARN, "driver caches: no cache directory; the drivers keep their own");
        return;
    }
    for (size_t i = 0; i < sizeof drivers / sizeof drivers[0]; i++) {
        const char *set = getenv(drivers[i].var);
        if (set && *set) continue; /* the user's choice stands */
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", base, drivers[i].sub);
        if (make_dirs(path) != 0) {
            log_msg(LOG_WARN, "driver caches: cannot create %s (%s); %s stays unset", path, strerror(errno),
                    drivers[i].var);
            continue;
        }
        if (setenv(drivers[i].var, path, 0) == 0) log_msg(LOG_INFO, "driver caches: %s=%s", drivers[i].var, path);
    }
}
