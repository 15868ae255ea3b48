/* remote.c — the remote tier on Redis (design in remote.h). */
#include "cache/remote.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "cache/entry.h"
#include "cache/remote_io.h"
#include "common/config.h"
#include "common/error.h"
#include "common/log.h"

#define COUNT(r, field, n) __atomic_add_fetch(&(r)->counters.field, (n), __ATOMIC_RELAXED)

enum op_kind { OP_PUSH, OP_RELEASE, OP_TOUCH, OP_STATS };

/* One unit of work for the writer thread. */
struct op {
    struct op *next;
    enum op_kind kind;
    struct cache_hash hash;
    int release_claim; /* OP_PUSH: give up our claim once the value is there */
    void *value;       /* OP_PUSH: the encoded record (the writer signs it) */
    size_t len;
    struct remote_counters delta; /* OP_STATS */
};

struct remote {
    /* where and who */
    char *host, *unix_path, *user, *password, *ns;
    int port, db;
    char name[512];
    struct rio_target target;
    uint64_t timeout_ms, max_value, expire_s;
    int readonly, level;
    char token[128]; /* this process's claim value */
    char where[STORE_SOURCE_WHERE_MAX + 1]; /* what a local copy records as its source */

    /* who signs what we push, whom we take values from */
    int signing;
    unsigned char sign_key[SIGN_SECRET_BYTES];
    const sign_trust *trust;

    /* the lookup connection */
    pthread_mutex_t lock;
    redisContext *ctx;
    pid_t ctx_pid;

    /* the breaker: calls fail fast until this time (CLOCK_MONOTONIC ns) */
    uint64_t breaker_until;

    /* claims this process holds */
    pthread_mutex_t claims_lock;
    struct cache_hash *claims;
    size_t nclaims, claims_cap;

    /* the writer thread and its queue */
    pthread_mutex_t qlock;
    pthread_cond_t qcond, qidle;
    struct op *head, *tail;
    size_t qbytes;
    int busy, stop, writer_running;
    pid_t writer_pid;
    pthread_t writer;
    redisContext *wctx;

    struct remote_counters counters;
};

static uint64_t now_ns(void) { return rio_now_ns(); }

/* The deadline of something that starts now and may take ms. */
static uint64_t deadline_in(uint64_t ms) { return now_ns() + ms * 1000000u; }

static void entry_key(const remote *r, struct cache_hash h, char kind, char *buf, size_t len)
{
    snprintf(buf, len, "%s:%c:%016llx%016llx", r->ns, kind, (unsigned long long)h.hi, (unsigned long long)h.lo);
}

/* ---- options ---------------------------------------------------------------- */

static char *dup_n(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n), d[n] = 0;
    return d;
}

static int parse_uint(const char *s, size_t n, int max, int *out)
{
    if (n == 0 || n > 9) return -1;
    int v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (s[i] - '0');
    }
    if (v > max) return -1;
    *out = v;
    return 0;
}

/* "user:password@", "user@", ":password@" or nothing before `end`; advances *p. */
static int parse_userinfo(remote *r, const char **p, const char *end)
{
    const char *at = memchr(*p, '@', (size_t)(end - *p));
    if (!at) return 0;
    const char *colon = memchr(*p, ':', (size_t)(at - *p));
    const char *user_end = colon ? colon : at;
    if (user_end > *p && !(r->user = dup_n(*p, (size_t)(user_end - *p)))) return -1;
    if (colon && !(r->password = dup_n(colon + 1, (size_t)(at - colon - 1)))) return -1;
    *p = at + 1;
    return 0;
}

/* redis://[user:password@]host[:port][/db] or unix://[user:password@]/path[?db=N] */
static int parse_url(remote *r, const char *url)
{
    r->port = 6379;
    if (!strncmp(url, "unix://", 7)) {
        const char *path = url + 7;
        if (parse_userinfo(r, &path, path + strcspn(path, "/"))) return -1;
        const char *q = strchr(path, '?');
        if (*path != '/') return -1;
        size_t n = q ? (size_t)(q - path) : strlen(path);
        if (q && (strncmp(q, "?db=", 4) || parse_uint(q + 4, strlen(q + 4), 1 << 20, &r->db))) return -1;
        return (r->unix_path = dup_n(path, n)) ? 0 : -1;
    }
    if (strncmp(url, "redis://", 8)) return -1;
    const char *p = url + 8, *end = p + strcspn(p, "/");
    if (parse_userinfo(r, &p, end)) return -1;
    const char *host_end, *port = NULL;
    if (*p == '[') { /* [IPv6]:port */
        const char *close = memchr(p, ']', (size_t)(end - p));
        if (!close) return -1;
        r->host = dup_n(p + 1, (size_t)(close - p - 1));
        host_end = close + 1;
        if (host_end < end && *host_end == ':') port = host_end + 1;
        else if (host_end != end) return -1;
    } else {
        const char *colon = memchr(p, ':', (size_t)(end - p));
        host_end = colon ? colon : end;
        r->host = dup_n(p, (size_t)(host_end - p));
        if (colon) port = colon + 1;
    }
    if (!r->host || !*r->host) return -1;
    if (port && parse_uint(port, (size_t)(end - port), 65535, &r->port)) return -1;
    if (*end == '/' && end[1] && parse_uint(end + 1, strlen(end + 1), 1 << 20, &r->db)) return -1;
    return 0;
}

