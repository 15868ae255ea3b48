/* fuse_loops.c — merges the bodies' grid-stride loops in a fused kernel.
 *
 * A chain of grid-stride kernels (PyOpenCL's ElementwiseKernel, or
 * `for (i = gid; i < n; i += get_global_size(0))` by hand) fuses into one
 * kernel that runs the bodies' loops one after the other: every element
 * still makes a round trip through memory between loops, and the fused
 * kernel gained little (measured 0.86-1.18x). Merged, one iteration runs
 * every body's iteration for its index, and the value a body stores is the
 * value the next one loads (GVN forwards it).
 *
 * The shape recognised is what clang -O2 emits for such a loop (rotated):
 *   G:  ...  br (icmp P start, bound), pre, S            the guard
 *   pre (optional): pure instructions, br H
 *   H:  iv = phi [start, pre], [next, L]   (the only phi)
 *   ...  blocks of the loop, entered only at H, left only from L
 *   L:  next = add iv, step; br (icmp P next', bound), H, X
 *       (step invariant: from before the loop, or pure of such values)
 *   X:  the exit, reached from G and L only (S is X, or a block that
 *       simplifycfg threaded the known-false guard of a later loop to)
 * Loop B merges into the loop A before it when X_A is G_B, start, step,
 * bound and predicate are the same values (compared structurally), the
 * code between the loops is pure (no memory, no division, readnone calls
 * only: it is hoisted into G_A, and B's preheader code runs when the guard
 * is false), no value of either loop is used outside it, and every memory
 * access in both loops is at element iv of a pointer defined before the loop
 * (GEP base, iv through integer casts, constant trailing indices) — loads
 * may also read anywhere in a parameter neither loop stores to — with no
 * calls that touch memory. With the barrier analysis (fuse_scan.c: every arg
 * class one kernel writes and another accesses is accessed pointwise, one
 * element size and byte offset per class), iteration i of B then touches
 * only elements that iteration i of A touched, so running A(i) B(i) for
 * each i in turn gives what running every A(i) before every B(i) gives.
 * Never used when a barrier was forced.
 */
#include <string.h>

#include <llvm-c/Core.h>

#include "compiler/llvm/fuse_int.h"

#define MAX_LOOP_BLOCKS 64

struct grid_loop {
    LLVMBasicBlockRef guard, pre, header, latch;
    LLVMBasicBlockRef exit;  /* where the latch leaves the loop */
    LLVMBasicBlockRef skip;  /* where the guard goes when the loop runs no trip */
    LLVMValueRef iv, start, next, step, bound;
    LLVMIntPredicate pred;
    LLVMBasicBlockRef blocks[MAX_LOOP_BLOCKS];
    unsigned nblocks;
};

static int is_readnone_call(LLVMValueRef call)
{
    unsigned readnone = fuse_attr_kind("readnone");
    if (LLVMGetCallSiteEnumAttribute(call, LLVMAttributeFunctionIndex, readnone)) return 1;
    LLVMValueRef callee = LLVMGetCalledValue(call);
    return callee && LLVMIsAFunction(callee) &&
           LLVMGetEnumAttributeAtIndex(callee, LLVMAttributeFunctionIndex, readnone) != NULL;
}

/* No memory, no trap, no side effect: safe to compare, hoist and speculate. */
static int is_pure(LLVMValueRef v)
{
    switch (LLVMGetInstructionOpcode(v)) {
    case LLVMAdd: case LLVMFAdd: case LLVMSub: case LLVMFSub: case LLVMMul: case LLVMFMul:
    case LLVMFDiv: case LLVMFRem: case LLVMShl: case LLVMLShr: case LLVMAShr:
    case LLVMAnd: case LLVMOr: case LLVMXor: case LLVMFNeg:
    case LLVMTrunc: case LLVMZExt: case LLVMSExt: case LLVMFPToUI: case LLVMFPToSI:
    case LLVMUIToFP: case LLVMSIToFP: case LLVMFPTrunc: case LLVMFPExt: case LLVMPtrToInt:
    case LLVMIntToPtr: case LLVMBitCast: case LLVMAddrSpaceCast:
    case LLVMGetElementPtr: case LLVMICmp: case LLVMFCmp: case LLVMSelect:
    case LLVMExtractElement: case LLVMInsertElement: case LLVMShuffleVector:
    case LLVMExtractValue: case LLVMInsertValue: case LLVMFreeze:
        return 1;
    case LLVMCall:
        return is_readnone_call(v);
    default:
        return 0;
    }
}

/* a and b compute the same value: the same value, or the same pure
 * instruction on the same values. */
