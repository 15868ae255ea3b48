/* llvm_api.h — the contract between clshim and libclshim-llvm.so.
 *
 * Everything that needs LLVM (SPIR-V translation, IR fusion) lives in a
 * separate shared object, build/libclshim-llvm.so, which links libLLVM-15 and
 * libLLVMSPIRVLib. libclshim.so never links LLVM: compiler/llvmload.c dlopens
 * the module on first need and looks up one symbol,
 *     const struct clshim_llvm_api *clshim_llvm_api(void);
 * so programs that never use IL or fusion never load LLVM. A missing or
 * broken module is reported once ("clshim: ...") and every caller falls back
 * to the real driver path.
 *
 * Every function is thread-safe (each call uses its own LLVMContext) and
 * returns 0 or a clshim_err (common/error.h); on failure `err` (when not
 * NULL) receives a one-line reason. Buffers returned through out-parameters
 * are malloc'd; free them with api->free().
 */
#ifndef CLSHIM_LLVM_API_H
#define CLSHIM_LLVM_API_H

#include <stddef.h>
#include <stdint.h>

#define CLSHIM_LLVM_API_VERSION 9

/* A specialization constant: SpecId and its value's bytes (1, 2, 4 or 8). */
struct llvm_spec_const {
    uint32_t id;
    uint32_t size;
    uint64_t value; /* the low `size` bytes, little endian */
};

/* Bounds on one translation. The translator runs in a child process,
 * `clshim-tool llvm-child` (it asserts, loops or grows without bound on some
 * corrupted modules); past either bound the child is killed and the module
 * rejected. PTX lowering (route (a)) runs there too. */
struct llvm_limits {
    uint32_t translate_timeout_ms; /* wall clock; 0: no bound */
    uint64_t translate_max_memory; /* bytes the child may allocate; 0: no bound */
};

/* One kernel of a sequence to fuse. */
struct fuse_kernel {
    const void *module_bc;  /* SPIR bitcode (spir64) of the program holding the kernel */
    size_t module_size;     /* kernels of one program pass the same pointer */
    const char *name;       /* kernel function name */
    uint32_t work_dim;      /* 1..3 */
    size_t global_size[3];  /* unused dimensions are 1 */
    size_t local_size[3];   /* all 0: the app passed no local size */
    size_t global_offset[3];
    const uint32_t *arg_class; /* per parameter: an id; parameters with equal
                                  ids (across all kernels) receive identical
                                  arguments (the same cl_mem, or the same scalar
                                  bytes) and become one fused parameter.
                                  Distinct ids never alias. */
    uint32_t num_args;
};

/* A scalar argument baked into the fused kernel (the `const` option): every
 * parameter of class `arg_class` that takes a value (not a pointer, not a
 * byval struct) becomes this constant, its bytes reinterpreted as the
 * parameter's type (little endian; a 3-component vector takes the first 3
 * elements' bytes), and is no parameter of the fused kernel. */
struct fuse_const {
    uint32_t arg_class;
    uint32_t size;              /* bytes of the argument as the app set it */
    const unsigned char *bytes;
};

struct fuse_request {
    const struct fuse_kernel *kernels;
    size_t num_kernels;     /* 2 or more, in enqueue order */
    const char *fused_name; /* name of the fused kernel */
    int force_barrier;      /* the plan forces fusion where a barrier is needed:
                               a work-group barrier (global fence) is inserted
                               between bodies; the plan author promises that
                               every dependency stays inside a work-group */
    int internal;           /* the plan's `internal` promise: every arg class
                               written by one kernel and read by a later one
                               is not needed after the sequence. Such a class
                               is kept in registers (never stored) where the
                               rules of fuse_internal.c hold; else it is
                               stored as without the option and
                               result->internal_kept says why */
    const struct fuse_const *consts; /* the `const` option: classes baked in */
    uint32_t num_consts;
    const char *internal_args; /* with `internal`: "KERNEL.ARG,..." (plan.h's
                               internal=) restricts it to the buffers bound
                               to the named parameters; NULL: every such
                               class. A kernel or parameter it names that
                               the sequence lacks refuses the fusion. */
};

