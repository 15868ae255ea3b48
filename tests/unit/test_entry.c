/* test_entry.c — the entry value codec: round trips, and that no malformed
 * record is trusted (bit flips, truncation, lying lengths, random bytes). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cache/entry.h"
#include "common/error.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next_rand(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}

/* A binary that compresses like code: repeated words with some noise. */
static void fill_binary(unsigned char *p, size_t n, uint64_t seed)
{
    rng = seed | 1;
    for (size_t i = 0; i < n; i++) p[i] = (i % 16 < 10) ? (unsigned char)(i / 64) : (unsigned char)next_rand();
}

struct built {
    unsigned char *rec;
    size_t len;
    unsigned char bin[5000];
    size_t bin_len;
};

static const char key_text[] = "clshim-key 1\nkind=source\noptions=-O2\ninput=12\nkernel void";

static void build(struct built *b, int level, size_t bin_len)
{
    b->bin_len = bin_len;
    fill_binary(b->bin, bin_len, 42);
    void *z;
    size_t zs;
    uint32_t flags;
    assert_int_equal(entry_compress(b->bin, bin_len, level, &z, &zs, &flags), CLSHIM_OK);
    struct entry_fields f = {
        .hash = entry_xxh3_128(key_text, sizeof key_text - 1), .flags = flags, .origin = ENTRY_ORIGIN_IL,
        .binary_size = bin_len, .binding = entry_binding(key_text, sizeof key_text - 1, b->bin, bin_len), .created = 1000,
        .last_access = 2000, .hits = 7, .compile_ns = 123456789, .key = key_text,
        .key_len = sizeof key_text - 1, .device = "cpu-dev", .device_len = 7, .log = "ok", .log_len = 2,
        .payload = z ? z : b->bin, .payload_size = z ? zs : bin_len,
    };
    b->len = entry_encoded_size(&f);
    assert_true(b->len > ENTRY_HEADER_SIZE);
    b->rec = malloc(b->len);
    entry_write(b->rec, &f);
    free(z);
}

/* an encoded record parses back to every field, compressed or raw */
static void round_trip_keeps_every_field(void **state)
{
    (void)state;
    for (int level = 0; level <= 3; level += 3) {
        struct built b;
        build(&b, level, 4000);
        struct entry_view v;
        assert_int_equal(entry_parse(b.rec, b.len, &v), CLSHIM_OK);
        assert_int_equal(v.flags, level ? ENTRY_F_ZSTD : 0);
        if (level) assert_true(v.payload_size < 4000);
        assert_int_equal(v.origin, ENTRY_ORIGIN_IL);
        assert_int_equal(v.binary_size, 4000);
        assert_int_equal(v.created, 1000);
        assert_int_equal(v.last_access, 2000);
        assert_int_equal(v.hits, 7);
        assert_int_equal(v.compile_ns, 123456789);
        assert_int_equal(v.key_len, sizeof key_text - 1);
        assert_memory_equal(v.key, key_text, v.key_len);
        assert_int_equal(v.device_len, 7);
        assert_memory_equal(v.device, "cpu-dev", 7);
        assert_int_equal(v.log_len, 2);
        struct cache_hash h = entry_xxh3_128(key_text, sizeof key_text - 1);
        assert_true(v.hash.lo == h.lo && v.hash.hi == h.hi);
        unsigned char out[4000];
        assert_int_equal(entry_unpack_binary(&v, out), CLSHIM_OK);
        assert_memory_equal(out, b.bin, 4000);
        free(b.rec);
    }
}

/* an empty binary and empty strings encode and decode */
static void empty_parts_round_trip(void **state)
{
    (void)state;
    struct entry_fields f = {.binding = entry_binding("", 0, "", 0)};
    size_t len = entry_encoded_size(&f);
    assert_int_equal(len, ENTRY_HEADER_SIZE);
    unsigned char rec[ENTRY_HEADER_SIZE];
    entry_write(rec, &f);
    struct entry_view v;
    assert_int_equal(entry_parse(rec, len, &v), CLSHIM_OK);
    unsigned char out[1];
    assert_int_equal(entry_unpack_binary(&v, out), CLSHIM_OK);
}

