/* real.c — resolving the real OpenCL entry points: RTLD_NEXT (preload), the
 * real ICD loader by absolute path (loader library) or the layer's target
 * dispatch table; and deciding which clshim copy intercepts (real.h). */
#include "interpose/real.h"

#include <CL/cl_icd.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/config.h"
#include "common/log.h"

struct cl_api real_table;
int real_resolved;
static pthread_once_t resolve_once = PTHREAD_ONCE_INIT;
static enum real_mode mode = REAL_PRELOAD;
static int defers;
static const char *defer_reason = "";

/* Defined only in the loader library's generated forwarders
 * ($(BUILD)/loader/forward.c): their presence is what makes this copy the
 * loader library. Weak, so libclshim.so links without them. */
extern const char *const loader_forward_build_path __attribute__((weak, visibility("hidden")));

int real_is_loader_library(void) { return &loader_forward_build_path != NULL; }

/* ---- loader mode: the real ICD loader by absolute path ------------------ */

static void *loader_handle;
static pthread_once_t loader_once = PTHREAD_ONCE_INIT;

/* Nonzero when `path` is the file this code was loaded from. */
static int is_self(const char *path)
{
    Dl_info info;
    struct stat self, other;
    if (!dladdr((void *)is_self, &info) || !info.dli_fname) return 0;
    if (stat(info.dli_fname, &self) || stat(path, &other)) return 0;
    return self.st_dev == other.st_dev && self.st_ino == other.st_ino;
}

static void *try_loader(const char *path)
{
    if (!path || path[0] != '/' || is_self(path)) return NULL;
    struct stat st;
    if (stat(path, &st)) return NULL;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        log_msg(LOG_DEBUG, "cannot load %s as the real OpenCL loader: %s", path, dlerror());
        return NULL;
    }
    /* Another build's clshim loader library would forward back into clshim. */
    if (dlsym(h, "clshim_loader_marker")) {
        log_msg(LOG_WARN, "%s is a clshim loader library, not the real OpenCL loader; skipped", path);
        dlclose(h);
        return NULL;
    }
    log_msg(LOG_DEBUG, "loader mode: real OpenCL loader %s", path);
    return h;
}

static void open_loader(void)
{
    static const char *const dirs[] = {
#if defined(__x86_64__)
        "/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu",
#elif defined(__aarch64__)
        "/usr/lib/aarch64-linux-gnu", "/lib/aarch64-linux-gnu",
#endif
        "/usr/lib64", "/usr/lib", "/usr/local/lib",
    };
    const char *knob = config_get()->real_loader;
    if (knob && *knob) {
        loader_handle = try_loader(knob);
        if (!loader_handle)
            log_msg(LOG_WARN, "CLSHIM_REAL_LOADER=%s is not a loadable OpenCL loader; trying the defaults", knob);
    }
    if (!loader_handle && real_is_loader_library()) loader_handle = try_loader(loader_forward_build_path);
    for (size_t i = 0; !loader_handle && i < sizeof dirs / sizeof *dirs; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/libOpenCL.so.1", dirs[i]);
        loader_handle = try_loader(path);
    }
    if (!loader_handle)
        log_msg(LOG_ERROR, "loader mode: no real OpenCL loader found (set CLSHIM_REAL_LOADER); "
                           "OpenCL calls fail as with no platform");
}

void *real_loader_handle(void)
{
    pthread_once(&loader_once, open_loader);
    return loader_handle;
}

/* ---- filling the table --------------------------------------------------- */

static void fill_from_handle(void *handle)
{
#define REAL_RESOLVE(name) real_table.name = handle ? (__typeof__(name) *)dlsym(handle, #name) : NULL;
    CLAPI_FUNCTIONS(REAL_RESOLVE)
#undef REAL_RESOLVE
}