struct fuse_result {
    void *bitcode;          /* SPIR bitcode (spir64) with the kernel fused_name */
    size_t bitcode_size;
    uint32_t num_params;    /* parameters of the fused kernel */
    uint32_t *param_kernel; /* [num_params]: which kernel supplies the value ... */
    uint32_t *param_index;  /* ... and which of its parameters */
    uint32_t work_dim;      /* the fused ND-range (1 for kernels of different work_dim, remapped) */
    size_t global_size[3];
    size_t local_size[3];   /* all 0 when none was given */
    size_t global_offset[3];
    int barrier_inserted;   /* 1 when force_barrier made a barrier necessary */
    uint32_t loops_merged;  /* grid-stride loops of later bodies run inside an
                               earlier body's loop (fuse_loops.c) */
    uint32_t internalised;  /* arg classes kept in registers (`internal`) */
    uint32_t consts_baked;  /* parameters of the kernels replaced by constants */
    char internal_kept[512];/* `internal`: the classes stored after all and
                               why, one line ("" when none) */
    char internal_done[512];/* `internal`: the classes kept in registers,
                               "'t1' of 'k1', ..." */
    uint32_t internalised_local; /* of `internalised`, those kept in __local
                               arrays (compiler/llvm/fuse_local.c) */
    char internal_local[512];/* their labels, as internal_done */
    char reason[512];       /* why fusion was refused, or why a barrier was needed */
    int permanent;          /* the refusal follows from the kernels alone, whatever
                               their ranges and arguments (one calls printf):
                               the sequence never fuses */
};

/* What generated OpenCL C (fused kernels of route (b), fusion/fuse_source.h)
 * needs to know of one kernel, read from clshim's own IR of its source (the
 * kernel_arg_* metadata clang writes with -cl-kernel-arg-info), never from
 * the driver. */
#define KI_CONST 1u    /* kernel_arg_type_qual: const (of the pointee for pointers) */
#define KI_VOLATILE 2u
#define KI_RESTRICT 4u
struct kernel_param_info {
    uint32_t addr_space; /* of the pointee: 1 __global, 2 __constant, 3 __local; 0 a value */
    uint32_t qual;       /* KI_* bits */
    char type[128];      /* kernel_arg_type as clang spells it: "float*", "uint4", "mystruct" */
    char name[64];       /* kernel_arg_name ("" when absent) */
};
/* Work-item functions a kernel calls, itself or through the functions it
 * calls (all bits when it calls through a pointer), KI_CALLS_* bits. */
#define KI_CALLS_GLOBAL_SIZE 1u  /* get_global_size */
#define KI_CALLS_NUM_GROUPS 2u   /* get_num_groups */
#define KI_CALLS_LINEAR 4u       /* get_global_linear_id */
#define KI_CALLS_LOCAL 8u        /* get_local_id/size, get_group_id, get_enqueued_local_size,
                                    get_local_linear_id */
struct kernel_info {
    uint32_t num_params;
    struct kernel_param_info *params; /* [num_params]; free with api->free */
    uint32_t reqd_wg[3];              /* reqd_work_group_size, all 0 when none */
    uint32_t calls;                   /* KI_CALLS_* bits */
    int kernel_scope_locals;          /* the module declares __local variables in a kernel's scope */
};

/* Route (a): a SPIR module (spir64: the SPIR-V translator's output, or a fused
 * module) as PTX for NVIDIA's OpenCL driver (compiler/llvm/ptx.c says how).
 * CLSHIM_PTX_ROUTE_VERSION changes whenever the same module may give other
 * PTX: it belongs in the key of anything cached from this route. */
