/* remote.h — the remote tier: a cache shared by a fleet, on a Redis server
 * (or any server behind cache/remote_backend.h).
 *
 * Design. The remote tier sits behind the local LMDB store (store.h): the
 * program layer asks it after a local miss and stores what it finds locally;
 * what a process compiles it pushes here too, so one runner's compile spares
 * every other runner. Values are exactly the local store's entry records
 * (entry.h: header, full key material, build log, compressed binary, record
 * checksum, the binding of the binary to its key), encoded by
 * entry_encode_record() and checked by entry_open_record() exactly as the
 * store does, so a remote value is verified like a local one and one that
 * does not verify (a binary moved under another key included), or that
 * belongs to another key, is ignored.
 *
 * Keys on the server, under the namespace `ns` (CLSHIM_REMOTE_NAMESPACE):
 *   <ns>:e:<32 hex>  an entry (the key hash as key_hash_hex() prints it)
 *   <ns>:c:<32 hex>  a build claim: "<host>:<pid>:<nonce>", SET NX PX, so
 *                    runners that start together compile once (fleet single
 *                    flight); it expires by itself if its holder dies
 *   <ns>:stats       a hash of fleet counters (hits, misses, pushes)
 *
 * Never slower, never failing. A lookup (remote_get(), and remote_fetch()
 * up to its claim) has one deadline, opt.timeout_ms after it starts, for
 * everything it does: resolving the host, connecting, authenticating, every
 * command and every byte of every reply (remote_io.h), and for waiting for
 * the lookup connection another thread is using. So a server that is
 * silent, trickles its reply, sends a huge value slowly, answers garbage or
 * dies mid-reply costs a lookup at most opt.timeout_ms. Replies are bounded
 * by opt.max_value (a read asks for at most that many bytes plus one, and a
 * reply that grows past it ends the exchange). The first failure of the
 * server opens a circuit breaker: for REMOTE_BREAKER_S seconds every call
 * returns CLSHIM_EIO at once, and one line is logged per opening, never one
 * per call. Each kind of failure is counted (struct remote_counters).
 * Pushes are encoded by the caller's thread (a copy), signed and sent by one
 * writer thread, so no push is on the application's critical path; each
 * writer command has a deadline too (opt.timeout_ms, plus the time to send
 * the value at REMOTE_PUSH_MIN_RATE), so a hostile server holds the writer
 * for one push at most before the breaker drops the rest; the queue is
 * bounded (REMOTE_QUEUE_MAX_BYTES) and drops what does not fit.
 *
 * Trusted writers (cache/sign.h). With opt.sign_key every pushed value is
 * signed (an envelope before the record). With opt.trust a lookup takes only
 * values signed by a key of the set: an unsigned value, one signed by
 * another key, or one whose signature does not verify is ignored and counted
 * (untrusted) and never returned, so it never reaches the local cache. A
 * value whose envelope is present but does not verify is ignored even
 * without opt.trust (nothing honest writes one). Without opt.trust unsigned
 * values are taken as before. A process with opt.trust and no sign key
 * never writes (as opt.readonly): what it pushed, its peers would ignore,
 * and its claims would make them wait for values that never come.
 *
 * Credentials: a password from the URL or from opt.password_file; neither is
 * ever logged (log lines name the server by config_redact_url()). hiredis
 * 0.14 (Debian 12) has no TLS: use a loopback, unix socket or tunnel.
 *
 * Thread safety: every function may be called from any thread. Lookups share
 * one connection under a mutex; the writer has its own.
 * Errors: CLSHIM_OK or a clshim_err (common/error.h).
 */
#ifndef CLSHIM_REMOTE_H
#define CLSHIM_REMOTE_H

#include <stddef.h>
#include <stdint.h>

#include "cache/sign.h"
#include "cache/store.h"

typedef struct remote remote;