static void fill_from_dispatch(const struct _cl_icd_dispatch *d, unsigned n)
{
    /* A slot past the loader's table size is absent, not garbage. */
#define REAL_FROM_DISPATCH(name)                                                                   \
    real_table.name = offsetof(struct _cl_icd_dispatch, name) / sizeof(void *) < n                 \
                          ? (__typeof__(name) *)d->name                                            \
                          : NULL;
    CLAPI_FUNCTIONS(REAL_FROM_DISPATCH)
#undef REAL_FROM_DISPATCH
}

/* Nonzero when this copy is the layer (initialised by the ICD loader). */
static int take_layer_table(void)
{
    unsigned n = 0;
    const struct _cl_icd_dispatch *d = layer_target(&n);
    if (!d) return 0;
    fill_from_dispatch(d, n);
    mode = REAL_LAYER;
    return 1;
}

/* Is another clshim copy below this one? A layer is found by asking the ICD
 * loader, which initialises its layers on that first call — and may thereby
 * make this very copy the layer, which then intercepts. That question comes
 * first: when this copy is both the preload and the layer, deferring to a
 * loader library in between would leave nobody intercepting (the loader
 * library itself defers to the layer). The loader library is found by its
 * marker symbol. */
static void find_copy_below(void)
{
    const char *layers = getenv("OPENCL_LAYERS");
    if (layers && *layers && real_table.clGetExtensionFunctionAddress) {
        void *marker = real_table.clGetExtensionFunctionAddress(REAL_LAYER_MARKER);
        if (take_layer_table()) return;
        if (marker) {
            defers = 1;
            defer_reason = "a clshim layer";
            return;
        }
    }
    if (mode == REAL_PRELOAD && dlsym(RTLD_NEXT, "clshim_loader_marker")) {
        defers = 1;
        defer_reason = "clshim's loader library";
    }
}

static void doctor_report(void)
{
    if (defers)
        log_msg(LOG_ERROR, "doctor: %s mode reached clshim; forwarding to %s below, which intercepts",
                real_mode_name(mode), defer_reason);
    else
        log_msg(LOG_ERROR, "doctor: %s mode reached clshim; intercepting", real_mode_name(mode));
}

static void resolve_all(void)
{
    if (!take_layer_table()) {
        if (real_is_loader_library()) {
            mode = REAL_LOADER;
            fill_from_handle(real_loader_handle());
        } else {
            /* RTLD_NEXT finds the ICD loader because libclshim.so has DT_NEEDED on
             * libOpenCL.so.1, even when the app opened OpenCL with RTLD_LOCAL. */
            mode = REAL_PRELOAD;
            fill_from_handle(RTLD_NEXT);
        }
        find_copy_below();
    }
    log_msg(LOG_DEBUG, "entry mode %s%s%s", real_mode_name(mode), defers ? ", forwarding to " : "",
            defers ? defer_reason : "");
    /* Asked for by the user (clshim doctor), so printed at any log level. */
    if (config_get()->doctor) atexit(doctor_report);
    __atomic_store_n(&real_resolved, 1, __ATOMIC_RELEASE);
}

void real_resolve(void)
{
    pthread_once(&resolve_once, resolve_all);
}

enum real_mode real_mode(void) { return mode; }

int real_defers(void) { return defers; }

const char *real_mode_name(enum real_mode m)
{
    switch (m) {
    case REAL_PRELOAD: return "preload";
    case REAL_LOADER: return "loader";
    case REAL_LAYER: return "layer";
    }
    return "?";
}

#define MISSING_MAX 64
static const char *missing_logged[MISSING_MAX];
static pthread_mutex_t missing_lock = PTHREAD_MUTEX_INITIALIZER;

void real_missing(const char *name)
{
    pthread_mutex_lock(&missing_lock);
    int i;
    for (i = 0; i < MISSING_MAX && missing_logged[i]; i++)
        if (!strcmp(missing_logged[i], name)) break;
    int first = i < MISSING_MAX && !missing_logged[i];
    if (first) missing_logged[i] = name;
    pthread_mutex_unlock(&missing_lock);
    if (first) log_msg(LOG_WARN, "the OpenCL loader has no %s; the call fails as it would without clshim", name);
}
