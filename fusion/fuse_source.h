/* fuse_source.h — route (b) of fusion: the fused kernel as generated
 * OpenCL C, for drivers that take neither SPIR nor SPIR-V (NVIDIA).
 *
 * The IR route (compiler/llvm_api.h `fuse`) hands the driver a fused SPIR
 * module. A driver without cl_khr_spir cannot load it, so for programs
 * built from source the fused kernel is written in OpenCL C instead: the
 * program's own source, unchanged, followed by
 *
 *     __kernel void clshim_f0(<the fused parameters>)
 *     {
 *         offset(clshim_f0_0, clshim_f0_1, clshim_f0_2);
 *         if (get_global_id(0) < 1024) scale(clshim_f0_1, clshim_f0_3, clshim_f0_4);
 *         ...
 *     }
 *
 * which calls the original kernels as functions, in enqueue order (OpenCL C
 * allows a kernel to call a kernel), and the driver compiles it like any
 * source. Each work-item runs the same code as in the separate launches,
 * compiled by the same compiler with the same options, so results are
 * bit-identical by construction. Everything else still comes from
 * clshim's IR of the source (frontend.h): `fuse` decides whether the
 * sequence may be fused at all (barrier analysis, ranges, local sizes) and
 * gives the parameter mapping and the fused ND-range; `kernel_info` gives
 * each parameter's type, address space and qualifiers — the driver's
 * argument info is never used.
 *
 * Refused (CLSHIM_EUNSUPPORTED, one-line reason):
 *   - a kernel that declares __local variables at kernel scope (calling it
 *     from another kernel is implementation-defined in OpenCL C);
 *   - a kernel run over a smaller range than the fused one (so its call is
 *     guarded) whose program calls get_global_size, get_num_groups or
 *     get_global_linear_id, or, with no local size given, a local-size,
 *     local-id or group-id function: the IR route remaps those, generated
 *     source cannot;
 *   - arguments the analysis put in one class whose parameters differ in
 *     type or address space (a scalar equal in bytes to a buffer handle).
 * Not carried over: `internal` (every intermediate is stored) and merged
 * grid-stride loops, both optimisations only.
 *
 * Kernels of several programs (fs_fuse_parts, fuse_join.c): the programs'
 * sources are joined into one text, each preceded by
 *     #define NAME clshim_j<M>_<part>_NAME
 * for every name it declares at file scope (kernels, helper functions,
 * program-scope variables and constants, typedefs, struct/union/enum tags,
 * enumerators), followed by #undef of those and of every macro it defines,
 * and a `disable` pragma for every extension it enables.
 * So each program compiles as alone: the names it spells are its own or
 * built-ins, never another program's; a program-scope __constant of program
 * A is not program B's (the analysis refuses any access to a program-scope
 * __global variable, whose state lives in the original program). The
 * generated kernel calls each kernel by its renamed name, and parameter
 * types naming a renamed type are renamed alike. M is the smallest number
 * whose prefix no source spells. Refused (fs_join, fs_join_options):
 * #include, #undef of a macro the program does not define, a #pragma other
 * than OPENCL EXTENSION ...: enable / unroll, a renamed name tested in a
 * conditional directive or also a macro, a kernel whose name the source
 * does not declare as such, and build options that differ in anything but
 * -cl-kernel-arg-info, -w, -g and -I (which change no code of a program
 * that includes nothing); the joined program is built with the first
 * program's options. A name the scanner misses or takes wrongly can only
 * make the joined program fail to build, which refuses the fusion.
 *
 * Names: the fused kernel is clshim_f<N> and its parameters clshim_f<N>_<j>,
 * with the smallest N whose name "clshim_f<N>" occurs nowhere in the source
 * text (so neither a kernel, a function nor a macro of the program can
 * clash). reqd_work_group_size (equal in all kernels, or `fuse` refuses) is
 * carried over. The text depends only on the source, the request and the
 * analysis, which the fused program's cache key covers.
 */
#ifndef CLSHIM_FUSE_SOURCE_H
#define CLSHIM_FUSE_SOURCE_H

#include <stddef.h>
#include <stdint.h>

#include "compiler/llvm_api.h"

/* The generated program. */
struct fs_program {
    char *text;       /* NUL-terminated OpenCL C (malloc'd) */
    size_t len;
    char name[32];    /* the fused kernel's name */
    uint8_t *is_buf;  /* [res->num_params]: 1 for __global/__constant pointer parameters (malloc'd) */
};

/* Writes the fused program for `req` (kernels all of one program whose
 * source is `source`, `len` bytes), given `fuse`'s result `res` for the
 * same request and each kernel's `info` (in request order). Returns 0 with
 * *out filled (free with fs_program_free), CLSHIM_EUNSUPPORTED with the
 * reason in `why`, or CLSHIM_ENOMEM. */
int fs_generate(const char *source, size_t len, const struct fuse_request *req, const struct fuse_result *res,
                const struct kernel_info *info, struct fs_program *out, char *why, size_t why_len);

/* One program of a join: its source and build options. */
struct fs_part {
    const char *source;
    size_t len;
    const char *options;
};

/* Several programs' sources as one text (see above). */
struct fs_names;
struct fs_join {
    char *text; /* NUL-terminated (malloc'd) */
    size_t len;
    uint32_t nparts;
    char prefix[24];        /* "clshim_j<M>_" */
    struct fs_names *names; /* per part: the names renamed */
};

/* Joins `n` programs. 0 with *out set (free with fs_join_free),
 * CLSHIM_EUNSUPPORTED with the reason in `why`, or CLSHIM_ENOMEM. */
int fs_join(const struct fs_part *parts, uint32_t n, struct fs_join *out, char *why, size_t why_len);
void fs_join_free(struct fs_join *j);

/* 1 with `name` of part `part` as the joined text spells it in `out`, 0
 * when the part does not rename it. */
int fs_join_name(const struct fs_join *j, uint32_t part, const char *name, char *out, size_t len);

/* Renames the identifiers of a parameter type (kernel_arg_type, `len`
 * bytes of room) as part `part` of the join spells them; -1 if too long. */
int fs_join_type(const struct fs_join *j, uint32_t part, char *type, size_t len);

/* 0 when programs built with options `a` and `b` may be joined (the same
 * options apart from those that change no code), else CLSHIM_EUNSUPPORTED
 * with the first difference in `why` (or CLSHIM_ENOMEM). */
int fs_join_options(const char *a, const char *b, char *why, size_t why_len);

void fs_program_free(struct fs_program *p);

/* Route (b) from IR: runs `fuse` on `req` (its modules: clshim's IR of
 * `source`, as frontend_compile_source makes it; `internal` is ignored),
 * reads kernel_info of each kernel, and generates. Returns 0 with *out and
 * *res filled — res->bitcode is already freed and NULL; free
 * res->param_kernel and param_index with api->free — or an error with the
 * reason in `why` (then nothing is to be freed). */
int fs_fuse(const struct clshim_llvm_api *api, const char *source, size_t len, const struct fuse_request *req,
            struct fuse_result *res, struct fs_program *out, char *why, size_t why_len);

/* fs_fuse over kernels of `nparts` programs: kernel i of `req` comes from
 * parts[kpart[i]] (kpart may be NULL with one part). With one part, what
 * fs_fuse makes; with several, their join (fs_join). */
int fs_fuse_parts(const struct clshim_llvm_api *api, const struct fs_part *parts, uint32_t nparts,
                  const uint32_t *kpart, const struct fuse_request *req, struct fuse_result *res,
                  struct fs_program *out, char *why, size_t why_len);

#endif
