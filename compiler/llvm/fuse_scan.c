/* fuse_scan.c — the fuser's access analysis: may the bodies run back to back
 * without a barrier? (docs/fusion-analysis.md explains the rule.)
 *
 * It runs on flattened kernels (helpers inlined, SROA/instcombine done), so
 * every access to a buffer parameter is a load or store in the kernel
 * itself. A global/constant pointer parameter is followed through its uses:
 *
 *   param --(casts)*--> [GEP i8 (p, O) --(casts)*-->] GEP(p, E, c...) --(casts, GEP 0,c..)*--> load/store
 *
 * is "pointwise" when E is the work-item's position in one dimension and
 * the trailing GEP indices are constants (a field or lane of the element).
 * The position, under sext/zext/trunc: get_global_id(d), or
 * get_local_size(d) * get_group_id(d) + get_local_id(d); or a grid-stride
 * loop's index, a phi of such a position and itself plus get_global_size(d)
 * (each work-item then touches only its residue class modulo the global
 * size). O, an optional byte offset, must be a scalar parameter: two
 * kernels reach the same elements only with offsets of one argument class.
 * Any other use — an access at another index, the pointer passed to a call
 * (atomics, vload, async copies), stored, compared through a phi/select,
 * turned into an integer — is "unknown" and counts as a read and a write.
 * Memory accesses whose pointer does not lead back to a parameter, an
 * alloca or a __local/__constant variable make the whole kernel unknown.
 */
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "compiler/llvm/fuse_int.h"

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

/* Strips integer casts off e — sext/zext/trunc and instcombine's forms of
 * them — keeping the narrowest truncation in *trunc_bits. */
LLVMValueRef fuse_strip_int_casts(LLVMValueRef e, unsigned *trunc_bits)
{
    for (int depth = 0; depth < 8 && LLVMIsAInstruction(e); depth++) {
        LLVMOpcode op = LLVMGetInstructionOpcode(e);
        unsigned w = LLVMGetIntTypeWidth(LLVMTypeOf(e)), narrow = 0;
        if (op == LLVMSExt || op == LLVMZExt || op == LLVMTrunc) {
            if (op == LLVMTrunc) narrow = w;
            e = LLVMGetOperand(e, 0);
        } else if (op == LLVMAShr && (narrow = sext_in_reg(e, w)) != 0) {
            e = LLVMGetOperand(LLVMGetOperand(e, 0), 0); /* sext(trunc(x)): ashr (shl x, k), k */
        } else if (op == LLVMAnd && (narrow = low_mask_bits(LLVMGetOperand(e, 1), w)) != 0) {
            e = LLVMGetOperand(e, 0); /* zext(trunc(x)): and x, 2^k - 1 */
        } else {
            break;
        }
        if (narrow && (!*trunc_bits || narrow < *trunc_bits)) *trunc_bits = narrow;
    }
    return e;
}

/* Whether e (casts stripped) calls the work-item function `name` with a
 * constant dimension; the dimension in *dim. */
static int builtin_call(LLVMValueRef e, const char *name, unsigned *trunc_bits, unsigned *dim)
{
    e = fuse_strip_int_casts(e, trunc_bits);
    if (!LLVMIsACallInst(e) || LLVMGetNumArgOperands(e) != 1) return 0;
    LLVMValueRef fn = called_function(e);
    size_t nlen;
    const char *fname = fn ? fuse_builtin_name(value_name(fn), &nlen) : NULL;
    if (!fname || !fuse_name_is(fname, nlen, name)) return 0;
    LLVMValueRef d = LLVMGetOperand(e, 0);
    if (!LLVMIsAConstantInt(d) || LLVMConstIntGetZExtValue(d) > 2) return 0;
    *dim = (unsigned)LLVMConstIntGetZExtValue(d);
    return 1;
}

static int is_op(LLVMValueRef e, LLVMOpcode op)
{
    return LLVMIsAInstruction(e) && LLVMGetInstructionOpcode(e) == op;
}

