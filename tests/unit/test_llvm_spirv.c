/* test_llvm_spirv.c — the loader, the OpenCL C frontend and the SPIR-V path:
 * SPIR-V made from OpenCL C goes through spirv_to_spir into PoCL
 * (clCreateProgramWithBinary) and must compute exactly what the same source
 * built by PoCL computes; malformed SPIR-V is refused, never fatal. */
#include "test_llvm_common.h"

#include <time.h>

#include "fusion/frontend.h"

static const struct clshim_llvm_api *api;

/* Local memory, barrier, float4, a struct argument and double. */
/* FP_CONTRACT OFF: with contraction on, clang emits llvm.fmuladd, which the
 * translator writes as OpenCL.std mad; PoCL then computes mad unfused while
 * its own source build fuses, so the two differ in the last bit (both
 * conforming). Bit-exact comparison needs one rounding rule. */
static const char *features_src =
    "#pragma OPENCL FP_CONTRACT OFF\n"
    "typedef struct { float scale; int bias; double d; } params_t;\n"
    "__kernel void reverse_in_group(__global const float *in, __global float *out,\n"
    "                               __local float *tmp) {\n"
    "    size_t l = get_local_id(0), n = get_local_size(0);\n"
    "    tmp[l] = in[get_global_id(0)];\n"
    "    barrier(CLK_LOCAL_MEM_FENCE);\n"
    "    out[get_global_id(0)] = tmp[n - 1 - l];\n"
    "}\n"
    "__kernel void vec4(__global const float4 *a, __global float4 *b, float4 k) {\n"
    "    size_t i = get_global_id(0);\n"
    "    b[i] = a[i] * k + (float4)(1.0f, 2.0f, 3.0f, 4.0f);\n"
    "}\n"
    "__kernel void with_struct(__global const float *in, __global float *out, params_t p) {\n"
    "    size_t i = get_global_id(0);\n"
    "    out[i] = in[i] * p.scale + (float)p.bias + (float)p.d;\n"
    "}\n"
    "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n"
    "__kernel void dbl(__global const double *in, __global double *out) {\n"
    "    size_t i = get_global_id(0);\n"
    "    out[i] = sqrt(in[i]) * 1.000000001 + exp(in[i] / 1000.0);\n"
    "}\n";

typedef struct {
    float scale;
    int bias;
    double d;
} params_t;

#define N 256

static void *mkdata(size_t bytes, unsigned seed)
{
    unsigned char *p = malloc(bytes);
    assert_non_null(p);
    float *f = (float *)p;
    srand(seed);
    for (size_t i = 0; i < bytes / sizeof(float); i++) f[i] = (float)(rand() % 10000) / 37.0f;
    return p;
}

/* Runs every kernel of features_src on program p into fresh buffers (fixed
 * inputs) and returns the buffers for comparison. */
static void run_features(cl_program p, struct tbufs *b)
{
    size_t sizes[6] = {N * 4, N * 4, N * 16, N * 16, N * 8, N * 8};
    void *init[6];
    for (int i = 0; i < 6; i++) init[i] = mkdata(sizes[i], 100u + (unsigned)i);
    double *din = init[4];
    for (int i = 0; i < N; i++) din[i] = i * 3.25 + 0.5;
    tl_bufs_create(b, 6, sizes, init);
    for (int i = 0; i < 6; i++) free(init[i]);
    size_t gs[1] = {N}, ls[1] = {64}, off[1] = {0};
    struct targ rev[3] = {{TA_BUF, 0, 0, NULL}, {TA_BUF, 1, 0, NULL}, {TA_LOCAL, 0, 64 * 4, NULL}};
    tl_run(p, "reverse_in_group", rev, 3, b, 1, off, gs, ls);
    float k4[4] = {0.5f, -1.0f, 2.0f, 3.5f};
    struct targ v4[3] = {{TA_BUF, 2, 0, NULL}, {TA_BUF, 3, 0, NULL}, {TA_SCALAR, 0, 16, k4}};
    tl_run(p, "vec4", v4, 3, b, 1, off, gs, NULL);
    params_t prm = {1.5f, -7, 0.25};
    struct targ st[3] = {{TA_BUF, 0, 0, NULL}, {TA_BUF, 1, 0, NULL},
                         {TA_SCALAR, 0, sizeof prm, &prm}};
    /* with_struct reads buffer 0 and overwrites buffer 1 after reverse_in_group */
    tl_run(p, "with_struct", st, 3, b, 1, off, gs, NULL);
    struct targ d[2] = {{TA_BUF, 4, 0, NULL}, {TA_BUF, 5, 0, NULL}};
    tl_run(p, "dbl", d, 2, b, 1, off, gs, NULL);
}