static int same_value(LLVMValueRef a, LLVMValueRef b, int depth)
{
    if (a == b) return 1;
    if (depth > 8 || !LLVMIsAInstruction(a) || !LLVMIsAInstruction(b)) return 0;
    if (LLVMGetInstructionOpcode(a) != LLVMGetInstructionOpcode(b) || LLVMTypeOf(a) != LLVMTypeOf(b) ||
        !is_pure(a) || !is_pure(b))
        return 0;
    int n = LLVMGetNumOperands(a);
    if (n != LLVMGetNumOperands(b)) return 0;
    LLVMOpcode op = LLVMGetInstructionOpcode(a);
    if (op == LLVMICmp && LLVMGetICmpPredicate(a) != LLVMGetICmpPredicate(b)) return 0;
    if (op == LLVMFCmp && LLVMGetFCmpPredicate(a) != LLVMGetFCmpPredicate(b)) return 0;
    if (op == LLVMGetElementPtr && LLVMGetGEPSourceElementType(a) != LLVMGetGEPSourceElementType(b))
        return 0;
    if (op == LLVMExtractValue || op == LLVMInsertValue || op == LLVMShuffleVector) return 0; /* indices not compared */
    for (int i = 0; i < n; i++)
        if (!same_value(LLVMGetOperand(a, (unsigned)i), LLVMGetOperand(b, (unsigned)i), depth + 1)) return 0;
    return 1;
}

/* Edges into bb from the function's blocks; the first `cap` sources in from[]. */
static unsigned preds(LLVMValueRef fn, LLVMBasicBlockRef bb, LLVMBasicBlockRef *from, unsigned cap)
{
    unsigned n = 0;
    for (LLVMBasicBlockRef p = LLVMGetFirstBasicBlock(fn); p; p = LLVMGetNextBasicBlock(p)) {
        LLVMValueRef t = LLVMGetBasicBlockTerminator(p);
        if (!t) continue;
        for (unsigned s = 0; s < LLVMGetNumSuccessors(t); s++)
            if (LLVMGetSuccessor(t, s) == bb) {
                if (n < cap) from[n] = p;
                n++;
            }
    }
    return n;
}

static int in_blocks(const struct grid_loop *l, LLVMBasicBlockRef bb)
{
    for (unsigned i = 0; i < l->nblocks; i++)
        if (l->blocks[i] == bb) return 1;
    return 0;
}

static int defined_in(const struct grid_loop *l, LLVMValueRef v)
{
    return LLVMIsAInstruction(v) && in_blocks(l, LLVMGetInstructionParent(v));
}

/* v has one value for every trip: defined before the loop, or a pure
 * instruction of such values (get_global_size(0) called in the loop). */
static int invariant(const struct grid_loop *l, LLVMValueRef v, int depth)
{
    if (!defined_in(l, v)) return 1;
    if (depth > 4 || LLVMIsAPHINode(v) || !is_pure(v)) return 0;
    for (int i = 0; i < LLVMGetNumOperands(v); i++)
        if (!invariant(l, LLVMGetOperand(v, (unsigned)i), depth + 1)) return 0;
    return 1;
}

static int conditional_icmp_branch(LLVMValueRef term, LLVMValueRef *cmp)
{
    if (!term || LLVMGetInstructionOpcode(term) != LLVMBr || !LLVMIsConditional(term)) return 0;
    *cmp = LLVMGetCondition(term);
    return LLVMIsAICmpInst(*cmp) != NULL;
}

/* The loop's blocks: reachable from the header without passing the exit;
 * entered only at the header, left only from the latch. */
static int collect_blocks(LLVMValueRef fn, struct grid_loop *l)
{
    l->nblocks = 0;
    l->blocks[l->nblocks++] = l->header;
    for (unsigned i = 0; i < l->nblocks; i++) {
        LLVMValueRef t = LLVMGetBasicBlockTerminator(l->blocks[i]);
        if (!t || LLVMGetInstructionOpcode(t) != LLVMBr) return 0;
        for (unsigned s = 0; s < LLVMGetNumSuccessors(t); s++) {
            LLVMBasicBlockRef to = LLVMGetSuccessor(t, s);
            if (to == l->exit) {
                if (l->blocks[i] != l->latch) return 0;
                continue;
            }
            if (in_blocks(l, to)) continue;
            if (l->nblocks == MAX_LOOP_BLOCKS) return 0;
            l->blocks[l->nblocks++] = to;
        }
    }
    if (!in_blocks(l, l->latch)) return 0;
    LLVMBasicBlockRef from[4];
    for (unsigned i = 0; i < l->nblocks; i++) {
        unsigned n = preds(fn, l->blocks[i], from, 4);
        if (n > 4) return 0;
        for (unsigned j = 0; j < n; j++)
            if (!in_blocks(l, from[j]) && !(l->blocks[i] == l->header && from[j] == (l->pre ? l->pre : l->guard)))
                return 0;
    }
    return 1;
}

