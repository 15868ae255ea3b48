/* test_fuse_join.c — route (b)'s join of several programs' sources
 * (fusion/fuse_join.c): which names are renamed, how the joined text reads,
 * what is refused, and which build options may be joined. The joined text
 * is also compiled with clang-15 (scripts/install-deps.sh installs it),
 * with a kernel calling each program's renamed kernel. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/error.h"
#include "fusion/fuse_source.h"

/* Two programs that declare the same names with different meanings. */
static const char prog_a[] =
    "#define PYOPENCL_ELWISE_CONTINUE continue\n"
    "#define TWICE(v) ((v) + (v))\n"
    "typedef float elwise_t;\n"
    "struct pair { float a, b; };\n"
    "enum mode { MODE_A, MODE_B = 3 };\n"
    "__constant elwise_t elwise_c = 1.0f, other_c[2] = {1.0f, 2.0f};\n"
    "/* a comment: float not_a_name(int); */\n"
    "elwise_t elwise_op(elwise_t v) { struct pair p = {v, elwise_c}; return TWICE(p.a) + p.b; }\n"
    "__kernel void __attribute__((reqd_work_group_size(64, 1, 1)))\n"
    "elwise_kernel(__global float *x, __global struct pair *q)\n"
    "{ size_t i = get_global_id(0); x[i] = elwise_op(x[i]) + (float)MODE_B + q[i].a; }\n";
static const char prog_b[] =
    "#define PYOPENCL_ELWISE_CONTINUE break\n"
    "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n"
    "typedef int elwise_t;\n"
    "__constant float elwise_c = 0.5f;\n"
    "float elwise_op(float v) { return v - elwise_c; }\n"
    "__kernel void elwise_kernel(__global float *x) { size_t i = get_global_id(0); x[i] = elwise_op(x[i]); }\n";

static int has(const struct fs_join *j, const char *s)
{
    return strstr(j->text, s) != NULL;
}

static int join2(const char *a, const char *b, struct fs_join *j, char *why, size_t why_len)
{
    struct fs_part parts[2] = {{a, strlen(a), ""}, {b, strlen(b), ""}};
    return fs_join(parts, 2, j, why, why_len);
}

static void renames_every_file_scope_name(void **state)
{
    (void)state;
    struct fs_join j;
    char why[256] = "";
    assert_int_equal(join2(prog_a, prog_b, &j, why, sizeof why), 0);
    assert_string_equal(j.prefix, "clshim_j0_");
    /* Program 0: kernel, helper, typedef, struct tag, enum tag and enumerators, both constants. */
    const char *a_names[] = {"elwise_kernel", "elwise_op", "elwise_t", "pair", "mode", "MODE_A", "MODE_B",
                             "elwise_c", "other_c"};
    char want[128], got[128];
    for (size_t i = 0; i < sizeof a_names / sizeof *a_names; i++) {
        snprintf(want, sizeof want, "#define %s clshim_j0_0_%s\n", a_names[i], a_names[i]);
        assert_true(has(&j, want));
        assert_int_equal(fs_join_name(&j, 0, a_names[i], got, sizeof got), 1);
        snprintf(want, sizeof want, "clshim_j0_0_%s", a_names[i]);
        assert_string_equal(got, want);
    }
    /* Not names: keywords, locals, parameters, members, macros, built-ins, a comment's words. */
    const char *not_names[] = {"float", "v", "p", "a", "b", "x", "q", "i", "TWICE", "PYOPENCL_ELWISE_CONTINUE",
                               "get_global_id", "reqd_work_group_size", "not_a_name", "__attribute__"};
    for (size_t i = 0; i < sizeof not_names / sizeof *not_names; i++)
        assert_int_equal(fs_join_name(&j, 0, not_names[i], got, sizeof got), 0);
    /* Program 1 is renamed apart from program 0. */
    assert_int_equal(fs_join_name(&j, 1, "elwise_kernel", got, sizeof got), 1);
    assert_string_equal(got, "clshim_j0_1_elwise_kernel");
    assert_int_equal(fs_join_name(&j, 1, "pair", got, sizeof got), 0);
    assert_true(has(&j, "#define elwise_c clshim_j0_1_elwise_c\n"));
    /* After each program: its renames and its macros undefined, so the next one starts clean. */
    const char *after_a = strstr(j.text, prog_a) + strlen(prog_a);
    const char *b_at = strstr(j.text, prog_b);
    assert_non_null(b_at);
    assert_true(after_a < b_at);
    assert_non_null(strstr(after_a, "#undef PYOPENCL_ELWISE_CONTINUE\n"));
    assert_true(strstr(after_a, "#undef PYOPENCL_ELWISE_CONTINUE\n") < b_at);
    assert_true(strstr(after_a, "#undef TWICE\n") < b_at);
    assert_true(strstr(after_a, "#undef elwise_op\n") < b_at);
    assert_non_null(strstr(b_at, "#undef elwise_op\n"));
    /* An extension program 1 enables is disabled again after it (each program starts with none). */
    assert_non_null(strstr(b_at + strlen(prog_b), "#pragma OPENCL EXTENSION cl_khr_fp64 : disable\n"));
    assert_true(strstr(j.text, "cl_khr_fp64 : disable") > b_at);
    /* A parameter type naming a renamed type is renamed as the join spells it. */
    char type[128] = "struct pair*";
    assert_int_equal(fs_join_type(&j, 0, type, sizeof type), 0);
    assert_string_equal(type, "struct clshim_j0_0_pair*");
    snprintf(type, sizeof type, "float4*");
    assert_int_equal(fs_join_type(&j, 1, type, sizeof type), 0);
    assert_string_equal(type, "float4*");
    fs_join_free(&j);
}