static int read_password_file(remote *r, const char *path)
{
    FILE *f = fopen(path, "re");
    if (!f) return -1;
    char line[1024];
    int rc = fgets(line, sizeof line, f) ? 0 : -1;
    fclose(f);
    if (rc) return -1;
    line[strcspn(line, "\r\n")] = 0;
    free(r->password);
    r->password = strdup(line);
    memset(line, 0, sizeof line);
    return r->password ? 0 : -1;
}

static void free_remote(remote *r)
{
    sodium_memzero(r->sign_key, sizeof r->sign_key);
    if (r->password) sodium_memzero(r->password, strlen(r->password));
    free(r->host), free(r->unix_path), free(r->user), free(r->password), free(r->ns);
    free(r->claims);
    if (r->ctx) redisFree(r->ctx);
    pthread_mutex_destroy(&r->lock);
    pthread_mutex_destroy(&r->claims_lock);
    pthread_mutex_destroy(&r->qlock);
    pthread_cond_destroy(&r->qcond);
    pthread_cond_destroy(&r->qidle);
    free(r);
}

int remote_open(const struct remote_options *opt, remote **out)
{
    *out = NULL;
    if (!opt || !opt->url || !*opt->url) return CLSHIM_EINVAL;
    remote *r = calloc(1, sizeof *r);
    if (!r) return CLSHIM_ENOMEM;
    pthread_mutex_init(&r->lock, NULL);
    pthread_mutex_init(&r->claims_lock, NULL);
    pthread_mutex_init(&r->qlock, NULL);
    pthread_cond_init(&r->qcond, NULL);
    pthread_cond_init(&r->qidle, NULL);
    config_redact_url(opt->url, r->name, sizeof r->name);
    r->ns = strdup(opt->ns && *opt->ns ? opt->ns : "clshim");
    r->timeout_ms = opt->timeout_ms ? opt->timeout_ms : 50;
    r->max_value = opt->max_value ? opt->max_value : (uint64_t)64 << 20;
    r->expire_s = opt->expire_s;
    r->level = opt->compress_level;
    r->trust = opt->trust;
    if (opt->sign_key) memcpy(r->sign_key, opt->sign_key, sizeof r->sign_key), r->signing = 1;
    /* Trusting others but signing nothing: our values would be ignored by
     * our peers, and our claims would make them wait for nothing. */
    r->readonly = opt->readonly || (opt->trust && !r->signing);
    if (!r->ns || parse_url(r, opt->url) != 0 ||
        (opt->password_file && *opt->password_file && read_password_file(r, opt->password_file) != 0)) {
        free_remote(r);
        return CLSHIM_EINVAL;
    }
    r->target = (struct rio_target){r->host, r->unix_path, r->port, r->db, r->user, r->password};
    snprintf(r->where, sizeof r->where, "%.200s namespace %.40s", r->name, r->ns);
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(r->token, sizeof r->token, "%.64s:%ld:%lx", host, (long)getpid(),
             (unsigned long)(ts.tv_nsec ^ (ts.tv_sec << 20)));
    *out = r;
    return CLSHIM_OK;
}

const char *remote_name(const remote *r) { return r ? r->name : ""; }

/* ---- connections and the breaker ------------------------------------------- */

static int breaker_open(remote *r) { return now_ns() < __atomic_load_n(&r->breaker_until, __ATOMIC_RELAXED); }

/* A failure of the server: counted by kind, opens the breaker, logged once
 * per opening. */
static void trip(remote *r, enum rio_fault kind, const char *why)
{
    COUNT(r, errors, 1);
    switch (kind) {
    case RIO_TIMEOUT: COUNT(r, timeouts, 1); break;
    case RIO_GARBAGE: COUNT(r, garbage, 1); break;
    case RIO_OVERSIZE: COUNT(r, oversize, 1); break;
    case RIO_REFUSED: COUNT(r, refused, 1); break;
    case RIO_LOST: case RIO_OK: COUNT(r, lost, 1); break;
    }
    uint64_t now = now_ns(), old = __atomic_load_n(&r->breaker_until, __ATOMIC_RELAXED);
    uint64_t until = now + (uint64_t)REMOTE_BREAKER_S * 1000000000u;
    if (old <= now && __atomic_compare_exchange_n(&r->breaker_until, &old, until, 0, __ATOMIC_RELAXED,
                                                  __ATOMIC_RELAXED))
        log_msg(LOG_WARN, "remote cache %s: %s; remote tier off for %d s", r->name, why, REMOTE_BREAKER_S);
}

