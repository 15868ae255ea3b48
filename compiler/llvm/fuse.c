/* fuse.c — fuses a sequence of OpenCL kernels into one (llvm_api.h `fuse`).
 *
 * Pipeline, all through the LLVM C API in one private LLVMContext (whose
 * diagnostic handler records errors; LLVM's default one would exit):
 *   1. Check the request: 2..64 kernels, one work_dim, one global offset,
 *      local sizes all absent or all equal and dividing every global size.
 *      The fused range is the largest global size per dimension. Kernels of
 *      different work_dim (no local sizes, no offsets, one number of
 *      work-items) are fused over one 1-D range instead: after step 3 each
 *      multi-dimensional body's work-item functions are remapped to the
 *      fused global id (remap_linear), before the analysis.
 *   2. Load each distinct module once (a kernel that appears twice gets a
 *      second copy of its module), verify it, and link the copies into the
 *      first, renaming defined external symbols that clash first (so two
 *      programs with a helper `f` each keep both).
 *   3. Flatten: drop noinline/optnone, mark every non-kernel function
 *      alwaysinline and internal, strip debug info, run
 *      always-inline + sroa/early-cse/instcombine/simplifycfg.
 *   4. Analyse each kernel (fuse_scan.c): the barrier decision (see
 *      docs/fusion-analysis.md) and the work-item functions it calls.
 *      Refused (CLSHIM_EUNSUPPORTED, reason in result->reason):
 *      a needed barrier without force_barrier; a needed barrier with
 *      guarded bodies; barrier()/work-group functions in a guarded body;
 *      local-size queries or get_num_groups in a guarded body without a
 *      local size; get_global_linear_id in a guarded multi-dimensional
 *      body; images, samplers, pipes; differing reqd_work_group_size.
 *   5. Remap guarded bodies: get_global_size(d) -> GS_i(d),
 *      get_num_groups(d) -> GS_i(d) / LS(d).
 *   6. Build: each kernel's blocks move into an internal "body" function
 *      (same signature; byval parameters stay byval so bodies never see each
 *      other's struct copies); a new spir_kernel `fused_name` takes the
 *      union of the parameters (equal arg_class = one parameter, except
 *      __local pointers, which are never merged; with the `const` option a
 *      scalar of a baked class is no parameter: the bodies get its value as
 *      a constant, which step 7 folds), calls the bodies in order,
 *      each under `if (get_global_id(d) < offset(d) + GS_i(d) ...)` when its
 *      range is smaller, with barrier(CLK_GLOBAL_MEM_FENCE) between bodies
 *      when forced. kernel_arg_* metadata is concatenated from the originals
 *      (kernel_arg_addr_space is derived from the parameter types, which in
 *      SPIR carry the same numbers). The original kernels are deleted.
 *   7. Inline the bodies, clean up, drop dead globals; the kernels' own
 *      __local variables are renamed after the fused kernel (PoCL keeps one
 *      per work-group only when it is named "KERNEL.VAR").
 *   8. Unless a barrier was forced, merge consecutive grid-stride loops
 *      (fuse_loops.c) and clean up again.
 *   9. With `internal`, keep intermediates in registers (fuse_internal.c);
 *      verify, write bitcode.
 *
 * The barrier analysis (fuse_scan.c, docs/fusion-analysis.md): for every
 * arg class written by one kernel and accessed by another, every access in
 * every kernel must be a plain load/store at the work-item's position
 * (get_global_id(d), or local_size * group_id + local_id) or at a
 * grid-stride loop's index (position + k * get_global_size(d)), under
 * integer casts, after an optional byte offset by a scalar parameter of one
 * class for all kernels, with one d and one element size for the class,
 * injective over the fused range (other dimensions of size 1, truncations
 * wide enough), and equal global offsets. Then each work-item touches only
 * its own elements and no barrier is needed. Anything else — other indices
 * and loops, atomics, vload/vstore, the pointer escaping into a call, memory
 * or a phi, pointers of unknown origin, writes to program-scope __global
 * variables — "needs a barrier". Limits: gid+c, other strides and 2-D
 * linearised indices are refused though often safe; distinct arg classes are
 * trusted not to alias.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <llvm-c/Analysis.h>
#include <llvm-c/BitReader.h>
#include <llvm-c/BitWriter.h>
#include <llvm-c/Core.h>
#include <llvm-c/DebugInfo.h>
#include <llvm-c/Linker.h>
#include <llvm-c/Target.h>
#include <llvm-c/Transforms/PassBuilder.h>

#include "common/error.h"
#include "compiler/fuse_ranges.h"
#include "compiler/llvm/fuse_int.h"
#include "compiler/llvm/glue.h"

enum { CC_SPIR_FUNC = 75, CC_SPIR_KERNEL = 76 };
enum { CLK_GLOBAL_MEM_FENCE = 2 };

static pthread_mutex_t fuse_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *const md_kinds[] = {"kernel_arg_access_qual", "kernel_arg_type",
                                       "kernel_arg_base_type", "kernel_arg_type_qual",
                                       "kernel_arg_name"};
#define NUM_MD_KINDS (sizeof md_kinds / sizeof md_kinds[0])

struct module_copy {
    const void *bc;
    size_t size;
    LLVMModuleRef mod; /* NULL once linked into the first copy */
};

struct fuser {
    const struct fuse_request *req;
    struct fuse_result *res;
    LLVMContextRef ctx;
    LLVMModuleRef mod;
    char diag[256];
    size_t n;
    struct fuse_occ occ[FUSE_MAX_KERNELS];
    size_t copy_of[FUSE_MAX_KERNELS]; /* occurrence -> module copy */
    struct module_copy copies[FUSE_MAX_KERNELS];
    size_t ncopies;
    size_t fused_gs[3];
    int has_local;
    int linear;          /* the kernels' work dimensions differ: the fused range is
                            1-D over their common number of work-items (remap_linear) */
    LLVMMetadataRef *md[FUSE_MAX_KERNELS][NUM_MD_KINDS]; /* [nparams] or NULL */
    LLVMMetadataRef reqd_wg;
    LLVMValueRef body[FUSE_MAX_KERNELS];
};

static int refuse(struct fuser *f, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int refuse(struct fuser *f, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->res->reason, sizeof f->res->reason, fmt, ap);
    va_end(ap);
    return code;
}

static void on_diagnostic(LLVMDiagnosticInfoRef di, void *opaque)
{
    struct fuser *f = opaque;
    if (LLVMGetDiagInfoSeverity(di) != LLVMDSError || f->diag[0]) return;
    char *text = LLVMGetDiagInfoDescription(di);
    snprintf(f->diag, sizeof f->diag, "%s", text ? text : "error");
    LLVMDisposeMessage(text);
}

static const char *value_name(LLVMValueRef v)
{
    size_t len;
    const char *name = LLVMGetValueName2(v, &len);
    return name ? name : "";
}

/* ---- 1. the request ---------------------------------------------------- */

