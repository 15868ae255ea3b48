/* remote.c — the remote tier, on any server behind remote_backend.h
 * (design in remote.h). */
#include "cache/remote.h"

#include <errno.h>
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
#include "cache/remote_backend.h"
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
    const struct remote_backend *be;
    void *b;
    char *ns;
    char name[512];
    uint64_t timeout_ms, max_value, expire_s;
    int readonly, level;
    char token[128]; /* this process's claim value */
    char where[STORE_SOURCE_WHERE_MAX + 1]; /* what a local copy records as its source */

    /* who signs what we push, whom we take values from */
    int signing;
    unsigned char sign_key[SIGN_SECRET_BYTES];
    int sealing;
    unsigned char seal_key[SIGN_SECRET_BYTES];
    const sign_trust *seal_trust;
    const sign_trust *trust;

    /* the lookup connection */
    pthread_mutex_t lock;
    void *ctx;
    pid_t ctx_pid;

    /* the breaker: calls fail fast until this time (CLOCK_MONOTONIC ns) */
    uint64_t breaker_until;

    /* claims this process holds */
    pthread_mutex_t claims_lock;
    struct cache_hash *claims;
    size_t nclaims, claims_cap;

    /* pushes the server refused (the writer's): said once, or held for
     * remote_take_refusals() (opt.hold_refusals) */
    int hold_refusals, refusal_said;
    unsigned refusals_held;
    char refusal[512];

    /* the writer thread and its queue */
    pthread_mutex_t qlock;
    pthread_cond_t qcond, qidle;
    struct op *head, *tail;
    size_t qbytes;
    int busy, stop, writer_running;
    pid_t writer_pid;
    pthread_t writer;
    void *wctx;

    struct remote_counters counters;
};

static uint64_t now_ns(void) { return rio_now_ns(); }

/* The deadline of something that starts now and may take ms. */
static uint64_t deadline_in(uint64_t ms) { return now_ns() + ms * 1000000u; }

/* ---- options ---------------------------------------------------------------- */

int remote_read_secret(const char *path, char **out)
{
    FILE *f = fopen(path, "re");
    if (!f) return -1;
    char line[1024];
    int rc = fgets(line, sizeof line, f) ? 0 : -1;
    fclose(f);
    if (rc) return -1;
    line[strcspn(line, "\r\n")] = 0;
    *out = strdup(line);
    sodium_memzero(line, sizeof line);
    return *out ? 0 : -1;
}

/* Every kind of server; the URL's scheme picks one. */
static const struct remote_backend *const remote_backends[] = {&remote_backend_redis, &remote_backend_http};

static const struct remote_backend *backend_for(const char *url)
{
    for (size_t i = 0; i < sizeof remote_backends / sizeof *remote_backends; i++)
        for (const char *s = remote_backends[i]->scheme; *s;) {
            size_t n = strcspn(s, "|");
            if (!strncmp(url, s, n) && !strncmp(url + n, "://", 3)) return remote_backends[i];
            s += n + (s[n] == '|');
        }
    return NULL;
}

static void free_remote(remote *r)
{
    sodium_memzero(r->sign_key, sizeof r->sign_key);
    sodium_memzero(r->seal_key, sizeof r->seal_key);
    if (r->b) r->be->close(r->b);
    free(r->ns);
    free(r->claims);
    if (r->ctx) r->be->disconnect(r->ctx);
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
    if (opt->seal_key) memcpy(r->seal_key, opt->seal_key, sizeof r->seal_key), r->sealing = 1;
    r->seal_trust = opt->seal_trust;
    /* Trusting others but signing nothing: our values would be ignored by
     * our peers, and our claims would make them wait for nothing. */
    r->readonly = opt->readonly || (opt->trust && !r->signing);
    r->hold_refusals = opt->hold_refusals;
    if (!r->ns || !(r->be = backend_for(opt->url)) || r->be->open(opt, r->ns, &r->b) != CLSHIM_OK) {
        free_remote(r);
        return CLSHIM_EINVAL;
    }
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
    case RIO_REFUSED: case RIO_DENIED: COUNT(r, refused, 1); break;
    case RIO_LOST: case RIO_OK: COUNT(r, lost, 1); break;
    }
    uint64_t now = now_ns(), old = __atomic_load_n(&r->breaker_until, __ATOMIC_RELAXED);
    uint64_t until = now + (uint64_t)REMOTE_BREAKER_S * 1000000000u;
    if (old <= now && __atomic_compare_exchange_n(&r->breaker_until, &old, until, 0, __ATOMIC_RELAXED,
                                                  __ATOMIC_RELAXED))
        log_msg(LOG_WARN, "remote cache %s: %s; remote tier off for %d s", r->name, why, REMOTE_BREAKER_S);
}