/* How long the breaker stays open after a failure (seconds). */
#define REMOTE_BREAKER_S 30
/* Bytes of encoded values the writer queue holds at most. */
#define REMOTE_QUEUE_MAX_BYTES ((size_t)256 << 20)
/* How long remote_close() waits for queued pushes (milliseconds). */
#define REMOTE_DRAIN_MS 5000
/* The slowest link a push is given time for: its deadline is the timeout
 * plus its size at this rate (bytes per second). */
#define REMOTE_PUSH_MIN_RATE ((uint64_t)8 << 20)

struct remote_options {
    const char *url;           /* redis://[user:password@]host[:port][/db],
                                  unix://[user:password@]/path[?db=N],
                                  http[s]://[user:password@]host[:port]/prefix or
                                  s3://bucket/prefix (remote_http.c) */
    const char *password_file; /* first line is the password; NULL or "": none */
    const char *endpoint;      /* s3://: the service's URL; NULL or "": AWS's for AWS_REGION */
    const char *ca_file;       /* https://, s3://: a PEM file of the CAs to trust; NULL or "": the system's */
    const char *ns;            /* key namespace; NULL or "": "clshim" */
    uint64_t timeout_ms;       /* the deadline of a whole lookup; 0: 50 */
    uint64_t max_value;        /* largest encoded value read or written; 0: 64 MiB */
    uint64_t expire_s;         /* entries expire this long after a push or hit; 0: never */
    int readonly;              /* never write: no pushes, claims or statistics */
    int compress_level;        /* zstd level of pushed records */
    const unsigned char *sign_key; /* SIGN_SECRET_BYTES to sign pushes with (copied); NULL: unsigned */
    const sign_trust *trust;   /* take only values signed by these keys (borrowed: must outlive
                                  the handle); NULL: any value that verifies */
    int hold_refusals;         /* a push the server refuses is not logged but held for
                                  remote_take_refusals() (the capture helper's journal) */
    const unsigned char *seal_key; /* SIGN_SECRET_BYTES (copied): pushed records are sealed
                                      (cache/sign.h), so readers' copies carry the seal; NULL: not */
    const sign_trust *seal_trust; /* take only values whose record is sealed by these keys
                                     (CLSHIM_TRUST; borrowed); NULL: any */
};

/* Parses the options; connects nothing yet (the first call does). Returns
 * CLSHIM_EINVAL for a URL that is not one of the two forms (or a password
 * file that cannot be read), CLSHIM_ENOMEM. */
int remote_open(const struct remote_options *opt, remote **out);

/* What this process did, since remote_open(): lookups answered, not
 * answered, failed commands (errors, the sum of the five kinds after it),
 * values ignored as corrupt or untrusted, values pushed, pushes dropped. */
struct remote_counters {
    uint64_t hits, misses, errors, corrupt, pushes, dropped;
    uint64_t timeouts;  /* a deadline passed: silent, trickling or slow servers */
    uint64_t lost;      /* cannot connect, or the connection closed or failed mid-reply */
    uint64_t garbage;   /* replies that are not the Redis protocol, or of the wrong type */
    uint64_t oversize;  /* replies larger than max_value */
    uint64_t refused;   /* error replies: authentication, permissions */
    uint64_t untrusted; /* values not signed by a trusted key (or forged): ignored */
    uint64_t pushes_refused; /* pushes the server answered with an error (also in refused):
                                the tier goes on; the first is said once (remote_take_refusals()) */
};

/* Waits up to REMOTE_DRAIN_MS for queued pushes, releases the claims this
 * process still holds, adds this process's counters to the fleet's, and
 * frees. Queued work still unsent then is dropped. *final (may be NULL)
 * receives this process's counters as of the end. NULL r is a no-op. */
void remote_close(remote *r, struct remote_counters *final);

/* The server as logs may name it: the URL without its password. */
const char *remote_name(const remote *r);

