/* quirks.c — the driver quirks table (see quirks.h). */
#include "cache/quirks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct quirk_entry {
    const char *platform;    /* substring of CL_PLATFORM_NAME */
    const char *env;         /* applies only when this variable ... */
    const char *env_value;   /* ... has this value; NULL env: always */
    unsigned quirk;
    const char *description;
    const char *test;        /* the scenario showing the bug without clshim */
};

static const struct quirk_entry table[] = {
    {"Portable Computing Language", NULL, NULL, QUIRK_LONG_KERNEL_NAME_CODEGEN,
     "PoCL aborts generating code for a kernel name of 255+ characters: such programs are not captured",
     "driver_quirks long-name-binaries"},
    {"Portable Computing Language", "POCL_KERNEL_CACHE", "0", QUIRK_STAND_ASIDE_UNCACHED,
     "PoCL with POCL_KERNEL_CACHE=0 aborts on concurrent programs made from binaries and shares program-scope "
     "variables between them: clshim does not cache on it",
     "driver_quirks uncached-binary-race, driver_quirks binary-globals"},
    {"Portable Computing Language", NULL, NULL, QUIRK_POCL_SOURCE_DIR,
     "PoCL compiles the source from its cache directory, where a quoted #include looks first: the key holds what "
     "that directory has of the main source's quoted names",
     "test_driver_quirks.sh source-dir (srcfile)"},
    {"Portable Computing Language", NULL, NULL, QUIRK_BINARY_SCRATCH,
     "PoCL reads a binary through an unchecked 256 MiB allocation and segfaults under an address-space limit "
     "that leaves less: clshim reads no binary while less than 512 MiB is left under the limit",
     "driver_quirks binary-headroom"},
};

/* The environment variables a driver reads that change what it builds
 * (read in PoCL 3.1's and 5.0's sources; each changes the generated code or
 * the build's options; test_key_driver_env.sh shows plain differs for the
 * first). PoCL hashes only the first two into its own cache; clshim keys
 * them all, with the device identity. */
static const struct {
    const char *platform;
    const char *vars[20];
} driver_env[] = {
    {"Portable Computing Language",
     {"POCL_EXTRA_BUILD_FLAGS", "POCL_WORK_GROUP_METHOD", "POCL_MAX_WORK_GROUP_SIZE",
      "POCL_FULL_REPLICATION_THRESHOLD", "POCL_WILOOPS_MAX_UNROLL_COUNT", "POCL_FORCE_PARALLEL_OUTER_LOOP",
      "POCL_WORK_GROUP_SPECIALIZATION", "POCL_BINARY_SPECIALIZE_WG", "POCL_BUILDING", "POCL_LLVM_CPU_NAME",
      "POCL_KERNELLIB_NAME", "POCL_CPU_LOCAL_MEM_SIZE", "POCL_CPU_MAX_CU_COUNT", "POCL_LLVM_ALWAYS_INLINE",
      "POCL_LLVM_MOVE_NONKERNELS", NULL}},
};

/* Applications' cache-defeating markers (quirks.h): a source that ends with
 * `before`, `digits` lowercase hex digits (the random part) and `after`.
 * `stem` is the name's fixed part (the end of `before`). */
static const struct {
    const char *app, *before, *stem, *after, *instead;
    size_t digits;
    const char *where; /* where the application writes it */
    const char *test;  /* what shows the application cannot tell */
} app_markers[] = {
    {"PyOpenCL", "\n\n__constant int pyopencl_defeat_cache_", "pyopencl_defeat_cache_", " = 0;", "PYOPENCL_NO_CACHE=1",
     32, "pyopencl/cache.py (2022.3.1): src + \"\\n\\n__constant int pyopencl_defeat_cache_%s = 0;\" % uuid4().hex",
     "integration/test_pyopencl_marker"},
};

static int lower_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

