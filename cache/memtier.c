/* memtier.c — in-process binary tier with single-flight fills.
 *
 * Invariants (tests/unit/test_memtier.c checks them through memtier_usage):
 *  1. an entry is on the LRU list iff it is FILLED and unpinned;
 *  2. held_bytes == the sum of entry_cost() of FILLED entries;
 *  3. a FILLING entry has exactly one filler and pins >= 1.
 */
#include "cache/memtier.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"

enum slot_state { SLOT_EMPTY, SLOT_FILLING, SLOT_FILLED };

struct memtier_entry {
    struct cache_hash key;
    enum slot_state state;
    unsigned pins;
    unsigned generation; /* bumped on abandon: waiters of that fill fail */
    void *binary;
    size_t size;
    char *build_log;
    uint64_t compile_ns;
    int error;                /* a failed build's error code; 0 when it succeeded */
    void *object;             /* attached built program, or NULL */
    const void *object_tag;
    void (*object_release)(void *);
    int discarded;            /* out of the table; freed at the last release */
    struct memtier_entry *hnext;              /* hash chain */
    struct memtier_entry *lru_prev, *lru_next; /* unpinned FILLED entries */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t filled = PTHREAD_COND_INITIALIZER;
static struct memtier_entry **table;
static size_t table_size, entry_count;
static struct memtier_entry lru = {.lru_prev = &lru, .lru_next = &lru};
static uint64_t held_bytes, limit_bytes = 256u << 20;
static int keep_nothing; /* memtier_set_keep(0): unpinned entries are dropped at once */

static size_t bucket(struct cache_hash k) { return (size_t)(k.lo ^ k.hi) & (table_size - 1); }

static void lru_unlink(struct memtier_entry *e)
{
    if (!e->lru_next) return;
    e->lru_prev->lru_next = e->lru_next;
    e->lru_next->lru_prev = e->lru_prev;
    e->lru_prev = e->lru_next = NULL;
}

static void lru_push(struct memtier_entry *e) /* most recently used at the tail */
{
    e->lru_prev = lru.lru_prev;
    e->lru_next = &lru;
    lru.lru_prev->lru_next = e;
    lru.lru_prev = e;
}

static size_t entry_cost(const struct memtier_entry *e)
{
    return e->size + (e->object ? MEMTIER_OBJECT_COST : 0) + (e->error ? strlen(e->build_log) + 1 : 0);
}

static void unlink_entry(struct memtier_entry *e)
{
    (void)CLSHIM_ASSERT_HELD(&lock);
    (void)CLSHIM_ASSERT(entry_count > 0 && !e->discarded);
    for (struct memtier_entry **p = &table[bucket(e->key)]; *p; p = &(*p)->hnext)
        if (*p == e) { *p = e->hnext; break; }
    lru_unlink(e);
    if (e->state == SLOT_FILLED) held_bytes -= entry_cost(e);
    entry_count--;
    e->discarded = 1;
}

static void remove_entry(struct memtier_entry *e)
{
    (void)CLSHIM_ASSERT_HELD(&lock); /* the release callback must not re-enter */
    if (!e->discarded) unlink_entry(e);
    if (e->object && e->object_release) e->object_release(e->object);
    free(e->binary);
    free(e->build_log);
    free(e);
}

static void evict_to_limit(void)
{
    while ((keep_nothing || (limit_bytes && held_bytes > limit_bytes)) && lru.lru_next != &lru)
        remove_entry(lru.lru_next);
}

static int grow_table(void)
{
    (void)CLSHIM_ASSERT_HELD(&lock);
    size_t ns = table_size ? table_size * 2 : 64;
    struct memtier_entry **nt = calloc(ns, sizeof *nt);
    if (!nt) return -1;
    size_t old = table_size;
    struct memtier_entry **ot = table;
    table = nt;
    table_size = ns;
    for (size_t i = 0; i < old; i++)
        for (struct memtier_entry *e = ot[i], *next; e; e = next) {
            next = e->hnext;
            e->hnext = table[bucket(e->key)];
            table[bucket(e->key)] = e;
        }
    free(ot);
    return 0;
}

static struct memtier_entry *find(struct cache_hash k)
{
    (void)CLSHIM_ASSERT_HELD(&lock);
    if (!table_size) return NULL;
    for (struct memtier_entry *e = table[bucket(k)]; e; e = e->hnext)
        if (e->key.lo == k.lo && e->key.hi == k.hi) return e;
    return NULL;
}

enum memtier_result memtier_acquire(struct cache_hash key, int wait, memtier_entry **entry)
{
    *entry = NULL;
    pthread_mutex_lock(&lock);
    struct memtier_entry *e = find(key);
    if (!e) {
        if (entry_count >= table_size && grow_table() != 0 && !table_size) goto nomem;
        e = calloc(1, sizeof *e);
        if (!e) goto nomem;
        e->key = key;
        e->hnext = table[bucket(key)];
        table[bucket(key)] = e;
        entry_count++;
    }
    if (e->state == SLOT_FILLING) {
        if (!wait) {
            pthread_mutex_unlock(&lock);
            return MEMTIER_BUSY;
        }
        unsigned gen = e->generation;
        e->pins++; /* keeps e alive while we sleep */
        while (e->state == SLOT_FILLING && e->generation == gen) pthread_cond_wait(&filled, &lock);
        if (e->state != SLOT_FILLED) { /* the fill was abandoned */
            e->pins--;
            if (!e->pins && e->state == SLOT_EMPTY) remove_entry(e);
            pthread_mutex_unlock(&lock);
            return MEMTIER_FAILED;
        }
        *entry = e;
        pthread_mutex_unlock(&lock);
        return MEMTIER_HIT;
    }
    enum memtier_result r;
    if (e->state == SLOT_FILLED) {
        lru_unlink(e);
        r = MEMTIER_HIT;
    } else {
        e->state = SLOT_FILLING;
        r = MEMTIER_FILL;
    }
    e->pins++;
    *entry = e;
    pthread_mutex_unlock(&lock);
    return r;
nomem:
    pthread_mutex_unlock(&lock);
    return MEMTIER_NOMEM;
}

int memtier_fill(memtier_entry *e, const void *binary, size_t size, const char *build_log,
                 uint64_t compile_ns)
{
    void *copy = binary ? malloc(size ? size : 1) : NULL;
    char *log = strdup(build_log ? build_log : "");
    if ((binary && !copy) || !log) {
        free(copy);
        free(log);
        memtier_abandon(e);
        return -1;
    }
    if (binary) memcpy(copy, binary, size);
    else size = 0;
    pthread_mutex_lock(&lock);
    e->binary = copy;
    e->size = size;
    e->build_log = log;
    e->compile_ns = compile_ns;
    e->state = SLOT_FILLED;
    if (!e->discarded) held_bytes += entry_cost(e);
    pthread_cond_broadcast(&filled);
    pthread_mutex_unlock(&lock);
    return 0;
}

int memtier_refill(memtier_entry *e, const void *binary, size_t size)
{
    void *copy = malloc(size ? size : 1);
    if (!copy) return -1;
    memcpy(copy, binary, size);
    pthread_mutex_lock(&lock);
    if (e->state != SLOT_FILLED) {
        pthread_mutex_unlock(&lock);
        free(copy);
        return -1;
    }
    /* Other pinners may be reading the old binary: swap only when the
     * caller holds the sole pin. */
    if (e->pins != 1 && e->binary) {
        pthread_mutex_unlock(&lock);
        free(copy);
        return -1;
    }
    if (!e->discarded) held_bytes = held_bytes - e->size + size;
    free(e->binary);
    e->binary = copy;
    e->size = size;
    pthread_mutex_unlock(&lock);
    return 0;
}

void memtier_attach(memtier_entry *e, void *object, const void *tag, void (*release)(void *object))
{
    pthread_mutex_lock(&lock);
    if (e->state != SLOT_EMPTY && !e->object) {
        e->object = object;
        e->object_tag = tag;
        e->object_release = release;
        if (e->state == SLOT_FILLED && !e->discarded) held_bytes += MEMTIER_OBJECT_COST;
        object = NULL;
    }
    pthread_mutex_unlock(&lock);
    if (object && release) release(object); /* already had one */
}

void *memtier_object_retain(memtier_entry *e, const void *tag, int (*retain)(void *object))
{
    pthread_mutex_lock(&lock);
    void *o = e->object && (!tag || e->object_tag == tag) ? e->object : NULL;
    if (o && retain(o) != 0) o = NULL;
    pthread_mutex_unlock(&lock);
    return o;
}

void memtier_detach(struct cache_hash key, void *object)
{
    pthread_mutex_lock(&lock);
    struct memtier_entry *e = find(key);
    if (e && e->object == object) {
        if (e->object_release) e->object_release(object);
        e->object = NULL;
        if (e->state == SLOT_FILLED) held_bytes -= MEMTIER_OBJECT_COST;
        /* Filled without bytes and now without an object: nothing to serve. */
        if (!e->binary && e->state == SLOT_FILLED) {
            if (e->pins) unlink_entry(e);
            else remove_entry(e);
        }
    }
    pthread_mutex_unlock(&lock);
}

int memtier_fail(memtier_entry *e, int error, const char *build_log, uint64_t compile_ns)
{
    pthread_mutex_lock(&lock);
    e->error = error ? error : -1;
    pthread_mutex_unlock(&lock);
    /* Waiters wake in memtier_fill, after the error is set. */
    return memtier_fill(e, NULL, 0, build_log, compile_ns);
}

int memtier_failure(const memtier_entry *e) { return e->error; }

void memtier_abandon(memtier_entry *e)
{
    pthread_mutex_lock(&lock);
    if (e->object && e->object_release) e->object_release(e->object);
    e->object = NULL;
    if (e->state == SLOT_FILLED && !e->discarded) held_bytes -= entry_cost(e);
    free(e->binary);
    e->binary = NULL;
    e->size = 0;
    e->error = 0;
    e->state = SLOT_EMPTY;
    e->generation++;
    pthread_cond_broadcast(&filled);
    if (--e->pins == 0) remove_entry(e);
    pthread_mutex_unlock(&lock);
}

void memtier_discard(memtier_entry *e)
{
    pthread_mutex_lock(&lock);
    if (!e->discarded) unlink_entry(e);
    pthread_mutex_unlock(&lock);
}

int memtier_servable(const memtier_entry *e)
{
    pthread_mutex_lock(&lock);
    int ok = e->state == SLOT_FILLED && (e->binary || e->object);
    pthread_mutex_unlock(&lock);
    return ok;
}

void memtier_release(memtier_entry *e)
{
    if (!e) return;
    pthread_mutex_lock(&lock);
    if (--e->pins == 0) {
        if (e->discarded) {
            remove_entry(e);
        } else if (e->state == SLOT_FILLED) {
            lru_push(e);
            evict_to_limit();
        } else if (e->state == SLOT_EMPTY) {
            remove_entry(e);
        }
    }
    pthread_mutex_unlock(&lock);
}

const void *memtier_binary(const memtier_entry *e, size_t *size)
{
    /* Under the lock: memtier_refill() gives an entry without bytes its
     * binary and size while other pinners look. */
    pthread_mutex_lock(&lock);
    const void *b = e->binary;
    *size = e->size;
    pthread_mutex_unlock(&lock);
    return b;
}

const void *memtier_serve(memtier_entry *e, size_t *size, int (*retain)(void *object), void **object)
{
    pthread_mutex_lock(&lock);
    const void *b = e->binary;
    *size = b ? e->size : 0;
    *object = !b && e->object && retain(e->object) == 0 ? e->object : NULL;
    pthread_mutex_unlock(&lock);
    return b;
}

const char *memtier_build_log(const memtier_entry *e) { return e->build_log ? e->build_log : ""; }
uint64_t memtier_compile_ns(const memtier_entry *e) { return e->compile_ns; }

void memtier_set_limit(uint64_t bytes)
{
    pthread_mutex_lock(&lock);
    limit_bytes = bytes;
    evict_to_limit();
    pthread_mutex_unlock(&lock);
}

void memtier_set_keep(int keep)
{
    pthread_mutex_lock(&lock);
    keep_nothing = !keep;
    evict_to_limit();
    pthread_mutex_unlock(&lock);
}

void memtier_usage(uint64_t *bytes, uint64_t *entries)
{
    pthread_mutex_lock(&lock);
    *bytes = held_bytes;
    *entries = entry_count;
    pthread_mutex_unlock(&lock);
}

uint64_t memtier_clear(void)
{
    uint64_t dropped = 0;
    pthread_mutex_lock(&lock);
    for (; lru.lru_next != &lru; dropped++) remove_entry(lru.lru_next);
    pthread_mutex_unlock(&lock);
    return dropped;
}