/* The largest reply a command may get: a value of max_value bytes and its
 * bulk header. */
static size_t reply_limit(const remote *r) { return (size_t)r->max_value + 64; }

/* Runs one command on *ctx before deadline, connecting first. NULL when the
 * breaker is open, the server failed (counted, breaker opened, connection
 * dropped: its state is unknown) or it answered an error (counted, logged
 * once). */
static redisReply *vcommand(remote *r, redisContext **ctx, pid_t *ctx_pid, uint64_t deadline, const char *fmt,
                            va_list ap)
{
    if (breaker_open(r)) return NULL;
    if (*ctx && *ctx_pid != getpid()) { /* inherited across fork: not ours to share */
        redisFree(*ctx);
        *ctx = NULL;
    }
    char why[256];
    enum rio_fault fault;
    if (!*ctx) {
        if (!(*ctx = rio_connect(&r->target, deadline, &fault, why, sizeof why))) {
            trip(r, fault, why);
            return NULL;
        }
        *ctx_pid = getpid();
    }
    redisReply *rep = rio_vcommand(*ctx, deadline, reply_limit(r), &fault, why, sizeof why, fmt, ap);
    if (!rep) {
        trip(r, fault, why);
        redisFree(*ctx);
        *ctx = NULL;
        return NULL;
    }
    if (rep->type == REDIS_REPLY_ERROR) {
        COUNT(r, errors, 1);
        COUNT(r, refused, 1);
        LOG_ONCE(LOG_WARN, "remote cache %s refused a command: %.200s", r->name, rep->str);
        freeReplyObject(rep);
        return NULL;
    }
    return rep;
}

static redisReply *command(remote *r, redisContext **ctx, pid_t *ctx_pid, uint64_t deadline, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *rep = vcommand(r, ctx, ctx_pid, deadline, fmt, ap);
    va_end(ap);
    return rep;
}

/* command() on the lookup connection, waiting for it (another thread's
 * lookup) no later than deadline: a lookup is bounded even behind others. */
static redisReply *lookup_command(remote *r, uint64_t deadline, const char *fmt, ...)
{
    /* pthread_mutex_timedlock takes CLOCK_REALTIME (sanitizers know it;
     * clocklock they do not): the monotonic deadline, moved to that clock. */
    uint64_t now = now_ns(), left = deadline > now ? deadline - now : 0;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    uint64_t ns = (uint64_t)until.tv_nsec + left % 1000000000u;
    until.tv_sec += (time_t)(left / 1000000000u + ns / 1000000000u);
    until.tv_nsec = (long)(ns % 1000000000u);
    if (pthread_mutex_timedlock(&r->lock, &until) != 0) {
        COUNT(r, errors, 1);
        COUNT(r, timeouts, 1); /* not the server's fault: no breaker */
        return NULL;
    }
    va_list ap;
    va_start(ap, fmt);
    redisReply *rep = vcommand(r, &r->ctx, &r->ctx_pid, deadline, fmt, ap);
    va_end(ap);
    pthread_mutex_unlock(&r->lock);
    return rep;
}

/* A reply of a type the command never gets: the server is not Redis, or
 * not honest. Counted as garbage; the breaker opens. */
static void wrong_type(remote *r, redisReply *rep)
{
    char why[64];
    snprintf(why, sizeof why, "a reply of the wrong type (%d)", rep->type);
    trip(r, RIO_GARBAGE, why);
    pthread_mutex_lock(&r->lock);
    if (r->ctx) redisFree(r->ctx), r->ctx = NULL;
    pthread_mutex_unlock(&r->lock);
}

/* ---- lookups -------------------------------------------------------------------- */

/* CLSHIM_OK with the record inside value, when it is signed as opt.trust
 * asks; CLSHIM_EPERM (counted, logged) when not. */
static int check_signer(remote *r, struct cache_hash hash, const redisReply *value, const void **rec,
                        size_t *rec_len, struct store_source *src)
{
    enum sign_verdict v = sign_open_value(value->str, value->len, rec, rec_len, src->signer);
    const char *why = v == SIGN_BAD ? "its signature does not verify (forged or changed)"
                    : !r->trust ? NULL
                    : v == SIGN_UNSIGNED ? "it is not signed"
                    : !sign_trust_has(r->trust, src->signer) ? "its signer is not in CLSHIM_REMOTE_TRUST"
                    : NULL;
    if (!why) {
        if (v == SIGN_SIGNED) src->flags |= STORE_SOURCE_SIGNED;
        else memset(src->signer, 0, sizeof src->signer);
        return CLSHIM_OK;
    }
    COUNT(r, untrusted, 1);
    char id[17] = "";
    if (v == SIGN_SIGNED) sign_key_id(src->signer, id);
    log_msg(LOG_INFO, "remote cache: entry %016llx%s%s: %s; ignored: untrusted", (unsigned long long)hash.hi,
            *id ? " signed by " : "", id, why);
    return CLSHIM_EPERM;
}

