/* test_config.c — the knob table: parsing, precedence, reporting, docs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/config.h"

static char reports[8][600];
static int nreports;
static void collect(const char *m)
{
    if (nreports < 8) snprintf(reports[nreports++], 600, "%s", m);
}

/* A config file holding `text`, its name in path (a mkstemp template). */
static void write_conf(char *path, const char *text)
{
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* defaults come from the table */
static void defaults_from_table(void **state)
{
    struct clshim_config c;
    assert_int_equal(config_load(&c, NULL, NULL, collect), 0);
    assert_int_equal(c.disable, 0);
    assert_int_equal(c.cache, 1);
    assert_int_equal(c.cache_max_size, 1ULL << 30);
    assert_int_equal(c.cache_max_age_days, 30);
    assert_string_equal(c.capture, "auto");
    assert_int_equal(c.source[CONFIG_KNOB_CACHE_MAX_SIZE], CONFIG_FROM_DEFAULT);
    config_free(&c);
}

/* sizes take K/M/G suffixes; booleans several spellings */
static void values_parse(void **state)
{
    uint64_t v;
    assert_int_equal(config_parse(CONFIG_SIZE, "64K", &v), 0);
    assert_int_equal(v, 65536);
    assert_int_equal(config_parse(CONFIG_SIZE, "3G", &v), 0);
    assert_int_equal(v, 3ULL << 30);
    assert_int_equal(config_parse(CONFIG_SIZE, "2MiB", &v), 0);
    assert_int_equal(v, 2ULL << 20);
    assert_int_equal(config_parse(CONFIG_SIZE, "12Q", &v), -1);
    assert_int_equal(config_parse(CONFIG_SIZE, "-1", &v), -1);
    assert_int_equal(config_parse(CONFIG_SIZE, "99999999999999999999G", &v), -1);
    assert_int_equal(config_parse(CONFIG_UINT, "7d", &v), -1);
    assert_int_equal(config_parse(CONFIG_BOOL, "yes", &v), 0);
    assert_int_equal(v, 1);
    assert_int_equal(config_parse(CONFIG_BOOL, "OFF", &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(config_parse(CONFIG_BOOL, "2", &v), -1);
    assert_int_equal(config_parse(CONFIG_LEVEL, "debug", &v), 0);
    assert_int_equal(v, 3);
}

/* the environment wins over the file, the file over the default */
static void precedence(void **state)
{
    char path[] = "/tmp/clshim-conf-XXXXXX";
    write_conf(path, "# comment\nCLSHIM_CACHE_MAX_AGE=7\nCLSHIM_LOG=debug\n\n");
    char *env[] = {"CLSHIM_LOG=error", "OTHER=1", NULL};
    struct clshim_config c;
    assert_int_equal(config_load(&c, env, path, collect), 0);
    assert_int_equal(c.cache_max_age_days, 7);
    assert_int_equal(c.source[CONFIG_KNOB_CACHE_MAX_AGE], CONFIG_FROM_FILE);
    assert_int_equal(c.log_level, 0);
    assert_int_equal(c.source[CONFIG_KNOB_LOG], CONFIG_FROM_ENV);
    config_free(&c);
    unlink(path);
}

/* an invalid value is reported with the knob's name and what it accepts; the default stays */
static void invalid_values_reported(void **state)
{
    nreports = 0;
    char *env[] = {"CLSHIM_CACHE_MAX_SIZE=lots", "CLSHIM_LOG=loud", NULL};
    struct clshim_config c;
    assert_int_equal(config_load(&c, env, NULL, collect), 2);
    assert_int_equal(nreports, 2);
    assert_non_null(strstr(reports[0], "CLSHIM_CACHE_MAX_SIZE=lots"));
    assert_non_null(strstr(reports[0], "K, M or G"));
    assert_non_null(strstr(reports[1], "error, warn, info or debug"));
    assert_int_equal(c.cache_max_size, 1ULL << 30);
    assert_int_equal(c.log_level, 1);
    config_free(&c);
}

/* a word knob takes only its words: CLSHIM_CAPTURE=bogus is reported, the default stays */
static void capture_takes_its_words(void **state)
{
    (void)state;
    nreports = 0;
    struct clshim_config c;
    char *bad[] = {"CLSHIM_CAPTURE=bogus", NULL};
    assert_int_equal(config_load(&c, bad, NULL, collect), 1);
    assert_int_equal(nreports, 1);
    assert_non_null(strstr(reports[0], "CLSHIM_CAPTURE=bogus is not valid (accepts auto, build or release)"));
    assert_string_equal(c.capture, "auto");
    config_free(&c);
    char *good[] = {"CLSHIM_CAPTURE=release", NULL};
    assert_int_equal(config_load(&c, good, NULL, collect), 0);
    assert_string_equal(c.capture, "release");
    config_free(&c);
}

/* unknown keys in the file are reported with file and line */
static void unknown_file_key(void **state)
{
    nreports = 0;
    char path[] = "/tmp/clshim-conf-XXXXXX";
    write_conf(path, "CLSHIM_NO_SUCH=1\n");
    struct clshim_config c;
    assert_int_equal(config_load(&c, NULL, path, collect), 1);
    assert_non_null(strstr(reports[0], ":1: CLSHIM_NO_SUCH is not a clshim knob; ignored"));
    config_free(&c);
    unlink(path);
}

/* a misspelt name, in the environment or the file, is reported with the
 * closest knob; the suite's own CLSHIM_ names are not */
static void misspelt_names_suggest_the_knob(void **state)
{
    (void)state;
    nreports = 0;
    char path[] = "/tmp/clshim-conf-XXXXXX";
    write_conf(path, "# comment\nCLSHIM_FUSON=auto\n");
    char *env[] = {"CLSHIM_CACHE_MAX_SIZ=2G", "CLSHIM_BUILD=build", "CLSHIM_LIBDIR=/x", "OTHER=1", NULL};
    struct clshim_config c;
    assert_int_equal(config_load(&c, env, path, collect), 2);
    assert_int_equal(nreports, 2);
    char want[600];
    snprintf(want, sizeof want, "%s:2: CLSHIM_FUSON is not a clshim knob; ignored (did you mean CLSHIM_FUSION?)",
             path);
    assert_string_equal(reports[0], want);
    assert_string_equal(reports[1],
                        "CLSHIM_CACHE_MAX_SIZ is not a clshim knob; ignored (did you mean CLSHIM_CACHE_MAX_SIZE?)");
    config_free(&c);
    unlink(path);
}

/* a bad value in the file names file and line and what stays in effect;
 * a bad one in the environment over a good file value keeps the file's;
 * `clshim config` says which value was not valid */
static void bad_values_say_where_and_what_stays(void **state)
{
    (void)state;
    nreports = 0;
    char path[] = "/tmp/clshim-conf-XXXXXX";
    write_conf(path, "CLSHIM_CACHE_MAX_SIZE=2G\nCLSHIM_LOG=loud\n");
    char *env[] = {"CLSHIM_CACHE_MAX_SIZE=pear", NULL};
    struct clshim_config c;
    assert_int_equal(config_load(&c, env, path, collect), 2);
    char want[600];
    snprintf(want, sizeof want, "%s:2: CLSHIM_LOG=loud is not valid (accepts error, warn, info or debug); "
                                "using the default \"warn\"", path);
    assert_string_equal(reports[0], want);
    assert_non_null(strstr(reports[1], "CLSHIM_CACHE_MAX_SIZE=pear is not valid"));
    assert_non_null(strstr(reports[1], "using \"2147483648\" from the config file"));
    assert_int_equal(c.cache_max_size, 2ULL << 30);
    char out[16384] = "";
    FILE *o = fmemopen(out, sizeof out - 1, "w");
    config_print(o, &c);
    fclose(o);
    assert_non_null(strstr(out, "(default; line 2 of the config file is not valid)"));
    assert_non_null(strstr(out, "(config file; the environment's value is not valid)"));
    config_free(&c);
    unlink(path);
}

/* docs/config.md is exactly what the table generates */
static void docs_match_table(void **state)
{
    const char *root = getenv("CLSHIM_ROOT");
    assert_non_null(root);
    char path[4096];
    snprintf(path, sizeof path, "%s/docs/config.md", root);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char *committed = calloc(1, 1 << 20);
    size_t n = fread(committed, 1, (1 << 20) - 1, f);
    fclose(f);
    char *generated = NULL;
    size_t glen = 0;
    FILE *g = open_memstream(&generated, &glen);
    config_print_docs(g);
    fclose(g);
    if (n != glen || memcmp(committed, generated, n))
        fail_msg("docs/config.md differs from the knob table: run `make docs`");
    free(committed);
    free(generated);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(defaults_from_table),  cmocka_unit_test(values_parse),
        cmocka_unit_test(precedence),           cmocka_unit_test(invalid_values_reported),
        cmocka_unit_test(unknown_file_key),
        cmocka_unit_test(misspelt_names_suggest_the_knob),
        cmocka_unit_test(bad_values_say_where_and_what_stays),
        cmocka_unit_test(docs_match_table),
        cmocka_unit_test(capture_takes_its_words),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
