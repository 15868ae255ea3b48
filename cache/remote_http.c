/* remote_http.c — the remote tier's HTTP and S3 backend (remote_backend.h),
 * through libcurl.
 *
 * One object per entry: <base>/<ns>/<32 hex>, where <base> is the URL
 * (http[s]://host[:port]/prefix) or, for s3://BUCKET/PREFIX, the endpoint
 * (CLSHIM_REMOTE_ENDPOINT, else https://s3.<region>.amazonaws.com) with the
 * bucket and prefix as its path, each request signed by libcurl's AWS
 * SigV4 (CURLOPT_AWS_SIGV4) with AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY
 * / AWS_REGION. GET reads, PUT writes, DELETE removes (`clshim cache remote
 * rm`). A ping HEADs an object name no key has, <base>/<ns>/<32 zeros>:
 * a plain WebDAV server (nginx) refuses a HEAD of the prefix, a directory
 * it does not list (403), and answers 404 for the object, which is a round
 * trip; an S3 ping HEADs the bucket, which must exist. A query in the URL
 * (?token=...) follows every object's path. Such stores have no atomic
 * "set if absent" and no counters: no fleet single flight (RB_NO_CLAIMS:
 * every runner that misses compiles), no fleet counters, and expiry is the
 * store's (a lifecycle rule, a cache server's own limit).
 *
 * A PUT the server answers with an error (a directory nginx may not create
 * without create_full_put_path, a location without dav_methods PUT, a body
 * over client_max_body_size, a reader's credentials) is RIO_DENIED: that
 * push is refused, counted and said once with what to change (refusal()),
 * and lookups go on; only a gateway's 502, 503 or 504 is the server's
 * failure (RIO_LOST: the breaker).
 *
 * Deadlines: each request's whole transfer (name lookup — libcurl's
 * threaded resolver —, connect, TLS, request, every byte of the answer) is
 * bounded by CURLOPT_TIMEOUT_MS set to what is left of the caller's
 * deadline. Sizes: CURLOPT_MAXFILESIZE refuses an announced body over
 * max_value, and the write callback ends one that grows past it.
 * Credentials: user:password in the URL, or CLSHIM_REMOTE_PASSWORD_FILE's
 * first line (user:password is basic auth, anything else a bearer token);
 * never logged. TLS peers and host names are verified (libcurl's default).
 * A connection is one curl easy handle, so TCP and TLS sessions are reused
 * between requests of one thread.
 *
 * libcurl is loaded (dlopen) at the first HTTP or S3 remote tier, not
 * linked: with its TLS, HTTP/2, SSH, LDAP and GSSAPI libraries it would add
 * about 30 shared objects and 9 ms to the start of every process the shim
 * is preloaded into (bench_passthrough's noop), remote tier or not.
 */
#include <curl/curl.h>
#include <dlfcn.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/remote_backend.h"
#include "common/error.h"
#include "common/log.h"

struct http_be {
    char *base;      /* no trailing '/', no query (it may hold user:password@: never shown) */
    char *query;     /* "?..." after every object's path, or "" */
    char *dir;       /* the path of the namespace's directory, "/prefix/<ns>/", for messages */
    char *ping;      /* what a ping HEADs: an object no key names, or S3's bucket */
    char *ns;
    char *userpwd;   /* "user:password" (basic, or S3's key:secret); NULL: none */
    char *bearer;    /* a token; NULL: none */
    char sigv4[128]; /* "aws:amz:<region>:s3" for S3; "": not signed */
    char *ca_file;   /* CURLOPT_CAINFO; NULL: the system's */
};

struct http_conn {
    CURL *curl;
    struct curl_slist *headers;
    uint64_t max_value;
};

/* What a GET collects, bounded by max_value. */
struct body {
    unsigned char *data;
    size_t len, cap, max;
    int over;
};

/* What a PUT sends. */
struct upload {
    const unsigned char *data;
    size_t len, pos;
};

