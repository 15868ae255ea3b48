/* fuse_local.c — local-memory internalisation: an intermediate one
 * work-group produces and consumes, kept in a __local array.
 *
 * fuse_internal.c hands over a candidate that private internalisation
 * cannot take because a barrier separates the bodies (force-barrier: the
 * consumer reads other work-items' elements), once the escape rules that do
 * not depend on the index have passed (not bound twice, no use the scan
 * cannot follow, not read before its first writer, no smaller range, a
 * __global pointer). This file proves, on the fused kernel after inlining,
 * that every element read is one the same work-group wrote before a
 * barrier all its work-items pass, and then keeps the buffer in an array
 * `__local T[L]` (L: the launch's local size) instead of global memory:
 *
 *   - every kernel's launch is 1-D, has no global offset, and fixes the same
 *     local size L
 *     with the global size a multiple of it (get_local_size(0) == L in
 *     every group, get_global_id(0) == group * L + local id);
 *   - every access is a plain (not volatile, not atomic) load or store of
 *     one element type T through `GEP T, param, E`, and nothing else uses
 *     the parameter (the pointer never escapes);
 *   - every store is in the entry block (so every work-item executes it)
 *     at E = the work-item's position (get_global_id(0), or
 *     get_local_size(0) * get_group_id(0) + get_local_id(0));
 *   - a barrier call with constant flags follows the last store in the
 *     entry block, and every load comes after it (later in the entry block,
 *     or in another block: every other block runs after the entry block);
 *   - every load is at the position, or at get_group_id(0) *
 *     get_local_size(0) + X with X = get_local_id(0), X = Y %
 *     get_local_size(0) or X = Y % C with C <= L: an element of the own
 *     group, so written by a work-item of the group before the barrier;
 *   - no truncation on the way can wrap (the global size fits the
 *     narrowest width);
 *   - the arrays, with the module's own __local variables, fit in 16 KiB
 *     and no kernel takes a __local pointer (the smallest local memory
 *     OpenCL guarantees is 32 KiB; a fused launch the device refuses is
 *     run unfused by fusion/flaunch.c anyway).
 * Then the store to element E becomes a store to array[local id], a load
 * of group * L + X a load of array[X], and the barrier also fences local
 * memory. The values every work-item reads are those it read from global
 * memory in the fused kernel with the buffer stored, so every other buffer
 * is bit for bit the same.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <llvm-c/Core.h>
#include <llvm-c/Target.h>

#include "compiler/llvm/fuse_int.h"

#define LOCAL_BUDGET 16384u /* bytes of __local arrays clshim adds to one kernel */
enum { CLK_LOCAL_MEM_FENCE = 1 };

struct access {
    LLVMValueRef inst;  /* the load or store */
    LLVMValueRef slot;  /* loads: X, the element of the group's array */
};

static int is_op(LLVMValueRef e, LLVMOpcode op)
{
    return e && LLVMIsAInstruction(e) && LLVMGetInstructionOpcode(e) == op;
}

/* Whether e (casts stripped) calls work-item function `name` on dimension 0. */
static int call_dim0(LLVMValueRef e, const char *name, unsigned *trunc_bits)
{
    e = fuse_strip_int_casts(e, trunc_bits);
    if (!LLVMIsACallInst(e) || LLVMGetNumArgOperands(e) != 1) return 0;
    LLVMValueRef fn = LLVMGetCalledValue(e);
    if (!fn || !LLVMIsAFunction(fn)) return 0;
    size_t len, nlen;
    const char *mangled = LLVMGetValueName2(fn, &len);
    const char *base = fuse_builtin_name(mangled, &nlen);
    LLVMValueRef d = LLVMGetOperand(e, 0);
    return fuse_name_is(base, nlen, name) && LLVMIsAConstantInt(d) && LLVMConstIntGetZExtValue(d) == 0;
}

/* e is get_group_id(0) * get_local_size(0) (either order). */
static int group_base(LLVMValueRef e, unsigned *trunc_bits)
{
    e = fuse_strip_int_casts(e, trunc_bits);
    if (!is_op(e, LLVMMul)) return 0;
    for (unsigned m = 0; m < 2; m++)
        if (call_dim0(LLVMGetOperand(e, m), "get_group_id", trunc_bits) &&
            call_dim0(LLVMGetOperand(e, 1 - m), "get_local_size", trunc_bits))
            return 1;
    return 0;
}

/* X within [0, L): get_local_id(0), Y % get_local_size(0), or Y % C with
 * 0 < C <= L. Returns the value to index the array with (X itself). */
