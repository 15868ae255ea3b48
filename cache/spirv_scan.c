/* spirv_scan.c — structural SPIR-V validation (see spirv_scan.h). */
#include "cache/spirv_scan.h"

#include <stdio.h>
#include <string.h>

#define SPIRV_MAGIC 0x07230203u
#define OP_DECORATE 71u
#define DECORATION_SPEC_ID 1u

static uint32_t swap32(uint32_t v)
{
    return (v >> 24) | ((v >> 8) & 0xff00u) | ((v << 8) & 0xff0000u) | (v << 24);
}

int spirv_scan(const void *module, size_t size, struct spirv_scan *out)
{
    memset(out, 0, sizeof *out);
    if (!module || size < 20 || size % 4) {
        snprintf(out->reason, sizeof out->reason, "not a SPIR-V module (%zu bytes)", size);
        return -1;
    }
    const unsigned char *bytes = module;
    size_t nwords = size / 4;
    uint32_t first;
    memcpy(&first, bytes, 4);
    int swapped = first == swap32(SPIRV_MAGIC);
    if (first != SPIRV_MAGIC && !swapped) {
        snprintf(out->reason, sizeof out->reason, "wrong magic number 0x%08x", first);
        return -1;
    }
    uint32_t version;
    memcpy(&version, bytes + 4, 4);
    if (swapped) version = swap32(version);
    out->version = version;
    if ((version >> 16) != 1 || ((version >> 8) & 0xff) > 6 || (version & 0xff) || (version >> 24)) {
        snprintf(out->reason, sizeof out->reason, "unsupported SPIR-V version 0x%08x", version);
        return -1;
    }
    uint32_t bound;
    memcpy(&bound, bytes + 12, 4);
    if (swapped) bound = swap32(bound);
    if (bound == 0 || bound > (1u << 22)) {
        snprintf(out->reason, sizeof out->reason, "invalid id bound %u", bound);
        return -1;
    }
    size_t i = 5;
    size_t instructions = 0;
    while (i < nwords) {
        uint32_t w;
        memcpy(&w, bytes + i * 4, 4);
        if (swapped) w = swap32(w);
        uint32_t count = w >> 16, opcode = w & 0xffff;
        if (count == 0 || i + count > nwords) {
            snprintf(out->reason, sizeof out->reason, "truncated or malformed instruction at word %zu", i);
            return -1;
        }
        if (opcode == OP_DECORATE && count >= 4) {
            uint32_t deco, id;
            memcpy(&deco, bytes + (i + 2) * 4, 4);
            memcpy(&id, bytes + (i + 3) * 4, 4);
            if (swapped) { deco = swap32(deco); id = swap32(id); }
            if (deco == DECORATION_SPEC_ID && out->num_spec_ids < SPIRV_SCAN_MAX_SPEC_IDS)
                out->spec_ids[out->num_spec_ids++] = id;
        }
        i += count;
        instructions++;
    }
    if (instructions == 0) {
        snprintf(out->reason, sizeof out->reason, "module has no instructions");
        return -1;
    }
    return 0;
}
