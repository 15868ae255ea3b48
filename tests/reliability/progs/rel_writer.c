/* rel_writer — a store client for the crash tests: it hammers one cache with
 * stores, lookups, deletes, evictions and compactions until it is killed,
 * and (with --check) verifies what a killed writer left behind.
 *
 *   rel_writer run DIR SEED [MAX_SIZE]   loop forever (SIGKILL it)
 *   rel_writer check DIR                 every key absent or exact; exit 0/1
 *
 * Every key i (0..NKEYS-1) always maps to the same binary (size and bytes a
 * function of i), so `check` can tell a good entry from a damaged one: an
 * entry that is present must return exactly the bytes of its key, and every
 * store invariant (store_check_invariants) must hold. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/entry.h"
#include "cache/store.h"
#include "common/error.h"

#define NKEYS 400
#define MAX_BIN (48 * 1024)

static size_t key_of(int id, char buf[96])
{
    return (size_t)snprintf(buf, 96, "rel-writer-key 1\nkind=source\ninput=%05d\n", id);
}

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
}

/* The binary of key id: half compressible text, half noise. */
static size_t binary_of(int id, unsigned char *out)
{
    size_t n = 512 + (size_t)(mix((uint64_t)id + 1) % (MAX_BIN - 512));
    uint64_t s = mix((uint64_t)id * 7919 + 17);
    for (size_t i = 0; i < n; i++) {
        if ((i / 256) % 2) {
            s = mix(s + i);
            out[i] = (unsigned char)s;
        } else {
            out[i] = (unsigned char)("kernel void k() {}\n"[i % 19]);
        }
    }
    return n;
}

static struct cache_hash hash_of(int id)
{
    char k[96];
    size_t n = key_of(id, k);
    return entry_xxh3_128(k, n);
}

static int open_cache(const char *dir, uint64_t max_size, store **s)
{
    struct store_options o = {.dir = dir, .max_size = max_size, .compress_level = 3};
    return store_open(&o, s);
}

static int run(const char *dir, uint64_t seed, uint64_t max_size)
{
    static unsigned char bin[MAX_BIN];
    store *s = NULL;
    int rc = open_cache(dir, max_size, &s);
    if (rc != CLSHIM_OK) {
        fprintf(stderr, "rel_writer: open: %s\n", clshim_strerror(rc));
        return 1;
    }
    printf("ready\n");
    fflush(stdout);
    for (uint64_t it = 0;; it++) {
        uint64_t r = mix(seed * 1000003 + it);
        int id = (int)(r % NKEYS);
        char k[96];
        size_t kl = key_of(id, k);
        unsigned op = (unsigned)((r >> 20) % 100);
        if (op < 60) {
            size_t n = binary_of(id, bin);
            struct store_record rec = {bin, n, "build log of a test key", 1000000, 1, "rel-device", NULL};
            rc = store_put(s, hash_of(id), k, kl, &rec);
            if (rc != CLSHIM_OK && rc != CLSHIM_ETOOBIG) fprintf(stderr, "rel_writer: put: %s\n", clshim_strerror(rc));
        } else if (op < 85) {
            struct store_record out;
            void *arena = NULL;
            rc = store_get(s, hash_of(id), k, kl, &out, &arena);
            if (rc == CLSHIM_OK) {
                size_t n = binary_of(id, bin);
                if (out.binary_size != n || memcmp(out.binary, bin, n)) {
                    fprintf(stderr, "rel_writer: key %d served a wrong binary\n", id);
                    abort();
                }
                store_record_free(arena);
            } else if (rc != CLSHIM_ENOTFOUND) {
                fprintf(stderr, "rel_writer: get %d: %s\n", id, clshim_strerror(rc));
            }
        } else if (op < 90) {
            (void)store_delete(s, hash_of(id));
        } else if (op < 95) {
            uint64_t evicted = 0;
            (void)store_evict(s, 0, max_size ? max_size / 2 : 1 << 20, &evicted);
        } else if (op < 97) {
            (void)store_flush(s);
            struct store_stats d = {.hits = 1, .misses = 1, .stores = 1};
            (void)store_stats_add(s, &d);
        } else {
            rc = store_compact(s);
            if (rc != CLSHIM_OK && rc != CLSHIM_EBUSY) fprintf(stderr, "rel_writer: compact: %s\n", clshim_strerror(rc));
        }
    }
}

static int check(const char *dir)
{
    static unsigned char bin[MAX_BIN];
    store *s = NULL;
    int rc = open_cache(dir, 0, &s);
    if (rc != CLSHIM_OK) {
        fprintf(stderr, "rel_writer check: open: %s\n", clshim_strerror(rc));
        return 1;
    }
    int present = 0, bad = 0;
    for (int id = 0; id < NKEYS; id++) {
        char k[96];
        size_t kl = key_of(id, k);
        struct store_record out;
        void *arena = NULL;
        rc = store_get(s, hash_of(id), k, kl, &out, &arena);
        if (rc == CLSHIM_ENOTFOUND) continue;
        if (rc != CLSHIM_OK) {
            fprintf(stderr, "rel_writer check: key %d: %s\n", id, clshim_strerror(rc));
            bad++;
            continue;
        }
        size_t n = binary_of(id, bin);
        if (out.binary_size != n || memcmp(out.binary, bin, n) || strcmp(out.build_log, "build log of a test key")) {
            fprintf(stderr, "rel_writer check: key %d: wrong content\n", id);
            bad++;
        }
        present++;
        store_record_free(arena);
    }
    int inv = store_check_invariants(s);
    struct store_stats st;
    store_stats_get(s, &st);
    store_close(s);
    printf("present %d bad %d invariants %s entries %" PRIu64 " bytes %" PRIu64 "\n", present, bad,
           inv ? "ok" : "BROKEN", st.entries, st.stored_bytes);
    return bad || !inv || st.entries != (uint64_t)present;
}

int main(int argc, char **argv)
{
    if (argc >= 4 && !strcmp(argv[1], "run"))
        return run(argv[2], strtoull(argv[3], NULL, 10), argc > 4 ? strtoull(argv[4], NULL, 10) : 4u << 20);
    if (argc == 3 && !strcmp(argv[1], "check")) return check(argv[2]);
    fprintf(stderr, "usage: rel_writer run DIR SEED [MAX_SIZE] | check DIR\n");
    return 2;
}
