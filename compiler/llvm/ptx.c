/* ptx.c — route (a): a SPIR module as PTX for NVIDIA's OpenCL driver
 * (llvm_api.h `spir_to_ptx`).
 *
 * NVIDIA's driver takes neither SPIR nor SPIR-V, but it loads PTX through
 * clCreateProgramWithBinary. A SPIR module (the SPIR-V translator's output,
 * or clshim's fused IR) becomes PTX in five steps:
 *   1. Retarget. The module is read into a context with opaque pointers
 *      (typed SPIR bitcode is upgraded on reading; libclc's NVPTX library
 *      is opaque, and one context cannot hold both). Its text is rewritten:
 *      SPIR's constant address space 2 becomes NVPTX's 4, SPIR's generic 4
 *      becomes NVPTX's generic 0 (private 0, global 1 and local 3 keep their
 *      numbers), both in types and in the names that encode them (the
 *      `.pN` suffixes of intrinsics, the `U3ASN` qualifiers of mangled
 *      built-in names); the spir_kernel / spir_func calling conventions go.
 *      Rewriting the printed module keeps this to one pass over a text that
 *      LLVM then re-reads and verifies; a rewrite that breaks anything is a
 *      parse or verifier error, i.e. a refusal, never wrong code.
 *      Triple nvptx64-nvidia-nvcl (NVPTX then annotates kernel pointer
 *      parameters with their state space, `.ptr .global`, as NVIDIA's own
 *      OpenCL compiler does), NVPTX's data layout, and every former
 *      spir_kernel listed in !nvvm.annotations as a "kernel".
 *   2. Built-ins. Every external function the module calls is checked
 *      against the table of built-ins whose route-(a) lowering matches
 *      NVIDIA's own compile bit for bit (ptx_builtins.c, measured by
 *      tests/compat/nvidia_builtins.sh); a call to any other refuses the
 *      module unless the request allows differences.
 *   3. The work-item functions NVIDIA defines differently (the global
 *      offset) and the native_* built-ins as PTX's approximate
 *      instructions, then libclc's nvptx64--nvidiacl.bc (Debian libclc-15) are linked, only
 *      what is needed (ptx_link.cpp); a function still undefined afterwards
 *      refuses the module (PTX would name an external the driver cannot
 *      resolve).
 *   4. Everything but the kernels is internalised and the module optimised
 *      (default<O3>). Floating-point lowering follows the build options:
 *      -cl-denorms-are-zero / -cl-fast-relaxed-math flush f32 denormals
 *      ("denormal-fp-math-f32"="preserve-sign", which NVPTX turns into
 *      .ftz), -cl-fast-relaxed-math also allows approximate division and
 *      square roots ("unsafe-fp-math").
 *   5. NVPTX emits PTX for sm_XX. LLVM 15 knows sm_20..sm_86 (PTX 7.5);
 *      newer devices get sm_86 code, which their driver JIT-compiles.
 * Each call owns its context; the NVPTX target is initialised once.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <llvm-c/Analysis.h>
#include <llvm-c/BitReader.h>
#include <llvm-c/Core.h>
#include <llvm-c/IRReader.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>

#include "common/error.h"
#include "compiler/llvm/glue.h"

#define NVPTX_TRIPLE "nvptx64-nvidia-nvcl"
#define NVPTX_LAYOUT "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"
#define NEWEST_SM 86u /* LLVM 15's NVPTX back end */
#define DEFAULT_LIBCLC "/usr/lib/clc/nvptx64--nvidiacl.bc"

struct ptx_job {
    LLVMContextRef ctx;
    char diag[300];
    struct ptx_result *res;
};

static int refuse(struct ptx_job *j, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int refuse(struct ptx_job *j, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(j->res->reason, sizeof j->res->reason, fmt, ap);
    va_end(ap);
    return code;
}

static void on_diagnostic(LLVMDiagnosticInfoRef info, void *arg)
{
    struct ptx_job *j = arg;
    if (LLVMGetDiagInfoSeverity(info) != LLVMDSError || j->diag[0]) return;
    char *msg = LLVMGetDiagInfoDescription(info);
    snprintf(j->diag, sizeof j->diag, "%s", msg ? msg : "error");
    LLVMDisposeMessage(msg);
}

/* ---- 1. retargeting -------------------------------------------------------- */


static int ident_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '$' || c == '-';
}

/* A global name (after '@', `n` bytes) with its address spaces renumbered:
 * `.pN` suffixes of intrinsics, `U3ASN` qualifiers of mangled names. */
