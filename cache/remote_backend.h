/* remote_backend.h — the one interface between the remote tier (remote.c)
 * and a kind of server: Redis (remote_redis.c), HTTP and S3 (remote_http.c).
 * Internal to cache/remote*.c.
 *
 * Design. remote.c keeps what is the same for every server: the breaker,
 * the counters, deadlines, the writer thread, the claims this process
 * holds, signing and verification. A backend only moves bytes: it opens
 * connections and runs one request (struct rb_req) on one, each before an
 * absolute deadline (CLOCK_MONOTONIC nanoseconds, rio_now_ns()), and says
 * what went wrong by kind (enum rio_fault). A third kind of server is a
 * file defining one more struct remote_backend, and a line in
 * remote_backends[] (remote.c).
 *
 * Thread safety: a connection is used by one thread at a time; the
 * backend's own state (from open) is read-only after open.
 */
#ifndef CLSHIM_REMOTE_BACKEND_H
#define CLSHIM_REMOTE_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "cache/remote.h"

/* What went wrong; each kind is counted apart (remote.h's counters). */
enum rio_fault {
    RIO_OK,
    RIO_TIMEOUT,  /* the deadline passed (silent, trickling or slow server, slow name lookup) */
    RIO_LOST,     /* no connection, or it closed or failed mid-exchange */
    RIO_GARBAGE,  /* the reply is not the protocol, or not an answer the request can get */
    RIO_OVERSIZE, /* the reply grew past the largest value allowed */
    RIO_REFUSED,  /* the server refused us (authentication, permissions): the breaker opens */
    RIO_DENIED,   /* the server refused this one request: counted as refused, logged once,
                     no breaker, the connection stays */
};

uint64_t rio_now_ns(void);

enum rb_op {
    RB_GET,     /* the entry `hash`: *out (at most max_value + 1 bytes), found = 0 when absent */
    RB_PUT,     /* the entry `hash` := value[0..len), expiring after n seconds (0: never) */
    RB_TOUCH,   /* the entry `hash` expires n seconds from now */
    RB_CLAIM,   /* claim `hash` for n ms with token: claim is RB_CLAIMED or RB_BUSY */
    RB_PEEK,    /* is `hash` claimed (read-only runners)? claim is RB_BUSY or RB_FREE */
    RB_RELEASE, /* deletes the claim on `hash` when it still holds token */
    RB_COUNT,   /* the fleet counter `field` += n */
    RB_PING,    /* one round trip */
};

/* RB_NO_CLAIMS: the server cannot claim atomically (HTTP): no single flight. */
enum rb_claim { RB_FREE, RB_CLAIMED, RB_BUSY, RB_NO_CLAIMS };

struct rb_req {
    enum rb_op op;
    struct cache_hash hash;
    const void *value; /* RB_PUT */
    size_t len;
    uint64_t n;
    const char *field, *token;
    /* results */
    int found;          /* RB_GET */
    enum rb_claim claim; /* RB_CLAIM, RB_PEEK */
    const void *out;    /* RB_GET: the value, valid until drop(hold) */
    size_t out_len;
    void *hold;
};

struct remote_backend {
    const char *scheme; /* a URL starting with "<scheme>://" is this backend's (several: '|' between) */
    /* Parses the URL and reads the password file: CLSHIM_OK, CLSHIM_EINVAL,
     * CLSHIM_ENOMEM. Connects nothing. */
    int (*open)(const struct remote_options *opt, const char *ns, void **b);
    void (*close)(void *b);
    /* A new connection before deadline: NULL with *fault and why (never a credential). */
    void *(*connect)(void *b, uint64_t deadline, uint64_t max_value, enum rio_fault *fault, char *why,
                     size_t why_len);
    void (*disconnect)(void *conn);
    /* One request before deadline. After a fault other than RIO_DENIED the
     * caller disconnects. */
    enum rio_fault (*exec)(void *b, void *conn, struct rb_req *q, uint64_t deadline, char *why, size_t why_len);
    void (*drop)(void *hold); /* frees what RB_GET holds */
    /* `clshim cache remote stats` and `rm` (remote.h), each step timeout_ms. */
    int (*stats)(void *b, uint64_t timeout_ms, uint64_t max_value, struct remote_server_stats *out, char *why,
                 size_t why_len);
    int (*del)(void *b, uint64_t timeout_ms, uint64_t max_value, const char *prefix, char hex[33], char *why,
               size_t why_len);
};

extern const struct remote_backend remote_backend_redis, remote_backend_http;

/* The first line of file `path` (malloc'd) in *out: 0, or -1 (unreadable). */
int remote_read_secret(const char *path, char **out);

#endif
