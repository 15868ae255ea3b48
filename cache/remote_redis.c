/* remote_redis.c — the remote tier's Redis backend (remote_backend.h):
 * keys <ns>:e:<hash> (entries), <ns>:c:<hash> (claims, SET NX PX) and
 * <ns>:stats (fleet counters), each command bounded by a deadline
 * (remote_io.h). */
#include <hiredis/hiredis.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/remote_backend.h"
#include "cache/remote_io.h"
#include "common/error.h"

struct redis_be {
    char *host, *unix_path, *user, *password, *ns;
    int port, db;
    struct rio_target target;
};

/* The deadline of something that starts now and may take ms. */
static uint64_t deadline_in(uint64_t ms) { return rio_now_ns() + ms * 1000000u; }

static void key_of(const struct redis_be *r, struct cache_hash h, char kind, char *buf, size_t len)
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
static int parse_userinfo(struct redis_be *r, const char **p, const char *end)
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
static int parse_url(struct redis_be *r, const char *url)
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


static void be_close(void *b)
{
    struct redis_be *r = b;
    if (!r) return;
    if (r->password) sodium_memzero(r->password, strlen(r->password));
    free(r->host), free(r->unix_path), free(r->user), free(r->password), free(r->ns);
    free(r);
}

static int be_open(const struct remote_options *opt, const char *ns, void **out)
{
    struct redis_be *r = calloc(1, sizeof *r);
    if (!r) return CLSHIM_ENOMEM;
    char *pw = NULL;
    if (!(r->ns = strdup(ns)) || parse_url(r, opt->url) != 0 ||
        (opt->password_file && *opt->password_file && remote_read_secret(opt->password_file, &pw) != 0)) {
        be_close(r);
        return CLSHIM_EINVAL;
    }
    if (pw) {
        if (r->password) sodium_memzero(r->password, strlen(r->password));
        free(r->password);
        r->password = pw;
    }
    r->target = (struct rio_target){r->host, r->unix_path, r->port, r->db, r->user, r->password};
    *out = r;
    return CLSHIM_OK;
}

/* The largest reply a command may get: a value of max_value bytes and its
 * bulk header. */
struct redis_conn {
    redisContext *c;
    size_t max_reply;
};

static void *be_connect(void *b, uint64_t deadline, uint64_t max_value, enum rio_fault *fault, char *why,
                        size_t why_len)
{
    struct redis_be *r = b;
    struct redis_conn *c = calloc(1, sizeof *c);
    if (!c) {
        *fault = RIO_LOST;
        snprintf(why, why_len, "out of memory");
        return NULL;
    }
    c->max_reply = (size_t)max_value + 64;
    if (!(c->c = rio_connect(&r->target, deadline, fault, why, why_len))) {
        free(c);
        return NULL;
    }
    return c;
}

static void be_disconnect(void *conn)
{
    struct redis_conn *c = conn;
    if (c) redisFree(c->c), free(c);
}

static void be_drop(void *hold)
{
    if (hold) freeReplyObject(hold);
}

/* A reply of a type the command never gets: the server is not Redis, or
 * not honest. */
static enum rio_fault wrong_type(const redisReply *rep, char *why, size_t why_len)
{
    snprintf(why, why_len, "a reply of the wrong type (%d)", rep->type);
    return RIO_GARBAGE;
}

