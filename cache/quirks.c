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
};

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