/* One GETRANGE of the entry before deadline, checked: signature (as
 * opt.trust asks), then the record as the store checks its own. */
static int get_value(remote *r, uint64_t deadline, struct cache_hash hash, const void *key, size_t key_len,
                     struct store_record *out, void **arena, struct store_source *src)
{
    char k[320];
    entry_key(r, hash, 'e', k, sizeof k);
    /* At most max_value + 1 bytes: a larger value is refused unread. */
    redisReply *rep = lookup_command(r, deadline, "GETRANGE %s 0 %llu", k, (unsigned long long)r->max_value);
    if (!rep) return CLSHIM_EIO;
    if (rep->type != REDIS_REPLY_STRING) {
        wrong_type(r, rep);
        freeReplyObject(rep);
        return CLSHIM_EIO;
    }
    *src = (struct store_source){.kind = STORE_SOURCE_REMOTE};
    snprintf(src->where, sizeof src->where, "%s", r->where);
    const void *rec;
    size_t rec_len;
    int rc;
    if (rep->len == 0) rc = CLSHIM_ENOTFOUND;
    else if ((uint64_t)rep->len > r->max_value) rc = CLSHIM_ECORRUPT;
    else if ((rc = check_signer(r, hash, rep, &rec, &rec_len, src)) == CLSHIM_OK)
        rc = entry_open_record(rec, rec_len, hash, key, key_len, out, arena);
    freeReplyObject(rep);
    if (rc == CLSHIM_ECORRUPT || rc == CLSHIM_ECOLLISION) {
        COUNT(r, corrupt, 1);
        log_msg(LOG_INFO, "remote cache: entry %016llx: %s; ignored", (unsigned long long)hash.hi,
                clshim_strerror(rc));
    }
    if (rc == CLSHIM_OK) out->source = NULL; /* the caller's to set (remote.h) */
    return rc;
}

static void enqueue(remote *r, struct op *op);

static int count_outcome(remote *r, struct cache_hash hash, int rc)
{
    if (rc == CLSHIM_OK) {
        COUNT(r, hits, 1);
        if (r->expire_s && !r->readonly) {
            struct op *op = calloc(1, sizeof *op);
            if (op) op->kind = OP_TOUCH, op->hash = hash, enqueue(r, op);
        }
    } else if (rc != CLSHIM_EIO) {
        COUNT(r, misses, 1);
    }
    return rc;
}

int remote_get(remote *r, struct cache_hash hash, const void *key, size_t key_len, struct store_record *out,
               void **arena, struct store_source *src)
{
    if (arena) *arena = NULL;
    if (!r || !out || !arena) return CLSHIM_EINVAL;
    struct store_source unused;
    return count_outcome(r, hash, get_value(r, deadline_in(r->timeout_ms), hash, key, key_len, out, arena,
                                            src ? src : &unused));
}

static void note_claim(remote *r, struct cache_hash hash)
{
    pthread_mutex_lock(&r->claims_lock);
    if (r->nclaims == r->claims_cap) {
        size_t cap = r->claims_cap ? 2 * r->claims_cap : 8;
        struct cache_hash *c = realloc(r->claims, cap * sizeof *c);
        if (c) r->claims = c, r->claims_cap = cap;
    }
    if (r->nclaims < r->claims_cap) r->claims[r->nclaims++] = hash;
    pthread_mutex_unlock(&r->claims_lock);
}

/* 1 when this process held a claim on hash (now forgotten). */
static int forget_claim(remote *r, struct cache_hash hash)
{
    int had = 0;
    pthread_mutex_lock(&r->claims_lock);
    for (size_t i = 0; i < r->nclaims; i++)
        if (r->claims[i].lo == hash.lo && r->claims[i].hi == hash.hi) {
            r->claims[i] = r->claims[--r->nclaims];
            had = 1;
            break;
        }
    pthread_mutex_unlock(&r->claims_lock);
    return had;
}

/* CLSHIM_OK: claimed (or, read-only, nobody claims it); CLSHIM_EBUSY:
 * another runner holds it; CLSHIM_EIO. */