static int put_name(struct ptx_text *t, const char *name, size_t n)
{
    int intrinsic = n > 5 && !strncmp(name, "llvm.", 5);
    int mangled = n > 2 && !strncmp(name, "_Z", 2);
    for (size_t i = 0; i < n;) {
        int rc = 0;
        if (intrinsic && name[i] == '.' && i + 2 < n && name[i + 1] == 'p' &&
            (name[i + 2] == '2' || name[i + 2] == '4') && (i + 3 == n || !(name[i + 3] >= '0' && name[i + 3] <= '9'))) {
            rc = ptx_text_add(t, name[i + 2] == '2' ? ".p4" : ".p0", 3);
            i += 3;
        } else if (mangled && i + 5 <= n && !strncmp(name + i, "U3AS", 4) && (name[i + 4] == '2' || name[i + 4] == '4')) {
            if (name[i + 4] == '2') rc = ptx_text_add(t, "U3AS4", 5);
            i += 5; /* generic: NVPTX's generic space is the default, unqualified */
        } else {
            rc = ptx_text_add(t, name + i, 1);
            i++;
        }
        if (rc) return rc;
    }
    return 0;
}

/* The printed SPIR module rewritten for NVPTX (see the file comment). */
static int rewrite(const char *in, struct ptx_text *out)
{
    static const struct {
        const char *from, *to;
    } words[] = {
        {" addrspace(2)", " addrspace(4)"},
        {" addrspace(4)", ""},
        {" spir_kernel ", " "},
        {" spir_func ", " "},
    };
    int rc = 0;
    for (const char *p = in; *p && !rc;) {
        size_t w = 0;
        for (; w < sizeof words / sizeof words[0]; w++)
            if (!strncmp(p, words[w].from, strlen(words[w].from))) break;
        if (w < sizeof words / sizeof words[0]) {
            rc = ptx_text_add(out, words[w].to, strlen(words[w].to));
            p += strlen(words[w].from);
            continue;
        }
        if (*p == '@' && p[1] != '"') {
            size_t n = 1;
            while (ident_char(p[n])) n++;
            rc = ptx_text_add(out, "@", 1);
            if (!rc) rc = put_name(out, p + 1, n - 1);
            p += n;
            continue;
        }
        if (*p == ';') { /* comments may quote anything: copy to the end of line */
            size_t n = strcspn(p, "\n");
            rc = ptx_text_add(out, p, n);
            p += n;
            continue;
        }
        rc = ptx_text_add(out, p, 1);
        p++;
    }
    if (!rc && !out->s) rc = ptx_text_add(out, "", 0);
    return rc;
}

static LLVMModuleRef retarget(struct ptx_job *j, LLVMModuleRef spir)
{
    const char *triple = LLVMGetTarget(spir);
    if (strncmp(triple, "spir", 4)) {
        refuse(j, CLSHIM_EINVAL, "not a SPIR module (target triple '%.60s')", triple);
        return NULL;
    }
    /* kernels by their calling convention, before the text loses it */
    size_t nk = 0, cap = 16;
    char **kernels = malloc(cap * sizeof *kernels);
    for (LLVMValueRef fn = LLVMGetFirstFunction(spir); fn && kernels; fn = LLVMGetNextFunction(fn)) {
        if (LLVMGetFunctionCallConv(fn) != LLVMSPIRKERNELCallConv || LLVMIsDeclaration(fn)) continue;
        if (nk == cap) {
            char **more = realloc(kernels, (cap *= 2) * sizeof *kernels);
            if (!more) break;
            kernels = more;
        }
        size_t n;
        kernels[nk++] = strdup(LLVMGetValueName2(fn, &n));
    }
    char *printed = LLVMPrintModuleToString(spir);
    struct ptx_text t = {0};
    int rc = kernels ? rewrite(printed, &t) : CLSHIM_ENOMEM;
    LLVMDisposeMessage(printed);
    LLVMModuleRef mod = NULL;
    if (!rc) {
        char *msg = NULL;
        LLVMMemoryBufferRef buf = LLVMCreateMemoryBufferWithMemoryRangeCopy(t.s, t.len, "clshim-ptx");
        if (LLVMParseIRInContext(j->ctx, buf, &mod, &msg)) { /* takes buf */
            refuse(j, CLSHIM_EUNSUPPORTED, "the retargeted module does not parse: %.300s", msg ? msg : "");
            mod = NULL;
        }
        LLVMDisposeMessage(msg);
    } else {
        refuse(j, rc, "out of memory");
    }
    free(t.s);
    if (mod) {
        LLVMSetTarget(mod, NVPTX_TRIPLE);
        LLVMSetDataLayout(mod, NVPTX_LAYOUT);
        LLVMValueRef one = LLVMConstInt(LLVMInt32TypeInContext(j->ctx), 1, 0);
        for (size_t k = 0; k < nk; k++) {
            LLVMValueRef fn = kernels[k] ? LLVMGetNamedFunction(mod, kernels[k]) : NULL;
            if (!fn) {
                refuse(j, CLSHIM_EUNSUPPORTED, "kernel '%s' lost in retargeting", kernels[k] ? kernels[k] : "?");
                LLVMDisposeModule(mod);
                mod = NULL;
                break;
            }
            LLVMValueRef ops[3] = {fn, LLVMMDStringInContext(j->ctx, "kernel", 6), one};
            LLVMAddNamedMetadataOperand(mod, "nvvm.annotations", LLVMMDNodeInContext(j->ctx, ops, 3));
        }
        if (mod && !nk) {
            refuse(j, CLSHIM_EUNSUPPORTED, "the module has no kernel");
            LLVMDisposeModule(mod);
            mod = NULL;
        }
    }
    for (size_t k = 0; k < nk; k++) free(kernels[k]);
    free(kernels);
    return mod;
}

