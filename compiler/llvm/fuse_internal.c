/* fuse_internal.c — the `internal` plan option: intermediates kept in registers.
 *
 * The plan's author promises that every buffer (arg class) written by one
 * kernel of the sequence and read by a later one is not needed after the
 * sequence. Such a class is a candidate. Private internalisation keeps one
 * work-item's element of it in a register instead of global memory; it is
 * only sound where one work-item produces and consumes each element, so a
 * candidate is kept in memory, with the reason, when (the escape rules):
 *   - it is bound to two parameters of one kernel;
 *   - some kernel uses it in a way the scan cannot follow (the pointer is
 *     passed to a call, stored, selected, converted to an integer; an
 *     atomic; a volatile access) or at an index other than the work-item's
 *     own element (fuse_scan.c);
 *   - a kernel reads it before the first kernel that writes it (it carries
 *     data into the sequence);
 *   - a kernel touching it runs over a smaller range (the guard could skip
 *     the write its reader expects);
 *   - a barrier separates the bodies (force-barrier: the dependency may
 *     cross work-items).
 * Sub-buffers, SVM and overlapping host memory never reach the fuser
 * (fusion/flaunch.c refuses them), and distinct classes never alias.
 *
 * The transformation, on the fused kernel after inlining: each surviving
 * candidate's parameter is marked noalias (true: its cl_mem is bound to no
 * other parameter and distinct classes never alias), GVN then forwards every
 * load of it from the same work-item's store before it, and
 * fuse_internal_finish deletes the stores — only when no load and no use
 * other than address arithmetic and stores is left. A load GVN could not
 * forward (a path where the element is read without being written just
 * before: a read before the write inside the first writer, a conditional
 * write, separate grid-stride loops) keeps the class in memory, unchanged.
 * So the fused kernel computes the same values as without the option for
 * every other buffer; only the promise about the candidate's final contents
 * is used.
 *
 * With internal=LIST (fuse_request.internal_args) only the classes bound to
 * the named parameters are candidates; a named class that is not written by
 * one kernel and read by a later one is kept with that reason, and a name the
 * sequence lacks refuses the fusion (the plan is wrong, not the kernels).
 *
 * Local memory: where a barrier separates the bodies (force-barrier), a
 * candidate that passes the rules above other than the index and barrier
 * ones is handed to fuse_local.c, which proves that one work-group produces
 * and consumes each element and keeps it in a __local array; else it is
 * stored, with both reasons.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <llvm-c/Core.h>

#include "common/error.h"
#include "compiler/llvm/fuse_int.h"

/* Appends "'name' of 'kernel': reason" to ip->kept, '; '-separated. */
static void keep(struct internal_plan *ip, const char *label, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void keep(struct internal_plan *ip, const char *label, const char *fmt, ...)
{
    size_t at = strlen(ip->kept);
    if (at + 8 >= sizeof ip->kept) return;
    int w = snprintf(ip->kept + at, sizeof ip->kept - at, "%s%s: ", at ? "; " : "", label);
    if (w < 0 || at + (size_t)w >= sizeof ip->kept) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ip->kept + at + (size_t)w, sizeof ip->kept - at - (size_t)w, fmt, ap);
    va_end(ap);
}

static int accesses(const struct param_use *u)
{
    return u->reads || u->writes || u->unknown;
}

/* Why class c (first written by kernel w) must stay in memory, or NULL.
 * for_local: the rules local memory shares (no index or barrier rule: those
 * are fuse_local.c's). */
static const char *refusal(const struct fuse_occ *occ, size_t n, uint32_t c, size_t w, int barrier, int for_local,
                           char *buf, size_t len)
{
    for (size_t i = 0; i < n; i++) {
        const struct fuse_occ *o = &occ[i];
        unsigned bound = 0;
        for (unsigned j = 0; j < o->nparams; j++) {
            if (o->k->arg_class[j] != c) continue;
            const struct param_use *u = &o->use[j];
            if (++bound == 2)
                return snprintf(buf, len, "it is bound to two parameters of kernel '%s'", o->k->name), buf;
            if (u->unknown || (u->nonpointwise && !for_local))
                return snprintf(buf, len, "kernel '%s' %s", o->k->name, u->why), buf;
            if (!accesses(u)) continue;
            if (i < w) return snprintf(buf, len, "kernel '%s' reads it before kernel '%s' writes it",
                                       o->k->name, occ[w].k->name), buf;
            if (o->guarded)
                return snprintf(buf, len, "kernel '%s' runs over a smaller range", o->k->name), buf;
        }
    }
    if (barrier && !for_local) return snprintf(buf, len, "a barrier separates the kernels"), buf;
    return NULL;
}

/* One item "KERNEL.ARG" of an internal= list: [s, dot) and (dot, e). */
struct named_item {
    const char *s;
    size_t dot, e;
};