static int try_claim(remote *r, uint64_t deadline, struct cache_hash hash, uint64_t ttl_ms)
{
    char k[320];
    entry_key(r, hash, 'c', k, sizeof k);
    redisReply *rep = r->readonly ? lookup_command(r, deadline, "EXISTS %s", k)
                                  : lookup_command(r, deadline, "SET %s %s NX PX %llu", k, r->token,
                                                   (unsigned long long)ttl_ms);
    if (!rep) return CLSHIM_EIO;
    int rc = CLSHIM_EIO;
    if (r->readonly && rep->type == REDIS_REPLY_INTEGER) rc = rep->integer ? CLSHIM_EBUSY : CLSHIM_OK;
    else if (!r->readonly && rep->type == REDIS_REPLY_STATUS) rc = CLSHIM_OK, note_claim(r, hash);
    else if (!r->readonly && rep->type == REDIS_REPLY_NIL) rc = CLSHIM_EBUSY;
    else wrong_type(r, rep);
    freeReplyObject(rep);
    return rc;
}

int remote_fetch(remote *r, struct cache_hash hash, const void *key, size_t key_len, uint64_t wait_ms,
                 struct store_record *out, void **arena, struct store_source *src)
{
    if (arena) *arena = NULL;
    if (!r || !out || !arena) return CLSHIM_EINVAL;
    struct store_source unused;
    if (!src) src = &unused;
    /* One deadline for the lookup and the claim; each later round of
     * waiting for another runner's build gets one of its own. */
    uint64_t io_deadline = deadline_in(r->timeout_ms);
    int rc = get_value(r, io_deadline, hash, key, key_len, out, arena, src);
    if (rc != CLSHIM_ENOTFOUND || wait_ms == 0) return count_outcome(r, hash, rc);
    uint64_t wait_until = deadline_in(wait_ms);
    unsigned sleep_us = 10000;
    for (;;) {
        rc = try_claim(r, io_deadline, hash, wait_ms);
        if (rc == CLSHIM_OK) {
            /* The last holder may have pushed and released just before. */
            rc = get_value(r, io_deadline, hash, key, key_len, out, arena, src);
            if (rc == CLSHIM_OK) remote_release(r, hash);
            return count_outcome(r, hash, rc); /* ENOTFOUND: ours to compile */
        }
        if (rc != CLSHIM_EBUSY) return count_outcome(r, hash, rc);
        if (now_ns() > wait_until) {
            log_msg(LOG_INFO, "waited %llu ms for another runner compiling the same program; compiling here",
                    (unsigned long long)wait_ms);
            return count_outcome(r, hash, CLSHIM_ENOTFOUND);
        }
        usleep(sleep_us);
        if (sleep_us < 50000) sleep_us *= 2;
        io_deadline = deadline_in(r->timeout_ms);
        rc = get_value(r, io_deadline, hash, key, key_len, out, arena, src);
        if (rc != CLSHIM_ENOTFOUND) return count_outcome(r, hash, rc);
    }
}

/* ---- the writer ------------------------------------------------------------------ */

static redisReply *release_claim(remote *r, uint64_t deadline, const char *claim_key, pid_t *pid)
{
    /* Only our own claim: it may have expired and been taken since. */
    return command(r, &r->wctx, pid, deadline, "EVAL %s 1 %s %s",
                   "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0",
                   claim_key, r->token);
}

/* SET of the value, signed first when we sign (here, on the writer: the
 * hash over the record is not the application's to wait for). */
static redisReply *push_value(remote *r, uint64_t deadline, const char *k, pid_t *pid, struct op *op)
{
    const void *value = op->value;
    size_t len = op->len;
    unsigned char *signed_value = NULL;
    if (r->signing) {
        if (!(signed_value = malloc(SIGN_ENVELOPE_SIZE + len))) return NULL;
        sign_value(op->value, len, r->sign_key, signed_value);
        memcpy(signed_value + SIGN_ENVELOPE_SIZE, op->value, len);
        value = signed_value, len += SIGN_ENVELOPE_SIZE;
    }
    redisReply *rep = r->expire_s ? command(r, &r->wctx, pid, deadline, "SET %s %b EX %llu", k, value, len,
                                            (unsigned long long)r->expire_s)
                                  : command(r, &r->wctx, pid, deadline, "SET %s %b", k, value, len);
    free(signed_value);
    return rep;
}

