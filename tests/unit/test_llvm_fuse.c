/* test_llvm_fuse.c — the fuser, checked on PoCL: a fused kernel must leave
 * every buffer bit-for-bit as the unfused kernels do (both run from the same
 * frontend bitcode), refusals must name the kernel and the reason, and bad
 * input must never crash. */
#include "test_llvm_common.h"

#include <time.h>

#include "fusion/frontend.h"

static const struct clshim_llvm_api *api;

static const char *chain_src =
    "__kernel void scale(__global const float *in, __global float *out, float s) {\n"
    "    size_t i = get_global_id(0); out[i] = in[i] * s; }\n"
    "__kernel void offset(__global const float *in, __global float *out, float s) {\n"
    "    size_t i = get_global_id(0); out[i] = in[i] + s; }\n"
    "__kernel void square(__global float *io) {\n"
    "    int i = get_global_id(0); io[i] = io[i] * io[i]; }\n"
    "__kernel void shifted(__global const float *in, __global float *out) {\n"
    "    size_t i = get_global_id(0); out[i] = in[i + 1 < get_global_size(0) ? i + 1 : i]; }\n"
    "__kernel void pairswap(__global const float *in, __global float *out) {\n"
    "    size_t i = get_global_id(0); out[i] = in[i ^ 1]; }\n"
    "__kernel void sized(__global float *io) {\n"
    "    size_t i = get_global_id(0); io[i] += (float)get_global_size(0); }\n"
    "__kernel void grouped(__global float *io, __local float *tmp) {\n"
    "    size_t l = get_local_id(0);\n"
    "    tmp[l] = io[get_global_id(0)]; barrier(CLK_LOCAL_MEM_FENCE);\n"
    "    io[get_global_id(0)] = tmp[get_local_size(0) - 1 - l]; }\n"
    "__kernel void total(__global const float *in, __global float *out, int n) {\n"
    "    float s = 0.0f; for (int k = 0; k < n; k++) s += in[k];\n"
    "    out[get_global_id(0)] = s; }\n"
    "__kernel void bump(__global int *c) { atomic_inc(&c[get_global_id(0)]); }\n"
    "typedef struct { float a; float b; } ab_t;\n"
    "__kernel void affine(__global float *io, ab_t p) {\n"
    "    size_t i = get_global_id(0); io[i] = io[i] * p.a + p.b; p.a = 0.0f; }\n";

static void *chain_bc;
static size_t chain_size;
static cl_program chain_prog; /* the unfused reference, built from chain_bc */

#define NB 4
#define NELEM 4096

static void *compile(const char *src, size_t *size)
{
    void *bc = NULL;
    char err[512];
    int rc = frontend_compile_source(src, strlen(src), NULL, &bc, size, err, sizeof err);
    if (rc) fprintf(stderr, "frontend: %s\n", err);
    assert_int_equal(rc, 0);
    return bc;
}

static void make_bufs(struct tbufs *b, int count, unsigned seed)
{
    size_t sizes[TL_MAX_BUFS];
    void *init[TL_MAX_BUFS];
    srand(seed);
    for (int i = 0; i < count; i++) {
        sizes[i] = NELEM * sizeof(float);
        float *f = malloc(sizes[i]);
        for (int j = 0; j < NELEM; j++) f[j] = (float)(rand() % 100000) / 97.0f - 300.0f;
        init[i] = f;
    }
    tl_bufs_create(b, count, sizes, init);
    for (int i = 0; i < count; i++) free(init[i]);
}

/* One kernel of a test sequence: name, arguments, classes, range. */
struct tkernel {
    const void *bc;
    size_t bc_size;
    cl_program prog;
    const char *name;
    struct targ args[6];
    uint32_t cls[6];
    cl_uint nargs;
    size_t gs, ls;
};

static void fill_request(const struct tkernel *tk, size_t n, struct fuse_kernel *fk)
{
    for (size_t i = 0; i < n; i++) {
        memset(&fk[i], 0, sizeof fk[i]);
        fk[i].module_bc = tk[i].bc ? tk[i].bc : chain_bc;
        fk[i].module_size = tk[i].bc ? tk[i].bc_size : chain_size;
        fk[i].name = tk[i].name;
        fk[i].work_dim = 1;
        fk[i].global_size[0] = tk[i].gs;
        fk[i].global_size[1] = fk[i].global_size[2] = 1;
        fk[i].local_size[0] = tk[i].ls;
        fk[i].arg_class = tk[i].cls;
        fk[i].num_args = tk[i].nargs;
    }
}

static int fuse(const struct tkernel *tk, size_t n, int force, struct fuse_result *r)
{
    struct fuse_kernel fk[8];
    fill_request(tk, n, fk);
    struct fuse_request req = {fk, n, "fused", force, 0, NULL, 0, NULL};
    int rc = api->fuse(&req, r);
    if (rc) fprintf(stderr, "fuse refused (%d): %s\n", rc, r->reason);
    return rc;
}

/* Fuses with the `internal` option (restricted to the internal= list
 * `only` unless NULL); returns the classes internalised and the kept line
 * in r. */
static unsigned fuse_internal_only(const struct tkernel *tk, size_t n, const char *only, struct fuse_result *r)
{
    struct fuse_kernel fk[8];
    fill_request(tk, n, fk);
    struct fuse_request req = {fk, n, "fused", 0, 1, NULL, 0, only};
    int rc = api->fuse(&req, r);
    if (rc) fprintf(stderr, "fuse refused (%d): %s\n", rc, r->reason);
    assert_int_equal(rc, 0);
    api->free(r->bitcode);
    api->free(r->param_kernel);
    api->free(r->param_index);
    return r->internalised;
}

static unsigned fuse_internal(const struct tkernel *tk, size_t n, struct fuse_result *r)
{
    return fuse_internal_only(tk, n, NULL, r);
}

