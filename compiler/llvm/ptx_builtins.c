/* ptx_builtins.c — route (a)'s OpenCL built-ins made to give NVIDIA's own
 * results (glue.h: ptx_own_builtins_ir, ptx_libdevice_name,
 * ptx_builtin_matched).
 *
 * NVIDIA's compiler has its own built-in library; libclc (what route (a)
 * links otherwise) computes many functions differently, within OpenCL's ulp
 * bounds but not bit for bit. tests/compat/nvidia_builtins.sh compares each
 * built-in on the GPU over 1 Mi+ inputs (special values included) under
 * three build-option modes, and dumps NVIDIA's PTX, which shows how it
 * lowers each one. From that:
 *   - built-ins NVIDIA lowers to a few PTX instructions are defined here as
 *     those instructions (inline PTX where LLVM would pick another
 *     instruction or flush differently: NVIDIA's library is not compiled
 *     with the user's flushing, e.g. fma and min never flush, rsqrt does
 *     under -cl-denorms-are-zero);
 *   - the longer math functions are CUDA's: NVIDIA's PTX for them is
 *     libdevice's __nv_* code, so they map to libdevice (CUDA toolkit,
 *     nvvm/libdevice/libdevice.10.bc) where it is available;
 *   - `/` is lowered in ptx.c (div.full, and rcp.approx for 1/x).
 * `matched` lists what the measurement found bit-identical, per mode; a
 * module calling anything else is refused unless differences are allowed.
 * Work-item functions and synchronisation compute no floating-point value
 * (ptx.c defines the work-item ones by NVIDIA's convention).
 */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "compiler/llvm/glue.h"

#define P PTX_MODE_PLAIN
#define D PTX_MODE_DAZ
#define F PTX_MODE_FAST
#define ALL (P | D | F)

/* IR bodies: arguments %a, %b, %c; "$FTZ" is ".ftz" where the mode
 * flushes (D, F). */
#define ASM1(op) "  %r = call float asm \"" op " $0, $1;\", \"=f,f\"(float %a)\n  ret float %r\n"
#define ASM2(op) "  %r = call float asm \"" op " $0, $1, $2;\", \"=f,f,f\"(float %a, float %b)\n  ret float %r\n"
#define ASM3(op)                                                                                  \
    "  %r = call float asm \"" op " $0, $1, $2, $3;\", \"=f,f,f,f\"(float %a, float %b, float %c)\n" \
    "  ret float %r\n"
#define RECIP_APPROX "  %r = call float asm \"div.approx.f32 $0, $1, $2;\", \"=f,f,f\"(float 1.0, float %a)\n  ret float %r\n"
#define EX2_OF_PRODUCT(k)                                                                         \
    "  %m = fmul float %a, " k "\n"                                                               \
    "  %r = call float asm \"ex2.approx$FTZ.f32 $0, $1;\", \"=f,f\"(float %m)\n  ret float %r\n"
#define LG2_TIMES(k)                                                                              \
    "  %l = call float asm \"lg2.approx$FTZ.f32 $0, $1;\", \"=f,f\"(float %a)\n"                  \
    "  %r = fmul float %l, " k "\n  ret float %r\n"
#define TAN_APPROX                                                                                \
    "  %s = call float asm \"sin.approx$FTZ.f32 $0, $1;\", \"=f,f\"(float %a)\n"                  \
    "  %c = call float asm \"cos.approx$FTZ.f32 $0, $1;\", \"=f,f\"(float %a)\n"                  \
    "  %r = call float asm \"div.approx$FTZ.f32 $0, $1, $2;\", \"=f,f,f\"(float %s, float %c)\n"  \
    "  ret float %r\n"
#define POWR_APPROX                                                                               \
    "  %l = call float asm \"lg2.approx.f32 $0, $1;\", \"=f,f\"(float %a)\n"                      \
    "  %m = call float asm \"mul.rn.f32 $0, $1, $2;\", \"=f,f,f\"(float %l, float %b)\n"          \
    "  %r = call float asm \"ex2.approx.f32 $0, $1;\", \"=f,f\"(float %m)\n  ret float %r\n"
