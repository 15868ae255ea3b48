/* fuzz.h — shared bits of clshim's libFuzzer targets (tests/fuzz/fuzz_*.c).
 *
 * Each target is one LLVMFuzzerTestOneInput over one parser or decoder that
 * reads bytes clshim does not control. Built by `make fuzz` into
 * $(BUILD)-fuzz/fuzz/ with clang-15 -fsanitize=fuzzer,address,undefined;
 * run by tests/reliability/test_fuzz.sh (seed corpora are tests/fuzz/corpus/
 * <target>/, crashes found become files in tests/fuzz/regress/<target>/).
 * A property that must hold on every input is checked with FUZZ_ASSERT,
 * which aborts, so libFuzzer records the input as a crash.
 */
#ifndef CLSHIM_FUZZ_H
#define CLSHIM_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_ASSERT(cond)                                                        \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "fuzz: %s:%d: property failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                             \
        }                                                                        \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* A NUL-terminated copy of the input (caller frees). */
static inline char *fuzz_strdup(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s) abort();
    memcpy(s, data, size);
    s[size] = 0;
    return s;
}

#endif
