/* entry.h — the interposer's state, shared by the entry-point files.
 *
 * entry_ready() is the check every wrapper makes first: after the first
 * OpenCL call of the process it is one acquire load. entry_init() resolves
 * the real functions, reads the configuration and starts the enabled
 * modules. When the library is merely loaded, one constructor sets the
 * drivers' cache variables where CLSHIM_DRIVER_CACHES applies (and makes
 * those directories: cache/driver_caches.h); nothing else happens.
 */
#ifndef CLSHIM_INTERPOSE_ENTRY_H
#define CLSHIM_INTERPOSE_ENTRY_H

#include "interpose/real.h"

#define SHIM_EXPORT __attribute__((visibility("default")))

extern int entry_initialized;
extern int entry_enabled; /* 0 with CLSHIM_DISABLE=1: pure pass-through */

void entry_init(void);

static inline const struct cl_api *entry_real(void)
{
    if (__builtin_expect(!__atomic_load_n(&entry_initialized, __ATOMIC_ACQUIRE), 0)) entry_init();
    return &real_table;
}

/* A missing real symbol: log once, and fail as a loader without it would. */
cl_int entry_missing(const char *name);
void *entry_missing_ptr(const char *name, cl_int *errcode_ret);

#endif