/* The libcurl calls this file makes, resolved at first use. */
static struct {
    CURLcode (*global_init)(long flags);
    CURL *(*easy_init)(void);
    CURLcode (*easy_setopt)(CURL *curl, CURLoption option, ...);
    CURLcode (*easy_perform)(CURL *curl);
    CURLcode (*easy_getinfo)(CURL *curl, CURLINFO info, ...);
    void (*easy_cleanup)(CURL *curl);
    const char *(*easy_strerror)(CURLcode code);
    struct curl_slist *(*slist_append)(struct curl_slist *list, const char *text);
    void (*slist_free_all)(struct curl_slist *list);
} lc;

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static int curl_ready;

static void init_curl(void)
{
    void *so = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
    if (!so) {
        log_msg(LOG_WARN, "remote: HTTP and S3 need libcurl, which did not load (%s): the remote tier is off; "
                      "install libcurl4",
            dlerror());
        return;
    }
#define CURL_SYM(field, name) (*(void **)&lc.field = dlsym(so, name)) != NULL
    int all = CURL_SYM(global_init, "curl_global_init") && CURL_SYM(easy_init, "curl_easy_init") &&
              CURL_SYM(easy_setopt, "curl_easy_setopt") && CURL_SYM(easy_perform, "curl_easy_perform") &&
              CURL_SYM(easy_getinfo, "curl_easy_getinfo") && CURL_SYM(easy_cleanup, "curl_easy_cleanup") &&
              CURL_SYM(easy_strerror, "curl_easy_strerror") && CURL_SYM(slist_append, "curl_slist_append") &&
              CURL_SYM(slist_free_all, "curl_slist_free_all");
#undef CURL_SYM
    if (!all) {
        log_msg(LOG_WARN, "remote: libcurl.so.4 lacks a function clshim calls: the remote tier is off");
        return; /* the library stays loaded: dlclose of a half-used libcurl gains nothing */
    }
    curl_ready = lc.global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
}

static void be_close(void *b)
{
    struct http_be *h = b;
    if (!h) return;
    if (h->userpwd) sodium_memzero(h->userpwd, strlen(h->userpwd));
    if (h->bearer) sodium_memzero(h->bearer, strlen(h->bearer));
    free(h->base), free(h->query), free(h->dir), free(h->ping), free(h->ns), free(h->userpwd), free(h->bearer),
        free(h->ca_file);
    free(h);
}

/* s3://BUCKET[/PREFIX]: the base URL on the endpoint, path style (works
 * with AWS and the S3-compatible stores), and the SigV4 credentials. */
static int open_s3(struct http_be *h, const struct remote_options *opt)
{
    const char *key = getenv("AWS_ACCESS_KEY_ID"), *secret = getenv("AWS_SECRET_ACCESS_KEY");
    const char *region = getenv("AWS_REGION"), *endpoint = opt->endpoint;
    if (!region || !*region) region = getenv("AWS_DEFAULT_REGION");
    if (!region || !*region) region = "us-east-1";
    const char *path = opt->url + 5;
    if (!*path || *path == '/' || !key || !*key || !secret || !*secret) return CLSHIM_EINVAL;
    char def[256];
    if (!endpoint || !*endpoint) {
        snprintf(def, sizeof def, "https://s3.%s.amazonaws.com", region);
        endpoint = def;
    }
    size_t n = strlen(endpoint);
    while (n && endpoint[n - 1] == '/') n--;
    size_t len = n + strlen(path) + 2;
    if (!(h->base = malloc(len))) return CLSHIM_ENOMEM;
    snprintf(h->base, len, "%.*s/%s", (int)n, endpoint, path);
    /* S3 answers 404 for a prefix, 200 or 403 for the bucket itself. */
    if (!(h->ping = malloc(len))) return CLSHIM_ENOMEM;
    snprintf(h->ping, len, "%.*s/%.*s", (int)n, endpoint, (int)strcspn(path, "/"), path);
    size_t klen = strlen(key) + strlen(secret) + 2;
    if (!(h->userpwd = malloc(klen))) return CLSHIM_ENOMEM;
    snprintf(h->userpwd, klen, "%s:%s", key, secret);
    snprintf(h->sigv4, sizeof h->sigv4, "aws:amz:%.64s:s3", region);
    return CLSHIM_OK;
}

