/* fuse_scan.c — the fuser's access analysis: may the bodies run back to back
 * without a barrier? (docs/fusion-analysis.md explains the rule.)
 *
 * It runs on flattened kernels (helpers inlined, SROA/instcombine done), so
 * every access to a buffer parameter is a load or store in the kernel
 * itself. A global/constant pointer parameter is followed through its uses:
 *
 *   param --(bitcast/addrspacecast)*--> GEP(param, E, c...) --(casts, GEP 0,c..)*--> load/store
 *
 * is "pointwise" when E is get_global_id(d) under sext/zext/trunc only and
 * the trailing GEP indices are constants (a field or lane of the element).
 * Any other use — an access at another index, the pointer passed to a call
 * (atomics, vload, async copies), stored, compared through a phi/select,
 * turned into an integer — is "unknown" and counts as a read and a write.
 * Memory accesses whose pointer does not lead back to a parameter, an
 * alloca or a __local/__constant variable make the whole kernel unknown.
 */
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "fusion/llvm/fuse_int.h"

const char *fuse_builtin_name(const char *mangled, size_t *len)
{
    size_t n = strlen(mangled);
    if (n > 2 && mangled[0] == '_' && mangled[1] == 'Z') {
        size_t i = 2, l = 0;
        while (i < n && mangled[i] >= '0' && mangled[i] <= '9' && l < 4096)
            l = l * 10 + (size_t)(mangled[i++] - '0');
        if (l > 0 && i + l <= n) {
            *len = l;
            return mangled + i;
        }
    }
    *len = n;
    return mangled;
}

int fuse_name_is(const char *name, size_t len, const char *word)
{
    return strlen(word) == len && memcmp(name, word, len) == 0;
}

static int name_starts(const char *name, size_t len, const char *prefix)
{
    size_t p = strlen(prefix);
    return len >= p && memcmp(name, prefix, p) == 0;
}

/* The called function, or NULL for an indirect call or inline asm. */
static LLVMValueRef called_function(LLVMValueRef call)
{
    LLVMValueRef callee = LLVMGetCalledValue(call);
    return callee && LLVMIsAFunction(callee) ? callee : NULL;
}

static const char *value_name(LLVMValueRef v)
{
    size_t len;
    const char *name = LLVMGetValueName2(v, &len);
    return name && len ? name : "?";
}

static int is_pointer(LLVMValueRef v)
{
    return LLVMGetTypeKind(LLVMTypeOf(v)) == LLVMPointerTypeKind;
}

static unsigned addr_space(LLVMValueRef v)
{
    return LLVMGetPointerAddressSpace(LLVMTypeOf(v));
}

static int is_cast(LLVMOpcode op)
{
    return op == LLVMBitCast || op == LLVMAddrSpaceCast;
}

/* Strips GEPs and pointer casts (instructions or constant expressions). */
static LLVMValueRef pointer_root(LLVMValueRef p)
{
    for (int depth = 0; depth < 64 && p; depth++) {
        LLVMOpcode op;
        if (LLVMIsAInstruction(p)) op = LLVMGetInstructionOpcode(p);
        else if (LLVMIsAConstantExpr(p)) op = LLVMGetConstOpcode(p);
        else return p;
        if (op != LLVMGetElementPtr && !is_cast(op)) return p;
        p = LLVMGetOperand(p, 0);
    }
    return p;
}

/* k when c is the constant 2^k - 1 (0 < k < w), else 0. */
static unsigned low_mask_bits(LLVMValueRef c, unsigned w)
{
    if (!LLVMIsAConstantInt(c) || w > 64) return 0;
    unsigned long long v = LLVMConstIntGetZExtValue(c);
    unsigned k = 0;
    while (k < w && (v >> k) & 1) k++;
    return k > 0 && k < w && (k == 64 || (v >> k) == 0) ? k : 0;
}

/* w - k when e is `ashr (shl x, k), k` (a sign extension from w - k bits). */
static unsigned sext_in_reg(LLVMValueRef e, unsigned w)
{
    LLVMValueRef shl = LLVMGetOperand(e, 0), k = LLVMGetOperand(e, 1);
    if (!LLVMIsAInstruction(shl) || LLVMGetInstructionOpcode(shl) != LLVMShl) return 0;
    LLVMValueRef k2 = LLVMGetOperand(shl, 1);
    if (!LLVMIsAConstantInt(k) || !LLVMIsAConstantInt(k2)) return 0;
    unsigned long long a = LLVMConstIntGetZExtValue(k), b = LLVMConstIntGetZExtValue(k2);
    return a == b && a > 0 && a < w ? w - (unsigned)a : 0;
}

