/* objmap.c — striped chained hash map keyed by pointer. */
#include "common/objmap.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#define STRIPES 64

struct node {
    const void *key;
    void *value;
    struct node *next;
};

struct stripe {
    pthread_mutex_t lock;
    struct node **buckets;
    size_t nbuckets, count;
};

struct objmap {
    struct stripe stripes[STRIPES];
};

static inline uint64_t hash_ptr(const void *p)
{
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return x;
}

objmap *objmap_new(void)
{
    objmap *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    for (int i = 0; i < STRIPES; i++) pthread_mutex_init(&m->stripes[i].lock, NULL);
    return m;
}

void objmap_free(objmap *m)
{
    if (!m) return;
    for (int i = 0; i < STRIPES; i++) {
        struct stripe *s = &m->stripes[i];
        for (size_t b = 0; b < s->nbuckets; b++)
            for (struct node *n = s->buckets[b], *next; n; n = next) {
                next = n->next;
                free(n);
            }
        free(s->buckets);
        pthread_mutex_destroy(&s->lock);
    }
    free(m);
}

static struct stripe *stripe_of(objmap *m, uint64_t h) { return &m->stripes[h % STRIPES]; }

void *objmap_get(objmap *m, const void *key)
{
    uint64_t h = hash_ptr(key);
    struct stripe *s = stripe_of(m, h);
    void *v = NULL;
    pthread_mutex_lock(&s->lock);
    if (s->nbuckets)
        for (struct node *n = s->buckets[(h / STRIPES) % s->nbuckets]; n; n = n->next)
            if (n->key == key) { v = n->value; break; }
    pthread_mutex_unlock(&s->lock);
    return v;
}

int objmap_with(objmap *m, const void *key, void (*fn)(void *value, void *ctx), void *ctx)
{
    uint64_t h = hash_ptr(key);
    struct stripe *s = stripe_of(m, h);
    int found = 0;
    pthread_mutex_lock(&s->lock);
    if (s->nbuckets)
        for (struct node *n = s->buckets[(h / STRIPES) % s->nbuckets]; n; n = n->next)
            if (n->key == key) {
                fn(n->value, ctx);
                found = 1;
                break;
            }
    pthread_mutex_unlock(&s->lock);
    return found;
}

static int grow(struct stripe *s)
{
    size_t nb = s->nbuckets ? s->nbuckets * 2 : 16;
    struct node **b = calloc(nb, sizeof *b);
    if (!b) return -1;
    for (size_t i = 0; i < s->nbuckets; i++)
        for (struct node *n = s->buckets[i], *next; n; n = next) {
            next = n->next;
            size_t j = (hash_ptr(n->key) / STRIPES) % nb;
            n->next = b[j];
            b[j] = n;
        }
    free(s->buckets);
    s->buckets = b;
    s->nbuckets = nb;
    return 0;
}

int objmap_put(objmap *m, const void *key, void *value)
{
    uint64_t h = hash_ptr(key);
    struct stripe *s = stripe_of(m, h);
    int rc = 0;
    pthread_mutex_lock(&s->lock);
    if (s->count >= s->nbuckets && grow(s) != 0 && !s->nbuckets) { rc = -1; goto out; }
    struct node **slot = &s->buckets[(h / STRIPES) % s->nbuckets];
    for (struct node *n = *slot; n; n = n->next)
        if (n->key == key) { n->value = value; goto out; }
    struct node *n = malloc(sizeof *n);
    if (!n) { rc = -1; goto out; }
    n->key = key;
    n->value = value;
    n->next = *slot;
    *slot = n;
    s->count++;
out:
    pthread_mutex_unlock(&s->lock);
    return rc;
}

void *objmap_remove(objmap *m, const void *key)
{
    uint64_t h = hash_ptr(key);
    struct stripe *s = stripe_of(m, h);
    void *v = NULL;
    pthread_mutex_lock(&s->lock);
    if (s->nbuckets)
        for (struct node **p = &s->buckets[(h / STRIPES) % s->nbuckets]; *p; p = &(*p)->next)
            if ((*p)->key == key) {
                struct node *n = *p;
                v = n->value;
                *p = n->next;
                free(n);
                s->count--;
                break;
            }
    pthread_mutex_unlock(&s->lock);
    return v;
}

void objmap_foreach(objmap *m, void (*fn)(const void *key, void *value, void *ctx), void *ctx)
{
    for (int i = 0; i < STRIPES; i++) {
        struct stripe *s = &m->stripes[i];
        pthread_mutex_lock(&s->lock);
        for (size_t b = 0; b < s->nbuckets; b++)
            for (struct node *n = s->buckets[b]; n; n = n->next) fn(n->key, n->value, ctx);
        pthread_mutex_unlock(&s->lock);
    }
}