static int be_open(const struct remote_options *opt, const char *ns, void **out)
{
    pthread_once(&curl_once, init_curl);
    if (!curl_ready) return CLSHIM_ENOMEM;
    struct http_be *h = calloc(1, sizeof *h);
    if (!h) return CLSHIM_ENOMEM;
    int rc = (h->ns = strdup(ns)) ? CLSHIM_OK : CLSHIM_ENOMEM;
    if (rc == CLSHIM_OK && !strncmp(opt->url, "s3://", 5)) {
        rc = open_s3(h, opt);
    } else if (rc == CLSHIM_OK) {
        const char *host = strstr(opt->url, "://") + 3;
        if (!*host || *host == '/') rc = CLSHIM_EINVAL;
        else if (!(h->base = strdup(opt->url))) rc = CLSHIM_ENOMEM;
    }
    if (rc == CLSHIM_OK && opt->ca_file && *opt->ca_file && !(h->ca_file = strdup(opt->ca_file))) rc = CLSHIM_ENOMEM;
    char *secret = NULL;
    if (rc == CLSHIM_OK && opt->password_file && *opt->password_file &&
        remote_read_secret(opt->password_file, &secret) != 0)
        rc = CLSHIM_EINVAL;
    if (secret) {
        if (strchr(secret, ':')) free(h->userpwd), h->userpwd = secret;
        else h->bearer = secret;
    }
    if (rc == CLSHIM_OK) {
        char *q = h->sigv4[0] ? NULL : strchr(h->base, '?');
        if (!(h->query = strdup(q ? q : ""))) rc = CLSHIM_ENOMEM;
        if (q) *q = 0;
    }
    if (rc == CLSHIM_OK) {
        size_t n = strlen(h->base);
        while (n && h->base[n - 1] == '/') h->base[--n] = 0;
        /* The path after the host (after the last '@' of a user part). */
        const char *host = strstr(h->base, "://"), *at;
        host = host ? host + 3 : h->base;
        at = strrchr(host, '@');
        const char *path = strchr(at ? at + 1 : host, '/');
        size_t len = strlen(path ? path : "") + strlen(h->ns) + 3;
        if ((h->dir = malloc(len))) snprintf(h->dir, len, "%s/%s/", path ? path : "", h->ns);
        len = n + strlen(h->ns) + strlen(h->query) + 36;
        if (!h->ping && (h->ping = malloc(len)))
            snprintf(h->ping, len, "%s/%s/%032d%s", h->base, h->ns, 0, h->query);
        if (!h->ping || !h->dir) rc = CLSHIM_ENOMEM;
    }
    if (rc != CLSHIM_OK) {
        be_close(h);
        return rc;
    }
    *out = h;
    return CLSHIM_OK;
}

static void *be_connect(void *b, uint64_t deadline, uint64_t max_value, enum rio_fault *fault, char *why,
                        size_t why_len)
{
    struct http_be *h = b;
    (void)deadline; /* libcurl connects within the first request's deadline */
    struct http_conn *c = calloc(1, sizeof *c);
    if (c) c->curl = lc.easy_init();
    /* "Expect:" off: a server that ignores 100-continue would hold a PUT a second. */
    if (c && c->curl) c->headers = lc.slist_append(NULL, "Expect:");
    if (!c || !c->curl || !c->headers) {
        if (c && c->curl) lc.easy_cleanup(c->curl);
        free(c);
        *fault = RIO_LOST;
        snprintf(why, why_len, "out of memory");
        return NULL;
    }
    c->max_value = max_value;
    CURL *e = c->curl;
    lc.easy_setopt(e, CURLOPT_NOSIGNAL, 1L); /* threads: no SIGALRM for name lookups */
    lc.easy_setopt(e, CURLOPT_HTTPHEADER, c->headers);
    lc.easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    lc.easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    lc.easy_setopt(e, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)max_value);
    if (h->userpwd) {
        lc.easy_setopt(e, CURLOPT_USERPWD, h->userpwd);
        if (!*h->sigv4) lc.easy_setopt(e, CURLOPT_HTTPAUTH, CURLAUTH_BASIC);
    }
    if (h->bearer) {
        lc.easy_setopt(e, CURLOPT_XOAUTH2_BEARER, h->bearer);
        lc.easy_setopt(e, CURLOPT_HTTPAUTH, CURLAUTH_BEARER);
    }
    if (*h->sigv4) lc.easy_setopt(e, CURLOPT_AWS_SIGV4, h->sigv4);
    if (h->ca_file) lc.easy_setopt(e, CURLOPT_CAINFO, h->ca_file);
    return c;
}

