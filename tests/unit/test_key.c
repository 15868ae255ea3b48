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

/* an included header's content is part of the key; so is its absence */
static void headers_are_part_of_the_key(void **state)
{
    char dir[] = "/tmp/clshim-key-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char opts[256], path[512];
    snprintf(opts, sizeof opts, "-I %s", dir);
    snprintf(path, sizeof path, "%s/h.h", dir);
    const char *src = "#include \"h.h\"\n__kernel void k(){}";
    int rc;
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

/* a computed #include or -include makes the program uncacheable */
static void unknowable_includes_refused(void **state)
{
    int rc;
    key_of("#define H \"x.h\"\n#include H\n", "", &rc);
    assert_int_equal(rc, -1);
    key_of("__kernel void k(){}", "-include foo.h", &rc);
    assert_int_equal(rc, -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(deterministic_and_normalised),
        cmocka_unit_test(inputs_change_the_key),
        cmocka_unit_test(headers_are_part_of_the_key),
        cmocka_unit_test(unknowable_includes_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