/* The index forms the analysis accepts (see the file comment). */
struct index_form {
    unsigned dim, trunc_bits;
    int strided, from_groups;
};

/* e is the work-item's position: get_global_id(d), or
 * get_local_size(d) * get_group_id(d) + get_local_id(d). */
static int position(LLVMValueRef e, struct index_form *f)
{
    struct index_form t = *f;
    if (builtin_call(e, "get_global_id", &t.trunc_bits, &t.dim)) return *f = t, 1;
    e = fuse_strip_int_casts(e, &t.trunc_bits);
    if (!is_op(e, LLVMAdd)) return 0;
    for (unsigned s = 0; s < 2; s++) {
        struct index_form g = t;
        unsigned dl, ds, dg;
        LLVMValueRef mul = fuse_strip_int_casts(LLVMGetOperand(e, 1 - s), &g.trunc_bits);
        if (!builtin_call(LLVMGetOperand(e, s), "get_local_id", &g.trunc_bits, &dl) || !is_op(mul, LLVMMul))
            continue;
        for (unsigned m = 0; m < 2; m++) {
            struct index_form h = g;
            if (builtin_call(LLVMGetOperand(mul, m), "get_local_size", &h.trunc_bits, &ds) &&
                builtin_call(LLVMGetOperand(mul, 1 - m), "get_group_id", &h.trunc_bits, &dg) && dl == ds &&
                ds == dg) {
                h.dim = dl;
                h.from_groups = 1;
                return *f = h, 1;
            }
        }
    }
    return 0;
}

/* Describes the element index E: a position, or a grid-stride loop's
 * index — a phi whose incoming values are a position and the phi plus
 * get_global_size(d), so that every value is position + k * global size. */
static int index_signature(LLVMValueRef e, struct index_form *f, char *sig, size_t len)
{
    memset(f, 0, sizeof *f);
    LLVMValueRef phi = fuse_strip_int_casts(e, &f->trunc_bits);
    if (!LLVMIsAPHINode(phi)) {
        if (!position(e, f)) return 0;
        snprintf(sig, len, "%s%u", f->from_groups ? "lg" : "g", f->dim);
        return 1;
    }
    if (LLVMCountIncoming(phi) != 2) return 0;
    unsigned w = LLVMGetIntTypeWidth(LLVMTypeOf(phi));
    if (w < 64 && (!f->trunc_bits || w < f->trunc_bits)) f->trunc_bits = w; /* the phi's own wrap-around */
    for (unsigned k = 0; k < 2; k++) {
        LLVMValueRef next = LLVMGetIncomingValue(phi, k), start = LLVMGetIncomingValue(phi, 1 - k);
        if (!is_op(next, LLVMAdd)) continue;
        for (unsigned o = 0; o < 2; o++) {
            struct index_form g = *f;
            unsigned dstep;
            if (LLVMGetOperand(next, o) != phi ||
                !builtin_call(LLVMGetOperand(next, 1 - o), "get_global_size", &g.trunc_bits, &dstep) ||
                !position(start, &g) || g.dim != dstep)
                continue;
            g.strided = 1;
            *f = g;
            snprintf(sig, len, "stride(%s%u)", f->from_groups ? "lg" : "g", f->dim);
            return 1;
        }
    }
    return 0;
}

struct walk {
    struct param_use *u;
    const char *pname;
    LLVMTargetDataRef td;
    LLVMValueRef fn;     /* the kernel */
    LLVMValueRef index;  /* the element index E, NULL while at the base */
    uint64_t elem_size;
    unsigned offset_param; /* 1 + the scalar parameter of a byte offset GEP on the way; 0: none */
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
    struct index_form f;
    if (!index_signature(w->index, &f, sig, sizeof sig)) {
        mark_nonpointwise(w, is_write, "at an index other than get_global_id()");
        return;
    }
    struct param_use *u = w->u;
    if (!u->sig[0]) {
        snprintf(u->sig, sizeof u->sig, "%s", sig);
        u->dim = f.dim;
        u->trunc_bits = f.trunc_bits;
        u->elem_size = w->elem_size;
        u->offset_param = w->offset_param;
    } else if (f.dim != u->dim || w->elem_size != u->elem_size) {
        mark_nonpointwise(w, is_write, "at two different indices");
    } else if (w->offset_param != u->offset_param) {
        mark_nonpointwise(w, is_write, "at two different byte offsets");
    } else if (f.trunc_bits && (!u->trunc_bits || f.trunc_bits < u->trunc_bits)) {
        u->trunc_bits = f.trunc_bits; /* casts differ: see class_needs_barrier */
    }
    u->strided |= f.strided;
    u->from_groups |= f.from_groups;
}