static void run_op(remote *r, struct op *op)
{
    char k[320], c[320], s[320];
    entry_key(r, op->hash, 'e', k, sizeof k);
    entry_key(r, op->hash, 'c', c, sizeof c);
    snprintf(s, sizeof s, "%s:stats", r->ns);
    redisReply *rep = NULL;
    pid_t pid = getpid();
    /* A push gets the time to send its value over a slow link on top. */
    uint64_t deadline = deadline_in(r->timeout_ms + (uint64_t)op->len * 1000 / REMOTE_PUSH_MIN_RATE);
    switch (op->kind) {
    case OP_PUSH:
        if (!(rep = push_value(r, deadline, k, &pid, op))) {
            COUNT(r, dropped, 1);
            break;
        }
        COUNT(r, pushes, 1);
        freeReplyObject(rep);
        rep = command(r, &r->wctx, &pid, deadline, "HINCRBY %s pushes 1", s);
        if (op->release_claim) {
            if (rep) freeReplyObject(rep);
            rep = release_claim(r, deadline, c, &pid); /* the value is there: others may take it */
        }
        break;
    case OP_RELEASE:
        rep = release_claim(r, deadline, c, &pid);
        break;
    case OP_TOUCH:
        rep = command(r, &r->wctx, &pid, deadline, "EXPIRE %s %llu", k, (unsigned long long)r->expire_s);
        break;
    case OP_STATS: {
        const struct { const char *name; uint64_t n; } add[] = {
            {"hits", op->delta.hits}, {"misses", op->delta.misses}, {"errors", op->delta.errors},
            {"corrupt", op->delta.corrupt}, {"untrusted", op->delta.untrusted}};
        for (size_t i = 0; i < sizeof add / sizeof *add; i++) {
            if (!add[i].n) continue;
            if (rep) freeReplyObject(rep);
            rep = command(r, &r->wctx, &pid, deadline, "HINCRBY %s %s %llu", s, add[i].name,
                          (unsigned long long)add[i].n);
        }
        break;
    }
    }
    if (rep) freeReplyObject(rep);
}

static void *writer_main(void *arg)
{
    remote *r = arg;
    pthread_mutex_lock(&r->qlock);
    for (;;) {
        while (!r->head && !r->stop) pthread_cond_wait(&r->qcond, &r->qlock);
        struct op *op = r->head;
        if (!op) break;
        r->head = op->next;
        if (!r->head) r->tail = NULL;
        r->busy = 1;
        pthread_mutex_unlock(&r->qlock);
        if (breaker_open(r)) COUNT(r, dropped, op->kind == OP_PUSH);
        else run_op(r, op);
        pthread_mutex_lock(&r->qlock);
        r->qbytes -= op->len;
        r->busy = 0;
        if (!r->head) pthread_cond_broadcast(&r->qidle);
        free(op->value);
        free(op);
    }
    pthread_mutex_unlock(&r->qlock);
    return NULL;
}

/* Queues op (taking it); starts the writer on first use and again in a
 * forked child, which has the queue but not the thread. */
static void enqueue(remote *r, struct op *op)
{
    pthread_mutex_lock(&r->qlock);
    if (r->writer_running && r->writer_pid != getpid()) {
        r->writer_running = 0, r->busy = 0;
        r->head = r->tail = NULL, r->qbytes = 0; /* the parent's: left alone */
        r->wctx = NULL;
    }
    if (r->qbytes + op->len > REMOTE_QUEUE_MAX_BYTES) {
        pthread_mutex_unlock(&r->qlock);
        COUNT(r, dropped, 1);
        LOG_ONCE(LOG_INFO, "remote cache: push queue full; dropping pushes");
        free(op->value);
        free(op);
        return;
    }
    if (!r->writer_running) {
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        if (pthread_create(&r->writer, &attr, writer_main, r) == 0) r->writer_running = 1, r->writer_pid = getpid();
        pthread_attr_destroy(&attr);
    }
    if (!r->writer_running) {
        pthread_mutex_unlock(&r->qlock);
        COUNT(r, dropped, 1);
        free(op->value);
        free(op);
        return;
    }
    op->next = NULL;
    if (r->tail) r->tail->next = op;
    else r->head = op;
    r->tail = op;
    r->qbytes += op->len;
    pthread_cond_signal(&r->qcond);
    pthread_mutex_unlock(&r->qlock);
}

int remote_push(remote *r, struct cache_hash hash, const void *key, size_t key_len, const struct store_record *rec)
{
    if (!r || !rec) return CLSHIM_EINVAL;
    if (r->readonly) return CLSHIM_EREADONLY;
    if (breaker_open(r)) return CLSHIM_EIO;
    struct op *op = calloc(1, sizeof *op);
    if (!op) return CLSHIM_ENOMEM;
    struct store_record built_here = *rec;
    built_here.source = NULL; /* a source is this machine's note, never sent */
    int rc = entry_encode_record(hash, key, key_len, &built_here, r->level, (uint64_t)time(NULL), &op->value,
                                 &op->len);
    if (rc == CLSHIM_OK && op->len + (r->signing ? SIGN_ENVELOPE_SIZE : 0) > r->max_value) rc = CLSHIM_ETOOBIG;
    if (rc) {
        free(op->value);
        free(op);
        return rc;
    }
    op->kind = OP_PUSH;
    op->hash = hash;
    op->release_claim = forget_claim(r, hash);
    enqueue(r, op);
    return CLSHIM_OK;
}

void remote_release(remote *r, struct cache_hash hash)
{
    if (!r || !forget_claim(r, hash)) return;
    struct op *op = calloc(1, sizeof *op);
    if (op) op->kind = OP_RELEASE, op->hash = hash, enqueue(r, op);
}

