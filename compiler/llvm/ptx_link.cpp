// ptx_link.cpp — links only what a module calls from libclc's NVPTX library
// (glue.h: glue_link_only_needed), for the PTX route (ptx.c).
//
// The LLVM 15 C API links whole modules (LLVMLinkModules2); libclc's
// nvptx64--nvidiacl.bc defines about 9,700 functions, and linking all of them
// to throw almost all away again costs far more than the kernel's own
// compile. Linker::LinkOnlyNeeded pulls in just the definitions the module
// references, transitively. Also the context switch the C API lacks: a
// context left to itself takes the pointer mode of the first bitcode it
// reads (typed, for SPIR), after which libclc cannot be read. Every C++ exception is caught here: nothing
// unwinds into C.
#include "compiler/llvm/glue.h"

#include <exception>
#include <memory>

#include <llvm/IR/Module.h>
#include <llvm/Linker/Linker.h>
#include <llvm-c/Core.h>

#include "common/error.h"

extern "C" void glue_context_opaque_pointers(LLVMContextRef ctx)
{
    llvm::unwrap(ctx)->setOpaquePointers(true);
}

extern "C" int glue_link_only_needed(LLVMModuleRef dest, LLVMModuleRef src)
{
    try {
        std::unique_ptr<llvm::Module> owned(llvm::unwrap(src));
        return llvm::Linker::linkModules(*llvm::unwrap(dest), std::move(owned),
                                         llvm::Linker::LinkOnlyNeeded)
                   ? CLSHIM_EINVAL
                   : 0;
    } catch (...) {
        return CLSHIM_EINVAL;
    }
}
