/* test_pipeline.c — the one lookup -> build -> store sequence (cache/pipeline.h):
 * a miss is stored and then hit from memory and from disk, with the
 * compile's CPU time; a failed build is shared with the threads waiting for
 * it (builds only); a refused binary is deleted and refilled; a late key
 * (the preprocessor beside the compile) is stored like a miss, but never
 * over another thread's fill of the same key. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache/pipeline.h"
#include "common/clapi.h"
#include "common/error.h"
#include "tests/unit/pipeline_util.h"

/* a miss is stored; the next lookup hits memory, then (memory dropped) disk,
 * and the compile time recorded is the CPU time, not the wall time */
static void miss_then_memory_then_disk(void **state)
{
    (void)state;
    struct pipeline_stats before, after;
    pipeline_stats(&before);
    struct pipeline_flight f = flight(KEY_SOURCE, "kernel void a() {}");
    assert_int_equal(pipeline_begin(&f, 1, PIPELINE_SHARE_FAILURE), PIPELINE_BUILD);
    assert_true(f.filling);
    built_ok(&f, "BINARY-A");
    assert_int_equal(f.stored_size, 8);
    pipeline_end(&f, 1);

    assert_int_equal(pipeline_begin(&f, 1, 0), PIPELINE_HIT);
    assert_int_equal(f.from, PIPELINE_FROM_MEMORY);
    size_t size = 0;
    const char *bin = pipeline_binary(&f, &size);
    assert_int_equal(size, 8);
    assert_memory_equal(bin, "BINARY-A", 8);
    assert_string_equal(pipeline_build_log(&f), "build log");
    pipeline_hit(&f, 1);
    pipeline_end(&f, 1);

    memtier_clear();
    assert_int_equal(pipeline_begin(&f, 1, 0), PIPELINE_HIT);
    assert_int_equal(f.from, PIPELINE_FROM_DISK);
    pipeline_hit(&f, 1);
    assert_int_equal(f.compile_ns, clock_5ms.cpu_ns);
    pipeline_end(&f, 1);
    pipeline_flight_free(&f);

    pipeline_stats(&after);
    assert_int_equal(after.store.misses - before.store.misses, 1);
    assert_int_equal(after.store.stores - before.store.stores, 1);
    assert_int_equal(after.store.hits - before.store.hits, 2);
    assert_int_equal(after.memory_hits - before.memory_hits, 1);
    assert_true(after.store.compile_ns_saved - before.store.compile_ns_saved <= 2 * clock_5ms.cpu_ns);
}

static int builds, shared;
static pthread_mutex_t count_lock = PTHREAD_MUTEX_INITIALIZER;

static void *failing_builder(void *arg)
{
    (void)arg;
    struct pipeline_flight f = flight(KEY_SOURCE, "kernel void broken( {}");
    enum pipeline_result r = pipeline_begin(&f, 1, PIPELINE_SHARE_FAILURE);
    if (r == PIPELINE_BUILD) {
        usleep(50000); /* a slow compile: the others arrive meanwhile */
        const char *logs[1] = {"error: expected ')'"};
        struct pipeline_output out = {.error = CL_BUILD_PROGRAM_FAILURE, .logs = logs, .clock = &clock_5ms,
                                      .share_failure = 1};
        pipeline_built(&f, 1, &out);
        pthread_mutex_lock(&count_lock);
        builds++;
        pthread_mutex_unlock(&count_lock);
    } else {
        assert_int_equal(r, PIPELINE_FAILED);
        assert_int_equal(pipeline_failure(&f), CL_BUILD_PROGRAM_FAILURE);
        assert_string_equal(pipeline_build_log(&f), "error: expected ')'");
        pipeline_failure_shared(&f, 1);
        pthread_mutex_lock(&count_lock);
        shared++;
        pthread_mutex_unlock(&count_lock);
    }
    pipeline_end(&f, 1);
    pipeline_flight_free(&f);
    return NULL;
}

/* six threads building a failing program: one compiles, five get its
 * error and log without compiling */
static void failure_shared_once(void **state)
{
    (void)state;
    pthread_t t[6];
    for (int i = 0; i < 6; i++) assert_int_equal(pthread_create(&t[i], NULL, failing_builder, NULL), 0);
    for (int i = 0; i < 6; i++) pthread_join(t[i], NULL);
    assert_int_equal(builds, 1);
    assert_int_equal(shared, 5);
}

/* a failed compile is not remembered: the next lookup builds again */
static void compile_failure_not_shared(void **state)
{
    (void)state;
    struct pipeline_flight f = flight(KEY_COMPILE, "broken object");
    assert_int_equal(pipeline_begin(&f, 1, 0), PIPELINE_BUILD);
    struct pipeline_output out = {.error = CL_BUILD_PROGRAM_FAILURE, .clock = &clock_5ms};
    pipeline_built(&f, 1, &out);
    pipeline_end(&f, 1);
    assert_int_equal(pipeline_begin(&f, 1, 0), PIPELINE_BUILD);
    assert_true(f.filling);
    pipeline_end(&f, 1);
    pipeline_flight_free(&f);
}