/* Looks `hash` up: CLSHIM_OK with *out pointing into *arena (free it with
 * store_record_free()) when the value verifies and its key material equals
 * key[0..key_len); *src (may be NULL) then says where it came from: this
 * server and namespace, and the signer when signed (out->source is NULL:
 * the caller sets it to src when it stores the record). CLSHIM_ENOTFOUND:
 * absent. CLSHIM_ECORRUPT: present but fails verification or exceeds
 * max_value (ignored). CLSHIM_ECOLLISION: another key's. CLSHIM_EPERM: not
 * signed by a trusted key, or forged (ignored). CLSHIM_EIO: the server
 * failed or the breaker is open. */
int remote_get(remote *r, struct cache_hash hash, const void *key, size_t key_len, struct store_record *out,
               void **arena, struct store_source *src);

/* remote_get(), then fleet single flight on a miss: claims the key (SET NX
 * PX wait_ms) and returns CLSHIM_ENOTFOUND with the claim held (this
 * process compiles; remote_push() or remote_release() gives it up); or,
 * when another runner holds the claim, polls until its value arrives
 * (CLSHIM_OK), its claim goes (then claims itself), or wait_ms pass
 * (CLSHIM_ENOTFOUND: compile). Read-only: waits for a claim it sees but
 * takes none. Other errors as remote_get(). */
int remote_fetch(remote *r, struct cache_hash hash, const void *key, size_t key_len, uint64_t wait_ms,
                 struct store_record *out, void **arena, struct store_source *src);

/* Queues `rec` to be stored under `hash` (the record is encoded and copied
 * now; the caller's buffers may go). Then releases this process's claim on
 * it, if any. CLSHIM_EREADONLY (read-only), CLSHIM_ETOOBIG (over max_value),
 * CLSHIM_EIO (breaker open), CLSHIM_EBUSY (queue full: dropped),
 * CLSHIM_ENOMEM. */
int remote_push(remote *r, struct cache_hash hash, const void *key, size_t key_len, const struct store_record *rec);

/* Waits at most timeout_ms until the writer has sent (or dropped) what is
 * queued: the capture helper, so that `clshim cache wait` returns after
 * the pushes of the captures it waited for, and tells their refusals. */
void remote_flush(remote *r, uint64_t timeout_ms);

/* With opt.hold_refusals: the number of pushes refused since the last
 * call, and the first one's line (what the log would have said) in line. */
unsigned remote_take_refusals(remote *r, char *line, size_t len);

/* Gives up this process's claim on `hash` (queued); a no-op when none. */
void remote_release(remote *r, struct cache_hash hash);

void remote_counters_get(remote *r, struct remote_counters *out);

/* `clshim cache remote ping`: one PING round trip; *ms receives its time.
 * CLSHIM_EIO with a reason in why[0..why_len) (no credentials in it). */
int remote_ping(remote *r, double *ms, char *why, size_t why_len);

/* `clshim cache remote stats`: what the server says about the namespace. */
struct remote_server_stats {
    char version[32];          /* redis_version */
    char policy[32];           /* maxmemory-policy */
    uint64_t used_memory, maxmemory;
    uint64_t entries, entry_bytes, claims; /* keys of the namespace (a SCAN) */
    uint64_t hits, misses, pushes;         /* fleet counters (<ns>:stats) */
    uint64_t errors, corrupt, untrusted;   /* fleet counters: failed commands, values ignored */
    int unlisted;              /* HTTP, S3: entries, memory and fleet counters unknown (version "HTTP", "S3") */
};
int remote_server_stats(remote *r, struct remote_server_stats *out, char *why, size_t why_len);

/* `clshim cache remote rm`: deletes the entry whose key starts with the hex
 * digits `prefix` (1-32, lower case) from the server. CLSHIM_OK with the
 * full key in hex[33]; CLSHIM_ENOTFOUND: no entry matches; CLSHIM_EBUSY:
 * more than one does (give more digits); CLSHIM_EINVAL: HTTP and S3 need all
 * 32 digits (they list nothing); CLSHIM_EIO with a reason in why. */
int remote_delete(remote *r, const char *prefix, char hex[33], char *why, size_t why_len);

#endif
