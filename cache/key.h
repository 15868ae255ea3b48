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
 *   header <path>=<xxh128 hex>        (every header the source can include
 *   header-absent <path>=             or probe with __has_include, and every
 *                                     place one could appear)
 *   driver-dir-header <name>=<hex>    (a driver that compiles from a
 *   driver-dir-absent <name>=         directory of its own: the main
 *                                     source's quoted names there, by name
 *                                     only so keys stay portable)
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

#define KEY_FORMAT_VERSION 2

/* The origin kinds of cache/entry.h, by the names keys use. */
enum key_kind {
    KEY_SOURCE = ENTRY_ORIGIN_SOURCE,
    KEY_IL = ENTRY_ORIGIN_IL,
    KEY_BINARY = ENTRY_ORIGIN_BINARY,
    KEY_LINK = ENTRY_ORIGIN_LINK,
    KEY_FUSION = ENTRY_ORIGIN_FUSION,
    KEY_COMPILE = ENTRY_ORIGIN_COMPILE,
    KEY_MANIFEST = ENTRY_ORIGIN_MANIFEST, /* direct mode's header list (cache/preproc.h), not a binary */
};
const char *key_kind_name(enum key_kind kind);

/* A growing byte buffer for key material. */
struct key_snapshot; /* cache/snapshot.h */
struct key_buf {
    char *data;
    size_t len, cap;
    int oom; /* set when an append failed; the key is then unusable */
    /* The bytes of every file the key names, as read for it (owned; NULL:
     * none kept). Files are read through it once (key_read_input), so the
     * hash in the key is of bytes a build can be served (cache/snapshot.h). */
    struct key_snapshot *snap;
};

void key_begin(struct key_buf *k, enum key_kind kind, const char *options);
/* Raw bytes (a zeroed key_buf is an empty buffer: also a plain byte buffer). */
void key_append(struct key_buf *k, const void *data, size_t len);
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

/* Splits build options as a driver does: white space separates, double
 * quotes group, a backslash escapes the next character. 0, CLSHIM_EINVAL
 * (an unclosed quote) or CLSHIM_ENOMEM; free with key_free_options(). */
int key_split_options(const char *options, char ***argv, int *argc);
void key_free_options(char **argv, int argc);

/* A file the key names: its bytes and XXH3-128 hex, read once into
 * k->snap when k has one (*text then belongs to the snapshot, *owned is
 * NULL), else read now (*owned is the caller's to free). -1 when it cannot
 * be read. key_hash_input() is the hash alone. */
int key_read_input(struct key_buf *k, const char *path, const char **text, size_t *len, char hex[33],
                   char **owned);
int key_hash_input(struct key_buf *k, const char *path, char hex[33]);

/* Drops what k gained since (len, nfiles): its fields past len and the
 * snapshot's files past nfiles (a route that handed off). */
void key_rewind(struct key_buf *k, size_t len, size_t nfiles);
size_t key_snapshot_files(const struct key_buf *k);
/* Moves the snapshot files of `from` into k's; -1 when a path is in both
 * with other content (read twice, changed in between: not cacheable). */
int key_take_snapshot(struct key_buf *k, struct key_buf *from);

/* A header passed to clCompileProgram by name (input_headers). */
struct key_embedded {
    const char *name;
    const char *source;
    size_t len;
};

/* What a source program's headers are found from. */
struct key_source {
    const char *source;           /* the program text, not NUL-terminated */
    size_t len;
    const char *options;          /* the application's build options */
    const struct key_embedded *embedded;
    size_t nembedded;
    /* The directory the driver writes the source to and compiles it from
     * (QUIRK_POCL_SOURCE_DIR, cache/quirks.h), searched first for the main
     * source's quoted names; NULL when the driver has none. */
    const char *driver_dir;
};

/* Results of the scans below besides 0: */
#define KEY_HANDOFF (-1)     /* the scanner cannot be certain: ask the preprocessor */
#define KEY_UNCACHEABLE (-2) /* no route can key it: a __has_include whose operand is not a literal */
#define KEY_TIME_MACROS (-3) /* __DATE__, __TIME__ or __TIMESTAMP__: a build differs by when it ran */

/* The scanner: the fast path, exact or nothing. Adds a "header" field (path
 * and content hash) for every file the source and its headers can #include
 * or #import, whatever #if surrounds the line, so the set is a superset of
 * what the compiler opens; every other place a name could be found (the
 * including file's directory, each -I directory, the working directory) is
 * recorded as absent, so a file appearing there changes the key. Names
 * probed by __has_include / __has_include_next (a "..." or <...> literal)
 * are keyed the same way at every place (present: its hash, not followed;
 * absent: "header-absent"), system directories included. With a
 * driver_dir, each quoted name of the main source adds "driver-dir-header
 * <name>=<hash>" or "driver-dir-absent <name>" (a header found there is
 * keyed by content; what it includes itself is not followed). It lexes
 * like the preprocessor: comments, line splices, string literals, the "%:"
 * digraph. Returns 0; KEY_TIME_MACROS when the source or a header uses
 * __DATE__, __TIME__ or __TIMESTAMP__ (as a token: not in comments or
 * literals); KEY_UNCACHEABLE for a __has_include( whose operand is not a
 * literal (a macro: no route can list its places); or KEY_HANDOFF (-1)
 * when it cannot be certain: a computed include,
 * #include_next, trigraphs, an option that changes what the
 * preprocessor reads (-include, -isystem, ...), a name found in none of
 * those directories but present in a system directory of the compiler
 * (clang's resource directories, /usr/local/include, /usr/include and its
 * multiarch directories), an unreadable header. A name found nowhere at all
 * is recorded as absent (its #include is in an inactive #if branch). `why` gets the reason; the caller then
 * asks the preprocessor (cache/preproc.h). Embedded headers resolve by name
 * first; their contents are the caller's to key. */