static void be_disconnect(void *conn)
{
    struct http_conn *c = conn;
    if (!c) return;
    lc.easy_cleanup(c->curl);
    lc.slist_free_all(c->headers);
    free(c);
}

static void be_drop(void *hold) { free(hold); }

static size_t collect(char *p, size_t size, size_t n, void *arg)
{
    struct body *b = arg;
    n *= size;
    if (b->len + n > b->max) {
        b->over = 1;
        return 0; /* ends the transfer: CURLE_WRITE_ERROR */
    }
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 65536;
        while (cap < b->len + n) cap *= 2;
        unsigned char *d = realloc(b->data, cap);
        if (!d) return 0;
        b->data = d, b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return n;
}

static size_t discard(char *p, size_t size, size_t n, void *arg)
{
    (void)p, (void)arg;
    return size * n;
}

static size_t send_body(char *p, size_t size, size_t n, void *arg)
{
    struct upload *u = arg;
    size_t k = size * n < u->len - u->pos ? size * n : u->len - u->pos;
    memcpy(p, u->data + u->pos, k);
    u->pos += k;
    return k;
}

/* One request on c before deadline: the HTTP status in *status, or a fault. */
static enum rio_fault perform(struct http_conn *c, uint64_t deadline, long *status, char *why, size_t why_len)
{
    uint64_t now = rio_now_ns();
    if (now >= deadline) {
        snprintf(why, why_len, "timed out");
        return RIO_TIMEOUT;
    }
    long ms = (long)((deadline - now + 999999) / 1000000);
    lc.easy_setopt(c->curl, CURLOPT_TIMEOUT_MS, ms);
    lc.easy_setopt(c->curl, CURLOPT_CONNECTTIMEOUT_MS, ms);
    CURLcode e = lc.easy_perform(c->curl);
    if (e == CURLE_OK) {
        lc.easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, status);
        return RIO_OK;
    }
    snprintf(why, why_len, "%s", lc.easy_strerror(e));
    switch (e) {
    case CURLE_OPERATION_TIMEDOUT: return RIO_TIMEOUT;
    case CURLE_FILESIZE_EXCEEDED: return RIO_OVERSIZE;
    case CURLE_WEIRD_SERVER_REPLY: case CURLE_UNSUPPORTED_PROTOCOL: case CURLE_BAD_CONTENT_ENCODING:
    case CURLE_HTTP2: case CURLE_RANGE_ERROR: case CURLE_PEER_FAILED_VERIFICATION: case CURLE_SSL_CONNECT_ERROR:
        return RIO_GARBAGE;
    case CURLE_LOGIN_DENIED: return RIO_REFUSED;
    default: return RIO_LOST;
    }
}

/* A status the request never gets: refused (401, 403), the server's
 * failure (5xx), or not an answer at all. */
static enum rio_fault bad_status(long status, char *why, size_t why_len)
{
    snprintf(why, why_len, "HTTP status %ld", status);
    if (status == 401 || status == 403) return RIO_REFUSED;
    if (status >= 500) return RIO_LOST;
    return RIO_GARBAGE;
}

