/* bench_store — cost of the persistent store with many entries.
 *
 *   bench_store [--quick] [--entries N] [--dir DIR]
 *
 * Fills a fresh cache with N entries (default 100 000; --quick 10 000) and
 * measures: lookup latency (p50/p99, target p99 < 50 us), store latency
 * with the normal synced commit, store latency with a size limit that
 * forces eviction (target p99 < 2 ms), and lookup throughput of 8 processes
 * against 1 on the same cache.
 *
 * Binaries are 1-4 KiB, not the 20-200 KiB a real PoCL program is (100 000
 * of those would be gigabytes); lookup cost is dominated by the B-tree and
 * the fixed per-call work, and decompression scales linearly at about
 * 1 GB/s (docs/cache.md). The fill uses store_set_nosync_for_test (no fsync
 * per commit) so it takes seconds, not minutes; every measured store runs
 * with the normal fsync per commit. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench_util.h"
#include "cache/entry.h"
#include "cache/store.h"
#include "common/error.h"

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

struct lat {
    double p50, p99, max, mean;
};

static struct lat summarize(double *v, size_t n)
{
    struct lat l = {0};
    if (!n) return l;
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += v[i];
    qsort(v, n, sizeof *v, cmp_double);
    l.p50 = v[n / 2], l.p99 = v[(size_t)((double)n * 0.99)], l.max = v[n - 1], l.mean = sum / (double)n;
    return l;
}

static size_t make_key(uint64_t id, char *buf)
{
    return (size_t)snprintf(buf, 160,
                            "clshim-key 1\nkind=source\noptions=-cl-std=CL1.2 -O2\n"
                            "device=pthread-bench\ndriver=PoCL 3.1\ninput=%016llx\n",
                            (unsigned long long)id);
}

/* 1-4 KiB, half of it repetitive like code, different per id. */
static size_t make_binary(uint64_t id, unsigned char *buf)
{
    uint64_t x = id * 0x9E3779B97F4A7C15ull + 1;
    size_t n = 1024 + (size_t)(x % 3072);
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        buf[i] = (i & 16) ? (unsigned char)(i * 13) : (unsigned char)x;
    }
    return n;
}

static int put_id(store *s, uint64_t id)
{
    char key[160];
    unsigned char bin[4096];
    size_t kl = make_key(id, key), bl = make_binary(id, bin);
    struct store_record r = {bin, bl, "", 250000000, ENTRY_ORIGIN_SOURCE, "pthread-bench", NULL};
    return store_put(s, entry_xxh3_128(key, kl), key, kl, &r);
}

static int get_id(store *s, uint64_t id)
{
    char key[160];
    size_t kl = make_key(id, key);
    struct store_record r;
    void *arena;
    int rc = store_get(s, entry_xxh3_128(key, kl), key, kl, &r, &arena);
    store_record_free(arena);
    return rc;
}

static uint64_t rng_next(uint64_t *x)
{
    *x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
    return *x;
}

static store *open_store(const char *dir, uint64_t max_size)
{
    struct store_options o = {.dir = dir, .max_size = max_size, .compress_level = 3};
    store *s;
    int rc = store_open(&o, &s);
    if (rc) {
        fprintf(stderr, "bench_store: cannot open %s: %s\n", dir, clshim_strerror(rc));
        exit(1);
    }
    return s;
}

/* Gets of random present ids for `secs` seconds; returns the count, and
 * counts failures in *errors. */
static uint64_t get_loop(const char *dir, uint64_t entries, double secs, uint64_t seed, uint64_t *errors)
{
    store *s = open_store(dir, 0);
    uint64_t n = 0, x = seed | 1;
    double end = now_us() + secs * 1e6;
    while (now_us() < end) {
        for (int i = 0; i < 64; i++, n++)
            if (get_id(s, rng_next(&x) % entries) != CLSHIM_OK) ++*errors;
    }
    store_close(s);
    return n;
}

