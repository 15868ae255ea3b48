/* llvm_child.c — `clshim-tool llvm-child MODULE`: one step of LLVM work
 * (SPIR-V translation, PTX lowering) for a process that must not run it
 * itself (compiler/llvm/isolate.c starts it). It loads MODULE, the parent's
 * own libclshim-llvm.so, and hands it stdin and stdout. Not for users. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "compiler/llvm_api.h"
#include "tools/commands.h"

int llvm_child_main(int argc, char **argv)
{
    if (argc != 2 || argv[1][0] != '/') {
        fprintf(stderr, "usage: clshim-tool llvm-child /path/to/libclshim-llvm.so (started by clshim)\n");
        return 2;
    }
    void *module = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!module) {
        fprintf(stderr, "clshim: cannot load %s: %s\n", argv[1], dlerror());
        return 2;
    }
    clshim_llvm_api_fn get = (clshim_llvm_api_fn)dlsym(module, "clshim_llvm_api");
    const struct clshim_llvm_api *api = get ? get() : NULL;
    if (!api || api->version != CLSHIM_LLVM_API_VERSION) {
        fprintf(stderr, "clshim: %s is not the module this clshim-tool was built with (API %u, want %u)\n", argv[1],
                api ? (unsigned)api->version : 0u, (unsigned)CLSHIM_LLVM_API_VERSION);
        return 2;
    }
    return api->child_main();
}
