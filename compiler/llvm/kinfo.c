/* kinfo.c — what generated OpenCL C needs to know of a kernel
 * (llvm_api.h `kernel_info`), and bitcode as text (`bitcode_to_text`).
 *
 * Route (b) of fusion (fusion/fuse_source.h) writes a fused kernel in
 * OpenCL C that calls the original kernels; its parameter list is spelled
 * from the kernel_arg_* metadata clang writes into clshim's own IR of the
 * source (frontend.h adds -cl-kernel-arg-info), so no driver is asked.
 * Kernel-scope __local variables are recognised by clang's naming: they
 * become addrspace(3) globals called "<kernel>.<variable>".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <llvm-c/BitReader.h>
#include <llvm-c/Core.h>

#include "common/error.h"
#include "compiler/llvm/fuse_int.h"
#include "compiler/llvm/glue.h"

struct diag {
    char text[256];
};

static void on_diagnostic(LLVMDiagnosticInfoRef info, void *arg)
{
    struct diag *d = arg;
    if (LLVMGetDiagInfoSeverity(info) != LLVMDSError || d->text[0]) return;
    char *msg = LLVMGetDiagInfoDescription(info);
    snprintf(d->text, sizeof d->text, "%s", msg ? msg : "error");
    LLVMDisposeMessage(msg);
}

static LLVMModuleRef parse(LLVMContextRef ctx, struct diag *d, const void *bc, size_t size, char *err,
                           size_t err_len)
{
    LLVMMemoryBufferRef buf = LLVMCreateMemoryBufferWithMemoryRange(bc, size, "clshim-kinfo", 0);
    LLVMModuleRef mod = NULL;
    if (LLVMParseBitcodeInContext2(ctx, buf, &mod) || !mod) {
        snprintf(err, err_len, "not readable bitcode: %s", d->text[0] ? d->text : "parse error");
        mod = NULL;
    }
    LLVMDisposeMemoryBuffer(buf);
    return mod;
}

/* The string operands of metadata `kind` on fn: 0 with ops filled, -1 when
 * absent or of another length. */
static int md_strings(LLVMContextRef ctx, LLVMValueRef fn, const char *kind, unsigned n, LLVMValueRef *ops)
{
    unsigned id = LLVMGetMDKindIDInContext(ctx, kind, (unsigned)strlen(kind));
    size_t count = 0;
    LLVMValueMetadataEntry *all = LLVMGlobalCopyAllMetadata(fn, &count);
    LLVMMetadataRef node = NULL;
    for (unsigned i = 0; i < count; i++)
        if (LLVMValueMetadataEntriesGetKind(all, i) == id) node = LLVMValueMetadataEntriesGetMetadata(all, i);
    if (all) LLVMDisposeValueMetadataEntries(all);
    if (!node) return -1;
    LLVMValueRef v = LLVMMetadataAsValue(ctx, node);
    if (LLVMGetMDNodeNumOperands(v) != n) return -1;
    LLVMGetMDNodeOperands(v, ops);
    return 0;
}

static const char *md_text(LLVMValueRef op, unsigned *len)
{
    *len = 0;
    return op && LLVMIsAMDString(op) ? LLVMGetMDString(op, len) : NULL;
}

/* The work-item functions called by fn or any function it calls
 * (depth-first over direct calls; `seen` holds the functions visited). */
struct visit {
    LLVMValueRef seen[256];
    unsigned n;
    int overflow;
};

