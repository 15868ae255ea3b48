/* bench_misswhy — what explaining a miss adds to it (issue 45), beside the
 * compile it explains.
 *
 *   bench_misswhy [--quick] [--reps N] [--entries N]
 *
 * One process; a fresh cache in a private temp directory holding N entries
 * of other programs (default 10 000; --quick 1 000; 1-4 KiB binaries, filled
 * without fsync) and STORE_FAMILY_MAX entries of one program (256 KiB
 * binaries; hashcat-sized key material: 40 defines, 30 headers, PoCL's
 * device identity, a 20 KiB source) that differ from each other in one
 * define. First, with commits not synced (the fill's mode), the puts that
 * measure the family record's update side by side, taking turns at going
 * first:
 *   put        store_put() of a new variant of the program (its family
 *              record updated in the same transaction);
 *   put-plain  store_put() of a key of the same size without a family (a
 *              link's, say): the same put without the record's update.
 * Their paired difference is the record's cost; synced, both would add the
 * same fsync, whose run-to-run spread (milliseconds on a shared disk) would
 * hide it. Then, synced as a real cache is, each repetition runs in turn:
 *   record     what every miss of that program (a define of its own) pays:
 *              keydiff_miss_of() and keydiff_note_miss() (the last-miss file);
 *   line       what a miss pays more at CLSHIM_LOG=info: keydiff_nearest()
 *              and keydiff_summary() (the family record and its members' key
 *              material read, never a scan; the nearest diffed);
 *   store      the miss's store_put(), synced (for scale);
 *   compile    clBuildProgram of a small kernel on the first OpenCL device,
 *              with a define of its own so no driver cache answers: the
 *              cheapest compile a miss stands for.
 * Prints medians (min..max) and what explaining adds to a miss: record
 * and line plus the median paired difference of the puts, over the median
 * compile (and without the line: the default log level).
 * Rows go to BENCH_CSV. Exits 1 when an explanation is not the one
 * expected (the define -DVARIANT=).
 */
#include "bench/bench_util.h"

#include "cache/entry.h"
#include "cache/key.h"
#include "cache/keydiff.h"
#include "cache/store.h"
#include "common/error.h"

#define FAMILY_BINARY (256u << 10)

static const char identity[] =
    "platform.name=Portable Computing Language\nplatform.version=OpenCL 3.0 PoCL 3.1+debian  Linux, None+Asserts, "
    "RELOC, SPIR, LLVM 15.0.6, SLEEF, DISTRO, POCL_DEBUG\ndevice.name=pthread-skylake-avx512-Intel(R) Xeon(R) "
    "Processor\ndevice.version=OpenCL 3.0 PoCL HSTR: pthread-x86_64-pc-linux-gnu-skylake-avx512\n"
    "driver.version=3.1+debian\ndevice.vendor_id=0x8086\ndevice.opencl_c=OpenCL C 1.2 PoCL\ndevice.extensions="
    "cl_khr_byte_addressable_store cl_khr_global_int32_base_atomics cl_khr_global_int32_extended_atomics "
    "cl_khr_local_int32_base_atomics cl_khr_local_int32_extended_atomics cl_khr_3d_image_writes cl_khr_fp16 "
    "cl_khr_fp64 cl_khr_int64_base_atomics cl_khr_int64_extended_atomics cl_khr_subgroups cl_intel_unified_shared_memory "
    "cl_khr_spir cl_khr_il_program\ndevice.address_bits=64\ndevice.type=0x2\n";

/* The program's key with VARIANT=v, or (family 0) a key of the same size
 * without an input: no family. */
static void program_key(struct key_buf *k, const char *source, long v, int family)
{
    char options[4096];
    size_t n = 0;
    for (int i = 0; i < 40; i++) n += (size_t)snprintf(options + n, sizeof options - n, "-D HAS_FEATURE_%d=%d ", i, i & 1);
    snprintf(options + n, sizeof options - n, "-DVARIANT=%ld", v);
    key_begin(k, family ? KEY_SOURCE : KEY_LINK, options);
    key_add_text(k, "device", identity);
    for (int i = 0; i < 30; i++) {
        char name[128], hex[33];
        snprintf(name, sizeof name, "header /usr/share/hashcat/OpenCL/inc_part_%02d.h", i);
        snprintf(hex, sizeof hex, "%016llx%016llx", 0x9e3779b97f4a7c15ull * (unsigned long long)(i + 1), 42ull);
        key_add_text(k, name, hex);
        snprintf(name, sizeof name, "header-absent ./inc_part_%02d.h", i);
        key_add_text(k, name, "");
    }
    key_add_blob(k, family ? "input" : "derived", source, strlen(source));
}