static int check_request(struct fuser *f)
{
    const struct fuse_request *req = f->req;
    if (!req->kernels || req->num_kernels < 2 || !req->fused_name || !req->fused_name[0])
        return refuse(f, CLSHIM_EINVAL, "fuse: need 2 or more kernels and a fused name");
    if (req->num_kernels > FUSE_MAX_KERNELS)
        return refuse(f, CLSHIM_EUNSUPPORTED, "fuse: more than %d kernels", FUSE_MAX_KERNELS);
    for (size_t i = 0; i < req->num_kernels; i++) {
        const struct fuse_kernel *k = &req->kernels[i];
        if (!k->module_bc || !k->module_size || !k->name || (k->num_args && !k->arg_class))
            return refuse(f, CLSHIM_EINVAL, "fuse: kernel %zu lacks its module, name or classes", i);
        if (k->num_args > FUSE_MAX_PARAMS)
            return refuse(f, CLSHIM_EUNSUPPORTED, "kernel '%s' has too many arguments", k->name);
        if (k->work_dim < 1 || k->work_dim > 3)
            return refuse(f, CLSHIM_EINVAL, "kernel '%s' has work_dim %u", k->name, k->work_dim);
    }
    /* The batcher checked the same before compiling anything (flaunch.c). */
    struct fuse_ranges r;
    int rc = fuse_ranges_check(req->kernels, req->num_kernels, 1, &r, f->res->reason, sizeof f->res->reason);
    if (rc) return rc;
    memcpy(f->fused_gs, r.fused_gs, sizeof f->fused_gs);
    f->has_local = r.has_local;
    f->linear = r.linear;
    return 0;
}

/* ---- 2. loading and linking -------------------------------------------- */

static int load_copy(struct fuser *f, const struct fuse_kernel *k, LLVMModuleRef *out)
{
    LLVMMemoryBufferRef buf = LLVMCreateMemoryBufferWithMemoryRange(k->module_bc, k->module_size,
                                                                    "clshim-fuse", 0);
    LLVMModuleRef mod = NULL;
    f->diag[0] = '\0';
    LLVMBool bad = LLVMParseBitcodeInContext2(f->ctx, buf, &mod);
    LLVMDisposeMemoryBuffer(buf);
    if (bad || !mod)
        return refuse(f, CLSHIM_EINVAL, "module of kernel '%s' is not readable bitcode: %s",
                      k->name, f->diag[0] ? f->diag : "parse error");
    char *msg = NULL;
    if (LLVMVerifyModule(mod, LLVMReturnStatusAction, &msg)) {
        refuse(f, CLSHIM_EINVAL, "module of kernel '%s' is broken: %.200s", k->name,
               msg ? msg : "");
        LLVMDisposeMessage(msg);
        LLVMDisposeModule(mod);
        return CLSHIM_EINVAL;
    }
    LLVMDisposeMessage(msg);
    const char *triple = LLVMGetTarget(mod);
    if (strncmp(triple, "spir64", 6) != 0) {
        refuse(f, CLSHIM_EUNSUPPORTED, "module of kernel '%s' is for '%s', not spir64", k->name,
               triple);
        LLVMDisposeModule(mod);
        return CLSHIM_EUNSUPPORTED;
    }
    *out = mod;
    return 0;
}

/* Assigns each kernel a module copy: a copy is shared by kernels of the same
 * program, and a kernel appearing again gets a fresh copy. */
static int load_modules(struct fuser *f)
{
    for (size_t i = 0; i < f->n; i++) {
        const struct fuse_kernel *k = &f->req->kernels[i];
        size_t c;
        for (c = 0; c < f->ncopies; c++) {
            if (f->copies[c].bc != k->module_bc || f->copies[c].size != k->module_size) continue;
            size_t j;
            for (j = 0; j < i; j++)
                if (f->copy_of[j] == c && strcmp(f->req->kernels[j].name, k->name) == 0) break;
            if (j == i) break; /* this copy does not yet serve a kernel of that name */
        }
        if (c == f->ncopies) {
            int rc = load_copy(f, k, &f->copies[c].mod);
            if (rc) return rc;
            f->copies[c].bc = k->module_bc;
            f->copies[c].size = k->module_size;
            f->ncopies++;
        }
        f->copy_of[i] = c;
        LLVMValueRef fn = LLVMGetNamedFunction(f->copies[c].mod, k->name);
        if (!fn || LLVMIsDeclaration(fn) || LLVMGetFunctionCallConv(fn) != CC_SPIR_KERNEL)
            return refuse(f, CLSHIM_EUNSUPPORTED, "kernel '%s' not found in its module", k->name);
        if (LLVMCountParams(fn) != k->num_args)
            return refuse(f, CLSHIM_EINVAL, "kernel '%s' has %u parameters, the request gives %u",
                          k->name, LLVMCountParams(fn), k->num_args);
        f->occ[i].k = k;
        f->occ[i].fn = fn; /* in its copy, until linked */
    }
    return 0;
}

static int defined_in(LLVMModuleRef mod, const char *name)
{
    LLVMValueRef fn = LLVMGetNamedFunction(mod, name);
    if (fn) return !LLVMIsDeclaration(fn);
    LLVMValueRef gv = LLVMGetNamedGlobal(mod, name);
    return gv && !LLVMIsDeclaration(gv);
}

static int is_local_linkage(LLVMValueRef gv)
{
    LLVMLinkage l = LLVMGetLinkage(gv);
    return l == LLVMInternalLinkage || l == LLVMPrivateLinkage;
}

static void rename_clash(LLVMModuleRef dest, LLVMValueRef gv, size_t copy)
{
    const char *name = value_name(gv);
    if (!name[0] || is_local_linkage(gv) || LLVMIsDeclaration(gv) || strncmp(name, "llvm.", 5) == 0)
        return;
    if (!defined_in(dest, name)) return;
    char fresh[512];
    for (unsigned t = 0;; t++) {
        if (t == 0) snprintf(fresh, sizeof fresh, "%.400s.clshim%zu", name, copy);
        else snprintf(fresh, sizeof fresh, "%.400s.clshim%zu.%u", name, copy, t);
        if (!LLVMGetNamedFunction(dest, fresh) && !LLVMGetNamedGlobal(dest, fresh)) break;
    }
    LLVMSetValueName2(gv, fresh, strlen(fresh));
}

static int link_modules(struct fuser *f)
{
    f->mod = f->copies[0].mod;
    f->copies[0].mod = NULL;
    for (size_t c = 1; c < f->ncopies; c++) {
        LLVMModuleRef src = f->copies[c].mod;
        for (LLVMValueRef fn = LLVMGetFirstFunction(src); fn; fn = LLVMGetNextFunction(fn))
            rename_clash(f->mod, fn, c);
        for (LLVMValueRef gv = LLVMGetFirstGlobal(src); gv; gv = LLVMGetNextGlobal(gv))
            rename_clash(f->mod, gv, c);
        for (size_t i = 0; i < f->n; i++)
            if (f->copy_of[i] == c) snprintf(f->occ[i].name, sizeof f->occ[i].name, "%s",
                                             value_name(f->occ[i].fn));
        f->copies[c].mod = NULL;
        f->diag[0] = '\0';
        if (LLVMLinkModules2(f->mod, src))
            return refuse(f, CLSHIM_EUNSUPPORTED, "cannot link the kernels' modules: %s",
                          f->diag[0] ? f->diag : "link error");
    }
    for (size_t i = 0; i < f->n; i++) {
        if (f->copy_of[i] == 0) snprintf(f->occ[i].name, sizeof f->occ[i].name, "%s",
                                         f->occ[i].k->name);
        f->occ[i].fn = LLVMGetNamedFunction(f->mod, f->occ[i].name);
        if (!f->occ[i].fn) return refuse(f, CLSHIM_EUNSUPPORTED, "kernel '%s' lost in linking",
                                         f->occ[i].k->name);
    }
    return 0;
}