/* ---- 2. built-ins ---------------------------------------------------------- */

/* External functions the module calls that the table does not hold as
 * matched, into res->unmatched ("a, b, ..."); their count. */
static unsigned check_builtins(LLVMModuleRef mod, unsigned mode, int libdevice, struct ptx_result *res)
{
    unsigned bad = 0;
    size_t at = 0;
    for (LLVMValueRef fn = LLVMGetFirstFunction(mod); fn; fn = LLVMGetNextFunction(fn)) {
        size_t n;
        const char *name = LLVMGetValueName2(fn, &n);
        if (!LLVMIsDeclaration(fn) || !strncmp(name, "llvm.", 5) || !LLVMGetFirstUse(fn)) continue;
        if (ptx_builtin_matched(name, mode, libdevice)) continue;
        bad++;
        if (at + n + 3 < sizeof res->unmatched) {
            at += (size_t)snprintf(res->unmatched + at, sizeof res->unmatched - at, "%s%s", at ? ", " : "", name);
        }
    }
    return bad;
}

/* ---- 3. libclc --------------------------------------------------------------- */

/* Work-item functions as NVIDIA's OpenCL defines them, linked before libclc
 * (libclc's nvptx ones ignore the global offset and read %nctaid, and it has
 * no get_global_offset or get_work_dim). NVIDIA's driver passes the launch
 * in environment registers, as its own compiler's PTX reads them
 * (tests/compat/data/workitem.cl, dumped on an H100, driver 580):
 * %envreg0..2 the first group id of this grid (a launch may be split into
 * several grids), %envreg3..5 the global offset, %envreg6..8 the number of
 * groups of the whole launch, %envreg9 the work dimension. */
/* A function of a dimension 0..2 whose three values come from three
 * instructions (`default` outside 0..2). */
#define PER_DIM(name, x, y, z, dflt)                                                            \
    "define linkonce_odr i32 @" name "(i32 %d) #0 {\n"                                          \
    "  switch i32 %d, label %none [ i32 0, label %x i32 1, label %y i32 2, label %z ]\n"        \
    "x:\n  %xv = " x "\n  br label %done\n"                                                     \
    "y:\n  %yv = " y "\n  br label %done\n"                                                     \
    "z:\n  %zv = " z "\n  br label %done\n"                                                     \
    "none:\n  br label %done\n"                                                                 \
    "done:\n  %v = phi i32 [ %xv, %x ], [ %yv, %y ], [ %zv, %z ], [ " dflt ", %none ]\n"        \
    "  ret i32 %v\n}\n"
#define ENVREG(n) "call i32 asm \"mov.u32 $0, %envreg" #n ";\", \"=r\"()"
#define SREG(s, c) "call i32 @llvm.nvvm.read.ptx.sreg." s "." c "()"
#define PER_DIM_SREG(s, dflt) PER_DIM("clshim." s, SREG(s, "x"), SREG(s, "y"), SREG(s, "z"), dflt)