static void put_or_die(store *s, const struct key_buf *k, const void *bin, size_t size)
{
    struct store_record r = {bin, size, "", 250000000, ENTRY_ORIGIN_SOURCE, "pthread-bench", NULL};
    int rc = store_put(s, key_hash(k->data, k->len), k->data, k->len, &r);
    if (rc) {
        fprintf(stderr, "bench_misswhy: store_put: %s\n", clshim_strerror(rc));
        exit(1);
    }
}

static store *open_or_die(const char *dir)
{
    struct store_options o = {.dir = dir, .compress_level = 3};
    store *s = NULL;
    int rc = store_open(&o, &s);
    if (rc == CLSHIM_OK) return s;
    fprintf(stderr, "bench_misswhy: cannot open %s: %s\n", dir, clshim_strerror(rc));
    exit(1);
}

/* The cache filled, its handle left open, not synced. */
static store *fill(const char *dir, const char *source, uint64_t entries, unsigned char *bin)
{
    store_set_nosync_for_test(1);
    store *s = open_or_die(dir);
    for (uint64_t i = 0; i < entries; i++) {
        char key[200];
        size_t kl = (size_t)snprintf(key, sizeof key, "clshim-key 2\nkind=source\noptions=-O2\ndevice=x\n"
                                                      "input=16 bytes\n%016llx\n", (unsigned long long)i);
        struct store_record r = {bin, 1024 + (size_t)(i % 3072), "", 1, ENTRY_ORIGIN_SOURCE, "other", NULL};
        if (store_put(s, key_hash(key, kl), key, kl, &r)) exit(1);
    }
    for (long v = 0; v < STORE_FAMILY_MAX; v++) {
        struct key_buf k;
        program_key(&k, source, v, 1);
        put_or_die(s, &k, bin, FAMILY_BINARY);
        key_free(&k);
    }
    store_set_nosync_for_test(0);
    return s;
}

/* The explanation of a miss, as pipeline_built() makes it: the record of
 * the last miss (every miss pays it), then the line (CLSHIM_LOG=info);
 * their times into rec_us and line_us. 0 when the line names the define,
 * as it must. */
static int explain(store *s, const struct key_buf *k, double *rec_us, double *line_us)
{
    double t0 = bu_now_ns();
    struct keydiff_miss m;
    if (keydiff_miss_of(key_hash(k->data, k->len), k->data, k->len, &m) != 0) return -1;
    keydiff_note_miss(s, &m);
    double t1 = bu_now_ns();
    struct keydiff_near near;
    if (keydiff_nearest(s, &m, &near) != 1) return -1;
    char what[1024];
    keydiff_summary(near.diff, what, sizeof what);
    keydiff_free(near.diff);
    *rec_us = (t1 - t0) / 1e3;
    *line_us = (bu_now_ns() - t1) / 1e3;
    return strncmp(what, "option -DVARIANT=", 17) == 0 ? 0 : -1;
}

static double compile_once(cl_context ctx, cl_device_id dev, long v)
{
    static const char *src = "__kernel void k(__global float *y) { size_t i = get_global_id(0); "
                             "y[i] = (float)(i % 7) * SCALE + 1.0f; }\n";
    char options[64];
    snprintf(options, sizeof options, "-DSCALE=%ld.0f", v);
    cl_int err;
    cl_program p = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
    BCHECK(err);
    double t0 = bu_now_ns();
    BCHECK(clBuildProgram(p, 1, &dev, options, NULL, NULL));
    double t = bu_now_ns() - t0;
    clReleaseProgram(p);
    return t;
}