/* A gateway's answer that its server is not there: the server's failure. */
static int gateway_failed(long status) { return status == 502 || status == 503 || status == 504; }

/* A write (PUT, DELETE) the server answered with `status`: the status and
 * what to change on a WebDAV or HTTP store, never a credential or a query. */
static enum rio_fault refusal(const struct http_be *h, const char *method, long status, char *why, size_t why_len)
{
    char hint[320];
    switch (*h->sigv4 && status != 401 && status != 403 && status != 413 ? 0 : status) { /* S3: its own words */
    case 401: case 403:
        snprintf(hint, sizeof hint, "these credentials may not %s there (a reader wants CLSHIM_REMOTE_READONLY=1)",
                 method);
        break;
    case 405: case 501:
        snprintf(hint, sizeof hint, "the server takes no %s in %s (nginx: dav_methods PUT DELETE)", method, h->dir);
        break;
    case 409: case 500:
        snprintf(hint, sizeof hint, "the directory %s may be missing (nginx: enable create_full_put_path, or "
                                    "create the directories)", h->dir);
        break;
    case 413: snprintf(hint, sizeof hint, "%s", "the value is larger than the server takes (nginx: "
                                                "client_max_body_size, 1m unless set)"); break;
    case 507: snprintf(hint, sizeof hint, "%s", "the store is full"); break;
    default: snprintf(hint, sizeof hint, "%s", "the server's error log says why"); break;
    }
    snprintf(why, why_len, "HTTP status %ld to %s; %s", status, method, hint);
    return gateway_failed(status) ? RIO_LOST : RIO_DENIED;
}

static void object_url(const struct http_be *h, struct cache_hash hash, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s/%016llx%016llx%s", h->base, h->ns, (unsigned long long)hash.hi,
             (unsigned long long)hash.lo, h->query);
}

static enum rio_fault be_exec(void *b, void *conn, struct rb_req *q, uint64_t deadline, char *why, size_t why_len)
{
    struct http_be *h = b;
    struct http_conn *c = conn;
    CURL *e = c->curl;
    char url[4096];
    long status = 0;
    enum rio_fault f;
    switch (q->op) {
    case RB_CLAIM: q->claim = RB_NO_CLAIMS; return RIO_OK;
    case RB_PEEK: q->claim = RB_FREE; return RIO_OK;
    case RB_RELEASE: case RB_COUNT: case RB_TOUCH: return RIO_OK; /* no claims, counters or expiry here */
    case RB_PING: {
        lc.easy_setopt(e, CURLOPT_URL, h->ping);
        lc.easy_setopt(e, CURLOPT_WRITEFUNCTION, discard); /* an error page, if any */
        lc.easy_setopt(e, CURLOPT_NOBODY, 1L);
        f = perform(c, deadline, &status, why, why_len);
        lc.easy_setopt(e, CURLOPT_NOBODY, 0L);
        /* Any answer of an HTTP server is a round trip (404 too: the object
         * is absent), unless it refuses us; an S3 bucket must exist. */
        if (f == RIO_OK && (status == 401 || status == 403 || status < 100 || (*h->sigv4 && status != 200)))
            f = bad_status(status, why, why_len);
        return f;
    }
    case RB_GET: {
        struct body body = {.max = (size_t)c->max_value};
        object_url(h, q->hash, url, sizeof url);
        lc.easy_setopt(e, CURLOPT_URL, url);
        lc.easy_setopt(e, CURLOPT_HTTPGET, 1L);
        lc.easy_setopt(e, CURLOPT_WRITEFUNCTION, collect);
        lc.easy_setopt(e, CURLOPT_WRITEDATA, &body);
        f = perform(c, deadline, &status, why, why_len);
        if (f != RIO_OK && body.over) {
            f = RIO_OVERSIZE;
            snprintf(why, why_len, "a reply larger than the largest value allowed");
        }
        if (f == RIO_OK && status == 200 && body.len > 0) {
            q->found = 1, q->out = body.data, q->out_len = body.len, q->hold = body.data;
            return RIO_OK;
        }
        free(body.data);
        if (f == RIO_OK && status != 200 && status != 404) f = bad_status(status, why, why_len);
        return f;
    }
    case RB_PUT: {
        struct upload up = {q->value, q->len, 0};
        object_url(h, q->hash, url, sizeof url);
        lc.easy_setopt(e, CURLOPT_URL, url);
        lc.easy_setopt(e, CURLOPT_UPLOAD, 1L);
        lc.easy_setopt(e, CURLOPT_READFUNCTION, send_body);
        lc.easy_setopt(e, CURLOPT_READDATA, &up);
        lc.easy_setopt(e, CURLOPT_INFILESIZE_LARGE, (curl_off_t)q->len);
        lc.easy_setopt(e, CURLOPT_WRITEFUNCTION, discard);
        f = perform(c, deadline, &status, why, why_len);
        lc.easy_setopt(e, CURLOPT_UPLOAD, 0L);
        if (f == RIO_OK && (status < 200 || status > 299)) f = refusal(h, "PUT", status, why, why_len);
        return f;
    }
    }
    return RIO_OK;
}

