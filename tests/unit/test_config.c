/* test_config.c — the knob table: parsing, precedence, reporting, docs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/config.h"

static char reports[8][600];
static int nreports;
static void collect(const char *m)
{
    if (nreports < 8) snprintf(reports[nreports++], 600, "%s", m);
}

/* A config file holding len bytes of text, its name in path (a mkstemp template). */
static void write_conf_bytes(char *path, const char *text, size_t len)
{
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, len, f), len);
    fclose(f);
}

static void write_conf(char *path, const char *text)
{
    write_conf_bytes(path, text, strlen(text));
}

/* Asserts that loading the config file `path` reports exactly
 * "config file PATH <says>..." and leaves the defaults. */
static void assert_not_read(const char *path, const char *says)
{
    struct clshim_config c;
    char want[600];
    nreports = 0;
    assert_int_equal(config_load(&c, NULL, path, collect), 0);
    assert_int_equal(nreports, 1);
    snprintf(want, sizeof want, "config file %s %s", path, says);
    if (strncmp(reports[0], want, strlen(want))) fail_msg("got: %s\nwant: %s...", reports[0], want);
    assert_int_equal(c.log_level, 1);
    assert_int_equal(c.source[CONFIG_KNOB_LOG], CONFIG_FROM_DEFAULT);
    config_free(&c);
}

/* A config file is read only when it is a regular file of at most 1 MiB: a
 * FIFO (whose open would wait for a writer), a device that never ends, a
 * directory, a huge file are ignored with one line that says what to do,
 * before the application's main would wait on them. alarm() turns a hang
 * into a failure. */
static void only_a_regular_bounded_file_is_read(void **state)
{
    (void)state;
    char dir[] = "/tmp/clshim-conf-XXXXXX", fifo[64], huge[64], full[64], over[64];
    assert_non_null(mkdtemp(dir));
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    /* A valid first line, then 50 MiB of nothing (sparse). */
    snprintf(huge, sizeof huge, "%s/huge", dir);
    FILE *f = fopen(huge, "w");
    assert_non_null(f);
    fputs("CLSHIM_LOG=debug\n", f);
    fclose(f);
    assert_int_equal(truncate(huge, 50 << 20), 0);
    /* Exactly 1 MiB, its setting on the last line, is read; a byte more is not. */
    static char text[(1 << 20) + 1];
    const char last[] = "CLSHIM_LOG=debug\n";
    memset(text, '#', sizeof text);
    for (size_t i = 255; i < sizeof text; i += 256) text[i] = '\n';
    memcpy(text + (1 << 20) - strlen(last), last, strlen(last));
    text[(1 << 20) - strlen(last) - 1] = '\n';
    snprintf(full, sizeof full, "%s/full", dir);
    f = fopen(full, "w");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, 1 << 20, f), 1 << 20);
    fclose(f);
    snprintf(over, sizeof over, "%s/over", dir);
    f = fopen(over, "w");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, sizeof text, f), sizeof text);
    fclose(f);

    alarm(20);
    const char *fix = "ignored: make it a regular file of CLSHIM_NAME=value lines, or remove it";
    char says[300];
    snprintf(says, sizeof says, "is not a regular file (a FIFO); %s", fix);
    assert_not_read(fifo, says);
    snprintf(says, sizeof says, "is not a regular file (a character device); %s", fix);
    assert_not_read("/dev/zero", says);
    snprintf(says, sizeof says, "is not a regular file (a directory); %s", fix);
    assert_not_read(dir, says);
    const char *fix_size = "ignored: keep only CLSHIM_NAME=value lines in it, or remove it";
    snprintf(says, sizeof says, "is 52428800 bytes, more than the 1 MiB a config file may have; %s", fix_size);
    assert_not_read(huge, says);
    snprintf(says, sizeof says, "is 1048577 bytes, more than the 1 MiB a config file may have; %s", fix_size);
    assert_not_read(over, says);
    alarm(0);

    struct clshim_config c;
    nreports = 0;
    assert_int_equal(config_load(&c, NULL, full, collect), 0);
    assert_int_equal(nreports, 0);
    assert_int_equal(c.log_level, 3);
    config_free(&c);
    /* A missing file is no config file, silently. */
    snprintf(says, sizeof says, "%s/none", dir);
    assert_int_equal(config_load(&c, NULL, says, collect), 0);
    assert_int_equal(nreports, 0);
    config_free(&c);
    unlink(fifo);
    unlink(huge);
    unlink(full);
    unlink(over);
    rmdir(dir);
}

