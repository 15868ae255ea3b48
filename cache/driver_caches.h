/* driver_caches.h — the drivers' own caches kept inside clshim's.
 *
 * clshim's cache holds device binaries, but on NVIDIA a binary is PTX that
 * the driver still JIT-compiles at every load (hundreds of ms for a mixed
 * program); NVIDIA keeps the result in its ComputeCache (~/.nv/ComputeCache,
 * or CUDA_CACHE_PATH), PoCL its kernels in its kcache (POCL_CACHE_DIR). A
 * CI job that restores only clshim's directory loses them. With
 * CLSHIM_DRIVER_CACHES=1, and by default (auto) where the user named the
 * cache directory (CLSHIM_CACHE_DIR: what a CI job keeps), clshim points
 * both variables into its own cache directory when libclshim.so is loaded
 * (before the driver is; in layer mode the loader may have loaded the
 * driver first), and only where the user has not set them:
 *
 *     <cache dir>/driver/nvidia   CUDA_CACHE_PATH
 *     <cache dir>/driver/pocl     POCL_CACHE_DIR
 *
 * so restoring that one directory restores all three caches, and
 * `clshim cache export/import --with-driver-caches` carries them in an
 * archive beside the export (tools/cache_cmd.c).
 */
#ifndef CLSHIM_DRIVER_CACHES_H
#define CLSHIM_DRIVER_CACHES_H

#include <stddef.h>

#include "common/config.h"

/* <cache dir>/driver into buf; 0, or -1 when no cache directory is known
 * or it does not fit. */
int driver_caches_dir(const struct clshim_config *cfg, char *buf, size_t len);

/* Under CLSHIM_DRIVER_CACHES=1, or auto with a cache directory the user
 * named, writable and private: creates the subdirectories (mode 0700) and
 * sets each unset variable (setenv: call it before other threads read the
 * environment, i.e. from the library's constructor). A directory that
 * cannot be created leaves its variable unset, with one warning (a debug
 * line under auto). Nothing else is logged here: a process that never
 * calls OpenCL (a shell the app starts) stays silent. */
void driver_caches_apply(const struct clshim_config *cfg);

/* One line naming the variables set, at the first OpenCL call: info
 * under CLSHIM_DRIVER_CACHES=1, debug under auto. */
void driver_caches_report(void);

#endif