/* every single flipped bit of a record is detected */
static void every_bit_flip_is_detected(void **state)
{
    (void)state;
    struct built b;
    build(&b, 3, 1500);
    for (size_t i = 0; i < b.len * 8; i++) {
        b.rec[i / 8] ^= (unsigned char)(1u << (i % 8));
        struct entry_view v;
        int rc = entry_parse(b.rec, b.len, &v);
        assert_true(rc == CLSHIM_ECORRUPT || rc == CLSHIM_EUNSUPPORTED);
        b.rec[i / 8] ^= (unsigned char)(1u << (i % 8));
    }
    free(b.rec);
}

/* a record cut at any length, or with bytes appended, is refused */
static void truncated_or_extended_records_are_refused(void **state)
{
    (void)state;
    struct built b;
    build(&b, 3, 3000);
    struct entry_view v;
    for (size_t n = 0; n < b.len; n++) assert_int_equal(entry_parse(b.rec, n, &v), CLSHIM_ECORRUPT);
    unsigned char *longer = calloc(1, b.len + 1);
    memcpy(longer, b.rec, b.len);
    assert_int_equal(entry_parse(longer, b.len + 1, &v), CLSHIM_ECORRUPT);
    assert_int_equal(entry_parse(NULL, 0, &v), CLSHIM_ECORRUPT);
    free(longer);
    free(b.rec);
}

static void set32(unsigned char *p, uint32_t x) { for (int i = 0; i < 4; i++) p[i] = (unsigned char)(x >> (8 * i)); }
static void set64(unsigned char *p, uint64_t x) { for (int i = 0; i < 8; i++) p[i] = (unsigned char)(x >> (8 * i)); }

/* lengths that lie are refused even when the record checksum matches them */
static void lying_lengths_with_valid_checksum_are_refused(void **state)
{
    (void)state;
    struct built b;
    build(&b, 3, 3000);
    struct entry_view v;
    static const struct { size_t off; int width; uint64_t value; } lies[] = {
        {104, 4, 0xFFFFFFFFu},         /* key length past the end */
        {108, 4, 0x80000000u},         /* device name length */
        {112, 4, 1},                   /* log length off by one */
        {40, 8, UINT64_MAX},           /* payload size */
        {40, 8, 1},                    /* payload size too small */
        {32, 8, (uint64_t)1 << 40},    /* binary size beyond ENTRY_MAX_BINARY */
        {32, 8, 100000000},            /* more than the frame can hold */
        {10, 2, 0x8000},               /* unknown flag */
        {116, 4, 1},                   /* source shorter than its fixed part */
        {116, 4, 41},                  /* source length past the sizes */
    };
    for (size_t i = 0; i < sizeof lies / sizeof lies[0]; i++) {
        unsigned char *r = malloc(b.len);
        memcpy(r, b.rec, b.len);
        if (lies[i].width == 4) set32(r + lies[i].off, (uint32_t)lies[i].value);
        else if (lies[i].width == 8) set64(r + lies[i].off, lies[i].value);
        else { r[lies[i].off] = (unsigned char)lies[i].value; r[lies[i].off + 1] = (unsigned char)(lies[i].value >> 8); }
        entry_set_access(r, b.len, 1, 1); /* re-checksums the lie */
        assert_int_equal(entry_parse(r, b.len, &v), CLSHIM_ECORRUPT);
        free(r);
    }
    /* a wrong binding passes parse (it is of the binary) but not unpack */
    unsigned char *r = malloc(b.len);
    memcpy(r, b.rec, b.len);
    r[48] ^= 1;
    entry_set_access(r, b.len, 1, 1);
    assert_int_equal(entry_parse(r, b.len, &v), CLSHIM_OK);
    unsigned char out[3000];
    assert_int_equal(entry_unpack_binary(&v, out), CLSHIM_ECORRUPT);
    free(r);
    free(b.rec);
}

