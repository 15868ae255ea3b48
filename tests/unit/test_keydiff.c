/* test_keydiff.c — why a key missed (cache/keydiff.h): two keys' material
 * compared field by field, the summary a miss line gives, the store's
 * family record (store.h, "Explaining a miss") finding the nearest entry of
 * one program without a scan, and the last-miss record. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cache/key.h"
#include "cache/keydiff.h"
#include "tests/unit/store_util.h"

#define SOURCE "#include \"p.h\"\n__kernel void k(__global float *y) { y[0] = TILE; }\n"
#define IDENTITY "platform.name=Portable Computing Language\ndevice.name=pthread-cpu\ndevice.version=OpenCL 3.0 pthread\n" \
                 "driver.version=3.1\n"

/* Key material as program/build.c and the pipeline make it, with one more
 * place looked at (NULL: none). */
static void make_with(struct key_buf *k, const char *options, const char *identity, const char *header_hex,
                      const char *source, const char *absent)
{
    key_begin(k, KEY_SOURCE, options);
    key_add_text(k, "device", identity);
    if (header_hex) key_add_text(k, "header inc/p.h", header_hex);
    key_add_text(k, "header-absent p.h", "");
    if (absent) key_add_text(k, absent, "");
    key_add_blob(k, "input", source, strlen(source));
    assert_false(k->oom);
}

static void make(struct key_buf *k, const char *options, const char *identity, const char *header_hex,
                 const char *source)
{
    make_with(k, options, identity, header_hex, source, NULL);
}

static struct keydiff *diff_of(const char *o1, const char *id1, const char *h1, const char *o2, const char *id2,
                               const char *h2)
{
    struct key_buf a, b;
    make(&a, o1, id1, h1, SOURCE);
    make(&b, o2, id2, h2, SOURCE);
    struct keydiff *d = keydiff_new(a.data, a.len, b.data, b.len);
    assert_non_null(d);
    key_free(&a);
    key_free(&b);
    return d;
}

static void summary_is(const struct keydiff *d, const char *want)
{
    char s[1024];
    keydiff_summary(d, s, sizeof s);
    assert_string_equal(s, want);
}

#define H1 "11111111111111111111111111111111"
#define H2 "22222222222222222222222222222222"

/* a define's new value is one item, whichever way -D is spelt */
static void a_define_pairs_by_its_macro(void **state)
{
    (void)state;
    struct keydiff *d = diff_of("-I inc -D TILE=16 -Werror", IDENTITY, H1, "-I inc -DTILE=32 -Werror", IDENTITY, H1);
    assert_int_equal(keydiff_count(d), 1);
    const struct keydiff_item *it = keydiff_item(d, 0);
    assert_int_equal(it->field, KEYDIFF_OPTION);
    assert_string_equal(it->name, "-DTILE");
    assert_string_equal(it->stored, "-DTILE=16");
    assert_string_equal(it->now, "-DTILE=32");
    summary_is(d, "option -DTILE=16 -> -DTILE=32");
    keydiff_free(d);
}

/* options added, removed, or only reordered */
static void options_added_removed_reordered(void **state)
{
    (void)state;
    struct keydiff *d = diff_of("-cl-mad-enable -DA", IDENTITY, H1, "-DA -Werror", IDENTITY, H1);
    summary_is(d, "option -Werror added, option -cl-mad-enable removed"); /* by name */
    keydiff_free(d);
    d = diff_of("-DA=1 -DB=2", IDENTITY, H1, "-DB=2 -DA=1", IDENTITY, H1);
    assert_int_equal(keydiff_count(d), 1);
    summary_is(d, "options reordered or respelt ('-DA=1 -DB=2' -> '-DB=2 -DA=1')");
    keydiff_free(d);
}

/* a header's content, one appearing, and a place only one key looks at */
static void headers_by_path(void **state)
{
    (void)state;
    struct keydiff *d = diff_of("", IDENTITY, H1, "", IDENTITY, H2);
    assert_int_equal(keydiff_count(d), 1);
    assert_int_equal(keydiff_item(d, 0)->field, KEYDIFF_HEADER);
    summary_is(d, "header inc/p.h (content)");
    keydiff_free(d);
    d = diff_of("", IDENTITY, NULL, "", IDENTITY, H2);
    summary_is(d, "header inc/p.h (newly read)");
    keydiff_free(d);

    struct key_buf a, b;
    make(&a, "", IDENTITY, H1, SOURCE);
    make_with(&b, "", IDENTITY, H1, SOURCE, "header-absent other/p.h");
    d = keydiff_new(a.data, a.len, b.data, b.len);
    assert_non_null(d);
    assert_int_equal(keydiff_item(d, 0)->field, KEYDIFF_HEADER_PLACE);
    summary_is(d, "1 header place");
    keydiff_free(d);
    key_free(&a);
    key_free(&b);
}

