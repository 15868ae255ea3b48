/* test_fhistory.c — the run-length rule of automatic fusion's history
 * (fusion/fhistory.h fh_wait): when loading a cached fused program pays,
 * and how long a sequence sits out when it does not, against a model that
 * simulates the run occurrence by occurrence. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>

#include "fusion/fhistory.h"

/* No prediction without a gain measured or two loads measured. */
static void test_nothing_to_predict_by(void **state)
{
    (void)state;
    assert_int_equal(fh_wait(30, 1, 275, 0, 8000), 0);
    assert_int_equal(fh_wait(30, 1, 275, 1, 8000), 0);      /* the first load: often the driver's JIT */
    assert_int_equal(fh_wait(30, 1, 275, 2, 0), 0);         /* no gain measured */
    assert_int_equal(fh_wait(30, 1, 275, 2, -5000), 0);     /* slower fused: fspeed.c decides */
}

/* The figures measured on an H100 (docs/measurements): 275 us to load,
 * 8 us saved per chain. */
static void test_nvidia_figures(void **state)
{
    (void)state;
    _Static_assert(FH_MARGIN == 2, "the figures below are for a margin of 2");
    /* 30 chains last time, 1 seen: 29 left * 8 = 232 < 2 * 275: wait until 69 (69 * 8 = 552). */
    assert_int_equal(fh_wait(30, 1, 275, 2, 8000), 68);
    /* 300 last time: 299 * 8 well over 2 * 275: load now. */
    assert_int_equal(fh_wait(300, 1, 275, 2, 8000), 0);
    /* A run that outlasts its prediction: at 69 seen, 69 * 8 = 552 >= 550. */
    assert_int_equal(fh_wait(30, 69, 275, 2, 8000), 0);
    assert_int_equal(fh_wait(30, 68, 275, 2, 8000), 1);
    /* Just under the margin: 28 left * 19.6 us = 549 < 550; 28 * 19.7 = 552 pays. */
    assert_int_equal(fh_wait(30, 2, 275, 2, 19600), 29 - 2);
    assert_int_equal(fh_wait(30, 2, 275, 2, 19700), 0);
    /* The driver's JIT each run (16 ms): 5,000 chains pay, 3,000 do not. */
    assert_int_equal(fh_wait(5000, 1, 16000, 2, 8000), 0);
    assert_int_equal(fh_wait(3000, 1, 16000, 2, 8000), 4000 - 1);
}

static void test_huge_values_saturate(void **state)
{
    (void)state;
    uint32_t w = fh_wait(2, 1, 4000000000u, 2, 1); /* 4e12 ns at 1 ns an occurrence */
    assert_true(w > 0 && w < UINT32_MAX); /* never FB_BACKOFF_NEVER: decided again some day */
    assert_true(fh_wait(0, 0, 4000000000u, 9, 1) > 0);
    assert_int_equal(fh_wait(UINT32_MAX, UINT32_MAX, 4000000000u, 2, INT32_MAX), 0);
}

/* A model run: the sequence occurs `length` times; the rule is asked at
 * the first occurrence held and after each wait. Returns the occurrence at
 * which the program is loaded (0: never). */
static uint64_t model_load_at(uint32_t last, uint64_t length, uint32_t load_us, int32_t gain_ns)
{
    uint64_t seen = 1;
    while (seen <= length) {
        uint32_t w = fh_wait(last, seen, load_us, 2, gain_ns);
        if (!w) return seen;
        seen += w;
    }
    return 0;
}

/* Whatever the record, the rule never loads where the run's own past
 * (seen) and the last run (left) both say it would not pay, and a run
 * that goes on loads once it has proved long enough: once seen * gain
 * covers the load. A fixed-seed random sweep. */
static void test_against_model(void **state)
{
    (void)state;
    srand(47);
    for (int i = 0; i < 20000; i++) {
        uint32_t last = (uint32_t)(rand() % 5000);
        uint64_t length = 1 + (uint64_t)(rand() % 5000);
        uint32_t load = 1 + (uint32_t)(rand() % 50000);
        int32_t gain = 1 + rand() % 20000;
        uint64_t at = model_load_at(last, length, load, gain);
        uint64_t cost = (uint64_t)load * 1000 * FH_MARGIN;
        uint64_t pays_at = (cost + (uint64_t)gain - 1) / (uint64_t)gain;
        if (at) {
            uint64_t left = last > at ? last - at : 0;
            if (left < at) left = at;
            assert_true(left * (uint64_t)gain >= cost); /* loaded only where predicted to pay, with the margin */
            assert_true(at <= pays_at); /* asked at the first occurrence, then where it pays */
        } else {
            assert_true(length < pays_at); /* never loaded: the run never proved long enough */
        }
        if (length >= pays_at) assert_true(at && at <= pays_at); /* proved long enough: loaded by then */
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nothing_to_predict_by),
        cmocka_unit_test(test_nvidia_figures),
        cmocka_unit_test(test_huge_values_saturate),
        cmocka_unit_test(test_against_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