/* a newer format version is reported as unsupported, not corrupt */
static void newer_version_is_unsupported(void **state)
{
    (void)state;
    struct built b;
    build(&b, 0, 100);
    b.rec[8] = ENTRY_VERSION + 1;
    struct entry_view v;
    assert_int_equal(entry_parse(b.rec, b.len, &v), CLSHIM_EUNSUPPORTED);
    free(b.rec);
}

/* a binary moved under another key, carried with its sizes, flags and
 * binding and with the record checksum rewritten (every record
 * self-consistent), parses but fails the binding on unpack */
/* The whole-record pair the store and the remote tier share: what
 * entry_encode_record() writes, entry_open_record() opens for its own key
 * only, and a binary resealed under another key's record is refused. */
static void encoded_record_opens_for_its_key_only(void **state)
{
    (void)state;
    static const char other_key[] = "clshim-key 2\nkind=source\noptions=\ninput=5\nother";
    unsigned char bin[3000], other_bin[700];
    fill_binary(bin, sizeof bin, 11);
    fill_binary(other_bin, sizeof other_bin, 12);
    struct cache_hash h = entry_xxh3_128(key_text, sizeof key_text - 1);
    struct cache_hash oh = entry_xxh3_128(other_key, sizeof other_key - 1);
    struct store_record in = {bin, sizeof bin, "a log", 42, ENTRY_ORIGIN_SOURCE, "dev", NULL}, out;
    struct store_record other_in = {other_bin, sizeof other_bin, "", 7, ENTRY_ORIGIN_SOURCE, "dev", NULL};
    void *rec, *other_rec, *arena;
    size_t len, other_len;
    assert_int_equal(entry_encode_record(h, key_text, sizeof key_text - 1, &in, 3, 1000, &rec, &len), CLSHIM_OK);
    assert_int_equal(entry_encode_record(oh, other_key, sizeof other_key - 1, &other_in, 0, 1000, &other_rec,
                                         &other_len), CLSHIM_OK);
    assert_int_equal(entry_open_record(rec, len, h, key_text, sizeof key_text - 1, &out, &arena), CLSHIM_OK);
    assert_int_equal(out.binary_size, sizeof bin);
    assert_memory_equal(out.binary, bin, sizeof bin);
    assert_string_equal(out.build_log, "a log");
    assert_string_equal(out.device_name, "dev");
    assert_int_equal(out.compile_ns, 42);
    free(arena);
    /* Asked for under another key: refused, nothing to free. */
    assert_int_equal(entry_open_record(rec, len, oh, other_key, sizeof other_key - 1, &out, &arena),
                     CLSHIM_ECORRUPT);
    assert_null(arena);
    /* Our record resealed around the other key's binary (with its binding):
     * every checksum valid, the binding not ours. */
    struct entry_view mine, theirs;
    assert_int_equal(entry_parse(rec, len, &mine), CLSHIM_OK);
    assert_int_equal(entry_parse(other_rec, other_len, &theirs), CLSHIM_OK);
    struct entry_fields f = {
        .hash = mine.hash, .flags = theirs.flags, .origin = mine.origin, .binary_size = theirs.binary_size,
        .binding = theirs.binding, .key = mine.key, .key_len = mine.key_len, .payload = theirs.payload,
        .payload_size = theirs.payload_size,
    };
    size_t moved_len = entry_encoded_size(&f);
    unsigned char *moved = malloc(moved_len);
    entry_write(moved, &f);
    assert_int_equal(entry_open_record(moved, moved_len, h, key_text, sizeof key_text - 1, &out, &arena),
                     CLSHIM_ECORRUPT);
    assert_null(arena);
    free(moved);
    free(rec);
    free(other_rec);
}

