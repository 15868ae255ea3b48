/* test_cache_cmd.c — `clshim cache ...` driven through cache_cmd_main() on a
 * populated cache, checking its output and exit status.
 *
 * The tool sources are not in the core archive that unit tests link (the tool is
 * its own binary), so this test compiles the command's source in directly. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <fcntl.h>

#include "cache/key.h"
#include "tests/unit/store_util.h"
#include "tools/cache_cmd.c"

static char out_buf[1 << 16], err_buf[1 << 14];

static void slurp(FILE *f, char *buf, size_t cap)
{
    fflush(f);
    rewind(f);
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = 0;
}

/* Runs `clshim cache --dir DIR args...`, capturing stdout and stderr. */
static int run_cmd(struct fixture *fx, ...)
{
    char *argv[16] = {"cache", "--dir", fx->dir};
    int argc = 3;
    va_list ap;
    va_start(ap, fx);
    for (char *a; argc < 15 && (a = va_arg(ap, char *)) != NULL;) argv[argc++] = a;
    va_end(ap);
    fflush(stdout);
    fflush(stderr);
    FILE *o = tmpfile(), *e = tmpfile();
    int saved_out = dup(1), saved_err = dup(2);
    dup2(fileno(o), 1);
    dup2(fileno(e), 2);
    int rc = cache_cmd_main(argc, argv);
    fflush(stdout);
    fflush(stderr);
    dup2(saved_out, 1);
    dup2(saved_err, 2);
    close(saved_out);
    close(saved_err);
    slurp(o, out_buf, sizeof out_buf);
    slurp(e, err_buf, sizeof err_buf);
    fclose(o);
    fclose(e);
    return rc;
}

static void populate(struct fixture *fx, int n)
{
    store *s = open_default(fx, 3);
    for (int i = 0; i < n; i++) assert_int_equal(put_key(s, i, 1000 * (size_t)(i + 1)), CLSHIM_OK);
    store_close(s);
}

static int count_of(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle)) n++;
    return n;
}

#define assert_contains(hay, needle)                                                               \
    do {                                                                                           \
        if (!strstr((hay), (needle))) fail_msg("missing \"%s\" in:\n%s", (needle), (hay));         \
    } while (0)

/* stats shows hits with the hit rate, entries, sizes and the ratio; --json too */
static void stats_reports_counts_and_ratio(void **state)
{
    struct fixture *fx = *state;
    populate(fx, 5);
    store *s = open_default(fx, 3);
    struct store_stats d = {.hits = 8, .disk_hits = 5, .memory_hits = 3, .misses = 2, .stores = 5,
                            .compile_ns_saved = 2500000000ull};
    assert_int_equal(store_stats_add(s, &d), CLSHIM_OK);
    store_close(s);
    assert_int_equal(run_cmd(fx, "stats", NULL), 0);
    assert_contains(out_buf, "Hits                     8 (5 from disk, 3 from memory; 80.0 % of lookups)");
    assert_contains(out_buf, "Misses                   2");
    assert_contains(out_buf, "Stores                   5");
    assert_contains(out_buf, "Entries                  5");
    assert_contains(out_buf, "uncompressed, ratio ");
    assert_contains(out_buf, "Compile time saved       2.50 s");
    assert_int_equal(run_cmd(fx, "stats", "--json", NULL), 0);
    assert_contains(out_buf, "\"hits\": 8");
    assert_contains(out_buf, "\"entries\": 5");
    assert_contains(out_buf, "\"uncompressed_bytes\": 15000");
    assert_int_equal(run_cmd(fx, "stats", "--bogus", NULL), 2);
    assert_contains(err_buf, "unknown option '--bogus'");
    /* zero resets the counters, not the entries */
    assert_int_equal(run_cmd(fx, "zero", NULL), 0);
    assert_int_equal(run_cmd(fx, "stats", NULL), 0);
    assert_contains(out_buf, "Hits                     0\n");
    assert_contains(out_buf, "Entries                  5");
}

/* stats counts the misses of evicted entries under the size limit, which it
 * shows with where it comes from, with the limit that would have kept them;
 * --json too */