/* A push the server refused (why: its answer and what to change, from the
 * backend): one line per process, or held for remote_take_refusals(). The
 * tier goes on: lookups still work, and the binary is in the local cache. */
static void push_refused(remote *r, const char *why)
{
    COUNT(r, pushes_refused, 1);
    char line[sizeof r->refusal];
    snprintf(line, sizeof line, "remote cache %.150s refused a push: %.320s", r->name, why);
    pthread_mutex_lock(&r->qlock);
    int say = !r->hold_refusals && !r->refusal_said;
    r->refusal_said = 1;
    if (r->hold_refusals && !r->refusals_held++) memcpy(r->refusal, line, sizeof line);
    pthread_mutex_unlock(&r->qlock);
    if (say) log_msg(LOG_WARN, "%s; each push refused is counted (Remote pushes refused)", line);
}

/* Runs request q on *conn before deadline, connecting first. -1 when the
 * breaker is open, the server failed (counted, breaker opened, connection
 * dropped: its state is unknown) or it refused the request (counted,
 * logged once). */
static int call(remote *r, void **conn, pid_t *conn_pid, uint64_t deadline, struct rb_req *q)
{
    if (breaker_open(r)) return -1;
    if (*conn && *conn_pid != getpid()) { /* inherited across fork: not ours to share */
        r->be->disconnect(*conn);
        *conn = NULL;
    }
    char why[400];
    enum rio_fault fault;
    if (!*conn) {
        if (!(*conn = r->be->connect(r->b, deadline, r->max_value, &fault, why, sizeof why))) {
            trip(r, fault, why);
            return -1;
        }
        *conn_pid = getpid();
    }
    fault = r->be->exec(r->b, *conn, q, deadline, why, sizeof why);
    if (fault == RIO_DENIED) {
        COUNT(r, errors, 1);
        COUNT(r, refused, 1);
        if (q->op == RB_PUT) push_refused(r, why);
        else LOG_ONCE(LOG_WARN, "remote cache %s refused a command: %s", r->name, why);
        return -1;
    }
    if (fault != RIO_OK) {
        trip(r, fault, why);
        r->be->disconnect(*conn);
        *conn = NULL;
        return -1;
    }
    return 0;
}

/* call() on the lookup connection, waiting for it (another thread's
 * lookup) no later than deadline: a lookup is bounded even behind others. */
static int lookup_call(remote *r, uint64_t deadline, struct rb_req *q)
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
        return -1;
    }
    int rc = call(r, &r->ctx, &r->ctx_pid, deadline, q);
    pthread_mutex_unlock(&r->lock);
    return rc;
}

/* ---- lookups -------------------------------------------------------------------- */

/* CLSHIM_OK with the record inside value, when it is signed as opt.trust
 * asks; CLSHIM_EPERM (counted, logged) when not. */