static void *source_to_spirv(const char *src, size_t *size)
{
    void *bc = NULL, *spv = NULL;
    size_t bc_size = 0;
    char err[512];
    int rc = frontend_compile_source(src, strlen(src), "-cl-std=CL1.2", &bc, &bc_size, err,
                                     sizeof err);
    if (rc) fprintf(stderr, "frontend: %s\n", err);
    assert_int_equal(rc, 0);
    rc = api->spir_to_spirv(bc, bc_size, &spv, size, err, sizeof err);
    if (rc) fprintf(stderr, "spir_to_spirv: %s\n", err);
    assert_int_equal(rc, 0);
    free(bc);
    return spv;
}

/* the module loads once, with the right version, and stays loaded */
static void loader_loads_module_once(void **state)
{
    (void)state;
    assert_non_null(api);
    assert_int_equal(api->version, CLSHIM_LLVM_API_VERSION);
    assert_true(llvm_api_loaded());
    assert_ptr_equal(llvm_api(), api);
}

/* the frontend returns bitcode, honours -D, and reports compile errors */
static void frontend_compiles_and_reports_errors(void **state)
{
    (void)state;
    const char *src = "__kernel void k(__global int *o) { o[get_global_id(0)] = VALUE; }";
    void *bc = NULL;
    size_t size = 0;
    char err[512];
    assert_int_equal(frontend_compile_source(src, strlen(src), "-D VALUE=3 -cl-mad-enable "
                                             "-cl-nv-verbose -w", &bc, &size, err, sizeof err), 0);
    assert_true(size > 4);
    assert_memory_equal(bc, "BC\xc0\xde", 4);
    free(bc);
    assert_int_equal(frontend_compile_source(src, strlen(src), "-DVALUE=\"(1 + 2)\"", &bc, &size,
                                             err, sizeof err), 0);
    free(bc);
    /* VALUE undefined: a compile error with clang's message */
    assert_int_equal(frontend_compile_source(src, strlen(src), NULL, &bc, &size, err, sizeof err),
                     CLSHIM_EINVAL);
    assert_null(bc);
    assert_non_null(strstr(err, "VALUE"));
    assert_int_equal(frontend_compile_source(src, strlen(src), "-DVALUE=\"1", &bc, &size, err,
                                             sizeof err), CLSHIM_EINVAL);
    assert_int_equal(frontend_compile_source(src, strlen(src), "-D", &bc, &size, err, sizeof err),
                     CLSHIM_EINVAL);
}

/* OpenCL C -> SPIR-V -> spirv_to_spir -> PoCL gives the source build's bits */
static void spirv_path_matches_source_build(void **state)
{
    (void)state;
    size_t spv_size;
    void *spv = source_to_spirv(features_src, &spv_size);
    void *bc = NULL;
    size_t bc_size = 0;
    char err[512];
    int rc = api->spirv_to_spir(spv, spv_size, NULL, 0, &bc, &bc_size, err, sizeof err);
    if (rc) fprintf(stderr, "spirv_to_spir: %s\n", err);
    assert_int_equal(rc, 0);
    cl_program from_spirv = tl_build_binary(bc, bc_size);
    cl_program from_source = tl_build_source(features_src, "-cl-std=CL1.2");
    struct tbufs a, b;
    run_features(from_source, &a);
    run_features(from_spirv, &b);
    tl_assert_same(&a, &b);
    tl_bufs_release(&a);
    tl_bufs_release(&b);
    clReleaseProgram(from_spirv);
    clReleaseProgram(from_source);
    api->free(bc);
    api->free(spv);
}