static const char workitem_ir[] =
    PER_DIM("clshim.group_base", ENVREG(0), ENVREG(1), ENVREG(2), "0")
    PER_DIM("clshim.offset", ENVREG(3), ENVREG(4), ENVREG(5), "0")
    PER_DIM("clshim.groups", ENVREG(6), ENVREG(7), ENVREG(8), "1")
    PER_DIM_SREG("ctaid", "0")
    PER_DIM_SREG("ntid", "1")
    PER_DIM_SREG("tid", "0")
    "declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()\n"
    "declare i32 @llvm.nvvm.read.ptx.sreg.ntid.x()\n"
    "declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()\n"
    "declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.y()\n"
    "declare i32 @llvm.nvvm.read.ptx.sreg.ntid.y()\n"
    "declare i32 @llvm.nvvm.read.ptx.sreg.tid.y()\n"
    "declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.z()\n"
    "declare i32 @llvm.nvvm.read.ptx.sreg.ntid.z()\n"
    "declare i32 @llvm.nvvm.read.ptx.sreg.tid.z()\n"
    "define linkonce_odr i64 @_Z17get_global_offsetj(i32 %d) #0 {\n"
    "  %o = call i32 @clshim.offset(i32 %d)\n"
    "  %r = sext i32 %o to i64\n"
    "  ret i64 %r\n"
    "}\n"
    "define linkonce_odr i64 @_Z12get_group_idj(i32 %d) #0 {\n"
    "  %c = call i32 @clshim.ctaid(i32 %d)\n"
    "  %b = call i32 @clshim.group_base(i32 %d)\n"
    "  %c64 = sext i32 %c to i64\n"
    "  %b64 = sext i32 %b to i64\n"
    "  %r = add i64 %c64, %b64\n"
    "  ret i64 %r\n"
    "}\n"
    "define linkonce_odr i64 @_Z14get_num_groupsj(i32 %d) #0 {\n"
    "  %g = call i32 @clshim.groups(i32 %d)\n"
    "  %r = zext i32 %g to i64\n"
    "  ret i64 %r\n"
    "}\n"
    "define linkonce_odr i64 @_Z15get_global_sizej(i32 %d) #0 {\n"
    "  %g = call i32 @clshim.groups(i32 %d)\n"
    "  %n = call i32 @clshim.ntid(i32 %d)\n"
    "  %g64 = zext i32 %g to i64\n"
    "  %n64 = zext i32 %n to i64\n"
    "  %r = mul i64 %g64, %n64\n"
    "  ret i64 %r\n"
    "}\n"
    "define linkonce_odr i64 @_Z13get_global_idj(i32 %d) #0 {\n"
    "  %grp = call i64 @_Z12get_group_idj(i32 %d)\n"
    "  %n = call i32 @clshim.ntid(i32 %d)\n"
    "  %t = call i32 @clshim.tid(i32 %d)\n"
    "  %o = call i64 @_Z17get_global_offsetj(i32 %d)\n"
    "  %n64 = sext i32 %n to i64\n"
    "  %t64 = sext i32 %t to i64\n"
    "  %gn = mul i64 %grp, %n64\n"
    "  %a = add i64 %gn, %t64\n"
    "  %r = add i64 %a, %o\n"
    "  ret i64 %r\n"
    "}\n"
    "define linkonce_odr i64 @_Z23get_enqueued_local_sizej(i32 %d) #0 {\n"
    "  %n = call i32 @clshim.ntid(i32 %d)\n"
    "  %r = zext i32 %n to i64\n"
    "  ret i64 %r\n"
    "}\n"
    "define linkonce_odr i32 @_Z12get_work_dimv() #0 {\n"
    "  %w = call i32 asm \"mov.u32 $0, %envreg9;\", \"=r\"()\n"
    "  ret i32 %w\n"
    "}\n"
    "define linkonce_odr i64 @_Z20get_global_linear_idv() #0 {\n"
    "  %x = call i64 @_Z13get_global_idj(i32 0)\n"
    "  %y = call i64 @_Z13get_global_idj(i32 1)\n"
    "  %z = call i64 @_Z13get_global_idj(i32 2)\n"
    "  %ox = call i64 @_Z17get_global_offsetj(i32 0)\n"
    "  %oy = call i64 @_Z17get_global_offsetj(i32 1)\n"
    "  %oz = call i64 @_Z17get_global_offsetj(i32 2)\n"
    "  %sx = call i64 @_Z15get_global_sizej(i32 0)\n"
    "  %sy = call i64 @_Z15get_global_sizej(i32 1)\n"
    "  %rx = sub i64 %x, %ox\n"
    "  %ry = sub i64 %y, %oy\n"
    "  %rz = sub i64 %z, %oz\n"
    "  %zy = mul i64 %rz, %sy\n"
    "  %zyy = add i64 %zy, %ry\n"
    "  %zyx = mul i64 %zyy, %sx\n"
    "  %r = add i64 %zyx, %rx\n"
    "  ret i64 %r\n"
    "}\n"
    "attributes #0 = { alwaysinline nounwind readnone }\n";

/* Parses IR text into a module of the job's context and links what `mod`
 * needs of it. */
