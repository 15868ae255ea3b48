/* memtier.h — the in-process tier: built binaries by key, single-flight fills.
 *
 * The slot-cache scheme of shared/design/slot-cache.md: a slot is EMPTY,
 * FILLING (one thread is building it; others wait on it) or FILLED. The first
 * thread to acquire an EMPTY key gets MEMTIER_FILL and must end with
 * memtier_fill(), memtier_fail() or memtier_abandon(); threads that acquire
 * the key while it fills wait, then get MEMTIER_HIT — a failed build
 * included (memtier_failure(): single flight shares failures too) — or
 * MEMTIER_FAILED when the filler abandoned without a result (an internal
 * fault), so each of them builds itself. Acquired entries are pinned until memtier_release();
 * the tier keeps at most `limit` bytes of unpinned filled binaries, dropping
 * the least recently used first. One process-wide instance; thread-safe.
 */
#ifndef CLSHIM_MEMTIER_H
#define CLSHIM_MEMTIER_H

#include <stddef.h>
#include <stdint.h>

#include "cache/store.h"

typedef struct memtier_entry memtier_entry;

enum memtier_result {
    MEMTIER_HIT = 0,    /* filled; *entry pinned */
    MEMTIER_FILL = 1,   /* caller fills; *entry pinned */
    MEMTIER_BUSY = 2,   /* another thread fills and wait was 0; *entry NULL */
    MEMTIER_FAILED = 3, /* the filler abandoned while we waited; *entry NULL */
    MEMTIER_NOMEM = 4,  /* could not allocate; *entry NULL */
};

enum memtier_result memtier_acquire(struct cache_hash key, int wait, memtier_entry **entry);

/* Stores a copy of the binary (may be NULL: an object is attached next) and
 * build log; wakes waiters. Returns 0, or -1 on out-of-memory (then the entry
 * is abandoned). */
int memtier_fill(memtier_entry *e, const void *binary, size_t size, const char *build_log,
                 uint64_t compile_ns);
/* Fills the entry with a failed build: its error code (nonzero) and build
 * log. Acquirers get MEMTIER_HIT and memtier_failure() != 0: the same key
 * (same inputs) fails the same way, so nobody compiles it again in this
 * process. Returns as memtier_fill(). */
int memtier_fail(memtier_entry *e, int error, const char *build_log, uint64_t compile_ns);
/* The failed build's error code; 0 for an entry filled by a success. */
int memtier_failure(const memtier_entry *e);
void memtier_abandon(memtier_entry *e);
void memtier_release(memtier_entry *e);

/* The filled data; valid while the entry is pinned. The binary is NULL
 * when only an object is attached. */
const void *memtier_binary(const memtier_entry *e, size_t *size);
/* What a pinned hit serves, looked at once under the tier's lock: its
 * binary (valid while pinned; *object NULL), else the attached object
 * retained through `retain` (*object; the caller owns the reference), else
 * NULL with *object NULL. One look, not the binary and then the object:
 * between those two another thread can give the entry its bytes and the
 * object's owner detach it (it keeps the bytes first, so the entry stays
 * servable), and the caller would find neither. */
const void *memtier_serve(memtier_entry *e, size_t *size, int (*retain)(void *object), void **object);
const char *memtier_build_log(const memtier_entry *e);
uint64_t memtier_compile_ns(const memtier_entry *e);

/* Replaces the binary of a filled, pinned entry (a better capture, or the
 * first binary of an entry filled with an object only). */
int memtier_refill(memtier_entry *e, const void *binary, size_t size);

/* Attaches an object to a pinned entry — by its filler before memtier_fill,
 * so waiters wake to it, or to a filled entry — the built program itself,
 * tagged with its context, so later builds in that context share it instead
 * of loading bytes (and PoCL is not made to serialise its binary early).
 * `release` is called on it when the entry is dropped or it is detached.
 * An attached object counts OBJECT_COST bytes toward the limit. */
#define MEMTIER_OBJECT_COST (1u << 20)
void memtier_attach(memtier_entry *e, void *object, const void *tag, void (*release)(void *object));

/* The attached object when its tag matches (retained through `retain`
 * under the tier's lock, so a concurrent detach cannot free it first), else
 * NULL — also when `retain` fails (returns nonzero). The caller owns the
 * reference it gets. */
void *memtier_object_retain(memtier_entry *e, const void *tag, int (*retain)(void *object));

/* Detaches `object` from the entry of `key`, if still attached, and
 * releases it. The owner of the object calls this before its own lifetime
 * ends: the tier never keeps a driver object (and its context) alive longer
 * than the application does. */
void memtier_detach(struct cache_hash key, void *object);

/* Drops a pinned entry from the tier (a binary the driver refused, or an
 * entry left with nothing to serve): the next acquire of its key fills
 * afresh. The caller's pin stays valid until memtier_release(). */
void memtier_discard(memtier_entry *e);

/* Nonzero when a filled entry can serve a build: it has bytes, or an
 * attached program to read them from. */
int memtier_servable(const memtier_entry *e);

/* Byte limit of unpinned filled entries; 0 = unbounded. */
void memtier_set_limit(uint64_t bytes);

/* keep = 0 switches keeping off (CLSHIM_MEM_CACHE=0): an entry is dropped
 * as soon as its last pin is released, whatever the limit, so the tier only
 * joins concurrent builds of one key (single flight) and holds nothing
 * between them. keep = 1 (the default) keeps entries up to the limit. */
void memtier_set_keep(int keep);

/* Bytes held and entries held (tests). */
void memtier_usage(uint64_t *bytes, uint64_t *entries);

/* Drops every unpinned entry (tests; a driver out of resources, so its
 * retry has the memory they held). Returns how many were dropped. */
uint64_t memtier_clear(void);

#endif
