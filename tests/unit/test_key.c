/* test_key.c — key material and hashing: what changes the key, what not. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache/key.h"

static struct cache_hash key_of(const char *src, const char *opts, int *rc)
{
    struct key_buf k;
    key_begin(&k, KEY_SOURCE, opts);
    key_add_text(&k, "device", "platform.name=test\n");
    char why[256];
    *rc = key_add_headers(&k, src, strlen(src), opts, why, sizeof why);
    key_add_blob(&k, "input", src, strlen(src));
    struct cache_hash h = key_hash(k.data, k.len);
    key_free(&k);
    return h;
}

static int same(struct cache_hash a, struct cache_hash b) { return a.lo == b.lo && a.hi == b.hi; }

/* A text field's bytes exactly: newlines and backslashes escaped wherever
 * they fall (first, last, in a row), everything else as it is, so that a
 * value cannot forge a field boundary and keys stay what they were. */
static void text_fields_escape_exactly(void **state)
{
    (void)state;
    static const struct { const char *value, *bytes; } cases[] = {
        {"", "f=\n"},
        {"plain", "f=plain\n"},
        {"\n", "f=\\n\n"},
        {"a\nb", "f=a\\nb\n"},
        {"\\", "f=\\\\\n"},
        {"\\n", "f=\\\\n\n"},
        {"x\n\n\\y\\", "f=x\\n\\n\\\\y\\\\\n"},
        {"\ntail", "f=\\ntail\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct key_buf k;
        memset(&k, 0, sizeof k);
        key_add_text(&k, "f", cases[i].value);
        assert_int_equal(k.len, strlen(cases[i].bytes));
        assert_memory_equal(k.data, cases[i].bytes, k.len);
        key_free(&k);
    }
    /* A value of kilobytes (a device's identity) is appended whole. */
    char big[5000];
    for (size_t i = 0; i < sizeof big - 1; i++) big[i] = i % 97 == 96 ? '\n' : (char)('a' + i % 26);
    big[sizeof big - 1] = 0;
    struct key_buf k;
    memset(&k, 0, sizeof k);
    key_add_text(&k, "identity", big);
    size_t newlines = 0;
    for (size_t i = 0; big[i]; i++) newlines += big[i] == '\n';
    assert_int_equal(k.len, strlen("identity=") + strlen(big) + newlines + 1);
    key_free(&k);
}

/* the same inputs give the same hash; options are whitespace-normalised */
static void deterministic_and_normalised(void **state)
{
    int rc;
    struct cache_hash a = key_of("__kernel void k(){}", "-DA=1  -DB=2 ", &rc);
    struct cache_hash b = key_of("__kernel void k(){}", " -DA=1 -DB=2", &rc);
    assert_true(same(a, b));
    char *n = key_normalize_options("  -a\t\t-b \n -c  ");
    assert_string_equal(n, "-a -b -c");
    free(n);
}

/* source, options and option order each change the key */
static void inputs_change_the_key(void **state)
{
    int rc;
    struct cache_hash base = key_of("__kernel void k(){}", "-DA=1 -DB=2", &rc);
    assert_false(same(base, key_of("__kernel void k(){ }", "-DA=1 -DB=2", &rc)));
    assert_false(same(base, key_of("__kernel void k(){}", "-DA=2 -DB=2", &rc)));
    assert_false(same(base, key_of("__kernel void k(){}", "-DB=2 -DA=1", &rc)));
    /* length-prefixed fields: moving bytes between fields changes the hash */
    struct key_buf k1, k2;
    key_begin(&k1, KEY_SOURCE, "");
    key_add_blob(&k1, "a", "xy", 2);
    key_add_blob(&k1, "b", "z", 1);
    key_begin(&k2, KEY_SOURCE, "");
    key_add_blob(&k2, "a", "x", 1);
    key_add_blob(&k2, "b", "yz", 2);
    assert_false(same(key_hash(k1.data, k1.len), key_hash(k2.data, k2.len)));
    key_free(&k1);
    key_free(&k2);
}

/* A private directory; opts "-I <dir>", path "<dir>/h.h". */
static void header_dir(char dir[23], char opts[256], char path[512])
{
    strcpy(dir, "/tmp/clshim-key-XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(opts, 256, "-I %s", dir);
    snprintf(path, 512, "%s/h.h", dir);
}

/* an included header's content is part of the key; so is its absence */
static void headers_are_part_of_the_key(void **state)
{
    char dir[23], opts[256], path[512];
    header_dir(dir, opts, path);
    const char *src = "#include \"h.h\"\n__kernel void k(){}";
    int rc;
    /* found nowhere (an inactive #if branch): recorded as absent */
    struct cache_hash absent = key_of(src, opts, &rc);
    assert_int_equal(rc, 0);
    FILE *f = fopen(path, "w");
    fputs("#define X 1\n", f);
    fclose(f);
    struct cache_hash one = key_of(src, opts, &rc);
    assert_int_equal(rc, 0);
    assert_false(same(absent, one));
    f = fopen(path, "w");
    fputs("#define X 2\n", f);
    fclose(f);
    struct cache_hash two = key_of(src, opts, &rc);
    assert_false(same(one, two));
    /* nested includes are followed */
    char inner[512];
    snprintf(inner, sizeof inner, "%s/inner.h", dir);
    f = fopen(path, "w");
    fputs("#include \"inner.h\"\n", f);
    fclose(f);
    f = fopen(inner, "w");
    fputs("#define Y 1\n", f);
    fclose(f);
    struct cache_hash n1 = key_of(src, opts, &rc);
    f = fopen(inner, "w");
    fputs("#define Y 2\n", f);
    fclose(f);
    struct cache_hash n2 = key_of(src, opts, &rc);
    assert_false(same(n1, n2));
    unlink(inner);
    unlink(path);
    rmdir(dir);
}

/* what the scanner cannot be sure of goes to the preprocessor (-1) */
static void unknowable_includes_handed_off(void **state)
{
    int rc;
    key_of("#define H \"x.h\"\n#include H\n", "", &rc);
    assert_int_equal(rc, -1);
    key_of("__kernel void k(){}", "-include foo.h", &rc);
    assert_int_equal(rc, -1);
    key_of("__kernel void k(){}", "-isystem /usr/include", &rc);
    assert_int_equal(rc, -1);
    key_of("#include_next <x.h>\n", "", &rc);
    assert_int_equal(rc, -1);
    key_of("?\?=include \"x.h\"\n", "", &rc);
    assert_int_equal(rc, -1);
    /* a name only the compiler's own directories have (clang's stddef.h) */
    key_of("#include <stddef.h>\n", "", &rc);
    assert_int_equal(rc, -1);
    key_of("__kernel void k(){}", "-D \"A=1", &rc); /* unclosed quote */
    assert_int_equal(rc, -1);
}

/* Every spelling of an include the compiler accepts is seen by the scanner:
 * the header's content reaches the key. */
static void every_spelling_is_seen(void **state)
{
    char dir[23], opts[256], path[512];
    header_dir(dir, opts, path);
    static const char *const spellings[] = {
        "#include \"h.h\"\n",
        "#/**/include \"h.h\"\n",
        "#inc\\\nlude \"h.h\"\n",
        "#inc\\  \nlude \"h.h\"\n", /* blanks after the backslash: clang splices too */
        "%:include \"h.h\"\n",
        "#import \"h.h\"\n",
        "/* c */ #include \"h.h\"\n",
        "/* a\ncomment */ #include \"h.h\"\n",
        "  #  include <h.h>\n",
        "#include \"h.h\" // trailing\n",
        "#if 0\n#include \"h.h\"\n#endif\n",
        "char *s = \"/*\";\n#include \"h.h\"\n/* */\n",
        "char c = '\"';\n#include \"h.h\"\n",
    };
    for (size_t i = 0; i < sizeof spellings / sizeof *spellings; i++) {
        FILE *f = fopen(path, "w");
        fputs("#define X 1\n", f);
        fclose(f);
        int rc;
        struct cache_hash one = key_of(spellings[i], opts, &rc);
        assert_int_equal(rc, 0);
        struct cache_hash again = key_of(spellings[i], opts, &rc);
        assert_true(same(one, again));
        f = fopen(path, "w");
        fputs("#define X 2\n", f);
        fclose(f);
        struct cache_hash two = key_of(spellings[i], opts, &rc);
        assert_int_equal(rc, 0);
        if (same(one, two)) fail_msg("spelling %zu (%s) missed the header", i, spellings[i]);
    }
    unlink(path);
    rmdir(dir);
}

/* options: white space inside quotes is part of a -D value */
static void quoted_option_values_kept(void **state)
{
    char *n = key_normalize_options("-D \"A=1  2\"   -D B=\"x \\\" y\"");
    assert_string_equal(n, "-D \"A=1  2\" -D B=\"x \\\" y\"");
    free(n);
    int rc;
    assert_false(same(key_of("__kernel void k(){}", "-D \"A=1  2\"", &rc),
                      key_of("__kernel void k(){}", "-D \"A=1 2\"", &rc)));
    char **argv;
    int argc;
    assert_int_equal(key_split_options("-D \"A=1  2\" -I\"a b\" x\\ y", &argv, &argc), 0);
    assert_int_equal(argc, 4);
    assert_string_equal(argv[1], "A=1  2");
    assert_string_equal(argv[2], "-Ia b");
    assert_string_equal(argv[3], "x y");
    key_free_options(argv, argc);
}

/* a header created in another -I directory changes the key (it could be
 * found first, whatever the search order) */
static void new_header_elsewhere_changes_the_key(void **state)
{
    char a[] = "/tmp/clshim-key-a-XXXXXX", b[] = "/tmp/clshim-key-b-XXXXXX";
    assert_non_null(mkdtemp(a));
    assert_non_null(mkdtemp(b));
    char opts[256], in_a[512], in_b[512];
    snprintf(opts, sizeof opts, "-I %s -I%s", a, b);
    snprintf(in_a, sizeof in_a, "%s/h.h", a);
    snprintf(in_b, sizeof in_b, "%s/h.h", b);
    FILE *f = fopen(in_b, "w");
    fputs("#define X 1\n", f);
    fclose(f);
    const char *src = "#include <h.h>\n";
    int rc;
    struct cache_hash before = key_of(src, opts, &rc);
    assert_int_equal(rc, 0);
    f = fopen(in_a, "w");
    fputs("#define X 1\n", f);
    fclose(f);
    assert_false(same(before, key_of(src, opts, &rc)));
    unlink(in_a);
    unlink(in_b);
    rmdir(a);
    rmdir(b);
}

/* key material as text, for the fields' presence */
static char *material_of(const struct key_source *in, int *rc)
{
    struct key_buf k;
    memset(&k, 0, sizeof k);
    char why[256];
    *rc = key_scan_headers(&k, in, why, sizeof why);
    key_append(&k, "", 1);
    return k.data;
}

/* __has_include: every place of the probed name is in the key, present or
 * absent; creating the file changes the key; an operand that is not a
 * literal is uncacheable; "defined(__has_include)" is no probe */
static void probes_are_keyed(void **state)
{
    char dir[] = "/tmp/clshim-probe.XXXXXX", opts[64], path[128], src[256];
    assert_non_null(mkdtemp(dir));
    snprintf(opts, sizeof opts, "-I %s", dir);
    snprintf(path, sizeof path, "%s/opt.h", dir);
    snprintf(src, sizeof src, "#if defined(__has_include) && __has_include(\"opt.h\")\n#include \"opt.h\"\n#endif\n");
    int rc;
    struct cache_hash absent = key_of(src, opts, &rc);
    assert_int_equal(rc, 0);
    struct key_source in = {src, strlen(src), opts, NULL, 0, NULL};
    char *m = material_of(&in, &rc);
    char want[160];
    snprintf(want, sizeof want, "header-absent %s/opt.h=\n", dir);
    assert_non_null(strstr(m, want));
    assert_non_null(strstr(m, "header-absent opt.h=\n")); /* the working directory */
    free(m);
    FILE *f = fopen(path, "w");
    fputs("#define V 2\n", f);
    fclose(f);
    assert_false(same(absent, key_of(src, opts, &rc)));
    assert_int_equal(rc, 0);
    /* __has_include_next and <...> count the same */
    key_of("#if __has_include_next(<opt.h>)\n#endif\n", opts, &rc);
    assert_int_equal(rc, 0);
    key_of("#define N \"opt.h\"\n#if __has_include(N)\n#endif\n", opts, &rc);
    assert_int_equal(rc, KEY_UNCACHEABLE);
    key_of("#ifdef __has_include\n#endif\n", opts, &rc);
    assert_int_equal(rc, 0);
    /* a probe inside a comment or a string literal is no probe */
    struct key_source quiet = {"// __has_include(X)\nconstant char *s = \"__has_include(Y)\";\n", 60, "", NULL, 0,
                               NULL};
    quiet.len = strlen(quiet.source);
    m = material_of(&quiet, &rc);
    assert_int_equal(rc, 0);
    assert_null(strstr(m, "header"));
    free(m);
    unlink(path);
    rmdir(dir);
}

/* __DATE__, __TIME__, __TIMESTAMP__ as tokens (source or header) make a
 * program uncacheable; in comments, literals or longer identifiers not */
static void time_macros_found(void **state)
{
    static const char *const uses[] = {"float d = __DATE__[0];", "#define T __TIME__\n", "x = __TIMESTAMP__;",
                                       "a\\\n = __DATE__;"};
    static const char *const not_uses[] = {"/* __DATE__ */", "// __TIME__\n", "constant char *s = \"__TIME__\";",
                                           "int __DATE__X;", "int X__TIME__;", "char c = '__DATE__';",
                                           "#if 0 /* __TIMESTAMP__\n */\n#endif\n"};
    int rc;
    for (size_t i = 0; i < sizeof uses / sizeof *uses; i++) {
        key_of(uses[i], "", &rc);
        assert_int_equal(rc, KEY_TIME_MACROS);
    }
    for (size_t i = 0; i < sizeof not_uses / sizeof *not_uses; i++) {
        key_of(not_uses[i], "", &rc);
        assert_int_equal(rc, 0);
    }
    /* in a header the source includes */
    char dir[] = "/tmp/clshim-time.XXXXXX", opts[64], path[128];
    assert_non_null(mkdtemp(dir));
    snprintf(opts, sizeof opts, "-I %s", dir);
    snprintf(path, sizeof path, "%s/t.h", dir);
    FILE *f = fopen(path, "w");
    fputs("#define WHEN __TIME__\n", f);
    fclose(f);
    key_of("#include \"t.h\"\n", opts, &rc);
    assert_int_equal(rc, KEY_TIME_MACROS);
    /* and the preprocessor route's pass over the headers it listed */
    struct key_buf k;
    memset(&k, 0, sizeof k);
    struct key_source in = {"kernel void k(){}", 17, "", NULL, 0, NULL};
    char *files[] = {path};
    assert_int_equal(key_scan_probes(&k, &in, files, 1, NULL, NULL, NULL, 0), KEY_TIME_MACROS);
    key_free(&k);
    unlink(path);
    rmdir(dir);
}

/* the driver's own source directory: the main source's quoted names there
 * are keyed by name (never the directory's path) and content */
static void driver_dir_keyed_by_name(void **state)
{
    char dir[] = "/tmp/clshim-ddir.XXXXXX", path[128];
    assert_non_null(mkdtemp(dir));
    const char *src = "#include \"dd.h\"\n#include <sys.h>\n#if __has_include(\"pp.h\")\n#endif\n";
    struct key_source in = {src, strlen(src), "", NULL, 0, dir};
    int rc;
    char *m = material_of(&in, &rc);
    assert_non_null(strstr(m, "driver-dir-absent dd.h=\n"));
    assert_non_null(strstr(m, "driver-dir-absent pp.h=\n"));
    assert_null(strstr(m, "driver-dir-absent sys.h"));
    assert_null(strstr(m, dir));
    free(m);
    snprintf(path, sizeof path, "%s/dd.h", dir);
    FILE *f = fopen(path, "w");
    fputs("#define V 9\n", f);
    fclose(f);
    struct key_buf k;
    memset(&k, 0, sizeof k);
    key_scan_driver_dir(&k, &in); /* the other routes' pass: the same fields */
    key_append(&k, "", 1);
    assert_non_null(strstr(k.data, "driver-dir-header dd.h="));
    assert_non_null(strstr(k.data, "driver-dir-absent pp.h=\n"));
    assert_null(strstr(k.data, dir));
    key_free(&k);
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(text_fields_escape_exactly),
        cmocka_unit_test(deterministic_and_normalised),
        cmocka_unit_test(inputs_change_the_key),
        cmocka_unit_test(headers_are_part_of_the_key),
        cmocka_unit_test(unknowable_includes_handed_off),
        cmocka_unit_test(every_spelling_is_seen),
        cmocka_unit_test(quoted_option_values_kept),
        cmocka_unit_test(new_header_elsewhere_changes_the_key),
        cmocka_unit_test(probes_are_keyed),
        cmocka_unit_test(time_macros_found),
        cmocka_unit_test(driver_dir_keyed_by_name),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