#define LOG2E "0x3FF7154760000000"
#define LOG2_10 "0x400A934F00000000"
#define LN2 "0x3FE62E4300000000"
#define LOG10_2 "0x3FD3441360000000"

struct own {
    const char *mangled;
    const char *params; /* "f", "ff", "fff": float parameters; "F": float -> int */
    unsigned modes;
    const char *body;
};

static const struct own own[] = {
    {"_Z4sqrtf", "f", ALL, ASM1("sqrt.approx.f32")},
    {"_Z9half_sqrtf", "f", ALL, ASM1("sqrt.approx.f32")},
    {"_Z11native_sqrtf", "f", ALL, ASM1("sqrt.approx.f32")},
    {"_Z5rsqrtf", "f", ALL, ASM1("rsqrt.approx$FTZ.f32")},
    {"_Z10half_rsqrtf", "f", ALL, ASM1("rsqrt.approx$FTZ.f32")},
    {"_Z12native_rsqrtf", "f", ALL, ASM1("rsqrt.approx.f32")},
    {"_Z12native_recipf", "f", ALL, RECIP_APPROX},
    {"_Z10half_recipf", "f", ALL, RECIP_APPROX},
    {"_Z13native_divideff", "ff", ALL, ASM2("div.approx.f32")},
    {"_Z11half_divideff", "ff", P | D, ASM2("div.full$FTZ.f32")},
    {"_Z11half_divideff", "ff", F, ASM2("div.approx.ftz.f32")},
    {"_Z4exp2f", "f", ALL, ASM1("ex2.approx$FTZ.f32")},
    {"_Z9half_exp2f", "f", ALL, ASM1("ex2.approx$FTZ.f32")},
    {"_Z11native_exp2f", "f", ALL, ASM1("ex2.approx.f32")},
    {"_Z11native_log2f", "f", ALL, ASM1("lg2.approx.f32")},
    {"_Z10native_expf", "f", ALL, EX2_OF_PRODUCT(LOG2E)},
    {"_Z12native_exp10f", "f", ALL, EX2_OF_PRODUCT(LOG2_10)},
    {"_Z10native_logf", "f", ALL, LG2_TIMES(LN2)},
    {"_Z12native_log10f", "f", ALL, LG2_TIMES(LOG10_2)},
    {"_Z10native_sinf", "f", ALL, ASM1("sin.approx$FTZ.f32")},
    {"_Z10native_cosf", "f", ALL, ASM1("cos.approx$FTZ.f32")},
    {"_Z10native_tanf", "f", ALL, TAN_APPROX},
    {"_Z11native_powrff", "ff", ALL, POWR_APPROX},
    /* -cl-fast-relaxed-math: the math functions become the native ones */
    {"_Z3expf", "f", F, EX2_OF_PRODUCT(LOG2E)},
    {"_Z8half_expf", "f", F, EX2_OF_PRODUCT(LOG2E)},
    {"_Z5exp10f", "f", F, EX2_OF_PRODUCT(LOG2_10)},
    {"_Z3logf", "f", F, LG2_TIMES(LN2)},
    {"_Z8half_logf", "f", F, LG2_TIMES(LN2)},
    {"_Z5log10f", "f", F, LG2_TIMES(LOG10_2)},
    {"_Z4log2f", "f", F, ASM1("lg2.approx.ftz.f32")},
    {"_Z9half_log2f", "f", F, ASM1("lg2.approx.ftz.f32")},
    {"_Z3sinf", "f", F, ASM1("sin.approx.ftz.f32")},
    {"_Z8half_sinf", "f", F, ASM1("sin.approx.ftz.f32")},
    {"_Z3cosf", "f", F, ASM1("cos.approx.ftz.f32")},
    {"_Z8half_cosf", "f", F, ASM1("cos.approx.ftz.f32")},
    {"_Z3tanf", "f", F, TAN_APPROX},
    {"_Z8half_tanf", "f", F, TAN_APPROX},
    {"_Z4powrff", "ff", F, POWR_APPROX},
    {"_Z9half_powrff", "ff", F, POWR_APPROX},
    /* never flushed, whatever the options */
    {"_Z4fabsf", "f", ALL, ASM1("abs.f32")},
    {"_Z5floorf", "f", ALL, ASM1("cvt.rmi.f32.f32")},
    {"_Z4fminff", "ff", ALL, ASM2("min.f32")},
    {"_Z3minff", "ff", ALL, ASM2("min.f32")},
    {"_Z4fmaxff", "ff", ALL, ASM2("max.f32")},
    {"_Z3maxff", "ff", ALL, ASM2("max.f32")},
    {"_Z3fmafff", "fff", ALL, ASM3("fma.rn.f32")},
    {"_Z3madfff", "fff", ALL, ASM3("fma.rn.f32")},
    {"_Z5clampfff", "fff", ALL,
     "  %m = call float asm \"max.f32 $0, $1, $2;\", \"=f,f,f\"(float %a, float %b)\n"
     "  %r = call float asm \"min.f32 $0, $1, $2;\", \"=f,f,f\"(float %m, float %c)\n  ret float %r\n"},
    {"_Z8copysignff", "ff", ALL,
     "  %ia = bitcast float %a to i32\n  %ib = bitcast float %b to i32\n"
     "  %ma = and i32 %ia, 2147483647\n  %sb = and i32 %ib, -2147483648\n"
     "  %o = or i32 %ma, %sb\n  %r = bitcast i32 %o to float\n  ret float %r\n"},
    /* mix: a + (b - a) * c with the product never contracted or flushed */
    {"_Z3mixfff", "fff", ALL,
     "  %d = fsub float %b, %a\n"
     "  %m = call float asm \"mul.rn.f32 $0, $1, $2;\", \"=f,f,f\"(float %d, float %c)\n"
     "  %r = fadd float %a, %m\n  ret float %r\n"},
    /* sign: NVIDIA returns +0 for -0 and for NaN, and compares flushed
     * where the mode flushes (x + -0 is x, flushed by .ftz) */
    {"_Z4signf", "f", ALL,
     "  %x = call float asm \"add$FTZ.f32 $0, $1, 0f80000000;\", \"=f,f\"(float %a)\n"
     "  %gt = fcmp ogt float %x, 0.0\n  %lt = fcmp olt float %x, 0.0\n"
     "  %n = select i1 %lt, float -1.0, float 0.0\n  %r = select i1 %gt, float 1.0, float %n\n  ret float %r\n"},
    {"_Z15convert_int_satf", "F", ALL,
     "  %r = call i32 asm \"cvt.rzi.sat.s32.f32 $0, $1;\", \"=r,f\"(float %a)\n  ret i32 %r\n"},
};

