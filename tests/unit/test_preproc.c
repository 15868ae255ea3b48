/* test_preproc.c — keys as exact as the compiler: preprocessor mode (clang)
 * for what the scanner hands off, direct mode (manifests in the store) for
 * warm runs. Each case: the same inputs hit, a changed header misses. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache/preproc.h"
#include "common/error.h"

static const char identity[] = "platform.name=Portable Computing Language\nplatform.version=OpenCL 3.0 PoCL\n"
                               "device.name=test-cpu\ndevice.version=OpenCL 3.0 PoCL\n"
                               "device.opencl_c=OpenCL C 1.2 pocl\n"
                               "device.extensions=cl_khr_fp64 cl_khr_byte_addressable_store\n"
                               "device.address_bits=64\ndevice.type=0x2\n";

static char dir[64];
static store *st;

static void put(const char *rel, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int setup(void **state)
{
    snprintf(dir, sizeof dir, "/tmp/clshim-pp-XXXXXX");
    if (!mkdtemp(dir)) return -1;
    char sub[128], cache[128];
    snprintf(sub, sizeof sub, "%s/inc", dir);
    mkdir(sub, 0700);
    snprintf(sub, sizeof sub, "%s/other", dir);
    mkdir(sub, 0700);
    snprintf(cache, sizeof cache, "%s/cache", dir);
    struct store_options o = {.dir = cache};
    return store_open(&o, &st) == CLSHIM_OK ? 0 : -1;
}

static int teardown(void **state)
{
    store_close(st);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

struct result {
    struct cache_hash hash;
    enum preproc_route route;
    int rc;
    char why[1024];
};

static struct result key_of(const char *src, const char *opts, const struct key_embedded *emb, size_t nemb)
{
    struct result r;
    struct key_buf k;
    key_begin(&k, KEY_SOURCE, opts);
    key_add_text(&k, "device", identity);
    struct key_source in = {src, strlen(src), opts, emb, nemb, NULL};
    r.rc = preproc_add_headers(&k, st, &in, identity, &r.route, r.why, sizeof r.why);
    key_add_blob(&k, "input", src, strlen(src));
    r.hash = key_hash(k.data, k.len);
    key_free(&k);
    return r;
}

static int same(struct cache_hash a, struct cache_hash b) { return a.lo == b.lo && a.hi == b.hi; }

/* The common check: first run via the preprocessor, second via the
 * manifest (direct mode) with the same key; a changed header misses. */
static void check_keys(const char *src, const char *opts, const char *header, const struct key_embedded *emb,
                       size_t nemb, int direct)
{
    put(header, "#define V 1\n");
    struct result one = key_of(src, opts, emb, nemb);
    if (one.rc != 0) fail_msg("not cacheable: %s", one.why);
    assert_int_equal(one.route, PREPROC_PREPROCESSOR);
    struct result warm = key_of(src, opts, emb, nemb);
    assert_int_equal(warm.rc, 0);
    assert_int_equal(warm.route, direct ? PREPROC_DIRECT : PREPROC_PREPROCESSOR);
    assert_true(same(one.hash, warm.hash));
    put(header, "#define V 2\n");
    struct result changed = key_of(src, opts, emb, nemb);
    assert_int_equal(changed.rc, 0);
    assert_int_equal(changed.route, PREPROC_PREPROCESSOR); /* the manifest no longer matched */
    if (same(one.hash, changed.hash)) fail_msg("stale: %s", src);
    struct result again = key_of(src, opts, emb, nemb);
    assert_int_equal(again.route, direct ? PREPROC_DIRECT : PREPROC_PREPROCESSOR);
    assert_true(same(changed.hash, again.hash));
}

static void hit_then_miss(const char *src, const char *opts, const char *header, const struct key_embedded *emb,
                          size_t nemb)
{
    check_keys(src, opts, header, emb, nemb, 1);
}

static void cwd_to_dir(void) { assert_int_equal(chdir(dir), 0); }

/* hashcat's spelling: #include M2S(INCLUDE_PATH/inc_vendor.h) with the
 * macros from -D options (quoted, with a parenthesised macro name) */
static void computed_include_from_options(void **state)
{
    cwd_to_dir();
    hit_then_miss("#include M2S(INCLUDE_PATH/a.h)\n__kernel void k(){}\n",
                  "-D INCLUDE_PATH=inc -D \"XM2S(x)=#x\" -D \"M2S(x)=XM2S(x)\"", "inc/a.h", NULL, 0);
}