/* ---- 3. flattening ----------------------------------------------------- */

unsigned fuse_attr_kind(const char *name)
{
    return LLVMGetEnumAttributeKindForName(name, strlen(name));
}

static int run_passes(struct fuser *f, const char *pipeline)
{
    LLVMPassBuilderOptionsRef opts = LLVMCreatePassBuilderOptions();
    LLVMErrorRef e = LLVMRunPasses(f->mod, pipeline, NULL, opts);
    LLVMDisposePassBuilderOptions(opts);
    if (!e) return 0;
    char *msg = LLVMGetErrorMessage(e);
    refuse(f, CLSHIM_EUNSUPPORTED, "LLVM passes failed: %.300s", msg ? msg : "");
    LLVMDisposeErrorMessage(msg);
    return CLSHIM_EUNSUPPORTED;
}

static int flatten(struct fuser *f)
{
    LLVMStripModuleDebugInfo(f->mod);
    unsigned noinline = fuse_attr_kind("noinline"), optnone = fuse_attr_kind("optnone");
    LLVMAttributeRef always = LLVMCreateEnumAttribute(f->ctx, fuse_attr_kind("alwaysinline"), 0);
    for (LLVMValueRef fn = LLVMGetFirstFunction(f->mod); fn; fn = LLVMGetNextFunction(fn)) {
        if (LLVMIsDeclaration(fn)) continue;
        LLVMRemoveEnumAttributeAtIndex(fn, LLVMAttributeFunctionIndex, noinline);
        LLVMRemoveEnumAttributeAtIndex(fn, LLVMAttributeFunctionIndex, optnone);
        if (LLVMGetFunctionCallConv(fn) == CC_SPIR_KERNEL) continue;
        LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex, always);
        LLVMSetLinkage(fn, LLVMInternalLinkage);
    }
    return run_passes(f, "always-inline,function(sroa,early-cse,instcombine,simplifycfg)");
}

/* ---- 4. analysis ------------------------------------------------------- */

/* The operands of one kernel_arg_* node, as metadata; NULL when absent. */
static LLVMMetadataRef *md_operands(struct fuser *f, LLVMValueRef fn, const char *kind,
                                    unsigned nparams)
{
    unsigned id = LLVMGetMDKindIDInContext(f->ctx, kind, (unsigned)strlen(kind));
    size_t count = 0;
    LLVMValueMetadataEntry *all = LLVMGlobalCopyAllMetadata(fn, &count);
    LLVMMetadataRef node = NULL;
    for (unsigned i = 0; i < count; i++)
        if (LLVMValueMetadataEntriesGetKind(all, i) == id)
            node = LLVMValueMetadataEntriesGetMetadata(all, i);
    if (all) LLVMDisposeValueMetadataEntries(all);
    if (!node) return NULL;
    LLVMValueRef v = LLVMMetadataAsValue(f->ctx, node);
    if (LLVMGetMDNodeNumOperands(v) != nparams) return NULL;
    LLVMValueRef ops[FUSE_MAX_PARAMS];
    LLVMGetMDNodeOperands(v, ops);
    LLVMMetadataRef *out = calloc(nparams ? nparams : 1, sizeof *out);
    if (!out) return NULL;
    for (unsigned j = 0; j < nparams; j++) {
        unsigned len = 0;
        const char *s = ops[j] && LLVMIsAMDString(ops[j]) ? LLVMGetMDString(ops[j], &len) : NULL;
        if (s) {
            out[j] = LLVMMDStringInContext2(f->ctx, s, len);
        } else if (ops[j] && LLVMIsAConstant(ops[j])) {
            out[j] = LLVMValueAsMetadata(ops[j]);
        } else {
            free(out);
            return NULL;
        }
    }
    return out;
}

static int opaque_struct_param(LLVMValueRef p)
{
    LLVMTypeRef t = LLVMTypeOf(p);
    if (LLVMGetTypeKind(t) != LLVMPointerTypeKind || LLVMPointerTypeIsOpaque(t)) return 0;
    LLVMTypeRef e = LLVMGetElementType(t);
    if (LLVMGetTypeKind(e) != LLVMStructTypeKind) return 0;
    const char *name = LLVMGetStructName(e);
    return name && (strncmp(name, "opencl.", 7) == 0 || strncmp(name, "spirv.", 6) == 0);
}

static int prepare_occurrence(struct fuser *f, size_t i)
{
    struct fuse_occ *o = &f->occ[i];
    o->nparams = LLVMCountParams(o->fn);
    o->use = calloc(o->nparams ? o->nparams : 1, sizeof *o->use);
    o->param_name = calloc(o->nparams ? o->nparams : 1, sizeof *o->param_name);
    if (!o->use || !o->param_name) return refuse(f, CLSHIM_ENOMEM, "out of memory");
    for (size_t k = 0; k < NUM_MD_KINDS; k++) f->md[i][k] = md_operands(f, o->fn, md_kinds[k], o->nparams);
    LLVMMetadataRef *names = f->md[i][NUM_MD_KINDS - 1];
    for (unsigned j = 0; j < o->nparams; j++) {
        char buf[160];
        const char *s = NULL;
        unsigned len = 0;
        if (names) s = LLVMGetMDString(LLVMMetadataAsValue(f->ctx, names[j]), &len);
        if (s && len) snprintf(buf, sizeof buf, "%.*s", (int)len, s);
        else snprintf(buf, sizeof buf, "#%u", j);
        o->param_name[j] = strdup(buf);
        if (!o->param_name[j]) return refuse(f, CLSHIM_ENOMEM, "out of memory");
        if (opaque_struct_param(LLVMGetParam(o->fn, j)))
            return refuse(f, CLSHIM_EUNSUPPORTED, "kernel '%s': parameter '%s' is an image, "
                          "sampler, pipe or queue (unsupported)", o->k->name, buf);
    }
    /* reqd_work_group_size: all kernels the same, or none */
    unsigned id = LLVMGetMDKindIDInContext(f->ctx, "reqd_work_group_size", 20);
    size_t count = 0;
    LLVMValueMetadataEntry *all = LLVMGlobalCopyAllMetadata(o->fn, &count);
    LLVMMetadataRef reqd = NULL;
    for (unsigned m = 0; m < count; m++)
        if (LLVMValueMetadataEntriesGetKind(all, m) == id)
            reqd = LLVMValueMetadataEntriesGetMetadata(all, m);
    if (all) LLVMDisposeValueMetadataEntries(all);
    if (i == 0) f->reqd_wg = reqd;
    else if (reqd != f->reqd_wg) /* metadata nodes are uniqued: equal contents, equal pointers */
        return refuse(f, CLSHIM_EUNSUPPORTED, "kernels '%s' and '%s' differ in "
                      "reqd_work_group_size", f->occ[0].k->name, o->k->name);
    int rc = fuse_scan_kernel(o, f->res->reason, sizeof f->res->reason);
    if (rc && o->calls.printf) f->res->permanent = 1; /* whatever the ranges and arguments */
    return rc;
}

