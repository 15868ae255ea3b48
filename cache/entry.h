/* entry.h — the entry value codec: the bytes "entries" stores for one key.
 *
 * Design. An entry value is a fixed little-endian header followed by four
 * variable parts, in this order, with no padding:
 *
 *   offset size  field
 *        0    8  magic "CLSHIME1"
 *        8    2  format version (ENTRY_VERSION)
 *       10    2  flags (ENTRY_F_ZSTD: the payload is one zstd frame)
 *       12    4  origin (enum entry_origin)
 *       16   16  key hash: lo, hi (XXH3-128 of the key material)
 *       32    8  binary size (uncompressed)
 *       40    8  payload size (bytes of the binary as stored)
 *       48   16  binding: lo, hi (entry_binding() of key material + binary)
 *       64    8  XXH3-64 of the whole record, this field read as zero
 *       72    8  created (seconds since the epoch)
 *       80    8  last access (seconds; as of encoding, see below)
 *       88    8  hits (as of encoding)
 *       96    8  compile_ns
 *      104    4  key material length
 *      108    4  device name length (no NUL)
 *      112    4  build log length (no NUL)
 *      116    4  source length: 0 when built on this machine
 *      120       key material, device name, build log, source, payload
 *
 * The source (provenance) of an entry copied from the remote tier, and the
 * seal of a sealed entry (cache/sign.h):
 *        0    4  kind (STORE_SOURCE_REMOTE; STORE_SOURCE_HERE: a seal only)
 *        4    4  flags (STORE_SOURCE_SIGNED: the signer field holds who signed
 *                the remote value; STORE_SOURCE_SEALED: a seal follows it)
 *        8   32  the signer's ed25519 public key (zero when unsigned)
 *   sealed only:
 *       40   32  the sealer's ed25519 public key
 *       72   64  the seal (ed25519 of sign_seal_digest())
 *   40 or 136    where: the server and namespace (1-255 bytes, no NUL;
 *                none for STORE_SOURCE_HERE)
 * Until issue 31 the source length was a reserved zero field, so entries
 * built here are byte for byte what they were; an older clshim refuses a
 * record with a source (as damaged) and builds the program again, and so
 * does one from before seals for a sealed record.
 *
 * The record checksum covers every byte, so one flipped bit anywhere is
 * caught before anything is trusted. The binding ties the binary to its key:
 * it is a keyed (seeded) XXH3-128 over the full key material and the uncompressed
 * binary together, checked after decompression, so a binary moved under
 * another key fails even when every other field (record checksum included)
 * was rewritten to match. Version 1 records (a checksum of the binary alone)
 * are refused, never trusted: the store treats them as absent and the next
 * build replaces them. Last access and hits here are what they were when the record
 * was encoded (store.c keeps the live values in a small side record so a hit
 * never rewrites a binary; export refreshes them).
 *
 * Decoding trusts nothing: every length is checked against the record size
 * before use, the sizes must add up exactly, and the uncompressed size is
 * bounded (ENTRY_MAX_BINARY, and what a zstd frame of that payload size can
 * expand to) before anything is allocated.
 */
#ifndef CLSHIM_CACHE_ENTRY_H
#define CLSHIM_CACHE_ENTRY_H

#include <stddef.h>
#include <stdint.h>

#include "cache/store.h"

#define ENTRY_VERSION 2
#define ENTRY_HEADER_SIZE 120
#define ENTRY_F_ZSTD 0x1u
/* Largest binary a record may claim (decoding refuses more). */
#define ENTRY_MAX_BINARY ((uint64_t)1 << 31)
/* Largest whole record the codec accepts. */
#define ENTRY_MAX_RECORD (ENTRY_MAX_BINARY + ((uint64_t)64 << 20))

/* What built the program: store_record.origin. The one list of origin
 * kinds: the values are on disk, and cache/key.h's key kinds are these. */
enum entry_origin {
    ENTRY_ORIGIN_SOURCE = 1,
    ENTRY_ORIGIN_IL = 2,
    ENTRY_ORIGIN_BINARY = 3,
    ENTRY_ORIGIN_LINK = 4,
    ENTRY_ORIGIN_FUSION = 5,
    ENTRY_ORIGIN_COMPILE = 6,
    ENTRY_ORIGIN_MANIFEST = 7, /* direct mode's header list (cache/preproc.h), not a binary */
};
/* "source", "il", "binary", "link", "fusion", "compile", "manifest", or "unknown"; never NULL. */
const char *entry_origin_name(uint32_t origin);

/* A parsed record: every pointer points into the buffer given to
 * entry_parse() and stays valid as long as it does. Strings are not
 * NUL-terminated. */
struct entry_view {
    struct cache_hash hash;
    uint32_t flags, origin;
    uint64_t binary_size, payload_size;
    struct cache_hash binding;
    uint64_t created, last_access, hits, compile_ns;
    const void *key;
    size_t key_len;
    const char *device;
    size_t device_len;
    const char *log;
    size_t log_len;
    const unsigned char *source; /* the source part (NULL when built here) */
    size_t source_len;
    const void *payload;
};