/* a macro defined in the kernel file itself (#include COMPARE_M) */
static void computed_include_from_source(void **state)
{
    cwd_to_dir();
    hit_then_miss("#define COMPARE_M \"inc/b.h\"\n#include COMPARE_M\n", "-I inc", "inc/b.h", NULL, 0);
}

static void has_include_and_include_next(void **state)
{
    cwd_to_dir();
    /* (a computed include puts the probe on the preprocessor's route) */
    hit_then_miss("#define CH \"c.h\"\n#if __has_include(\"c.h\")\n#include CH\n#endif\n", "-I inc", "inc/c.h", NULL,
                  0);
    /* two n.h in the search path: direct mode does not trust the manifest
     * (either could be found first), the preprocessor decides each time */
    put("inc/n.h", "#include_next <n.h>\n");
    check_keys("#include <n.h>\n", "-I inc -I other", "other/n.h", NULL, 0, 0);
}

/* A name __has_include probed while absent: the preprocessor's -M list
 * lacks it, the manifest records its absence; once the file appears the
 * manifest is not trusted and the key changes, then direct mode again. */
static void absent_probe_in_manifest(void **state)
{
    cwd_to_dir();
    put("inc/x.h", "#define X 1\n");
    unlink("opt.h");
    const char *src = "#define H \"inc/x.h\"\n#include H\n#if __has_include(\"opt.h\")\n#include \"opt.h\"\n#endif\n";
    struct result cold = key_of(src, "", NULL, 0);
    assert_int_equal(cold.rc, 0);
    assert_int_equal(cold.route, PREPROC_PREPROCESSOR);
    struct result warm = key_of(src, "", NULL, 0);
    assert_int_equal(warm.route, PREPROC_DIRECT);
    assert_true(same(cold.hash, warm.hash));
    put("opt.h", "#define V 2\n");
    struct result created = key_of(src, "", NULL, 0);
    assert_int_equal(created.rc, 0);
    assert_int_equal(created.route, PREPROC_PREPROCESSOR);
    assert_false(same(cold.hash, created.hash));
    struct result again = key_of(src, "", NULL, 0);
    assert_int_equal(again.route, PREPROC_DIRECT);
    assert_true(same(created.hash, again.hash));
    unlink("opt.h");
    /* a time macro in a header only the preprocessor finds: not cacheable */
    put("inc/t.h", "#define WHEN __TIME__\n");
    struct result t = key_of("#define T \"inc/t.h\"\n#include T\n", "", NULL, 0);
    assert_int_equal(t.rc, KEY_TIME_MACROS);
    assert_non_null(strstr(t.why, "__TIME__"));
}

/* options that name files: -include, separate or joined */
static void include_options(void **state)
{
    cwd_to_dir();
    hit_then_miss("__kernel void k(){}\n", "-include inc/j.h", "inc/j.h", NULL, 0);
    hit_then_miss("__kernel void k(){}\n", "-includeinc/j2.h", "inc/j2.h", NULL, 0);
    hit_then_miss("#include <m.h>\n", "-isystem inc", "inc/m.h", NULL, 0);
}

/* the driver's predefined macros decide which header is included */
static void device_macros_select_headers(void **state)
{
    cwd_to_dir();
    put("inc/nofp64.h", "#define W 0\n");
    hit_then_miss("#define H \"inc/fp64.h\"\n#if defined(cl_khr_fp64) && POCL_DEVICE_ADDRESS_BITS == 64 && "
                  "__OPENCL_C_VERSION__ == 120\n#include H\n#else\n#include \"inc/nofp64.h\"\n#endif\n",
                  "", "inc/fp64.h", NULL, 0);
}

/* clCompileProgram's embedded headers, and a file one of them includes */
static void embedded_headers(void **state)
{
    cwd_to_dir();
    const char *emb_src = "#define E 1\n#include \"inc/d.h\"\n";
    struct key_embedded emb = {"sub/e.h", emb_src, strlen(emb_src)};
    char opts[128];
    snprintf(opts, sizeof opts, "-I %s", dir); /* the embedded header's include resolves there */
    hit_then_miss("#define H \"sub/e.h\"\n#include H\n", opts, "inc/d.h", &emb, 1);
}