static uint32_t calls_of(LLVMValueRef fn, struct visit *v)
{
    static const struct {
        const char *name;
        uint32_t bit;
    } table[] = {
        {"get_global_size", KI_CALLS_GLOBAL_SIZE},   {"get_num_groups", KI_CALLS_NUM_GROUPS},
        {"get_global_linear_id", KI_CALLS_LINEAR},   {"get_local_id", KI_CALLS_LOCAL},
        {"get_local_size", KI_CALLS_LOCAL},          {"get_group_id", KI_CALLS_LOCAL},
        {"get_enqueued_local_size", KI_CALLS_LOCAL}, {"get_local_linear_id", KI_CALLS_LOCAL},
    };
    for (unsigned i = 0; i < v->n; i++)
        if (v->seen[i] == fn) return 0;
    if (v->n == sizeof v->seen / sizeof v->seen[0]) {
        v->overflow = 1;
        return 0;
    }
    v->seen[v->n++] = fn;
    if (LLVMIsDeclaration(fn)) {
        size_t len = 0;
        const char *name = fuse_builtin_name(LLVMGetValueName(fn), &len);
        for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
            if (fuse_name_is(name, len, table[i].name)) return table[i].bit;
        return 0;
    }
    uint32_t calls = 0;
    for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(fn); bb; bb = LLVMGetNextBasicBlock(bb))
        for (LLVMValueRef in = LLVMGetFirstInstruction(bb); in; in = LLVMGetNextInstruction(in)) {
            if (!LLVMIsACallInst(in)) continue;
            LLVMValueRef callee = LLVMGetCalledValue(in);
            if (callee && LLVMIsAFunction(callee)) calls |= calls_of(callee, v);
            else v->overflow = 1; /* an indirect call: anything */
        }
    return calls;
}

static int has_scope_locals(LLVMModuleRef mod, const char *kernel)
{
    size_t kl = strlen(kernel);
    for (LLVMValueRef g = LLVMGetFirstGlobal(mod); g; g = LLVMGetNextGlobal(g)) {
        if (LLVMGetPointerAddressSpace(LLVMTypeOf(g)) != 3) continue;
        size_t len = 0;
        const char *name = LLVMGetValueName2(g, &len);
        if (len > kl && !memcmp(name, kernel, kl) && name[kl] == '.') return 1;
    }
    return 0;
}

static int fill(LLVMContextRef ctx, LLVMModuleRef mod, const char *name, struct kernel_info *out, char *err,
                size_t err_len)
{
    LLVMValueRef fn = LLVMGetNamedFunction(mod, name);
    if (!fn || LLVMIsDeclaration(fn))
        return snprintf(err, err_len, "no kernel '%s' in the module", name), CLSHIM_EINVAL;
    unsigned n = LLVMCountParams(fn);
    if (n > FUSE_MAX_PARAMS) return snprintf(err, err_len, "kernel '%s' has too many parameters", name), CLSHIM_EINVAL;
    LLVMValueRef types[FUSE_MAX_PARAMS], quals[FUSE_MAX_PARAMS], names[FUSE_MAX_PARAMS], spaces[FUSE_MAX_PARAMS];
    if (n && (md_strings(ctx, fn, "kernel_arg_type", n, types) || md_strings(ctx, fn, "kernel_arg_type_qual", n, quals) ||
              md_strings(ctx, fn, "kernel_arg_addr_space", n, spaces)))
        return snprintf(err, err_len, "kernel '%s' has no argument metadata", name), CLSHIM_EINVAL;
    int have_names = n && md_strings(ctx, fn, "kernel_arg_name", n, names) == 0;
    out->params = calloc(n ? n : 1, sizeof *out->params);
    if (!out->params) return snprintf(err, err_len, "out of memory"), CLSHIM_ENOMEM;
    out->num_params = n;
    for (unsigned j = 0; j < n; j++) {
        struct kernel_param_info *p = &out->params[j];
        unsigned len = 0;
        const char *s = md_text(types[j], &len);
        if (!s || !len || len >= sizeof p->type)
            return snprintf(err, err_len, "kernel '%s': parameter %u has no usable type", name, j), CLSHIM_EINVAL;
        memcpy(p->type, s, len);
        s = md_text(quals[j], &len);
        for (const char *q = s, *end = s + len; s && q < end;) {
            const char *w = q;
            while (q < end && *q != ' ') q++;
            if (q - w == 5 && !memcmp(w, "const", 5)) p->qual |= KI_CONST;
            if (q - w == 8 && !memcmp(w, "volatile", 8)) p->qual |= KI_VOLATILE;
            if (q - w == 8 && !memcmp(w, "restrict", 8)) p->qual |= KI_RESTRICT;
            if (q - w == 4 && !memcmp(w, "pipe", 4))
                return snprintf(err, err_len, "kernel '%s': pipe parameters", name), CLSHIM_EINVAL;
            while (q < end && *q == ' ') q++;
        }
        p->addr_space = LLVMIsAConstantInt(spaces[j]) ? (uint32_t)LLVMConstIntGetZExtValue(spaces[j]) : 0;
        if (have_names && (s = md_text(names[j], &len)) && len < sizeof p->name) memcpy(p->name, s, len);
    }
    unsigned id = LLVMGetMDKindIDInContext(ctx, "reqd_work_group_size", 20);
    size_t count = 0;
    LLVMValueMetadataEntry *all = LLVMGlobalCopyAllMetadata(fn, &count);
    for (unsigned i = 0; i < count; i++) {
        if (LLVMValueMetadataEntriesGetKind(all, i) != id) continue;
        LLVMValueRef v = LLVMMetadataAsValue(ctx, LLVMValueMetadataEntriesGetMetadata(all, i));
        LLVMValueRef ops[3];
        if (LLVMGetMDNodeNumOperands(v) != 3) continue;
        LLVMGetMDNodeOperands(v, ops);
        for (int d = 0; d < 3; d++)
            if (ops[d] && LLVMIsAConstantInt(ops[d])) out->reqd_wg[d] = (uint32_t)LLVMConstIntGetZExtValue(ops[d]);
    }
    if (all) LLVMDisposeValueMetadataEntries(all);
    struct visit *v = calloc(1, sizeof *v);
    if (!v) return snprintf(err, err_len, "out of memory"), CLSHIM_ENOMEM;
    out->calls = calls_of(fn, v);
    if (v->overflow) out->calls = ~0u;
    for (unsigned i = 0; i < v->n && !out->kernel_scope_locals; i++) /* itself, or a kernel it calls */
        if (!LLVMIsDeclaration(v->seen[i])) out->kernel_scope_locals = has_scope_locals(mod, LLVMGetValueName(v->seen[i]));
    free(v);
    return 0;
}

