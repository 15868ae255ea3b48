/* test_pipeline.c — the one lookup -> build -> store sequence (cache/pipeline.h):
 * a miss is stored and then hit from memory and from disk, with the
 * compile's CPU time; a failed build is shared with the threads waiting for
 * it (builds only); a refused binary is deleted and refilled. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache/pipeline.h"
#include "common/clapi.h"
#include "common/error.h"

/* A flight of `kind` keyed by `input`. */
static struct pipeline_flight flight(enum key_kind kind, const char *input)
{
    struct pipeline_flight f = {.device = "test-device", .kind = kind};
    struct key_buf k;
    key_begin(&k, kind, "-O2");
    key_add_text(&k, "device", "identity");
    assert_int_equal(pipeline_key(&f, &k, NULL, NULL, input, strlen(input), NULL), 0);
    return f;
}

static const struct pipeline_clock clock_5ms = {.wall_ns = 20000000, .cpu_ns = 5000000};

static void built_ok(struct pipeline_flight *f, const char *binary)
{
    const void *bins[1] = {binary};
    size_t sizes[1] = {strlen(binary)};
    const char *logs[1] = {"build log"};
    struct pipeline_output out = {.binaries = bins, .sizes = sizes, .logs = logs, .clock = &clock_5ms};
    pipeline_built(f, 1, &out);
}

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

int main(void)
{
    char dir[] = "/tmp/clshim-test-pipeline-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    setenv("CLSHIM_CACHE_DIR", dir, 1); /* before the first config_get() */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(miss_then_memory_then_disk),
        cmocka_unit_test(failure_shared_once),
        cmocka_unit_test(compile_failure_not_shared),
        cmocka_unit_test(rejected_is_replaced),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    pipeline_exit();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) rc = rc ? rc : 1;
    return rc;
}