static LLVMValueRef in_group_offset(LLVMValueRef e, size_t L, unsigned *trunc_bits)
{
    LLVMValueRef x = fuse_strip_int_casts(e, trunc_bits);
    if (call_dim0(x, "get_local_id", trunc_bits)) return x;
    if (!is_op(x, LLVMURem)) return NULL;
    LLVMValueRef d = LLVMGetOperand(x, 1);
    unsigned ignored = 0;
    if (call_dim0(d, "get_local_size", &ignored)) return x; /* the divisor's width does not matter: it is L */
    if (LLVMIsAConstantInt(d)) {
        unsigned long long c = LLVMConstIntGetZExtValue(d);
        if (c > 0 && c <= L) return x;
    }
    return NULL;
}

/* E is the work-item's position in dimension 0. */
static int is_position(LLVMValueRef e, unsigned *trunc_bits)
{
    if (call_dim0(e, "get_global_id", trunc_bits)) return 1;
    e = fuse_strip_int_casts(e, trunc_bits);
    if (!is_op(e, LLVMAdd)) return 0;
    for (unsigned s = 0; s < 2; s++)
        if (call_dim0(LLVMGetOperand(e, s), "get_local_id", trunc_bits) &&
            group_base(LLVMGetOperand(e, 1 - s), trunc_bits))
            return 1;
    return 0;
}

/* The array slot a load at E reads (NULL: E is not within the group):
 * lid for the position, X for group * L + X. `lid` is NULL here when E is
 * the position; the caller substitutes the local id. */
static int group_read(LLVMValueRef e, size_t L, unsigned *trunc_bits, LLVMValueRef *slot)
{
    *slot = NULL;
    if (is_position(e, trunc_bits)) return 1;
    e = fuse_strip_int_casts(e, trunc_bits);
    if (!is_op(e, LLVMAdd)) return 0;
    for (unsigned s = 0; s < 2; s++) {
        unsigned t = *trunc_bits;
        LLVMValueRef x = in_group_offset(LLVMGetOperand(e, s), L, &t);
        if (x && group_base(LLVMGetOperand(e, 1 - s), &t)) {
            *trunc_bits = t;
            *slot = x;
            return 1;
        }
    }
    return 0;
}

static int is_barrier_call(LLVMValueRef inst)
{
    if (!LLVMIsACallInst(inst)) return 0;
    LLVMValueRef fn = LLVMGetCalledValue(inst);
    if (!fn || !LLVMIsAFunction(fn)) return 0;
    size_t len, nlen;
    const char *base = fuse_builtin_name(LLVMGetValueName2(fn, &len), &nlen);
    return fuse_name_is(base, nlen, "barrier") || fuse_name_is(base, nlen, "work_group_barrier");
}

/* Bytes of the module's __local variables. */
static uint64_t module_local_bytes(LLVMModuleRef mod, LLVMTargetDataRef td)
{
    uint64_t total = 0;
    for (LLVMValueRef g = LLVMGetFirstGlobal(mod); g; g = LLVMGetNextGlobal(g))
        if (LLVMGetPointerAddressSpace(LLVMTypeOf(g)) == AS_LOCAL)
            total += LLVMABISizeOfType(td, LLVMGlobalGetValueType(g));
    return total;
}

static LLVMValueRef local_id_fn(LLVMModuleRef mod, LLVMContextRef ctx)
{
    LLVMValueRef fn = LLVMGetNamedFunction(mod, "_Z12get_local_idj");
    if (fn) return fn;
    LLVMTypeRef i32 = LLVMInt32TypeInContext(ctx), i64 = LLVMInt64TypeInContext(ctx);
    fn = LLVMAddFunction(mod, "_Z12get_local_idj", LLVMFunctionType(i64, &i32, 1, 0));
    LLVMSetFunctionCallConv(fn, 75 /* spir_func */);
    LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex, LLVMCreateEnumAttribute(ctx, fuse_attr_kind("nounwind"), 0));
    LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex, LLVMCreateEnumAttribute(ctx, fuse_attr_kind("readnone"), 0));
    return fn;
}

/* The accesses through param: each a load or store of `GEP T, param, E`.
 * Returns NULL, or why the local rule does not follow them. */
