/* keydiff.h — why a key missed: the nearest stored key of the same program
 * and what differs, field by field.
 *
 * Design. A miss of a program whose entries the store holds for other
 * options, headers, devices or drivers is explained against the nearest of
 * them: the store's family record (store.h, "Explaining a miss") lists the
 * entries of the miss's family (cache/key.h key_family(): the same main
 * input), at most STORE_FAMILY_MAX, and each one's key material is compared
 * with the miss's. The comparison reads both keys' fields (key_fields())
 * into items: the format line (clshim's own key format), kind, each build
 * option (a -D by its macro, so a value that changed is one item), each
 * line of the device identity (the device, the driver version and every
 * driver.env.NAME variable apart), each header by path, and the other
 * fields by name; the nearest has the fewest differing items (places a
 * header could be found count only to break ties; then the newest). The
 * input itself is never compared: a family shares it.
 *
 * The last miss is recorded for `clshim cache why --last` through
 * store_note_last_miss(): "clshim-last-miss 1", the key's hash, its family
 * (or "none"), the time, then its key material up to the input field.
 *
 * Cost: docs/cache.md, "Why a key missed" (bench/bench_misswhy.c).
 */
#ifndef CLSHIM_KEYDIFF_H
#define CLSHIM_KEYDIFF_H

#include <stddef.h>
#include <stdint.h>

#include "cache/store.h"

/* What an item is, in the order a summary names them. */
enum keydiff_field {
    KEYDIFF_CLSHIM,       /* clshim's key format ("clshim-key N") */
    KEYDIFF_KIND,         /* source, il, compile, ... */
    KEYDIFF_DEVICE,       /* a line of the device identity (device.name, platform.version, ...) */
    KEYDIFF_DRIVER,       /* driver.version */
    KEYDIFF_DRIVER_ENV,   /* a driver.env.NAME line: name is NAME */
    KEYDIFF_OPTION,       /* a build option: name is the option, or "-DNAME" for a define; "order":
                           * the same options reordered or spelt otherwise */
    KEYDIFF_HEADER,       /* a header's content at a path: value its hash, "" absent there */
    KEYDIFF_DRIVER_DIR,   /* the same in the driver's own source directory */
    KEYDIFF_EMBEDDED,     /* a header passed to clCompileProgram: value the hash of its text */
    KEYDIFF_HEADER_PLACE, /* a place a header could be found (absent) that only one key names */
    KEYDIFF_OTHER,        /* any other field: name is the field's */
};
/* "clshim", "kind", "device", "driver.version", "driver.env", "option",
 * "header", "driver-dir-header", "embedded-header", "header-place", "field". */
const char *keydiff_field_name(enum keydiff_field field);

/* One difference. Strings are the diff's, valid until keydiff_free(). */
struct keydiff_item {
    enum keydiff_field field;
    const char *name;
    const char *stored; /* the stored key's value; NULL: not in it (added) */
    const char *now;    /* the new key's value; NULL: not in it (removed) */
};

struct keydiff;
/* Compares key material `stored` with `now` (either may stop before its
 * input field). NULL when out of memory or when either is not key material. */
struct keydiff *keydiff_new(const void *stored, size_t stored_len, const void *now, size_t now_len);
size_t keydiff_count(const struct keydiff *d);
const struct keydiff_item *keydiff_item(const struct keydiff *d, size_t i);
/* One item in words: "option -DTILE=16 -> -DTILE=32", "header inc/p.h
 * (content)", "driver variable POCL_EXTRA_BUILD_FLAGS: unset -> '-g'". */
void keydiff_describe(const struct keydiff_item *it, char *out, size_t len);
/* The items in words, joined by ", ", the device's other lines left out
 * when its name differs, the header places counted in one, at most six,
 * then "and N more". */
void keydiff_summary(const struct keydiff *d, char *out, size_t len);
void keydiff_free(struct keydiff *d);

/* A key that missed (or any key to explain). */
struct keydiff_miss {
    struct cache_hash hash;
    int has_family;
    struct cache_hash family;
    uint64_t when;     /* seconds since the epoch (keydiff_last_miss(); 0 otherwise) */
    const void *key;   /* its key material, up to its input field at least */
    size_t key_len;
    void *buf;         /* what keydiff_miss_free() frees (NULL: key is the caller's) */
};
/* The miss of full key material (key is borrowed). 0, or -1 when it is
 * not key material. */
int keydiff_miss_of(struct cache_hash hash, const void *key, size_t len, struct keydiff_miss *out);
/* Records m as the last miss (store_note_last_miss()); a store error code. */
int keydiff_note_miss(store *s, const struct keydiff_miss *m);
/* The last miss recorded: CLSHIM_OK (free with keydiff_miss_free()),
 * CLSHIM_ENOTFOUND (none yet), CLSHIM_ECORRUPT, or a store error code. */
int keydiff_last_miss(store *s, struct keydiff_miss *out);
void keydiff_miss_free(struct keydiff_miss *m);

/* The nearest stored entry of m's family other than m itself. */
struct keydiff_near {
    struct cache_hash hash;
    uint64_t created;
    struct keydiff *diff; /* stored: the neighbour's key; now: m's. keydiff_free() it */
};
/* 1 with *out, 0 when the store holds no other entry of m's family (or m
 * has none), or a negative store error code. */
int keydiff_nearest(store *s, const struct keydiff_miss *m, struct keydiff_near *out);

#endif
