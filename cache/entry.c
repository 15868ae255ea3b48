/* entry.c — the entry value codec (format in entry.h). */
#include "cache/entry.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "common/error.h"

static const unsigned char entry_magic[8] = {'C', 'L', 'S', 'H', 'I', 'M', 'E', '1'};

/* Offsets of the header fields (entry.h's table). */
enum {
    OFF_VERSION = 8, OFF_FLAGS = 10, OFF_ORIGIN = 12, OFF_HASH_LO = 16, OFF_HASH_HI = 24,
    OFF_BINSIZE = 32, OFF_PAYSIZE = 40, OFF_BIND_LO = 48, OFF_BIND_HI = 56, OFF_RECSUM = 64,
    OFF_CREATED = 72, OFF_ATIME = 80, OFF_HITS = 88, OFF_COMPILE = 96, OFF_KEYLEN = 104,
    OFF_DEVLEN = 108, OFF_LOGLEN = 112, OFF_SRCLEN = 116,
};

/* Bytes of a source before its `where` (entry.h): unsealed, sealed. */
#define SOURCE_FIXED 40u
#define SOURCE_SEALED_FIXED (SOURCE_FIXED + 32u + 64u)
#define SOURCE_FLAGS (STORE_SOURCE_SIGNED | STORE_SOURCE_SEALED)

static uint32_t get32(const unsigned char *p);

/* Whether a source part of `len` bytes at p is well formed. */
static int source_ok(const unsigned char *p, uint64_t len)
{
    if (len < SOURCE_FIXED) return 0;
    uint32_t kind = get32(p), flags = get32(p + 4);
    if (flags & ~SOURCE_FLAGS) return 0;
    uint64_t fixed = flags & STORE_SOURCE_SEALED ? SOURCE_SEALED_FIXED : SOURCE_FIXED;
    if (len < fixed) return 0;
    uint64_t where = len - fixed;
    if (kind == STORE_SOURCE_REMOTE) return where >= 1 && where <= STORE_SOURCE_WHERE_MAX;
    /* Built here: a seal and nothing else. */
    return kind == STORE_SOURCE_HERE && flags == STORE_SOURCE_SEALED && where == 0;
}

/* The binding's key ("clshimB2"): a new format version takes a new one, so
 * a binding never verifies across versions. */
#define BINDING_SEED 0x636c7368696d4232ull

const char *entry_origin_name(uint32_t origin)
{
    switch (origin) {
    case ENTRY_ORIGIN_SOURCE: return "source";
    case ENTRY_ORIGIN_IL: return "il";
    case ENTRY_ORIGIN_BINARY: return "binary";
    case ENTRY_ORIGIN_LINK: return "link";
    case ENTRY_ORIGIN_FUSION: return "fusion";
    case ENTRY_ORIGIN_COMPILE: return "compile";
    case ENTRY_ORIGIN_MANIFEST: return "manifest";
    }
    return "unknown";
}

