/* pipeline_util.h — helpers of the pipeline tests (test_pipeline.c,
 * test_store_evicted.c): a flight keyed by an input, and a build of it the
 * sandbox found exact. Included by one test file each, so everything here
 * is static. Include after <cmocka.h>. */
#ifndef CLSHIM_TEST_PIPELINE_UTIL_H
#define CLSHIM_TEST_PIPELINE_UTIL_H

#include <string.h>

#include "cache/pipeline.h"

/* A flight of `kind` keyed by `input`. */
static inline struct pipeline_flight flight(enum key_kind kind, const char *input)
{
    struct pipeline_flight f = {.device = "test-device", .kind = kind};
    struct key_buf k;
    key_begin(&k, kind, "-O2");
    key_add_text(&k, "device", "identity");
    assert_int_equal(pipeline_key(&f, &k, NULL, NULL, input, strlen(input), NULL), 0);
    return f;
}

static const struct pipeline_clock clock_5ms = {.wall_ns = 20000000, .cpu_ns = 5000000};

/* A build the caller ran under cache/sandbox.h, which found it exact
 * (program/run.c sets pipeline_flight.exact from the sandbox's verdict). */
static inline void built_ok(struct pipeline_flight *f, const char *binary)
{
    f->exact = 1;
    const void *bins[1] = {binary};
    size_t sizes[1] = {strlen(binary)};
    const char *logs[1] = {"build log"};
    struct pipeline_output out = {.binaries = bins, .sizes = sizes, .logs = logs, .clock = &clock_5ms};
    pipeline_built(f, 1, &out);
}

#endif