int quirk_app_marker(const char *source, size_t len, const char *options, const char *identity,
                     struct app_marker *m, char *why, size_t why_len)
{
    for (unsigned r = 0; source && r < sizeof app_markers / sizeof *app_markers; r++) {
        size_t bl = strlen(app_markers[r].before), al = strlen(app_markers[r].after), dl = app_markers[r].digits;
        if (len < bl + dl + al) continue;
        const char *at = source + len - (bl + dl + al), *digits = at + bl;
        if (memcmp(at, app_markers[r].before, bl) != 0 || memcmp(digits + dl, app_markers[r].after, al) != 0) continue;
        size_t d = 0;
        while (d < dl && lower_hex(digits[d])) d++;
        if (d < dl) continue;
        const char *stem = app_markers[r].stem;
        size_t sl = strlen(stem);
        *m = (struct app_marker){app_markers[r].app, stem, app_markers[r].instead, (size_t)(digits - source), dl, r};
        /* The name used, or made a macro, anywhere else: renaming it
         * could change more than its spelling. */
        const char *where = memmem(source, len, stem, sl) != digits - sl ? "elsewhere in the source"
                            : options && strstr(options, stem)          ? "in the build options"
                            : identity && strstr(identity, stem)        ? "in the driver's environment"
                                                                        : NULL;
        if (!where) return 1;
        if (why_len) snprintf(why, why_len, "its name's stem %s occurs %s", stem, where);
        return -1;
    }
    return 0;
}

int quirk_app_marker_named(const struct app_marker *m, const void *bytes, size_t len)
{
    return bytes && memmem(bytes, len, m->stem, strlen(m->stem)) != NULL;
}

void quirk_app_marker_neutral(const struct app_marker *m, char *text) { memset(text + m->at, '0', m->len); }

void quirk_app_marker_restore(const struct app_marker *m, const char *own, char *text, size_t len)
{
    size_t sl = strlen(m->stem);
    for (char *p = text, *end = text + len; (p = memmem(p, (size_t)(end - p), m->stem, sl)); p += sl) {
        char *digits = p + sl;
        size_t zeros = 0;
        while (zeros < m->len && digits + zeros < end && digits[zeros] == '0') zeros++;
        if (zeros == m->len) memcpy(digits, own + m->at, m->len);
    }
}

size_t quirk_driver_env(const char *platform_name, char *out, size_t out_len)
{
    size_t o = 0;
    if (out_len) out[0] = 0;
    for (size_t i = 0; platform_name && i < sizeof driver_env / sizeof *driver_env; i++) {
        if (!strstr(platform_name, driver_env[i].platform)) continue;
        for (const char *const *v = driver_env[i].vars; *v; v++) {
            const char *value = getenv(*v);
            if (!value) continue;
            int n = snprintf(out + o, out_len - o, "driver.env.%s=%.1000s\n", *v, value);
            if (n < 0 || (size_t)n >= out_len - o) return (size_t)-1;
            o += (size_t)n;
        }
    }
    return o;
}

unsigned quirks_for(const char *platform_name, const char *driver_version)
{
    (void)driver_version; /* measured on PoCL 3.1; no entry is bound to versions until a fixed one is measured */
    unsigned bits = 0;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        const struct quirk_entry *q = &table[i];
        if (!platform_name || !strstr(platform_name, q->platform)) continue;
        if (q->env) {
            const char *v = getenv(q->env);
            if (!v || strcmp(v, q->env_value)) continue;
        }
        bits |= q->quirk;
    }
    return bits;
}

int quirk_source_dir(unsigned quirks, char *out, size_t out_len)
{
    if (!(quirks & QUIRK_POCL_SOURCE_DIR)) return -1;
    const char *pocl = getenv("POCL_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n;
    if (pocl && *pocl) n = snprintf(out, out_len, "%s", pocl);
    else if (xdg && *xdg) n = snprintf(out, out_len, "%s/pocl/kcache", xdg);
    else if (home && *home) n = snprintf(out, out_len, "%s/.cache/pocl/kcache", home);
    else return -1;
    return n > 0 && (size_t)n < out_len ? 0 : -1;
}

const char *quirk_description(unsigned quirk)
{
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (table[i].quirk == quirk) return table[i].description;
    return "unknown driver quirk";
}