/* ---- administration ---------------------------------------------------------------- */

static int be_stats(void *b, uint64_t timeout_ms, uint64_t max_value, struct remote_server_stats *out, char *why,
                    size_t why_len)
{
    /* An object store lists no namespace cheaply and keeps no counters:
     * the stats are that the server answers. */
    struct http_be *h = b;
    enum rio_fault f;
    void *c = be_connect(b, 0, max_value, &f, why, why_len);
    if (!c) return CLSHIM_EIO;
    struct rb_req q = {.op = RB_PING};
    f = be_exec(b, c, &q, rio_now_ns() + timeout_ms * 1000000u, why, why_len);
    be_disconnect(c);
    snprintf(out->version, sizeof out->version, "%s", *h->sigv4 ? "S3" : "HTTP");
    snprintf(out->policy, sizeof out->policy, "the server's");
    out->unlisted = 1;
    return f == RIO_OK ? CLSHIM_OK : CLSHIM_EIO;
}

static int be_del(void *b, uint64_t timeout_ms, uint64_t max_value, const char *prefix, char hex[33], char *why,
                  size_t why_len)
{
    struct http_be *h = b;
    if (strlen(prefix) != 32) { /* no listing: the whole key names the object */
        snprintf(why, why_len, "an HTTP or S3 store lists nothing: give all 32 digits of the key");
        return CLSHIM_EINVAL;
    }
    enum rio_fault f;
    struct http_conn *c = be_connect(b, 0, max_value, &f, why, why_len);
    if (!c) return CLSHIM_EIO;
    char url[4096];
    long status = 0;
    snprintf(url, sizeof url, "%s/%s/%s%s", h->base, h->ns, prefix, h->query);
    lc.easy_setopt(c->curl, CURLOPT_URL, url);
    lc.easy_setopt(c->curl, CURLOPT_CUSTOMREQUEST, "DELETE");
    lc.easy_setopt(c->curl, CURLOPT_WRITEFUNCTION, discard);
    f = perform(c, rio_now_ns() + timeout_ms * 1000000u, &status, why, why_len);
    be_disconnect(c);
    if (f != RIO_OK) return CLSHIM_EIO;
    snprintf(hex, 33, "%s", prefix);
    if (status == 404) return CLSHIM_ENOTFOUND;
    if (status < 200 || status > 299) {
        refusal(h, "DELETE", status, why, why_len);
        return CLSHIM_EIO;
    }
    return CLSHIM_OK;
}

const struct remote_backend remote_backend_http = {
    .scheme = "http|https|s3",
    .open = be_open,
    .close = be_close,
    .connect = be_connect,
    .disconnect = be_disconnect,
    .exec = be_exec,
    .drop = be_drop,
    .stats = be_stats,
    .del = be_del,
};