static int link_text(struct ptx_job *j, LLVMModuleRef mod, const char *text, size_t len, const char *what)
{
    LLVMMemoryBufferRef buf = LLVMCreateMemoryBufferWithMemoryRangeCopy(text, len, what);
    LLVMModuleRef part = NULL;
    char *msg = NULL;
    if (LLVMParseIRInContext(j->ctx, buf, &part, &msg)) {
        int rc = refuse(j, CLSHIM_EUNSUPPORTED, "%s: %.300s", what, msg ? msg : "");
        LLVMDisposeMessage(msg);
        return rc;
    }
    LLVMSetTarget(part, NVPTX_TRIPLE);
    LLVMSetDataLayout(part, NVPTX_LAYOUT);
    return glue_link_only_needed(mod, part) ? refuse(j, CLSHIM_EUNSUPPORTED, "linking %s failed", what) : 0;
}

static int link_own_builtins(struct ptx_job *j, LLVMModuleRef mod, unsigned mode)
{
    int rc = link_text(j, mod, workitem_ir, sizeof workitem_ir - 1, "clshim-workitem");
    size_t len = 0;
    char *own = rc ? NULL : ptx_own_builtins_ir(mode, &len);
    if (!rc && !own) rc = refuse(j, CLSHIM_ENOMEM, "out of memory");
    if (!rc) rc = link_text(j, mod, own, len, "clshim-builtins");
    free(own);
    return rc;
}

/* OpenCL's `/` on float as NVIDIA lowers it (2.5 ulp allowed): div.full,
 * and rcp.approx for 1/x, flushing when the mode does; LLVM would emit the
 * correctly rounded div.rn. Only the module's own divisions (libclc's are
 * its algorithms' and stay). -cl-fast-relaxed-math keeps LLVM's
 * div.approx.ftz, which is NVIDIA's there. A float vector division cannot
 * be lowered the same way: it is counted as an unmatched built-in. */
static unsigned lower_fdiv(struct ptx_job *j, LLVMModuleRef mod, unsigned mode, struct ptx_result *res)
{
    if (mode == PTX_MODE_FAST) return 0;
    LLVMTypeRef f32 = LLVMFloatTypeInContext(j->ctx);
    LLVMTypeRef one_arg[1] = {f32}, two_args[2] = {f32, f32};
    LLVMTypeRef rcp_ty = LLVMFunctionType(f32, one_arg, 1, 0), div_ty = LLVMFunctionType(f32, two_args, 2, 0);
    char rcp_text[64], div_text[64];
    const char *ftz = mode == PTX_MODE_PLAIN ? "" : ".ftz";
    snprintf(rcp_text, sizeof rcp_text, "rcp.approx%s.f32 $0, $1;", ftz);
    snprintf(div_text, sizeof div_text, "div.full%s.f32 $0, $1, $2;", ftz);
    LLVMValueRef rcp = LLVMGetInlineAsm(rcp_ty, rcp_text, strlen(rcp_text), (char *)"=f,f", 4, 0, 0,
                                        LLVMInlineAsmDialectATT, 0);
    LLVMValueRef div = LLVMGetInlineAsm(div_ty, div_text, strlen(div_text), (char *)"=f,f,f", 6, 0, 0,
                                        LLVMInlineAsmDialectATT, 0);
    LLVMBuilderRef b = LLVMCreateBuilderInContext(j->ctx);
    unsigned vectors = 0;
    for (LLVMValueRef fn = LLVMGetFirstFunction(mod); fn; fn = LLVMGetNextFunction(fn))
        for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(fn); bb; bb = LLVMGetNextBasicBlock(bb))
            for (LLVMValueRef in = LLVMGetFirstInstruction(bb), next; in; in = next) {
                next = LLVMGetNextInstruction(in);
                if (LLVMGetInstructionOpcode(in) != LLVMFDiv) continue;
                LLVMTypeRef ty = LLVMTypeOf(in);
                if (ty != f32) {
                    if (LLVMGetTypeKind(ty) == LLVMVectorTypeKind && LLVMGetElementType(ty) == f32) vectors++;
                    continue;
                }
                LLVMValueRef num = LLVMGetOperand(in, 0), den = LLVMGetOperand(in, 1);
                LLVMBool loses = 0;
                int reciprocal = LLVMIsAConstantFP(num) && LLVMConstRealGetDouble(num, &loses) == 1.0;
                LLVMPositionBuilderBefore(b, in);
                LLVMValueRef args[2] = {num, den};
                LLVMValueRef call = reciprocal ? LLVMBuildCall2(b, rcp_ty, rcp, args + 1, 1, "")
                                               : LLVMBuildCall2(b, div_ty, div, args, 2, "");
                LLVMReplaceAllUsesWith(in, call);
                LLVMInstructionEraseFromParent(in);
            }
    LLVMDisposeBuilder(b);
    if (vectors) {
        size_t at = strlen(res->unmatched);
        snprintf(res->unmatched + at, sizeof res->unmatched - at, "%sfdiv <N x float> (%u)", at ? ", " : "",
                 vectors);
    }
    return vectors;
}