/* a record's source (where a remote copy came from, who signed it) round
 * trips; a record without one opens with none; a source of an unknown kind,
 * resealed with a valid checksum, is refused */
static void source_round_trips(void **state)
{
    (void)state;
    unsigned char bin[900];
    fill_binary(bin, sizeof bin, 13);
    struct cache_hash h = entry_xxh3_128(key_text, sizeof key_text - 1);
    struct store_source src = {.kind = STORE_SOURCE_REMOTE, .flags = STORE_SOURCE_SIGNED};
    for (size_t i = 0; i < sizeof src.signer; i++) src.signer[i] = (unsigned char)(i * 7 + 1);
    memset(src.where, 'w', sizeof src.where - 1); /* the longest `where` */
    struct store_record in = {bin, sizeof bin, "log", 5, ENTRY_ORIGIN_SOURCE, "dev", &src}, out;
    void *rec, *arena;
    size_t len;
    assert_int_equal(entry_encode_record(h, key_text, sizeof key_text - 1, &in, 3, 1000, &rec, &len), CLSHIM_OK);
    assert_int_equal(entry_open_record(rec, len, h, key_text, sizeof key_text - 1, &out, &arena), CLSHIM_OK);
    assert_non_null(out.source);
    assert_int_equal(out.source->kind, STORE_SOURCE_REMOTE);
    assert_int_equal(out.source->flags, STORE_SOURCE_SIGNED);
    assert_memory_equal(out.source->signer, src.signer, sizeof src.signer);
    assert_string_equal(out.source->where, src.where);
    assert_memory_equal(out.binary, bin, sizeof bin);
    assert_string_equal(out.build_log, "log");
    free(arena);
    struct entry_view v;
    assert_int_equal(entry_parse(rec, len, &v), CLSHIM_OK);
    struct store_source got;
    assert_int_equal(entry_source(&v, &got), 1);
    assert_string_equal(got.where, src.where);
    /* an unknown kind, checksum resealed: refused */
    unsigned char *p = (unsigned char *)v.source;
    p[0] = 9;
    entry_set_access(rec, len, 1, 1);
    assert_int_equal(entry_parse(rec, len, &v), CLSHIM_ECORRUPT);
    free(rec);
    /* built here: no source */
    in.source = NULL;
    assert_int_equal(entry_encode_record(h, key_text, sizeof key_text - 1, &in, 3, 1000, &rec, &len), CLSHIM_OK);
    assert_int_equal(entry_open_record(rec, len, h, key_text, sizeof key_text - 1, &out, &arena), CLSHIM_OK);
    assert_null(out.source);
    assert_int_equal(entry_parse(rec, len, &v), CLSHIM_OK);
    assert_int_equal(entry_source(&v, &got), 0);
    free(arena);
    free(rec);
}

/* A seal round-trips on both kinds of source; malformed combinations
 * (a seal flag on a HERE source missing, a `where` on one, an unknown
 * flag), checksum resealed, are refused. */