static void free_result(struct fuse_result *r)
{
    api->free(r->bitcode);
    api->free(r->param_kernel);
    api->free(r->param_index);
}

/* Fuses tk[0..n), runs fused and unfused on equal buffers, compares. */
static void fuse_and_compare(const struct tkernel *tk, size_t n, int nbufs, int force,
                             struct fuse_result *out)
{
    struct fuse_result r;
    assert_int_equal(fuse(tk, n, force, &r), 0);
    struct tbufs a, b;
    make_bufs(&a, nbufs, 99);
    make_bufs(&b, nbufs, 99);
    size_t off[1] = {0};
    for (size_t i = 0; i < n; i++) {
        size_t gs[1] = {tk[i].gs}, ls[1] = {tk[i].ls};
        tl_run(tk[i].prog ? tk[i].prog : chain_prog, tk[i].name, tk[i].args, tk[i].nargs, &a, 1,
               off, gs, ls);
    }
    cl_program fp = tl_build_binary(r.bitcode, r.bitcode_size);
    struct targ fargs[32];
    assert_true(r.num_params <= 32);
    for (uint32_t q = 0; q < r.num_params; q++) {
        assert_true(r.param_kernel[q] < n);
        assert_true(r.param_index[q] < tk[r.param_kernel[q]].nargs);
        fargs[q] = tk[r.param_kernel[q]].args[r.param_index[q]];
    }
    tl_run(fp, "fused", fargs, r.num_params, &b, r.work_dim, r.global_offset, r.global_size,
           r.local_size);
    tl_assert_same(&a, &b);
    tl_bufs_release(&a);
    tl_bufs_release(&b);
    clReleaseProgram(fp);
    if (out) *out = r;
    else free_result(&r);
}

static float s2 = 2.5f, s1 = 1.25f;

#define BUF(i) {TA_BUF, i, 0, NULL}
#define SCALAR(p) {TA_SCALAR, 0, sizeof *(p), p}

/* three elementwise kernels over one range fuse without a barrier */
static void chain_of_three_fuses_without_barrier(void **state)
{
    (void)state;
    struct tkernel tk[3] = {
        {.name = "scale", .args = {BUF(0), BUF(1), SCALAR(&s2)}, .cls = {100, 101, 1}, .nargs = 3, .gs = NELEM},
        {.name = "offset", .args = {BUF(1), BUF(2), SCALAR(&s1)}, .cls = {101, 102, 2}, .nargs = 3, .gs = NELEM},
        {.name = "square", .args = {BUF(2)}, .cls = {102}, .nargs = 1, .gs = NELEM},
    };
    struct fuse_result r;
    fuse_and_compare(tk, 3, 3, 0, &r);
    assert_int_equal(r.barrier_inserted, 0);
    assert_int_equal(r.num_params, 5); /* in, B, s2, C, s1: B and C appear twice */
    assert_int_equal(r.global_size[0], NELEM);
    free_result(&r);
}

/* `internal`: an intermediate is internalised; the rules keep others in
 * memory with a reason (tests/integration/test_fusion_internal.sh runs it) */
/* The `const` option: baked classes leave the fused kernel's parameters and
 * appear as constants (bit-exact: 0.1f keeps its bits); the two factors of
 * a contracted a * b + c stay parameters (LLVM would fold them into a
 * rounded product, unlike a device that fuses). */
static void const_option_bakes_scalars(void **state)
{
    (void)state;
    static const float tenth = 0.1f, minus = -2.5f;
    struct tkernel chain[2] = {
        {.name = "scale", .args = {BUF(0), BUF(1), SCALAR(&s2)}, .cls = {100, 101, 1}, .nargs = 3, .gs = NELEM},
        {.name = "offset", .args = {BUF(1), BUF(2), SCALAR(&s1)}, .cls = {101, 102, 2}, .nargs = 3, .gs = NELEM},
    };
    struct fuse_kernel fk[2];
    fill_request(chain, 2, fk);
    struct fuse_const consts[2] = {{1, 4, (const unsigned char *)&tenth}, {2, 4, (const unsigned char *)&minus}};
    struct fuse_request req = {fk, 2, "fused", 0, 0, consts, 2, NULL};
    struct fuse_result r;
    assert_int_equal(api->fuse(&req, &r), 0);
    assert_int_equal(r.consts_baked, 2);
    assert_int_equal(r.num_params, 3); /* the three buffers */
    char *text = NULL, err[256];
    assert_int_equal(api->bitcode_to_text(r.bitcode, r.bitcode_size, &text, err, sizeof err), 0);
    assert_non_null(strstr(text, "0x3FB99999A0000000")); /* 0.1f, exactly */
    assert_non_null(strstr(text, "-2.500000e+00"));
    api->free(text);
    free_result(&r);

    size_t size;
    void *bc = compile("__kernel void mad2(__global float *io, float a, float b, float c) {\n"
                       "    size_t i = get_global_id(0); io[i] = a * b + io[i] * c; }\n"
                       "__kernel void inc(__global float *io, float d) {\n"
                       "    size_t i = get_global_id(0); io[i] = io[i] + d; }\n", &size);
    struct tkernel mad[2] = {
        {.bc = bc, .bc_size = size, .name = "mad2", .args = {BUF(0), SCALAR(&s1), SCALAR(&s2), SCALAR(&s1)},
         .cls = {100, 1, 2, 3}, .nargs = 4, .gs = NELEM},
        {.bc = bc, .bc_size = size, .name = "inc", .args = {BUF(0), SCALAR(&s2)}, .cls = {100, 4}, .nargs = 2,
         .gs = NELEM},
    };
    fill_request(mad, 2, fk);
    struct fuse_const four[4] = {{1, 4, (const unsigned char *)&s1}, {2, 4, (const unsigned char *)&s2},
                                 {3, 4, (const unsigned char *)&s1}, {4, 4, (const unsigned char *)&s2}};
    struct fuse_request req2 = {fk, 2, "fused", 0, 0, four, 4, NULL};
    assert_int_equal(api->fuse(&req2, &r), 0);
    assert_int_equal(r.consts_baked, 2);  /* c and d */
    assert_int_equal(r.num_params, 3);    /* io, a, b */
    assert_int_equal(r.param_kernel[1], 0);
    assert_int_equal(r.param_index[1], 1);
    assert_int_equal(r.param_index[2], 2);
    free_result(&r);
    free(bc);
}

