/* key.h — what determines a built binary, and its hash.
 *
 * A key is "key material": length-prefixed fields in a fixed order, mostly
 * readable text so `clshim cache show` can answer "why did this miss?":
 *   clshim-key <format version>      (bumping KEY_FORMAT_VERSION orphans all)
 *   kind=<source|il|binary|compile|link|fusion>
 *   options=<build options, whitespace-normalised>
 *   <the device identity: platform name and version, device name and
 *    version, driver version, vendor id, OpenCL C version, extensions,
 *    address bits, device type>
 *   spec.<id>=<value hex>            (specialisation constants, sorted)
 *   header=<path> xxh128=<hash>      (every header the source can include)
 *   input=<n bytes>\n<the input bytes: source, IL or binaries>
 * The hash is XXH3-128 of the whole material, which is stored beside the
 * value and compared on every hit, so a collision is detected, never served.
 */
#ifndef CLSHIM_KEY_H
#define CLSHIM_KEY_H

#include <stddef.h>
#include <stdint.h>

#include "cache/entry.h"
#include "cache/store.h"

#define KEY_FORMAT_VERSION 1

/* The origin kinds of cache/entry.h, by the names keys use. */
enum key_kind {
    KEY_SOURCE = ENTRY_ORIGIN_SOURCE,
    KEY_IL = ENTRY_ORIGIN_IL,
    KEY_BINARY = ENTRY_ORIGIN_BINARY,
    KEY_LINK = ENTRY_ORIGIN_LINK,
    KEY_FUSION = ENTRY_ORIGIN_FUSION,
    KEY_COMPILE = ENTRY_ORIGIN_COMPILE,
};
const char *key_kind_name(enum key_kind kind);

/* A growing byte buffer for key material. */
struct key_buf {
    char *data;
    size_t len, cap;
    int oom; /* set when an append failed; the key is then unusable */
};

void key_begin(struct key_buf *k, enum key_kind kind, const char *options);
void key_add_text(struct key_buf *k, const char *name, const char *value);
void key_add_blob(struct key_buf *k, const char *name, const void *data, size_t len);
void key_add_u64(struct key_buf *k, const char *name, uint64_t value);
void key_free(struct key_buf *k);

/* XXH3-128 of the material. */
struct cache_hash key_hash(const void *material, size_t len);

/* Hex of the hash (32 chars + NUL) and the 16-char prefix the log shows. */
void key_hash_hex(struct cache_hash h, char out[33]);

/* Build options with runs of whitespace collapsed to one space and the ends
 * trimmed. Returns malloc'd text ("" for NULL), NULL on out-of-memory. */
char *key_normalize_options(const char *options);

/* Adds a "header=" field for every file the source can #include, searching
 * the options' -I directories, the including file's directory and the
 * working directory, recursively (every #include line counts, whatever
 * #if surrounds it, so the set is a superset). A name found nowhere is
 * recorded as absent, so the key changes when such a file appears. Returns
 * 0, or -1 when the includes cannot be known (a computed #include, a
 * -include option, a header that cannot be read): the program must then not
 * be cached, because a header could change unseen. `why` gets the reason. */
int key_add_headers(struct key_buf *k, const char *source, size_t len, const char *options,
                    char *why, size_t why_len);

#endif