static void stats_reports_evicted_misses(void **state)
{
    struct fixture *fx = *state;
    populate(fx, 1);
    store *s = open_default(fx, 3);
    struct store_stats d = {.misses = 40, .misses_evicted = 3, .evicted_keep_limit = (uint64_t)1400 << 20};
    assert_int_equal(store_stats_add(s, &d), CLSHIM_OK);
    store_close(s);
    assert_int_equal(run_cmd(fx, "stats", NULL), 0);
    assert_contains(out_buf, "Misses                   40\n  of evicted entries     3\n");
    assert_contains(out_buf, "Size limit               1.0 GiB (0.0 % used; CLSHIM_CACHE_MAX_SIZE, the default)\n"
                             "  3 misses of 40 were evicted entries: a limit of 1.4 GiB would have kept them "
                             "(CLSHIM_CACHE_MAX_SIZE=1400M)\n");
    assert_int_equal(run_cmd(fx, "stats", "--json", NULL), 0);
    assert_contains(out_buf, "\"misses_evicted\": 3, \"misses_evicted_age\": 0, \"evicted_keep_limit\": 1468006400, "
                             "\"max_size_source\": \"default\"");
    /* one more, evicted for age: no size limit would have kept that one */
    s = open_default(fx, 3);
    d = (struct store_stats){.misses = 1, .misses_evicted = 1, .misses_evicted_age = 1};
    assert_int_equal(store_stats_add(s, &d), CLSHIM_OK);
    store_close(s);
    assert_int_equal(run_cmd(fx, "stats", NULL), 0);
    assert_contains(out_buf, "  4 misses of 41 were evicted entries: a limit of 1.4 GiB would have kept the 3 evicted "
                             "for size (CLSHIM_CACHE_MAX_SIZE=1400M); 1 evicted for age");
}

/* stats of a directory without a cache says so and creates nothing */
static void stats_without_cache_creates_nothing(void **state)
{
    struct fixture *fx = *state;
    assert_int_equal(run_cmd(fx, "stats", NULL), 0);
    assert_contains(out_buf, "(no cache yet)");
    struct stat st;
    assert_int_equal(stat(fx->dir, &st), -1);
}

/* list shows one line per entry, sorted as asked; --json has every entry */
static void list_shows_entries_sorted(void **state)
{
    struct fixture *fx = *state;
    populate(fx, 5);
    assert_int_equal(run_cmd(fx, "list", "--sort=size", NULL), 0);
    assert_contains(out_buf, "5 entries");
    assert_int_equal(count_of(out_buf, "pthread-test-device"), 5);
    /* the largest (entry 4, 5000 bytes) first */
    char hex[33];
    hash_hex(key_hash_of(4), hex);
    hex[16] = 0;
    const char *first = strchr(out_buf, '\n') + 1;
    assert_memory_equal(first, hex, 16);
    assert_contains(out_buf, "source");
    assert_int_equal(run_cmd(fx, "list", "--json", NULL), 0);
    assert_int_equal(count_of(out_buf, "\"key\": "), 5);
    assert_contains(out_buf, "\"binary_size\": 5000");
    assert_contains(out_buf, "\"origin\": \"source\"");
    assert_int_equal(run_cmd(fx, "list", "--sort=colour", NULL), 2);
}

/* show prints the key material (text as text, bytes as hex), the checks
 * and the build log; unknown and ambiguous prefixes fail */