static void sealed_sources_round_trip(void **state)
{
    (void)state;
    unsigned char bin[700];
    fill_binary(bin, sizeof bin, 17);
    struct cache_hash h = entry_xxh3_128(key_text, sizeof key_text - 1);
    for (int kind = 0; kind < 2; kind++) {
        struct store_source src = {.kind = kind ? STORE_SOURCE_REMOTE : STORE_SOURCE_HERE,
                                   .flags = STORE_SOURCE_SEALED | (kind ? STORE_SOURCE_SIGNED : 0)};
        for (size_t i = 0; i < sizeof src.seal; i++) src.seal[i] = (unsigned char)(i * 3 + 2);
        for (size_t i = 0; i < sizeof src.seal_signer; i++) src.seal_signer[i] = (unsigned char)(i + 9);
        if (kind) snprintf(src.where, sizeof src.where, "redis://x namespace y");
        struct store_record in = {bin, sizeof bin, "log", 5, ENTRY_ORIGIN_SOURCE, "dev", &src}, out;
        void *rec, *arena;
        size_t len;
        assert_int_equal(entry_encode_record(h, key_text, sizeof key_text - 1, &in, 3, 1000, &rec, &len), CLSHIM_OK);
        assert_int_equal(entry_open_record(rec, len, h, key_text, sizeof key_text - 1, &out, &arena), CLSHIM_OK);
        assert_non_null(out.source);
        assert_int_equal(out.source->kind, src.kind);
        assert_int_equal(out.source->flags, src.flags);
        assert_memory_equal(out.source->seal, src.seal, sizeof src.seal);
        assert_memory_equal(out.source->seal_signer, src.seal_signer, sizeof src.seal_signer);
        assert_string_equal(out.source->where, src.where);
        assert_memory_equal(out.binary, bin, sizeof bin);
        free(arena);
        struct entry_view v;
        assert_int_equal(entry_parse(rec, len, &v), CLSHIM_OK);
        unsigned char *p = (unsigned char *)v.source;
        unsigned char flags = p[4];
        p[4] = (unsigned char)(flags | 0x4); /* an unknown flag */
        entry_set_access(rec, len, 1, 1);
        assert_int_equal(entry_parse(rec, len, &v), CLSHIM_ECORRUPT);
        p[4] = (unsigned char)(flags & ~STORE_SOURCE_SEALED); /* the seal's bytes taken as `where` */
        entry_set_access(rec, len, 1, 1);
        assert_int_equal(entry_parse(rec, len, &v), kind ? CLSHIM_OK : CLSHIM_ECORRUPT);
        free(rec);
    }
}

static void binary_moved_under_another_key_is_refused(void **state)
{
    (void)state;
    static const char other_key[] = "clshim-key 2\nkind=source\noptions=\ninput=5\nother";
    unsigned char bin[500];
    fill_binary(bin, sizeof bin, 7);
    struct entry_fields f = {
        .hash = entry_xxh3_128(other_key, sizeof other_key - 1), .origin = ENTRY_ORIGIN_SOURCE,
        .binary_size = sizeof bin, .binding = entry_binding(other_key, sizeof other_key - 1, bin, sizeof bin),
        .key = other_key, .key_len = sizeof other_key - 1, .payload = bin, .payload_size = sizeof bin,
    };
    struct entry_view v;
    unsigned char out[500];
    /* As made for its own key, it verifies. */
    size_t len = entry_encoded_size(&f);
    unsigned char *rec = malloc(len);
    entry_write(rec, &f);
    assert_int_equal(entry_parse(rec, len, &v), CLSHIM_OK);
    assert_int_equal(entry_unpack_binary(&v, out), CLSHIM_OK);
    free(rec);
    /* Under key_text, with everything else moved along, it does not. */
    f.hash = entry_xxh3_128(key_text, sizeof key_text - 1);
    f.key = key_text, f.key_len = sizeof key_text - 1;
    len = entry_encoded_size(&f);
    rec = malloc(len);
    entry_write(rec, &f);
    assert_int_equal(entry_parse(rec, len, &v), CLSHIM_OK);
    assert_int_equal(entry_unpack_binary(&v, out), CLSHIM_ECORRUPT);
    free(rec);
}

/* a record of format version 1 (whose checksum covered the binary alone) is
 * never trusted: to the store it is absent, and the next build replaces it */
static void version_1_record_is_refused(void **state)
{
    (void)state;
    struct built b;
    build(&b, 0, 100);
    b.rec[8] = 1;
    entry_set_access(b.rec, b.len, 1, 1); /* a valid record checksum */
    struct entry_view v;
    assert_int_equal(entry_parse(b.rec, b.len, &v), CLSHIM_ENOTFOUND);
    b.rec[8] = 0;
    entry_set_access(b.rec, b.len, 1, 1);
    assert_int_equal(entry_parse(b.rec, b.len, &v), CLSHIM_ECORRUPT);
    free(b.rec);
}

