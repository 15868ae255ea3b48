/* fuzz_fuse_join — route (b)'s join of several programs' sources
 * (fusion/fuse_source.h, fs_join) and its options rule on hostile text:
 * program sources are what applications hand the driver.
 *
 * Input: up to three parts separated by NUL bytes: two program sources
 * (not NUL-terminated for fs_join) and a build-options string.
 * Properties: fs_join returns 0, CLSHIM_EUNSUPPORTED with a one-line
 * reason, or CLSHIM_ENOMEM; on 0 the joined text is NUL-terminated, holds
 * each source verbatim in order, and every name fs_join_name renames for a
 * part is #defined to that spelling before the part's text; fs_join_options
 * accepts a pair in either order alike and always accepts equal options;
 * everything frees cleanly. */
#include <ctype.h>

#include "common/error.h"
#include "fusion/fuse_source.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *part[3] = {"", "", ""};
    size_t len[3] = {0, 0, 0};
    char *copy = fuzz_strdup(data, size);
    size_t at = 0;
    for (int p = 0; p < 3; p++) {
        part[p] = copy + at;
        const char *nul = memchr(copy + at, 0, size - at);
        len[p] = nul ? (size_t)(nul - (copy + at)) : size - at;
        at += len[p] + (nul != NULL);
        if (!nul) break;
    }
    char *a = malloc(len[0] ? len[0] : 1), *b = malloc(len[1] ? len[1] : 1); /* not NUL-terminated */
    if (!a || !b) abort();
    memcpy(a, part[0], len[0]);
    memcpy(b, part[1], len[1]);
    struct fs_part parts[2] = {{a, len[0], ""}, {b, len[1], ""}};
    struct fs_join j;
    char why[256];
    memset(why, 'x', sizeof why);
    int rc = fs_join(parts, 2, &j, why, sizeof why);
    FUZZ_ASSERT(rc == 0 || rc == CLSHIM_EUNSUPPORTED || rc == CLSHIM_ENOMEM);
    if (rc) {
        FUZZ_ASSERT(memchr(why, 0, sizeof why) != NULL && !strchr(why, '\n'));
        FUZZ_ASSERT(j.text == NULL);
    } else {
        FUZZ_ASSERT(j.text[j.len] == 0 && strlen(j.prefix) > 0);
        const char *at_a = memmem(j.text, j.len, a, len[0]);
        FUZZ_ASSERT(at_a != NULL);
        FUZZ_ASSERT(memmem(at_a + len[0], j.len - (size_t)(at_a + len[0] - j.text), b, len[1]) != NULL);
        /* Each part's renames: "#define NAME SPELLING\n" in the text. */
        char word[64], spelled[160], line[300];
        for (int p = 0; p < 2; p++)
            for (size_t i = 0; i < len[p];) {
                size_t n = 0;
                while (i + n < len[p] && n + 1 < sizeof word &&
                       (part[p][i + n] == '_' || isalpha((unsigned char)part[p][i + n]) ||
                        (n && isdigit((unsigned char)part[p][i + n]))))
                    n++;
                if (!n) {
                    i++;
                    continue;
                }
                memcpy(word, part[p] + i, n);
                word[n] = 0;
                i += n;
                if (!fs_join_name(&j, (uint32_t)p, word, spelled, sizeof spelled)) continue;
                FUZZ_ASSERT(!strncmp(spelled, j.prefix, strlen(j.prefix)));
                snprintf(line, sizeof line, "#define %s %s\n", word, spelled);
                FUZZ_ASSERT(strstr(j.text, line) != NULL);
            }
        char type[128];
        snprintf(type, sizeof type, "%.100s*", part[2]);
        (void)fs_join_type(&j, 0, type, sizeof type);
        FUZZ_ASSERT(memchr(type, 0, sizeof type) != NULL);
        fs_join_free(&j);
    }
    char *o1 = fuzz_strdup((const uint8_t *)part[0], len[0] < 512 ? len[0] : 512);
    char *o2 = fuzz_strdup((const uint8_t *)part[2], len[2] < 512 ? len[2] : 512);
    int ab = fs_join_options(o1, o2, why, sizeof why), ba = fs_join_options(o2, o1, why, sizeof why);
    FUZZ_ASSERT((ab == 0) == (ba == 0) || ab == CLSHIM_ENOMEM || ba == CLSHIM_ENOMEM);
    FUZZ_ASSERT(fs_join_options(o2, o2, why, sizeof why) != CLSHIM_EUNSUPPORTED);
    free(o1);
    free(o2);
    free(a);
    free(b);
    free(copy);
    return 0;
}