static void show_prints_one_entry(void **state)
{
    struct fixture *fx = *state;
    store *s = open_default(fx, 3);
    static const char material[] = "clshim-key 1\nkind=il\noptions=-cl-fast-relaxed-math\n"
                                   "input=8\n\x03\x02\x23\x07\x00\x01\x02\x00\ndevice=x\n";
    struct cache_hash h = entry_xxh3_128(material, sizeof material - 1);
    struct store_record r = {"binary!", 7, "warning: unused variable", 1500000000ull, ENTRY_ORIGIN_IL, "cpu-x", NULL};
    assert_int_equal(store_put(s, h, material, sizeof material - 1, &r), CLSHIM_OK);
    for (int i = 0; i < 40; i++) assert_int_equal(put_key(s, i, 100), CLSHIM_OK);
    store_close(s);
    char hex[33];
    hash_hex(h, hex);
    char prefix[17];
    memcpy(prefix, hex, 16);
    prefix[16] = 0;
    assert_int_equal(run_cmd(fx, "show", prefix, NULL), 0);
    assert_contains(out_buf, hex);
    assert_contains(out_buf, "Origin             il");
    assert_contains(out_buf, "Device             cpu-x");
    assert_contains(out_buf, "    kind=il\n");
    assert_contains(out_buf, "    options=-cl-fast-relaxed-math\n");
    assert_contains(out_buf, "not text]");
    assert_contains(out_buf, "03 02 23 07 00 01 02 00");
    assert_contains(out_buf, "    device=x\n");
    assert_contains(out_buf, "Check              ok");
    assert_contains(out_buf, "Compile time       1.500 s");
    assert_contains(out_buf, "warning: unused variable");
    /* upper case works too */
    for (char *p = prefix; *p; p++) *p = (char)toupper((unsigned char)*p);
    assert_int_equal(run_cmd(fx, "show", prefix, NULL), 0);
    /* 41 keys share some first hex digit */
    int seen[16] = {0}, dup_digit = -1;
    for (int i = 0; i < 40 && dup_digit < 0; i++) {
        hash_hex(key_hash_of(i), hex);
        int d = isdigit((unsigned char)hex[0]) ? hex[0] - '0' : hex[0] - 'a' + 10;
        if (seen[d]++) dup_digit = d;
    }
    char one[2] = {"0123456789abcdef"[dup_digit], 0};
    assert_int_equal(run_cmd(fx, "show", one, NULL), 1);
    assert_contains(err_buf, "give more digits");
    assert_int_equal(run_cmd(fx, "show", "ffffffffffffffffffffffffffffffff", NULL) , 1);
    assert_int_equal(run_cmd(fx, "show", "xyz", NULL), 2);
    assert_int_equal(run_cmd(fx, "show", NULL), 2);
}

/* evict by size and by age; evict without a goal is a usage error */
static void evict_and_clear(void **state)
{
    struct fixture *fx = *state;
    populate(fx, 5);
    assert_int_equal(run_cmd(fx, "evict", NULL), 2);
    assert_int_equal(run_cmd(fx, "evict", "--to-size", "lots", NULL), 2);
    assert_int_equal(run_cmd(fx, "evict", "--older-than", "30", NULL), 0);
    assert_contains(out_buf, "Evicted 0 entries; 5 left");
    /* ages in minutes, hours, days; anything else is refused by name */
    assert_int_equal(run_cmd(fx, "evict", "--older-than", "30x", NULL), 2);
    assert_contains(err_buf, "'30x' is not an age (like 30m, 12h or 7d)");
    assert_int_equal(run_cmd(fx, "evict", "--older-than", "0m", NULL), 2);
    assert_int_equal(run_cmd(fx, "evict", "--older-than", "h", NULL), 2);
    fake_now = (uint64_t)time(NULL) + 45 * 60;
    assert_int_equal(run_cmd(fx, "evict", "--older-than=1h", NULL), 0);
    assert_contains(out_buf, "Evicted 0 entries; 5 left");
    assert_int_equal(run_cmd(fx, "evict", "--older-than", "7d", NULL), 0);
    assert_contains(out_buf, "Evicted 0 entries; 5 left");
    assert_int_equal(run_cmd(fx, "evict", "--older-than", "30m", NULL), 0);
    assert_contains(out_buf, "Evicted 5 entries; 0 left");
    fake_now = 0;
    populate(fx, 5);
    assert_int_equal(run_cmd(fx, "evict", "--to-size=4K", NULL), 0);
    assert_contains(out_buf, "left");
    store *s = open_default(fx, 3);
    struct store_stats st;
    assert_int_equal(store_stats_get(s, &st), CLSHIM_OK);
    assert_true(st.stored_bytes <= 4096 && st.entries < 5);
    store_close(s);
    assert_int_equal(run_cmd(fx, "clear", NULL), 0);
    assert_contains(out_buf, "Removed ");
    assert_int_equal(run_cmd(fx, "list", NULL), 0);
    assert_contains(out_buf, "0 entries");
}