/* Describes E when it is get_global_id(d) under integer casts (or their
 * instcombined forms). */
static int gid_signature(LLVMValueRef e, struct param_use *u, char *sig, size_t len)
{
    char parts[8][32];
    int nparts = 0;
    unsigned trunc_bits = 0;
    while (LLVMIsAInstruction(e) && nparts < 8) {
        LLVMOpcode op = LLVMGetInstructionOpcode(e);
        unsigned w = LLVMGetIntTypeWidth(LLVMTypeOf(e)), narrow;
        if (op == LLVMSExt || op == LLVMZExt || op == LLVMTrunc) {
            if (op == LLVMTrunc && (!trunc_bits || w < trunc_bits)) trunc_bits = w;
            snprintf(parts[nparts++], sizeof parts[0], ".%c%u",
                     op == LLVMSExt ? 's' : op == LLVMZExt ? 'z' : 't', w);
            e = LLVMGetOperand(e, 0);
        } else if (op == LLVMAShr && (narrow = sext_in_reg(e, w)) != 0) {
            /* instcombine's form of sext(trunc(x)): ashr (shl x, k), k */
            if (!trunc_bits || narrow < trunc_bits) trunc_bits = narrow;
            snprintf(parts[nparts++], sizeof parts[0], ".t%u.s%u", narrow, w);
            e = LLVMGetOperand(LLVMGetOperand(e, 0), 0);
        } else if (op == LLVMAnd && (narrow = low_mask_bits(LLVMGetOperand(e, 1), w)) != 0) {
            /* ... and of zext(trunc(x)): and x, 2^k - 1 */
            if (!trunc_bits || narrow < trunc_bits) trunc_bits = narrow;
            snprintf(parts[nparts++], sizeof parts[0], ".t%u.z%u", narrow, w);
            e = LLVMGetOperand(e, 0);
        } else {
            break;
        }
    }
    if (!LLVMIsACallInst(e)) return 0;
    LLVMValueRef fn = called_function(e);
    size_t nlen;
    const char *name = fn ? fuse_builtin_name(value_name(fn), &nlen) : NULL;
    if (!name || !fuse_name_is(name, nlen, "get_global_id") || LLVMGetNumArgOperands(e) != 1)
        return 0;
    LLVMValueRef d = LLVMGetOperand(e, 0);
    if (!LLVMIsAConstantInt(d) || LLVMConstIntGetZExtValue(d) > 2) return 0;
    unsigned dim = (unsigned)LLVMConstIntGetZExtValue(d);
    int n = snprintf(sig, len, "g%u", dim);
    for (int i = nparts - 1; i >= 0 && n > 0 && (size_t)n < len; i--)
        n += snprintf(sig + n, len - (size_t)n, "%s", parts[i]);
    u->dim = dim;
    u->trunc_bits = trunc_bits;
    return 1;
}

struct walk {
    struct param_use *u;
    const char *pname;
    LLVMTargetDataRef td;
    LLVMValueRef index;  /* the element index E, NULL while at the base */
    uint64_t elem_size;
};

/* fmt takes the parameter's name, then detail. */
static void mark_unknown(struct walk *w, const char *fmt, const char *detail)
    __attribute__((format(printf, 2, 0)));
static void mark_unknown(struct walk *w, const char *fmt, const char *detail)
{
    w->u->unknown = 1;
    if (!w->u->why[0]) snprintf(w->u->why, sizeof w->u->why, fmt, w->pname, detail ? detail : "");
}

static void mark_nonpointwise(struct walk *w, int is_write, const char *how)
{
    w->u->nonpointwise = 1;
    if (!w->u->why[0])
        snprintf(w->u->why, sizeof w->u->why, "%s '%s' %s", is_write ? "writes" : "reads",
                 w->pname, how);
}