int main(int argc, char **argv)
{
    int quick = 0, reps = -1;
    uint64_t entries = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--entries") && i + 1 < argc) entries = strtoull(argv[++i], NULL, 10);
        else {
            fprintf(stderr, "usage: bench_misswhy [--quick] [--reps N] [--entries N]\n");
            return 2;
        }
    }
    if (reps < 1 || reps > 1000) reps = quick ? 5 : 30;
    if (!entries) entries = quick ? 1000 : 10000;
    const char *tmp = getenv("TMPDIR"); /* bench/run.sh's private one */
    char root[4096], dir[4200], pocl[4200];
    snprintf(root, sizeof root, "%s/clshim-misswhy.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(root)) return 1;
    snprintf(dir, sizeof dir, "%s/cache", root);
    snprintf(pocl, sizeof pocl, "%s/pocl", root);
    mkdir(pocl, 0700);
    setenv("POCL_CACHE_DIR", pocl, 1); /* the driver's own cache: private, and defeated by the defines */

    static char source[20480];
    for (size_t i = 0; i + 1 < sizeof source; i++) source[i] = (char)(" kernelvoid(float*x)+=;\n"[(i * 7) % 24]);
    unsigned char *bin = malloc(FAMILY_BINARY);
    for (size_t i = 0; i < FAMILY_BINARY; i++) bin[i] = (unsigned char)((i * 2654435761u) >> 13);
    store *s = fill(dir, source, entries, bin);
    double *put = calloc((size_t)reps, sizeof *put), *plain = calloc((size_t)reps, sizeof *plain);
    double *diff = calloc((size_t)reps, sizeof *diff);
    for (int r = 0; r < reps; r++) {
        struct key_buf k, p;
        program_key(&k, source, 100000 + r, 1);
        program_key(&p, source, 100000 + r, 0);
        for (int turn = 0; turn < 2; turn++) { /* the two puts take turns at going first */
            int family = (turn + r) % 2 == 0;
            double t0 = bu_now_ns();
            put_or_die(s, family ? &k : &p, bin, FAMILY_BINARY);
            (family ? put : plain)[r] = (bu_now_ns() - t0) / 1e3;
        }
        diff[r] = put[r] - plain[r];
        key_free(&k);
        key_free(&p);
    }
    store_close(s);

    cl_device_id dev;
    cl_context ctx;
    cl_command_queue q;
    bu_open(&dev, &ctx, &q);
    compile_once(ctx, dev, 0); /* the driver's first compile loads its compiler */

    s = open_or_die(dir);
    double *rec = calloc((size_t)reps, sizeof *rec), *ex = calloc((size_t)reps, sizeof *ex);
    double *stored = calloc((size_t)reps, sizeof *stored);
    double *comp = calloc((size_t)reps, sizeof *comp);
    int bad = 0;
    for (int r = 0; r < reps; r++) {
        struct key_buf k;
        program_key(&k, source, 1000 + r, 1);
        bad |= explain(s, &k, &rec[r], &ex[r]) != 0;
        double t0 = bu_now_ns();
        put_or_die(s, &k, bin, FAMILY_BINARY);
        stored[r] = (bu_now_ns() - t0) / 1e3;
        comp[r] = compile_once(ctx, dev, r + 1) / 1e6;
        key_free(&k);
    }
    store_close(s);
    clReleaseCommandQueue(q);
    clReleaseContext(ctx);

    char cas[64];
    snprintf(cas, sizeof cas, "entries=%llu;family=%d", (unsigned long long)entries, STORE_FAMILY_MAX);
    size_t n = (size_t)reps;
    printf("bench_misswhy: %llu other entries, %d of the program, %d repetitions (medians, min..max)\n",
           (unsigned long long)entries, STORE_FAMILY_MAX, reps);
    printf("  put (no sync)        %8.1f us  (%.1f..%.1f)\n", bu_median(put, n), bu_min(put, n), bu_quantile(put, n, 1));
    printf("  put-plain (no sync)  %8.1f us  (%.1f..%.1f)\n", bu_median(plain, n), bu_min(plain, n),
           bu_quantile(plain, n, 1));
    printf("  family record, paired %7.1f us  (%.1f..%.1f)\n", bu_median(diff, n), bu_min(diff, n),
           bu_quantile(diff, n, 1));
    printf("  record               %8.1f us  (%.1f..%.1f)\n", bu_median(rec, n), bu_min(rec, n), bu_quantile(rec, n, 1));
    printf("  line                 %8.1f us  (%.1f..%.1f)\n", bu_median(ex, n), bu_min(ex, n), bu_quantile(ex, n, 1));
    printf("  store (synced)       %8.1f us  (%.1f..%.1f)\n", bu_median(stored, n), bu_min(stored, n),
           bu_quantile(stored, n, 1));
    printf("  compile              %8.1f ms  (%.1f..%.1f)\n", bu_median(comp, n), bu_min(comp, n), bu_quantile(comp, n, 1));
    double base = bu_median(rec, n) + (bu_median(diff, n) > 0 ? bu_median(diff, n) : 0);
    double added = base + bu_median(ex, n);
    printf("  explaining adds %.1f us to a miss: %.2f %% of the compile (%.1f us, %.3f %% without the line)\n", added,
           100 * added / 1e3 / bu_median(comp, n), base, 100 * base / 1e3 / bu_median(comp, n));
    bu_csv("misswhy", cas, "put-nosync", "latency", "us", put, n);
    bu_csv("misswhy", cas, "put-plain-nosync", "latency", "us", plain, n);
    bu_csv("misswhy", cas, "family-record", "latency", "us", diff, n);
    bu_csv("misswhy", cas, "record", "latency", "us", rec, n);
    bu_csv("misswhy", cas, "line", "latency", "us", ex, n);
    bu_csv("misswhy", cas, "store", "latency", "us", stored, n);
    bu_csv("misswhy", cas, "compile", "latency", "ms", comp, n);
    if (bad) fprintf(stderr, "bench_misswhy: an explanation did not name the define\n");
    free(rec), free(ex), free(put), free(plain), free(diff), free(stored), free(comp), free(bin);
    bu_rm_rf(root);
    return bad;
}