/* SPIR-V from the llvm-spirv-15 tool (not our writer) also runs on PoCL */
static void spirv_from_llvm_spirv_tool_runs(void **state)
{
    (void)state;
    char cl[4200], bcp[4200], spvp[4200];
    snprintf(cl, sizeof cl, "%s/f.cl", tl_tmpdir());
    snprintf(bcp, sizeof bcp, "%s/f.bc", tl_tmpdir());
    snprintf(spvp, sizeof spvp, "%s/f.spv", tl_tmpdir());
    tl_write_file(cl, features_src, strlen(features_src));
    char *clang[] = {"clang-15", "-x", "cl", "-target", "spir64", "-cl-std=CL1.2", "-emit-llvm",
                     "-c", "-Xclang", "-no-opaque-pointers", cl, "-o", bcp, NULL};
    assert_int_equal(tl_spawn(clang), 0);
    char *tr[] = {"llvm-spirv-15", bcp, "-o", spvp, NULL};
    assert_int_equal(tl_spawn(tr), 0);
    size_t spv_size, bc_size;
    void *spv = tl_read_file(spvp, &spv_size), *bc = NULL;
    char err[512];
    assert_int_equal(api->spirv_to_spir(spv, spv_size, NULL, 0, &bc, &bc_size, err, sizeof err), 0);
    cl_program from_spirv = tl_build_binary(bc, bc_size);
    cl_program from_source = tl_build_source(features_src, NULL);
    struct tbufs a, b;
    run_features(from_source, &a);
    run_features(from_spirv, &b);
    tl_assert_same(&a, &b);
    tl_bufs_release(&a);
    tl_bufs_release(&b);
    clReleaseProgram(from_spirv);
    clReleaseProgram(from_source);
    api->free(bc);
    free(spv);
}

/* a byte-swapped (big-endian) module translates like the original */
static void spirv_byteswapped_module_accepted(void **state)
{
    (void)state;
    size_t spv_size;
    uint32_t *spv = source_to_spirv(features_src, &spv_size);
    for (size_t i = 0; i < spv_size / 4; i++) spv[i] = __builtin_bswap32(spv[i]);
    void *bc = NULL;
    size_t bc_size = 0;
    char err[512];
    assert_int_equal(api->spirv_to_spir(spv, spv_size, NULL, 0, &bc, &bc_size, err, sizeof err), 0);
    assert_memory_equal(bc, "BC\xc0\xde", 4);
    api->free(bc);
    api->free(spv);
}

static const char *spec_src =
    "int __attribute__((overloadable)) __spirv_SpecConstant(int id, int def);\n"
    "__kernel void k(__global int *out) { out[get_global_id(0)] = __spirv_SpecConstant(7, 42) + "
    "(int)get_global_id(0); }\n";

static void run_spec(const void *spv, size_t size, const struct llvm_spec_const *c, size_t nc,
                     int expect_base)
{
    void *bc = NULL;
    size_t bc_size = 0;
    char err[512];
    int rc = api->spirv_to_spir(spv, size, c, nc, &bc, &bc_size, err, sizeof err);
    if (rc) fprintf(stderr, "spirv_to_spir: %s\n", err);
    assert_int_equal(rc, 0);
    cl_program p = tl_build_binary(bc, bc_size);
    size_t sz[1] = {64 * 4};
    void *init[1] = {calloc(64, 4)};
    struct tbufs b;
    tl_bufs_create(&b, 1, sz, init);
    free(init[0]);
    size_t gs[1] = {64}, off[1] = {0};
    struct targ a[1] = {{TA_BUF, 0, 0, NULL}};
    tl_run(p, "k", a, 1, &b, 1, off, gs, NULL);
    int *out = tl_read(&b, 0);
    for (int i = 0; i < 64; i++) assert_int_equal(out[i], expect_base + i);
    free(out);
    tl_bufs_release(&b);
    clReleaseProgram(p);
    api->free(bc);
}