/* a binary the driver refuses is deleted from the store and refilled by
 * the rebuild */
static void rejected_is_replaced(void **state)
{
    (void)state;
    struct pipeline_flight f = flight(KEY_LINK, "linked inputs");
    assert_int_equal(pipeline_begin(&f, 1, 0), PIPELINE_BUILD);
    built_ok(&f, "OLD");
    pipeline_end(&f, 1);
    memtier_clear();
    assert_int_equal(pipeline_begin(&f, 1, 0), PIPELINE_HIT);
    pipeline_rejected(&f, 1, CL_INVALID_BINARY, NULL);
    assert_true(f.filling);
    struct store_record sr;
    void *arena = NULL;
    assert_int_equal(store_get(pipeline_store(), f.hash, f.key, f.key_len, &sr, &arena), CLSHIM_ENOTFOUND);
    built_ok(&f, "NEW-BINARY");
    pipeline_end(&f, 1);
    memtier_clear();
    assert_int_equal(pipeline_begin(&f, 1, 0), PIPELINE_HIT);
    size_t size = 0;
    const char *bin = pipeline_binary(&f, &size);
    assert_int_equal(size, 10);
    assert_memory_equal(bin, "NEW-BINARY", 10);
    pipeline_end(&f, 1);
    pipeline_flight_free(&f);
}

/* ---- late keys: the preprocessor beside the compile ---------------------- */

static const char identity[] = "platform.name=Portable Computing Language\nplatform.version=OpenCL 3.0 PoCL\n"
                               "device.name=test-cpu\ndevice.version=OpenCL 3.0 PoCL\n"
                               "device.opencl_c=OpenCL C 1.2 pocl\ndevice.extensions=cl_khr_fp64\n"
                               "device.address_bits=64\ndevice.type=0x2\n";

/* A source whose include the scanner cannot follow (a macro names it), so
 * it needs the preprocessor; `header` is written in the working directory. */
static const char *needs_preprocessor(const char *header, char *text, size_t len)
{
    FILE *h = fopen(header, "w");
    assert_non_null(h);
    fprintf(h, "#define FROM_%c 1\n", header[0]);
    fclose(h);
    snprintf(text, len, "#define H \"%s\"\n#include H\n__kernel void k(__global int *p) { p[0] = 1; }\n", header);
    return text;
}

/* A compile flight of `text`: late (pipeline_key_start) or keyed first. */
static struct pipeline_flight compile_flight(const char *text, int late)
{
    struct pipeline_flight f = {.device = "test-device", .kind = KEY_COMPILE};
    struct key_buf k;
    key_begin(&k, KEY_COMPILE, "-DLATE=1");
    key_add_text(&k, "device", identity);
    struct key_source in = {text, strlen(text), "-DLATE=1", NULL, 0, NULL};
    int rc = late ? pipeline_key_start(&f, &k, &in, identity, text, strlen(text), NULL)
                  : pipeline_key(&f, &k, &in, identity, text, strlen(text), NULL);
    assert_int_equal(rc, 0);
    return f;
}

static void stored_binary_is(const struct pipeline_flight *f, const char *want)
{
    struct store_record sr;
    void *arena = NULL;
    assert_int_equal(store_get(pipeline_store(), f->hash, f->key, f->key_len, &sr, &arena), CLSHIM_OK);
    assert_int_equal(sr.binary_size, strlen(want));
    assert_memory_equal(sr.binary, want, strlen(want));
    store_record_free(arena);
}

/* a source never seen: keyless during the lookup, keyed after the build,
 * stored like a miss; the same program keyed first (direct mode: the
 * manifest the preprocessor's thread stored) has that key and hits */
static void late_key_stored_like_a_miss(void **state)
{
    (void)state;
    char text[256];
    needs_preprocessor("a.h", text, sizeof text);
    struct pipeline_stats before, after;
    pipeline_stats(&before);
    struct pipeline_flight f = compile_flight(text, 1);
    assert_null(f.key);
    assert_non_null(f.pending);
    assert_int_equal(pipeline_begin(&f, 1, 0), PIPELINE_BUILD);
    assert_false(f.filling);
    assert_false(f.claimed); /* no key, no claim */
    pipeline_key_finish(&f, 1, NULL);
    assert_null(f.pending);
    assert_non_null(f.key);
    assert_true(f.filling);
    assert_false(f.claimed); /* too late for one: the compile is over */
    built_ok(&f, "LATE-OBJECT");
    assert_int_equal(f.stored_size, 11);
    pipeline_end(&f, 1);
    stored_binary_is(&f, "LATE-OBJECT");

    memtier_clear();
    struct pipeline_flight again = compile_flight(text, 1);
    assert_null(again.pending); /* a manifest now: decided first */
    assert_non_null(again.key);
    assert_true(again.hash.lo == f.hash.lo && again.hash.hi == f.hash.hi);
    assert_int_equal(pipeline_begin(&again, 1, 0), PIPELINE_HIT);
    assert_int_equal(again.from, PIPELINE_FROM_DISK);
    pipeline_hit(&again, 1);
    pipeline_end(&again, 1);
    pipeline_flight_free(&again);
    pipeline_flight_free(&f);
    pipeline_stats(&after);
    assert_int_equal(after.store.misses - before.store.misses, 1);
    assert_int_equal(after.store.stores - before.store.stores, 1);
    assert_int_equal(after.store.hits - before.store.hits, 1);
}