/* `procs` processes doing gets at once; returns total gets per second. */
static double concurrent_gets(const char *dir, uint64_t entries, int procs, double secs, uint64_t *errors)
{
    int fds[64][2];
    pid_t pids[64];
    for (int p = 0; p < procs; p++) {
        if (pipe(fds[p]) != 0) exit(1);
        pids[p] = fork();
        if (pids[p] == 0) {
            uint64_t res[2] = {0, 0};
            res[0] = get_loop(dir, entries, secs, 1000 + (uint64_t)p, &res[1]);
            if (write(fds[p][1], res, sizeof res) != sizeof res) _exit(1);
            _exit(0);
        }
        close(fds[p][1]);
    }
    uint64_t total = 0;
    for (int p = 0; p < procs; p++) {
        uint64_t res[2] = {0, 1};
        if (read(fds[p][0], res, sizeof res) != sizeof res) ++*errors;
        close(fds[p][0]);
        int status;
        waitpid(pids[p], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++*errors;
        total += res[0];
        *errors += res[1];
    }
    return (double)total / secs;
}

int main(int argc, char **argv)
{
    uint64_t entries = 100000;
    int quick = 0;
    const char *dir_arg = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1, entries = 10000;
        else if (!strcmp(argv[i], "--entries") && i + 1 < argc) entries = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--dir") && i + 1 < argc) dir_arg = argv[++i];
        else {
            fprintf(stderr, "usage: bench_store [--quick] [--entries N] [--dir DIR]\n");
            return 2;
        }
    }
    if (entries < 1000) entries = 1000;
    char root[4096], dir[4200];
    const char *tmp = getenv("TMPDIR");
    snprintf(root, sizeof root, "%s/bench_store.XXXXXX", dir_arg ? dir_arg : tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(root)) {
        perror("bench_store: mkdtemp");
        return 1;
    }
    snprintf(dir, sizeof dir, "%s/cache", root);
    size_t nget = quick ? 50000 : 200000, nput = quick ? 500 : 2000;
    double secs = quick ? 1.0 : 2.0;
    uint64_t errors = 0;

    /* 1. Fill (no fsync per commit). */
    store_set_nosync_for_test(1);
    store *s = open_store(dir, 0);
    double t0 = now_us();
    for (uint64_t id = 0; id < entries; id++)
        if (put_id(s, id) != CLSHIM_OK) errors++;
    double fill_s = (now_us() - t0) / 1e6;
    store_close(s);
    store_set_nosync_for_test(0);

    /* 2. Lookups of random present keys. */
    s = open_store(dir, 0);
    double *lat = malloc(sizeof *lat * (nget > nput * 2 ? nget : nput * 2));
    uint64_t x = 42;
    for (size_t i = 0; i < nget; i++) {
        uint64_t id = rng_next(&x) % entries;
        double a = now_us();
        if (get_id(s, id) != CLSHIM_OK) errors++;
        lat[i] = now_us() - a;
    }
    struct lat get_l = summarize(lat, nget);
    char cas[64];
    snprintf(cas, sizeof cas, "entries=%llu", (unsigned long long)entries);
    bu_csv("store", cas, "lookup", "latency", "us", lat, nget);

    /* 3. Stores without a size limit: new keys, synced commits. */
    for (size_t i = 0; i < nput; i++) {
        double a = now_us();
        if (put_id(s, entries + i) != CLSHIM_OK) errors++;
        lat[i] = now_us() - a;
    }
    struct lat put_l = summarize(lat, nput);
    bu_csv("store", cas, "store", "latency", "us", lat, nput);
    struct store_stats st;
    store_stats_get(s, &st);
    uint64_t total_bytes = st.stored_bytes;
    store_close(s);

    /* 4. Stores under a size limit: the first trims the full cache to the
     * low-water mark in one transaction; then every ~10 % of the limit one
     * store evicts a batch. The limit is set so a few batches fall inside
     * the measured stores. */
    uint64_t limit = total_bytes / 50;
    if (limit < (1u << 20)) limit = 1u << 20;
    s = open_store(dir, limit);
    double a = now_us();
    if (put_id(s, entries + nput) != CLSHIM_OK) errors++;
    double trim_ms = (now_us() - a) / 1e3;
    store_stats_get(s, &st);
    uint64_t trimmed = st.evictions_size;
    size_t evicting_puts = 0;
    uint64_t ev_before = st.evictions_size;
    double worst_batch_ms = 0;
    for (size_t i = 0; i < nput * 2; i++) {
        a = now_us();
        if (put_id(s, entries + nput + 1 + i) != CLSHIM_OK) errors++;
        lat[i] = now_us() - a;
        store_stats_get(s, &st);
        if (st.evictions_size != ev_before) {
            evicting_puts++;
            if (lat[i] / 1e3 > worst_batch_ms) worst_batch_ms = lat[i] / 1e3;
            ev_before = st.evictions_size;
        }
        if (st.stored_bytes > limit) errors++;
    }
    uint64_t batch_evicted = st.evictions_size - trimmed;
    struct lat evict_l = summarize(lat, nput * 2);
    bu_csv("store", cas, "store-evicting", "latency", "us", lat, nput * 2);
    uint64_t left = st.entries;
    if (!store_check_invariants(s)) errors++;
    store_close(s);

    /* 5. Gets from 1 and from 8 processes at once (on the entries left). */
    /* Refill a known range so every process hits. */
    store_set_nosync_for_test(1);
    s = open_store(dir, 0);
    uint64_t conc_entries = entries / 10;
    for (uint64_t id = 0; id < conc_entries; id++)
        if (put_id(s, id) != CLSHIM_OK) errors++;
    store_close(s);
    store_set_nosync_for_test(0);
    uint64_t conc_errors = 0;
    double one = concurrent_gets(dir, conc_entries, 1, secs, &conc_errors);
    double eight = concurrent_gets(dir, conc_entries, 8, secs, &conc_errors);
    errors += conc_errors;
    bu_csv_value("store", cas, "lookups-1-process", "throughput", "1/s", one, one, one, 1);
    bu_csv_value("store", cas, "lookups-8-processes", "throughput", "1/s", eight, eight, eight, 1);

    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    printf("bench_store: %llu entries of 1-4 KiB binaries (zstd level 3), %ld cores, cache %s\n",
           (unsigned long long)entries, cores, dir);
    printf("  fill (no fsync per commit)   %8.1f s  %10.0f stores/s\n", fill_s, (double)entries / fill_s);
    printf("  %-34s %9s %9s %9s %9s\n", "operation", "p50", "p99", "max", "target");
    printf("  %-34s %7.1f us %7.1f us %7.1f us %9s  %s\n", "lookup (hit)", get_l.p50, get_l.p99, get_l.max,
           "p99<50us", get_l.p99 < 50 ? "ok" : "MISSED");
    printf("  %-34s %7.0f us %7.0f us %7.0f us\n", "store, no limit (fsync)", put_l.p50, put_l.p99, put_l.max);
    printf("  %-34s %7.0f us %7.0f us %7.0f us %9s  %s\n", "store with eviction (fsync)", evict_l.p50,
           evict_l.p99, evict_l.max, "p99<2ms", evict_l.p99 < 2000 ? "ok" : "MISSED");
    printf("  size limit %.1f MiB: first store trimmed %llu entries in %.1f ms; then %zu of %zu stores\n"
           "  evicted a batch (%llu entries in all, slowest %.1f ms); %llu entries left\n",
           (double)limit / 1048576, (unsigned long long)trimmed, trim_ms, evicting_puts, nput * 2,
           (unsigned long long)batch_evicted, worst_batch_ms, (unsigned long long)left);
    printf("  lookups/s, 1 process         %10.0f\n", one);
    printf("  lookups/s, 8 processes       %10.0f  (x%.2f; %llu entries shared)\n", eight, eight / one,
           (unsigned long long)conc_entries);
    printf("  errors                       %10llu\n", (unsigned long long)errors);
    free(lat);
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "bench_store: could not remove %s\n", root);
    return errors ? 1 : 0;
}
