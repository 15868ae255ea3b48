/* bench_seal — what sealing costs (CLSHIM_SIGN_KEY, CLSHIM_TRUST; issue 46),
 * per stored entry and per hit, beside the store's own cost of each.
 *
 *   bench_seal [--reps N]
 *
 * One process, a fresh cache in a private temp directory, binaries of
 * 64 KiB, 1 MiB and 6 MiB (hashcat's largest is 5.8 MB) of compressible
 * bytes. For each size, taking turns:
 *   put         store_put() of a new key, unsealed (not synced: the fill's
 *               mode, so the sync's spread does not hide the difference);
 *   put-sealed  the same into a store with a seal key: the seal added;
 *   get         store_get() of an entry, no trust set;
 *   get-trust   the same with CLSHIM_TRUST's check: the seal verified;
 * and alone: seal and check, the two sign.h calls by themselves.
 * Prints medians (min..max) in microseconds and the seal's share of a put
 * and of a hit.
 */
#include "bench/bench_util.h"

#include "cache/key.h"
#include "cache/sign.h"
#include "cache/store.h"
#include "common/error.h"

static void fill(unsigned char *p, size_t n, unsigned seed)
{
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        p[i] = (unsigned char)((x >> 16) & 0x3f); /* about 2x compressible, as PoCL binaries are */
    }
}

static store *open_store(const char *dir, const unsigned char *seal_key, const sign_trust *trust)
{
    struct store_options o = {.dir = dir, .compress_level = 3, .seal_key = seal_key, .trust = trust};
    store *s;
    if (store_open(&o, &s) != CLSHIM_OK) {
        fprintf(stderr, "bench_seal: cannot open a store in %s\n", dir);
        exit(2);
    }
    return s;
}

static void print_row(const char *what, size_t size, double *v, int n)
{
    printf("  %-11s %6zu KiB %10.1f (%.1f..%.1f)\n", what, size >> 10, bu_median(v, (size_t)n) / 1e3,
           bu_min(v, (size_t)n) / 1e3, bu_quantile(v, (size_t)n, 1.0) / 1e3);
}

int main(int argc, char **argv)
{
    int reps = 21;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else return fprintf(stderr, "usage: bench_seal [--reps N]\n"), 2;
    }
    if (reps < 3) reps = 3;
    char dir[] = "/tmp/bench-seal-XXXXXX";
    if (!mkdtemp(dir)) return 2;
    char plain_dir[256], sealed_dir[256], key_path[256], pub_path[300], err[512];
    snprintf(plain_dir, sizeof plain_dir, "%s/plain", dir);
    snprintf(sealed_dir, sizeof sealed_dir, "%s/sealed", dir);
    snprintf(key_path, sizeof key_path, "%s/key", dir);
    snprintf(pub_path, sizeof pub_path, "%s/key.pub", dir);
    unsigned char sk[SIGN_SECRET_BYTES];
    sign_trust *trust;
    if (sign_keygen(key_path, err, sizeof err) || sign_read_secret(key_path, sk, err, sizeof err) ||
        sign_trust_load(pub_path, &trust, err, sizeof err))
        return fprintf(stderr, "bench_seal: %s\n", err), 2;
    store_set_nosync_for_test(1);
    store *plain = open_store(plain_dir, NULL, NULL), *sealed = open_store(sealed_dir, sk, NULL);
    store *trusting = NULL;
    static const size_t sizes[] = {64u << 10, 1u << 20, 6u << 20};
    printf("bench_seal: median (min..max) microseconds over %d reps, store_put unsynced, zstd level 3\n", reps);
    printf("  %-11s %10s %10s\n", "what", "binary", "us");
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        size_t size = sizes[si];
        unsigned char *bin = malloc(size);
        double *put = calloc((size_t)reps, sizeof *put), *put_s = calloc((size_t)reps, sizeof *put_s);
        double *get = calloc((size_t)reps, sizeof *get), *get_t = calloc((size_t)reps, sizeof *get_t);
        double *seal = calloc((size_t)reps, sizeof *seal), *check = calloc((size_t)reps, sizeof *check);
        if (!bin || !put || !put_s || !get || !get_t || !seal || !check) return 2;
        fill(bin, size, (unsigned)si);
        for (int r = 0; r < reps; r++) {
            char key[64];
            int n = snprintf(key, sizeof key, "bench key %zu %d", si, r);
            struct cache_hash h = key_hash(key, (size_t)n);
            struct store_record rec = {bin, size, "", 1000000, 1, "bench", NULL};
            double t0, t1;
            for (int turn = 0; turn < 2; turn++) { /* who goes first alternates */
                int which = (turn + r) % 2;
                t0 = bu_now_ns();
                if (store_put(which ? sealed : plain, h, key, (size_t)n, &rec) != CLSHIM_OK) return 3;
                t1 = bu_now_ns();
                (which ? put_s : put)[r] = t1 - t0;
            }
            if (!trusting) { /* a second handle on the sealed store that checks seals */
                trusting = open_store(sealed_dir, NULL, trust);
            }
            for (int turn = 0; turn < 2; turn++) {
                int which = (turn + r) % 2;
                struct store_record out;
                void *arena;
                t0 = bu_now_ns();
                int rc = store_get(which ? trusting : sealed, h, key, (size_t)n, &out, &arena);
                t1 = bu_now_ns();
                if (rc != CLSHIM_OK) return fprintf(stderr, "bench_seal: get: %s\n", clshim_strerror(rc)), 3;
                store_record_free(arena);
                (which ? get_t : get)[r] = t1 - t0;
            }
            struct store_source src = {.kind = STORE_SOURCE_HERE};
            t0 = bu_now_ns();
            sign_seal(key, (size_t)n, &rec, sk, &src);
            t1 = bu_now_ns();
            seal[r] = t1 - t0;
            rec.source = &src;
            t0 = bu_now_ns();
            const char *why = sign_check_seal(key, (size_t)n, &rec, trust);
            t1 = bu_now_ns();
            if (why) return fprintf(stderr, "bench_seal: %s\n", why), 3;
            check[r] = t1 - t0;
        }
        print_row("put", size, put, reps);
        print_row("put-sealed", size, put_s, reps);
        print_row("get", size, get, reps);
        print_row("get-trust", size, get_t, reps);
        print_row("seal", size, seal, reps);
        print_row("check", size, check, reps);
        double mp = bu_median(put, (size_t)reps), mps = bu_median(put_s, (size_t)reps);
        double mg = bu_median(get, (size_t)reps), mgt = bu_median(get_t, (size_t)reps);
        printf("  %zu KiB: sealing adds %.0f us to a put (%.2fx), trust adds %.0f us to a hit (%.2fx)\n",
               size >> 10, (mps - mp) / 1e3, mps / mp, (mgt - mg) / 1e3, mgt / mg);
        free(bin), free(put), free(put_s), free(get), free(get_t), free(seal), free(check);
    }
    store_close(trusting);
    store_close(sealed);
    store_close(plain);
    sign_trust_free(trust);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : 1;
}
