/* llvmload.c — loads libclshim-llvm.so on first need (see llvmload.h).
 *
 * The path is CLSHIM_LLVM_LIB when set, else libclshim-llvm.so in the
 * directory of the object this file is linked into (libclshim.so, or the
 * tool or test executable that links the core archive), found with dladdr.
 * The module is opened RTLD_NOW | RTLD_LOCAL, so its LLVM symbols never
 * reach the application's scope, and is never closed. One attempt per
 * process (pthread_once); a failure is logged once and remembered.
 */
#include "compiler/llvmload.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/childenv.h"
#include "common/config.h"
#include "common/log.h"

static pthread_once_t llvm_once = PTHREAD_ONCE_INIT;
static const struct clshim_llvm_api *llvm_table;
static int llvm_loaded;

/* The default path: libclshim-llvm.so beside the object holding this code. */
static int default_path(char *buf, size_t len)
{
    Dl_info info;
    if (!dladdr((void *)default_path, &info) || !info.dli_fname) return -1;
    const char *name = info.dli_fname;
    char exe[4096];
    if (!strchr(name, '/')) {
        /* The executable itself, run by bare name (the capture helper's
         * `clshim-tool capture-one`): where it is. */
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (n <= 0) return -1;
        exe[n] = 0;
        name = exe;
    }
    const char *slash = strrchr(name, '/');
    int n = snprintf(buf, len, "%.*s/libclshim-llvm.so", (int)(slash - name), name);
    return n > 0 && (size_t)n < len ? 0 : -1;
}

/* What is off without the library: what is new. Translations and fused
 * kernels the cache holds load without it (a GPU machine with no LLVM). */
#define LLVM_OFF "translating SPIR-V and building fused kernels are off (what the cache holds of either still loads)"

static void llvm_load(void)
{
    char path[PATH_MAX];
    const char *lib = config_get()->llvm_lib;
    if (lib && *lib) {
        snprintf(path, sizeof path, "%s", lib);
    } else if (default_path(path, sizeof path) != 0) {
        LOG_ONCE(LOG_WARN, "cannot load libclshim-llvm.so (cannot find the directory of libclshim.so); " LLVM_OFF);
        return;
    }
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        const char *why = dlerror();
        LOG_ONCE(LOG_WARN, "cannot load %s (%s); " LLVM_OFF, path, why ? why : "unknown error");
        return;
    }
    clshim_llvm_api_fn get = (clshim_llvm_api_fn)dlsym(handle, "clshim_llvm_api");
    const struct clshim_llvm_api *api = get ? get() : NULL;
    if (!api) {
        LOG_ONCE(LOG_WARN, "cannot load %s (no clshim_llvm_api); " LLVM_OFF, path);
    } else if (api->version != CLSHIM_LLVM_API_VERSION) {
        LOG_ONCE(LOG_WARN, "cannot load %s (API version %u, clshim needs %u); " LLVM_OFF, path,
                 (unsigned)api->version, (unsigned)CLSHIM_LLVM_API_VERSION);
    } else {
        const struct clshim_config *cfg = config_get();
        struct llvm_limits limits = {
            .translate_timeout_ms = cfg->translate_timeout > INT32_MAX / 1000
                                        ? INT32_MAX
                                        : (uint32_t)cfg->translate_timeout * 1000,
            .translate_max_memory = cfg->translate_max_memory,
        };
        api->set_limits(&limits);
        /* The translator's child: the knob's clshim-tool, else the module's
         * neighbour, started without clshim in its environment. */
        char **env = child_environ();
        api->set_helper(cfg->capture_helper, env);
        free_environ(env);
        __atomic_store_n(&llvm_table, api, __ATOMIC_RELEASE);
        __atomic_store_n(&llvm_loaded, 1, __ATOMIC_RELEASE);
        return;
    }
    dlclose(handle);
}

const struct clshim_llvm_api *llvm_api(void)
{
    pthread_once(&llvm_once, llvm_load);
    return __atomic_load_n(&llvm_table, __ATOMIC_ACQUIRE);
}

int llvm_api_loaded(void)
{
    return __atomic_load_n(&llvm_loaded, __ATOMIC_ACQUIRE);
}
