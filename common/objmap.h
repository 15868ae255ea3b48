/* objmap.h — a concurrent map from OpenCL handles (pointers) to records.
 *
 * Striped: 64 independent buckets-with-a-mutex, so threads working on
 * different objects rarely meet, and there is no global lock. Used to track
 * programs, kernels, queues and events; never touched on the enqueue path
 * when no feature needs it.
 */
#ifndef CLSHIM_OBJMAP_H
#define CLSHIM_OBJMAP_H

typedef struct objmap objmap;

/* NULL on out-of-memory. */
objmap *objmap_new(void);
void objmap_free(objmap *m);

/* The record for `key`, or NULL. */
void *objmap_get(objmap *m, const void *key);

/* Calls fn(record, ctx) with `key`'s stripe locked, if `key` is there,
 * and returns 1; 0 if absent. A record removed (objmap_remove) before it is
 * freed stays valid during fn: fn may read it, but must not call back into
 * the map. */
int objmap_with(objmap *m, const void *key, void (*fn)(void *value, void *ctx), void *ctx);

/* Sets the record for `key` (replacing any). Returns 0, -1 on out-of-memory. */
int objmap_put(objmap *m, const void *key, void *value);

/* Removes `key`; returns its record, or NULL if absent. */
void *objmap_remove(objmap *m, const void *key);

/* Calls fn on every (key, value); the stripe is locked during each call, so
 * fn must not call back into the map. */
void objmap_foreach(objmap *m, void (*fn)(const void *key, void *value, void *ctx), void *ctx);

#endif
