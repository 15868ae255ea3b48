/* spirv_scan.h — a structural check of a SPIR-V module, without LLVM.
 *
 * Walks the header and the instruction stream (each instruction's word count
 * must be non-zero and stay inside the module) and collects the SpecId
 * decorations, so clCreateProgramWithIL can refuse random bytes, a wrong
 * magic or a truncated module with CL_INVALID_VALUE at once, and
 * clSetProgramSpecializationConstant can refuse unknown ids, before the
 * translator is ever loaded. Input may be hostile: it is fuzzed.
 */
#ifndef CLSHIM_SPIRV_SCAN_H
#define CLSHIM_SPIRV_SCAN_H

#include <stddef.h>
#include <stdint.h>

#define SPIRV_SCAN_MAX_SPEC_IDS 256

struct spirv_scan {
    uint32_t version;    /* e.g. 0x00010000 for 1.0 */
    uint32_t num_spec_ids;
    uint32_t spec_ids[SPIRV_SCAN_MAX_SPEC_IDS];
    char reason[128];    /* why the module was refused */
};

/* 0 when the module is structurally valid, -1 otherwise (reason set). */
int spirv_scan(const void *module, size_t size, struct spirv_scan *out);

#endif
