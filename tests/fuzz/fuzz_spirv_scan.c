/* fuzz_spirv_scan — the structural SPIR-V check (cache/spirv_scan.h) that
 * stands between clCreateProgramWithIL's bytes and the translator.
 *
 * Properties: never reads outside the module; a refused module has a reason;
 * an accepted one has the SPIR-V magic (either byte order), a word-aligned
 * size and at most SPIRV_SCAN_MAX_SPEC_IDS spec ids. */
#include "cache/spirv_scan.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    struct spirv_scan s;
    int rc = spirv_scan(size ? buf : NULL, size, &s);
    FUZZ_ASSERT(rc == 0 || rc == -1);
    FUZZ_ASSERT(memchr(s.reason, 0, sizeof s.reason) != NULL);
    if (rc == 0) {
        uint32_t magic;
        FUZZ_ASSERT(size >= 20 && size % 4 == 0);
        memcpy(&magic, buf, 4);
        FUZZ_ASSERT(magic == 0x07230203u || magic == 0x03022307u);
        FUZZ_ASSERT(s.num_spec_ids <= SPIRV_SCAN_MAX_SPEC_IDS);
    } else {
        FUZZ_ASSERT(s.reason[0] != 0);
    }
    free(buf);
    return 0;
}