static int check_guards(struct fuser *f)
{
    const struct fuse_kernel *k0 = &f->req->kernels[0];
    for (size_t i = 0; i < f->n && f->linear; i++) { /* no body is guarded: one number of work-items */
        const struct fuse_occ *o = &f->occ[i];
        if (o->k->work_dim > 1 && (o->calls.barrier || o->calls.local_query || o->calls.num_groups))
            return refuse(f, CLSHIM_EUNSUPPORTED, "kernel '%s' (work_dim %u) uses work-groups (barrier(), "
                          "local ids or sizes, group ids) and the kernels' work dimensions differ: not remapped",
                          o->k->name, o->k->work_dim);
    }
    if (f->linear) return 0;
    for (size_t i = 0; i < f->n; i++) {
        struct fuse_occ *o = &f->occ[i];
        for (unsigned d = 0; d < k0->work_dim; d++)
            if (o->k->global_size[d] < f->fused_gs[d]) o->guarded = 1;
        if (!o->guarded) continue;
        if (o->calls.barrier)
            return refuse(f, CLSHIM_EUNSUPPORTED, "kernel '%s' calls barrier() or a work-group "
                          "function and its global size is smaller than the fused range "
                          "(a guarded body cannot synchronize)", o->k->name);
        if (!f->has_local && (o->calls.local_query || o->calls.num_groups))
            return refuse(f, CLSHIM_EUNSUPPORTED, "kernel '%s' queries work-group geometry and "
                          "its global size differs, with no local size given", o->k->name);
        if (o->calls.linear_id && k0->work_dim > 1)
            return refuse(f, CLSHIM_EUNSUPPORTED, "kernel '%s' calls get_global_linear_id and "
                          "its global size differs", o->k->name);
    }
    return 0;
}

/* ---- 5. remapping ------------------------------------------------------ */

static int remap(struct fuser *f, struct fuse_occ *o)
{
    for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(o->fn); bb; bb = LLVMGetNextBasicBlock(bb)) {
        LLVMValueRef in = LLVMGetFirstInstruction(bb);
        while (in) {
            LLVMValueRef next = LLVMGetNextInstruction(in);
            LLVMValueRef fn = LLVMIsACallInst(in) ? LLVMGetCalledValue(in) : NULL;
            if (fn && LLVMIsAFunction(fn)) {
                size_t len;
                const char *name = fuse_builtin_name(value_name(fn), &len);
                int gsize = fuse_name_is(name, len, "get_global_size");
                int groups = fuse_name_is(name, len, "get_num_groups");
                if (gsize || groups) {
                    LLVMValueRef d = LLVMGetOperand(in, 0);
                    if (!LLVMIsAConstantInt(d))
                        return refuse(f, CLSHIM_EUNSUPPORTED, "kernel '%s' calls %.*s with a "
                                      "non-constant dimension and needs a range guard",
                                      o->k->name, (int)len, name);
                    uint64_t dim = LLVMConstIntGetZExtValue(d);
                    uint64_t v = 1;
                    if (dim < o->k->work_dim) {
                        v = o->k->global_size[dim];
                        if (groups) v /= o->k->local_size[dim];
                    }
                    LLVMReplaceAllUsesWith(in, LLVMConstInt(LLVMTypeOf(in), v, 0));
                    LLVMInstructionEraseFromParent(in);
                }
            }
            in = next;
        }
    }
    return 0;
}

/* Different work dimensions (f->linear): the work-item functions of a
 * multi-dimensional body in terms of the fused 1-D range's global id g (its
 * global linear id, offsets being 0): get_global_id(d) = g / (GS(0) * ..
 * GS(d-1)) % GS(d), get_global_size(d) = GS(d), get_global_offset(d) = 0,
 * get_global_linear_id() = g, get_work_dim() = its own. Work-group functions
 * and barriers are refused after the scan (check_guards). */
static LLVMValueRef builtin(struct fuser *f, const char *name, LLVMTypeRef ret, LLVMTypeRef arg,
                            int readnone);
static LLVMValueRef call_builtin(LLVMBuilderRef b, LLVMValueRef fn, LLVMValueRef arg);

static int remap_linear(struct fuser *f, struct fuse_occ *o)
{
    LLVMTypeRef i32 = LLVMInt32TypeInContext(f->ctx), i64 = LLVMInt64TypeInContext(f->ctx);
    LLVMValueRef gid = builtin(f, "_Z13get_global_idj", i64, i32, 1);
    LLVMBuilderRef b = LLVMCreateBuilderInContext(f->ctx);
    int rc = 0;
    for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(o->fn); bb && !rc; bb = LLVMGetNextBasicBlock(bb)) {
        LLVMValueRef in = LLVMGetFirstInstruction(bb);
        while (in && !rc) {
            LLVMValueRef next = LLVMGetNextInstruction(in);
            LLVMValueRef fn = LLVMIsACallInst(in) ? LLVMGetCalledValue(in) : NULL;
            size_t len = 0;
            const char *name = fn && LLVMIsAFunction(fn) ? fuse_builtin_name(value_name(fn), &len) : "";
            int id = fuse_name_is(name, len, "get_global_id"), size = fuse_name_is(name, len, "get_global_size");
            int offset = fuse_name_is(name, len, "get_global_offset");
            int linear = fuse_name_is(name, len, "get_global_linear_id"), dims = fuse_name_is(name, len, "get_work_dim");
            if (!(id || size || offset || linear || dims)) {
                in = next;
                continue;
            }
            LLVMTypeRef t = LLVMTypeOf(in);
            uint64_t dim = 0;
            if (id || size || offset) {
                LLVMValueRef d = LLVMGetOperand(in, 0);
                if (!LLVMIsAConstantInt(d)) {
                    rc = refuse(f, CLSHIM_EUNSUPPORTED, "kernel '%s' calls %.*s with a non-constant dimension "
                                "and its work dimensions are remapped", o->k->name, (int)len, name);
                    break;
                }
                dim = LLVMConstIntGetZExtValue(d);
            }
            LLVMValueRef v;
            if (size) v = LLVMConstInt(t, dim < o->k->work_dim ? o->k->global_size[dim] : 1, 0);
            else if (offset) v = LLVMConstInt(t, 0, 0);
            else if (dims) v = LLVMConstInt(t, o->k->work_dim, 0);
            else {
                LLVMPositionBuilderBefore(b, in);
                v = call_builtin(b, gid, LLVMConstInt(i32, 0, 0));
                if (id && dim >= o->k->work_dim) {
                    v = LLVMConstInt(i64, 0, 0);
                } else if (id) {
                    uint64_t below = 1;
                    for (uint64_t e = 0; e < dim; e++) below *= o->k->global_size[e];
                    if (below > 1) v = LLVMBuildUDiv(b, v, LLVMConstInt(i64, below, 0), "");
                    if (dim + 1 < o->k->work_dim) v = LLVMBuildURem(b, v, LLVMConstInt(i64, o->k->global_size[dim], 0), "");
                }
                if (LLVMTypeOf(v) != t) v = LLVMBuildIntCast2(b, v, t, 0, "");
            }
            LLVMReplaceAllUsesWith(in, v);
            LLVMInstructionEraseFromParent(in);
            in = next;
        }
    }
    LLVMDisposeBuilder(b);
    return rc;
}