/* A guarded grid-stride loop starting at block g, or 0. */
static int recognise(LLVMValueRef fn, LLVMBasicBlockRef g, struct grid_loop *l)
{
    memset(l, 0, sizeof *l);
    LLVMValueRef guard;
    if (!conditional_icmp_branch(LLVMGetBasicBlockTerminator(g), &guard)) return 0;
    l->guard = g;
    l->skip = LLVMGetSuccessor(LLVMGetBasicBlockTerminator(g), 1);
    LLVMBasicBlockRef first = LLVMGetSuccessor(LLVMGetBasicBlockTerminator(g), 0);
    LLVMValueRef head = LLVMGetFirstInstruction(first);
    if (head && LLVMIsAPHINode(head)) {
        l->header = first;
    } else {
        LLVMValueRef t = LLVMGetBasicBlockTerminator(first);
        LLVMBasicBlockRef from[2];
        if (!t || LLVMGetInstructionOpcode(t) != LLVMBr || LLVMIsConditional(t) ||
            preds(fn, first, from, 2) != 1)
            return 0;
        l->pre = first;
        l->header = LLVMGetSuccessor(t, 0);
    }
    LLVMValueRef iv = LLVMGetFirstInstruction(l->header);
    if (!iv || !LLVMIsAPHINode(iv) || LLVMCountIncoming(iv) != 2) return 0;
    LLVMValueRef second = LLVMGetNextInstruction(iv);
    if (second && LLVMIsAPHINode(second)) return 0; /* another loop-carried value */
    LLVMBasicBlockRef entry = l->pre ? l->pre : l->guard;
    for (unsigned k = 0; k < 2; k++) {
        if (LLVMGetIncomingBlock(iv, k) == entry) {
            l->start = LLVMGetIncomingValue(iv, k);
        } else {
            l->latch = LLVMGetIncomingBlock(iv, k);
            l->next = LLVMGetIncomingValue(iv, k);
        }
    }
    if (!l->start || !l->latch || !LLVMIsAInstruction(l->next) ||
        LLVMGetInstructionOpcode(l->next) != LLVMAdd)
        return 0;
    l->iv = iv;
    if (LLVMGetOperand(l->next, 0) == iv) l->step = LLVMGetOperand(l->next, 1);
    else if (LLVMGetOperand(l->next, 1) == iv) l->step = LLVMGetOperand(l->next, 0);
    else return 0;

    LLVMValueRef back, t = LLVMGetBasicBlockTerminator(l->latch);
    if (!conditional_icmp_branch(t, &back) || LLVMGetSuccessor(t, 0) != l->header) return 0;
    l->exit = LLVMGetSuccessor(t, 1);
    if (l->exit == l->header || l->exit == l->guard || l->skip == l->header) return 0;
    l->pred = LLVMGetICmpPredicate(back);
    l->bound = LLVMGetOperand(back, 1);
    if (LLVMGetICmpPredicate(guard) != l->pred || !same_value(LLVMGetOperand(back, 0), l->next, 0) ||
        !same_value(LLVMGetOperand(guard, 0), l->start, 0) ||
        !same_value(LLVMGetOperand(guard, 1), l->bound, 0))
        return 0;
    if (!collect_blocks(fn, l)) return 0;
    return !defined_in(l, l->start) && invariant(l, l->step, 0) && !defined_in(l, l->bound);
}

static LLVMValueRef strip_pointer_casts(LLVMValueRef p)
{
    while (LLVMIsAInstruction(p) && (LLVMGetInstructionOpcode(p) == LLVMBitCast ||
                                     LLVMGetInstructionOpcode(p) == LLVMAddrSpaceCast))
        p = LLVMGetOperand(p, 0);
    return p;
}

/* The pointer is element iv of a pointer from before the loop (constant
 * further indices: a field of that element). */