/* the device by name (its other lines left out), the driver version and
 * each driver variable apart */
static void device_driver_and_variables(void **state)
{
    (void)state;
    const char *basic = "platform.name=Portable Computing Language\ndevice.name=basic-cpu\n"
                        "device.version=OpenCL 3.0 basic\ndriver.version=3.1\n";
    struct keydiff *d = diff_of("", IDENTITY, H1, "", basic, H1);
    assert_int_equal(keydiff_count(d), 2); /* device.name, device.version */
    summary_is(d, "device 'pthread-cpu' -> 'basic-cpu'");
    keydiff_free(d);
    const char *newer = "platform.name=Portable Computing Language\ndevice.name=pthread-cpu\n"
                        "device.version=OpenCL 3.0 pthread\ndriver.version=4.0\n"
                        "driver.env.POCL_EXTRA_BUILD_FLAGS=-g\n";
    d = diff_of("", IDENTITY, H1, "", newer, H1);
    assert_int_equal(keydiff_count(d), 2);
    assert_int_equal(keydiff_item(d, 1)->field, KEYDIFF_DRIVER_ENV);
    assert_string_equal(keydiff_item(d, 1)->name, "POCL_EXTRA_BUILD_FLAGS");
    assert_null(keydiff_item(d, 1)->stored);
    summary_is(d, "driver version '3.1' -> '4.0', driver variable POCL_EXTRA_BUILD_FLAGS: unset -> '-g'");
    keydiff_free(d);
}

/* clshim's own key format; material that is not a key gives no diff */
static void key_format_and_garbage(void **state)
{
    (void)state;
    struct key_buf a;
    make(&a, "", IDENTITY, H1, SOURCE);
    char *old = malloc(a.len);
    memcpy(old, a.data, a.len);
    old[11] = '1'; /* "clshim-key 1" */
    struct keydiff *d = keydiff_new(old, a.len, a.data, a.len);
    assert_non_null(d);
    summary_is(d, "clshim's key format '1' -> '2'");
    keydiff_free(d);
    assert_null(keydiff_new("not a key\n", 10, a.data, a.len));
    free(old);
    key_free(&a);
}

/* a key's family is its input; manifests and keys without one have none */
static void families(void **state)
{
    (void)state;
    struct key_buf a, b;
    make(&a, "-DA", IDENTITY, H1, SOURCE);
    make(&b, "-DB", IDENTITY, H2, SOURCE);
    struct cache_hash fa, fb;
    size_t at;
    assert_int_equal(key_family(a.data, a.len, &fa, &at), 1);
    assert_int_equal(key_family(b.data, b.len, &fb, NULL), 1);
    assert_true(fa.lo == fb.lo && fa.hi == fb.hi);
    assert_memory_equal(a.data + at, "input=", 6);
    key_free(&b);
    key_begin(&b, KEY_LINK, "");
    key_add_text(&b, "input-key", H1);
    assert_int_equal(key_family(b.data, b.len, &fb, NULL), 0);
    key_free(&b);
    key_begin(&b, KEY_MANIFEST, "");
    key_add_blob(&b, "input", SOURCE, strlen(SOURCE));
    assert_int_equal(key_family(b.data, b.len, &fb, NULL), 0);
    key_free(&b);
    key_free(&a);
}

static struct cache_hash put_material(store *s, const struct key_buf *k)
{
    unsigned char bin[256];
    fill_bin(bin, sizeof bin, 1);
    struct store_record r = {bin, sizeof bin, "", 1, ENTRY_ORIGIN_SOURCE, "pthread-cpu", NULL};
    struct cache_hash h = key_hash(k->data, k->len);
    assert_int_equal(store_put(s, h, k->data, k->len, &r), CLSHIM_OK);
    return h;
}

/* the nearest of a program's stored entries, itself excluded; one deleted
 * is skipped; the family record keeps the newest STORE_FAMILY_MAX */