/* OpenCL built-in -> libdevice function, where NVIDIA's PTX is CUDA's code. */
static const struct {
    const char *mangled, *libdevice;
} cuda[] = {
    {"_Z3expf", "__nv_expf"},       {"_Z8half_expf", "__nv_expf"},   {"_Z5exp10f", "__nv_exp10f"},
    {"_Z5expm1f", "__nv_expm1f"},   {"_Z3logf", "__nv_logf"},        {"_Z8half_logf", "__nv_logf"},
    {"_Z4log2f", "__nv_log2f"},     {"_Z9half_log2f", "__nv_log2f"}, {"_Z5log10f", "__nv_log10f"},
    {"_Z5log1pf", "__nv_log1pf"},   {"_Z3sinf", "__nv_sinf"},        {"_Z8half_sinf", "__nv_sinf"},
    {"_Z3cosf", "__nv_cosf"},       {"_Z8half_cosf", "__nv_cosf"},   {"_Z3tanf", "__nv_tanf"},
    {"_Z8half_tanf", "__nv_tanf"},  {"_Z4asinf", "__nv_asinf"},      {"_Z4acosf", "__nv_acosf"},
    {"_Z4atanf", "__nv_atanf"},     {"_Z5atan2ff", "__nv_atan2f"},   {"_Z4sinhf", "__nv_sinhf"},
    {"_Z4coshf", "__nv_coshf"},     {"_Z4tanhf", "__nv_tanhf"},      {"_Z3powff", "__nv_powf"},
    {"_Z4powrff", "__nv_powf"},     {"_Z9half_powrff", "__nv_powf"}, {"_Z4pownfi", "__nv_powif"},
    {"_Z4cbrtf", "__nv_cbrtf"},     {"_Z5hypotff", "__nv_hypotf"},   {"_Z4fmodff", "__nv_fmodf"},
};