/* Built-ins whose NVIDIA code is CUDA's become calls of libdevice's
 * functions, and libdevice is linked (only as needed; its __nvvm_reflect
 * queries are answered by NVPTX's reflect pass from "nvvm-reflect-ftz"). */
static int link_libdevice(struct ptx_job *j, LLVMModuleRef mod, unsigned mode, const char *path)
{
    int used = 0;
    for (LLVMValueRef fn = LLVMGetFirstFunction(mod), next; fn; fn = next) {
        next = LLVMGetNextFunction(fn);
        size_t n;
        const char *nv = LLVMIsDeclaration(fn) ? ptx_libdevice_name(LLVMGetValueName2(fn, &n), mode) : NULL;
        if (!nv) continue;
        LLVMValueRef to = LLVMGetNamedFunction(mod, nv);
        if (!to) to = LLVMAddFunction(mod, nv, LLVMGlobalGetValueType(fn));
        LLVMReplaceAllUsesWith(fn, to);
        LLVMDeleteFunction(fn);
        used = 1;
    }
    if (!used) return 0;
    LLVMMemoryBufferRef buf = NULL;
    char *msg = NULL;
    if (LLVMCreateMemoryBufferWithContentsOfFile(path, &buf, &msg)) {
        int rc = refuse(j, CLSHIM_EUNSUPPORTED, "cannot read libdevice %s: %s", path, msg ? msg : "");
        LLVMDisposeMessage(msg);
        return rc;
    }
    LLVMModuleRef nvlib = NULL;
    int bad = LLVMParseBitcodeInContext2(j->ctx, buf, &nvlib);
    LLVMDisposeMemoryBuffer(buf);
    if (bad || !nvlib) return refuse(j, CLSHIM_EUNSUPPORTED, "libdevice %s is not readable: %s", path, j->diag);
    LLVMSetTarget(nvlib, NVPTX_TRIPLE);
    LLVMSetDataLayout(nvlib, NVPTX_LAYOUT);
    if (glue_link_only_needed(mod, nvlib))
        return refuse(j, CLSHIM_EUNSUPPORTED, "linking libdevice failed: %s", j->diag[0] ? j->diag : "link error");
    LLVMValueRef ftz = LLVMConstInt(LLVMInt32TypeInContext(j->ctx), mode != PTX_MODE_PLAIN, 0);
    LLVMAddModuleFlag(mod, LLVMModuleFlagBehaviorOverride, "nvvm-reflect-ftz", 16, LLVMValueAsMetadata(ftz));
    return 0;
}

static int link_libclc(struct ptx_job *j, LLVMModuleRef mod, const char *path)
{
    LLVMMemoryBufferRef buf = NULL;
    char *msg = NULL;
    if (LLVMCreateMemoryBufferWithContentsOfFile(path, &buf, &msg)) {
        int rc = refuse(j, CLSHIM_EUNSUPPORTED, "cannot read libclc's %s: %s (Debian package libclc-15)", path,
                        msg ? msg : "");
        LLVMDisposeMessage(msg);
        return rc;
    }
    LLVMModuleRef clc = NULL;
    int bad = LLVMParseBitcodeInContext2(j->ctx, buf, &clc);
    LLVMDisposeMemoryBuffer(buf);
    if (bad || !clc) return refuse(j, CLSHIM_EUNSUPPORTED, "libclc's %s is not readable: %s", path, j->diag);
    LLVMSetTarget(clc, NVPTX_TRIPLE); /* nvptx64-unknown-nvidiacl: the same target, another spelling */
    if (glue_link_only_needed(mod, clc))
        return refuse(j, CLSHIM_EUNSUPPORTED, "linking libclc failed: %s", j->diag[0] ? j->diag : "link error");
    for (LLVMValueRef fn = LLVMGetFirstFunction(mod); fn; fn = LLVMGetNextFunction(fn)) {
        size_t n;
        const char *name = LLVMGetValueName2(fn, &n);
        if (LLVMIsDeclaration(fn) && strncmp(name, "llvm.", 5) && strcmp(name, "__nvvm_reflect") &&
            LLVMGetFirstUse(fn))
            return refuse(j, CLSHIM_EUNSUPPORTED, "'%s' is defined neither by the module nor by libclc", name);
    }
    return 0;
}

/* ---- 4. optimisation ----------------------------------------------------- */