static enum rio_fault be_exec(void *b, void *conn, struct rb_req *q, uint64_t deadline, char *why, size_t why_len)
{
    struct redis_be *r = b;
    struct redis_conn *c = conn;
    char k[320], s[320];
    key_of(r, q->hash, q->op == RB_CLAIM || q->op == RB_PEEK || q->op == RB_RELEASE ? 'c' : 'e', k, sizeof k);
    snprintf(s, sizeof s, "%s:stats", r->ns);
    enum rio_fault f = RIO_OK;
    redisReply *rep = NULL;
#define CMD(...) rio_command(c->c, deadline, c->max_reply, &f, why, why_len, __VA_ARGS__)
    switch (q->op) {
    case RB_GET: /* at most max_value + 1 bytes: a larger value is refused unread */
        rep = CMD("GETRANGE %s 0 %llu", k, (unsigned long long)(c->max_reply - 64));
        break;
    case RB_PUT:
        rep = q->n ? CMD("SET %s %b EX %llu", k, q->value, q->len, (unsigned long long)q->n)
                   : CMD("SET %s %b", k, q->value, q->len);
        break;
    case RB_TOUCH: rep = CMD("EXPIRE %s %llu", k, (unsigned long long)q->n); break;
    case RB_CLAIM: rep = CMD("SET %s %s NX PX %llu", k, q->token, (unsigned long long)q->n); break;
    case RB_PEEK: rep = CMD("EXISTS %s", k); break;
    case RB_RELEASE: /* only our own claim: it may have expired and been taken since */
        rep = CMD("EVAL %s 1 %s %s",
                  "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0", k,
                  q->token);
        break;
    case RB_COUNT: rep = CMD("HINCRBY %s %s %llu", s, q->field, (unsigned long long)q->n); break;
    case RB_PING: rep = CMD("PING"); break;
    }
#undef CMD
    if (!rep) return f;
    if (rep->type == REDIS_REPLY_ERROR) {
        snprintf(why, why_len, "%.200s", rep->str);
        freeReplyObject(rep);
        return RIO_DENIED;
    }
    switch (q->op) {
    case RB_GET:
        if (rep->type != REDIS_REPLY_STRING) f = wrong_type(rep, why, why_len);
        q->found = rep->type == REDIS_REPLY_STRING && rep->len > 0;
        if (q->found) {
            q->out = rep->str, q->out_len = rep->len, q->hold = rep;
            return RIO_OK;
        }
        break;
    case RB_CLAIM:
        if (rep->type == REDIS_REPLY_STATUS) q->claim = RB_CLAIMED;
        else if (rep->type == REDIS_REPLY_NIL) q->claim = RB_BUSY;
        else f = wrong_type(rep, why, why_len);
        break;
    case RB_PEEK:
        if (rep->type == REDIS_REPLY_INTEGER) q->claim = rep->integer ? RB_BUSY : RB_FREE;
        else f = wrong_type(rep, why, why_len);
        break;
    case RB_PING:
        if (rep->type != REDIS_REPLY_STATUS) snprintf(why, why_len, "unexpected reply"), f = RIO_GARBAGE;
        break;
    default: break;
    }
    freeReplyObject(rep);
    return f;
}

/* ---- administration ---------------------------------------------------------------- */

/* An administrator's command gets its own connection, and each of its
 * commands the timeout (a SCAN of a large namespace takes many). */
struct admin_ctx {
    struct redis_be *be;
    uint64_t timeout_ms;
    size_t max_reply;
};

static redisContext *admin_connect(struct admin_ctx *a, char *why, size_t why_len)
{
    enum rio_fault fault;
    return rio_connect(&a->be->target, deadline_in(a->timeout_ms), &fault, why, why_len);
}

static redisReply *admin(struct admin_ctx *a, redisContext *c, char *why, size_t why_len, const char *fmt, ...)
{
    enum rio_fault fault;
    va_list ap;
    va_start(ap, fmt);
    redisReply *rep = rio_vcommand(c, deadline_in(a->timeout_ms), a->max_reply, &fault, why, why_len, fmt, ap);
    va_end(ap);
    if (rep && rep->type == REDIS_REPLY_ERROR) snprintf(why, why_len, "%s", rep->str);
    return rep;
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

static int be_stats(void *b, uint64_t timeout_ms, uint64_t max_value, struct remote_server_stats *out, char *why,
                    size_t why_len)
{
    struct admin_ctx a = {b, timeout_ms, (size_t)max_value + 64}, *r = &a;
    const char *ns = a.be->ns;
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
    snprintf(pattern, sizeof pattern, "%s:*", ns);
    size_t ns_len = strlen(ns);
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
    snprintf(stats_key, sizeof stats_key, "%s:stats", ns);
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

static int be_del(void *b, uint64_t timeout_ms, uint64_t max_value, const char *prefix, char hex[33], char *why,
                  size_t why_len)
{
    struct admin_ctx a = {b, timeout_ms, (size_t)max_value + 64}, *r = &a;
    const char *ns = a.be->ns;
    redisContext *c = admin_connect(r, why, why_len);
    if (!c) return CLSHIM_EIO;
    char pattern[400], cursor[32] = "0", found[320] = "";
    size_t matches = 0, ns_len = strlen(ns);
    snprintf(pattern, sizeof pattern, "%s:e:%s*", ns, prefix);
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

const struct remote_backend remote_backend_redis = {
    .scheme = "redis|unix",
    .open = be_open,
    .close = be_close,
    .connect = be_connect,
    .disconnect = be_disconnect,
    .exec = be_exec,
    .drop = be_drop,
    .stats = be_stats,
    .del = be_del,
};