static int at_index(const struct grid_loop *l, LLVMValueRef ptr)
{
    ptr = strip_pointer_casts(ptr);
    if (!LLVMIsAGetElementPtrInst(ptr) || LLVMGetNumOperands(ptr) < 2) return 0;
    if (defined_in(l, LLVMGetOperand(ptr, 0))) return 0;
    unsigned trunc_bits = 0; /* wide enough for the fused range: the barrier analysis checked */
    if (fuse_strip_int_casts(LLVMGetOperand(ptr, 1), &trunc_bits) != l->iv) return 0;
    for (int k = 2; k < LLVMGetNumOperands(ptr); k++)
        if (!LLVMIsAConstantInt(LLVMGetOperand(ptr, (unsigned)k))) return 0;
    return 1;
}

/* The object a pointer is derived from: a kernel parameter, a global, ... */
static LLVMValueRef root_of(LLVMValueRef p)
{
    for (int depth = 0; depth < 16; depth++) {
        p = strip_pointer_casts(p);
        if (!LLVMIsAGetElementPtrInst(p)) break;
        p = LLVMGetOperand(p, 0);
    }
    return p;
}

#define MAX_STORE_ROOTS 64

struct store_roots {
    LLVMValueRef v[MAX_STORE_ROOTS];
    unsigned n;
};

/* The objects the loop stores to; 0 when there are too many to track. */
static int add_store_roots(const struct grid_loop *l, struct store_roots *r)
{
    for (unsigned i = 0; i < l->nblocks; i++)
        for (LLVMValueRef v = LLVMGetFirstInstruction(l->blocks[i]); v; v = LLVMGetNextInstruction(v)) {
            if (LLVMGetInstructionOpcode(v) != LLVMStore) continue;
            LLVMValueRef root = root_of(LLVMGetOperand(v, 1));
            unsigned k = 0;
            while (k < r->n && r->v[k] != root) k++;
            if (k < r->n) continue;
            if (r->n == MAX_STORE_ROOTS) return 0;
            r->v[r->n++] = root;
        }
    return 1;
}

/* A load away from the index is safe when it reads a kernel parameter (or
 * a constant global) that neither loop stores to: distinct parameters are
 * distinct arg classes, which never alias. */
static int read_only_load(LLVMValueRef ptr, const struct store_roots *stored)
{
    LLVMValueRef root = root_of(ptr);
    if (!LLVMIsAArgument(root) && !(LLVMIsAGlobalVariable(root) && LLVMIsGlobalConstant(root))) return 0;
    for (unsigned k = 0; k < stored->n; k++)
        if (stored->v[k] == root) return 0;
    return 1;
}

/* Every store at element iv of a pointer from before the loop, every load
 * there too or from an object neither loop stores to; no call that touches
 * memory, no value used outside the loop. */
static int loop_is_pointwise(const struct grid_loop *l, const struct store_roots *stored)
{
    for (unsigned i = 0; i < l->nblocks; i++) {
        for (LLVMValueRef v = LLVMGetFirstInstruction(l->blocks[i]); v; v = LLVMGetNextInstruction(v)) {
            for (LLVMUseRef u = LLVMGetFirstUse(v); u; u = LLVMGetNextUse(u)) {
                LLVMValueRef user = LLVMGetUser(u);
                if (!LLVMIsAInstruction(user) || !in_blocks(l, LLVMGetInstructionParent(user))) return 0;
            }
            switch (LLVMGetInstructionOpcode(v)) {
            case LLVMLoad:
                if (LLVMGetVolatile(v)) return 0;
                if (!at_index(l, LLVMGetOperand(v, 0)) && !read_only_load(LLVMGetOperand(v, 0), stored))
                    return 0;
                break;
            case LLVMStore:
                if (LLVMGetVolatile(v) || !at_index(l, LLVMGetOperand(v, 1))) return 0;
                break;
            case LLVMCall:
                if (!is_readnone_call(v)) return 0;
                break;
            case LLVMAtomicRMW: case LLVMAtomicCmpXchg: case LLVMFence: case LLVMAlloca: case LLVMVAArg:
                return 0;
            default:
                break;
            }
        }
    }
    return 1;
}

static int block_is_pure(LLVMBasicBlockRef bb)
{
    LLVMValueRef term = LLVMGetBasicBlockTerminator(bb);
    for (LLVMValueRef v = LLVMGetFirstInstruction(bb); v && v != term; v = LLVMGetNextInstruction(v))
        if (LLVMIsAPHINode(v) || !is_pure(v)) return 0;
    return 1;
}

