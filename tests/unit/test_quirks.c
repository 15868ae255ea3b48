/* test_quirks — applications' cache-defeating markers (cache/quirks.h): the
 * exact text PyOpenCL appends is found, anything else is not, a marker whose
 * name is used elsewhere stays in the key, and the neutral form and the
 * restored log differ from the application's text in that name alone; and
 * key_input_is (cache/key.h), the capture helper's check of its source. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cache/key.h"
#include "cache/quirks.h"

#define KERNEL "__kernel void k(__global int *o) { o[0] = 1; }"
#define UUID "3f2a9c0e5b7d4e1f8a6c2b9d0e4f7a13"
#define MARKER "\n\n__constant int pyopencl_defeat_cache_" UUID " = 0;"

static int find(const char *src, const char *options, const char *identity, struct app_marker *m)
{
    char why[256] = "";
    return quirk_app_marker(src, strlen(src), options, identity, m, why, sizeof why);
}

static void pyopencl_marker_found(void **state)
{
    (void)state;
    struct app_marker m;
    const char *src = KERNEL MARKER;
    assert_int_equal(find(src, "-I /usr/lib/python3/dist-packages/pyopencl/cl", "platform=PoCL\n", &m), 1);
    assert_string_equal(m.app, "PyOpenCL");
    assert_string_equal(m.instead, "PYOPENCL_NO_CACHE=1");
    assert_int_equal(m.len, 32);
    assert_memory_equal(src + m.at, UUID, 32);
    /* Its neutral form is a marker too: keying it again changes nothing. */
    char *neutral = strdup(src);
    quirk_app_marker_neutral(&m, neutral);
    assert_string_equal(neutral, KERNEL "\n\n__constant int pyopencl_defeat_cache_00000000000000000000000000000000 = 0;");
    struct app_marker again;
    assert_int_equal(find(neutral, "", "", &again), 1);
    assert_int_equal(again.at, m.at);
    free(neutral);
}

static void other_text_not_a_marker(void **state)
{
    (void)state;
    struct app_marker m;
    const char *const not_markers[] = {
        KERNEL,
        "",
        &MARKER[2],                                           /* not after "\n\n" */
        KERNEL MARKER "\n",                                   /* not the end */
        KERNEL "\n\n__constant int pyopencl_defeat_cache_3F2A9C0E5B7D4E1F8A6C2B9D0E4F7A13 = 0;", /* upper case */
        KERNEL "\n\n__constant int pyopencl_defeat_cache_3f2a9c0e5b7d4e1f8a6c2b9d0e4f7a1 = 0;",  /* 31 digits */
        KERNEL "\n\n__constant int pyopencl_defeat_cache_3f2a9c0e5b7d4e1f8a6c2b9d0e4f7a13 = 1;",
        KERNEL "\n\n__constant long pyopencl_defeat_cache_3f2a9c0e5b7d4e1f8a6c2b9d0e4f7a13 = 0;",
    };
    for (size_t i = 0; i < sizeof not_markers / sizeof *not_markers; i++)
        assert_int_equal(find(not_markers[i], "", "", &m), 0);
    assert_int_equal(quirk_app_marker(NULL, 0, "", "", &m, NULL, 0), 0);
}

static void marker_used_elsewhere_kept(void **state)
{
    (void)state;
    struct app_marker m;
    char why[256] = "";
    /* The name used by the program, or made a macro: renaming it could
     * change more than a name. */
    const char *used = "#define pyopencl_defeat_cache_" UUID " 1\n" KERNEL MARKER;
    assert_int_equal(quirk_app_marker(used, strlen(used), "", "", &m, why, sizeof why), -1);
    assert_non_null(strstr(why, "elsewhere in the source"));
    assert_string_equal(m.instead, "PYOPENCL_NO_CACHE=1");
    const char *stem_only = "// pyopencl_defeat_cache_\n" KERNEL MARKER;
    assert_int_equal(find(stem_only, "", "", &m), -1);
    assert_int_equal(quirk_app_marker(KERNEL MARKER, strlen(KERNEL MARKER), "-Dpyopencl_defeat_cache_" UUID "=2", "",
                                      &m, why, sizeof why),
                     -1);
    assert_non_null(strstr(why, "build options"));
    assert_int_equal(quirk_app_marker(KERNEL MARKER, strlen(KERNEL MARKER), "",
                                      "driver.env.POCL_EXTRA_BUILD_FLAGS=-Dpyopencl_defeat_cache_x\n", &m, why,
                                      sizeof why),
                     -1);
    assert_non_null(strstr(why, "environment"));
    const char *header = "#define pyopencl_defeat_cache_00000000000000000000000000000000 1\n";
    assert_int_equal(find(KERNEL MARKER, "", "", &m), 1);
    assert_int_equal(quirk_app_marker_named(&m, header, strlen(header)), 1);
    assert_int_equal(quirk_app_marker_named(&m, KERNEL, strlen(KERNEL)), 0);
}

static void log_gets_the_apps_own_name(void **state)
{
    (void)state;
    struct app_marker m;
    const char *src = KERNEL MARKER;
    assert_int_equal(find(src, "", "", &m), 1);
    char log[] = "warning: t.cl:3:16: no previous extern declaration for non-static variable "
                 "'pyopencl_defeat_cache_00000000000000000000000000000000'\n"
                 "pyopencl_defeat_cache_0000 (short: left) pyopencl_defeat_cache_00000000000000000000000000000000";
    size_t len = strlen(log);
    quirk_app_marker_restore(&m, src, log, len);
    assert_int_equal(strlen(log), len);
    assert_string_equal(log, "warning: t.cl:3:16: no previous extern declaration for non-static variable "
                             "'pyopencl_defeat_cache_" UUID "'\n"
                             "pyopencl_defeat_cache_0000 (short: left) pyopencl_defeat_cache_" UUID);
}

static void key_input_checked(void **state)
{
    (void)state;
    struct key_buf k;
    key_begin(&k, KEY_SOURCE, "-DX=1");
    key_add_text(&k, "device", "d");
    key_add_blob(&k, "input", "abc", 3);
    assert_int_equal(key_input_is(k.data, k.len, "abc", 3), 1);
    assert_int_equal(key_input_is(k.data, k.len, "abd", 3), 0);
    assert_int_equal(key_input_is(k.data, k.len, "bc", 2), 0);
    assert_int_equal(key_input_is(k.data, k.len - 1, "abc", 3), 0);
    key_free(&k);
    key_begin(&k, KEY_SOURCE, "");
    key_add_blob(&k, "input", "", 0);
    assert_int_equal(key_input_is(k.data, k.len, "", 0), 1);
    assert_int_equal(key_input_is(k.data, k.len, "x", 1), 0);
    key_free(&k);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(pyopencl_marker_found),
        cmocka_unit_test(other_text_not_a_marker),
        cmocka_unit_test(marker_used_elsewhere_kept),
        cmocka_unit_test(log_gets_the_apps_own_name),
        cmocka_unit_test(key_input_checked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
