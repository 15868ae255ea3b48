/* fuzz_entry — the cache entry decoder (cache/entry.h) on hostile records.
 *
 * Properties: entry_parse never reads outside the record or allocates from
 * an unchecked size; every part it returns lies inside the record; a record
 * that parses unpacks to a binary that matches its checksum or is refused;
 * re-encoding the parsed fields gives a record that parses to the same
 * view; entry_set_access keeps a record valid. */
#include "cache/entry.h"
#include "common/error.h"
#include "tests/fuzz/fuzz.h"

/* Binaries larger than this are not unpacked here (the decoder bounds them
 * to ENTRY_MAX_BINARY; the fuzzer's memory limit is smaller). */
#define UNPACK_LIMIT ((uint64_t)64 << 20)

static int inside(const void *p, size_t n, const uint8_t *base, size_t len)
{
    const uint8_t *b = p;
    return n == 0 || (b >= base && b + n <= base + len);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* The store hands the decoder LMDB's value, 8-byte aligned or not: copy
     * so the sanitizer sees the exact bounds. */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    struct entry_view v;
    int rc = entry_parse(buf, size, &v);
    if (rc != CLSHIM_OK) {
        FUZZ_ASSERT(rc == CLSHIM_ECORRUPT || rc == CLSHIM_EUNSUPPORTED || rc == CLSHIM_ENOTFOUND);
        free(buf);
        return 0;
    }
    FUZZ_ASSERT(size >= ENTRY_HEADER_SIZE);
    FUZZ_ASSERT(inside(v.key, v.key_len, buf, size));
    FUZZ_ASSERT(inside(v.device, v.device_len, buf, size));
    FUZZ_ASSERT(inside(v.log, v.log_len, buf, size));
    FUZZ_ASSERT(inside(v.payload, v.payload_size, buf, size));
    FUZZ_ASSERT(v.binary_size <= ENTRY_MAX_BINARY);
    FUZZ_ASSERT(ENTRY_HEADER_SIZE + v.key_len + v.device_len + v.log_len + v.payload_size == size);

    if (v.binary_size <= UNPACK_LIMIT) {
        uint8_t *bin = malloc(v.binary_size ? v.binary_size : 1);
        if (bin) {
            int urc = entry_unpack_binary(&v, bin);
            FUZZ_ASSERT(urc == CLSHIM_OK || urc == CLSHIM_ECORRUPT);
            if (urc == CLSHIM_OK) {
                struct cache_hash b = entry_binding(v.key, v.key_len, bin, (size_t)v.binary_size);
                FUZZ_ASSERT(b.lo == v.binding.lo && b.hi == v.binding.hi);
            }
            free(bin);
        }
    }

    /* Re-encode what was parsed: same size, parses back to the same view. */
    struct entry_fields f = {
        .hash = v.hash, .flags = v.flags, .origin = v.origin, .binary_size = v.binary_size,
        .binding = v.binding, .created = v.created, .last_access = v.last_access, .hits = v.hits,
        .compile_ns = v.compile_ns, .key = v.key, .key_len = v.key_len, .device = v.device,
        .device_len = v.device_len, .log = v.log, .log_len = v.log_len, .payload = v.payload,
        .payload_size = v.payload_size,
    };
    size_t n = entry_encoded_size(&f);
    FUZZ_ASSERT(n == size);
    uint8_t *re = malloc(n);
    if (re) {
        entry_write(re, &f);
        struct entry_view w;
        FUZZ_ASSERT(entry_parse(re, n, &w) == CLSHIM_OK);
        FUZZ_ASSERT(w.binding.lo == v.binding.lo && w.binding.hi == v.binding.hi && w.key_len == v.key_len && w.payload_size == v.payload_size);
        FUZZ_ASSERT(memcmp(re, buf, n) == 0); /* the encoding is canonical */
        entry_set_access(re, n, v.last_access + 61, v.hits + 1);
        FUZZ_ASSERT(entry_parse(re, n, &w) == CLSHIM_OK);
        FUZZ_ASSERT(w.hits == v.hits + 1 && w.last_access == v.last_access + 61);
        free(re);
    }
    free(buf);
    return 0;
}