/* One load or store through a pointer reached by the walk. */
static void record_access(struct walk *w, LLVMTypeRef access_type, int is_write)
{
    if (is_write) w->u->writes = 1;
    else w->u->reads = 1;
    if (!w->index) {
        mark_nonpointwise(w, is_write, "at its first element, not at get_global_id()");
        return;
    }
    if (LLVMStoreSizeOfType(w->td, access_type) > w->elem_size) {
        mark_nonpointwise(w, is_write, "beyond the element at get_global_id()");
        return;
    }
    char sig[128];
    struct param_use probe = *w->u;
    if (!gid_signature(w->index, &probe, sig, sizeof sig)) {
        mark_nonpointwise(w, is_write, "at an index other than get_global_id()");
        return;
    }
    if (!w->u->sig[0]) {
        snprintf(w->u->sig, sizeof w->u->sig, "%s", sig);
        w->u->dim = probe.dim;
        w->u->trunc_bits = probe.trunc_bits;
        w->u->elem_size = w->elem_size;
    } else if (probe.dim != w->u->dim || w->elem_size != w->u->elem_size) {
        mark_nonpointwise(w, is_write, "at two different indices");
    } else if (probe.trunc_bits && (!w->u->trunc_bits || probe.trunc_bits < w->u->trunc_bits)) {
        w->u->trunc_bits = probe.trunc_bits; /* casts differ: see class_needs_barrier */
    }
}

static int all_constant_indices(LLVMValueRef gep, unsigned from, int first_zero)
{
    unsigned n = (unsigned)LLVMGetNumOperands(gep);
    for (unsigned i = from; i < n; i++) {
        LLVMValueRef idx = LLVMGetOperand(gep, i);
        if (!LLVMIsAConstantInt(idx)) return 0;
        if (first_zero && i == from && LLVMConstIntGetZExtValue(idx) != 0) return 0;
    }
    return 1;
}

static void walk_pointer(struct walk *w, LLVMValueRef v, int depth)
{
    if (depth > 32) {
        mark_unknown(w, "uses '%s' through a pointer chain too deep to follow%s", "");
        return;
    }
    for (LLVMUseRef use = LLVMGetFirstUse(v); use; use = LLVMGetNextUse(use)) {
        LLVMValueRef user = LLVMGetUser(use);
        if (!LLVMIsAInstruction(user)) {
            mark_unknown(w, "uses '%s' in a constant expression%s", "");
            continue;
        }
        LLVMOpcode op = LLVMGetInstructionOpcode(user);
        if (is_cast(op)) {
            walk_pointer(w, user, depth + 1);
        } else if (op == LLVMGetElementPtr && LLVMGetOperand(user, 0) == v) {
            unsigned nops = (unsigned)LLVMGetNumOperands(user);
            if (!w->index && nops >= 2 && all_constant_indices(user, 2, 0)) {
                struct walk inner = *w;
                inner.index = LLVMGetOperand(user, 1);
                inner.elem_size = LLVMABISizeOfType(w->td, LLVMGetGEPSourceElementType(user));
                walk_pointer(&inner, user, depth + 1);
            } else if (w->index && all_constant_indices(user, 1, 1)) {
                walk_pointer(w, user, depth + 1);
            } else {
                w->u->nonpointwise = 1;
                if (!w->u->why[0])
                    snprintf(w->u->why, sizeof w->u->why,
                             "accesses '%s' at an index other than get_global_id()", w->pname);
                walk_pointer(w, user, depth + 1); /* still find out whether it writes */
            }
        } else if (op == LLVMLoad) {
            if (LLVMGetVolatile(user)) mark_unknown(w, "makes a volatile access to '%s'%s", "");
            record_access(w, LLVMTypeOf(user), 0);
        } else if (op == LLVMStore && LLVMGetOperand(user, 1) == v) {
            if (LLVMGetVolatile(user)) mark_unknown(w, "makes a volatile access to '%s'%s", "");
            record_access(w, LLVMTypeOf(LLVMGetOperand(user, 0)), 1);
        } else if (op == LLVMStore) {
            mark_unknown(w, "stores the pointer '%s' in memory%s", "");
        } else if (op == LLVMAtomicRMW || op == LLVMAtomicCmpXchg) {
            mark_unknown(w, "uses an atomic on '%s'%s", "");
        } else if (op == LLVMCall) {
            LLVMValueRef fn = called_function(user);
            mark_unknown(w, "passes '%s' to '%s'", fn ? value_name(fn) : "an indirect call");
        } else if (op == LLVMICmp) {
            /* comparing the address reads no memory */
        } else {
            mark_unknown(w, "uses '%s' through a phi, select, integer conversion or the like%s", "");
        }
    }
}