/* The next item of the list at *at (advanced past it), or 0 at the end. */
static int next_item(const char **at, struct named_item *it)
{
    const char *s = *at;
    if (!s || !*s) return 0;
    size_t e = strcspn(s, ",");
    const char *dot = memchr(s, '.', e);
    it->s = s;
    it->dot = dot ? (size_t)(dot - s) : e;
    it->e = e;
    *at = s[e] ? s + e + 1 : s + e;
    return 1;
}

static int item_kernel_is(const struct named_item *it, const struct fuse_occ *o)
{
    return strlen(o->k->name) == it->dot && !memcmp(it->s, o->k->name, it->dot);
}

/* Whether the item names parameter j of o (whose kernel it names): by
 * kernel_arg_name, or by a decimal index as clSetKernelArg counts. */
static int item_param_is(const struct named_item *it, const struct fuse_occ *o, unsigned j)
{
    const char *a = it->s + it->dot + 1;
    size_t len = it->e > it->dot ? it->e - it->dot - 1 : 0;
    if (len && a[0] >= '0' && a[0] <= '9') {
        unsigned v = 0;
        for (size_t k = 0; k < len; k++) {
            if (a[k] < '0' || a[k] > '9' || v > 100000) return 0;
            v = v * 10 + (unsigned)(a[k] - '0');
        }
        return v == j;
    }
    return strlen(o->param_name[j]) == len && !memcmp(o->param_name[j], a, len);
}

/* Checks that every item names a kernel of the sequence and one of its
 * parameters; 0, or -1 with `reason`. */
static int check_named(const struct fuse_occ *occ, size_t n, const char *only, char *reason, size_t reason_len)
{
    struct named_item it;
    for (const char *at = only; next_item(&at, &it);) {
        int kernel = 0, param = 0;
        for (size_t i = 0; i < n; i++) {
            if (!item_kernel_is(&it, &occ[i])) continue;
            kernel = 1;
            for (unsigned j = 0; j < occ[i].nparams && !param; j++) param = item_param_is(&it, &occ[i], j);
        }
        if (!param) {
            snprintf(reason, reason_len, "internal=%.*s: %s", (int)it.e, it.s,
                     kernel ? "the kernel has no such parameter (names are kernel_arg_name, indices count from 0)"
                            : "no kernel of that name in the sequence");
            return -1;
        }
    }
    return 0;
}

/* Whether the item names a parameter bound to class c. */
static int item_class_is(const struct named_item *it, const struct fuse_occ *occ, size_t n, uint32_t c)
{
    for (size_t i = 0; i < n; i++)
        if (item_kernel_is(it, &occ[i]))
            for (unsigned j = 0; j < occ[i].nparams; j++)
                if (occ[i].k->arg_class[j] == c && item_param_is(it, &occ[i], j)) return 1;
    return 0;
}

/* Whether some item of the list names a parameter bound to class c. */
static int named_class(const struct fuse_occ *occ, size_t n, const char *only, uint32_t c)
{
    struct named_item it;
    for (const char *at = only; next_item(&at, &it);)
        if (item_class_is(&it, occ, n, c)) return 1;
    return 0;
}

int fuse_internal_prepare(LLVMValueRef fused, const struct fuse_occ *occ, size_t n,
                          const unsigned (*map)[FUSE_MAX_PARAMS], int barrier, const char *only,
                          struct internal_plan *ip, char *reason, size_t reason_len)
{
    if (only && check_named(occ, n, only, reason, reason_len) != 0) return CLSHIM_EUNSUPPORTED;
    LLVMContextRef ctx = LLVMGetTypeContext(LLVMTypeOf(fused));
    LLVMAttributeRef noalias = LLVMCreateEnumAttribute(ctx, fuse_attr_kind("noalias"), 0);
    for (size_t w = 0; w < n; w++) {
        const struct fuse_occ *o = &occ[w];
        for (unsigned j = 0; j < o->nparams; j++) {
            const struct param_use *u = &o->use[j];
            if (!(u->writes || u->unknown)) continue;
            uint32_t c = o->k->arg_class[j];
            unsigned q = map[w][j];
            int seen = 0, read_later = 0;
            for (unsigned k = 0; k < ip->count; k++) seen |= ip->param[k] == q;
            for (size_t i = 0; i < w && !seen; i++)
                for (unsigned m = 0; m < occ[i].nparams; m++)
                    if (occ[i].k->arg_class[m] == c && (occ[i].use[m].writes || occ[i].use[m].unknown)) seen = 1;
            for (size_t i = w + 1; i < n && !seen; i++)
                for (unsigned m = 0; m < occ[i].nparams; m++)
                    if (occ[i].k->arg_class[m] == c && (occ[i].use[m].reads || occ[i].use[m].unknown))
                        read_later = 1;
            if (seen || !read_later || ip->count == FUSE_MAX_PARAMS) continue;
            if (only && !named_class(occ, n, only, c)) continue; /* not named: stored, as asked */
            struct internal_candidate *cand = &ip->cand[ip->count];
            ip->param[ip->count++] = q;
            cand->cls = c;
            snprintf(cand->label, sizeof cand->label, "'%s' of '%s'", o->param_name[j], o->k->name);
            LLVMTypeRef t = LLVMTypeOf(LLVMGetParam(fused, q));
            char buf[300];
            const char *why = refusal(occ, n, c, w, barrier, 0, buf, sizeof buf);
            int global = LLVMGetTypeKind(t) == LLVMPointerTypeKind && LLVMGetPointerAddressSpace(t) == AS_GLOBAL;
            if (!why && !global) why = "it is not a __global pointer";
            char local_buf[300];
            if (why && barrier && global && !refusal(occ, n, c, w, barrier, 1, local_buf, sizeof local_buf)) {
                cand->local = 1; /* one work-group may produce and consume it: fuse_internal_finish decides */
                continue;
            }
            if (why) {
                cand->refused = 1;
                keep(ip, cand->label, "%s", why);
                continue;
            }
            LLVMAddAttributeAtIndex(fused, q + 1, noalias);
        }
    }
    /* A named buffer that is no candidate: one reason, and it is stored. */
    struct named_item it;
    for (const char *at = only; next_item(&at, &it);) {
        int candidate = 0;
        for (unsigned k = 0; k < ip->count && !candidate; k++)
            candidate = item_class_is(&it, occ, n, ip->cand[k].cls);
        if (!candidate) {
            char label[200];
            snprintf(label, sizeof label, "internal=%.*s", (int)it.e, it.s);
            keep(ip, label, "%s", "it is not written by one kernel of the sequence and read by a later one");
        }
    }
    return 0;
}