static int can_merge(LLVMValueRef fn, const struct grid_loop *a, const struct grid_loop *b)
{
    LLVMBasicBlockRef from[3];
    if (a->exit != b->guard || a->pred != b->pred) return 0;
    /* a's guard, when false, goes on to b's guard (or past it, threaded) */
    if (a->skip != a->exit && a->skip != b->skip) return 0;
    unsigned n = preds(fn, a->exit, from, 3); /* the guard and the latch of a */
    if (n > 2) return 0;
    for (unsigned i = 0; i < n; i++)
        if (from[i] != a->guard && from[i] != a->latch) return 0;
    if (!same_value(a->start, b->start, 0) || !same_value(a->step, b->step, 0) ||
        !same_value(a->bound, b->bound, 0))
        return 0;
    if (!block_is_pure(a->exit) || (b->pre && !block_is_pure(b->pre))) return 0;
    LLVMValueRef after = LLVMGetFirstInstruction(b->skip); /* its predecessors change */
    if (after && LLVMIsAPHINode(after)) return 0;
    struct store_roots stored = {.n = 0};
    if (!add_store_roots(a, &stored) || !add_store_roots(b, &stored)) return 0;
    return loop_is_pointwise(a, &stored) && loop_is_pointwise(b, &stored);
}

/* Moves bb's instructions but its terminator to the end of `to`, before its terminator. */
static void hoist_block(LLVMBuilderRef bld, LLVMBasicBlockRef bb, LLVMBasicBlockRef to)
{
    LLVMValueRef term = LLVMGetBasicBlockTerminator(bb), v;
    while ((v = LLVMGetFirstInstruction(bb)) != term) {
        LLVMInstructionRemoveFromParent(v);
        LLVMPositionBuilderBefore(bld, LLVMGetBasicBlockTerminator(to));
        LLVMInsertIntoBuilder(bld, v);
    }
}

static void replace_terminator(LLVMBuilderRef bld, LLVMBasicBlockRef bb, LLVMValueRef cond,
                               LLVMBasicBlockRef then_bb, LLVMBasicBlockRef else_bb)
{
    LLVMInstructionEraseFromParent(LLVMGetBasicBlockTerminator(bb));
    LLVMPositionBuilderAtEnd(bld, bb);
    if (cond) LLVMBuildCondBr(bld, cond, then_bb, else_bb);
    else LLVMBuildBr(bld, then_bb);
}

/* b's iterations run inside a's: a's latch continues into b's header, b's
 * latch closes the loop; the code between them moves up to a's guard. a's
 * exit (b's guard) and b's preheader are deleted. */
static void merge(LLVMBuilderRef bld, const struct grid_loop *a, const struct grid_loop *b)
{
    hoist_block(bld, a->exit, a->guard);
    if (b->pre) hoist_block(bld, b->pre, a->guard);

    LLVMReplaceAllUsesWith(b->iv, a->iv);
    LLVMInstructionEraseFromParent(b->iv);
    LLVMValueRef b_back = LLVMGetCondition(LLVMGetBasicBlockTerminator(b->latch));
    replace_terminator(bld, a->latch, NULL, b->header, NULL);
    replace_terminator(bld, b->latch, b_back, a->header, b->exit);
    /* b's guard holds exactly when a's does (same start, bound, predicate):
     * a's guard skips both loops, and the block between them goes. */
    LLVMSetSuccessor(LLVMGetBasicBlockTerminator(a->guard), 1, b->skip);
    LLVMDeleteBasicBlock(a->exit); /* first: its branch names b's preheader */
    if (b->pre) LLVMDeleteBasicBlock(b->pre);

    /* the phi's back edge now comes from b's latch */
    LLVMPositionBuilderBefore(bld, a->iv);
    LLVMValueRef iv = LLVMBuildPhi(bld, LLVMTypeOf(a->iv), "");
    LLVMValueRef vals[2] = {a->start, a->next};
    LLVMBasicBlockRef from[2] = {a->pre ? a->pre : a->guard, b->latch};
    LLVMAddIncoming(iv, vals, from, 2);
    LLVMReplaceAllUsesWith(a->iv, iv);
    LLVMInstructionEraseFromParent(a->iv);
}

unsigned fuse_merge_grid_loops(LLVMValueRef fn)
{
    unsigned merged = 0;
    LLVMBuilderRef bld = LLVMCreateBuilderInContext(LLVMGetTypeContext(LLVMTypeOf(fn)));
    for (LLVMBasicBlockRef g = LLVMGetFirstBasicBlock(fn); g; g = LLVMGetNextBasicBlock(g)) {
        struct grid_loop a, b;
        while (recognise(fn, g, &a) && recognise(fn, a.exit, &b) && can_merge(fn, &a, &b)) {
            merge(bld, &a, &b);
            merged++;
        }
    }
    LLVMDisposeBuilder(bld);
    return merged;
}