/* Whether a memory access at pointer p is attributable (see file comment). */
static int known_origin(LLVMValueRef p)
{
    if (!is_pointer(p)) return 1;
    unsigned as = addr_space(p);
    if (as == AS_PRIVATE || as == AS_LOCAL || as == AS_CONSTANT) return 1;
    LLVMValueRef root = pointer_root(p);
    if (LLVMIsAArgument(root) || LLVMIsAAllocaInst(root)) return 1;
    if (LLVMIsAGlobalVariable(root)) {
        unsigned ras = addr_space(root);
        return ras != AS_GLOBAL; /* program-scope __global variables: unknown */
    }
    return 0;
}

static void note_call(struct fuse_occ *occ, LLVMValueRef call)
{
    struct kernel_calls *c = &occ->calls;
    LLVMValueRef fn = called_function(call);
    size_t len;
    const char *name = fuse_builtin_name(value_name(fn), &len);
    if (fuse_name_is(name, len, "barrier") || fuse_name_is(name, len, "wait_group_events") ||
        name_starts(name, len, "work_group_") || name_starts(name, len, "sub_group_") ||
        name_starts(name, len, "async_work_group"))
        c->barrier = 1;
    else if (fuse_name_is(name, len, "get_local_id") || fuse_name_is(name, len, "get_local_size") ||
             fuse_name_is(name, len, "get_group_id") ||
             fuse_name_is(name, len, "get_enqueued_local_size") ||
             fuse_name_is(name, len, "get_local_linear_id"))
        c->local_query = 1;
    else if (fuse_name_is(name, len, "get_num_groups"))
        c->num_groups = 1;
    else if (fuse_name_is(name, len, "get_global_size"))
        c->global_size = 1;
    else if (fuse_name_is(name, len, "get_global_linear_id"))
        c->linear_id = 1;
    unsigned nargs = (unsigned)LLVMGetNumArgOperands(call);
    for (unsigned i = 0; i < nargs && !c->unknown[0]; i++)
        if (!known_origin(LLVMGetOperand(call, i)))
            snprintf(c->unknown, sizeof c->unknown,
                     "passes a pointer of unknown origin to '%s'", value_name(fn));
}

int fuse_scan_kernel(struct fuse_occ *occ, char *reason, size_t reason_len)
{
    LLVMModuleRef mod = LLVMGetGlobalParent(occ->fn);
    LLVMTargetDataRef td = LLVMGetModuleDataLayout(mod);
    for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(occ->fn); bb; bb = LLVMGetNextBasicBlock(bb)) {
        for (LLVMValueRef in = LLVMGetFirstInstruction(bb); in; in = LLVMGetNextInstruction(in)) {
            LLVMOpcode op = LLVMGetInstructionOpcode(in);
            LLVMValueRef ptr = NULL;
            if (op == LLVMCall) {
                LLVMValueRef fn = called_function(in);
                if (!fn) {
                    snprintf(reason, reason_len, "kernel '%s' makes an indirect call", occ->k->name);
                    return CLSHIM_EUNSUPPORTED;
                }
                if (!LLVMIsDeclaration(fn)) {
                    snprintf(reason, reason_len,
                             "kernel '%s' calls '%s', which could not be inlined (recursion?)",
                             occ->k->name, value_name(fn));
                    return CLSHIM_EUNSUPPORTED;
                }
                note_call(occ, in);
            } else if (op == LLVMLoad || op == LLVMAtomicRMW || op == LLVMAtomicCmpXchg) {
                ptr = LLVMGetOperand(in, 0);
            } else if (op == LLVMStore) {
                ptr = LLVMGetOperand(in, 1);
            } else if (op == LLVMCallBr || op == LLVMInvoke) {
                snprintf(reason, reason_len, "kernel '%s' uses invoke/callbr", occ->k->name);
                return CLSHIM_EUNSUPPORTED;
            }
            if (ptr && !occ->calls.unknown[0] && !known_origin(ptr))
                snprintf(occ->calls.unknown, sizeof occ->calls.unknown,
                         "accesses memory through a pointer of unknown origin");
            if (ptr && op == LLVMStore && !occ->calls.unknown[0]) {
                LLVMValueRef root = pointer_root(ptr);
                if (LLVMIsAGlobalVariable(root) && addr_space(root) == AS_GLOBAL)
                    snprintf(occ->calls.unknown, sizeof occ->calls.unknown,
                             "writes the program-scope variable '%s'", value_name(root));
            }
        }
    }
    for (unsigned j = 0; j < occ->nparams; j++) {
        LLVMValueRef p = LLVMGetParam(occ->fn, j);
        if (!is_pointer(p)) continue;
        unsigned as = addr_space(p);
        if (as != AS_GLOBAL && as != AS_CONSTANT && as != AS_GENERIC) continue;
        struct walk w = {.u = &occ->use[j], .pname = occ->param_name[j], .td = td};
        walk_pointer(&w, p, 0);
    }
    return 0;
}