/* ---- 6. building ------------------------------------------------------- */

static LLVMValueRef builtin(struct fuser *f, const char *name, LLVMTypeRef ret, LLVMTypeRef arg,
                            int readnone)
{
    LLVMValueRef fn = LLVMGetNamedFunction(f->mod, name);
    if (fn) return fn;
    LLVMTypeRef ty = LLVMFunctionType(ret, &arg, 1, 0);
    fn = LLVMAddFunction(f->mod, name, ty);
    LLVMSetFunctionCallConv(fn, CC_SPIR_FUNC);
    LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex,
                            LLVMCreateEnumAttribute(f->ctx, fuse_attr_kind("nounwind"), 0));
    LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex,
                            LLVMCreateEnumAttribute(f->ctx, fuse_attr_kind(readnone ? "readnone"
                                                                              : "convergent"), 0));
    return fn;
}

static LLVMValueRef call_builtin(LLVMBuilderRef b, LLVMValueRef fn, LLVMValueRef arg)
{
    LLVMValueRef call = LLVMBuildCall2(b, LLVMGlobalGetValueType(fn), fn, &arg, 1, "");
    LLVMSetInstructionCallConv(call, CC_SPIR_FUNC);
    return call;
}

/* Moves kernel i's blocks into a new internal function with its signature. */
static int make_body(struct fuser *f, size_t i)
{
    struct fuse_occ *o = &f->occ[i];
    char name[64];
    snprintf(name, sizeof name, "clshim.body.%zu", i);
    LLVMValueRef body = LLVMAddFunction(f->mod, name, LLVMGlobalGetValueType(o->fn));
    LLVMSetLinkage(body, LLVMInternalLinkage);
    LLVMSetFunctionCallConv(body, CC_SPIR_FUNC);
    LLVMAddAttributeAtIndex(body, LLVMAttributeFunctionIndex,
                            LLVMCreateEnumAttribute(f->ctx, fuse_attr_kind("alwaysinline"), 0));
    unsigned byval = fuse_attr_kind("byval"), align = fuse_attr_kind("align");
    for (unsigned j = 0; j < o->nparams; j++) {
        LLVMValueRef from = LLVMGetParam(o->fn, j), to = LLVMGetParam(body, j);
        LLVMReplaceAllUsesWith(from, to);
        LLVMAttributeRef a = LLVMGetEnumAttributeAtIndex(o->fn, j + 1, byval);
        if (a) LLVMAddAttributeAtIndex(body, j + 1, a);
        a = LLVMGetEnumAttributeAtIndex(o->fn, j + 1, align);
        if (a) LLVMAddAttributeAtIndex(body, j + 1, a);
    }
    LLVMBasicBlockRef bb;
    while ((bb = LLVMGetFirstBasicBlock(o->fn)) != NULL) {
        LLVMRemoveBasicBlockFromParent(bb);
        LLVMAppendExistingBasicBlock(body, bb);
    }
    f->body[i] = body;
    return 0;
}

/* map[i][j] for a parameter baked in as a constant (the `const` option). */
#define PARAM_BAKED FUSE_MAX_PARAMS

struct fused_params {
    unsigned count;
    LLVMTypeRef type[FUSE_MAX_PARAMS];
    uint32_t kernel[FUSE_MAX_PARAMS], index[FUSE_MAX_PARAMS];
    unsigned map[FUSE_MAX_KERNELS][FUSE_MAX_PARAMS]; /* (kernel, param) -> fused param, or PARAM_BAKED */
    LLVMValueRef baked[FUSE_MAX_KERNELS][FUSE_MAX_PARAMS]; /* the constant of a PARAM_BAKED one */
};

static int pointer_as(LLVMTypeRef t)
{
    return LLVMGetTypeKind(t) == LLVMPointerTypeKind ? (int)LLVMGetPointerAddressSpace(t) : -1;
}

/* The `const` option: the value of class c as a constant of type t (an
 * integer, floating-point or vector type whose size fits the argument's
 * bytes), or NULL when c is not baked or t cannot take it. The bytes become
 * an integer of t's width, bit-cast to t: floats stay bit-exact. */
static LLVMValueRef baked_value(struct fuser *f, uint32_t c, LLVMTypeRef t)
{
    const struct fuse_const *k = NULL;
    for (uint32_t i = 0; i < f->req->num_consts && !k; i++)
        if (f->req->consts[i].arg_class == c) k = &f->req->consts[i];
    if (!k || !k->bytes) return NULL;
    LLVMTypeKind kind = LLVMGetTypeKind(t);
    LLVMTypeRef elem = kind == LLVMVectorTypeKind ? LLVMGetElementType(t) : t;
    LLVMTypeKind ek = LLVMGetTypeKind(elem);
    if (ek != LLVMIntegerTypeKind && ek != LLVMHalfTypeKind && ek != LLVMFloatTypeKind && ek != LLVMDoubleTypeKind)
        return NULL;
    unsigned long long bits = LLVMSizeOfTypeInBits(LLVMGetModuleDataLayout(f->mod), t);
    if (bits == 0 || bits % 8 || bits / 8 > k->size || bits > 64 * 16) return NULL;
    uint64_t words[16] = {0};
    memcpy(words, k->bytes, bits / 8);
    LLVMValueRef v = LLVMConstIntOfArbitraryPrecision(LLVMIntTypeInContext(f->ctx, (unsigned)bits),
                                                      (unsigned)((bits + 63) / 64), words);
    return kind == LLVMIntegerTypeKind ? v : LLVMConstBitCast(v, t);
}

/* The index of parameter v of fn, or -1. */
static int param_index(LLVMValueRef fn, LLVMValueRef v)
{
    unsigned n = LLVMCountParams(fn);
    for (unsigned j = 0; j < n; j++)
        if (LLVMGetParam(fn, j) == v) return (int)j;
    return -1;
}

/* Clears baked[] for every parameter of fn that v is computed from (all of
 * them past a depth bound). */
static void unbake_sources(LLVMValueRef v, LLVMValueRef fn, unsigned char *baked, unsigned np, int depth)
{
    if (LLVMIsAArgument(v)) {
        int j = param_index(fn, v);
        if (j >= 0) baked[j] = 0;
        return;
    }
    if (!LLVMIsAInstruction(v) || LLVMIsALoadInst(v)) return;
    if (depth > 24) {
        memset(baked, 0, np);
        return;
    }
    for (int a = 0; a < LLVMGetNumOperands(v); a++) unbake_sources(LLVMGetOperand(v, a), fn, baked, np, depth + 1);
}

/* Whether v is a constant once the parameters of fn marked in `baked` are
 * (over-approximated: any value computed from constants and baked
 * parameters alone, except work-item functions and loads). */
