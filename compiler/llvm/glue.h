/* glue.h — what the LLVM-side C files share: the SPIR-V translator wrapper
 * (spirv_glue.cpp, the only C++ file) and the fuser (fuse.c).
 *
 * Private to libclshim-llvm.so; the rest of clshim sees only
 * compiler/llvm_api.h. Every function returns 0 or a clshim_err and writes a
 * one-line reason into err (when not NULL) on failure; out buffers are
 * malloc'd and owned by the caller.
 */
#ifndef CLSHIM_LLVM_GLUE_H
#define CLSHIM_LLVM_GLUE_H

#include <stddef.h>
#include <stdint.h>

#include <llvm-c/Types.h>

#include "compiler/llvm_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* SPIR-V bytes -> SPIR 1.2 bitcode (spir64, OpenCL 1.2 builtin names, the
 * translator's `llvm-spirv -r` defaults, plus kernel_arg_name metadata).
 * The header and the instruction stream are checked before the translator
 * sees the bytes. CLSHIM_EINVAL: malformed or rejected module; CLSHIM_ENOMEM. */
int glue_spirv_to_bitcode(const void *spirv, size_t size, const struct llvm_spec_const *consts,
                          size_t num_consts, void **bitcode, size_t *bitcode_size, char *err,
                          size_t err_len);

/* SPIR bitcode -> SPIR-V. CLSHIM_EINVAL: unreadable bitcode, or the
 * translator rejects the module; CLSHIM_ENOMEM. */
int glue_bitcode_to_spirv(const void *bitcode, size_t size, void **spirv, size_t *spirv_size,
                          char *err, size_t err_len);

/* Bounds of an isolated step's child process (llvm_limits in llvm_api.h):
 * wall-clock timeout (0: none) and bytes it may allocate (0: no bound). */
void glue_set_translate_limits(uint32_t timeout_ms, uint64_t max_memory);

/* The clshim-tool an isolated step runs (NULL: the one beside this module)
 * and its environment (NULL: environ); both copied (isolate.c). */
void glue_set_helper(const char *tool, char *const *env);

/* Makes a fresh context use typed pointers (LLVM 15 defaults to opaque ones,
 * and would upgrade typed bitcode on reading; the translator's writer and
 * PoCL 3.1's passes want typed pointers). Call before anything else uses
 * the context. The LLVM 15 C API has no such call. */
void glue_context_typed_pointers(LLVMContextRef ctx);

/* The fuser (fuse.c); see llvm_api.h. */
int fuse_kernels(const struct fuse_request *req, struct fuse_result *result);

/* kernel_info and bitcode_to_text (kinfo.c); see llvm_api.h. */
int kinfo_kernel(const void *bitcode, size_t size, const char *name, struct kernel_info *out, char *err,
                 size_t err_len);
int kinfo_text(const void *bitcode, size_t size, char **text, char *err, size_t err_len);

/* Route (a), SPIR -> PTX (ptx.c); see llvm_api.h. Runs in this process:
 * api.c runs it in a child through glue_isolated (GLUE_TO_PTX). */
int ptx_from_spir(const struct ptx_request *req, struct ptx_result *result);

/* The steps that run in a child process (isolate.c). */
enum glue_work {
    GLUE_TO_BITCODE = 1, /* head: llvm_spec_const[], body: SPIR-V */
    GLUE_TO_SPIRV = 2,   /* head: empty, body: SPIR bitcode */
    GLUE_TO_PTX = 3,     /* head and body: api.c's request */
};

/* Runs step `work` on `head` and `body` in `clshim-tool llvm-child` with the
 * bounds of glue_set_translate_limits: a crash, an LLVM fatal error, a hang
 * or runaway memory there is CLSHIM_EINVAL here, `what` naming the step in
 * the reason. The step's output comes back malloc'd in *out. */
int glue_isolated(uint32_t work, const void *head, size_t head_len, const void *body, size_t body_len,
                  const char *what, void **out, size_t *out_size, char *err, size_t err_len);

/* The child's side: reads a request on stdin, runs it, writes the reply on
 * stdout and ends the process (clshim-tool llvm-child; nothing else). */
int glue_child_main(void);

/* Runs one step in this process (the child): spirv_glue.cpp, where every
 * C++ exception becomes an error. */
int glue_child_work(uint32_t work, const void *head, size_t head_len, const void *body, size_t body_len, void **out,
                    size_t *out_size, char *err, size_t err_len);

/* GLUE_TO_PTX's work (api.c). */
int ptx_child_work(const void *head, size_t head_len, const void *body, size_t body_len, void **out,
                   size_t *out_size, char *err, size_t err_len);

/* Route (a)'s built-ins (ptx_builtins.c), per floating-point mode: */
#define PTX_MODE_PLAIN 1u /* no math options */
#define PTX_MODE_DAZ 2u   /* -cl-denorms-are-zero */
#define PTX_MODE_FAST 4u  /* -cl-fast-relaxed-math */
/* Whether built-in `mangled` gives NVIDIA's own results bit for bit in this
 * mode (measured by tests/compat/nvidia_builtins.sh), `with_libdevice`: when
 * the libdevice mapping is in use. */
int ptx_builtin_matched(const char *mangled, unsigned mode, int with_libdevice);
/* The built-ins route (a) defines itself in this mode, as LLVM IR text
 * (malloc'd, *len set; NULL when out of memory). */
char *ptx_own_builtins_ir(unsigned mode, size_t *len);
/* A growing NUL-terminated text (ptx_builtins.c); start from {0}, free s. */
struct ptx_text {
    char *s;
    size_t len, cap;
};
/* Appends n bytes: 0 or CLSHIM_ENOMEM. */
int ptx_text_add(struct ptx_text *t, const char *s, size_t n);
/* libdevice's function for built-in `mangled` in this mode, or NULL. */
const char *ptx_libdevice_name(const char *mangled, unsigned mode);

/* Links into dest the definitions of src that dest needs, transitively
 * (Linker::LinkOnlyNeeded); src is consumed. CLSHIM_EINVAL on a link error
 * (reported to dest's context diagnostic handler). ptx_link.cpp. */
int glue_link_only_needed(LLVMModuleRef dest, LLVMModuleRef src);

/* Makes a fresh context use opaque pointers whatever bitcode it reads first
 * (typed bitcode is then upgraded on reading). ptx_link.cpp. */
void glue_context_opaque_pointers(LLVMContextRef ctx);

#ifdef __cplusplus
}
#endif

#endif