/* The first kernel/parameter of class c that breaks pointwise access. */
static int class_needs_barrier(const struct fuse_occ *occ, size_t n, uint32_t c,
                               const size_t fused_gs[3], const size_t offset[3], char *reason,
                               size_t reason_len)
{
    size_t accessors = 0;
    int written = 0;
    for (size_t i = 0; i < n; i++) {
        int touches = 0;
        for (unsigned j = 0; j < occ[i].nparams; j++) {
            const struct param_use *u = &occ[i].use[j];
            if (occ[i].k->arg_class[j] != c) continue;
            if (u->reads || u->writes || u->unknown || u->nonpointwise) touches = 1;
            if (u->writes || u->unknown) written = 1;
        }
        accessors += (size_t)touches;
    }
    if (accessors < 2 || !written) return 0;

    const struct param_use *first = NULL;
    for (size_t i = 0; i < n; i++) {
        for (unsigned j = 0; j < occ[i].nparams; j++) {
            const struct param_use *u = &occ[i].use[j];
            if (occ[i].k->arg_class[j] != c) continue;
            if (!(u->reads || u->writes || u->unknown || u->nonpointwise)) continue;
            const char *kn = occ[i].k->name, *pn = occ[i].param_name[j];
            if (u->unknown || u->nonpointwise) {
                snprintf(reason, reason_len, "needs a barrier: kernel '%s' %s", kn, u->why);
                return 1;
            }
            for (unsigned d = 0; d < 3; d++) {
                if (d != u->dim && fused_gs[d] > 1) {
                    snprintf(reason, reason_len,
                             "needs a barrier: kernel '%s' indexes '%s' by get_global_id(%u) "
                             "only, but the range has %zu work-items in dimension %u",
                             kn, pn, u->dim, fused_gs[d], d);
                    return 1;
                }
            }
            if (u->trunc_bits && u->trunc_bits < 64 &&
                (unsigned long long)(offset[u->dim] + fused_gs[u->dim]) >
                    (1ULL << (u->trunc_bits - 1))) {
                snprintf(reason, reason_len,
                         "needs a barrier: kernel '%s' truncates the index of '%s' to %u bits, "
                         "too few for the range", kn, pn, u->trunc_bits);
                return 1;
            }
            if (!first) {
                first = u;
            } else if (first->dim != u->dim || first->elem_size != u->elem_size) {
                /* Casts may differ ("g0" vs "g0.t32.s64"): with every trunc
                 * wide enough for the range (checked above) each chain of
                 * casts yields get_global_id(d) itself, as does a narrower
                 * GEP index, which GEP sign-extends. */
                snprintf(reason, reason_len,
                         "needs a barrier: kernel '%s' accesses '%s' at get_global_id() through "
                         "another index expression or element size than an earlier kernel",
                         kn, pn);
                return 1;
            }
        }
    }
    return 0;
}

int fuse_needs_barrier(const struct fuse_occ *occ, size_t n, const size_t fused_gs[3],
                       const size_t offset[3], char *reason, size_t reason_len)
{
    for (size_t i = 0; i < n; i++) {
        if (occ[i].calls.unknown[0]) {
            snprintf(reason, reason_len, "needs a barrier: kernel '%s' %s", occ[i].k->name,
                     occ[i].calls.unknown);
            return 1;
        }
    }
    for (size_t i = 0; i < n; i++) {
        for (unsigned j = 0; j < occ[i].nparams; j++) {
            LLVMValueRef p = LLVMGetParam(occ[i].fn, j);
            if (!is_pointer(p) || addr_space(p) == AS_LOCAL || addr_space(p) == AS_PRIVATE)
                continue;
            if (class_needs_barrier(occ, n, occ[i].k->arg_class[j], fused_gs, offset, reason,
                                    reason_len))
                return 1;
        }
    }
    return 0;
}
