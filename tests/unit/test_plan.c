/* test_plan.c — the fusion plan parser (fusion/plan.h): both forms, every
 * error with its file:line:column, the whole-plan checks, and robustness
 * against arbitrary bytes (a fixed-seed random and mutation run). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/error.h"
#include "fusion/plan.h"

static char err[512];

static struct fusion_plan *parse(const char *text, enum plan_form form, int *rc)
{
    struct fusion_plan *p = calloc(1, sizeof *p);
    *rc = plan_parse(p, text, strlen(text), form, form == PLAN_FILE_FORM ? "p.plan" : "CLSHIM_FUSE", err, sizeof err);
    if (!*rc) *rc = plan_check(p, err, sizeof err);
    return p;
}

static void expect_error(const char *text, enum plan_form form, const char *message)
{
    int rc;
    struct fusion_plan *p = parse(text, form, &rc);
    if (rc != CLSHIM_EINVAL || strcmp(err, message)) fprintf(stderr, "input %s\n got %d '%s'\n", text, rc, err);
    assert_int_equal(rc, CLSHIM_EINVAL);
    assert_string_equal(err, message);
    plan_free(p);
}

/* the file form: comments, blank lines, names by spaces or '+', options */
static void file_form(void **state)
{
    int rc;
    struct fusion_plan *p = parse("# a plan\n\n  fuse a b c   # trailing comment\r\n"
                                  "fuse x+y\tforce-barrier\nfuse z+y+z internal\n",
                                  PLAN_FILE_FORM, &rc);
    assert_int_equal(rc, 0);
    assert_int_equal(p->nseqs, 3);
    assert_int_equal(p->seqs[0].n, 3);
    assert_string_equal(p->seqs[0].names[2], "c");
    assert_int_equal(p->seqs[0].force_barrier, 0);
    assert_string_equal(p->seqs[0].where, "p.plan:3:3");
    assert_int_equal(p->seqs[1].n, 2);
    assert_int_equal(p->seqs[1].force_barrier, 1);
    assert_int_equal(p->seqs[1].internal, 0);
    assert_int_equal(p->seqs[2].n, 3); /* a name may repeat */
    assert_int_equal(p->seqs[2].internal, 1);
    assert_int_equal(p->seqs[2].force_barrier, 0);
    assert_int_equal(p->seqs[2].n, 3); /* `internal` alone is the option, not a name */
    assert_true(plan_has_kernel(p, "y"));
    assert_false(plan_has_kernel(p, "w"));
    plan_free(p);
    p = parse("fuse a b const\nfuse c d internal const\n", PLAN_FILE_FORM, &rc); /* const: a keyword, never a name */
    assert_int_equal(rc, 0);
    assert_int_equal(p->nseqs, 2);
    assert_int_equal(p->seqs[0].n, 2);
    assert_int_equal(p->seqs[0].consts, 1);
    assert_int_equal(p->seqs[0].internal, 0);
    assert_int_equal(p->seqs[1].n, 2);
    assert_int_equal(p->seqs[1].consts, 1);
    assert_int_equal(p->seqs[1].internal, 1);
    plan_free(p);
    p = parse("fuse a+internal\n", PLAN_FILE_FORM, &rc); /* a kernel named internal, joined */
    assert_int_equal(rc, 0);
    assert_int_equal(p->seqs[0].n, 2);
    assert_string_equal(p->seqs[0].names[1], "internal");
    assert_int_equal(p->seqs[0].internal, 0);
    plan_free(p);
}

/* the inline form: sequences by ';', names by '+', options after ':' */
static void inline_form(void **state)
{
    int rc;
    struct fusion_plan *p = parse(" k1 + k2+k3 ;; k4+k5 : force-barrier , internal;", PLAN_INLINE_FORM, &rc);
    assert_int_equal(rc, 0);
    assert_int_equal(p->nseqs, 2);
    assert_int_equal(p->seqs[0].n, 3);
    assert_string_equal(p->seqs[0].names[1], "k2");
    assert_string_equal(p->seqs[1].names[0], "k4");
    assert_int_equal(p->seqs[1].force_barrier, 1);
    assert_int_equal(p->seqs[1].internal, 1);
    assert_int_equal(p->seqs[0].internal, 0);
    assert_string_equal(p->seqs[1].where, "CLSHIM_FUSE:1:16");
    assert_int_equal(p->seqs[1].consts, 0);
    plan_free(p);
    p = parse("a+b:const", PLAN_INLINE_FORM, &rc);
    assert_int_equal(rc, 0);
    assert_int_equal(p->seqs[0].consts, 1);
    assert_int_equal(p->seqs[0].n, 2);
    plan_free(p);
    p = parse("", PLAN_INLINE_FORM, &rc);
    assert_int_equal(rc, 0);
    assert_int_equal(p->nseqs, 0);
    plan_free(p);
}

