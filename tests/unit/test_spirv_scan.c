/* test_spirv_scan.c — structural SPIR-V checks without LLVM. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cache/spirv_scan.h"

/* header + OpCapability Kernel + OpDecorate %5 SpecId 7 + OpMemoryModel */
static const uint32_t module[] = {
    0x07230203, 0x00010000, 0, 10, 0,
    (2u << 16) | 17, 6,
    (4u << 16) | 71, 5, 1, 7,
    (3u << 16) | 14, 2, 2,
};

/* a well-formed module passes and its SpecIds are collected */
static void valid_module(void **state)
{
    struct spirv_scan s;
    assert_int_equal(spirv_scan(module, sizeof module, &s), 0);
    assert_int_equal(s.version, 0x00010000);
    assert_int_equal(s.num_spec_ids, 1);
    assert_int_equal(s.spec_ids[0], 7);
}

/* byte-swapped modules are valid too */
static void byteswapped_module(void **state)
{
    uint32_t m[sizeof module / 4];
    for (size_t i = 0; i < sizeof module / 4; i++) m[i] = __builtin_bswap32(module[i]);
    struct spirv_scan s;
    assert_int_equal(spirv_scan(m, sizeof m, &s), 0);
    assert_int_equal(s.spec_ids[0], 7);
}

/* wrong magic, truncation, zero word counts, bad sizes are refused */
static void malformed_refused(void **state)
{
    struct spirv_scan s;
    uint32_t m[sizeof module / 4];
    memcpy(m, module, sizeof m);
    m[0] ^= 1;
    assert_int_equal(spirv_scan(m, sizeof m, &s), -1);
    assert_non_null(strstr(s.reason, "magic"));
    assert_int_equal(spirv_scan(module, sizeof module - 4, &s), -1);
    assert_int_equal(spirv_scan(module, 18, &s), -1);
    assert_int_equal(spirv_scan(NULL, 0, &s), -1);
    memcpy(m, module, sizeof m);
    m[5] = 17; /* word count 0 */
    assert_int_equal(spirv_scan(m, sizeof m, &s), -1);
    memcpy(m, module, sizeof m);
    m[1] = 0x00020000;
    assert_int_equal(spirv_scan(m, sizeof m, &s), -1);
    assert_int_equal(spirv_scan(module, 20, &s), -1); /* header only */
}

/* random input never crashes and is almost always refused (fixed seed) */
static void random_input(void **state)
{
    srand(1234);
    unsigned char buf[512];
    int accepted = 0;
    for (int i = 0; i < 20000; i++) {
        size_t n = (size_t)(rand() % (int)sizeof buf);
        for (size_t j = 0; j < n; j++) buf[j] = (unsigned char)rand();
        if (i % 2) memcpy(buf, module, n < sizeof module ? n : sizeof module);
        struct spirv_scan s;
        accepted += spirv_scan(buf, n, &s) == 0;
    }
    assert_true(accepted < 20000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(valid_module), cmocka_unit_test(byteswapped_module),
        cmocka_unit_test(malformed_refused), cmocka_unit_test(random_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
