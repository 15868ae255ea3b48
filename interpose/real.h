/* real.h — the real driver's entry points, resolved once.
 *
 * real_api() returns the table of the next definitions of every OpenCL entry
 * point (dlsym(RTLD_NEXT, ...)), resolved lazily on the first intercepted
 * call, once, thread-safely. Loading libclshim.so does nothing: PoCL runs
 * /usr/bin/ld as a child with LD_PRELOAD inherited, so the shim must stay
 * silent and free until a process makes its first OpenCL call.
 * A symbol the loader lacks stays NULL; real_missing() logs it once by name.
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

#endif