static void nearest_through_the_family_record(void **state)
{
    struct fixture *fx = *state;
    store *s = open_default(fx, 0);
    struct key_buf k;
    make(&k, "-DA=1 -DB=1", IDENTITY, H1, SOURCE);
    struct cache_hash far = put_material(s, &k);
    key_free(&k);
    make(&k, "-DA=1 -DB=2", IDENTITY, H2, SOURCE);
    struct cache_hash near_h = put_material(s, &k);
    key_free(&k);
    make(&k, "-DA=1 -DB=2", IDENTITY, H1, "__kernel void other(void) {}\n"); /* another program */
    put_material(s, &k);
    key_free(&k);

    make(&k, "-DA=1 -DB=2", IDENTITY, H1, SOURCE);
    struct keydiff_miss m;
    assert_int_equal(keydiff_miss_of(key_hash(k.data, k.len), k.data, k.len, &m), 0);
    assert_true(m.has_family);
    struct keydiff_near n;
    assert_int_equal(keydiff_nearest(s, &m, &n), 1);
    assert_true(n.hash.lo == near_h.lo && n.hash.hi == near_h.hi); /* a header, not a header and an option */
    summary_is(n.diff, "header inc/p.h (content)");
    keydiff_free(n.diff);

    /* stored itself: still compared with the others only */
    struct cache_hash self = put_material(s, &k);
    assert_int_equal(keydiff_nearest(s, &m, &n), 1);
    assert_false(n.hash.lo == self.lo && n.hash.hi == self.hi);
    keydiff_free(n.diff);
    assert_int_equal(store_delete(s, near_h), CLSHIM_OK);
    assert_int_equal(keydiff_nearest(s, &m, &n), 1);
    assert_true(n.hash.lo == far.lo && n.hash.hi == far.hi);
    keydiff_free(n.diff);
    key_free(&k);

    for (int i = 0; i < STORE_FAMILY_MAX + 4; i++) {
        char opt[32];
        snprintf(opt, sizeof opt, "-DV=%d", i);
        make(&k, opt, IDENTITY, H1, SOURCE);
        put_material(s, &k);
        key_free(&k);
    }
    struct store_family_member mem[STORE_FAMILY_MAX + 4];
    size_t got;
    assert_int_equal(store_family_get(s, m.family, mem, STORE_FAMILY_MAX + 4, &got), CLSHIM_OK);
    assert_int_equal(got, STORE_FAMILY_MAX);
    assert_non_null(memmem(mem[0].key, mem[0].key_len, "-DV=19", 6)); /* newest first */
    assert_null(memmem(mem[0].key, mem[0].key_len, "input=", 6));   /* the input is left out */
    store_family_free(mem, got);
    assert_true(store_check_invariants(s));
    store_close(s);
}

/* no other entry of the program: nothing to compare with */
static void no_neighbour(void **state)
{
    struct fixture *fx = *state;
    store *s = open_default(fx, 0);
    struct key_buf k;
    make(&k, "", IDENTITY, H1, SOURCE);
    struct keydiff_miss m;
    assert_int_equal(keydiff_miss_of(key_hash(k.data, k.len), k.data, k.len, &m), 0);
    struct keydiff_near n;
    assert_int_equal(keydiff_nearest(s, &m, &n), 0);
    put_material(s, &k);
    assert_int_equal(keydiff_nearest(s, &m, &n), 0);
    assert_null(n.diff);
    key_free(&k);
    store_close(s);
}

/* the last miss comes back as recorded; a read-only cache records none */
static void last_miss_round_trip(void **state)
{
    struct fixture *fx = *state;
    store *s = open_default(fx, 0);
    struct keydiff_miss got;
    assert_int_equal(keydiff_last_miss(s, &got), CLSHIM_ENOTFOUND);
    struct key_buf k;
    make(&k, "-DTILE=32", IDENTITY, H1, SOURCE);
    struct keydiff_miss m;
    assert_int_equal(keydiff_miss_of(key_hash(k.data, k.len), k.data, k.len, &m), 0);
    assert_int_equal(keydiff_note_miss(s, &m), CLSHIM_OK);
    assert_int_equal(keydiff_last_miss(s, &got), CLSHIM_OK);
    assert_true(got.hash.lo == m.hash.lo && got.hash.hi == m.hash.hi);
    assert_true(got.has_family && got.family.lo == m.family.lo && got.family.hi == m.family.hi);
    assert_int_equal(got.key_len, m.key_len);
    assert_memory_equal(got.key, m.key, m.key_len);
    assert_true(got.when > 0);
    keydiff_miss_free(&got);
    store_close(s);
    struct store_options o = default_options(fx, 0);
    o.readonly = 1;
    assert_int_equal(store_open(&o, &s), CLSHIM_OK);
    assert_int_equal(keydiff_note_miss(s, &m), CLSHIM_EREADONLY);
    assert_int_equal(keydiff_last_miss(s, &got), CLSHIM_OK); /* still readable */
    keydiff_miss_free(&got);
    key_free(&k); /* m borrowed it */
    store_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_define_pairs_by_its_macro),
        cmocka_unit_test(options_added_removed_reordered),
        cmocka_unit_test(headers_by_path),
        cmocka_unit_test(device_driver_and_variables),
        cmocka_unit_test(key_format_and_garbage),
        cmocka_unit_test(families),
        cmocka_unit_test_setup_teardown(nearest_through_the_family_record, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(no_neighbour, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(last_miss_round_trip, fx_setup, fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