/* Matched bit for bit on NVIDIA (H100, driver 580.159; docs/spirv.md has the
 * table), per mode. Those that map to libdevice in a mode count only when
 * libdevice is in use. */
static const struct {
    const char *mangled;
    unsigned modes;
} matched[] = {
    /* work-item functions and synchronisation */
    {"_Z13get_global_idj", ALL}, {"_Z12get_local_idj", ALL}, {"_Z12get_group_idj", ALL},
    {"_Z15get_global_sizej", ALL}, {"_Z14get_local_sizej", ALL}, {"_Z14get_num_groupsj", ALL},
    {"_Z12get_work_dimv", ALL}, {"_Z17get_global_offsetj", ALL}, {"_Z20get_global_linear_idv", ALL},
    {"_Z23get_enqueued_local_sizej", ALL}, {"_Z7barrierj", ALL}, {"_Z9mem_fencej", ALL},
    {"_Z14read_mem_fencej", ALL}, {"_Z15write_mem_fencej", ALL},
    /* float built-ins, over 1,066,152 inputs each */
    {"_Z4sqrtf", ALL}, {"_Z5rsqrtf", ALL}, {"_Z3fmafff", ALL}, {"_Z3madfff", ALL},
    {"_Z3expf", ALL}, {"_Z4exp2f", ALL}, {"_Z5exp10f", ALL}, {"_Z5expm1f", D | F},
    {"_Z3logf", ALL}, {"_Z4log2f", ALL}, {"_Z5log10f", ALL}, {"_Z5log1pf", ALL},
    {"_Z3sinf", ALL}, {"_Z3cosf", ALL}, {"_Z3tanf", ALL},
    {"_Z4sinhf", ALL}, {"_Z4coshf", ALL}, {"_Z4tanhf", ALL},
    {"_Z4powrff", F}, {"_Z9half_powrff", F},
    {"_Z10native_sinf", ALL}, {"_Z10native_cosf", ALL}, {"_Z10native_tanf", ALL},
    {"_Z10native_expf", ALL}, {"_Z11native_exp2f", ALL}, {"_Z12native_exp10f", ALL},
    {"_Z10native_logf", ALL}, {"_Z11native_log2f", ALL}, {"_Z12native_log10f", ALL},
    {"_Z11native_sqrtf", ALL}, {"_Z12native_rsqrtf", ALL}, {"_Z12native_recipf", ALL},
    {"_Z13native_divideff", ALL}, {"_Z11native_powrff", ALL},
    {"_Z9half_sqrtf", ALL}, {"_Z10half_rsqrtf", ALL}, {"_Z10half_recipf", ALL}, {"_Z11half_divideff", ALL},
    {"_Z8half_expf", ALL}, {"_Z9half_exp2f", ALL}, {"_Z8half_logf", ALL}, {"_Z9half_log2f", ALL},
    {"_Z8half_sinf", ALL}, {"_Z8half_cosf", ALL}, {"_Z8half_tanf", ALL},
    {"_Z4fabsf", ALL}, {"_Z5floorf", ALL}, {"_Z4ceilf", ALL}, {"_Z5truncf", ALL}, {"_Z5roundf", ALL},
    {"_Z4rintf", ALL}, {"_Z4fminff", ALL}, {"_Z4fmaxff", ALL}, {"_Z3minff", ALL}, {"_Z3maxff", ALL},
    {"_Z5clampfff", ALL}, {"_Z8copysignff", ALL}, {"_Z3mixfff", ALL}, {"_Z4signf", ALL},
    {"_Z13convert_floati", ALL}, {"_Z17convert_float_rtzi", ALL}, {"_Z11convert_intf", ALL},
    {"_Z15convert_int_rtef", ALL}, {"_Z15convert_int_satf", ALL}, {"_Z12convert_uintf", ALL},
};