/* every error names origin:line:column and what is wrong */
static void errors(void **state)
{
    expect_error("fuse a\n", PLAN_FILE_FORM, "p.plan:1:1: a sequence needs at least 2 kernels, found 1");
    expect_error("\n  fuze a b\n", PLAN_FILE_FORM, "p.plan:2:3: expected 'fuse', found 'fuze'");
    expect_error("fuse a b force-barier\n", PLAN_FILE_FORM,
                 "p.plan:1:10: unknown option 'force-barier' (known: force-barrier, internal, "
                 "internal=KERNEL.ARG,..., const)");
    expect_error("fuse a 1b\n", PLAN_FILE_FORM, "p.plan:1:8: '1b' is not a kernel name (names are C identifiers)");
    expect_error("fuse a++b\n", PLAN_FILE_FORM, "p.plan:1:8: missing kernel name in 'a++b'");
    expect_error("fuse a b force-barrier c\n", PLAN_FILE_FORM, "p.plan:1:24: kernel names must come before options");
    expect_error("fuse a b internal c\n", PLAN_FILE_FORM, "p.plan:1:19: kernel names must come before options");
    expect_error("fuse a b\x01\n", PLAN_FILE_FORM, "p.plan:1:9: unexpected control byte 0x01");
    expect_error("fuse a b\nfuse \xc3\xa9 b\n", PLAN_FILE_FORM,
                 "p.plan:2:6: '\\xc3\\xa9' is not a kernel name (names are C identifiers)");
    expect_error("a+b;c", PLAN_INLINE_FORM, "CLSHIM_FUSE:1:5: a sequence needs at least 2 kernels, found 1");
    expect_error("a+b;c+", PLAN_INLINE_FORM, "CLSHIM_FUSE:1:7: expected a kernel name at the end");
    expect_error("a+b c", PLAN_INLINE_FORM, "CLSHIM_FUSE:1:5: expected '+', ':' or ';', found 'c'");
    expect_error("a+b:", PLAN_INLINE_FORM, "CLSHIM_FUSE:1:5: expected an option after ':' or ','");
    expect_error("a+b:fast", PLAN_INLINE_FORM,
                 "CLSHIM_FUSE:1:5: unknown option 'fast' (known: force-barrier, internal, internal=KERNEL.ARG,..., const)");
    expect_error("a+-b", PLAN_INLINE_FORM, "CLSHIM_FUSE:1:3: expected a kernel name, found '-'");
}