static int constant_if_baked(LLVMValueRef v, LLVMValueRef fn, const unsigned char *baked, int depth)
{
    if (LLVMIsAConstant(v)) return 1;
    if (LLVMIsAArgument(v)) {
        int j = param_index(fn, v);
        return j >= 0 && baked[j];
    }
    if (!LLVMIsAInstruction(v) || LLVMIsALoadInst(v) || LLVMIsAAllocaInst(v)) return 0;
    if (depth > 24) return 1; /* too deep to tell: counted as constant (keeps more parameters) */
    if (LLVMIsACallInst(v)) {
        LLVMValueRef callee = LLVMGetCalledValue(v);
        size_t len;
        const char *name = callee && LLVMIsAFunction(callee) ? fuse_builtin_name(value_name(callee), &len) : NULL;
        if (!name || (len > 4 && !strncmp(name, "get_", 4))) return 0;
        for (unsigned a = 0; a + 1 < (unsigned)LLVMGetNumOperands(v); a++)
            if (!constant_if_baked(LLVMGetOperand(v, a), fn, baked, depth + 1)) return 0;
        return 1;
    }
    for (int a = 0; a < LLVMGetNumOperands(v); a++) {
        LLVMValueRef op = LLVMGetOperand(v, a);
        if (LLVMIsABasicBlock(op)) continue;
        if (!constant_if_baked(op, fn, baked, depth + 1)) return 0;
    }
    return 1;
}

/* The `const` option must not change results: OpenCL C contracts a * b + c
 * into llvm.fmuladd, which the device computes fused or not as it likes,
 * and LLVM folds one whose both factors are constants into a rounded
 * product plus c — unlike a device that fuses. So a parameter from which
 * both factors of some fmuladd would be computed is not baked (its
 * kernel's parameters feeding either factor keep their arguments). */
static void keep_contracted_factors(struct fuser *f, size_t i, unsigned char *baked)
{
    LLVMValueRef fn = f->occ[i].fn;
    unsigned np = f->occ[i].nparams;
    for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(fn); bb; bb = LLVMGetNextBasicBlock(bb))
        for (LLVMValueRef in = LLVMGetFirstInstruction(bb); in; in = LLVMGetNextInstruction(in)) {
            LLVMValueRef callee = LLVMIsACallInst(in) ? LLVMGetCalledValue(in) : NULL;
            if (!callee || !LLVMIsAFunction(callee) || strncmp(value_name(callee), "llvm.fmuladd.", 13)) continue;
            LLVMValueRef x = LLVMGetOperand(in, 0), y = LLVMGetOperand(in, 1);
            if (!constant_if_baked(x, fn, baked, 0) || !constant_if_baked(y, fn, baked, 0)) continue;
            unbake_sources(x, fn, baked, np, 0);
            unbake_sources(y, fn, baked, np, 0);
        }
}

static int plan_params(struct fuser *f, struct fused_params *p)
{
    for (size_t i = 0; i < f->n; i++) {
        struct fuse_occ *o = &f->occ[i];
        unsigned char bake[FUSE_MAX_PARAMS] = {0};
        for (unsigned j = 0; j < o->nparams && f->req->num_consts; j++) {
            LLVMTypeRef t = LLVMTypeOf(LLVMGetParam(o->fn, j));
            bake[j] = pointer_as(t) < 0 && (p->baked[i][j] = baked_value(f, o->k->arg_class[j], t)) != NULL;
        }
        if (f->req->num_consts) keep_contracted_factors(f, i, bake);
        for (unsigned j = 0; j < o->nparams; j++) {
            LLVMTypeRef t = LLVMTypeOf(LLVMGetParam(o->fn, j));
            uint32_t c = o->k->arg_class[j];
            if (bake[j]) {
                p->map[i][j] = PARAM_BAKED;
                f->res->consts_baked++;
                continue;
            }
            unsigned q = p->count;
            if (pointer_as(t) != AS_LOCAL) {
                for (q = 0; q < p->count; q++) {
                    const struct fuse_occ *oq = &f->occ[p->kernel[q]];
                    if (oq->k->arg_class[p->index[q]] == c && pointer_as(p->type[q]) != AS_LOCAL)
                        break;
                }
            }
            if (q < p->count && p->type[q] != t) {
                int same_ptr = pointer_as(t) >= 0 && pointer_as(t) == pointer_as(p->type[q]);
                if (!same_ptr)
                    return refuse(f, CLSHIM_EUNSUPPORTED, "kernel '%s': parameter '%s' shares "
                                  "an argument with a parameter of another type", o->k->name,
                                  o->param_name[j]);
            }
            if (q == p->count) {
                if (p->count == FUSE_MAX_PARAMS)
                    return refuse(f, CLSHIM_EUNSUPPORTED, "fused kernel has too many parameters");
                p->type[q] = t;
                p->kernel[q] = (uint32_t)i;
                p->index[q] = j;
                p->count++;
            }
            p->map[i][j] = q;
        }
    }
    return 0;
}

static void set_kernel_metadata(struct fuser *f, LLVMValueRef fused, const struct fused_params *p)
{
    LLVMMetadataRef ops[FUSE_MAX_PARAMS];
    LLVMTypeRef i32 = LLVMInt32TypeInContext(f->ctx);
    for (unsigned q = 0; q < p->count; q++) {
        int as = pointer_as(p->type[q]);
        ops[q] = LLVMValueAsMetadata(LLVMConstInt(i32, as < 0 || as > 3 ? 0 : (unsigned)as, 0));
    }
    unsigned id = LLVMGetMDKindIDInContext(f->ctx, "kernel_arg_addr_space", 21);
    LLVMGlobalSetMetadata(fused, id, LLVMMDNodeInContext2(f->ctx, ops, p->count));
    for (size_t k = 0; k < NUM_MD_KINDS; k++) {
        size_t i;
        for (i = 0; i < f->n && f->md[i][k]; i++) {
        }
        if (i < f->n) continue; /* some kernel lacks it: leave it out */
        for (unsigned q = 0; q < p->count; q++) ops[q] = f->md[p->kernel[q]][k][p->index[q]];
        id = LLVMGetMDKindIDInContext(f->ctx, md_kinds[k], (unsigned)strlen(md_kinds[k]));
        LLVMGlobalSetMetadata(fused, id, LLVMMDNodeInContext2(f->ctx, ops, p->count));
    }
    if (f->reqd_wg)
        LLVMGlobalSetMetadata(fused, LLVMGetMDKindIDInContext(f->ctx, "reqd_work_group_size", 20),
                              f->reqd_wg);
}