int kinfo_kernel(const void *bitcode, size_t size, const char *name, struct kernel_info *out, char *err,
                 size_t err_len)
{
    char scratch[8];
    if (!err || !err_len) {
        err = scratch;
        err_len = sizeof scratch;
    }
    err[0] = '\0';
    if (!out || !bitcode || !name) return snprintf(err, err_len, "kernel_info: missing argument"), CLSHIM_EINVAL;
    memset(out, 0, sizeof *out);
    struct diag d = {""};
    LLVMContextRef ctx = LLVMContextCreate();
    glue_context_typed_pointers(ctx);
    LLVMContextSetDiagnosticHandler(ctx, on_diagnostic, &d);
    LLVMModuleRef mod = parse(ctx, &d, bitcode, size, err, err_len);
    int rc = mod ? fill(ctx, mod, name, out, err, err_len) : CLSHIM_EINVAL;
    if (rc) {
        free(out->params);
        memset(out, 0, sizeof *out);
    }
    if (mod) LLVMDisposeModule(mod);
    LLVMContextDispose(ctx);
    return rc;
}

int kinfo_text(const void *bitcode, size_t size, char **text, char *err, size_t err_len)
{
    char scratch[8];
    if (!err || !err_len) {
        err = scratch;
        err_len = sizeof scratch;
    }
    err[0] = '\0';
    if (!text || !bitcode) return snprintf(err, err_len, "bitcode_to_text: missing argument"), CLSHIM_EINVAL;
    *text = NULL;
    struct diag d = {""};
    LLVMContextRef ctx = LLVMContextCreate();
    glue_context_typed_pointers(ctx);
    LLVMContextSetDiagnosticHandler(ctx, on_diagnostic, &d);
    LLVMModuleRef mod = parse(ctx, &d, bitcode, size, err, err_len);
    int rc = CLSHIM_EINVAL;
    if (mod) {
        char *s = LLVMPrintModuleToString(mod);
        *text = s ? strdup(s) : NULL;
        LLVMDisposeMessage(s);
        rc = *text ? 0 : (snprintf(err, err_len, "out of memory"), CLSHIM_ENOMEM);
        LLVMDisposeModule(mod);
    }
    LLVMContextDispose(ctx);
    return rc;
}
