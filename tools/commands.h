/* commands.h — the subcommands of clshim-tool (the `clshim` wrapper runs it
 * for `clshim config`, `clshim cache ...`, `clshim fuse ...`, `clshim ptx ...`). Each takes the arguments after
 * its own name (argv[0] is the subcommand) and returns the exit status. */
#ifndef CLSHIM_COMMANDS_H
#define CLSHIM_COMMANDS_H

int config_cmd_main(int argc, char **argv);
int cache_cmd_main(int argc, char **argv);
int cache_warm_main(const char *dir, int argc, char **argv); /* tools/warm_cmd.c: `clshim cache warm` */
int profile_cmd_main(int argc, char **argv);   /* tools/profile_cmd.c: `clshim run --profile`'s report */
int fuse_cmd_main(int argc, char **argv); /* tools/fuse_cmd.c */
int ptx_cmd_main(int argc, char **argv);  /* tools/ptx_cmd.c */

/* Route (a)'s lowering as `clshim ptx` and `clshim fuse --emit=ptx` use it
 * (tools/ptx_cmd.c). */
#include <stdint.h>
#include <stddef.h>
#include "compiler/llvm_api.h"
struct ptx_cmd_opts {
    uint32_t sm;         /* 0: LLVM's newest */
    const char *options; /* the build options (their -cl-fast-relaxed-math, -cl-denorms-are-zero) */
    int allow_unmatched; /* --builtins=vendor-differs-ok */
    const char *out_path;/* NULL: standard output */
    const char *libdevice; /* libdevice.10.bc, NULL: none */
};
/* $CUDA_HOME (or /usr/local/cuda)/nvvm/libdevice/libdevice.10.bc into
 * path when it is readable, else NULL. */
const char *ptx_find_libdevice(char *path, size_t len);
/* SPIR bitcode to PTX, written out; errors on stderr prefixed with `tag`.
 * The exit status (0, or 1 when refused or unwritable). */
int ptx_print(const struct clshim_llvm_api *api, const void *bc, size_t size, const struct ptx_cmd_opts *o,
              const char *tag);
int capture_helper_main(int argc, char **argv); /* tools/capture_helper.c: started by the shim */
int capture_one_main(int argc, char **argv);    /* tools/capture_helper.c: one capture, started by the helper */
int llvm_child_main(int argc, char **argv);     /* tools/llvm_child.c: an isolated LLVM step, started by clshim */

#endif