/* OpSpecConstant (SpecId 7) takes its default, or the value given */
static void spec_constant_is_applied(void **state)
{
    (void)state;
    size_t size;
    uint32_t *spv = source_to_spirv(spec_src, &size);
    /* the module really has an OpDecorate SpecId 7 (opcode 71, decoration 1) */
    int found = 0;
    for (size_t i = 5; i < size / 4;) {
        uint32_t wc = spv[i] >> 16, op = spv[i] & 0xffff;
        if (op == 71 && wc == 4 && spv[i + 2] == 1 && spv[i + 3] == 7) found = 1;
        i += wc ? wc : 1;
    }
    assert_true(found);
    run_spec(spv, size, NULL, 0, 42);
    struct llvm_spec_const c = {7, 4, 99};
    run_spec(spv, size, &c, 1, 99);
    struct llvm_spec_const wrong = {7, 3, 99};
    void *bc = NULL;
    size_t bc_size;
    char err[512];
    assert_int_equal(api->spirv_to_spir(spv, size, &wrong, 1, &bc, &bc_size, err, sizeof err),
                     CLSHIM_EINVAL);
    api->free(spv);
}

static void expect_einval(const void *p, size_t n, const char *what)
{
    void *bc = (void *)1;
    size_t bc_size = 7;
    char err[512] = "";
    int rc = api->spirv_to_spir(p, n, NULL, 0, &bc, &bc_size, err, sizeof err);
    if (rc != CLSHIM_EINVAL) fprintf(stderr, "%s: rc %d\n", what, rc);
    assert_int_equal(rc, CLSHIM_EINVAL);
    assert_true(err[0] != '\0');
    assert_null(bc);
    assert_int_equal(bc_size, 0);
}

/* random bytes, wrong magic, truncation and flipped bits: EINVAL or a
 * module, never a crash of this process */
static void malformed_spirv_is_refused(void **state)
{
    (void)state;
    size_t size;
    uint32_t *spv = source_to_spirv(features_src, &size);
    srand(12345);
    unsigned char *junk = malloc(size);
    for (int it = 0; it < 20; it++) {
        for (size_t i = 0; i < size; i++) junk[i] = (unsigned char)rand();
        expect_einval(junk, size - (size_t)it, "random bytes");
    }
    expect_einval(NULL, 0, "empty");
    expect_einval(spv, 3, "3 bytes");
    expect_einval(spv, size - 2, "not a multiple of 4");
    for (size_t cut = 20; cut < size; cut += size / 7 + 4) expect_einval(spv, cut & ~(size_t)3, "truncated");
    memcpy(junk, spv, size);
    ((uint32_t *)junk)[0] = 0x07230204;
    expect_einval(junk, size, "wrong magic");
    memcpy(junk, spv, size);
    ((uint32_t *)junk)[1] = 0x00010600; /* SPIR-V 1.6: newer than the translator */
    expect_einval(junk, size, "version 1.6");
    memcpy(junk, spv, size);
    ((uint32_t *)junk)[3] = 0; /* bound */
    expect_einval(junk, size, "zero bound");
    int refused = 0, accepted = 0;
    for (int it = 0; it < 60; it++) {
        memcpy(junk, spv, size);
        for (int f = 0; f < 3; f++) junk[20 + (size_t)rand() % (size - 20)] ^= (unsigned char)(1u << (rand() % 8));
        void *bc = NULL;
        size_t bc_size = 0;
        char err[512] = "";
        int rc = api->spirv_to_spir(junk, size, NULL, 0, &bc, &bc_size, err, sizeof err);
        assert_true(rc == 0 || rc == CLSHIM_EINVAL);
        if (rc) {
            refused++;
            assert_true(err[0] != '\0');
        } else {
            accepted++;
            api->free(bc);
        }
    }
    fprintf(stderr, "bit flips: %d refused, %d still translatable\n", refused, accepted);
    assert_true(refused > 0);
    free(junk);
    api->free(spv);
}

/* spir_to_spirv refuses bytes that are not SPIR bitcode */
static void spir_to_spirv_refuses_garbage(void **state)
{
    (void)state;
    unsigned char junk[4096];
    srand(777);
    for (size_t i = 0; i < sizeof junk; i++) junk[i] = (unsigned char)rand();
    void *out = NULL;
    size_t out_size = 0;
    char err[512] = "";
    assert_int_equal(api->spir_to_spirv(junk, sizeof junk, &out, &out_size, err, sizeof err),
                     CLSHIM_EINVAL);
    assert_null(out);
    assert_true(err[0] != '\0');
    memcpy(junk, "BC\xc0\xde", 4);
    assert_int_equal(api->spir_to_spirv(junk, sizeof junk, &out, &out_size, err, sizeof err),
                     CLSHIM_EINVAL);
    assert_int_equal(api->spir_to_spirv(NULL, 0, &out, &out_size, err, sizeof err), CLSHIM_EINVAL);
}