/* internal=KERNEL.ARG,...: named buffers, in both forms, with their errors */
static void internal_args(void **state)
{
    (void)state;
    int rc;
    struct fusion_plan *p = parse("fuse k1 k2 k3 internal=k1.t1,k2.1 force-barrier\nfuse a b internal\n",
                                  PLAN_FILE_FORM, &rc);
    assert_int_equal(rc, 0);
    assert_int_equal(p->seqs[0].internal, 1);
    assert_string_equal(p->seqs[0].internal_args, "k1.t1,k2.1");
    assert_int_equal(p->seqs[0].force_barrier, 1);
    assert_null(p->seqs[1].internal_args);
    assert_int_equal(p->seqs[1].internal, 1);
    plan_free(p);
    /* inline: the list ends where a ',' is followed by an option word */
    p = parse("k1+k2:internal=k1.t1,k2.t_2,force-barrier;a+b:force-barrier,internal=b.0", PLAN_INLINE_FORM, &rc);
    assert_int_equal(rc, 0);
    assert_string_equal(p->seqs[0].internal_args, "k1.t1,k2.t_2");
    assert_int_equal(p->seqs[0].force_barrier, 1);
    assert_string_equal(p->seqs[1].internal_args, "b.0");
    assert_int_equal(p->seqs[1].force_barrier, 1);
    plan_free(p);
    expect_error("fuse k1 k2 internal=k3.t\n", PLAN_FILE_FORM,
                 "p.plan:1:21: internal=: kernel 'k3' is not in the sequence");
    expect_error("k1+k2:internal=k1.t,zz.x", PLAN_INLINE_FORM,
                 "CLSHIM_FUSE:1:21: internal=: kernel 'zz' is not in the sequence");
    expect_error("fuse k1 k2 internal=k1\n", PLAN_FILE_FORM,
                 "p.plan:1:21: expected KERNEL.ARG (a kernel of the sequence and its parameter's name or index) in "
                 "internal=, found 'k1'");
    expect_error("fuse k1 k2 internal=k1.t,\n", PLAN_FILE_FORM,
                 "p.plan:1:26: expected KERNEL.ARG (a kernel of the sequence and its parameter's name or index) in "
                 "internal=, found ''");
    expect_error("fuse k1 k2 internal=k1.2x\n", PLAN_FILE_FORM,
                 "p.plan:1:25: unexpected 'x' in internal= (items are KERNEL.ARG separated by ',')");
    expect_error("k1+k2:internal=k1.1234", PLAN_INLINE_FORM,
                 "CLSHIM_FUSE:1:16: expected KERNEL.ARG (a kernel of the sequence and its parameter's name or index) "
                 "in internal=, found 'k1.1234'");
    expect_error("k1+k2:internal,internal=k1.t", PLAN_INLINE_FORM,
                 "CLSHIM_FUSE:1:25: 'internal' and 'internal=' together (give one)");
    expect_error("fuse k1 k2 internal=k1.t internal\n", PLAN_FILE_FORM,
                 "p.plan:1:26: 'internal' and 'internal=' together (give one)");
    assert_int_equal(plan_internal_args_valid("k1.t1,k2.3"), 0);
    assert_int_equal(plan_internal_args_valid("k1.t1,"), CLSHIM_EINVAL);
    assert_int_equal(plan_internal_args_valid(""), CLSHIM_EINVAL);
    assert_int_equal(plan_internal_args_valid("k1"), CLSHIM_EINVAL);
    assert_int_equal(plan_internal_args_valid(NULL), CLSHIM_EINVAL);
}

/* a repeated sequence, or one that starts another, is refused */
static void whole_plan_checks(void **state)
{
    expect_error("fuse a b\nfuse a b\n", PLAN_FILE_FORM,
                 "p.plan:2:1: this sequence repeats the sequence at p.plan:1:1 (a sequence must not start another)");
    expect_error("a+b+c;a+b", PLAN_INLINE_FORM,
                 "CLSHIM_FUSE:1:7: this sequence is a prefix of the sequence at CLSHIM_FUSE:1:1 (a sequence must not "
                 "start another)");
    expect_error("a+b;a+b+c", PLAN_INLINE_FORM,
                 "CLSHIM_FUSE:1:5: this sequence extends the sequence at CLSHIM_FUSE:1:1 (a sequence must not start "
                 "another)");
    int rc;
    struct fusion_plan *p = parse("a+b+c;a+b+d;b+a", PLAN_INLINE_FORM, &rc); /* shared prefixes are fine */
    assert_int_equal(rc, 0);
    assert_int_equal(p->nseqs, 3);
    plan_free(p);
}

/* limits: name length, sequence length */
static void limits(void **state)
{
    char text[4096];
    memset(text, 'n', 300);
    memcpy(text, "fuse a ", 7);
    strcpy(text + 300, "\n");
    expect_error(text, PLAN_FILE_FORM, "p.plan:1:8: kernel name 'nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn...' is "
                                       "longer than 255 bytes");
    size_t o = 0;
    for (int i = 0; i <= PLAN_MAX_SEQ; i++) o += (size_t)sprintf(text + o, "%sk%d", i ? "+" : "", i);
    int rc;
    struct fusion_plan *p = parse(text, PLAN_INLINE_FORM, &rc);
    assert_int_equal(rc, CLSHIM_EINVAL);
    assert_non_null(strstr(err, "a sequence has at most 64 kernels"));
    plan_free(p);
}

/* plan_load: file and inline merged and checked together; missing file */
static void load(void **state)
{
    char path[] = "/tmp/test_plan_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *text = "fuse a b c\n";
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    struct fusion_plan *p = NULL;
    assert_int_equal(plan_load(path, "d+e", &p, err, sizeof err), 0);
    assert_int_equal(p->nseqs, 2);
    plan_free(p);
    assert_int_equal(plan_load(path, "a+b", &p, err, sizeof err), CLSHIM_EINVAL);
    assert_null(p);
    assert_non_null(strstr(err, "is a prefix of the sequence at"));
    assert_int_equal(plan_load(NULL, "", &p, err, sizeof err), 0);
    assert_null(p);
    unlink(path);
    assert_int_equal(plan_load(path, NULL, &p, err, sizeof err), CLSHIM_EIO);
    assert_non_null(strstr(err, "cannot read the fusion plan (No such file or directory)"));
    assert_int_equal(plan_load("/tmp", NULL, &p, err, sizeof err), CLSHIM_EIO);
    assert_non_null(strstr(err, "not a regular file"));
}