/* verify exits 1 while bad entries remain; --fix removes them */
static void verify_exit_status_and_fix(void **state)
{
    struct fixture *fx = *state;
    populate(fx, 5);
    assert_int_equal(run_cmd(fx, "verify", NULL), 0);
    assert_contains(out_buf, "Checked 5 entries: 0 bad.");
    raw_flip(fx->dir, key_hash_of(2), -3);
    assert_int_equal(run_cmd(fx, "verify", NULL), 1);
    assert_contains(out_buf, "1 bad");
    /* the bad entry is named, with what is wrong */
    char hex[33], line[128];
    key_hash_hex(key_hash_of(2), hex);
    snprintf(line, sizeof line, "bad %s: it does not decode (damaged", hex);
    assert_contains(out_buf, line);
    assert_contains(out_buf, "verify --fix");
    assert_int_equal(run_cmd(fx, "verify", "--fix", NULL), 0);
    assert_contains(out_buf, "removed");
    assert_int_equal(run_cmd(fx, "verify", NULL), 0);
    assert_contains(out_buf, "Checked 4 entries: 0 bad.");
}

/* export, clear, import gives the same entries; files are never
 * overwritten; a file that is not an export is refused */
static void export_clear_import(void **state)
{
    struct fixture *fx = *state;
    populate(fx, 5);
    char path[4300], junk[4300];
    snprintf(path, sizeof path, "%s/cache.export", fx->root);
    assert_int_equal(run_cmd(fx, "export", path, NULL), 0);
    assert_contains(out_buf, "Exported 5 entries");
    assert_int_equal(run_cmd(fx, "export", path, NULL), 1);
    assert_contains(err_buf, "not overwritten");
    assert_int_equal(run_cmd(fx, "clear", NULL), 0);
    assert_int_equal(run_cmd(fx, "import", path, NULL), 0);
    assert_contains(out_buf, "Imported 5 entries; 0 rejected.");
    store *s = open_default(fx, 3);
    for (int i = 0; i < 5; i++) assert_int_equal(get_key(s, i), CLSHIM_OK);
    store_close(s);
    snprintf(junk, sizeof junk, "%s/junk", fx->root);
    FILE *f = fopen(junk, "w");
    fputs("hello", f);
    fclose(f);
    assert_int_equal(run_cmd(fx, "import", junk, NULL), 1);
    assert_contains(err_buf, "not a complete clshim cache export");
    assert_int_equal(run_cmd(fx, "import", "/nonexistent/file", NULL), 1);
}

/* compact reports the sizes */
static void compact_reports_sizes(void **state)
{
    struct fixture *fx = *state;
    populate(fx, 30);
    assert_int_equal(run_cmd(fx, "compact", NULL), 0);
    assert_contains(out_buf, "Compacted ");
    assert_contains(out_buf, " -> ");
    store *s = open_default(fx, 3);
    assert_int_equal(get_key(s, 29), CLSHIM_OK);
    store_close(s);
}

/* an unsafe directory is refused with a message naming the override */
static void unsafe_directory_is_refused(void **state)
{
    struct fixture *fx = *state;
    populate(fx, 1);
    assert_int_equal(chmod(fx->dir, 0777), 0);
    assert_int_equal(run_cmd(fx, "list", NULL), 1);
    assert_contains(err_buf, "CLSHIM_CACHE_ALLOW_SHARED");
    assert_contains(err_buf, fx->dir);
    assert_int_equal(chmod(fx->dir, 0700), 0);
}

/* usage errors exit 2, help exits 0 */
static void usage_and_help(void **state)
{
    struct fixture *fx = *state;
    assert_int_equal(run_cmd(fx, "frobnicate", NULL), 2);
    assert_contains(err_buf, "unknown command 'frobnicate'");
    assert_int_equal(run_cmd(fx, "help", NULL), 0);
    assert_contains(out_buf, "usage: clshim cache");
    assert_int_equal(run_cmd(fx, "clear", "now", NULL), 2);
    assert_int_equal(run_cmd(fx, NULL), 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(stats_reports_counts_and_ratio, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(stats_reports_evicted_misses, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(stats_without_cache_creates_nothing, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(list_shows_entries_sorted, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(show_prints_one_entry, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(evict_and_clear, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(verify_exit_status_and_fix, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(export_clear_import, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(compact_reports_sizes, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(unsafe_directory_is_refused, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(usage_and_help, fx_setup, fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