/* translation time, printed for the record */
static void translation_time_is_printed(void **state)
{
    (void)state;
    size_t size;
    void *spv = source_to_spirv(features_src, &size);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    void *bc = NULL;
    size_t bc_size;
    char err[512];
    assert_int_equal(api->spirv_to_spir(spv, size, NULL, 0, &bc, &bc_size, err, sizeof err), 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    fprintf(stderr, "spirv_to_spir of a %zu-byte module: %.2f ms\n", size,
            (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6);
    api->free(bc);
    api->free(spv);
}

/* A fuzzed module on which Debian's translator allocates without bound
 * (7 GB in 5 s, measured): refused under the default memory bound, and
 * under a timeout when there is none; a sound module still translates
 * under a small bound. The process lives on. */
static void translator_bounds_are_enforced(void **state)
{
    (void)state;
    const char *root = getenv("CLSHIM_ROOT");
    assert_non_null(root);
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fuzz/regress/fuzz_spirv_translate/runaway-memory.spv", root);
    size_t n;
    void *runaway = tl_read_file(path, &n);
    assert_non_null(runaway);

    void *bc = NULL;
    size_t bc_size = 0;
    char err[512] = "";
    /* the limits llvmload set from the knobs: 60 s, 2 GiB */
    assert_int_equal(api->spirv_to_spir(runaway, n, NULL, 0, &bc, &bc_size, err, sizeof err), CLSHIM_EINVAL);
    fprintf(stderr, "runaway module, default bounds: %s\n", err);
    /* bad_alloc in the child, or a sanitizer's allocator aborting it */
    assert_true(strstr(err, "ran out of memory") || strstr(err, "crashed"));
    assert_null(bc);

    struct llvm_limits quick = {.translate_timeout_ms = 300, .translate_max_memory = 0};
    api->set_limits(&quick);
    err[0] = '\0';
    assert_int_equal(api->spirv_to_spir(runaway, n, NULL, 0, &bc, &bc_size, err, sizeof err), CLSHIM_EINVAL);
    fprintf(stderr, "runaway module, no memory bound: %s\n", err);
    assert_non_null(strstr(err, "timed out after 0.3 s"));

    struct llvm_limits small = {.translate_timeout_ms = 60000, .translate_max_memory = 256u << 20};
    api->set_limits(&small);
    size_t size;
    void *spv = source_to_spirv(features_src, &size);
    assert_int_equal(api->spirv_to_spir(spv, size, NULL, 0, &bc, &bc_size, err, sizeof err), 0);
    assert_true(bc_size > 4);
    api->free(bc);
    api->free(spv);

    struct llvm_limits defaults = {.translate_timeout_ms = 60000, .translate_max_memory = 2ull << 30};
    api->set_limits(&defaults);
    free(runaway);
}

static int group_setup(void **state)
{
    (void)state;
    tl_cl_init();
    return 0;
}

int main(void)
{
    tl_point_at_module();
    if (llvm_api_loaded()) { /* nothing may load it before it is needed */
        fprintf(stderr, "the LLVM module was loaded before first use\n");
        return 1;
    }
    api = llvm_api();
    if (!api) {
        fprintf(stderr, "cannot load the LLVM module\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(loader_loads_module_once),
        cmocka_unit_test(frontend_compiles_and_reports_errors),
        cmocka_unit_test(spirv_path_matches_source_build),
        cmocka_unit_test(spirv_from_llvm_spirv_tool_runs),
        cmocka_unit_test(spirv_byteswapped_module_accepted),
        cmocka_unit_test(spec_constant_is_applied),
        cmocka_unit_test(malformed_spirv_is_refused),
        cmocka_unit_test(spir_to_spirv_refuses_garbage),
        cmocka_unit_test(translation_time_is_printed),
        cmocka_unit_test(translator_bounds_are_enforced),
    };
    return cmocka_run_group_tests(tests, group_setup, NULL);
}
