/* fuzz_spirv_translate — SPIR-V handed to the translator path: what
 * clCreateProgramWithIL + clBuildProgram do on a device without IL support
 * (spirv_scan, then libclshim-llvm's spirv_to_spir, which runs the Khronos
 * translator in a child process, clshim-tool llvm-child, because it
 * asserts on bad input).
 *
 * The translator itself is not instrumented (it is the distribution's
 * libLLVMSPIRVLib), so libFuzzer mutates blindly from the seed modules; run
 * it with a bounded -runs. Properties: the call returns (no hang: the child
 * has a timeout), returns CLSHIM_OK with non-empty bitcode or an error with
 * a reason, and never crashes this process, whatever the child does.
 * Needs CLSHIM_LLVM_LIB=<build>/libclshim-llvm.so in the environment. */
#include "cache/spirv_scan.h"
#include "common/error.h"
#include "compiler/llvmload.h"
#include "tests/fuzz/fuzz.h"

static const struct clshim_llvm_api *api;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    if (!getenv("CLSHIM_LLVM_LIB")) {
        fprintf(stderr, "fuzz_spirv_translate: set CLSHIM_LLVM_LIB to libclshim-llvm.so\n");
        exit(2);
    }
    api = llvm_api();
    if (!api) {
        fprintf(stderr, "fuzz_spirv_translate: cannot load %s\n", getenv("CLSHIM_LLVM_LIB"));
        exit(2);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    struct spirv_scan scan;
    if (spirv_scan(buf, size, &scan) == 0) {
        /* A spec constant for the first id the module declares, if any. */
        struct llvm_spec_const sc = {scan.num_spec_ids ? scan.spec_ids[0] : 0, 4, 7};
        void *bc = NULL;
        size_t bc_size = 0;
        char err[512] = "";
        int rc = api->spirv_to_spir(buf, size, &sc, scan.num_spec_ids ? 1 : 0, &bc, &bc_size, err, sizeof err);
        if (rc == CLSHIM_OK) {
            FUZZ_ASSERT(bc && bc_size > 4);
            FUZZ_ASSERT(memcmp(bc, "BC\xc0\xde", 4) == 0 || memcmp(bc, "\xde\xc0\x17\x0b", 4) == 0);
            api->free(bc);
        } else {
            FUZZ_ASSERT(err[0] != 0);
            FUZZ_ASSERT(memchr(err, 0, sizeof err) != NULL);
        }
    }
    free(buf);
    return 0;
}
