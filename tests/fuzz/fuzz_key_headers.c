/* fuzz_key_headers — key material from application source: the #include
 * scanner of cache/key.h (key_add_headers) on hostile source and options.
 *
 * Input: the build options up to the first newline, then the source. The
 * target runs in a private directory holding a few headers (a.h includes
 * b.h; inc/c.h; a self-including loop.h) so includes resolve sometimes.
 * Properties: never reads outside the source; returns 0 or -1, and -1 comes
 * with a reason; the material is deterministic (a second run over the same
 * input gives the same bytes), so a key never depends on chance. */
#include <sys/stat.h>
#include <unistd.h>

#include "cache/key.h"
#include "tests/fuzz/fuzz.h"

static void put(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f) abort();
    fputs(text, f);
    fclose(f);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    char dir[] = "/tmp/clshim-fuzz-key.XXXXXX";
    if (!mkdtemp(dir) || chdir(dir) != 0) abort();
    mkdir("inc", 0700);
    put("a.h", "#include \"b.h\"\n#define A 1\n");
    put("b.h", "#define B 2\n");
    put("inc/c.h", "#include <a.h>\n#include \"../b.h\"\n");
    put("loop.h", "#include \"loop.h\"\n");
    return 0;
}

static int material(const char *src, size_t len, const char *opts, struct key_buf *k, char *why, size_t wl)
{
    key_begin(k, KEY_SOURCE, opts);
    int rc = key_add_headers(k, src, len, opts, why, wl);
    key_add_blob(k, "input", src, len);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nl = memchr(data, '\n', size);
    size_t olen = nl ? (size_t)(nl - data) : 0;
    char *opts = fuzz_strdup(data, olen);
    size_t slen = nl ? size - olen - 1 : size;
    char *src = malloc(slen ? slen : 1); /* not NUL-terminated, as the app may pass it */
    if (!src) abort();
    memcpy(src, nl ? nl + 1 : data, slen);

    struct key_buf k1, k2;
    char why1[256] = "", why2[256] = "";
    int rc1 = material(src, slen, opts, &k1, why1, sizeof why1);
    int rc2 = material(src, slen, opts, &k2, why2, sizeof why2);
    FUZZ_ASSERT(rc1 == 0 || rc1 == -1);
    FUZZ_ASSERT(rc1 == rc2);
    if (rc1 != 0) FUZZ_ASSERT(why1[0] != 0 && strcmp(why1, why2) == 0);
    FUZZ_ASSERT(!k1.oom && !k2.oom);
    FUZZ_ASSERT(k1.len == k2.len && memcmp(k1.data, k2.data, k1.len) == 0);
    struct cache_hash h1 = key_hash(k1.data, k1.len), h2 = key_hash(k2.data, k2.len);
    FUZZ_ASSERT(h1.lo == h2.lo && h1.hi == h2.hi);
    char *norm = key_normalize_options(opts);
    FUZZ_ASSERT(norm != NULL);
    FUZZ_ASSERT(strlen(norm) <= strlen(opts));
    FUZZ_ASSERT(!strstr(norm, "  ") && (norm[0] != ' ') && (!*norm || norm[strlen(norm) - 1] != ' '));
    free(norm);
    key_free(&k1);
    key_free(&k2);
    free(opts);
    free(src);
    return 0;
}