static int is_kernel(LLVMModuleRef mod, LLVMValueRef fn)
{
    unsigned n = LLVMGetNamedMetadataNumOperands(mod, "nvvm.annotations");
    if (!n) return 0;
    LLVMValueRef *ops = malloc(n * sizeof *ops);
    int found = 0;
    if (ops) LLVMGetNamedMetadataOperands(mod, "nvvm.annotations", ops);
    for (unsigned i = 0; ops && i < n && !found; i++) {
        LLVMValueRef three[3];
        if (LLVMGetMDNodeNumOperands(ops[i]) != 3) continue;
        LLVMGetMDNodeOperands(ops[i], three);
        found = three[0] == fn;
    }
    free(ops);
    return found;
}

static void set_fp_attrs(LLVMContextRef ctx, LLVMValueRef fn, const struct ptx_request *req)
{
    struct fn_attr {
        const char *k, *v;
    } attrs[4];
    unsigned n = 0;
    if (req->denorms_are_zero || req->fast_relaxed_math)
        attrs[n++] = (struct fn_attr){"denormal-fp-math-f32", "preserve-sign,preserve-sign"};
    if (req->fast_relaxed_math) {
        attrs[n++] = (struct fn_attr){"unsafe-fp-math", "true"};
        attrs[n++] = (struct fn_attr){"no-infs-fp-math", "true"};
        attrs[n++] = (struct fn_attr){"no-nans-fp-math", "true"};
    }
    for (unsigned i = 0; i < n; i++)
        LLVMAddAttributeAtIndex(fn, LLVMAttributeFunctionIndex,
                                   LLVMCreateStringAttribute(ctx, attrs[i].k, (unsigned)strlen(attrs[i].k),
                                                             attrs[i].v, (unsigned)strlen(attrs[i].v)));
}

static int optimise(struct ptx_job *j, LLVMModuleRef mod, LLVMTargetMachineRef tm, const struct ptx_request *req)
{
    for (LLVMValueRef fn = LLVMGetFirstFunction(mod); fn; fn = LLVMGetNextFunction(fn)) {
        if (LLVMIsDeclaration(fn)) continue;
        if (!is_kernel(mod, fn)) {
            LLVMSetLinkage(fn, LLVMInternalLinkage);
            LLVMSetVisibility(fn, LLVMDefaultVisibility);
        }
        set_fp_attrs(j->ctx, fn, req);
    }
    for (LLVMValueRef gv = LLVMGetFirstGlobal(mod); gv; gv = LLVMGetNextGlobal(gv))
        if (!LLVMIsDeclaration(gv)) LLVMSetLinkage(gv, LLVMInternalLinkage);
    LLVMPassBuilderOptionsRef opts = LLVMCreatePassBuilderOptions();
    LLVMErrorRef e = LLVMRunPasses(mod, "default<O3>", tm, opts);
    LLVMDisposePassBuilderOptions(opts);
    if (e) {
        char *msg = LLVMGetErrorMessage(e);
        int rc = refuse(j, CLSHIM_EUNSUPPORTED, "LLVM passes failed: %.300s", msg ? msg : "");
        LLVMDisposeErrorMessage(msg);
        return rc;
    }
    /* NVPTX has no instruction for these and would call libm, which PTX
     * does not have (LLVM aborts on it at emission) */
    static const char *const libm[] = {"llvm.exp.", "llvm.exp2.", "llvm.log.", "llvm.log2.", "llvm.log10.",
                                       "llvm.pow.", "llvm.powi.", "llvm.sin.", "llvm.cos.", "llvm.frem."};
    for (LLVMValueRef fn = LLVMGetFirstFunction(mod); fn; fn = LLVMGetNextFunction(fn)) {
        size_t n;
        const char *name = LLVMGetValueName2(fn, &n);
        for (size_t i = 0; i < sizeof libm / sizeof libm[0] && LLVMGetFirstUse(fn); i++)
            if (!strncmp(name, libm[i], strlen(libm[i])))
                return refuse(j, CLSHIM_EUNSUPPORTED, "no NVPTX lowering for %s", name);
    }
    char *msg = NULL;
    if (LLVMVerifyModule(mod, LLVMReturnStatusAction, &msg)) {
        int rc = refuse(j, CLSHIM_EUNSUPPORTED, "the NVPTX module does not verify: %.300s", msg ? msg : "");
        LLVMDisposeMessage(msg);
        return rc;
    }
    LLVMDisposeMessage(msg);
    return 0;
}

/* ---- 5. emission ----------------------------------------------------------- */

static pthread_once_t nvptx_once = PTHREAD_ONCE_INIT;
static void init_nvptx(void)
{
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
}