/* a header created earlier in the -I order is seen in direct mode too */
static void include_order_shadowing(void **state)
{
    cwd_to_dir();
    put("other/s.h", "#define S 1\n");
    const char *src = "#define H <s.h>\n#include H\n";
    struct result one = key_of(src, "-I inc -I other", NULL, 0);
    assert_int_equal(one.rc, 0);
    struct result warm = key_of(src, "-I inc -I other", NULL, 0);
    assert_int_equal(warm.route, PREPROC_DIRECT);
    put("inc/s.h", "#define S 2\n");
    struct result shadowed = key_of(src, "-I inc -I other", NULL, 0);
    assert_int_equal(shadowed.rc, 0);
    assert_int_equal(shadowed.route, PREPROC_PREPROCESSOR);
    assert_false(same(one.hash, shadowed.hash));
    /* -I order is part of the options, and picks another file */
    struct result swapped = key_of(src, "-I other -I inc", NULL, 0);
    assert_false(same(shadowed.hash, swapped.hash));
}

/* A tree under dir: NAME/inc/r.h with `content`, and NAME itself made. */
static void tree_with(const char *name, const char *content)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    mkdir(path, 0700);
    snprintf(path, sizeof path, "%s/inc", name);
    char full[320];
    snprintf(full, sizeof full, "%s/%s", dir, path);
    mkdir(full, 0700);
    snprintf(path, sizeof path, "%s/inc/r.h", name);
    put(path, content);
}

/* The key of `#include H` (H "r.h", -I inc) from directory `name`, which
 * must be found by `route`; with `as`, it must equal as->hash (`equal`)
 * or differ from it. */
static struct result key_in(const char *name, enum preproc_route route, const struct result *as, int equal)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    assert_int_equal(chdir(path), 0);
    struct result r = key_of("#define H \"r.h\"\n#include H\n", "-I inc", NULL, 0);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.route, route);
    if (as) assert_int_equal(same(r.hash, as->hash), equal);
    return r;
}

/* The manifest is not keyed by the working directory: relative paths are
 * hashed again from the new one. The same files elsewhere: direct mode,
 * the same key. Other bytes under the same relative name (changed, or
 * found first in the working directory): the preprocessor, another key.
 * Each directory's variant is kept, up to MANIFEST_VARIANTS (8). */
static void manifest_across_directories(void **state)
{
    tree_with("w1", "#define R 1\n");
    tree_with("w2", "#define R 1\n");
    tree_with("w3", "#define R 3\n");
    tree_with("w4", "#define R 1\n");
    put("w4/r.h", "#define R 4\n"); /* "r.h" is found here first */
    struct result one = key_in("w1", PREPROC_PREPROCESSOR, NULL, 0);
    key_in("w2", PREPROC_DIRECT, &one, 1);
    struct result other = key_in("w3", PREPROC_PREPROCESSOR, &one, 0);
    key_in("w3", PREPROC_DIRECT, &other, 1);
    struct result shadowed = key_in("w4", PREPROC_PREPROCESSOR, &one, 0);
    assert_false(same(other.hash, shadowed.hash));
    /* every directory's variant is still there */
    key_in("w1", PREPROC_DIRECT, &one, 1);
    key_in("w3", PREPROC_DIRECT, &other, 1);
    /* eight newer variants push w1's out: the preprocessor, the same key */
    for (int i = 0; i < 8; i++) {
        char name[16], text[32];
        snprintf(name, sizeof name, "v%d", i);
        snprintf(text, sizeof text, "#define R %d\n", 100 + i);
        tree_with(name, text);
        key_in(name, PREPROC_PREPROCESSOR, &one, 0);
    }
    key_in("w1", PREPROC_PREPROCESSOR, &one, 1);
    key_in("w2", PREPROC_DIRECT, &one, 1);
}

/* only a failing preprocessor makes a program uncacheable; the reason
 * names the include line's trouble and the kernels */
static void preprocessor_failure_is_uncacheable(void **state)
{
    cwd_to_dir();
    struct result r = key_of("#define H \"missing.h\"\n#include H\n__kernel void first(){}\nkernel void second(){}\n",
                             "", NULL, 0);
    assert_int_equal(r.rc, -1);
    assert_non_null(strstr(r.why, "computed #include H")); /* the include line */
    assert_non_null(strstr(r.why, "missing.h"));
    assert_non_null(strstr(r.why, "first, second"));
}