static int build_fused(struct fuser *f, int with_barrier, struct fused_params *p)
{
    /* Attributes of the original parameters that the fused one keeps. */
    unsigned byval = fuse_attr_kind("byval"), align = fuse_attr_kind("align");
    LLVMAttributeRef pattr[FUSE_MAX_PARAMS][2];
    for (unsigned q = 0; q < p->count; q++) {
        LLVMValueRef fn = f->occ[p->kernel[q]].fn;
        pattr[q][0] = LLVMGetEnumAttributeAtIndex(fn, p->index[q] + 1, byval);
        pattr[q][1] = LLVMGetEnumAttributeAtIndex(fn, p->index[q] + 1, align);
    }
    for (size_t i = 0; i < f->n; i++) make_body(f, i);
    for (size_t i = 0; i < f->n; i++) {
        if (LLVMGetFirstUse(f->occ[i].fn))
            return refuse(f, CLSHIM_EUNSUPPORTED, "kernel '%s' is called by other code",
                          f->occ[i].k->name);
        LLVMDeleteFunction(f->occ[i].fn);
        f->occ[i].fn = NULL;
    }
    /* Other kernels of the programs are not needed in the fused module. */
    LLVMValueRef fn = LLVMGetFirstFunction(f->mod);
    while (fn) {
        LLVMValueRef next = LLVMGetNextFunction(fn);
        if (LLVMGetFunctionCallConv(fn) == CC_SPIR_KERNEL && !LLVMGetFirstUse(fn))
            LLVMDeleteFunction(fn);
        fn = next;
    }
    if (LLVMGetNamedFunction(f->mod, f->req->fused_name) ||
        LLVMGetNamedGlobal(f->mod, f->req->fused_name))
        return refuse(f, CLSHIM_EUNSUPPORTED, "fused name '%s' is taken in the module",
                      f->req->fused_name);

    LLVMTypeRef voidt = LLVMVoidTypeInContext(f->ctx);
    LLVMTypeRef i32 = LLVMInt32TypeInContext(f->ctx), i64 = LLVMInt64TypeInContext(f->ctx);
    LLVMValueRef fused = LLVMAddFunction(f->mod, f->req->fused_name,
                                         LLVMFunctionType(voidt, p->type, p->count, 0));
    LLVMSetFunctionCallConv(fused, CC_SPIR_KERNEL);
    LLVMAddAttributeAtIndex(fused, LLVMAttributeFunctionIndex,
                            LLVMCreateEnumAttribute(f->ctx, fuse_attr_kind("nounwind"), 0));
    for (unsigned q = 0; q < p->count; q++)
        for (int a = 0; a < 2; a++)
            if (pattr[q][a]) LLVMAddAttributeAtIndex(fused, q + 1, pattr[q][a]);
    set_kernel_metadata(f, fused, p);

    LLVMValueRef gid = builtin(f, "_Z13get_global_idj", i64, i32, 1);
    LLVMValueRef barrier = with_barrier ? builtin(f, "_Z7barrierj", voidt, i32, 0) : NULL;
    LLVMBuilderRef b = LLVMCreateBuilderInContext(f->ctx);
    LLVMBasicBlockRef cur = LLVMAppendBasicBlockInContext(f->ctx, fused, "entry");
    LLVMPositionBuilderAtEnd(b, cur);
    for (size_t i = 0; i < f->n; i++) {
        const struct fuse_kernel *k = f->occ[i].k;
        LLVMBasicBlockRef run = NULL, after = NULL;
        if (f->occ[i].guarded) {
            LLVMValueRef cond = NULL;
            for (unsigned d = 0; d < k->work_dim; d++) {
                if (k->global_size[d] >= f->fused_gs[d]) continue;
                LLVMValueRef id = call_builtin(b, gid, LLVMConstInt(i32, d, 0));
                LLVMValueRef lim = LLVMConstInt(i64, k->global_offset[d] + k->global_size[d], 0);
                LLVMValueRef in = LLVMBuildICmp(b, LLVMIntULT, id, lim, "");
                cond = cond ? LLVMBuildAnd(b, cond, in, "") : in;
            }
            run = LLVMAppendBasicBlockInContext(f->ctx, fused, "run");
            after = LLVMAppendBasicBlockInContext(f->ctx, fused, "next");
            LLVMBuildCondBr(b, cond, run, after);
            LLVMPositionBuilderAtEnd(b, run);
        }
        LLVMValueRef args[FUSE_MAX_PARAMS];
        LLVMValueRef body = f->body[i];
        for (unsigned j = 0; j < f->occ[i].nparams; j++) {
            LLVMValueRef v = p->map[i][j] == PARAM_BAKED ? p->baked[i][j] : LLVMGetParam(fused, p->map[i][j]);
            LLVMTypeRef want = LLVMTypeOf(LLVMGetParam(body, j));
            args[j] = LLVMTypeOf(v) == want ? v : LLVMBuildPointerCast(b, v, want, "");
        }
        LLVMValueRef call = LLVMBuildCall2(b, LLVMGlobalGetValueType(body), body, args,
                                           f->occ[i].nparams, "");
        LLVMSetInstructionCallConv(call, CC_SPIR_FUNC);
        if (barrier && i + 1 < f->n)
            call_builtin(b, barrier, LLVMConstInt(i32, CLK_GLOBAL_MEM_FENCE, 0));
        if (after) {
            LLVMBuildBr(b, after);
            LLVMPositionBuilderAtEnd(b, after);
        }
    }
    LLVMBuildRetVoid(b);
    LLVMDisposeBuilder(b);
    return 0;
}

/* ---- the entry --------------------------------------------------------- */

static int emit(struct fuser *f, const struct fused_params *p)
{
    char *msg = NULL;
    if (LLVMVerifyModule(f->mod, LLVMReturnStatusAction, &msg)) {
        refuse(f, CLSHIM_EUNSUPPORTED, "fused module fails verification: %.300s", msg ? msg : "");
        LLVMDisposeMessage(msg);
        return CLSHIM_EUNSUPPORTED;
    }
    LLVMDisposeMessage(msg);
    LLVMMemoryBufferRef buf = LLVMWriteBitcodeToMemoryBuffer(f->mod);
    struct fuse_result *r = f->res;
    size_t size = LLVMGetBufferSize(buf);
    r->bitcode = malloc(size);
    r->param_kernel = malloc(p->count * sizeof *r->param_kernel + 1);
    r->param_index = malloc(p->count * sizeof *r->param_index + 1);
    if (!r->bitcode || !r->param_kernel || !r->param_index) {
        LLVMDisposeMemoryBuffer(buf);
        free(r->bitcode), free(r->param_kernel), free(r->param_index);
        r->bitcode = NULL, r->param_kernel = r->param_index = NULL;
        return refuse(f, CLSHIM_ENOMEM, "out of memory");
    }
    memcpy(r->bitcode, LLVMGetBufferStart(buf), size);
    LLVMDisposeMemoryBuffer(buf);
    r->bitcode_size = size;
    r->num_params = p->count;
    memcpy(r->param_kernel, p->kernel, p->count * sizeof *r->param_kernel);
    memcpy(r->param_index, p->index, p->count * sizeof *r->param_index);
    return 0;
}