static void put16(unsigned char *p, uint16_t v) { p[0] = (unsigned char)v; p[1] = (unsigned char)(v >> 8); }
static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint16_t get16(const unsigned char *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

uint64_t entry_xxh3_64(const void *p, size_t n) { return XXH3_64bits(p, n); }

struct cache_hash entry_binding(const void *key, size_t key_len, const void *binary, size_t size)
{
    /* One pass over each part, no streaming state to set up (a lookup pays
     * for this on every hit): the key material, with the format's seed,
     * gives the seed of the binary's hash. XXH3 hashes the lengths in. */
    uint64_t seed = XXH3_64bits_withSeed(key, key_len, BINDING_SEED);
    XXH128_hash_t h = XXH3_128bits_withSeed(binary, size, seed);
    return (struct cache_hash){h.low64, h.high64};
}

struct cache_hash entry_xxh3_128(const void *p, size_t n)
{
    XXH128_hash_t h = XXH3_128bits(p, n);
    return (struct cache_hash){h.low64, h.high64};
}

/* The record checksum: the whole record with its own field read as zero,
 * hashed in three pieces so the buffer is never modified. */
static uint64_t record_sum(const unsigned char *buf, size_t len)
{
    static const unsigned char zero[8];
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    XXH3_64bits_update(&st, buf, OFF_RECSUM);
    XXH3_64bits_update(&st, zero, 8);
    XXH3_64bits_update(&st, buf + OFF_RECSUM + 8, len - OFF_RECSUM - 8);
    return XXH3_64bits_digest(&st);
}

int entry_parse(const void *buf, size_t len, struct entry_view *v)
{
    const unsigned char *p = buf;
    if (!buf || len < ENTRY_HEADER_SIZE || (uint64_t)len > ENTRY_MAX_RECORD) return CLSHIM_ECORRUPT;
    if (memcmp(p, entry_magic, sizeof entry_magic) != 0) return CLSHIM_ECORRUPT;
    uint16_t version = get16(p + OFF_VERSION);
    if (version > ENTRY_VERSION) return CLSHIM_EUNSUPPORTED;
    if (version == 0) return CLSHIM_ECORRUPT;
    if (version < ENTRY_VERSION) return CLSHIM_ENOTFOUND; /* never trusted: see entry.h */
    if (record_sum(p, len) != get64(p + OFF_RECSUM)) return CLSHIM_ECORRUPT;

    memset(v, 0, sizeof *v);
    v->flags = get16(p + OFF_FLAGS);
    if (v->flags & ~ENTRY_F_ZSTD) return CLSHIM_ECORRUPT;
    v->origin = get32(p + OFF_ORIGIN);
    v->hash.lo = get64(p + OFF_HASH_LO);
    v->hash.hi = get64(p + OFF_HASH_HI);
    v->binary_size = get64(p + OFF_BINSIZE);
    v->payload_size = get64(p + OFF_PAYSIZE);
    v->binding.lo = get64(p + OFF_BIND_LO);
    v->binding.hi = get64(p + OFF_BIND_HI);
    v->created = get64(p + OFF_CREATED);
    v->last_access = get64(p + OFF_ATIME);
    v->hits = get64(p + OFF_HITS);
    v->compile_ns = get64(p + OFF_COMPILE);
    uint64_t key_len = get32(p + OFF_KEYLEN), dev_len = get32(p + OFF_DEVLEN);
    uint64_t log_len = get32(p + OFF_LOGLEN), src_len = get32(p + OFF_SRCLEN);
    if (src_len && src_len > SOURCE_SEALED_FIXED + STORE_SOURCE_WHERE_MAX) return CLSHIM_ECORRUPT;

    /* Every part is at most 4 GiB, so the sum cannot overflow 64 bits
     * unless payload_size is absurd; bound it by the record first. */
    if (v->payload_size > len) return CLSHIM_ECORRUPT;
    if (ENTRY_HEADER_SIZE + key_len + dev_len + log_len + src_len + v->payload_size != len) return CLSHIM_ECORRUPT;
    if (v->binary_size > ENTRY_MAX_BINARY) return CLSHIM_ECORRUPT;
    if (v->flags & ENTRY_F_ZSTD) {
        /* A zstd block of 3 header bytes and 1 RLE byte expands to at most
         * 128 KiB; nothing honest claims more than that ratio. */
        if (v->binary_size > (v->payload_size / 4 + 1) * ZSTD_BLOCKSIZE_MAX) return CLSHIM_ECORRUPT;
        unsigned long long fcs = ZSTD_getFrameContentSize(p + len - v->payload_size, (size_t)v->payload_size);
        if (fcs != v->binary_size) return CLSHIM_ECORRUPT;
    } else if (v->binary_size != v->payload_size) {
        return CLSHIM_ECORRUPT;
    }
    const unsigned char *q = p + ENTRY_HEADER_SIZE;
    v->key = q, v->key_len = (size_t)key_len, q += key_len;
    v->device = (const char *)q, v->device_len = (size_t)dev_len, q += dev_len;
    v->log = (const char *)q, v->log_len = (size_t)log_len, q += log_len;
    v->source = src_len ? q : NULL, v->source_len = (size_t)src_len, q += src_len;
    if (v->source && !source_ok(v->source, v->source_len)) return CLSHIM_ECORRUPT;
    v->payload = q;
    return CLSHIM_OK;
}

int entry_peek_key(const void *buf, size_t len, const void **key, size_t *key_len, uint64_t *created)
{
    const unsigned char *p = buf;
    if (!buf || len < ENTRY_HEADER_SIZE || memcmp(p, entry_magic, sizeof entry_magic) != 0 ||
        get16(p + OFF_VERSION) != ENTRY_VERSION)
        return CLSHIM_ECORRUPT;
    uint64_t n = get32(p + OFF_KEYLEN);
    if (n > len - ENTRY_HEADER_SIZE) return CLSHIM_ECORRUPT;
    *key = p + ENTRY_HEADER_SIZE;
    *key_len = (size_t)n;
    if (created) *created = get64(p + OFF_CREATED);
    return CLSHIM_OK;
}

int entry_source(const struct entry_view *v, struct store_source *out)
{
    memset(out, 0, sizeof *out);
    if (!v->source) return 0;
    out->kind = get32(v->source);
    out->flags = get32(v->source + 4);
    memcpy(out->signer, v->source + 8, sizeof out->signer);
    size_t fixed = SOURCE_FIXED;
    if (out->flags & STORE_SOURCE_SEALED) {
        memcpy(out->seal_signer, v->source + SOURCE_FIXED, sizeof out->seal_signer);
        memcpy(out->seal, v->source + SOURCE_FIXED + 32, sizeof out->seal);
        fixed = SOURCE_SEALED_FIXED;
    }
    memcpy(out->where, v->source + fixed, v->source_len - fixed);
    return 1;
}

/* The source part as written: fixed fields, then `where` cut to its limit
 * (none for an entry built here). */
static size_t source_size(const struct store_source *src)
{
    if (!src) return 0;
    size_t fixed = src->flags & STORE_SOURCE_SEALED ? SOURCE_SEALED_FIXED : SOURCE_FIXED;
    return fixed + (src->kind == STORE_SOURCE_REMOTE ? strnlen(src->where, STORE_SOURCE_WHERE_MAX) : 0);
}

/* One decompression context per thread, freed when the thread exits. */
static pthread_key_t dctx_key;
static pthread_once_t dctx_once = PTHREAD_ONCE_INIT;
static void dctx_free(void *p) { ZSTD_freeDCtx(p); }
static void dctx_init(void) { pthread_key_create(&dctx_key, dctx_free); }

static ZSTD_DCtx *thread_dctx(void)
{
    pthread_once(&dctx_once, dctx_init);
    ZSTD_DCtx *d = pthread_getspecific(dctx_key);
    if (!d && (d = ZSTD_createDCtx()) != NULL && pthread_setspecific(dctx_key, d) != 0) {
        ZSTD_freeDCtx(d);
        d = NULL;
    }
    return d;
}

int entry_unpack_binary(const struct entry_view *v, void *dst)
{
    if (v->flags & ENTRY_F_ZSTD) {
        ZSTD_DCtx *d = thread_dctx();
        if (!d) return CLSHIM_ENOMEM;
        size_t n = ZSTD_decompressDCtx(d, dst, (size_t)v->binary_size, v->payload, (size_t)v->payload_size);
        if (ZSTD_isError(n) || n != v->binary_size) return CLSHIM_ECORRUPT;
    } else if (v->binary_size) {
        memcpy(dst, v->payload, (size_t)v->binary_size);
    }
    struct cache_hash b = entry_binding(v->key, v->key_len, dst, (size_t)v->binary_size);
    return b.lo == v->binding.lo && b.hi == v->binding.hi ? CLSHIM_OK : CLSHIM_ECORRUPT;
}

size_t entry_encoded_size(const struct entry_fields *f)
{
    if (f->key_len > UINT32_MAX || f->device_len > UINT32_MAX || f->log_len > UINT32_MAX ||
        f->binary_size > ENTRY_MAX_BINARY || f->payload_size > ENTRY_MAX_BINARY)
        return 0;
    uint64_t n = ENTRY_HEADER_SIZE + (uint64_t)f->key_len + f->device_len + f->log_len + source_size(f->source) +
                 f->payload_size;
    return n > ENTRY_MAX_RECORD || n > SIZE_MAX ? 0 : (size_t)n;
}

void entry_write(void *dst, const struct entry_fields *f)
{
    unsigned char *p = dst;
    size_t len = entry_encoded_size(f);
    memset(p, 0, ENTRY_HEADER_SIZE);
    memcpy(p, entry_magic, sizeof entry_magic);
    put16(p + OFF_VERSION, ENTRY_VERSION);
    put16(p + OFF_FLAGS, (uint16_t)f->flags);
    put32(p + OFF_ORIGIN, f->origin);
    put64(p + OFF_HASH_LO, f->hash.lo);
    put64(p + OFF_HASH_HI, f->hash.hi);
    put64(p + OFF_BINSIZE, f->binary_size);
    put64(p + OFF_PAYSIZE, f->payload_size);
    put64(p + OFF_BIND_LO, f->binding.lo);
    put64(p + OFF_BIND_HI, f->binding.hi);
    put64(p + OFF_CREATED, f->created);
    put64(p + OFF_ATIME, f->last_access);
    put64(p + OFF_HITS, f->hits);
    put64(p + OFF_COMPILE, f->compile_ns);
    put32(p + OFF_KEYLEN, (uint32_t)f->key_len);
    put32(p + OFF_DEVLEN, (uint32_t)f->device_len);
    put32(p + OFF_LOGLEN, (uint32_t)f->log_len);
    put32(p + OFF_SRCLEN, (uint32_t)source_size(f->source));
    unsigned char *q = p + ENTRY_HEADER_SIZE;
    if (f->key_len) memcpy(q, f->key, f->key_len);
    q += f->key_len;
    if (f->device_len) memcpy(q, f->device, f->device_len);
    q += f->device_len;
    if (f->log_len) memcpy(q, f->log, f->log_len);
    q += f->log_len;
    if (f->source) {
        size_t fixed = f->source->flags & STORE_SOURCE_SEALED ? SOURCE_SEALED_FIXED : SOURCE_FIXED;
        size_t where = source_size(f->source) - fixed;
        put32(q, f->source->kind);
        put32(q + 4, f->source->flags);
        memcpy(q + 8, f->source->signer, sizeof f->source->signer);
        if (fixed == SOURCE_SEALED_FIXED) {
            memcpy(q + SOURCE_FIXED, f->source->seal_signer, sizeof f->source->seal_signer);
            memcpy(q + SOURCE_FIXED + 32, f->source->seal, sizeof f->source->seal);
        }
        memcpy(q + fixed, f->source->where, where);
        q += fixed + where;
    }
    if (f->payload_size) memcpy(q, f->payload, f->payload_size);
    put64(p + OFF_RECSUM, record_sum(p, len));
}

void entry_set_access(void *buf, size_t len, uint64_t last_access, uint64_t hits)
{
    unsigned char *p = buf;
    put64(p + OFF_ATIME, last_access);
    put64(p + OFF_HITS, hits);
    put64(p + OFF_RECSUM, record_sum(p, len));
}

/* The default level (CLSHIM_CACHE_COMPRESS_LEVEL=3) was measured on a real
 * PoCL 3.1 binary (pthread device, three kernels, 96,811 bytes; zstd 1.5.4,
 * one core of this project's 2-core build machine):
 *   level  stored   ratio  compress   decompress
 *       1  42,255   2.29   494 MB/s   1165 MB/s
 *       3  40,389   2.40   245 MB/s   1171 MB/s
 *       9  39,042   2.48    88 MB/s   1135 MB/s
 *      19  36,350   2.66     7 MB/s    902 MB/s
 * Level 3 stores 4 % less than level 1 at half its speed, still 0.4 ms for
 * that binary, next to a compile of 100+ ms; levels above it gain a few
 * percent for several times the time. Decompression is level-independent. */
int entry_compress(const void *binary, size_t size, int level, void **out, size_t *out_size,
                   uint32_t *flags)
{
    *out = NULL, *out_size = 0, *flags = 0;
    if (level <= 0 || size == 0) return CLSHIM_OK;
    if (level > ZSTD_maxCLevel()) level = ZSTD_maxCLevel();
    size_t cap = ZSTD_compressBound(size);
    void *buf = malloc(cap);
    if (!buf) return CLSHIM_ENOMEM;
    size_t n = ZSTD_compress(buf, cap, binary, size, level);
    if (ZSTD_isError(n) || n >= size) { /* incompressible: store raw */
        free(buf);
        return CLSHIM_OK;
    }
    *out = buf, *out_size = n, *flags = ENTRY_F_ZSTD;
    return CLSHIM_OK;
}

int entry_encode_record(struct cache_hash hash, const void *key, size_t key_len, const struct store_record *rec,
                        int level, uint64_t now, void **out, size_t *out_len)
{
    *out = NULL, *out_len = 0;
    if (rec->binary_size > ENTRY_MAX_BINARY) return CLSHIM_ETOOBIG;
    void *z;
    size_t zsize;
    uint32_t flags;
    int rc = entry_compress(rec->binary, rec->binary_size, level, &z, &zsize, &flags);
    if (rc) return rc;
    const char *dev = rec->device_name ? rec->device_name : "";
    const char *log = rec->build_log ? rec->build_log : "";
    struct entry_fields f = {
        .hash = hash, .flags = flags, .origin = rec->origin, .binary_size = rec->binary_size,
        .binding = entry_binding(key, key_len, rec->binary, rec->binary_size), .created = now,
        .last_access = now, .hits = 0, .compile_ns = rec->compile_ns, .key = key, .key_len = key_len,
        .device = dev, .device_len = strlen(dev), .log = log, .log_len = strlen(log), .source = rec->source,
        .payload = z ? z : rec->binary, .payload_size = z ? zsize : rec->binary_size,
    };
    size_t len = entry_encoded_size(&f);
    void *buf = len ? malloc(len) : NULL;
    if (buf) entry_write(buf, &f);
    free(z);
    if (!buf) return len ? CLSHIM_ENOMEM : CLSHIM_ETOOBIG;
    *out = buf, *out_len = len;
    return CLSHIM_OK;
}

int entry_open_record(const void *buf, size_t len, struct cache_hash hash, const void *key, size_t key_len,
                      struct store_record *out, void **arena)
{
    struct entry_view e;
    *arena = NULL;
    memset(out, 0, sizeof *out);
    int rc = entry_parse(buf, len, &e);
    if (rc == CLSHIM_EUNSUPPORTED) return CLSHIM_ECORRUPT; /* a newer clshim's entry: not ours to serve */
    if (rc) return rc;
    if (e.hash.lo != hash.lo || e.hash.hi != hash.hi) return CLSHIM_ECORRUPT;
    if (e.key_len != key_len || (key_len && memcmp(e.key, key, key_len) != 0)) return CLSHIM_ECOLLISION;
    /* One block: the source first (aligned), then binary, log, device name. */
    size_t src_room = e.source ? sizeof(struct store_source) : 0;
    unsigned char *mem = malloc(src_room + (size_t)e.binary_size + e.log_len + e.device_len + 2);
    if (!mem) return CLSHIM_ENOMEM;
    *arena = mem; /* from here on the caller can free it, e.g. after a fault reading buf */
    struct store_source *src = e.source ? (struct store_source *)mem : NULL;
    if (src) entry_source(&e, src);
    unsigned char *bin = mem + src_room;
    char *log = (char *)bin + e.binary_size, *dev = log + e.log_len + 1;
    rc = entry_unpack_binary(&e, bin); /* checks the binding: a binary moved under another key fails */
    if (rc) {
        *arena = NULL;
        free(mem);
        return rc;
    }
    memcpy(log, e.log, e.log_len);
    log[e.log_len] = 0;
    memcpy(dev, e.device, e.device_len);
    dev[e.device_len] = 0;
    *out = (struct store_record){bin, (size_t)e.binary_size, log, e.compile_ns, e.origin, dev, src};
    return CLSHIM_OK;
}