static int own_defines(const struct own *o, unsigned mode)
{
    return (o->modes & mode) != 0;
}

const char *ptx_libdevice_name(const char *mangled, unsigned mode)
{
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
        if (own_defines(&own[i], mode) && !strcmp(own[i].mangled, mangled)) return NULL;
    for (size_t i = 0; i < sizeof cuda / sizeof cuda[0]; i++)
        if (!strcmp(cuda[i].mangled, mangled)) return cuda[i].libdevice;
    return NULL;
}

int ptx_builtin_matched(const char *mangled, unsigned mode, int with_libdevice)
{
    for (size_t i = 0; i < sizeof matched / sizeof matched[0]; i++)
        if (!strcmp(matched[i].mangled, mangled))
            return (matched[i].modes & mode) && (with_libdevice || !ptx_libdevice_name(mangled, mode));
    return 0;
}

int ptx_text_add(struct ptx_text *t, const char *s, size_t n)
{
    if (t->len + n + 1 > t->cap) {
        size_t cap = (t->len + n + 1) * 2;
        char *more = realloc(t->s, cap);
        if (!more) return CLSHIM_ENOMEM;
        t->s = more;
        t->cap = cap;
    }
    memcpy(t->s + t->len, s, n);
    t->len += n;
    t->s[t->len] = '\0';
    return 0;
}


static int add_str(struct ptx_text *b, const char *s)
{
    return ptx_text_add(b, s, strlen(s));
}

/* `text` with "$FTZ" replaced by `ftz`. */
static int add_ftz(struct ptx_text *b, const char *text, const char *ftz)
{
    for (const char *p = text; *p;) {
        const char *at = strstr(p, "$FTZ");
        size_t n = at ? (size_t)(at - p) : strlen(p);
        if (ptx_text_add(b, p, n) || (at && add_str(b, ftz))) return -1;
        p += n + (at ? 4 : 0);
    }
    return 0;
}

char *ptx_own_builtins_ir(unsigned mode, size_t *len)
{
    static const char *const names[] = {"%a", "%b", "%c"};
    const char *ftz = mode == PTX_MODE_PLAIN ? "" : ".ftz";
    struct ptx_text b = {0};
    int bad = add_str(&b, "");
    for (size_t i = 0; i < sizeof own / sizeof own[0] && !bad; i++) {
        if (!own_defines(&own[i], mode)) continue;
        int to_int = own[i].params[0] == 'F';
        bad |= add_str(&b, to_int ? "define linkonce_odr i32 @" : "define linkonce_odr float @");
        bad |= add_str(&b, own[i].mangled);
        bad |= add_str(&b, "(");
        for (size_t k = 0; own[i].params[k] && !bad; k++) {
            bad |= add_str(&b, k ? ", float " : "float ");
            bad |= add_str(&b, names[k]);
        }
        bad |= add_str(&b, ") #0 {\n");
        bad |= add_ftz(&b, own[i].body, ftz);
        bad |= add_str(&b, "}\n");
    }
    bad |= add_str(&b, "attributes #0 = { alwaysinline nounwind readnone }\n");
    if (bad) {
        free(b.s);
        return NULL;
    }
    *len = b.len;
    return b.s;
}
