/* suggest.h — the did-you-mean of a mistyped name: of the names it could
 * have meant, the closest by edit distance (letters compared without case),
 * when it is close enough to be likely the one intended. The knobs
 * (common/config.c) and the `clshim` command's commands, options and
 * values (tools/help.c) use it.
 *
 *     struct suggest s;
 *     suggest_init(&s, word, strlen(word));
 *     for (each name) suggest_add(&s, name, strlen(name));
 *     const char *closest = suggest_get(&s, &len); // NULL: none is close
 */
#ifndef CLSHIM_SUGGEST_H
#define CLSHIM_SUGGEST_H

#include <stddef.h>

struct suggest {
    const char *word; /* what was typed: len bytes */
    size_t len;
    const char *best; /* the closest name so far (best_len bytes), NULL before the first */
    size_t best_len;
    size_t distance;
};

void suggest_init(struct suggest *s, const char *word, size_t len);

/* One name it could have meant (at most 63 bytes; a longer one is passed
 * over). The first of equally close names is kept. */
void suggest_add(struct suggest *s, const char *name, size_t len);

/* The closest name when it is likely the intended one: at most 2 edits
 * and fewer than the word has letters (leading '-' not counted), or at
 * most a third of them. NULL otherwise; its length in *len. */
const char *suggest_get(const struct suggest *s, size_t *len);

#endif