/* Checks and parses a record of `len` bytes. CLSHIM_ECORRUPT when anything
 * is wrong (magic, version 0, unknown flags, sizes, record checksum);
 * CLSHIM_EUNSUPPORTED for a newer format version; CLSHIM_ENOTFOUND for an
 * older one, whose records are never trusted (the store treats them as
 * absent, so the next build replaces them without a warning). Does not
 * decompress. */
int entry_parse(const void *buf, size_t len, struct entry_view *v);

/* The key material and creation time of a record, its bounds checked and
 * nothing else (not its checksum: the binary is never read). Only for what
 * is shown, never served: the store's index of a program's entries
 * (store_family_get()) and the entries it writes itself. CLSHIM_OK or
 * CLSHIM_ECORRUPT (not this format version, or a length past the end). */
int entry_peek_key(const void *buf, size_t len, const void **key, size_t *key_len, uint64_t *created);

/* The source of a parsed record, decoded into *out: 1 when it has one, 0
 * when built here (entry_parse() checked its form). */
int entry_source(const struct entry_view *v, struct store_source *out);

/* Writes the binary of a parsed record into dst (v->binary_size bytes),
 * decompressing as needed, and checks its binding to the record's key
 * material. CLSHIM_ECORRUPT on a bad frame or binding. Thread-safe (one decompression context per thread). */
int entry_unpack_binary(const struct entry_view *v, void *dst);

/* The fields of a record to encode. `payload` is the binary as stored:
 * compressed when flags has ENTRY_F_ZSTD. */
struct entry_fields {
    struct cache_hash hash;
    uint32_t flags, origin;
    uint64_t binary_size;
    struct cache_hash binding; /* entry_binding(key, key_len, binary, binary_size) */
    uint64_t created, last_access, hits, compile_ns;
    const void *key;
    size_t key_len;
    const char *device;
    size_t device_len;
    const char *log;
    size_t log_len;
    const struct store_source *source; /* NULL: built here */
    const void *payload;
    size_t payload_size;
};

/* Bytes entry_write() will write; 0 when a part is too large for the format. */
size_t entry_encoded_size(const struct entry_fields *f);
/* Writes the record into dst (entry_encoded_size() bytes), checksum included. */
void entry_write(void *dst, const struct entry_fields *f);

/* Rewrites last access and hits of an encoded record in place and refreshes
 * its record checksum (export uses it). The record must have parsed. */
void entry_set_access(void *buf, size_t len, uint64_t last_access, uint64_t hits);

/* Compresses `binary` at zstd `level` into a malloc'd buffer. Returns
 * CLSHIM_OK with *flags = ENTRY_F_ZSTD, or with *flags = 0 and *out = NULL
 * when level is 0 or compression would not shrink it (store it raw);
 * CLSHIM_ENOMEM. */
int entry_compress(const void *binary, size_t size, int level, void **out, size_t *out_size,
                   uint32_t *flags);

/* The binding of a binary to its key: XXH3-128 of the binary, keyed
 * (seeded) with XXH3-64 of the key material, itself seeded with a constant
 * of this format version. It detects a binary moved under another key (or any
 * mismatch of the two); it is not a signature: whoever writes a record can
 * compute it (store.h says what guards against them). */
struct cache_hash entry_binding(const void *key, size_t key_len, const void *binary, size_t size);

/* A whole record for one build, as store_put() stores it and the remote tier
 * sends it: compresses rec's binary at zstd `level` (0: raw), stamps created
 * and last access with `now`, zero hits, and writes rec->source (if any). *out is malloc'd (*out_len bytes).
 * CLSHIM_ETOOBIG when a part is too large for the format; CLSHIM_ENOMEM. */
int entry_encode_record(struct cache_hash hash, const void *key, size_t key_len, const struct store_record *rec,
                        int level, uint64_t now, void **out, size_t *out_len);

/* Verifies a record for `hash` whose key material must be key[0..key_len)
 * and unpacks it: CLSHIM_OK with *out pointing into *arena (one malloc'd
 * block: free() or store_record_free()), out->source included. CLSHIM_ECORRUPT when it fails any
 * check (a newer format, or a binary whose binding is not to this key),
 * CLSHIM_ECOLLISION when it is another key's, CLSHIM_ENOTFOUND when it is an
 * older format (never trusted), CLSHIM_ENOMEM; nothing to free then. *arena
 * holds the block from its allocation on, so a caller reading buf from a
 * mapping that may fault (store.c's SIGBUS guard) can free it on that path. */
int entry_open_record(const void *buf, size_t len, struct cache_hash hash, const void *key, size_t key_len,
                      struct store_record *out, void **arena);

/* XXH3-64 / XXH3-128 as the codec and the store use them. */
uint64_t entry_xxh3_64(const void *p, size_t n);
struct cache_hash entry_xxh3_128(const void *p, size_t n);

#endif