/* arbitrary bytes never crash, and every result is a plan or one message of
 * the form ORIGIN:LINE:COLUMN: ... (fixed seed; run under ASan in check-sanitize) */
static void random_input(void **state)
{
    static const char *pieces[] = {"fuse", " ", "a", "b", "+", ";", ":", ",", "#", "\n", "force-barrier", "internal", "\t",
                                   "k_1", "\r\n", "x", "-", "\0", "\xff", "fuse a b\n", "zz", "internal=", "a.b", ".", "b.1"};
    srand(12345);
    char buf[256];
    for (int iter = 0; iter < 20000; iter++) {
        size_t len = 0, parts = (size_t)(rand() % 24);
        for (size_t i = 0; i < parts; i++) {
            const char *pc = pieces[rand() % (int)(sizeof pieces / sizeof *pieces)];
            size_t n = *pc ? strlen(pc) : 1;
            if (len + n >= sizeof buf) break;
            memcpy(buf + len, pc, n);
            len += n;
        }
        if (rand() % 4 == 0 && len) buf[rand() % len] = (char)(rand() % 256);
        for (int form = 0; form < 2; form++) {
            struct fusion_plan *p = calloc(1, sizeof *p);
            int rc = plan_parse(p, buf, len, form ? PLAN_INLINE_FORM : PLAN_FILE_FORM, "f", err, sizeof err);
            if (!rc) rc = plan_check(p, err, sizeof err);
            if (rc) {
                assert_int_equal(rc, CLSHIM_EINVAL);
                unsigned line, col;
                assert_int_equal(sscanf(err, "f:%u:%u: ", &line, &col), 2);
                assert_true(line >= 1 && col >= 1);
            } else {
                for (uint32_t s = 0; s < p->nseqs; s++) {
                    assert_true(p->seqs[s].n >= 2);
                    if (p->seqs[s].internal_args) assert_int_equal(plan_internal_args_valid(p->seqs[s].internal_args), 0);
                }
            }
            plan_free(p);
        }
    }
}

/* Whether a program may define a planned kernel: identifiers of OpenCL C,
 * NUL-terminated word-aligned strings of SPIR-V. */
static void names_in_program(void **state)
{
    (void)state;
    int rc;
    struct fusion_plan *p = parse("scale+offset;blur+blur", PLAN_INLINE_FORM, &rc);
    assert_int_equal(rc, 0);
    const char *with = "__kernel void scale(__global float *a) { a[0] *= 2; }";
    assert_true(plan_names_in_program(p, with, strlen(with), 0));
    const char *at_end = "kernel void x(void) {}\n// blur";
    assert_true(plan_names_in_program(p, at_end, strlen(at_end), 0));
    const char *longer = "__kernel void scale2(__global float *a) { rescale(a); offset_x(a); a[0] = blurry; }";
    assert_false(plan_names_in_program(p, longer, strlen(longer), 0));
    assert_false(plan_names_in_program(p, with, 16, 0)); /* "scale" lies past the length given */
    assert_false(plan_names_in_program(NULL, with, strlen(with), 0));
    static const unsigned char il[] = {3, 2, 35, 7, 'b', 'l', 'u', 'r', 0, 0, 0, 0};
    assert_true(plan_names_in_program(p, il, sizeof il, 1));
    static const unsigned char il_unaligned[] = {3, 2, 35, 'b', 'l', 'u', 'r', 0, 0};
    assert_false(plan_names_in_program(p, il_unaligned, sizeof il_unaligned, 1));
    static const unsigned char il_prefix[] = {3, 2, 35, 7, 'b', 'l', 'u', 'r', 's', 0, 0, 0};
    assert_false(plan_names_in_program(p, il_prefix, sizeof il_prefix, 1));
    plan_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(file_form),        cmocka_unit_test(inline_form), cmocka_unit_test(errors),
        cmocka_unit_test(internal_args), cmocka_unit_test(whole_plan_checks), cmocka_unit_test(limits),      cmocka_unit_test(load),
        cmocka_unit_test(random_input),     cmocka_unit_test(names_in_program),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
