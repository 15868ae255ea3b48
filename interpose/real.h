/* real.h — the real driver's entry points, resolved once, from one of three
 * backends (docs/modes.md).
 *
 * real_api() returns the table of the functions one step closer to the
 * driver than clshim, resolved lazily on the first intercepted call, once,
 * thread-safely. Where they come from depends on how this copy of clshim was
 * reached — the entry mode — and nothing above this module needs to know:
 *
 *   preload  libclshim.so in LD_PRELOAD: dlsym(RTLD_NEXT, ...), i.e. the ICD
 *            loader (or clshim's loader library, see below).
 *   loader   clshim's own libOpenCL.so.1 (built as $(BUILD)/loader/), found
 *            first on LD_LIBRARY_PATH: the real ICD loader, dlopen'ed by its
 *            absolute path (real_loader_handle()).
 *   layer    libclshim.so in OPENCL_LAYERS: the target dispatch table the ICD
 *            loader handed to clInitLayer (layer.c).
 *
 * Intercept once. Modes can be combined (a preload and a layer, a preload and
 * the loader library, ...), possibly as separate copies of clshim in one
 * process. Calls always travel preload -> loader library -> ICD loader ->
 * layer -> driver, and every call from the app reaches the lowest clshim
 * copy present; so the lowest copy intercepts and every copy above it
 * forwards unchanged (real_defers()). A copy finds what lies below it at
 * resolution time: the loader library exports clshim_loader_marker, and a
 * clshim layer answers clGetExtensionFunctionAddress(REAL_LAYER_MARKER).
 * When the same copy is both the preload and the layer (one file), it runs
 * its logic on both paths but always calls the target dispatch table, so a
 * call passes it once whichever way it came.
 *
 * Loading libclshim.so does nothing: PoCL runs /usr/bin/ld as a child with
 * LD_PRELOAD inherited, so the shim must stay silent and free until a
 * process makes its first OpenCL call. A symbol the next step lacks stays
 * NULL; real_missing() logs it once by name.
 */
#ifndef CLSHIM_REAL_H
#define CLSHIM_REAL_H

#include "common/clapi.h"

extern struct cl_api real_table;
extern int real_resolved; /* set (release) once real_table is filled */

void real_resolve(void);

/* The table, resolving it on first use; a relaxed-cost check afterwards. */
static inline const struct cl_api *real_api(void)
{
    if (__builtin_expect(!__atomic_load_n(&real_resolved, __ATOMIC_ACQUIRE), 0)) real_resolve();
    return &real_table;
}

/* Logs once that the loader lacks `name`. */
void real_missing(const char *name);

enum real_mode { REAL_PRELOAD = 1, REAL_LOADER = 2, REAL_LAYER = 3 };

/* After real_resolve(): the entry mode that filled real_table. */
enum real_mode real_mode(void);
/* "preload", "loader" or "layer". */
const char *real_mode_name(enum real_mode mode);

/* After real_resolve(): nonzero when another clshim copy closer to the driver
 * intercepts this process's calls, so this copy must forward every call
 * unchanged (the entry layer then runs as with CLSHIM_DISABLE=1). */
int real_defers(void);

/* The name a clshim layer answers in clGetExtensionFunctionAddress (with a
 * non-NULL pointer), so copies above it can tell that it is there. */
#define REAL_LAYER_MARKER "clshimLayerMarkerCLSHIM"

/* Loader mode: the real ICD loader, dlopen'ed (RTLD_NOW | RTLD_LOCAL) by
 * absolute path — CLSHIM_REAL_LOADER, else the path found at build time, else
 * the usual library directories — never this library itself. NULL when none
 * loads (logged once); every forwarded call then fails as a missing symbol. */
void *real_loader_handle(void);

/* Loader mode: nonzero when this copy is clshim's libOpenCL.so.1. */
int real_is_loader_library(void);

/* layer.c: the dispatch table one step closer to the driver, or NULL while
 * this copy has not been initialised as a layer. `num_entries` receives the
 * number of valid slots. */
struct _cl_icd_dispatch;
const struct _cl_icd_dispatch *layer_target(unsigned *num_entries);

#endif