void remote_counters_get(remote *r, struct remote_counters *out)
{
    memset(out, 0, sizeof *out);
    if (!r) return;
    /* Every field is a uint64_t counter (remote.h): read each atomically. */
    _Static_assert(sizeof *out % sizeof(uint64_t) == 0, "remote_counters holds only uint64_t counters");
    const uint64_t *from = (const uint64_t *)&r->counters;
    uint64_t *to = (uint64_t *)out;
    for (size_t i = 0; i < sizeof *out / sizeof *to; i++) to[i] = __atomic_load_n(&from[i], __ATOMIC_RELAXED);
}

void remote_close(remote *r, struct remote_counters *final)
{
    if (final) memset(final, 0, sizeof *final);
    if (!r) return;
    while (r->nclaims) remote_release(r, r->claims[r->nclaims - 1]);
    if (!r->readonly) {
        struct remote_counters c;
        remote_counters_get(r, &c);
        struct op *op = (c.hits || c.misses || c.errors || c.corrupt || c.untrusted) ? calloc(1, sizeof *op) : NULL;
        if (op) {
            op->kind = OP_STATS;
            op->delta = c;
            enqueue(r, op);
        }
    }
    pthread_mutex_lock(&r->qlock);
    int mine = r->writer_running && r->writer_pid == getpid();
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += REMOTE_DRAIN_MS / 1000;
    until.tv_nsec += (REMOTE_DRAIN_MS % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
    while (mine && (r->head || r->busy))
        if (pthread_cond_timedwait(&r->qidle, &r->qlock, &until) == ETIMEDOUT) break;
    int drained = !r->head && !r->busy;
    r->stop = 1;
    pthread_cond_signal(&r->qcond);
    pthread_mutex_unlock(&r->qlock);
    if (final) remote_counters_get(r, final);
    if (!mine) {
        free_remote(r); /* no writer in this process */
        return;
    }
    if (!drained) {
        /* The writer still talks to the server: leave it (and r) to exit. */
        log_msg(LOG_INFO, "remote cache %s: pushes still queued after %d ms; dropped", r->name, REMOTE_DRAIN_MS);
        return;
    }
    pthread_join(r->writer, NULL);
    if (r->wctx) redisFree(r->wctx);
    free_remote(r);
}

/* ---- administration ---------------------------------------------------------------- */

/* An administrator's command gets its own connection, and each of its
 * commands the timeout (a SCAN of a large namespace takes many). */
static redisContext *admin_connect(remote *r, char *why, size_t why_len)
{
    enum rio_fault fault;
    return rio_connect(&r->target, deadline_in(r->timeout_ms), &fault, why, why_len);
}

static redisReply *admin(remote *r, redisContext *c, char *why, size_t why_len, const char *fmt, ...)
{
    enum rio_fault fault;
    va_list ap;
    va_start(ap, fmt);
    redisReply *rep = rio_vcommand(c, deadline_in(r->timeout_ms), reply_limit(r), &fault, why, why_len, fmt, ap);
    va_end(ap);
    if (rep && rep->type == REDIS_REPLY_ERROR) snprintf(why, why_len, "%s", rep->str);
    return rep;
}

int remote_ping(remote *r, double *ms, char *why, size_t why_len)
{
    uint64_t t0 = now_ns();
    redisContext *c = admin_connect(r, why, why_len);
    if (!c) return CLSHIM_EIO;
    redisReply *rep = admin(r, c, why, why_len, "PING");
    int rc = rep && rep->type == REDIS_REPLY_STATUS ? CLSHIM_OK : CLSHIM_EIO;
    if (rc && rep && rep->type != REDIS_REPLY_ERROR) snprintf(why, why_len, "unexpected reply");
    if (rep) freeReplyObject(rep);
    redisFree(c);
    *ms = (double)(now_ns() - t0) / 1e6;
    return rc;
}

/* The value of "name:" in an INFO reply, copied into buf. */
static void info_field(const char *info, const char *name, char *buf, size_t len)
{
    size_t n = strlen(name);
    buf[0] = 0;
    for (const char *p = info; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (!strncmp(p, name, n) && p[n] == ':') {
            size_t v = strcspn(p + n + 1, "\r\n");
            snprintf(buf, len, "%.*s", (int)v, p + n + 1);
            return;
        }
}

int remote_server_stats(remote *r, struct remote_server_stats *out, char *why, size_t why_len)
{
    memset(out, 0, sizeof *out);
    redisContext *c = admin_connect(r, why, why_len);
    if (!c) return CLSHIM_EIO;
    int rc = CLSHIM_EIO;
    char buf[64], pattern[320], stats_key[320];
    redisReply *rep = admin(r, c, why, why_len, "INFO");
    if (!rep || rep->type != REDIS_REPLY_STRING) goto out;
    info_field(rep->str, "redis_version", out->version, sizeof out->version);
    info_field(rep->str, "maxmemory_policy", out->policy, sizeof out->policy);
    info_field(rep->str, "used_memory", buf, sizeof buf);
    out->used_memory = strtoull(buf, NULL, 10);
    info_field(rep->str, "maxmemory", buf, sizeof buf);
    out->maxmemory = strtoull(buf, NULL, 10);
    freeReplyObject(rep);
    /* Every key of the namespace: a SCAN, for an administrator's command only. */
    snprintf(pattern, sizeof pattern, "%s:*", r->ns);
    size_t ns_len = strlen(r->ns);
    char cursor[32] = "0";
    do {
        rep = admin(r, c, why, why_len, "SCAN %s MATCH %s COUNT 1000", cursor, pattern);
        if (!rep || rep->type != REDIS_REPLY_ARRAY || rep->elements != 2) goto out;
        snprintf(cursor, sizeof cursor, "%s", rep->element[0]->str ? rep->element[0]->str : "0");
        redisReply *keys = rep->element[1];
        for (size_t i = 0; i < keys->elements; i++) {
            const char *k = keys->element[i]->str;
            if (!k || strlen(k) < ns_len + 3) continue;
            if (!strncmp(k + ns_len, ":e:", 3)) {
                out->entries++;
                redisReply *len = admin(r, c, why, why_len, "STRLEN %s", k);
                if (len && len->type == REDIS_REPLY_INTEGER) out->entry_bytes += (uint64_t)len->integer;
                if (len) freeReplyObject(len);
            } else if (!strncmp(k + ns_len, ":c:", 3)) {
                out->claims++;
            }
        }
        freeReplyObject(rep);
        rep = NULL;
    } while (strcmp(cursor, "0"));
    snprintf(stats_key, sizeof stats_key, "%s:stats", r->ns);
    rep = admin(r, c, why, why_len, "HGETALL %s", stats_key);
    if (!rep || rep->type != REDIS_REPLY_ARRAY) goto out;
    for (size_t i = 0; i + 1 < rep->elements; i += 2) {
        const char *name = rep->element[i]->str;
        uint64_t v = strtoull(rep->element[i + 1]->str ? rep->element[i + 1]->str : "0", NULL, 10);
        if (!name) continue;
        if (!strcmp(name, "hits")) out->hits = v;
        else if (!strcmp(name, "misses")) out->misses = v;
        else if (!strcmp(name, "pushes")) out->pushes = v;
        else if (!strcmp(name, "errors")) out->errors = v;
        else if (!strcmp(name, "corrupt")) out->corrupt = v;
        else if (!strcmp(name, "untrusted")) out->untrusted = v;
    }
    rc = CLSHIM_OK;
out:
    if (rc && rep && rep->type != REDIS_REPLY_ERROR) snprintf(why, why_len, "unexpected reply");
    if (rep) freeReplyObject(rep);
    redisFree(c);
    return rc;
}

int remote_delete(remote *r, const char *prefix, char hex[33], char *why, size_t why_len)
{
    redisContext *c = admin_connect(r, why, why_len);
    if (!c) return CLSHIM_EIO;
    char pattern[400], cursor[32] = "0", found[320] = "";
    size_t matches = 0, ns_len = strlen(r->ns);
    snprintf(pattern, sizeof pattern, "%s:e:%s*", r->ns, prefix);
    redisReply *rep = NULL;
    int rc = CLSHIM_EIO;
    do {
        rep = admin(r, c, why, why_len, "SCAN %s MATCH %s COUNT 1000", cursor, pattern);
        if (!rep || rep->type != REDIS_REPLY_ARRAY || rep->elements != 2) goto out;
        snprintf(cursor, sizeof cursor, "%s", rep->element[0]->str ? rep->element[0]->str : "0");
        for (size_t i = 0; i < rep->element[1]->elements; i++) {
            const char *k = rep->element[1]->element[i]->str;
            /* SCAN may return a key twice: count distinct ones */
            if (k && strlen(k) == ns_len + 3 + 32 && strcmp(k, found) && matches++ == 0)
                snprintf(found, sizeof found, "%s", k);
        }
        freeReplyObject(rep);
        rep = NULL;
    } while (strcmp(cursor, "0"));
    rc = matches == 0 ? CLSHIM_ENOTFOUND : matches > 1 ? CLSHIM_EBUSY : CLSHIM_OK;
    if (rc == CLSHIM_OK) {
        snprintf(hex, 33, "%s", found + ns_len + 3);
        rep = admin(r, c, why, why_len, "DEL %s", found);
        if (!rep || rep->type != REDIS_REPLY_INTEGER) rc = CLSHIM_EIO;
        else if (rep->integer == 0) rc = CLSHIM_ENOTFOUND; /* deleted meanwhile */
    }
out:
    if (rc == CLSHIM_EIO && rep && rep->type != REDIS_REPLY_ERROR) snprintf(why, why_len, "unexpected reply");
    if (rep) freeReplyObject(rep);
    redisFree(c);
    return rc;
}
