/* fuzz_key_headers — key material from application source: the #include
 * scanner of cache/key.h (key_add_headers) on hostile source and options.
 *
 * Input: the build options up to the first newline, then the source. The
 * target runs in a private directory holding a few headers (a.h includes
 * b.h; inc/c.h; a self-including loop.h) so includes resolve sometimes.
 * Properties: never reads outside the source; returns 0 or -1, and -1 comes
 * with a reason; the material is deterministic (a second run over the same
 * input gives the same bytes), so a key never depends on chance. And the
 * scanner is exact or hands off: when it returns 0, every file clang's
 * preprocessor opens for the same source and options (cache/preproc.h,
 * clang -M) is among the scanner's headers (compared by real path; the
 * files clang opens for an empty program are its own and left out). */
#include <sys/stat.h>
#include <unistd.h>

#include <limits.h>

#include "cache/key.h"
#include "cache/preproc.h"
#include "tests/fuzz/fuzz.h"

static const char identity[] = "platform.name=fuzz\ndevice.version=OpenCL 1.2\n"
                               "device.opencl_c=OpenCL C 1.2\ndevice.extensions=cl_khr_fp64\n";
static char **builtin; /* what clang opens for an empty program */
static size_t nbuiltin;

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
    put("guarded.h", "#ifndef G\n#define G\n#include \"b.h\"\n#endif\n");
    struct key_source empty = {"", 0, "", NULL, 0, NULL};
    char why[512];
    if (preproc_files(&empty, identity, &builtin, &nbuiltin, why, sizeof why) != 0) abort();
    for (size_t i = 0; i < nbuiltin; i++) {
        char *real = realpath(builtin[i], NULL);
        if (real) {
            free(builtin[i]);
            builtin[i] = real;
        }
    }
    return 0;
}

/* Is the file clang opened among the scanner's "header <path>=" fields? */
static int scanner_has(const struct key_buf *k, const char *file)
{
    char *want = realpath(file, NULL);
    if (!want) return 0;
    int found = 0;
    for (size_t i = 0; i < nbuiltin && !found; i++) found = !strcmp(builtin[i], want);
    for (const char *p = k->data, *end = k->data + k->len; !found && p < end;) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol) break;
        const char *eq = eol;
        while (eq > p && *eq != '=') eq--;
        if (eol - p > 7 && !memcmp(p, "header ", 7) && eq > p + 7 && (size_t)(eq - p - 7) < PATH_MAX) {
            char path[PATH_MAX];
            memcpy(path, p + 7, (size_t)(eq - p - 7));
            path[eq - p - 7] = 0;
            char *real = realpath(path, NULL);
            found = real && !strcmp(real, want);
            free(real);
        }
        p = eol + 1;
    }
    free(want);
    return found;
}

/* When the scanner says it is exact, clang must open nothing it missed. */
static void check_against_clang(const struct key_buf *k, const char *src, size_t len, const char *opts)
{
    struct key_source in = {src, len, opts, NULL, 0, NULL};
    char **files, why[512];
    size_t n;
    if (preproc_files(&in, identity, &files, &n, why, sizeof why) != 0) return; /* #error, bad syntax */
    for (size_t i = 0; i < n; i++) {
        if (!scanner_has(k, files[i])) {
            fprintf(stderr, "the scanner missed %s, which clang opens\n", files[i]);
            FUZZ_ASSERT(!"scanner is exact or hands off");
        }
    }
    preproc_free_files(files, n);
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
    FUZZ_ASSERT(rc1 == 0 || rc1 == -1 || rc1 == KEY_UNCACHEABLE || rc1 == KEY_TIME_MACROS);
    FUZZ_ASSERT(rc1 == rc2);
    if (rc1 != 0) FUZZ_ASSERT(why1[0] != 0 && strcmp(why1, why2) == 0);
    FUZZ_ASSERT(!k1.oom && !k2.oom);
    FUZZ_ASSERT(k1.len == k2.len && memcmp(k1.data, k2.data, k1.len) == 0);
    struct cache_hash h1 = key_hash(k1.data, k1.len), h2 = key_hash(k2.data, k2.len);
    FUZZ_ASSERT(h1.lo == h2.lo && h1.hi == h2.hi);
    if (rc1 == 0 && (memmem(src, slen, "include", 7) || memmem(src, slen, "import", 6)))
        check_against_clang(&k1, src, slen, opts);
    char *norm = key_normalize_options(opts);
    FUZZ_ASSERT(norm != NULL);
    FUZZ_ASSERT(strlen(norm) <= strlen(opts));
    /* No leading blank; outside double quotes no run of blanks and no
     * trailing blank (inside them white space is a -D value's own). */
    FUZZ_ASSERT(norm[0] != ' ');
    int quoted = 0;
    for (const char *p = norm; *p; p++) {
        if (*p == '\\' && p[1]) p++;
        else if (*p == '"') quoted = !quoted;
        else if (!quoted && *p == ' ') FUZZ_ASSERT(p[1] && p[1] != ' ');
    }
    char *twice = key_normalize_options(norm); /* idempotent */
    FUZZ_ASSERT(twice && !strcmp(twice, norm));
    free(twice);
    free(norm);
    key_free(&k1);
    key_free(&k2);
    free(opts);
    free(src);
    return 0;
}