/* a plain program never starts clang; a warm direct-mode key is cheap */
static void routes_and_cost(void **state)
{
    cwd_to_dir();
    put("inc/p.h", "#define P 1\n");
    struct result plain = key_of("#include \"inc/p.h\"\n", "", NULL, 0);
    assert_int_equal(plain.rc, 0);
    assert_int_equal(plain.route, PREPROC_SCANNER);
    const char *src = "#define H \"inc/p.h\"\n#include H\n";
    key_of(src, "", NULL, 0);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    struct result warm = key_of(src, "", NULL, 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    assert_int_equal(warm.route, PREPROC_DIRECT);
    double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
    assert_true(ms < 50); /* no process started (clang alone takes tens of ms) */
}

/* the preprocessor's file list, checked against what the scanner sees */
static void file_list(void **state)
{
    cwd_to_dir();
    put("inc/l1.h", "#include \"l2.h\"\n");
    put("inc/l2.h", "#define L 2\n");
    struct key_source in = {"#include \"inc/l1.h\"\n", 19, "", NULL, 0, NULL};
    char **files, why[512];
    size_t n;
    assert_int_equal(preproc_files(&in, identity, &files, &n, why, sizeof why), 0);
    int l1 = 0, l2 = 0;
    for (size_t i = 0; i < n; i++) {
        l1 |= !strcmp(files[i], "inc/l1.h");
        l2 |= !strcmp(files[i], "inc/l2.h");
    }
    assert_true(l1 && l2);
    preproc_free_files(files, n);
}

/* The key of `src` through preproc_start(): *job_started says whether the
 * preprocessor was left running (then finished here, as a caller does
 * after its compile). `embedded` is freed before the finish: the job must
 * own what it reads. */
static struct result key_overlapped(const char *src, const char *opts, const char *emb_src, int may_overlap,
                                    int *job_started)
{
    struct result r;
    struct key_buf k;
    key_begin(&k, KEY_COMPILE, opts);
    key_add_text(&k, "device", identity);
    char *src_copy = strdup(src), *opts_copy = strdup(opts), *emb_copy = emb_src ? strdup(emb_src) : NULL;
    struct key_embedded emb = {"e.h", emb_copy, emb_copy ? strlen(emb_copy) : 0};
    struct key_source in = {src_copy, strlen(src), opts_copy, emb_copy ? &emb : NULL, emb_copy ? 1 : 0, NULL};
    struct preproc_job *job = NULL;
    r.rc = preproc_start(&k, st, &in, identity, may_overlap, &r.route, &job, r.why, sizeof r.why);
    size_t len_at_start = k.len;
    memset(src_copy, 'x', strlen(src_copy)); /* the caller's inputs may change or go */
    free(src_copy);
    free(opts_copy);
    free(emb_copy);
    *job_started = job != NULL;
    if (job) {
        assert_int_equal(r.rc, 0);
        assert_int_equal(k.len, len_at_start); /* nothing added until the finish */
        uint64_t ran_ns = 0;
        r.rc = preproc_finish(job, &k, &ran_ns, r.why, sizeof r.why);
        if (r.rc == 0) assert_true(ran_ns > 0);
        else assert_int_equal(k.len, len_at_start);
    }
    key_add_blob(&k, "input", src, strlen(src));
    r.hash = key_hash(k.data, k.len);
    key_free(&k);
    return r;
}

/* The preprocessor beside the compile: only for a source never seen (no
 * manifest), with the same key as the preprocessor run first; its thread
 * stores the manifest, so the next run is direct mode and starts nothing. */
static void overlap_only_when_never_seen(void **state)
{
    cwd_to_dir();
    put("inc/o.h", "#define O 1\n");
    const char *src = "#define H \"inc/o.h\"\n#include H\n__kernel void k(){}\n";
    int started;
    struct result first = key_overlapped(src, "-DA=1", NULL, 1, &started);
    assert_int_equal(first.rc, 0);
    assert_true(started);
    assert_int_equal(first.route, PREPROC_PREPROCESSOR);
    struct result warm = key_overlapped(src, "-DA=1", NULL, 1, &started);
    assert_false(started); /* the manifest the thread stored */
    assert_int_equal(warm.route, PREPROC_DIRECT);
    assert_true(same(first.hash, warm.hash));
    /* the preprocessor run first (no store: no manifest either) gives the
     * same key */
    store *kept = st;
    st = NULL;
    struct result serial = key_overlapped(src, "-DA=1", NULL, 0, &started);
    st = kept;
    assert_false(started);
    assert_int_equal(serial.route, PREPROC_PREPROCESSOR);
    assert_true(same(serial.hash, first.hash));

    /* a manifest that no longer matches: decided first (the header may be
     * back at a version whose binary is stored), never overlapped */
    put("inc/o.h", "#define O 2\n");
    struct result changed = key_overlapped(src, "-DA=1", NULL, 1, &started);
    assert_false(started);
    assert_int_equal(changed.route, PREPROC_PREPROCESSOR);
    assert_false(same(changed.hash, first.hash));
    put("inc/o.h", "#define O 1\n");
    struct result back = key_overlapped(src, "-DA=1", NULL, 1, &started);
    assert_false(started);
    assert_true(same(back.hash, first.hash));

    /* the scanner's programs never start anything */
    struct result scanned = key_overlapped("#include \"inc/o.h\"\n", "", NULL, 1, &started);
    assert_false(started);
    assert_int_equal(scanned.route, PREPROC_SCANNER);
}

/* embedded headers reach the preprocessor through the job's own copies */
static void overlap_with_embedded_headers(void **state)
{
    cwd_to_dir();
    put("inc/q.h", "#define Q 1\n");
    char opts[128];
    snprintf(opts, sizeof opts, "-I %s -DB=1", dir);
    int started;
    const char *src = "#define H \"e.h\"\n#include H\n";
    struct result one = key_overlapped(src, opts, "#include \"inc/q.h\"\n", 1, &started);
    if (one.rc != 0) fail_msg("not cacheable: %s", one.why);
    assert_true(started);
    put("inc/q.h", "#define Q 2\n");
    struct result two = key_overlapped(src, opts, "#include \"inc/q.h\"\n", 1, &started);
    assert_int_equal(two.rc, 0);
    assert_false(same(one.hash, two.hash)); /* the header behind the embedded one is keyed */
}

/* a failing preprocessor found at the finish: uncacheable, the key as it
 * was, the reason as preproc_add_headers() gives it; a discarded job */
static void overlap_failure_and_discard(void **state)
{
    cwd_to_dir();
    int started;
    struct result r = key_overlapped("#define H \"gone.h\"\n#include H\n__kernel void only(){}\n", "-DC=1", NULL, 1,
                                     &started);
    assert_true(started);
    assert_int_equal(r.rc, -1);
    assert_non_null(strstr(r.why, "computed #include H"));
    assert_non_null(strstr(r.why, "gone.h"));
    assert_non_null(strstr(r.why, "kernels: only"));

    struct key_buf k;
    key_begin(&k, KEY_COMPILE, "-DC=2");
    const char *src = "#define H \"inc/o.h\"\n#include H\n";
    struct key_source in = {src, strlen(src), "-DC=2", NULL, 0, NULL};
    struct preproc_job *job = NULL;
    enum preproc_route route;
    assert_int_equal(preproc_start(&k, st, &in, identity, 1, &route, &job, NULL, 0), 0);
    assert_non_null(job);
    assert_int_equal(preproc_finish(job, NULL, NULL, NULL, 0), -1); /* discarded, joined, freed */
    key_free(&k);
}

/* no overlap where a missing manifest does not mean a missing binary */
static void no_overlap_without_a_writable_store(void **state)
{
    cwd_to_dir();
    const char *src = "#define H \"inc/o.h\"\n#include H\n";
    struct key_buf k;
    key_begin(&k, KEY_COMPILE, "-DD=1");
    struct key_source in = {src, strlen(src), "-DD=1", NULL, 0, NULL};
    struct preproc_job *job = NULL;
    enum preproc_route route;
    assert_int_equal(preproc_start(&k, NULL, &in, identity, 1, &route, &job, NULL, 0), 0);
    assert_null(job);
    assert_int_equal(route, PREPROC_PREPROCESSOR);
    key_free(&k);

    char cache[128];
    snprintf(cache, sizeof cache, "%s/cache", dir);
    struct store_options o = {.dir = cache, .readonly = 1};
    store *ro;
    assert_int_equal(store_open(&o, &ro), CLSHIM_OK);
    key_begin(&k, KEY_COMPILE, "-DD=2");
    in.options = "-DD=2";
    assert_int_equal(preproc_start(&k, ro, &in, identity, 1, &route, &job, NULL, 0), 0);
    assert_null(job);
    assert_int_equal(route, PREPROC_PREPROCESSOR);
    key_free(&k);
    store_close(ro);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(computed_include_from_options),
        cmocka_unit_test(computed_include_from_source),
        cmocka_unit_test(has_include_and_include_next),
        cmocka_unit_test(absent_probe_in_manifest),
        cmocka_unit_test(include_options),
        cmocka_unit_test(device_macros_select_headers),
        cmocka_unit_test(embedded_headers),
        cmocka_unit_test(include_order_shadowing),
        cmocka_unit_test(manifest_across_directories),
        cmocka_unit_test(preprocessor_failure_is_uncacheable),
        cmocka_unit_test(routes_and_cost),
        cmocka_unit_test(file_list),
        cmocka_unit_test(overlap_only_when_never_seen),
        cmocka_unit_test(overlap_with_embedded_headers),
        cmocka_unit_test(overlap_failure_and_discard),
        cmocka_unit_test(no_overlap_without_a_writable_store),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