static void prefix_no_source_spells(void **state)
{
    (void)state;
    struct fs_join j;
    char why[256] = "";
    const char *b = "float clshim_j0_x(float v) { return v; }\n__kernel void k(__global float *x) { x[0] = 1; }\n";
    assert_int_equal(join2(prog_a, b, &j, why, sizeof why), 0);
    assert_string_equal(j.prefix, "clshim_j1_");
    assert_true(has(&j, "#define clshim_j0_x clshim_j1_1_clshim_j0_x\n"));
    fs_join_free(&j);
}

static void refuses_what_could_leak(void **state)
{
    (void)state;
    struct {
        const char *source, *reason;
    } cases[] = {
        {"#include \"h.cl\"\n__kernel void k(__global float *x) { }\n", "#include"},
        {"#undef FOO\n__kernel void k(__global float *x) { }\n", "#undef FOO"},
        {"#pragma OPENCL FP_CONTRACT OFF\n__kernel void k(__global float *x) { }\n", "#pragma"},
        {"#ifdef helper\n#endif\nfloat helper(float v) { return v; }\n__kernel void k(__global float *x) { }\n",
         "tests 'helper' in a conditional directive"},
        /* A kernel's own name: joined, it is renamed. */
        {"__kernel void k(__global float *x) { x[0] = sizeof(__func__); }\n", "own name (__func__)"},
        {"__kernel void k(__global float *x) { x[0] = sizeof(__FUNCTION__); }\n", "own name (__FUNCTION__)"},
        {"#define CAT(a, b) a##b\n__kernel void k(__global float *x) { x[0] = sizeof(CAT(__fu, nc__)); }\n",
         "pastes tokens (##)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct fs_join j;
        char why[256] = "";
        assert_int_equal(join2(prog_a, cases[i].source, &j, why, sizeof why), CLSHIM_EUNSUPPORTED);
        assert_non_null(strstr(why, cases[i].reason));
        assert_null(j.text);
    }
    /* Its own macro undefined, an unroll pragma: fine. */
    struct fs_join j;
    char why[256] = "";
    assert_int_equal(join2(prog_a, "#define M 1\n#undef M\n#pragma unroll 4\n__kernel void k(__global float *x) { }\n",
                           &j, why, sizeof why), 0);
    fs_join_free(&j);
}

static void options(void **state)
{
    (void)state;
    char why[256] = "";
    assert_int_equal(fs_join_options("", "", why, sizeof why), 0);
    assert_int_equal(fs_join_options("-cl-mad-enable -DN=4", "-cl-mad-enable -DN=4", why, sizeof why), 0);
    /* Options that change no code of a program that includes nothing. */
    assert_int_equal(fs_join_options("-I /usr/lib/pyopencl/cl", "-cl-kernel-arg-info -w -g -I/x", why, sizeof why), 0);
    assert_int_equal(fs_join_options("-DN=4", "-DN=5", why, sizeof why), CLSHIM_EUNSUPPORTED);
    assert_non_null(strstr(why, "'-DN=4' against '-DN=5'"));
    assert_int_equal(fs_join_options("", "-cl-fast-relaxed-math", why, sizeof why), CLSHIM_EUNSUPPORTED);
    assert_non_null(strstr(why, "'(none)' against '-cl-fast-relaxed-math'"));
    assert_int_equal(fs_join_options("-cl-std=CL2.0", "-cl-std=CL1.2", why, sizeof why), CLSHIM_EUNSUPPORTED);
    assert_int_equal(fs_join_options("-D \"N=4\"", "-D N=4", why, sizeof why), 0);
}

/* The joined text compiles, with a kernel calling both renamed kernels. */
static void joined_text_compiles(void **state)
{
    (void)state;
    struct fs_join j;
    char why[256] = "";
    assert_int_equal(join2(prog_a, prog_b, &j, why, sizeof why), 0);
    char path[] = "/tmp/clshim-join-XXXXXX.cl";
    int fd = mkstemps(path, 3);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs(j.text, f);
    fputs("\n__kernel void both(__global float *x, __global struct clshim_j0_0_pair *q)\n"
          "{ clshim_j0_0_elwise_kernel(x, q); clshim_j0_1_elwise_kernel(x); }\n", f);
    fclose(f);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "clang-15 -x cl -cl-std=CL1.2 -fsyntax-only -Werror %s", path);
    int rc = system(cmd);
    remove(path);
    fs_join_free(&j);
    assert_int_equal(rc, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(renames_every_file_scope_name),
        cmocka_unit_test(prefix_no_source_spells),
        cmocka_unit_test(refuses_what_could_leak),
        cmocka_unit_test(options),
        cmocka_unit_test(joined_text_compiles),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
