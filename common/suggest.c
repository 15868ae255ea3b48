/* suggest.c — the closest name to a mistyped one (common/suggest.h). */
#include "common/suggest.h"

#include <ctype.h>

/* Edit distance between a and b, without case (b shorter than 64 bytes). */
static size_t edit_distance(const char *a, size_t la, const char *b, size_t lb)
{
    size_t row[64];
    for (size_t j = 0; j <= lb; j++) row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (toupper((unsigned char)a[i - 1]) != toupper((unsigned char)b[j - 1]));
            if (row[j] + 1 < best) best = row[j] + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

void suggest_init(struct suggest *s, const char *word, size_t len)
{
    s->word = word;
    s->len = len;
    s->best = NULL;
    s->best_len = 0;
    s->distance = (size_t)-1;
}

void suggest_add(struct suggest *s, const char *name, size_t len)
{
    if (len >= 64) return;
    size_t d = edit_distance(s->word, s->len, name, len);
    if (d < s->distance) {
        s->distance = d;
        s->best = name;
        s->best_len = len;
    }
}

const char *suggest_get(const struct suggest *s, size_t *len)
{
    size_t letters = s->len;
    for (const char *p = s->word; letters && *p == '-'; p++) letters--;
    if (!s->best || !((s->distance <= 2 && s->distance < letters) || s->distance * 3 <= letters)) return NULL;
    if (len) *len = s->best_len;
    return s->best;
}