static int check_signer(remote *r, struct cache_hash hash, const void *value, size_t len, const void **rec,
                        size_t *rec_len, struct store_source *src)
{
    enum sign_verdict v = sign_open_value(value, len, rec, rec_len, src->signer);
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
    struct rb_req q = {.op = RB_GET, .hash = hash};
    if (lookup_call(r, deadline, &q)) return CLSHIM_EIO;
    *src = (struct store_source){.kind = STORE_SOURCE_REMOTE};
    snprintf(src->where, sizeof src->where, "%s", r->where);
    const void *rec;
    size_t rec_len;
    int rc;
    if (!q.found) rc = CLSHIM_ENOTFOUND;
    else if ((uint64_t)q.out_len > r->max_value) rc = CLSHIM_ECORRUPT;
    else if ((rc = check_signer(r, hash, q.out, q.out_len, &rec, &rec_len, src)) == CLSHIM_OK)
        rc = entry_open_record(rec, rec_len, hash, key, key_len, out, arena);
    if (q.found) r->be->drop(q.hold);
    if (rc == CLSHIM_ECORRUPT || rc == CLSHIM_ECOLLISION) {
        COUNT(r, corrupt, 1);
        log_msg(LOG_INFO, "remote cache: entry %016llx: %s; ignored", (unsigned long long)hash.hi,
                clshim_strerror(rc));
    }
    if (rc == CLSHIM_OK) {
        /* The builder's seal travels into the reader's copy; nothing else of
         * a record's source is the reader's business. */
        if (out->source && (out->source->flags & STORE_SOURCE_SEALED)) {
            src->flags |= STORE_SOURCE_SEALED;
            memcpy(src->seal_signer, out->source->seal_signer, sizeof src->seal_signer);
            memcpy(src->seal, out->source->seal, sizeof src->seal);
        }
        out->source = src;
        const char *why = r->seal_trust ? sign_check_seal(key, key_len, out, r->seal_trust) : NULL;
        out->source = NULL; /* the caller's to set (remote.h) */
        if (why) {
            COUNT(r, untrusted, 1);
            log_msg(LOG_INFO, "remote cache: entry %016llx: %s; ignored: untrusted", (unsigned long long)hash.hi, why);
            store_record_free(*arena);
            *arena = NULL;
            memset(out, 0, sizeof *out);
            rc = CLSHIM_EPERM;
        }
    }
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
    struct rb_req q = {.op = r->readonly ? RB_PEEK : RB_CLAIM, .hash = hash, .n = ttl_ms, .token = r->token};
    if (lookup_call(r, deadline, &q)) return CLSHIM_EIO;
    if (q.claim == RB_CLAIMED) note_claim(r, hash);
    return q.claim == RB_BUSY ? CLSHIM_EBUSY : CLSHIM_OK;
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

static int release_claim(remote *r, uint64_t deadline, struct cache_hash hash, pid_t *pid)
{
    struct rb_req q = {.op = RB_RELEASE, .hash = hash, .token = r->token};
    return call(r, &r->wctx, pid, deadline, &q);
}

static int count(remote *r, uint64_t deadline, pid_t *pid, const char *field, uint64_t n)
{
    struct rb_req q = {.op = RB_COUNT, .field = field, .n = n};
    return call(r, &r->wctx, pid, deadline, &q);
}

/* The value, signed first when we sign (here, on the writer: the hash
 * over the record is not the application's to wait for). */
static int push_value(remote *r, uint64_t deadline, pid_t *pid, struct op *op)
{
    struct rb_req q = {.op = RB_PUT, .hash = op->hash, .value = op->value, .len = op->len, .n = r->expire_s};
    unsigned char *signed_value = NULL;
    if (r->signing) {
        if (!(signed_value = malloc(SIGN_ENVELOPE_SIZE + op->len))) return -1;
        sign_value(op->value, op->len, r->sign_key, signed_value);
        memcpy(signed_value + SIGN_ENVELOPE_SIZE, op->value, op->len);
        q.value = signed_value, q.len += SIGN_ENVELOPE_SIZE;
    }
    int rc = call(r, &r->wctx, pid, deadline, &q);
    free(signed_value);
    return rc;
}

static void run_op(remote *r, struct op *op)
{
    pid_t pid = getpid();
    /* A push gets the time to send its value over a slow link on top. */
    uint64_t deadline = deadline_in(r->timeout_ms + (uint64_t)op->len * 1000 / REMOTE_PUSH_MIN_RATE);
    switch (op->kind) {
    case OP_PUSH:
        if (push_value(r, deadline, &pid, op)) {
            COUNT(r, dropped, 1);
            break;
        }
        COUNT(r, pushes, 1);
        count(r, deadline, &pid, "pushes", 1);
        if (op->release_claim) release_claim(r, deadline, op->hash, &pid); /* the value is there: others may take it */
        break;
    case OP_RELEASE:
        release_claim(r, deadline, op->hash, &pid);
        break;
    case OP_TOUCH: {
        struct rb_req q = {.op = RB_TOUCH, .hash = op->hash, .n = r->expire_s};
        call(r, &r->wctx, &pid, deadline, &q);
        break;
    }
    case OP_STATS: {
        const struct { const char *name; uint64_t n; } add[] = {
            {"hits", op->delta.hits}, {"misses", op->delta.misses}, {"errors", op->delta.errors},
            {"corrupt", op->delta.corrupt}, {"untrusted", op->delta.untrusted}};
        for (size_t i = 0; i < sizeof add / sizeof *add; i++)
            if (add[i].n) count(r, deadline, &pid, add[i].name, add[i].n);
        break;
    }
    }
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
    built_here.source = NULL; /* a source is this machine's note, never sent; a seal travels */
    struct store_source seal = {.kind = STORE_SOURCE_HERE};
    if (rec->source && (rec->source->flags & STORE_SOURCE_SEALED) && rec->source->kind == STORE_SOURCE_HERE) {
        seal = *rec->source;
        built_here.source = &seal;
    } else if (r->sealing && !rec->source) {
        sign_seal(key, key_len, rec, r->seal_key, &seal);
        built_here.source = &seal;
    }
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

void remote_flush(remote *r, uint64_t timeout_ms)
{
    if (!r) return;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    uint64_t ns = (uint64_t)until.tv_nsec + (timeout_ms % 1000) * 1000000u;
    until.tv_sec += (time_t)(timeout_ms / 1000 + ns / 1000000000u);
    until.tv_nsec = (long)(ns % 1000000000u);
    pthread_mutex_lock(&r->qlock);
    int mine = r->writer_running && r->writer_pid == getpid();
    while (mine && (r->head || r->busy))
        if (pthread_cond_timedwait(&r->qidle, &r->qlock, &until) == ETIMEDOUT) break;
    pthread_mutex_unlock(&r->qlock);
}

unsigned remote_take_refusals(remote *r, char *line, size_t len)
{
    if (len) *line = 0;
    if (!r) return 0;
    pthread_mutex_lock(&r->qlock);
    unsigned n = r->refusals_held;
    if (n && len) snprintf(line, len, "%s", r->refusal);
    r->refusals_held = 0;
    pthread_mutex_unlock(&r->qlock);
    return n;
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
    if (r->wctx) r->be->disconnect(r->wctx);
    free_remote(r);
}

/* ---- administration ---------------------------------------------------------------- */

int remote_ping(remote *r, double *ms, char *why, size_t why_len)
{
    /* An administrator's command: its own connection, and no breaker. */
    uint64_t t0 = now_ns();
    enum rio_fault fault;
    void *c = r->be->connect(r->b, deadline_in(r->timeout_ms), r->max_value, &fault, why, why_len);
    int rc = CLSHIM_EIO;
    if (c) {
        struct rb_req q = {.op = RB_PING};
        rc = r->be->exec(r->b, c, &q, deadline_in(r->timeout_ms), why, why_len) == RIO_OK ? CLSHIM_OK : CLSHIM_EIO;
        r->be->disconnect(c);
    }
    *ms = (double)(now_ns() - t0) / 1e6;
    return rc;
}

int remote_server_stats(remote *r, struct remote_server_stats *out, char *why, size_t why_len)
{
    memset(out, 0, sizeof *out);
    return r->be->stats(r->b, r->timeout_ms, r->max_value, out, why, why_len);
}

int remote_delete(remote *r, const char *prefix, char hex[33], char *why, size_t why_len)
{
    return r->be->del(r->b, r->timeout_ms, r->max_value, prefix, hex, why, why_len);
}