/* Loads a config file of len bytes of text; asserts `invalid` faults and
 * one report, "<before><the file's name><after>". Returns the log level in
 * effect. */
static int assert_one_report(const char *text, size_t len, int invalid, const char *before, const char *after)
{
    char path[] = "/tmp/clshim-conf-XXXXXX", want[600];
    write_conf_bytes(path, text, len);
    struct clshim_config c;
    nreports = 0;
    assert_int_equal(config_load(&c, NULL, path, collect), invalid);
    assert_int_equal(nreports, 1);
    snprintf(want, sizeof want, "%s%s%s", before, path, after);
    assert_string_equal(reports[0], want);
    int level = c.log_level;
    config_free(&c);
    unlink(path);
    return level;
}

/* A file of many bad lines (not a config file at all) is reported in one
 * line: how many lines were ignored, and the first, quoted with its bytes
 * escaped and cut; its good lines still count. One bad line keeps its own
 * message, the line quoted. */
static void many_bad_lines_are_one_line(void **state)
{
    (void)state;
    static const char garbage[] = "\x7f" "ELF\x02\x01\x01\0\0\0 and then some bytes of a binary\n"
                                  "CLSHIM_LOG=debug\n"
                                  "more junk\n"
                                  "CLSHIM_FUSON=auto\n"
                                  "\xff\xfe\\\n";
    assert_int_equal(assert_one_report(garbage, sizeof garbage - 1, 4, "config file ",
                                       ": 4 lines ignored; the first, line 1: "
                                       "\"\\x7fELF\\x02\\x01\\x01\\x00\\x00\\x00 and then some bytes of a bina...\" "
                                       "is not a CLSHIM_NAME=value setting"),
                     3);
    /* The first bad line's own words, a misspelt name's closest knob included. */
    static const char two[] = "CLSHIM_FUSON=auto\nCLSHIM_LOG=loud\n";
    assert_one_report(two, strlen(two), 2, "config file ",
                      ": 2 lines ignored; the first, line 1: "
                      "CLSHIM_FUSON is not a clshim knob (did you mean CLSHIM_FUSION?)");
    static const char one[] = "# mine\nhello\tworld\n";
    assert_one_report(one, strlen(one), 1, "", ":2: \"hello\\x09world\" is not a CLSHIM_NAME=value setting; ignored");
}

/* NAME = value: spaces around the '=' are no part of the name or the value
 * (before, "CLSHIM_LOG " was reported as no knob, "did you mean CLSHIM_LOG?") */
static void spaces_around_the_equals(void **state)
{
    (void)state;
    char path[] = "/tmp/clshim-conf-XXXXXX";
    write_conf(path, "CLSHIM_LOG = debug\n  CLSHIM_CACHE_MAX_AGE\t=\t7  \r\n");
    struct clshim_config c;
    nreports = 0;
    assert_int_equal(config_load(&c, NULL, path, collect), 0);
    assert_int_equal(nreports, 0);
    assert_int_equal(c.log_level, 3);
    assert_int_equal(c.cache_max_age_days, 7);
    config_free(&c);
    unlink(path);
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
        cmocka_unit_test(only_a_regular_bounded_file_is_read),
        cmocka_unit_test(many_bad_lines_are_one_line),
        cmocka_unit_test(spaces_around_the_equals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