/* random bytes, and records with random bytes written over them, never parse
 * and never read out of bounds (run under ASan) */
static void random_input_is_refused(void **state)
{
    (void)state;
    struct built b;
    build(&b, 3, 2000);
    rng = 12345;
    for (int iter = 0; iter < 20000; iter++) {
        size_t n = (size_t)(next_rand() % (b.len + 64));
        unsigned char *buf = malloc(n ? n : 1);
        if (iter % 2 && n >= ENTRY_HEADER_SIZE) {
            memcpy(buf, b.rec, n < b.len ? n : b.len);
            for (int k = 0; k < 3; k++) buf[next_rand() % n] = (unsigned char)next_rand();
        } else {
            for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)next_rand();
        }
        struct entry_view v;
        int rc = entry_parse(buf, n, &v);
        if (rc == CLSHIM_OK) { /* only an unchanged record may parse */
            assert_int_equal(n, b.len);
            assert_memory_equal(buf, b.rec, n);
        }
        free(buf);
    }
    free(b.rec);
}

/* incompressible data is stored raw, level 0 never compresses */
static void incompressible_binary_is_stored_raw(void **state)
{
    (void)state;
    unsigned char noise[4096];
    rng = 777;
    for (size_t i = 0; i < sizeof noise; i++) noise[i] = (unsigned char)next_rand();
    void *z;
    size_t zs;
    uint32_t flags;
    assert_int_equal(entry_compress(noise, sizeof noise, 19, &z, &zs, &flags), CLSHIM_OK);
    assert_null(z);
    assert_int_equal(flags, 0);
    unsigned char zeros[4096] = {0};
    assert_int_equal(entry_compress(zeros, sizeof zeros, 0, &z, &zs, &flags), CLSHIM_OK);
    assert_null(z);
    assert_int_equal(entry_compress(zeros, sizeof zeros, 3, &z, &zs, &flags), CLSHIM_OK);
    assert_non_null(z);
    assert_int_equal(flags, ENTRY_F_ZSTD);
    assert_true(zs < 100);
    free(z);
}

/* origin kinds have their documented names */
static void origin_names(void **state)
{
    (void)state;
    assert_string_equal(entry_origin_name(ENTRY_ORIGIN_SOURCE), "source");
    assert_string_equal(entry_origin_name(ENTRY_ORIGIN_IL), "il");
    assert_string_equal(entry_origin_name(ENTRY_ORIGIN_BINARY), "binary");
    assert_string_equal(entry_origin_name(ENTRY_ORIGIN_LINK), "link");
    assert_string_equal(entry_origin_name(ENTRY_ORIGIN_FUSION), "fusion");
    assert_string_equal(entry_origin_name(0), "unknown");
    assert_string_equal(entry_origin_name(99), "unknown");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(round_trip_keeps_every_field),
        cmocka_unit_test(empty_parts_round_trip),
        cmocka_unit_test(every_bit_flip_is_detected),
        cmocka_unit_test(truncated_or_extended_records_are_refused),
        cmocka_unit_test(lying_lengths_with_valid_checksum_are_refused),
        cmocka_unit_test(newer_version_is_unsupported),
        cmocka_unit_test(binary_moved_under_another_key_is_refused),
        cmocka_unit_test(encoded_record_opens_for_its_key_only),
        cmocka_unit_test(source_round_trips),
        cmocka_unit_test(sealed_sources_round_trip),
        cmocka_unit_test(version_1_record_is_refused),
        cmocka_unit_test(random_input_is_refused),
        cmocka_unit_test(incompressible_binary_is_stored_raw),
        cmocka_unit_test(origin_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
