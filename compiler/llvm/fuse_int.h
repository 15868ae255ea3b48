/* fuse_int.h — state shared by the fuser's files (private to libclshim-llvm.so).
 *
 * fuse.c drives a fusion: it loads and links the modules, flattens the
 * kernels, asks fuse_scan.c whether the sequence needs a barrier and
 * whether each body may run under a range guard, then builds the fused
 * kernel. See fuse.c's header comment for the whole pipeline and
 * docs/fusion-analysis.md for the analysis.
 */
#ifndef CLSHIM_FUSE_INT_H
#define CLSHIM_FUSE_INT_H

#include <llvm-c/Core.h>
#include <llvm-c/Target.h>
#include <stddef.h>
#include <stdint.h>

#include "compiler/llvm_api.h"

#define FUSE_MAX_KERNELS 64
#define FUSE_MAX_PARAMS 256

/* SPIR address spaces (the same numbers appear in kernel_arg_addr_space). */
enum { AS_PRIVATE = 0, AS_GLOBAL = 1, AS_CONSTANT = 2, AS_LOCAL = 3, AS_GENERIC = 4 };

/* How one kernel uses one of its global/constant pointer parameters. */
struct param_use {
    int reads, writes;  /* some load / some store through it */
    int unknown;        /* some use that could not be classified (counts as both) */
    int nonpointwise;   /* an access not at the kernel's get_global_id element */
    char sig[128];      /* pointwise accesses: the first index's form, e.g. "g0.t32.s64" */
    unsigned dim;       /* ... its work-item dimension */
    unsigned trunc_bits;/* ... the narrowest trunc on the way (0: none) */
    uint64_t elem_size; /* ... the element size */
    int strided;        /* ... some index is a grid-stride loop's (position + k * global size) */
    int from_groups;    /* ... some position is local_size * group_id + local_id (no global offset) */
    unsigned offset_param; /* ... 1 + the scalar parameter added to the pointer in bytes first; 0: none */
    char why[200];      /* the first unknown or non-pointwise use, in words */
};

/* Work-item functions and synchronization a kernel calls. */
struct kernel_calls {
    int barrier;        /* barrier(), work_group_ and sub_group_ functions, async copies */
    int local_query;    /* get_local_id/size, get_group_id, get_enqueued_local_size,
                           get_local_linear_id */
    int num_groups;     /* get_num_groups */
    int global_size;    /* get_global_size */
    int linear_id;      /* get_global_linear_id */
    int printf;         /* printf: fusion refused (fuse_scan_kernel) */
    char unknown[200];  /* a memory access the analysis cannot attribute; "" if none */
};

/* One kernel of the sequence. */
struct fuse_occ {
    const struct fuse_kernel *k;
    LLVMValueRef fn;            /* the kernel in the linked module */
    char name[256];             /* its name in the linked module */
    unsigned nparams;
    char **param_name;          /* [nparams] for messages: kernel_arg_name, else #j */
    struct param_use *use;      /* [nparams] */
    struct kernel_calls calls;
    int guarded;                /* its global size is smaller in some dimension */
};

/* Scans a flattened kernel (no calls to defined functions left): fills
 * occ->use and occ->calls. Returns 0, or CLSHIM_EUNSUPPORTED with `reason`
 * for a construct fusion never handles (indirect calls, calls left after
 * inlining, printf: occ->calls.printf set). */
int fuse_scan_kernel(struct fuse_occ *occ, char *reason, size_t reason_len);

/* Decides whether the sequence needs a barrier between bodies: for every
 * arg class written by one kernel and accessed by another, every access
 * must be pointwise at the same get_global_id index, injective over the
 * fused range. Returns 1 and a "needs a barrier: ..." reason, or 0. */
int fuse_needs_barrier(const struct fuse_occ *occ, size_t n, const size_t fused_gs[3],
                       const size_t offset[3], char *reason, size_t reason_len);

/* Merges consecutive grid-stride loops of the fused kernel fn into one
 * where that is provably equivalent (fuse_loops.c); only for a sequence
 * that needs no barrier. Returns the number of loops merged away. */
unsigned fuse_merge_grid_loops(LLVMValueRef fn);

/* Local-memory internalisation (fuse_local.c, whose header gives the rules). */
struct local_launch {
    unsigned work_dim;
    size_t global_size;  /* dimension 0 of the fused range */
    size_t local_size;   /* 0: the launch fixes none */
    int offset;          /* some global offset is not 0 */
};

/* The `internal` option (fuse_internal.c, whose header gives the rules). */
struct internal_candidate {
    char label[160];    /* "'tmp' of 'scale'": the first writer's parameter */
    uint32_t cls;       /* its arg class */
    int refused;        /* a rule keeps it in memory (reason in kept) */
    int local;          /* a barrier separates the bodies: try local memory */
};

struct internal_plan {
    unsigned count;
    unsigned param[FUSE_MAX_PARAMS];   /* the candidates' fused parameters */
    struct internal_candidate cand[FUSE_MAX_PARAMS];
    char kept[512];     /* "LABEL: reason; ..." for the classes kept in memory */
    char done[512];     /* "LABEL, ..." for the classes kept in registers */
    char done_local[512]; /* "LABEL, ..." for the classes kept in local memory */
    unsigned local_done;  /* how many */
    struct local_launch launch; /* set by the caller before prepare */
};

/* Picks the candidates of the built, inlined fused kernel (map: (kernel,
 * parameter) -> fused parameter; barrier: bodies are separated by one;
 * only: the internal= list, NULL for every candidate), applies the rules,
 * and marks the parameters of those that pass noalias. The caller then runs
 * GVN and calls fuse_internal_finish. Returns 0, or CLSHIM_EUNSUPPORTED with
 * `reason` when `only` names a kernel or parameter the sequence lacks. */
int fuse_internal_prepare(LLVMValueRef fused, const struct fuse_occ *occ, size_t n,
                          const unsigned (*map)[FUSE_MAX_PARAMS], int barrier, const char *only,
                          struct internal_plan *ip, char *reason, size_t reason_len);

/* Deletes the stores of every candidate that no load and no escaping use
 * is left of; the others stay, their reason appended to ip->kept. Returns
 * the number internalised. */
unsigned fuse_internal_finish(LLVMValueRef fused, struct internal_plan *ip);


/* Local-memory internalisation: keeps the buffer behind the fused kernel's
 * parameter `param` in a
 * __local array where the rules prove one work-group produces and consumes
 * each element (budget: bytes of arrays added so far, updated). Returns 1
 * when done, or 0 with `why` and the kernel unchanged. */
int fuse_local_internalise(LLVMValueRef fused, LLVMValueRef param, const struct local_launch *l, uint64_t *budget,
                           char *why, size_t why_len);

/* Strips integer casts off e (sext/zext/trunc and instcombine's forms of
 * them, fuse_scan.c), keeping the narrowest truncation in *trunc_bits. */
LLVMValueRef fuse_strip_int_casts(LLVMValueRef e, unsigned *trunc_bits);

/* The enum attribute kind named `name` ("readnone", "byval", ...). */
unsigned fuse_attr_kind(const char *name);

/* The base name of an Itanium-mangled OpenCL builtin ("_Z13get_global_idj"
 * -> "get_global_id", length in *len); a plain name is returned whole. */
const char *fuse_builtin_name(const char *mangled, size_t *len);

/* Nonzero when name (len bytes) equals word. */
int fuse_name_is(const char *name, size_t len, const char *word);

#endif
