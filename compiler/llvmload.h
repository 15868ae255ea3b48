/* llvmload.h — loading libclshim-llvm.so lazily.
 *
 * llvm_api() dlopens the module on first call (CLSHIM_LLVM_LIB, else
 * libclshim-llvm.so beside the loaded libclshim.so, else beside the running
 * tool) and returns its function table, or NULL when it cannot be loaded or
 * its version differs; the reason is logged once. Later calls return the same
 * answer without retrying. Thread-safe.
 */
#ifndef CLSHIM_LLVMLOAD_H
#define CLSHIM_LLVMLOAD_H

#include "compiler/llvm_api.h"

const struct clshim_llvm_api *llvm_api(void);

/* Nonzero once the module has been loaded in this process (tests check that
 * programs without IL or fusion never load it). */
int llvm_api_loaded(void);

#endif