/* The `internal` option (fuse_internal.c). */
static int internalise(struct fuser *f, const struct fused_params *p, int barrier)
{
    LLVMValueRef fused = LLVMGetNamedFunction(f->mod, f->req->fused_name);
    struct internal_plan *ip = calloc(1, sizeof *ip);
    if (!ip) return refuse(f, CLSHIM_ENOMEM, "out of memory");
    char why[sizeof f->res->reason];
    const struct fuse_kernel *k0 = &f->req->kernels[0];
    ip->launch.work_dim = k0->work_dim;
    ip->launch.global_size = f->fused_gs[0];
    ip->launch.local_size = k0->local_size[0];
    for (size_t i = 0; i < f->n; i++) { /* every kernel's launch, not only the first's */
        const struct fuse_kernel *k = &f->req->kernels[i];
        if (k->work_dim != k0->work_dim) ip->launch.work_dim = 0;
        if (k->local_size[0] != k0->local_size[0]) ip->launch.local_size = 0;
        for (unsigned d = 0; d < 3; d++) ip->launch.offset |= k->global_offset[d] != 0;
    }
    if (fuse_internal_prepare(fused, f->occ, f->n, (const unsigned (*)[FUSE_MAX_PARAMS])p->map, barrier,
                              f->req->internal_args, ip, why, sizeof why) != 0) {
        free(ip);
        return refuse(f, CLSHIM_EUNSUPPORTED, "%s", why);
    }
    int rc = ip->count ? run_passes(f, "function(gvn)") : 0;
    if (!rc) f->res->internalised = fuse_internal_finish(fused, ip);
    if (!rc && f->res->internalised) rc = run_passes(f, "function(instcombine,adce,simplifycfg)");
    if (!rc && !ip->count && !ip->kept[0])
        snprintf(ip->kept, sizeof ip->kept, "no buffer is written by one kernel and read by a later one");
    snprintf(f->res->internal_kept, sizeof f->res->internal_kept, "%s", ip->kept);
    snprintf(f->res->internal_done, sizeof f->res->internal_done, "%s", ip->done);
    snprintf(f->res->internal_local, sizeof f->res->internal_local, "%s", ip->done_local);
    f->res->internalised_local = ip->local_done;
    free(ip);
    return rc;
}

/* PoCL allocates a __local variable once per work-group only when it is
 * named "KERNEL.VAR" after the kernel using it, as clang names a kernel's
 * own variables; any other addrspace(3) global is one object that every
 * work-group running at the same time shares. The fused kernel inherits
 * its bodies' variables under the original kernels' names ("k.tile"):
 * each becomes "FUSED.k.tile". Only the fused kernel is left to use them. */
static void name_locals_after_fused(struct fuser *f)
{
    const char *fused = f->req->fused_name;
    size_t flen = strlen(fused);
    for (LLVMValueRef g = LLVMGetFirstGlobal(f->mod); g; g = LLVMGetNextGlobal(g)) {
        if (LLVMGetPointerAddressSpace(LLVMTypeOf(g)) != AS_LOCAL) continue;
        size_t len;
        const char *name = LLVMGetValueName2(g, &len);
        if (len > flen && !strncmp(name, fused, flen) && name[flen] == '.') continue;
        char fresh[600];
        snprintf(fresh, sizeof fresh, "%s.%.*s", fused, (int)(len < 400 ? len : 400), name);
        LLVMSetValueName2(g, fresh, strlen(fresh));
    }
}

static int fuse_run(struct fuser *f)
{
    int rc = check_request(f);
    if (!rc) rc = load_modules(f);
    if (!rc) rc = link_modules(f);
    if (!rc) rc = flatten(f);
    for (size_t i = 0; !rc && i < f->n; i++) {
        f->occ[i].fn = LLVMGetNamedFunction(f->mod, f->occ[i].name);
        if (f->linear && f->occ[i].k->work_dim > 1) rc = remap_linear(f, &f->occ[i]);
    }
    /* a remapped position such as g / W * W + g % W becomes g again */
    if (!rc && f->linear) rc = run_passes(f, "function(early-cse,instcombine)");
    for (size_t i = 0; !rc && i < f->n; i++) rc = prepare_occurrence(f, i);
    if (!rc) rc = check_guards(f);
    if (rc) return rc;

    const struct fuse_kernel *k0 = &f->req->kernels[0];
    char why[sizeof f->res->reason];
    int needs = fuse_needs_barrier(f->occ, f->n, f->fused_gs, k0->global_offset, why, sizeof why);
    if (needs) {
        if (!f->req->force_barrier) return refuse(f, CLSHIM_EUNSUPPORTED, "%s", why);
        for (size_t i = 0; i < f->n; i++)
            if (f->occ[i].guarded)
                return refuse(f, CLSHIM_EUNSUPPORTED, "%s; a barrier cannot be forced because "
                              "kernel '%s' has a smaller global size", why, f->occ[i].k->name);
        snprintf(f->res->reason, sizeof f->res->reason, "%s", why);
        f->res->barrier_inserted = 1;
    }
    for (size_t i = 0; !rc && i < f->n; i++)
        if (f->occ[i].guarded) rc = remap(f, &f->occ[i]);
    if (rc) return rc;

    struct fused_params *p = calloc(1, sizeof *p);
    if (!p) return refuse(f, CLSHIM_ENOMEM, "out of memory");
    rc = plan_params(f, p);
    if (!rc) rc = build_fused(f, needs, p);
    if (!rc) rc = run_passes(f, "always-inline,function(sroa,early-cse,instcombine,simplifycfg,"
                                "adce),globaldce");
    if (!rc) name_locals_after_fused(f);
    if (!rc && !needs) {
        f->res->loops_merged = fuse_merge_grid_loops(LLVMGetNamedFunction(f->mod, f->req->fused_name));
        if (f->res->loops_merged)
            rc = run_passes(f, "function(instcombine,early-cse,gvn,simplifycfg,adce)");
    }
    if (!rc && f->req->internal) rc = internalise(f, p, needs);
    if (!rc) rc = emit(f, p);
    free(p);
    return rc;
}

int fuse_kernels(const struct fuse_request *req, struct fuse_result *result)
{
    if (!result) return CLSHIM_EINVAL;
    memset(result, 0, sizeof *result);
    if (!req) return CLSHIM_EINVAL;
    struct fuser *f = calloc(1, sizeof *f);
    if (!f) {
        snprintf(result->reason, sizeof result->reason, "out of memory");
        return CLSHIM_ENOMEM;
    }
    f->req = req;
    f->res = result;
    f->n = req->num_kernels;
    f->ctx = LLVMContextCreate();
    glue_context_typed_pointers(f->ctx);
    LLVMContextSetDiagnosticHandler(f->ctx, on_diagnostic, f);
    /* One fusion at a time per process: LLVM makes process-wide state
     * lazily in its pass pipeline (TimerGroup's lock) and publishes it in
     * ways TSan cannot see from this uninstrumented library; two threads
     * fusing at once were reported as a race in make check-sanitize.
     * Fusions are rare; serialising them costs nothing measurable. */
    pthread_mutex_lock(&fuse_lock);
    int rc = fuse_run(f);
    pthread_mutex_unlock(&fuse_lock);

    const struct fuse_kernel *k0 = req->kernels;
    if (rc == 0) {
        result->work_dim = f->linear ? 1 : k0->work_dim;
        for (unsigned d = 0; d < 3; d++) {
            result->global_size[d] = f->fused_gs[d];
            result->local_size[d] = k0->local_size[d];
            result->global_offset[d] = k0->global_offset[d];
        }
    } else {
        result->barrier_inserted = 0;
    }
    for (size_t i = 0; i < FUSE_MAX_KERNELS; i++) {
        for (size_t k = 0; k < NUM_MD_KINDS; k++) free(f->md[i][k]);
        if (f->occ[i].param_name)
            for (unsigned j = 0; j < f->occ[i].nparams; j++) free(f->occ[i].param_name[j]);
        free(f->occ[i].param_name);
        free(f->occ[i].use);
    }
    for (size_t c = 0; c < f->ncopies; c++)
        if (f->copies[c].mod) LLVMDisposeModule(f->copies[c].mod);
    if (f->mod) LLVMDisposeModule(f->mod);
    LLVMContextDispose(f->ctx);
    free(f);
    return rc;
}