static const char *collect(LLVMValueRef param, struct access *acc, size_t *n, size_t cap, LLVMTypeRef *elem)
{
    *n = 0;
    *elem = NULL;
    for (LLVMUseRef u = LLVMGetFirstUse(param); u; u = LLVMGetNextUse(u)) {
        LLVMValueRef gep = LLVMGetUser(u);
        if (!is_op(gep, LLVMGetElementPtr) || LLVMGetOperand(gep, 0) != param || LLVMGetNumOperands(gep) != 2)
            return "its address is used other than as one element of it (the pointer escapes, or a field "
                   "of an element is accessed)";
        LLVMTypeRef t = LLVMGetGEPSourceElementType(gep);
        for (LLVMUseRef v = LLVMGetFirstUse(gep); v; v = LLVMGetNextUse(v)) {
            LLVMValueRef a = LLVMGetUser(v);
            int load = is_op(a, LLVMLoad), store = is_op(a, LLVMStore) && LLVMGetOperand(a, 1) == gep;
            if (!load && !store) return "an element's address escapes (stored, passed to a call, a phi or select)";
            if (LLVMGetVolatile(a) || LLVMGetOrdering(a) != LLVMAtomicOrderingNotAtomic)
                return "a volatile or atomic access";
            LLVMTypeRef at = load ? LLVMTypeOf(a) : LLVMTypeOf(LLVMGetOperand(a, 0));
            if (at != t || (*elem && *elem != t)) return "it is accessed as more than one type";
            *elem = t;
            if (*n == cap) return "too many accesses";
            acc[(*n)++] = (struct access){a, NULL};
        }
    }
    return *n ? NULL : "no access is left";
}

static int local_rewrite(LLVMValueRef fused, LLVMValueRef param, const struct local_launch *l, uint64_t *budget,
                         struct access *acc, size_t cap, char *why, size_t why_len);

int fuse_local_internalise(LLVMValueRef fused, LLVMValueRef param, const struct local_launch *l, uint64_t *budget,
                           char *why, size_t why_len)
{
    const size_t L = l->local_size;
    if (l->work_dim != 1 || l->offset)
        return snprintf(why, why_len, "the launches are not all 1-D without a global offset"), 0;
    if (!L) return snprintf(why, why_len, "the launch fixes no local size (or not the same one for all)"), 0;
    if (l->global_size % L) return snprintf(why, why_len, "the global size is not a multiple of the local size"), 0;
    for (unsigned q = 0; q < LLVMCountParams(fused); q++) {
        LLVMTypeRef t = LLVMTypeOf(LLVMGetParam(fused, q));
        if (LLVMGetTypeKind(t) == LLVMPointerTypeKind && LLVMGetPointerAddressSpace(t) == AS_LOCAL)
            return snprintf(why, why_len, "a kernel takes a __local pointer (its size is not known)"), 0;
    }
    enum { MAX_ACCESSES = 4096 };
    struct access *acc = malloc(MAX_ACCESSES * sizeof *acc);
    if (!acc) return snprintf(why, why_len, "out of memory"), 0;
    int done = local_rewrite(fused, param, l, budget, acc, MAX_ACCESSES, why, why_len);
    free(acc);
    return done;
}

/* fuse_local_internalise with `acc` room for `cap` accesses. */
static int local_rewrite(LLVMValueRef fused, LLVMValueRef param, const struct local_launch *l, uint64_t *budget,
                         struct access *acc, size_t cap, char *why, size_t why_len)
{
    const size_t L = l->local_size;
    size_t n = 0;
    LLVMTypeRef elem;
    const char *bad = collect(param, acc, &n, cap, &elem);
    if (bad) return snprintf(why, why_len, "%s", bad), 0;

    LLVMBasicBlockRef entry = LLVMGetEntryBasicBlock(fused);
    /* Positions in the entry block; the last store; the first barrier after it. */
    long last_store = -1, barrier_at = -1, pos = 0;
    LLVMValueRef barrier = NULL;
    for (size_t a = 0; a < n; a++) {
        if (!is_op(acc[a].inst, LLVMStore)) continue;
        if (LLVMGetInstructionParent(acc[a].inst) != entry)
            return snprintf(why, why_len, "a store to it is conditional or in a loop"), 0;
    }
    for (LLVMValueRef i = LLVMGetFirstInstruction(entry); i; i = LLVMGetNextInstruction(i), pos++) {
        for (size_t a = 0; a < n; a++)
            if (acc[a].inst == i && is_op(i, LLVMStore)) last_store = pos;
    }
    pos = 0;
    for (LLVMValueRef i = LLVMGetFirstInstruction(entry); i; i = LLVMGetNextInstruction(i), pos++) {
        if (pos > last_store && is_barrier_call(i)) {
            barrier = i;
            barrier_at = pos;
            break;
        }
    }
    if (last_store < 0) return snprintf(why, why_len, "no store to it is left"), 0;
    if (!barrier || !LLVMIsAConstantInt(LLVMGetOperand(barrier, 0)))
        return snprintf(why, why_len, "no barrier with constant flags follows its stores in the entry block"), 0;
    pos = 0;
    for (LLVMValueRef i = LLVMGetFirstInstruction(entry); i && pos < barrier_at; i = LLVMGetNextInstruction(i), pos++)
        for (size_t a = 0; a < n; a++)
            if (acc[a].inst == i && is_op(i, LLVMLoad))
                return snprintf(why, why_len, "it is read before the barrier"), 0;