/* Collects the stores through v (a pointer derived from the parameter by
 * casts and GEPs). Returns NULL, or what else uses it. */
static const char *collect_stores(LLVMValueRef v, LLVMValueRef **stores, size_t *n, size_t *cap, int depth)
{
    if (depth > 32) return "its address is derived too deeply to follow";
    for (LLVMUseRef use = LLVMGetFirstUse(v); use; use = LLVMGetNextUse(use)) {
        LLVMValueRef user = LLVMGetUser(use);
        if (!LLVMIsAInstruction(user)) return "it is used in a constant expression";
        LLVMOpcode op = LLVMGetInstructionOpcode(user);
        const char *why = NULL;
        if (op == LLVMBitCast || op == LLVMAddrSpaceCast || (op == LLVMGetElementPtr && LLVMGetOperand(user, 0) == v)) {
            why = collect_stores(user, stores, n, cap, depth + 1);
        } else if (op == LLVMStore && LLVMGetOperand(user, 1) == v && !LLVMGetVolatile(user)) {
            if (*n == *cap) {
                size_t c = *cap ? *cap * 2 : 16;
                LLVMValueRef *s = realloc(*stores, c * sizeof *s);
                if (!s) return "out of memory";
                *stores = s, *cap = c;
            }
            (*stores)[(*n)++] = user;
        } else if (op == LLVMLoad) {
            why = "the fused kernel still loads it where the same work-item did not store it just before "
                  "(a read before the write, a conditional write, or separate loops)";
        } else {
            why = "its address escapes in the fused kernel (a call, a stored pointer, a phi or select)";
        }
        if (why) return why;
    }
    return NULL;
}

unsigned fuse_internal_finish(LLVMValueRef fused, struct internal_plan *ip)
{
    unsigned done = 0;
    uint64_t local_bytes = 0;
    for (unsigned k = 0; k < ip->count; k++) {
        struct internal_candidate *cand = &ip->cand[k];
        if (cand->refused) continue;
        if (cand->local) {
            char why[300];
            if (fuse_local_internalise(fused, LLVMGetParam(fused, ip->param[k]), &ip->launch, &local_bytes, why,
                                       sizeof why)) {
                ip->local_done++;
                done++;
                size_t at = strlen(ip->done_local);
                snprintf(ip->done_local + at, sizeof ip->done_local - at, "%s%s", at ? ", " : "", cand->label);
            } else {
                keep(ip, cand->label, "a barrier separates the kernels (so not in registers), and not in local "
                     "memory: %s", why);
            }
            continue;
        }
        LLVMValueRef *stores = NULL;
        size_t nstores = 0, cap = 0;
        const char *why = collect_stores(LLVMGetParam(fused, ip->param[k]), &stores, &nstores, &cap, 0);
        if (why) {
            keep(ip, cand->label, "%s", why);
        } else {
            for (size_t s = 0; s < nstores; s++) LLVMInstructionEraseFromParent(stores[s]);
            done++;
            size_t at = strlen(ip->done);
            snprintf(ip->done + at, sizeof ip->done - at, "%s%s", at ? ", " : "", cand->label);
        }
        free(stores);
    }
    return done;
}