#define CLSHIM_PTX_ROUTE_VERSION 1
struct ptx_request {
    const void *bitcode;   /* SPIR bitcode */
    size_t size;
    uint32_t sm;           /* the device's compute capability as major*10+minor
                              (90: sm_90); 0 or newer than LLVM knows: its newest */
    int fast_relaxed_math; /* the build had -cl-fast-relaxed-math */
    int denorms_are_zero;  /* the build had -cl-denorms-are-zero */
    int allow_unmatched_builtins; /* build even when the module calls built-ins
                              whose results differ from NVIDIA's own compile
                              (CLSHIM_PTX_BUILTINS=vendor-differs-ok) */
    const char *libclc_path; /* NULL: Debian's /usr/lib/clc/nvptx64--nvidiacl.bc */
    const char *libdevice_path; /* the CUDA toolkit's nvvm/libdevice/libdevice.10.bc,
                              whose math functions are NVIDIA's; NULL: none
                              (those built-ins then come from libclc and differ) */
};
struct ptx_result {
    char *ptx;              /* NUL-terminated PTX text (api->free) */
    size_t ptx_len;         /* without the NUL */
    uint32_t sm;            /* the sm_XX the PTX is for */
    uint32_t unmatched_count;  /* built-ins called whose results differ from NVIDIA's */
    char unmatched[256];    /* their mangled names, ", "-separated (cut when long) */
    char reason[512];       /* why PTX was refused */
};

struct clshim_llvm_api {
    uint32_t version; /* CLSHIM_LLVM_API_VERSION */

    /* Sets the bounds of every later translation (call once, after loading;
     * until then: 60 s, no memory bound). */
    void (*set_limits)(const struct llvm_limits *limits);

    /* The clshim-tool the child steps run (NULL: the one beside the module,
     * or one level up) and the environment it gets (NULL: environ); both
     * copied. Call after loading, before the first translation. */
    void (*set_helper)(const char *tool, char *const *env);

    /* Serves one child step in this process: reads the request on stdin,
     * writes the reply on stdout, and ends the process. Only `clshim-tool
     * llvm-child MODULE` calls it. */
    int (*child_main)(void);

    /* Checks a SPIR-V module (magic, version, the translator can read it) and
     * translates it to SPIR 1.2 bitcode for spir64 with OpenCL 1.2 builtin
     * names, applying the specialization constants. CLSHIM_EINVAL: not a
     * module the translator accepts (reason in err). */
    int (*spirv_to_spir)(const void *spirv, size_t size, const struct llvm_spec_const *consts,
                         size_t num_consts, void **bitcode, size_t *bitcode_size, char *err,
                         size_t err_len);

    /* SPIR bitcode -> SPIR-V (for devices that take IL). */
    int (*spir_to_spirv)(const void *bitcode, size_t size, void **spirv, size_t *spirv_size,
                         char *err, size_t err_len);

    /* Fuses the request's kernels into one. CLSHIM_EUNSUPPORTED when fusion
     * is refused (needs a barrier and not forced, different local sizes or
     * offsets, barriers in a guarded body, printf, unsupported construct):
     * the reason is in result->reason (result->permanent set when no other
     * occurrence of these kernels can fuse), and nothing must be freed. On success free
     * result->bitcode, param_kernel and param_index with api->free(). */
    int (*fuse)(const struct fuse_request *req, struct fuse_result *result);

    void (*free)(void *p);

    /* The parameters, attributes and work-item calls of kernel `name` in a
     * SPIR module made by fusion/frontend.h. CLSHIM_EINVAL: no such kernel,
     * unreadable bitcode, or argument metadata missing (reason in err). */
    int (*kernel_info)(const void *bitcode, size_t size, const char *name, struct kernel_info *out, char *err,
                       size_t err_len);

    /* SPIR bitcode as LLVM assembly text (NUL-terminated, api->free). */
    int (*bitcode_to_text)(const void *bitcode, size_t size, char **text, char *err, size_t err_len);

    /* SPIR bitcode -> PTX (route (a)). 0 with result->ptx set, or
     * CLSHIM_EINVAL (not a readable SPIR module) / CLSHIM_EUNSUPPORTED
     * (refused: a built-in not matched and not allowed, something libclc
     * lacks, a construct NVPTX rejects), the reason in result->reason. */
    int (*spir_to_ptx)(const struct ptx_request *req, struct ptx_result *result);
};

typedef const struct clshim_llvm_api *(*clshim_llvm_api_fn)(void);

#endif