    /* The indices: stores at the position, loads within the group. */
    unsigned trunc_bits = 0;
    for (size_t a = 0; a < n; a++) {
        LLVMValueRef inst = acc[a].inst;
        LLVMValueRef gep = LLVMGetOperand(inst, is_op(inst, LLVMStore) ? 1 : 0);
        LLVMValueRef e = LLVMGetOperand(gep, 1);
        if (is_op(inst, LLVMStore)) {
            if (!is_position(e, &trunc_bits))
                return snprintf(why, why_len, "a store to it is not at the work-item's own element"), 0;
        } else if (!group_read(e, L, &trunc_bits, &acc[a].slot)) {
            return snprintf(why, why_len, "it is read at an index not proven inside the work-group's elements"), 0;
        }
    }
    if (trunc_bits && trunc_bits < 64 && l->global_size >= (1ull << (trunc_bits - 1)))
        return snprintf(why, why_len, "an index is truncated to %u bits", trunc_bits), 0;

    LLVMModuleRef mod = LLVMGetGlobalParent(fused);
    LLVMTargetDataRef td = LLVMCreateTargetData(LLVMGetDataLayoutStr(mod));
    uint64_t bytes = (uint64_t)L * LLVMABISizeOfType(td, elem);
    uint64_t module_bytes = module_local_bytes(mod, td);
    LLVMDisposeTargetData(td);
    if (bytes + *budget + module_bytes > LOCAL_BUDGET)
        return snprintf(why, why_len, "a __local array of %llu bytes would exceed clshim's %u-byte budget",
                        (unsigned long long)bytes, LOCAL_BUDGET), 0;
    *budget += bytes;

    /* The transformation. */
    LLVMContextRef ctx = LLVMGetModuleContext(mod);
    LLVMTypeRef i32 = LLVMInt32TypeInContext(ctx), i64 = LLVMInt64TypeInContext(ctx);
    LLVMTypeRef arr_t = LLVMArrayType(elem, (unsigned)L);
    /* Named as clang names a kernel's own __local variable ("KERNEL.VAR"):
     * PoCL recognises per-work-group locals by that prefix, and would
     * otherwise share one array among concurrently running work-groups. */
    size_t fn_len;
    const char *fn_name = LLVMGetValueName2(fused, &fn_len);
    char arr_name[320];
    snprintf(arr_name, sizeof arr_name, "%.*s.clshim_local", (int)(fn_len < 256 ? fn_len : 256), fn_name);
    LLVMValueRef arr = LLVMAddGlobalInAddressSpace(mod, arr_t, arr_name, AS_LOCAL);
    LLVMSetLinkage(arr, LLVMInternalLinkage);
    LLVMSetInitializer(arr, LLVMGetUndef(arr_t));
    LLVMSetAlignment(arr, 16);
    LLVMBuilderRef b = LLVMCreateBuilderInContext(ctx);
    LLVMPositionBuilderBefore(b, LLVMGetFirstInstruction(entry));
    LLVMValueRef lid_fn = local_id_fn(mod, ctx), zero32 = LLVMConstInt(i32, 0, 0);
    LLVMValueRef lid = LLVMBuildCall2(b, LLVMGlobalGetValueType(lid_fn), lid_fn, &zero32, 1, "lid");
    LLVMSetInstructionCallConv(lid, 75);
    for (size_t a = 0; a < n; a++) {
        LLVMValueRef inst = acc[a].inst;
        LLVMPositionBuilderBefore(b, inst);
        LLVMValueRef slot = acc[a].slot ? acc[a].slot : lid;
        if (LLVMGetIntTypeWidth(LLVMTypeOf(slot)) < 64) slot = LLVMBuildZExt(b, slot, i64, "");
        LLVMValueRef idx[2] = {LLVMConstInt(i64, 0, 0), slot};
        LLVMValueRef p = LLVMBuildInBoundsGEP2(b, arr_t, arr, idx, 2, "");
        unsigned align = LLVMGetAlignment(inst);
        if (is_op(inst, LLVMStore)) {
            LLVMValueRef s = LLVMBuildStore(b, LLVMGetOperand(inst, 0), p);
            LLVMSetAlignment(s, align);
        } else {
            LLVMValueRef v = LLVMBuildLoad2(b, elem, p, "");
            LLVMSetAlignment(v, align);
            LLVMReplaceAllUsesWith(inst, v);
        }
        LLVMInstructionEraseFromParent(inst);
    }
    LLVMDisposeBuilder(b);
    LLVMValueRef flags = LLVMGetOperand(barrier, 0);
    LLVMSetOperand(barrier, 0,
                   LLVMConstInt(LLVMTypeOf(flags), LLVMConstIntGetZExtValue(flags) | CLK_LOCAL_MEM_FENCE, 0));
    return 1;
}