/* A late key of a new program and another flight of it keyed first, which
 * fills: before the late key finishes and ends then (other_first), or ends
 * after it. Either way the late key does not fill, and the other's binary
 * is the one stored. */
static void late_key_against_other(const char *header, int other_first)
{
    char text[256];
    needs_preprocessor(header, text, sizeof text);
    struct pipeline_flight late = compile_flight(text, 1);
    assert_non_null(late.pending);
    struct pipeline_flight other = compile_flight(text, 0);
    assert_int_equal(pipeline_begin(&other, 1, 0), PIPELINE_BUILD);
    assert_true(other.filling);
    if (other_first) built_ok(&other, "OTHER"), pipeline_end(&other, 1);
    assert_int_equal(pipeline_begin(&late, 1, 0), PIPELINE_BUILD);
    pipeline_key_finish(&late, 1, NULL);
    assert_true(late.hash.lo == other.hash.lo && late.hash.hi == other.hash.hi);
    assert_false(late.filling);
    built_ok(&late, "LATE");
    pipeline_end(&late, 1);
    if (!other_first) built_ok(&other, "OTHER"), pipeline_end(&other, 1);
    stored_binary_is(&late, "OTHER");
    pipeline_flight_free(&late);
    pipeline_flight_free(&other);
}

/* in-process single flight: a late key that another thread fills, or has
 * filled, is not stored again; the other's binary stands */
static void late_key_never_stores_over_another_fill(void **state)
{
    (void)state;
    late_key_against_other("b.h", 0);
    late_key_against_other("c.h", 1);

    char text[256];
    struct pipeline_flight late;
    /* a late key never finished is discarded by pipeline_end() */
    needs_preprocessor("d.h", text, sizeof text);
    late = compile_flight(text, 1);
    assert_non_null(late.pending);
    assert_int_equal(pipeline_begin(&late, 1, 0), PIPELINE_BUILD);
    pipeline_end(&late, 1);
    assert_null(late.pending);
    assert_null(late.key);
    pipeline_flight_free(&late);
}

/* a key that names files, built without a sandbox's verdict of exact (the
 * build may have read other bytes): never stored, counted, the line said */
static void inexact_build_never_stored(void **state)
{
    (void)state;
    char text[256];
    needs_preprocessor("e.h", text, sizeof text);
    struct pipeline_stats before, after;
    pipeline_stats(&before);
    struct pipeline_flight f = compile_flight(text, 0);
    assert_non_null(f.key);
    assert_true(f.names_files);
    assert_false(f.exact);
    assert_non_null(f.snap); /* the bytes the key was made of */
    assert_int_equal(pipeline_begin(&f, 1, 0), PIPELINE_BUILD);
    const void *bins[1] = {"INEXACT"};
    size_t sizes[1] = {7};
    struct pipeline_output out = {.binaries = bins, .sizes = sizes, .clock = &clock_5ms};
    pipeline_built(&f, 1, &out);
    pipeline_end(&f, 1);
    struct store_record sr;
    void *arena = NULL;
    assert_int_equal(store_get(pipeline_store(), f.hash, f.key, f.key_len, &sr, &arena), CLSHIM_ENOTFOUND);
    pipeline_stats(&after);
    assert_int_equal(after.store.stores, before.store.stores);
    pipeline_flight_free(&f);
}

int main(void)
{
    char dir[] = "/tmp/clshim-test-pipeline-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    setenv("CLSHIM_CACHE_DIR", dir, 1); /* before the first config_get() */
    /* the late-key cases write their headers in a working directory of
     * their own (a manifest is keyed by it) */
    char work[64];
    snprintf(work, sizeof work, "%s/work", dir);
    if (mkdir(work, 0700) != 0 || chdir(work) != 0) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(miss_then_memory_then_disk),
        cmocka_unit_test(failure_shared_once),
        cmocka_unit_test(compile_failure_not_shared),
        cmocka_unit_test(rejected_is_replaced),
        cmocka_unit_test(late_key_stored_like_a_miss),
        cmocka_unit_test(late_key_never_stores_over_another_fill),
        cmocka_unit_test(inexact_build_never_stored),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    pipeline_exit();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) rc = rc ? rc : 1;
    return rc;
}