static void internal_option_rules(void **state)
{
    (void)state;
    struct fuse_result r;
    struct tkernel chain[2] = {
        {.name = "scale", .args = {BUF(0), BUF(1), SCALAR(&s2)}, .cls = {100, 101, 1}, .nargs = 3, .gs = NELEM},
        {.name = "offset", .args = {BUF(1), BUF(2), SCALAR(&s1)}, .cls = {101, 102, 2}, .nargs = 3, .gs = NELEM},
    };
    assert_int_equal(fuse_internal(chain, 2, &r), 1);
    assert_string_equal(r.internal_kept, "");
    struct tkernel twice[2] = {
        {.name = "offset", .args = {BUF(1), BUF(2), SCALAR(&s1)}, .cls = {101, 102, 2}, .nargs = 3, .gs = NELEM},
        {.name = "scale", .args = {BUF(2), BUF(2), SCALAR(&s2)}, .cls = {102, 102, 1}, .nargs = 3, .gs = NELEM},
    };
    assert_int_equal(fuse_internal(twice, 2, &r), 0);
    assert_non_null(strstr(r.internal_kept, "of 'offset': it is bound to two parameters of kernel 'scale'"));
    struct tkernel smaller[2] = {
        {.name = "scale", .args = {BUF(0), BUF(1), SCALAR(&s2)}, .cls = {100, 101, 1}, .nargs = 3, .gs = NELEM},
        {.name = "offset", .args = {BUF(1), BUF(2), SCALAR(&s1)}, .cls = {101, 102, 2}, .nargs = 3, .gs = NELEM / 2},
    };
    assert_int_equal(fuse_internal(smaller, 2, &r), 0);
    assert_non_null(strstr(r.internal_kept, "kernel 'offset' runs over a smaller range"));
    struct tkernel apart[2] = {
        {.name = "scale", .args = {BUF(0), BUF(1), SCALAR(&s2)}, .cls = {100, 101, 1}, .nargs = 3, .gs = NELEM},
        {.name = "offset", .args = {BUF(0), BUF(2), SCALAR(&s1)}, .cls = {100, 102, 2}, .nargs = 3, .gs = NELEM},
    };
    assert_int_equal(fuse_internal(apart, 2, &r), 0);
    assert_string_equal(r.internal_kept, "no buffer is written by one kernel and read by a later one");
}

/* internal=KERNEL.ARG: only the named buffers (by name or index, through
 * any parameter bound to them); a named non-intermediate is kept with its
 * reason; a name the sequence lacks refuses the fusion */
static void internal_named_buffers(void **state)
{
    (void)state;
    struct fuse_result r;
    struct tkernel chain[3] = {
        {.name = "scale", .args = {BUF(0), BUF(1), SCALAR(&s2)}, .cls = {100, 101, 1}, .nargs = 3, .gs = NELEM},
        {.name = "offset", .args = {BUF(1), BUF(2), SCALAR(&s1)}, .cls = {101, 102, 2}, .nargs = 3, .gs = NELEM},
        {.name = "square", .args = {BUF(2)}, .cls = {102}, .nargs = 1, .gs = NELEM},
    };
    assert_int_equal(fuse_internal(chain, 3, &r), 1); /* square reads and writes 102: only 101 */
    assert_string_equal(r.internal_done, "'out' of 'scale'");
    assert_int_equal(fuse_internal_only(chain, 3, "scale.out", &r), 1);
    assert_string_equal(r.internal_done, "'out' of 'scale'");
    assert_string_equal(r.internal_kept, "");
    assert_int_equal(fuse_internal_only(chain, 3, "offset.0", &r), 1); /* the reader's parameter, by index */
    assert_string_equal(r.internal_done, "'out' of 'scale'");
    assert_int_equal(fuse_internal_only(chain, 2, "scale.in", &r), 0); /* an input */
    assert_string_equal(r.internal_done, "");
    assert_string_equal(r.internal_kept,
                        "internal=scale.in: it is not written by one kernel of the sequence and read by a later one");
    assert_int_equal(fuse_internal_only(chain, 3, "scale.in,offset.in", &r), 1);
    assert_string_equal(r.internal_kept,
                        "internal=scale.in: it is not written by one kernel of the sequence and read by a later one");
    struct fuse_kernel fk[3];
    fill_request(chain, 3, fk);
    static const char *const wrong[][2] = {
        {"scale.zz", "internal=scale.zz: the kernel has no such parameter"},
        {"scale.3", "internal=scale.3: the kernel has no such parameter"},
        {"offset.in,blur.in", "internal=blur.in: no kernel of that name in the sequence"},
    };
    for (size_t w = 0; w < sizeof wrong / sizeof *wrong; w++) {
        struct fuse_request req = {fk, 3, "fused", 0, 1, NULL, 0, wrong[w][0]};
        memset(&r, 0, sizeof r);
        assert_int_equal(api->fuse(&req, &r), CLSHIM_EUNSUPPORTED);
        assert_non_null(strstr(r.reason, wrong[w][1]));
    }
}

/* local memory: with a forced barrier, an intermediate one work-group
 * produces and consumes goes to a __local array; each rule that fails keeps
 * it stored, with its reason (fuse_local.c) */
