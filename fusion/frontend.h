/* frontend.h — OpenCL C source to SPIR bitcode, for fusing source programs.
 *
 * Fusion works on LLVM IR, but a program built from source reaches the
 * driver as text. frontend_compile_source() runs clang (CLSHIM_CLANG,
 * default clang-15) as a child process — posix_spawnp with a fixed argv,
 * never a shell — with the source on its standard input and the bitcode on
 * its standard output:
 *
 *     clang-15 -x cl -target spir64 -emit-llvm -c -O2 -cl-kernel-arg-info
 *              -Xclang -no-opaque-pointers -cl-std=CL1.2 [app options] -o - -
 *
 * Choices and why:
 *   - spir64 with typed pointers: the form PoCL 3.1 takes through
 *     clCreateProgramWithBinary, and the form the SPIR-V translator emits,
 *     so modules from both paths can be linked into one fused module.
 *   - -O2: the fuser's access analysis wants promoted registers and folded
 *     address arithmetic (it runs its own cleanup too, so -cl-opt-disable
 *     from the app still works); kernel-arg metadata survives -O2, and
 *     -cl-kernel-arg-info adds kernel_arg_name.
 *   - clang 15 includes the OpenCL builtin header by default; nothing is
 *     added for it.
 *   - -cl-std defaults to CL1.2 (what a driver assumes without -cl-std).
 * Of the application's build options only those clang understands and that
 * matter for the IR are passed on: -D and -U (joined or separate), -I
 * (joined or separate), -w, -Werror, -cl-std=, and the -cl-* options of
 * OpenCL 1.2-3.0 that clang 15 implements (math, denormals, opt-disable,
 * kernel-arg-info, uniform-work-group-size, -cl-ext=). Everything else
 * (vendor options, -cl-strict-aliasing, -g, ...) is dropped. Options are
 * split at white space; double quotes group, a backslash escapes the next
 * character. Quoted #include files resolve against the current directory,
 * as for a driver.
 */
#ifndef CLSHIM_FRONTEND_H
#define CLSHIM_FRONTEND_H

#include <stddef.h>

/* Compiles `len` bytes of OpenCL C (`source` need not be NUL-terminated)
 * with the build `options` (may be NULL) to SPIR bitcode.
 * Returns 0 with *bitcode (malloc'd, the caller frees it with free()) and
 * *size set, or:
 *   CLSHIM_EINVAL  the source does not compile (err: clang's first error
 *                  line), or the options are malformed (an unclosed quote,
 *                  -D or -I without a value), or clang wrote no bitcode;
 *   CLSHIM_EIO     clang cannot be run (err names it and the errno text), a
 *                  pipe fails, or clang ran past 120 s (it is killed);
 *   CLSHIM_ENOMEM  out of memory.
 * On failure *bitcode is NULL and *size 0. `err` (may be NULL) receives a
 * one-line reason. Thread-safe; SIGPIPE is blocked in the calling thread
 * while it feeds clang, so a clang that dies early cannot kill the app. */
int frontend_compile_source(const char *source, size_t len, const char *options, void **bitcode,
                            size_t *size, char *err, size_t err_len);

#endif