int key_scan_headers(struct key_buf *k, const struct key_source *in, char *why, size_t why_len);

/* The lexical pass for the routes that do not use the scanner
 * (cache/preproc.h): the program source, its embedded headers and `files`
 * (every header the preprocessor opened) scanned for the time macros and
 * for __has_include probes, whose places are added to k as
 * key_scan_headers() adds them (the driver directory aside), and told to
 * `note` (may be NULL): path and content hash, or hex NULL when absent.
 * The probe's places: the probing file's directory (quoted), the -I,
 * -iquote, -isystem and -idirafter directories, the working directory,
 * every match in the compiler's system directories. Returns 0,
 * KEY_TIME_MACROS or KEY_UNCACHEABLE with `why`. */
int key_scan_probes(struct key_buf *k, const struct key_source *in, char *const *files, size_t nfiles,
                    void (*note)(void *arg, const char *path, const char *hex), void *arg, char *why,
                    size_t why_len);

/* The driver directory's fields alone (nothing when in->driver_dir is
 * NULL): every quoted #include / #import name and quoted __has_include
 * operand of the main source, present or absent there. Computed fresh on
 * every key, whatever route listed the headers. */
void key_scan_driver_dir(struct key_buf *k, const struct key_source *in);

/* key_scan_headers() for a program without embedded headers. */
int key_add_headers(struct key_buf *k, const char *source, size_t len, const char *options,
                    char *why, size_t why_len);

/* Whether the key's last field is its input holding exactly these bytes
 * (what a build of the key compiles: the capture helper checks the source
 * it is handed). 1 or 0. */
int key_input_is(const void *key, size_t key_len, const void *input, size_t len);

/* ---- reading key material ---------------------------------------------------
 * key_fields() calls fn for each field of key material, in order: first
 * the format line as name "clshim-key" with the version as its value, then
 * every "name=value" line (value as stored: key_add_text's escapes kept)
 * and every blob (blob set, value its bytes). A line names a path or a
 * header ("header <path>", "header-absent", "header-alias",
 * "driver-dir-header", "driver-dir-absent", "embedded-header") up to its
 * last '=', any other up to its first. Pointers are into key. fn returns
 * nonzero to stop. Returns 0 (walked or stopped), -1 when the material is
 * malformed (fn saw the fields before the fault). */
struct key_field {
    const char *name;
    size_t name_len;
    const char *value;
    size_t value_len;
    int blob;
};
int key_fields(const void *key, size_t len, int (*fn)(const struct key_field *f, void *arg), void *arg);
/* A text field's value as key_add_text() was given it (its escapes undone):
 * malloc'd and NUL-terminated; NULL when out of memory. */
char *key_field_text(const struct key_field *f);

/* The family of key material: XXH3-128 of its "input" blob (the program's
 * source strings, IL or binaries), which every key of one program shares,
 * whatever its options, headers, device or driver. 1 with *family and
 * *input_at (the offset of the input field, the material's last: the
 * bytes before it are what a comparison of two keys of one family needs;
 * may be NULL); 0 when the key has no input (link, fusion) or is a
 * manifest's (cache/preproc.h); -1 when it is not key material. */
int key_family(const void *key, size_t len, struct cache_hash *family, size_t *input_at);

/* ---- the files a key names --------------------------------------------------
 * key_inputs_parse() lists the key's "header <path>=<hex>" and
 * "header-absent <path>=" fields (relative paths are the application's
 * working directory's) and its "driver-dir-header <name>=<hex>" and
 * "driver-dir-absent <name>=" fields (driver_dir set): what a build under
 * cache/sandbox.h may read, and what it must find absent. Nothing here reads
 * the files: a check of the file system before and after a build cannot
 * see a change undone in between (cache/snapshot.h says what does). */
struct key_inputs;
int key_inputs_parse(const void *key, size_t len, struct key_inputs **out);
size_t key_inputs_count(const struct key_inputs *in);
/* Field i: its path (or name), hex ("" when absent), whether a driver-dir field. */
void key_inputs_get(const struct key_inputs *in, size_t i, const char **path, const char **hex, int *driver_dir);
void key_inputs_free(struct key_inputs *in);

#endif
