/* quirks.c — the driver quirks table (see quirks.h). */
#include "cache/quirks.h"

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

const char *quirk_description(unsigned quirk)
{
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (table[i].quirk == quirk) return table[i].description;
    return "unknown driver quirk";
}