static LLVMTargetMachineRef target_machine(struct ptx_job *j, uint32_t sm)
{
    pthread_once(&nvptx_once, init_nvptx);
    LLVMTargetRef target = NULL;
    char *msg = NULL;
    if (LLVMGetTargetFromTriple(NVPTX_TRIPLE, &target, &msg)) {
        refuse(j, CLSHIM_EUNSUPPORTED, "no NVPTX target in this LLVM: %s", msg ? msg : "");
        LLVMDisposeMessage(msg);
        return NULL;
    }
    char cpu[16];
    snprintf(cpu, sizeof cpu, "sm_%u", sm);
    return LLVMCreateTargetMachine(target, NVPTX_TRIPLE, cpu, "+ptx75", LLVMCodeGenLevelAggressive,
                                   LLVMRelocDefault, LLVMCodeModelDefault);
}

static int emit(struct ptx_job *j, LLVMModuleRef mod, LLVMTargetMachineRef tm)
{
    LLVMMemoryBufferRef buf = NULL;
    char *msg = NULL;
    if (LLVMTargetMachineEmitToMemoryBuffer(tm, mod, LLVMAssemblyFile, &msg, &buf)) {
        int rc = refuse(j, CLSHIM_EUNSUPPORTED, "NVPTX emission failed: %.300s", msg ? msg : "");
        LLVMDisposeMessage(msg);
        return rc;
    }
    size_t n = LLVMGetBufferSize(buf);
    const char *s = LLVMGetBufferStart(buf);
    while (n && s[n - 1] == '\0') n--;
    j->res->ptx = malloc(n + 1);
    if (j->res->ptx) {
        memcpy(j->res->ptx, s, n);
        j->res->ptx[n] = '\0';
        j->res->ptx_len = n;
    }
    LLVMDisposeMemoryBuffer(buf);
    return j->res->ptx ? 0 : refuse(j, CLSHIM_ENOMEM, "out of memory");
}

int ptx_from_spir(const struct ptx_request *req, struct ptx_result *res)
{
    memset(res, 0, sizeof *res);
    if (!req || !req->bitcode || !req->size) {
        snprintf(res->reason, sizeof res->reason, "spir_to_ptx: missing module");
        return CLSHIM_EINVAL;
    }
    res->sm = req->sm == 0 || req->sm > NEWEST_SM ? NEWEST_SM : req->sm;
    if (res->sm < 30) {
        snprintf(res->reason, sizeof res->reason, "sm_%u is older than LLVM's NVPTX supports", req->sm);
        return CLSHIM_EUNSUPPORTED;
    }
    unsigned mode = req->fast_relaxed_math  ? PTX_MODE_FAST
                    : req->denorms_are_zero ? PTX_MODE_DAZ
                                            : PTX_MODE_PLAIN;
    struct ptx_job j = {.ctx = LLVMContextCreate(), .res = res};
    glue_context_opaque_pointers(j.ctx);
    LLVMContextSetDiagnosticHandler(j.ctx, on_diagnostic, &j);
    LLVMMemoryBufferRef buf = LLVMCreateMemoryBufferWithMemoryRange(req->bitcode, req->size, "clshim-spir", 0);
    LLVMModuleRef spir = NULL, mod = NULL;
    LLVMTargetMachineRef tm = NULL;
    int rc;
    if (LLVMParseBitcodeInContext2(j.ctx, buf, &spir) || !spir) {
        rc = refuse(&j, CLSHIM_EINVAL, "not readable bitcode: %s", j.diag[0] ? j.diag : "parse error");
        spir = NULL;
    } else if (!(mod = retarget(&j, spir))) {
        rc = CLSHIM_EUNSUPPORTED;
        if (!res->reason[0]) refuse(&j, rc, "retargeting failed");
    } else if ((res->unmatched_count = check_builtins(mod, mode, req->libdevice_path != NULL, res) +
                                       lower_fdiv(&j, mod, mode, res)) &&
               !req->allow_unmatched_builtins) {
        rc = refuse(&j, CLSHIM_EUNSUPPORTED, "built-ins whose results differ from NVIDIA's compile: %s",
                    res->unmatched);
    } else if ((rc = link_own_builtins(&j, mod, mode)) ||
               (req->libdevice_path && (rc = link_libdevice(&j, mod, mode, req->libdevice_path))) ||
               (rc = link_libclc(&j, mod, req->libclc_path ? req->libclc_path : DEFAULT_LIBCLC))) {
    } else if (!(tm = target_machine(&j, res->sm))) {
        rc = CLSHIM_EUNSUPPORTED;
    } else if (!(rc = optimise(&j, mod, tm, req))) {
        rc = emit(&j, mod, tm);
    }
    LLVMDisposeMemoryBuffer(buf);
    if (tm) LLVMDisposeTargetMachine(tm);
    if (mod) LLVMDisposeModule(mod);
    if (spir) LLVMDisposeModule(spir);
    LLVMContextDispose(j.ctx);
    if (rc) {
        free(res->ptx);
        res->ptx = NULL;
        res->ptx_len = 0;
    }
    return rc;
}
