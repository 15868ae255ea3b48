/* test_llvm_load.c — a missing libclshim-llvm.so turns translation and
 * fusion off: llvm_api() answers NULL, now and later, and says why once. */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <setjmp.h>
#include <cmocka.h>

#include "compiler/llvmload.h"

static char log_path[4096];

/* a missing module gives NULL forever and one "cannot load" log line */
static void missing_module_turns_features_off(void **state)
{
    (void)state;
    assert_null(llvm_api());
    assert_null(llvm_api());
    assert_int_equal(llvm_api_loaded(), 0);
    FILE *f = fopen(log_path, "r");
    assert_non_null(f);
    char text[4096] = "";
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    const char *line = strstr(text, "clshim: cannot load /nonexistent/libclshim-llvm.so");
    assert_non_null(line);
    assert_non_null(strstr(line, "translating SPIR-V and building fused kernels are off (what the cache holds of either still loads)"));
    assert_null(strstr(line + 1, "clshim: cannot load")); /* once */
}

int main(void)
{
    const char *dir = getenv("TEST_TMP");
    snprintf(log_path, sizeof log_path, "%s/llvm-load.log", dir ? dir : "/tmp");
    remove(log_path);
    setenv("CLSHIM_LLVM_LIB", "/nonexistent/libclshim-llvm.so", 1);
    setenv("CLSHIM_LOG_FILE", log_path, 1);
    setenv("CLSHIM_LOG", "warn", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(missing_module_turns_features_off),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