/* 1 + the index of the scalar parameter that `gep` adds to its pointer in
 * bytes (GEP i8, p, O with O a parameter under integer casts), or 0. */
static unsigned byte_offset_param(const struct walk *w, LLVMValueRef gep)
{
    if (LLVMGetNumOperands(gep) != 2) return 0;
    LLVMTypeRef t = LLVMGetGEPSourceElementType(gep);
    if (LLVMGetTypeKind(t) != LLVMIntegerTypeKind || LLVMGetIntTypeWidth(t) != 8) return 0;
    unsigned bits = 0;
    LLVMValueRef o = fuse_strip_int_casts(LLVMGetOperand(gep, 1), &bits);
    if (!LLVMIsAArgument(o) || bits) return 0;
    unsigned n = LLVMCountParams(w->fn);
    for (unsigned j = 0; j < n; j++)
        if (LLVMGetParam(w->fn, j) == o) return j + 1;
    return 0;
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
            unsigned nops = (unsigned)LLVMGetNumOperands(user), off;
            if (!w->index && !w->offset_param && (off = byte_offset_param(w, user)) != 0) {
                struct walk inner = *w; /* the element index comes after the offset */
                inner.offset_param = off;
                walk_pointer(&inner, user, depth + 1);
            } else if (!w->index && nops >= 2 && all_constant_indices(user, 2, 0)) {
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
                if (!strcmp(value_name(fn), "printf")) {
                    /* Fused, each work-item would print the bodies' lines in
                     * turn, where the kernels print all of one, then the next. */
                    occ->calls.printf = 1;
                    snprintf(reason, reason_len, "kernel '%s' calls printf (fused, the kernels' output would "
                             "interleave per work-item)", occ->k->name);
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
        struct walk w = {.u = &occ->use[j], .pname = occ->param_name[j], .td = td, .fn = occ->fn};
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
    uint32_t first_oc = 0;
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
            if (u->strided && occ[i].guarded) {
                snprintf(reason, reason_len,
                         "needs a barrier: kernel '%s' strides over '%s' by the global size, and its "
                         "global size is smaller than the fused range", kn, pn);
                return 1;
            }
            if (u->from_groups && offset[u->dim]) {
                snprintf(reason, reason_len,
                         "needs a barrier: kernel '%s' indexes '%s' by group and local id, and the "
                         "range has a global offset", kn, pn);
                return 1;
            }
            if (u->trunc_bits && u->trunc_bits < 64 &&
                (unsigned long long)(offset[u->dim] + fused_gs[u->dim]) >
                    (1ULL << (u->trunc_bits - 1))) {
                snprintf(reason, reason_len,
                         "needs a barrier: kernel '%s' truncates the index of '%s' to %u bits, "
                         "too few for the range", kn, pn, u->trunc_bits);
                return 1;
            }
            /* A byte offset: the same argument class (value) for every accessor. */
            uint32_t oc = u->offset_param ? occ[i].k->arg_class[u->offset_param - 1] + 1 : 0;
            if (!first) {
                first = u;
                first_oc = oc;
            } else if (oc != first_oc) {
                snprintf(reason, reason_len,
                         "needs a barrier: kernel '%s' offsets '%s' by another byte offset than an "
                         "earlier kernel", kn, pn);
                return 1;
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