static void internal_local_memory(void **state)
{
    (void)state;
    static const char *src =
        "__kernel void prod(__global const float *in, __global float *t) {\n"
        "    size_t i = get_global_id(0); t[i] = in[i] * 2.0f; }\n"
        "__kernel void condprod(__global const float *in, __global float *t) {\n"
        "    size_t i = get_global_id(0); if (in[i] > 0.0f) t[i] = in[i] * 2.0f; }\n"
        "__kernel void nbr(__global const float *t, __global float *out) {\n"
        "    size_t i = get_global_id(0), l = get_local_id(0), n = get_local_size(0);\n"
        "    out[i] = t[get_group_id(0) * n + (l + 1) % n] + t[i]; }\n"
        "__kernel void far(__global const float *t, __global float *out) {\n"
        "    size_t i = get_global_id(0); out[i] = t[(i + 1) % get_global_size(0)]; }\n";
    size_t size;
    void *bc = compile(src, &size);
    static const struct {
        const char *producer, *consumer;
        size_t ls;
        const char *kept; /* NULL: kept in local memory */
    } cases[] = {
        {"prod", "nbr", 64, NULL},
        {"prod", "nbr", 0, "not in local memory: the launch fixes no local size"},
        {"prod", "far", 64, "not in local memory: it is read at an index not proven inside the work-group's elements"},
        {"condprod", "nbr", 64, "not in local memory: a store to it is conditional or in a loop"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        struct tkernel tk[2] = {
            {.bc = bc, .bc_size = size, .name = cases[c].producer, .cls = {100, 101}, .nargs = 2, .gs = NELEM,
             .ls = cases[c].ls},
            {.bc = bc, .bc_size = size, .name = cases[c].consumer, .cls = {101, 102}, .nargs = 2, .gs = NELEM,
             .ls = cases[c].ls},
        };
        struct fuse_kernel fk[2];
        fill_request(tk, 2, fk);
        struct fuse_request req = {fk, 2, "fused", 1, 1, NULL, 0, NULL};
        struct fuse_result r;
        memset(&r, 0, sizeof r);
        int rc = api->fuse(&req, &r);
        if (rc) fprintf(stderr, "case %zu refused: %s\n", c, r.reason);
        assert_int_equal(rc, 0);
        assert_int_equal(r.barrier_inserted, 1);
        if (!cases[c].kept) {
            assert_int_equal(r.internalised, 1);
            assert_int_equal(r.internalised_local, 1);
            assert_string_equal(r.internal_local, "'t' of 'prod'");
            assert_string_equal(r.internal_kept, "");
        } else {
            if (!strstr(r.internal_kept, cases[c].kept)) fprintf(stderr, "case %zu: kept '%s'\n", c, r.internal_kept);
            assert_int_equal(r.internalised, 0);
            assert_non_null(strstr(r.internal_kept, cases[c].kept));
        }
        free_result(&r);
    }
    free(bc);
}

/* one buffer and one scalar shared by two kernels become one parameter each */
static void identical_arguments_are_elided(void **state)
{
    (void)state;
    struct tkernel tk[2] = {
        {.name = "scale", .args = {BUF(0), BUF(1), SCALAR(&s2)}, .cls = {100, 101, 7}, .nargs = 3, .gs = NELEM},
        {.name = "offset", .args = {BUF(1), BUF(2), SCALAR(&s2)}, .cls = {101, 102, 7}, .nargs = 3, .gs = NELEM},
    };
    struct fuse_result r;
    fuse_and_compare(tk, 2, 3, 0, &r);
    assert_int_equal(r.num_params, 4);
    uint32_t want_k[4] = {0, 0, 0, 1}, want_i[4] = {0, 1, 2, 1};
    for (int q = 0; q < 4; q++) {
        assert_int_equal(r.param_kernel[q], want_k[q]);
        assert_int_equal(r.param_index[q], want_i[q]);
    }
    free_result(&r);
}

/* smaller ranges run under guards and see their own get_global_size */
static void different_global_sizes_are_guarded(void **state)
{
    (void)state;
    struct tkernel tk[3] = {
        {.name = "scale", .args = {BUF(0), BUF(1), SCALAR(&s2)}, .cls = {100, 101, 1}, .nargs = 3, .gs = 1000},
        {.name = "sized", .args = {BUF(2)}, .cls = {102}, .nargs = 1, .gs = 600},
        {.name = "offset", .args = {BUF(1), BUF(3), SCALAR(&s1)}, .cls = {101, 103, 2}, .nargs = 3, .gs = 800},
    };
    struct fuse_result r;
    fuse_and_compare(tk, 3, 4, 0, &r);
    assert_int_equal(r.global_size[0], 1000);
    assert_int_equal(r.barrier_inserted, 0);
    free_result(&r);
}

/* reading a neighbour's element of a buffer written earlier needs a barrier */
static void neighbour_read_is_refused(void **state)
{
    (void)state;
    struct tkernel tk[2] = {
        {.name = "scale", .args = {BUF(0), BUF(1), SCALAR(&s2)}, .cls = {100, 101, 1}, .nargs = 3, .gs = NELEM},
        {.name = "shifted", .args = {BUF(1), BUF(2)}, .cls = {101, 102}, .nargs = 2, .gs = NELEM},
    };
    struct fuse_result r;
    assert_int_equal(fuse(tk, 2, 0, &r), CLSHIM_EUNSUPPORTED);
    assert_non_null(strstr(r.reason, "needs a barrier"));
    assert_non_null(strstr(r.reason, "'shifted'"));
    assert_non_null(strstr(r.reason, "'in'"));
    assert_null(r.bitcode);
    /* the same kernels on unrelated buffers need nothing */
    tk[1].cls[0] = 104;
    tk[1].args[0].buf = 3;
    fuse_and_compare(tk, 2, 4, 0, NULL);
}

/* loops over a written buffer, atomics on it, and an index that ignores a
 * dimension of a 2-D range all need a barrier */
static void other_dependencies_are_refused(void **state)
{
    (void)state;
    static int n = 16;
    struct tkernel tk[2] = {
        {.name = "scale", .args = {BUF(0), BUF(1), SCALAR(&s2)}, .cls = {100, 101, 1}, .nargs = 3, .gs = NELEM},
        {.name = "total", .args = {BUF(1), BUF(2), SCALAR(&n)}, .cls = {101, 102, 3}, .nargs = 3, .gs = NELEM},
    };
    struct fuse_result r;
    assert_int_equal(fuse(tk, 2, 0, &r), CLSHIM_EUNSUPPORTED);
    assert_non_null(strstr(r.reason, "needs a barrier: kernel 'total'"));
    struct tkernel at[2] = {
        {.name = "scale", .args = {BUF(0), BUF(1), SCALAR(&s2)}, .cls = {100, 101, 1}, .nargs = 3, .gs = NELEM},
        {.name = "bump", .args = {BUF(1)}, .cls = {101}, .nargs = 1, .gs = NELEM},
    };
    assert_int_equal(fuse(at, 2, 0, &r), CLSHIM_EUNSUPPORTED);
    assert_non_null(strstr(r.reason, "'bump'"));
    struct fuse_kernel fk[2];
    fill_request(tk, 2, fk);
    fk[1].name = "offset";
    uint32_t cls2[3] = {101, 102, 2};
    fk[1].arg_class = cls2;
    fk[1].num_args = 3;
    for (int i = 0; i < 2; i++) {
        fk[i].work_dim = 2;
        fk[i].global_size[0] = 64;
        fk[i].global_size[1] = 64;
    }
    struct fuse_request req = {fk, 2, "fused", 0, 0, NULL, 0, NULL};
    assert_int_equal(api->fuse(&req, &r), CLSHIM_EUNSUPPORTED);
    assert_non_null(strstr(r.reason, "dimension 1"));
}

/* forced: a barrier goes between the bodies, correct when the dependency
 * stays inside a work-group */
static void forced_barrier_is_inserted(void **state)
{
    (void)state;
    struct tkernel tk[2] = {
        {.name = "scale", .args = {BUF(0), BUF(1), SCALAR(&s2)}, .cls = {100, 101, 1}, .nargs = 3, .gs = NELEM, .ls = 64},
        {.name = "pairswap", .args = {BUF(1), BUF(2)}, .cls = {101, 102}, .nargs = 2, .gs = NELEM, .ls = 64},
    };
    struct fuse_result r;
    assert_int_equal(fuse(tk, 2, 0, &r), CLSHIM_EUNSUPPORTED);
    assert_non_null(strstr(r.reason, "'pairswap'"));
    fuse_and_compare(tk, 2, 3, 1, &r);
    assert_int_equal(r.barrier_inserted, 1);
    assert_non_null(strstr(r.reason, "needs a barrier"));
    assert_int_equal(r.local_size[0], 64);
    free_result(&r);
}

/* different local sizes, or a forced barrier over different ranges: refused */
static void incompatible_ranges_are_refused(void **state)
{
    (void)state;
    struct tkernel tk[2] = {
        {.name = "scale", .args = {BUF(0), BUF(1), SCALAR(&s2)}, .cls = {100, 101, 1}, .nargs = 3, .gs = NELEM, .ls = 64},
        {.name = "offset", .args = {BUF(1), BUF(2), SCALAR(&s1)}, .cls = {101, 102, 2}, .nargs = 3, .gs = NELEM, .ls = 32},
    };
    struct fuse_result r;
    assert_int_equal(fuse(tk, 2, 0, &r), CLSHIM_EUNSUPPORTED);
    assert_non_null(strstr(r.reason, "local sizes"));
    tk[1].ls = 64;
    tk[1].gs = 1000; /* not a multiple of 64 */
    assert_int_equal(fuse(tk, 2, 0, &r), CLSHIM_EUNSUPPORTED);
    assert_non_null(strstr(r.reason, "divide"));
    struct tkernel nb[2] = {
        {.name = "scale", .args = {BUF(0), BUF(1), SCALAR(&s2)}, .cls = {100, 101, 1}, .nargs = 3, .gs = NELEM},
        {.name = "shifted", .args = {BUF(1), BUF(2)}, .cls = {101, 102}, .nargs = 2, .gs = 2048},
    };
    assert_int_equal(fuse(nb, 2, 1, &r), CLSHIM_EUNSUPPORTED);
    assert_non_null(strstr(r.reason, "cannot be forced"));
    /* a kernel with barrier() cannot run under a guard */
    struct tkernel gb[2] = {
        {.name = "scale", .args = {BUF(0), BUF(1), SCALAR(&s2)}, .cls = {100, 101, 1}, .nargs = 3, .gs = NELEM, .ls = 64},
        {.name = "grouped", .args = {BUF(2), {TA_LOCAL, 0, 256, NULL}}, .cls = {102, 103}, .nargs = 2, .gs = 2048, .ls = 64},
    };
    assert_int_equal(fuse(gb, 2, 0, &r), CLSHIM_EUNSUPPORTED);
    assert_non_null(strstr(r.reason, "barrier"));
    assert_non_null(strstr(r.reason, "'grouped'"));
}

/* a kernel with __local memory and a barrier fuses unguarded; a struct
 * argument stays private to its body */
static void local_memory_and_struct_arguments_fuse(void **state)
{
    (void)state;
    static float ab[2] = {1.5f, -2.0f};
    struct tkernel tk[3] = {
        {.name = "grouped", .args = {BUF(0), {TA_LOCAL, 0, 256, NULL}}, .cls = {100, 5}, .nargs = 2, .gs = NELEM, .ls = 64},
        {.name = "affine", .args = {BUF(0), {TA_SCALAR, 0, sizeof ab, ab}}, .cls = {100, 6}, .nargs = 2, .gs = NELEM, .ls = 64},
        {.name = "affine", .args = {BUF(0), {TA_SCALAR, 0, sizeof ab, ab}}, .cls = {100, 6}, .nargs = 2, .gs = NELEM, .ls = 64},
    };
    struct fuse_result r;
    fuse_and_compare(tk, 3, 1, 0, &r);
    assert_int_equal(r.num_params, 3); /* io, tmp, p */
    free_result(&r);
}

static const char *prog_a = "__attribute__((noinline)) float f(float x) { return x * 2.0f; }\n"
                            "__kernel void ka(__global float *io) {\n"
                            "    size_t i = get_global_id(0); io[i] = f(io[i]); }\n";
static const char *prog_b = "__attribute__((noinline)) float f(float x) { return x + 3.0f; }\n"
                            "__kernel void kb(__global float *io) {\n"
                            "    size_t i = get_global_id(0); io[i] = f(io[i]); }\n";

/* PyOpenCL's ElementwiseKernel shape: byte offsets on every buffer and a
 * grid-stride loop from local_size * group_id + local_id. */
#define GRID_PROLOGUE(b)                                                                          \
    "    int lid = get_local_id(0); int gsize = get_global_size(0);\n"                            \
    "    int wgs = get_local_size(0) * get_group_id(0); long i;\n"                                \
    "    __global float *" #b " = (__global float *)((__global char *)" #b "__base + " #b "__offset);\n"
static const char *grid_src =
    "__kernel void gs_scale(__global float *x__base, long x__offset, __global float *y__base,\n"
    "                       long y__offset, float s, long n) {\n" GRID_PROLOGUE(x)
    "    __global float *y = (__global float *)((__global char *)y__base + y__offset);\n"
    "    for (i = wgs + lid; i < n; i += gsize) y[i] = x[i] * s + 1.0f; }\n"
    "__kernel void gs_square(__global float *y__base, long y__offset, __global float *z__base,\n"
    "                        long z__offset, long n) {\n" GRID_PROLOGUE(y)
    "    __global float *z = (__global float *)((__global char *)z__base + z__offset);\n"
    "    for (i = wgs + lid; i < n; i += gsize) z[i] = y[i] * y[i]; }\n"
    "__kernel void gid_square(__global float *y__base, long y__offset, long n) {\n" GRID_PROLOGUE(y)
    "    for (size_t j = get_global_id(0); j < n; j += get_global_size(0)) y[j] = y[j] * y[j]; }\n"
    "__kernel void gs_const(__global float *y__base, long y__offset, long n) {\n" GRID_PROLOGUE(y)
    "    for (i = wgs + lid; i < n; i += 64) y[i] = y[i] + 1.0f; }\n"
    "__kernel void gs_add(__global float *y__base, long y__offset, __global float *z__base,\n"
    "                     long z__offset, long n) {\n" GRID_PROLOGUE(y)
    "    __global float *z = (__global float *)((__global char *)z__base + z__offset);\n"
    "    for (i = wgs + lid; i < n; i += gsize) z[i] = z[i] + y[i]; }\n"
    "__kernel void gs_count(__global float *y__base, long y__offset, long n) {\n" GRID_PROLOGUE(y)
    "    for (i = wgs + lid; i < n; i += gsize) y[wgs + lid] += 1.0f; }\n"
    "__kernel void gs_last(__global float *y__base, long y__offset, __global float *w, long n) {\n"
    GRID_PROLOGUE(y)
    "    for (i = wgs + lid; i < n; i += gsize) { y[wgs + lid] = (float)i; w[i] = 0.5f; } }\n"
    "__kernel void gs_readpos(__global float *y__base, long y__offset, __global float *w, long n) {\n"
    GRID_PROLOGUE(y)
    "    for (i = wgs + lid; i < n; i += gsize) w[i] = y[wgs + lid] * 2.0f; }\n"
    "__kernel void gs_gather(__global float *y__base, long y__offset, __global const float *t,\n"
    "                        __global float *z__base, long z__offset, long n) {\n" GRID_PROLOGUE(y)
    "    __global float *z = (__global float *)((__global char *)z__base + z__offset);\n"
    "    for (i = wgs + lid; i < n; i += gsize) z[i] = y[i] + t[(i * 7) % 61]; }\n";

/* grid-stride loops over byte-offset buffers fuse without a barrier when
 * every kernel covers the fused range and offsets a shared buffer alike */
static void grid_stride_loops_fuse(void **state)
{
    (void)state;
    size_t size;
    void *bc = compile(grid_src, &size);
    cl_program p = tl_build_binary(bc, size);
    static long zero = 0, off16 = 16, off32 = 32, n = NELEM - 8;
    /* 256 work-items over NELEM - 8 elements: 16 iterations each */
    struct tkernel tk[2] = {
        {bc, size, p, "gs_scale", {BUF(0), SCALAR(&zero), BUF(1), SCALAR(&off16), SCALAR(&s2), SCALAR(&n)},
         {100, 9, 101, 10, 1, 11}, 6, 256, 64},
        {bc, size, p, "gs_square", {BUF(1), SCALAR(&off16), BUF(2), SCALAR(&zero), SCALAR(&n)},
         {101, 10, 102, 9, 11}, 5, 256, 64},
    };
    struct fuse_result r;
    fuse_and_compare(tk, 2, 3, 0, &r);
    assert_int_equal(r.barrier_inserted, 0);
    assert_int_equal(r.loops_merged, 1); /* one loop runs both bodies */
    free_result(&r);
    /* get_global_id-based grid stride after the group-based one: same
     * residues, but another start value: the loops stay apart */
    struct tkernel mixed[2] = {tk[0], {bc, size, p, "gid_square", {BUF(1), SCALAR(&off16), SCALAR(&n)},
                                       {101, 10, 11}, 3, 256, 64}};
    fuse_and_compare(mixed, 2, 3, 0, &r);
    assert_int_equal(r.loops_merged, 0);
    free_result(&r);
    /* three loops, one of them reading and writing z: merged into one */
    struct tkernel three[3] = {tk[0], tk[1], {bc, size, p, "gs_add", {BUF(1), SCALAR(&off16), BUF(2),
                                                                      SCALAR(&zero), SCALAR(&n)},
                                              {101, 10, 102, 9, 11}, 5, 256, 64}};
    fuse_and_compare(three, 3, 3, 0, &r);
    assert_int_equal(r.loops_merged, 2);
    free_result(&r);
    /* a gather from a buffer neither loop writes (t[(i * 7) % 61]): merged */
    struct tkernel gather[2] = {tk[0], {bc, size, p, "gs_gather", {BUF(1), SCALAR(&off16), BUF(0), BUF(2),
                                                                   SCALAR(&zero), SCALAR(&n)},
                                        {101, 10, 100, 102, 9, 11}, 6, 256, 64}};
    fuse_and_compare(gather, 2, 3, 0, &r);
    assert_int_equal(r.loops_merged, 1);
    free_result(&r);
    /* another bound (n - 8 in the second kernel): not merged */
    static long n8 = NELEM - 16;
    struct tkernel bounds[2] = {tk[0], tk[1]};
    bounds[1].args[4] = (struct targ)SCALAR(&n8);
    bounds[1].cls[4] = 13;
    fuse_and_compare(bounds, 2, 3, 0, &r);
    assert_int_equal(r.loops_merged, 0);
    free_result(&r);
    /* a loop writing one element on every trip (y[position] += 1): merged,
     * the next loop would read y before the count is done; not merged */
    struct tkernel count[2] = {{bc, size, p, "gs_count", {BUF(1), SCALAR(&off16), SCALAR(&n)},
                                {101, 10, 11}, 3, 256, 64}, tk[1]};
    fuse_and_compare(count, 2, 3, 0, &r);
    assert_int_equal(r.loops_merged, 0);
    free_result(&r);
    /* the same with a store alone (y[position] = i: the last trip's i; the
     * store to w, which may alias y, keeps it in the loop) */
    struct tkernel last[2] = {{bc, size, p, "gs_last", {BUF(1), SCALAR(&off16), BUF(0), SCALAR(&n)},
                               {101, 10, 100, 11}, 4, 256, 64}, tk[1]};
    fuse_and_compare(last, 2, 3, 0, &r);
    assert_int_equal(r.loops_merged, 0);
    free_result(&r);
    /* a loop reading y[position] on every trip before one writing y[i]:
     * merged, its later trips would read what the other loop wrote */
    struct tkernel readpos[2] = {{bc, size, p, "gs_readpos", {BUF(2), SCALAR(&zero), BUF(0), SCALAR(&n)},
                                  {102, 9, 100, 11}, 4, 256, 64},
                                 {bc, size, p, "gs_square", {BUF(1), SCALAR(&off16), BUF(2), SCALAR(&zero),
                                                             SCALAR(&n)},
                                  {101, 10, 102, 9, 11}, 5, 256, 64}};
    fuse_and_compare(readpos, 2, 3, 0, &r);
    assert_int_equal(r.loops_merged, 0);
    free_result(&r);

    /* the shared buffer offset differently by the second kernel */
    tk[1].args[1] = (struct targ)SCALAR(&off32);
    tk[1].cls[1] = 12;
    assert_int_equal(fuse(tk, 2, 0, &r), CLSHIM_EUNSUPPORTED);
    assert_non_null(strstr(r.reason, "byte offset"));
    tk[1].args[1] = (struct targ)SCALAR(&off16);
    tk[1].cls[1] = 10;
    /* a stride that is not the global size */
    struct tkernel cst[2] = {tk[0], {bc, size, p, "gs_const", {BUF(1), SCALAR(&off16), SCALAR(&n)},
                                     {101, 10, 11}, 3, 256, 64}};
    assert_int_equal(fuse(cst, 2, 0, &r), CLSHIM_EUNSUPPORTED);
    assert_non_null(strstr(r.reason, "'gs_const'"));
    /* a strided kernel with a smaller global size strides by its own size */
    tk[1].gs = 128;
    assert_int_equal(fuse(tk, 2, 0, &r), CLSHIM_EUNSUPPORTED);
    assert_non_null(strstr(r.reason, "strides over"));
    tk[1].gs = 256;
    /* local_size * group_id + local_id leaves out a global offset */
    struct fuse_kernel fk[2];
    fill_request(tk, 2, fk);
    for (int i = 0; i < 2; i++) fk[i].global_offset[0] = 64;
    struct fuse_request req = {fk, 2, "fused", 0, 0, NULL, 0, NULL};
    assert_int_equal(api->fuse(&req, &r), CLSHIM_EUNSUPPORTED);
    assert_non_null(strstr(r.reason, "global offset"));
    clReleaseProgram(p);
    free(bc);
}

/* kernels of two programs, each with its own helper `f`, fuse correctly */
static void kernels_of_two_programs_fuse(void **state)
{
    (void)state;
    size_t sa, sb;
    void *a = compile(prog_a, &sa), *b = compile(prog_b, &sb);
    cl_program pa = tl_build_binary(a, sa), pb = tl_build_binary(b, sb);
    struct tkernel tk[3] = {
        {a, sa, pa, "ka", {BUF(0)}, {100}, 1, NELEM, 0},
        {b, sb, pb, "kb", {BUF(0)}, {100}, 1, NELEM, 0},
        {a, sa, pa, "ka", {BUF(0)}, {100}, 1, NELEM, 0},
    };
    fuse_and_compare(tk, 3, 1, 0, NULL);
    clReleaseProgram(pa);
    clReleaseProgram(pb);
    free(a);
    free(b);
}

/* a kernel built from SPIR-V (translator output) fuses with a source one */
static void spirv_module_fuses_with_source_module(void **state)
{
    (void)state;
    void *spv = NULL, *bc = NULL;
    size_t spv_size, bc_size;
    char err[512];
    assert_int_equal(api->spir_to_spirv(chain_bc, chain_size, &spv, &spv_size, err, sizeof err), 0);
    assert_int_equal(api->spirv_to_spir(spv, spv_size, NULL, 0, &bc, &bc_size, err, sizeof err), 0);
    cl_program p = tl_build_binary(bc, bc_size);
    struct tkernel tk[2] = {
        {bc, bc_size, p, "scale", {BUF(0), BUF(1), SCALAR(&s2)}, {100, 101, 1}, 3, NELEM, 0},
        {NULL, 0, NULL, "offset", {BUF(1), BUF(2), SCALAR(&s1)}, {101, 102, 2}, 3, NELEM, 0},
    };
    fuse_and_compare(tk, 2, 3, 0, NULL);
    clReleaseProgram(p);
    api->free(spv);
    api->free(bc);
}

/* garbage modules, missing kernels, wrong argument counts: errors, no crash */
static void bad_requests_are_refused(void **state)
{
    (void)state;
    unsigned char junk[2048];
    srand(4242);
    for (size_t i = 0; i < sizeof junk; i++) junk[i] = (unsigned char)rand();
    struct tkernel tk[2] = {
        {.name = "scale", .args = {BUF(0), BUF(1), SCALAR(&s2)}, .cls = {100, 101, 1}, .nargs = 3, .gs = NELEM},
        {.name = "offset", .args = {BUF(1), BUF(2), SCALAR(&s1)}, .cls = {101, 102, 2}, .nargs = 3, .gs = NELEM},
    };
    struct fuse_result r;
    tk[1].bc = junk;
    tk[1].bc_size = sizeof junk;
    assert_int_equal(fuse(tk, 2, 0, &r), CLSHIM_EINVAL);
    assert_true(r.reason[0] != '\0');
    memcpy(junk, chain_bc, chain_size < sizeof junk ? chain_size : sizeof junk);
    tk[1].bc_size = chain_size < sizeof junk ? chain_size : sizeof junk; /* truncated bitcode */
    assert_int_equal(fuse(tk, 2, 0, &r), CLSHIM_EINVAL);
    tk[1].bc = NULL;
    tk[1].name = "no_such_kernel";
    assert_int_equal(fuse(tk, 2, 0, &r), CLSHIM_EUNSUPPORTED);
    assert_non_null(strstr(r.reason, "no_such_kernel"));
    tk[1].name = "offset";
    tk[1].nargs = 2;
    assert_int_equal(fuse(tk, 2, 0, &r), CLSHIM_EINVAL);
    assert_int_equal(fuse(tk, 1, 0, &r), CLSHIM_EINVAL);
    assert_null(r.bitcode);
}

/* the time of one fuse call for a 4-kernel chain, printed */
static void fuse_time_is_printed(void **state)
{
    (void)state;
    struct tkernel tk[4] = {
        {.name = "scale", .args = {BUF(0), BUF(1), SCALAR(&s2)}, .cls = {100, 101, 1}, .nargs = 3, .gs = NELEM},
        {.name = "offset", .args = {BUF(1), BUF(2), SCALAR(&s1)}, .cls = {101, 102, 2}, .nargs = 3, .gs = NELEM},
        {.name = "square", .args = {BUF(2)}, .cls = {102}, .nargs = 1, .gs = NELEM},
        {.name = "sized", .args = {BUF(2)}, .cls = {102}, .nargs = 1, .gs = NELEM},
    };
    struct fuse_result r;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(fuse(tk, 4, 0, &r), 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    fprintf(stderr, "fuse of a 4-kernel chain: %.2f ms (%zu bytes of bitcode)\n",
            (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6,
            r.bitcode_size);
    free_result(&r);
    fuse_and_compare(tk, 4, 3, 0, NULL);
}

static int group_setup(void **state)
{
    (void)state;
    tl_cl_init();
    chain_prog = tl_build_binary(chain_bc, chain_size);
    return 0;
}

int main(void)
{
    tl_point_at_module();
    api = llvm_api();
    if (!api) {
        fprintf(stderr, "cannot load the LLVM module\n");
        return 1;
    }
    char err[512];
    if (frontend_compile_source(chain_src, strlen(chain_src), NULL, &chain_bc, &chain_size, err,
                                sizeof err) != 0) {
        fprintf(stderr, "frontend: %s\n", err);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(chain_of_three_fuses_without_barrier),
        cmocka_unit_test(identical_arguments_are_elided),
        cmocka_unit_test(internal_option_rules),
        cmocka_unit_test(internal_named_buffers),
        cmocka_unit_test(internal_local_memory),
        cmocka_unit_test(different_global_sizes_are_guarded),
        cmocka_unit_test(neighbour_read_is_refused),
        cmocka_unit_test(other_dependencies_are_refused),
        cmocka_unit_test(forced_barrier_is_inserted),
        cmocka_unit_test(incompatible_ranges_are_refused),
        cmocka_unit_test(local_memory_and_struct_arguments_fuse),
        cmocka_unit_test(grid_stride_loops_fuse),
        cmocka_unit_test(kernels_of_two_programs_fuse),
        cmocka_unit_test(spirv_module_fuses_with_source_module),
        cmocka_unit_test(bad_requests_are_refused),
        cmocka_unit_test(fuse_time_is_printed),
        cmocka_unit_test(const_option_bakes_scalars),
    };
    return cmocka_run_group_tests(tests, group_setup, NULL);
}
