/* pipeline.c — the lookup -> build -> store sequence (see pipeline.h).
 *
 * Invariants:
 *  1. A flight that pipeline_begin() left filling is filled, failed or
 *     abandoned by pipeline_built() or pipeline_end(); its pin and its
 *     cross-process claim go in pipeline_end(), except a claim kept for a
 *     late store (owes_store), which goes in pipeline_let_go() or when its
 *     grace expires.
 *  2. The counters are this process's; they reach the store once, at exit.
 */
#include "cache/pipeline.h"
#include "cache/snapshot.h"

#include <errno.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "cache/keydiff.h"
#include "cache/preproc.h"
#include "cache/remote.h"
#include "cache/sign.h"
#include "common/clapi.h"
#include "common/config.h"
#include "common/error.h"
#include "common/log.h"
#include "common/profile.h"

static struct store_stats proc_stats;
static uint64_t stat_translations, stat_failed, stat_failed_shared, stat_slow_loads;
#define STAT_ADD(field, n) __atomic_add_fetch(&(field), (n), __ATOMIC_RELAXED)

static uint64_t clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t now_ns(void) { return clock_ns(CLOCK_MONOTONIC); }
static uint64_t thread_cpu_ns(void) { return clock_ns(CLOCK_THREAD_CPUTIME_ID); }

static void key_prefix(struct cache_hash h, char out[17])
{
    char hex[33];
    key_hash_hex(h, hex);
    memcpy(out, hex, 16);
    out[16] = 0;
}

/* ---- the persistent store, opened on first need -------------------------- */

static store *the_store;
static pthread_once_t store_once = PTHREAD_ONCE_INIT;

/* CLSHIM_TRUST, loaded once; NULL when unset. A file that cannot be read
 * adds no key: trust narrows, never widens. */
static sign_trust *local_trust;
static pthread_once_t local_trust_once = PTHREAD_ONCE_INIT;

/* A trust knob's keys into *out (NULL when the knob is empty), one line
 * naming what could not be read. */
static void load_trust_knob(const char *knob, const char *files, sign_trust **out)
{
    if (!*files) return;
    char err[1024];
    if (sign_trust_load(files, out, err, sizeof err) != 0) {
        size_t n = sign_trust_count(*out);
        log_msg(LOG_WARN, "%s: %s; %zu other key%s trusted (fix or remove that file)", knob, err, n,
                n == 1 ? " is" : "s are");
    }
}

static void load_local_trust(void)
{
    load_trust_knob("CLSHIM_TRUST", config_get()->trust, &local_trust);
    if (*config_get()->trust && !local_trust) { /* out of memory: an empty set, which trusts nothing */
        static sign_trust *none;
        char err[64];
        if (!none) sign_trust_load(NULL, &none, err, sizeof err);
        local_trust = none;
    }
}

static const sign_trust *get_local_trust(void)
{
    pthread_once(&local_trust_once, load_local_trust);
    return local_trust;
}

/* CLSHIM_SIGN_KEY into sk: 1 when read, 0 when unset or in an untrusted CI
 * context (which never signs); -1 (logged) when it cannot be read. */
static int load_seal_key(unsigned char sk[SIGN_SECRET_BYTES])
{
    const struct clshim_config *cfg = config_get();
    if (!*cfg->sign_key || cfg->ci_untrusted) return 0;
    char err[1024];
    if (sign_read_secret(cfg->sign_key, sk, err, sizeof err) == 0) return 1;
    static int said; /* the store and the remote tier ask */
    if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
        log_msg(LOG_WARN, "CLSHIM_SIGN_KEY: %s; nothing is stored (fix the file, or unset the knob to store "
                          "unsealed entries)", err);
    return -1;
}

static void open_store(void)
{
    const struct clshim_config *cfg = config_get();
    if (!cfg->cache) return;
    char dir[4096];
    if (config_cache_dir(cfg, dir, sizeof dir) != 0) {
        log_msg(LOG_WARN, "no cache directory (set CLSHIM_CACHE_DIR, XDG_CACHE_HOME or HOME); "
                          "persistent cache off");
        return;
    }
    struct store_options opt = {
        .dir = dir,
        .max_size = cfg->cache_max_size,
        .max_age_days = cfg->cache_max_age_days,
        .min_entry = cfg->cache_min_entry,
        .max_entry = cfg->cache_max_entry,
        .readonly = cfg->cache_readonly,
        .allow_shared = cfg->cache_allow_shared,
        .compress_level = (int)cfg->cache_compress_level,
        .trust = get_local_trust(),
    };
    unsigned char sk[SIGN_SECRET_BYTES];
    int sealing = load_seal_key(sk);
    if (sealing > 0) opt.seal_key = sk;
    if (sealing < 0) opt.readonly = 1;
    int rc = store_open(&opt, &the_store);
    sodium_memzero(sk, sizeof sk);
    if (rc != CLSHIM_OK) {
        /* The store has said why (one warning); this line only at info,
         * except for a cache configured read-only that does not exist yet. */
        if (rc == CLSHIM_ENOTFOUND && cfg->cache_readonly)
            log_msg(LOG_WARN, "no cache in %s to read (CLSHIM_CACHE_READONLY=1); persistent cache off", dir);
        else
            log_msg(LOG_INFO, "cannot open the cache in %s (%s); persistent cache off", dir, clshim_strerror(rc));
        the_store = NULL;
    }
}

store *pipeline_store(void)
{
    pthread_once(&store_once, open_store);
    return the_store;
}

/* ---- claims held past the compile -----------------------------------------
 * A late store writes the binary at the first use of the program, so the
 * cross-process claim is kept after the compile, for the processes waiting
 * for that binary — but only for CLAIM_GRACE_BUILDS times as long as the
 * build took: a process that keeps its program unused never makes others
 * wait much longer than compiling would (they then compile it themselves).
 * Compiling includes what a driver does at first use: PoCL generates the
 * work-group functions then, 1.2-1.6x the build's own time (bench_ttfr:
 * 690 ms build, 1,108 ms first run), so a grace of one build let waiters
 * give up just before the binary came, and compile it again. One thread,
 * started on first need, lets expired claims go. */
#define CLAIM_GRACE_BUILDS 3

struct held_claim {
    struct cache_hash hash;
    uint64_t deadline_ns;
};

static pthread_mutex_t claims_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t claims_changed = PTHREAD_COND_INITIALIZER;
static struct held_claim *claims;
static size_t nclaims, claims_cap;
static int reaper_running, reaper_stop;
static pthread_t reaper;

static void *reap_claims(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&claims_lock);
    while (!reaper_stop) {
        uint64_t now = now_ns(), next = 0;
        for (size_t i = 0; i < nclaims;) {
            if (claims[i].deadline_ns <= now) {
                store_release_build(the_store, claims[i].hash);
                claims[i] = claims[--nclaims];
                continue;
            }
            if (!next || claims[i].deadline_ns < next) next = claims[i].deadline_ns;
            i++;
        }
        if (!next) {
            pthread_cond_wait(&claims_changed, &claims_lock);
            continue;
        }
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        uint64_t wait = next - now;
        until.tv_sec += (time_t)(wait / 1000000000u);
        until.tv_nsec += (long)(wait % 1000000000u);
        if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&claims_changed, &claims_lock, &until);
    }
    pthread_mutex_unlock(&claims_lock);
    return NULL;
}

/* Keeps this process's claim of `hash` for `grace_ns` more; 0 when it is
 * held, -1 when the caller must release it now. */
static int hold_claim(struct cache_hash hash, uint64_t grace_ns)
{
    int rc = -1;
    pthread_mutex_lock(&claims_lock);
    if (!reaper_running) {
        pthread_condattr_t attr;
        pthread_condattr_init(&attr);
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
        pthread_cond_init(&claims_changed, &attr);
        pthread_condattr_destroy(&attr);
        reaper_stop = 0;
        reaper_running = pthread_create(&reaper, NULL, reap_claims, NULL) == 0;
    }
    if (reaper_running && nclaims == claims_cap) {
        size_t cap = claims_cap ? claims_cap * 2 : 8;
        struct held_claim *n = realloc(claims, cap * sizeof *n);
        if (n) claims = n, claims_cap = cap;
    }
    if (reaper_running && nclaims < claims_cap) {
        claims[nclaims++] = (struct held_claim){hash, now_ns() + grace_ns};
        pthread_cond_signal(&claims_changed);
        rc = 0;
    }
    pthread_mutex_unlock(&claims_lock);
    return rc;
}

/* Lets the claim of `hash` go now if this process still holds it. */
static void drop_claim(struct cache_hash hash)
{
    pthread_mutex_lock(&claims_lock);
    for (size_t i = 0; i < nclaims; i++)
        if (claims[i].hash.lo == hash.lo && claims[i].hash.hi == hash.hi) {
            store_release_build(the_store, hash);
            claims[i] = claims[--nclaims];
            break;
        }
    pthread_mutex_unlock(&claims_lock);
}

/* At exit: the thread stops and every held claim goes. */
static void drop_all_claims(void)
{
    pthread_mutex_lock(&claims_lock);
    int running = reaper_running;
    reaper_stop = 1;
    pthread_cond_signal(&claims_changed);
    pthread_mutex_unlock(&claims_lock);
    if (running) pthread_join(reaper, NULL);
    reaper_running = 0;
    for (size_t i = 0; i < nclaims; i++) store_release_build(the_store, claims[i].hash);
    nclaims = 0;
}

/* ---- the remote tier (cache/remote.h), behind the store ------------------
 * Every lookup goes memory, store, then tier_get(); every store goes through
 * tier_put(). Only builds (PIPELINE_FLEET_CLAIM) take part in the fleet's
 * single flight (remote_fetch() claims the key); compile, link and derived
 * lookups only read (remote_get()). Manifests (cache/preproc.h) stay local:
 * see docs/cache.md. */

static remote *the_remote;
static pthread_once_t remote_once = PTHREAD_ONCE_INIT;
static int hold_remote_refusals; /* pipeline_hold_remote_refusals() */
/* The remote tier's counters already added to proc_stats (by
 * pipeline_remote_settle()): what pipeline_exit() adds is the rest. */
static struct remote_counters remote_counted;

/* The keys remote values must be signed by (CLSHIM_REMOTE_TRUST), loaded
 * once, also without CLSHIM_REMOTE (local copies of remote values are
 * checked against it). A file that cannot be read narrows trust, never
 * widens it (sign.h); trust_broken: not even that could be loaded (out of
 * memory), so nothing remote is used. */
static sign_trust *the_trust;
static int trust_broken;
static pthread_once_t trust_once = PTHREAD_ONCE_INIT;

static void load_trust(void)
{
    if (!*config_get()->remote_trust) return;
    load_trust_knob("CLSHIM_REMOTE_TRUST", config_get()->remote_trust, &the_trust);
    trust_broken = !the_trust;
}

/* The trusted keys; NULL when CLSHIM_REMOTE_TRUST is empty (any value that
 * verifies is taken). *broken: set, but unusable. */
static const sign_trust *get_trust(int *broken)
{
    pthread_once(&trust_once, load_trust);
    *broken = trust_broken;
    return the_trust;
}

/* CLSHIM_REMOTE_SIGN_KEY into sk: 1 when read, 0 when unset; -1 (logged)
 * when it cannot be read: the caller then pushes nothing. */
static int load_sign_key(unsigned char sk[SIGN_SECRET_BYTES])
{
    const char *file = config_get()->remote_sign_key;
    if (!*file) return 0;
    char err[1024];
    if (sign_read_secret(file, sk, err, sizeof err) == 0) return 1;
    log_msg(LOG_WARN, "CLSHIM_REMOTE_SIGN_KEY: %s; nothing is pushed (fix the file, or unset the knob to push "
                      "unsigned values)", err);
    return -1;
}

static int remote_off; /* pipeline_remote_off() */

void pipeline_remote_off(void)
{
    remote_off = 1;
}

static void open_remote(void)
{
    const struct clshim_config *cfg = config_get();
    if (!cfg->cache || !*cfg->remote || remote_off) return;
    int broken;
    const sign_trust *trust = get_trust(&broken);
    if (broken) {
        log_msg(LOG_WARN, "CLSHIM_REMOTE_TRUST cannot be loaded (out of memory); remote tier off");
        return;
    }
    unsigned char sk[SIGN_SECRET_BYTES], seal[SIGN_SECRET_BYTES];
    int sealing = cfg->remote_readonly || cfg->ci_untrusted ? 0 : load_seal_key(seal);
    if (cfg->ci_untrusted && (!cfg->remote_readonly || *cfg->remote_sign_key || *cfg->sign_key))
        log_msg(LOG_WARN, "%s: an untrusted CI context, so the remote tier is read only and nothing is signed "
                          "(CLSHIM_CI_CONTEXT=trusted overrides)", cfg->ci_why);
    int signing = cfg->remote_readonly || cfg->ci_untrusted ? 0 : load_sign_key(sk);
    if (signing == 0 && sealing > 0) memcpy(sk, seal, sizeof sk), signing = 1; /* CLSHIM_SIGN_KEY signs values too */
    const sign_trust *seal_trust = get_local_trust();
    struct remote_options opt = {
        .url = cfg->remote,
        .password_file = cfg->remote_password_file,
        .endpoint = cfg->remote_endpoint,
        .ca_file = cfg->remote_ca,
        .ns = cfg->remote_namespace,
        .timeout_ms = cfg->remote_timeout_ms,
        .max_value = cfg->remote_max_value,
        .expire_s = cfg->remote_expire_days * 86400,
        .readonly = cfg->remote_readonly || cfg->ci_untrusted || signing < 0 || sealing < 0,
        .compress_level = (int)cfg->cache_compress_level,
        .sign_key = signing > 0 ? sk : NULL,
        .trust = trust ? trust : seal_trust, /* CLSHIM_TRUST vouches for values too */
        .hold_refusals = hold_remote_refusals,
        .seal_key = sealing > 0 ? seal : NULL,
        .seal_trust = seal_trust,
    };
    if (cfg->remote_ca && *cfg->remote_ca && access(cfg->remote_ca, R_OK) != 0) {
        log_msg(LOG_WARN, "CLSHIM_REMOTE_CA=%s: cannot be read (%s); remote tier off", cfg->remote_ca,
                strerror(errno));
        sodium_memzero(sk, sizeof sk);
        sodium_memzero(seal, sizeof seal);
        the_remote = NULL;
        return;
    }
    int rc = remote_open(&opt, &the_remote);
    sodium_memzero(sk, sizeof sk);
    sodium_memzero(seal, sizeof seal);
    if (rc != CLSHIM_OK) {
        char name[512];
        config_redact_url(cfg->remote, name, sizeof name);
        log_msg(LOG_WARN, "CLSHIM_REMOTE=%s: not a redis://, unix://, http(s):// or s3:// URL, an s3:// URL "
                          "without AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or its password file cannot be "
                          "read; remote tier off", name);
        the_remote = NULL;
    }
}

static remote *get_remote(void)
{
    pthread_once(&remote_once, open_remote);
    return the_remote;
}

/* A local entry copied from the remote tier is used only while its signer is
 * trusted (with CLSHIM_REMOTE_TRUST): one that is not is deleted, counted and
 * logged, and the lookup goes on as a miss. 1: usable. */
static int still_trusted(store *st, struct cache_hash hash, const struct store_record *sr)
{
    if (!sr->source || sr->source->kind != STORE_SOURCE_REMOTE || !*config_get()->remote_trust) return 1;
    int broken;
    const sign_trust *t = get_trust(&broken);
    if (!broken && (sr->source->flags & STORE_SOURCE_SIGNED) && sign_trust_has(t, sr->source->signer)) return 1;
    int rc = store_delete(st, hash);
    STAT_ADD(proc_stats.remote_distrusted, 1);
    char prefix[17], id[17];
    key_prefix(hash, prefix);
    const char *signer = "nobody (unsigned)";
    if (sr->source->flags & STORE_SOURCE_SIGNED) sign_key_id(sr->source->signer, id), signer = id;
    log_msg(LOG_INFO, "cache entry %s came from %s, signed by %s, not trusted now: %s", prefix, sr->source->where,
            signer, rc == CLSHIM_OK ? "deleted" : "not used");
    return 0;
}

/* store_get() of an entry this process may use (still_trusted()). */
static int local_get(store *st, struct cache_hash hash, const void *key, size_t key_len, struct store_record *sr,
                     void **arena)
{
    int rc = store_get(st, hash, key, key_len, sr, arena);
    if (rc == CLSHIM_EUNTRUSTED) {
        STAT_ADD(proc_stats.untrusted, 1);
        static int said; /* one line a run; the counter has the rest */
        if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED)) {
            char prefix[17];
            key_prefix(hash, prefix);
            log_msg(LOG_INFO, "cache entry %s ignored: not sealed by a key in CLSHIM_TRUST (`clshim cache verify "
                              "--trust` lists such entries); compiling", prefix);
        }
        return CLSHIM_ENOTFOUND;
    }
    if (rc == CLSHIM_OK && !still_trusted(st, hash, sr)) {
        store_record_free(*arena);
        *arena = NULL;
        rc = CLSHIM_ENOTFOUND;
    }
    return rc;
}

int pipeline_local_get(store *st, struct cache_hash hash, const void *key, size_t key_len, struct store_record *sr,
                       void **arena)
{
    return local_get(st, hash, key, key_len, sr, arena);
}

/* The store, then (on a local miss) the remote tier; a remote hit is stored
 * locally with its source (where from, who signed it). fleet_wait: wait for,
 * or claim, another runner's build of the key (remote_fetch()); the claim
 * then goes with tier_put() or remote_release(). *from_remote says which
 * tier answered. */
static int tier_get(store *st, struct cache_hash hash, const void *key, size_t key_len, int fleet_wait,
                    struct store_record *sr, void **arena, int *from_remote)
{
    *from_remote = 0;
    int rc = local_get(st, hash, key, key_len, sr, arena);
    remote *rm = rc == CLSHIM_ENOTFOUND ? get_remote() : NULL;
    if (!rm) return rc;
    struct store_source src;
    int got = fleet_wait ? remote_fetch(rm, hash, key, key_len, config_get()->build_wait_ms, sr, arena, &src)
                         : remote_get(rm, hash, key, key_len, sr, arena, &src);
    if (got != CLSHIM_OK) return CLSHIM_ENOTFOUND;
    sr->source = &src;
    if (store_put(st, hash, key, key_len, sr) == CLSHIM_OK) STAT_ADD(proc_stats.stores, 1);
    sr->source = NULL; /* src goes with this frame */
    *from_remote = 1;
    return CLSHIM_OK;
}

/* A local store, and the same record to the remote tier in the background
 * (which also gives up this process's fleet claim on it). */
static int tier_put(store *st, struct cache_hash hash, const void *key, size_t key_len,
                    const struct store_record *sr)
{
    int rc = store_put(st, hash, key, key_len, sr);
    remote *rm = get_remote();
    if (rm) remote_push(rm, hash, key, key_len, sr);
    return rc;
}

int pipeline_push_stored(struct cache_hash hash, const void *key, size_t key_len, const struct store_record *sr)
{
    remote *rm = get_remote();
    if (!rm) return -1;
    remote_push(rm, hash, key, key_len, sr);
    return 0;
}

int pipeline_record_get(const struct key_buf *k, void **value, size_t *size)
{
    *value = NULL;
    *size = 0;
    store *st = pipeline_store();
    if (!st || k->oom) return -1;
    struct store_record sr;
    void *arena = NULL;
    int from_remote;
    if (tier_get(st, key_hash(k->data, k->len), k->data, k->len, 0, &sr, &arena, &from_remote) != CLSHIM_OK)
        return -1;
    int rc = -1;
    if ((*value = malloc(sr.binary_size ? sr.binary_size : 1))) {
        memcpy(*value, sr.binary, sr.binary_size);
        *size = sr.binary_size;
        rc = 0;
    }
    store_record_free(arena);
    return rc;
}

/* The record that says a key's capture was refused for its cost. */
static int over_cost_key(struct key_buf *m, const void *key, size_t key_len)
{
    memset(m, 0, sizeof *m);
    key_begin(m, KEY_MANIFEST, "");
    key_add_blob(m, "capture-over-cost", key, key_len);
    return m->oom ? -1 : 0;
}

void pipeline_note_over_cost(const void *key, size_t key_len, uint64_t budget_ns, const char *why)
{
    struct key_buf m;
    char value[1100];
    int n = snprintf(value, sizeof value, "%llu %.1000s", (unsigned long long)budget_ns, why);
    if (over_cost_key(&m, key, key_len) == 0) pipeline_record_put(&m, value, (size_t)n + 1, KEY_MANIFEST, "", 0);
    key_free(&m);
}

int pipeline_over_cost(const void *key, size_t key_len, uint64_t budget_ns, char *why, size_t why_len)
{
    struct key_buf m;
    void *v = NULL;
    size_t n = 0;
    int found = over_cost_key(&m, key, key_len) == 0 && pipeline_record_get(&m, &v, &n) == 0 && n && v &&
                ((char *)v)[n - 1] == 0;
    char *text = NULL;
    unsigned long long refused = found ? strtoull(v, &text, 10) : 0;
    /* A budget twice as large (a build that cost that much more here) may
     * do: tried again. Builds vary by tens of percent: not on that. */
    found = found && budget_ns < 2 * refused;
    if (found && why_len) snprintf(why, why_len, "%s", text && *text == ' ' ? text + 1 : "");
    free(v);
    key_free(&m);
    return found;
}

/* The record that says a key's entry was built before any run (`clshim
 * cache warm`): "1" while it is so, "0" once captured after a use. */
static int provisional_key(struct key_buf *m, const void *key, size_t key_len)
{
    memset(m, 0, sizeof *m);
    key_begin(m, KEY_MANIFEST, "");
    key_add_blob(m, "built-before-use", key, key_len);
    return m->oom ? -1 : 0;
}

void pipeline_note_provisional(const void *key, size_t key_len, int provisional)
{
    struct key_buf m;
    if (provisional_key(&m, key, key_len) == 0) pipeline_record_put(&m, provisional ? "1" : "0", 2, KEY_MANIFEST, "", 0);
    key_free(&m);
}

int pipeline_provisional(const void *key, size_t key_len, int ask_remote)
{
    struct key_buf m;
    int found = 0;
    store *st = pipeline_store();
    if (!st || provisional_key(&m, key, key_len) != 0) return 0;
    if (ask_remote) {
        void *v = NULL;
        size_t n = 0;
        found = pipeline_record_get(&m, &v, &n) == 0 && n == 2 && !memcmp(v, "1", 2);
        free(v);
    } else {
        struct store_record sr;
        void *arena = NULL;
        found = store_get(st, key_hash(m.data, m.len), m.data, m.len, &sr, &arena) == CLSHIM_OK &&
                sr.binary_size == 2 && !memcmp(sr.binary, "1", 2);
        store_record_free(arena);
    }
    key_free(&m);
    return found;
}

void pipeline_record_put(const struct key_buf *k, const void *value, size_t size, enum key_kind kind,
                         const char *device, uint64_t make_ns)
{
    store *st = pipeline_store();
    if (!st || k->oom) return;
    struct store_record sr = {value, size, "", make_ns, (uint32_t)kind, device, NULL};
    if (tier_put(st, key_hash(k->data, k->len), k->data, k->len, &sr) == CLSHIM_OK) STAT_ADD(proc_stats.stores, 1);
}

/* ---- the key ----------------------------------------------------------------- */

/* Where a compile may leave the preprocessor running beside it: only
 * where a missing manifest means a missing binary (preproc_start() adds:
 * a writable store). */
static int preprocessor_may_overlap(void)
{
    const struct clshim_config *cfg = config_get();
    return cfg->preproc_overlap && !cfg->cache_min_entry && !get_remote();
}

/* The input blob and the hash finish k, which becomes f's key; -1 (k
 * freed) when out of memory. */
static int take_key(struct pipeline_flight *f, struct key_buf *k, const void *input, size_t input_len)
{
    snapshot_add_aliases(k->snap, k); /* `#pragma once` decides by identity */
    if (input) key_add_blob(k, "input", input, input_len);
    if (k->oom) {
        key_free(k);
        return -1;
    }
    free(f->key);
    f->key = k->data;
    f->key_len = k->len;
    f->hash = key_hash(k->data, k->len);
    snapshot_free(f->snap);
    f->snap = k->snap;
    k->snap = NULL;
    struct key_inputs *in = NULL;
    int unreadable = key_inputs_parse(f->key, f->key_len, &in) != 0, present = unreadable;
    for (size_t i = 0; !present && i < key_inputs_count(in); i++) {
        const char *path, *hex;
        int ddir;
        key_inputs_get(in, i, &path, &hex, &ddir);
        present = hex[0] != 0;
    }
    f->names_files = unreadable || key_inputs_count(in) > 0;
    key_inputs_free(in);
    /* Only absent places: exact unless a sandbox that sees the build's
     * reads says otherwise (where none can, clshim as a layer, the build
     * is taken as it is: see docs/cache.md, "Exact by construction"). */
    f->exact = !present;
    return 0;
}

/* rc: what preproc_start() / preproc_finish() returned, the reason. */
static void not_cacheable(struct key_buf *k, int rc, const char *why, const void *handle)
{
    STAT_ADD(proc_stats.uncacheable, 1);
    if (rc == KEY_TIME_MACROS) STAT_ADD(proc_stats.uncacheable_time_macros, 1);
    else STAT_ADD(proc_stats.uncacheable_headers, 1);
    log_msg(LOG_INFO, "not caching program %p: %s", (void *)handle, why);
    key_free(k);
}

static int derive_key(struct pipeline_flight *f, struct key_buf *k, const struct key_source *src,
                      const char *identity, const void *input, size_t input_len, const void *handle,
                      int may_overlap)
{
    if (src) {
        char why[1024];
        enum preproc_route route;
        struct preproc_job *job = NULL;
        store *st = pipeline_store(); /* opened first: the time below is the key's alone */
        uint64_t t0 = now_ns();
        if (!k->snap && !(k->snap = snapshot_new())) k->oom = 1;
        int rc = preproc_start(k, st, src, identity, may_overlap && preprocessor_may_overlap(), &route, &job, why,
                               sizeof why);
        if (rc != 0) {
            not_cacheable(k, rc, why, handle);
            return -1;
        }
        if (job) { /* finished by pipeline_key_finish() */
            free(f->key);
            f->key = NULL;
            f->key_len = 0;
            f->pending = job;
            f->pending_key = *k;
            f->pending_input = input;
            f->pending_input_len = input_len;
            return 0;
        }
        if (route != PREPROC_SCANNER)
            log_msg(LOG_INFO, "program %p: headers from %s in %.2f ms", (void *)handle,
                    route == PREPROC_DIRECT ? "its manifest (direct mode)" : "the preprocessor",
                    (now_ns() - t0) / 1e6);
    }
    return take_key(f, k, input, input_len);
}

int pipeline_key(struct pipeline_flight *f, struct key_buf *k, const struct key_source *src, const char *identity,
                 const void *input, size_t input_len, const void *handle)
{
    return derive_key(f, k, src, identity, input, input_len, handle, 0);
}

int pipeline_key_start(struct pipeline_flight *f, struct key_buf *k, const struct key_source *src,
                       const char *identity, const void *input, size_t input_len, const void *handle)
{
    return derive_key(f, k, src, identity, input, input_len, handle, 1);
}

/* A pending key's preprocessor waited for and its key finished (0), or
 * the flight left keyless (-1: the preprocessor failed, or `keep` is 0). */
static int finish_pending(struct pipeline_flight *f, int keep, const void *handle)
{
    struct preproc_job *job = f->pending;
    struct key_buf k = f->pending_key;
    f->pending = NULL;
    memset(&f->pending_key, 0, sizeof f->pending_key);
    if (!keep) {
        preproc_finish(job, NULL, NULL, NULL, 0);
        key_free(&k);
        return -1;
    }
    char why[1024];
    uint64_t ran_ns = 0, t0 = now_ns();
    int rc = preproc_finish(job, &k, &ran_ns, why, sizeof why);
    if (rc != 0) {
        not_cacheable(&k, rc, why, handle);
        return -1;
    }
    log_msg(LOG_INFO, "program %p: headers from the preprocessor in %.2f ms, beside the compile (%.2f ms after it)",
            (void *)handle, ran_ns / 1e6, (now_ns() - t0) / 1e6);
    return take_key(f, &k, f->pending_input, f->pending_input_len);
}

void pipeline_key_finish(struct pipeline_flight *f, size_t n, const void *handle)
{
    for (size_t i = 0; i < n; i++) {
        struct pipeline_flight *fl = &f[i];
        if (!fl->pending || finish_pending(fl, 1, handle) != 0) continue;
        /* Fill only a key nobody else fills or filled: never wait (the
         * compile is done; a waiter here could wait on a thread that waits
         * for this one's other flights). */
        memtier_entry *e = NULL;
        enum memtier_result r = memtier_acquire(fl->hash, 0, &e);
        if (r == MEMTIER_HIT && !memtier_servable(e)) { /* nothing to serve: as pipeline_begin() */
            memtier_discard(e);
            memtier_release(e);
            r = memtier_acquire(fl->hash, 0, &e);
        }
        if (r == MEMTIER_FILL) {
            fl->entry = e;
            fl->filling = 1;
        } else if (r == MEMTIER_HIT) {
            memtier_release(e);
        }
        if (r != MEMTIER_FILL && log_enabled(LOG_DEBUG)) {
            char prefix[17];
            key_prefix(fl->hash, prefix);
            log_msg(LOG_DEBUG, "late key %s: %s in this process; not stored again", prefix,
                    r == MEMTIER_HIT ? "filled already" : "filled by another thread");
        }
    }
}

/* ---- lookup ------------------------------------------------------------------ */

/* Waits for another process building the same key; 0 with the record when
 * it appeared, -1 when we should build (claim taken, or waited too long). */
static int passed_to_helper(struct cache_hash h);

static int wait_for_other_builder(store *st, struct pipeline_flight *f, struct store_record *rec, void **arena)
{
    if (passed_to_helper(f->hash)) return -1; /* its own capture: built again here, as before */
    uint64_t wait_ms = config_get()->build_wait_ms, t0 = now_ns();
    uint64_t deadline = t0 + wait_ms * 1000000u;
    unsigned sleep_us = 5000;
    for (int said = 0;; said = 1) {
        int rc = store_claim_build(st, f->hash, wait_ms ? wait_ms : 1);
        /* The holder (a capture helper) then takes this key next, at normal
         * priority. Marked at every look: a claim written anew (another
         * builder's after this one's expired) comes without the mark. */
        if (rc == CLSHIM_EBUSY) (void)store_want_build(st, f->hash);
        if (rc == CLSHIM_EBUSY && !said && log_enabled(LOG_INFO)) {
            char prefix[17];
            key_prefix(f->hash, prefix);
            log_msg(LOG_INFO, "%s is being compiled or captured by another process: waiting for it (at most "
                              "CLSHIM_BUILD_WAIT_MS=%llu ms)", prefix, (unsigned long long)wait_ms);
        }
        if (rc == CLSHIM_OK) {
            f->claimed = 1;
            /* The other builder may have stored and released just now. */
            if (local_get(st, f->hash, f->key, f->key_len, rec, arena) == CLSHIM_OK) return 0;
            if (said) log_msg(LOG_INFO, "waited %.0f ms: the other process stored nothing; compiling here",
                              (now_ns() - t0) / 1e6);
            return -1;
        }
        if (rc != CLSHIM_EBUSY) return -1;
        if (now_ns() > deadline) {
            log_msg(LOG_INFO, "waited %llu ms for another process compiling the same program; compiling here",
                    (unsigned long long)wait_ms);
            return -1;
        }
        usleep(sleep_us);
        if (sleep_us < 50000) sleep_us *= 2;
        if (local_get(st, f->hash, f->key, f->key_len, rec, arena) == CLSHIM_OK) return 0;
    }
}

/* The persistent tiers for a flight that fills: found (filled), or claimed. */
/* Whether f's key loads slower than it compiles (store_note_slow_load(), at
 * its first hit): then the driver compiles it, and nothing is stored. */
static int loads_slower(store *st, struct pipeline_flight *f)
{
    uint64_t load_ns, compile_ns;
    if (store_slow_load(st, f->hash, &load_ns, &compile_ns) != CLSHIM_OK) return 0;
    char prefix[17];
    key_prefix(f->hash, prefix);
    log_msg(LOG_INFO, "compiling %s: loading it cost %.1f ms of CPU time at its first hit, more than its compile "
                      "(%.1f ms)", prefix, load_ns / 1e6, compile_ns / 1e6);
    STAT_ADD(stat_slow_loads, 1);
    memtier_abandon(f->entry);
    f->entry = NULL;
    f->filling = 0;
    free(f->key);
    f->key = NULL;
    f->key_len = 0;
    return 1;
}

static void lookup_persistent(store *st, struct pipeline_flight *f, unsigned flags)
{
    if (loads_slower(st, f)) return;
    struct store_record sr;
    void *arena = NULL;
    int from_remote = 0;
    int rc = tier_get(st, f->hash, f->key, f->key_len, !!(flags & PIPELINE_FLEET_CLAIM), &sr, &arena,
                      &from_remote);
    if (rc == CLSHIM_ENOTFOUND && !(flags & PIPELINE_NO_CLAIM))
        rc = wait_for_other_builder(st, f, &sr, &arena) == 0 ? CLSHIM_OK : CLSHIM_ENOTFOUND;
    if (log_enabled(LOG_DEBUG)) {
        char prefix[17];
        key_prefix(f->hash, prefix);
        log_msg(LOG_DEBUG, "lookup %s: %s", prefix, rc == CLSHIM_OK ? "found on disk" : clshim_strerror(rc));
    }
    if (rc == CLSHIM_OK) {
        if (memtier_fill(f->entry, sr.binary, sr.binary_size, sr.build_log, sr.compile_ns) != 0) f->entry = NULL;
        f->filling = 0;
        f->from = from_remote ? PIPELINE_FROM_REMOTE : PIPELINE_FROM_DISK;
        f->stored_size = sr.binary_size;
        store_record_free(arena);
        if (f->claimed) store_release_build(st, f->hash), f->claimed = 0;
        return;
    }
    if (rc == CLSHIM_ECORRUPT || rc == CLSHIM_ECOLLISION) {
        char prefix[17];
        key_prefix(f->hash, prefix);
        log_msg(LOG_WARN, "cache entry %s is %s; rebuilding it", prefix, clshim_strerror(rc));
    }
    if (!f->claimed && !(flags & PIPELINE_NO_CLAIM))
        store_claim_build(st, f->hash, config_get()->build_wait_ms), f->claimed = 1;
}

enum pipeline_result pipeline_begin(struct pipeline_flight *f, size_t n, unsigned flags)
{
    store *st = pipeline_store();
    int own_fill = 0, any_failed = 0, all_hit = n > 0;
    uint64_t t0 = now_ns(), cpu0 = thread_cpu_ns();
    for (size_t i = 0; i < n; i++) {
        f[i].entry = NULL;
        f[i].filling = f[i].claimed = f[i].failed = 0;
        f[i].from = PIPELINE_FROM_MEMORY;
        f[i].t0 = t0;
        f[i].cpu0 = cpu0;
    }
    for (size_t i = 0; i < n; i++) {
        struct pipeline_flight *fl = &f[i];
        if (!fl->key) {
            all_hit = 0;
            continue;
        }
        /* Never wait for another thread while owning a fill: two builders
         * of overlapping device sets could otherwise wait on each other. */
        enum memtier_result r = memtier_acquire(fl->hash, !own_fill, &fl->entry);
        if (r == MEMTIER_HIT && memtier_failure(fl->entry)) {
            fl->failed = any_failed = 1; /* a build of this key failed in this process */
            continue;
        }
        if (r == MEMTIER_HIT && !memtier_servable(fl->entry)) {
            /* Its builder's program is gone and no bytes were kept. */
            memtier_discard(fl->entry);
            memtier_release(fl->entry);
            r = memtier_acquire(fl->hash, !own_fill, &fl->entry);
        }
        if (r == MEMTIER_FILL) {
            fl->filling = own_fill = 1;
            if (st) lookup_persistent(st, fl, flags);
        }
        all_hit &= fl->entry && !fl->filling;
    }
    if (!all_hit) return PIPELINE_BUILD;
    return any_failed ? PIPELINE_FAILED : PIPELINE_HIT;
}

const void *pipeline_binary(const struct pipeline_flight *f, size_t *size)
{
    *size = 0;
    return f->entry ? memtier_binary(f->entry, size) : NULL;
}

const char *pipeline_build_log(const struct pipeline_flight *f)
{
    return f->entry ? memtier_build_log(f->entry) : "";
}

int pipeline_failure(const struct pipeline_flight *f)
{
    return f->failed && f->entry ? memtier_failure(f->entry) : 0;
}

/* How the log lines name a flight's kind (the words the lines had before
 * the pipeline, which scripts grep): a derived program before its key, a
 * compiled object or linked program after the tier of a hit, and how each
 * is made. */
static const char *kind_noun(enum key_kind kind) { return kind == KEY_FUSION ? "derived program " : ""; }

static const char *kind_hit(enum key_kind kind)
{
    return kind == KEY_COMPILE ? ", compiled object" : kind == KEY_LINK ? ", linked program" : "";
}

static const char *kind_verb(enum key_kind kind)
{
    return kind == KEY_COMPILE ? "compiled object" : kind == KEY_LINK ? "linked"
           : kind == KEY_FUSION ? "made and built" : "compiled";
}

static const char *kind_op(enum key_kind kind)
{
    return kind == KEY_COMPILE ? "compile" : kind == KEY_LINK ? "link" : kind == KEY_FUSION ? "derived build" : "build";
}

static const char *source_name(enum pipeline_source from)
{
    return from == PIPELINE_FROM_REMOTE ? "remote" : from == PIPELINE_FROM_DISK ? "disk" : "memory";
}

void pipeline_hit(struct pipeline_flight *f, size_t n)
{
    /* What the hit cost this thread, against what the compile cost (with
     * its children: pipeline_clock). A hit's load runs no child process
     * (PoCL's binary holds the linked code), so thread CPU time is all of it. */
    double ms = n ? (now_ns() - f[0].t0) / 1e6 : 0;
    uint64_t used = n ? thread_cpu_ns() - f[0].cpu0 : 0;
    for (size_t i = 0; i < n; i++) {
        char prefix[17];
        key_prefix(f[i].hash, prefix);
        uint64_t saved = f[i].entry ? memtier_compile_ns(f[i].entry) : 0;
        f[i].compile_ns = saved;
        STAT_ADD(proc_stats.hits, 1);
        if (f[i].from == PIPELINE_FROM_MEMORY) STAT_ADD(proc_stats.memory_hits, 1);
        else if (f[i].from == PIPELINE_FROM_DISK) STAT_ADD(proc_stats.disk_hits, 1);
        STAT_ADD(proc_stats.compile_ns_saved, saved > used ? saved - used : 0);
        /* A hit must never cost more than the compile it replaces: one that
         * loaded from disk or the remote tier slower than its compile is
         * compiled from now on (loads_slower()). */
        store *st = pipeline_store();
        if (f[i].from != PIPELINE_FROM_MEMORY && saved && used / n > saved && st && !store_is_readonly(st) &&
            store_note_slow_load(st, f[i].hash, used / n, saved) == CLSHIM_OK)
            log_msg(LOG_INFO, "%s%s loaded in %.1f ms of CPU time, more than its compile (%.1f ms): the driver "
                              "compiles it from now on", kind_noun(f[i].kind), prefix, used / n / 1e6, saved / 1e6);
        if (__atomic_load_n(&profile_active, __ATOMIC_RELAXED)) {
            char outcome[24];
            snprintf(outcome, sizeof outcome, "hit (%s)", source_name(f[i].from));
            profile_build(key_kind_name(f[i].kind), prefix, outcome, f[i].device, f[0].t0, (uint64_t)(ms * 1e6),
                          used / n, saved);
        }
        log_msg(LOG_INFO, "hit %s%s on '%s' (%s%s): %.1f ms of CPU time (%.1f ms wall) instead of %.1f ms of "
                          "compile CPU time",
                kind_noun(f[i].kind), prefix, f[i].device ? f[i].device : "?", source_name(f[i].from),
                kind_hit(f[i].kind), used / n / 1e6, ms, saved / 1e6);
    }
}

void pipeline_failure_shared(struct pipeline_flight *f, size_t n)
{
    STAT_ADD(stat_failed_shared, 1);
    for (size_t i = 0; i < n; i++) {
        if (!f[i].failed) continue;
        char prefix[17];
        key_prefix(f[i].hash, prefix);
        log_msg(LOG_INFO, "failed build %s shared: error %d, not compiled again", prefix, pipeline_failure(&f[i]));
    }
}

void pipeline_rejected(struct pipeline_flight *f, size_t n, int error, const void *handle)
{
    STAT_ADD(proc_stats.rejected, 1);
    LOG_ONCE(LOG_WARN, "the driver rejected a cached binary (error %d); rebuilding and replacing it", error);
    log_msg(LOG_INFO, "the driver rejected the cached binary of program %p (error %d); rebuilding", (void *)handle,
            error);
    store *st = pipeline_store();
    for (size_t i = 0; i < n; i++) {
        if (!f[i].key) continue;
        if (st) store_delete(st, f[i].hash);
        if (f[i].entry) {
            memtier_discard(f[i].entry);
            if (f[i].filling) memtier_abandon(f[i].entry);
            else memtier_release(f[i].entry);
        }
        f[i].entry = NULL;
        f[i].filling = 0;
        f[i].stored_size = 0;
        /* Refilled from the rebuild, if nobody else pins it. */
        if (memtier_acquire(f[i].hash, 0, &f[i].entry) == MEMTIER_FILL) f[i].filling = 1;
    }
}

/* ---- build ------------------------------------------------------------------- */

/* CPU time of the children the process has waited for. */
static uint64_t children_cpu_ns(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_CHILDREN, &ru) != 0) return 0;
    return ((uint64_t)ru.ru_utime.tv_sec + (uint64_t)ru.ru_stime.tv_sec) * 1000000000u +
           ((uint64_t)ru.ru_utime.tv_usec + (uint64_t)ru.ru_stime.tv_usec) * 1000u;
}

/* Clocks running, and started ever: a clock that found none running and
 * saw none start is alone (pipeline.h). */
static unsigned long clocks_running, clocks_started;

void pipeline_clock_start(struct pipeline_clock *c)
{
    c->alone = __atomic_fetch_add(&clocks_running, 1, __ATOMIC_SEQ_CST) == 0;
    c->starts0 = __atomic_add_fetch(&clocks_started, 1, __ATOMIC_SEQ_CST);
    c->wall0 = now_ns();
    c->cpu0 = thread_cpu_ns();
    c->children0 = children_cpu_ns();
    c->wall_ns = c->cpu_ns = 0;
    c->children_counted = 0;
}

void pipeline_clock_stop(struct pipeline_clock *c)
{
    uint64_t children = children_cpu_ns() - c->children0;
    c->wall_ns = now_ns() - c->wall0;
    c->cpu_ns = thread_cpu_ns() - c->cpu0;
    c->children_counted = c->alone && __atomic_load_n(&clocks_started, __ATOMIC_SEQ_CST) == c->starts0;
    __atomic_sub_fetch(&clocks_running, 1, __ATOMIC_SEQ_CST);
    if (c->children_counted) c->cpu_ns += children;
    if (children) log_msg(LOG_DEBUG, "build clock: %.1f ms of child processes' CPU time %s", children / 1e6,
                          c->children_counted ? "counted" : "not counted (other builds ran meanwhile)");
}

int pipeline_attach(struct pipeline_flight *f, void *object, const void *tag, void (*release)(void *object))
{
    if (!f->filling || !f->entry) return -1;
    memtier_attach(f->entry, object, tag, release);
    return 0;
}

void pipeline_detach(const struct pipeline_flight *f, void *object) { memtier_detach(f->hash, object); }

const void *pipeline_serve(struct pipeline_flight *f, size_t *size, int (*retain)(void *object), void **object)
{
    *size = 0;
    *object = NULL;
    return f->entry ? memtier_serve(f->entry, size, retain, object) : NULL;
}

void pipeline_refill(struct pipeline_flight *f, const void *binary, size_t size)
{
    if (f->entry) memtier_refill(f->entry, binary, size);
}

void pipeline_keep_bytes(struct cache_hash hash, const void *binary, size_t size)
{
    memtier_entry *e;
    if (memtier_acquire(hash, 0, &e) != MEMTIER_HIT) {
        if (e) memtier_abandon(e);
        return;
    }
    size_t have;
    if (!memtier_binary(e, &have)) memtier_refill(e, binary, size);
    memtier_release(e);
}

void pipeline_keep_stored(struct cache_hash hash, const void *binary, size_t size, const char *log,
                          uint64_t compile_ns)
{
    memtier_entry *e;
    switch (memtier_acquire(hash, 0, &e)) {
    case MEMTIER_FILL:
        if (memtier_fill(e, binary, size, log, compile_ns) == 0) memtier_release(e);
        break;
    case MEMTIER_HIT: {
        size_t have;
        if (!memtier_failure(e) && !memtier_binary(e, &have)) memtier_refill(e, binary, size);
        memtier_release(e);
        break;
    }
    default:
        break; /* being filled by a build right now: that build decides */
    }
}

void pipeline_memory_setup(uint64_t limit, int keep)
{
    memtier_set_limit(limit);
    memtier_set_keep(keep);
}

uint64_t pipeline_memory_clear(void) { return memtier_clear(); }

static void built_failed(struct pipeline_flight *f, size_t n, const struct pipeline_output *out, unsigned share)
{
    STAT_ADD(stat_failed, 1);
    for (size_t i = 0; i < n; i++) {
        struct pipeline_flight *fl = &f[i];
        const char *log = out->logs && out->logs[i] ? out->logs[i] : "";
        char prefix[17] = "(uncached)";
        if (fl->key) key_prefix(fl->hash, prefix);
        uint64_t cpu = out->clock->cpu_ns / n;
        log_msg(LOG_INFO, "%s failed %s on '%s' in %.1f ms (error %d)", kind_op(fl->kind), prefix,
                fl->device ? fl->device : "?", out->clock->wall_ns / n / 1e6, out->error);
        /* Only a compile error is the inputs' own: a transient fault (out
         * of resources) is not remembered, waiters then build themselves. */
        if (fl->filling && share && (out->error == CL_BUILD_PROGRAM_FAILURE || out->error == CL_INVALID_BUILD_OPTIONS))
            memtier_fail(fl->entry, out->error, log, cpu);
        else if (fl->filling)
            memtier_abandon(fl->entry);
        if (fl->filling) fl->entry = NULL;
        fl->filling = 0;
    }
}

/* Why a binary was not stored, for the line that says so. */
static const char *not_stored_why(int rc)
{
    switch (rc) {
    case CLSHIM_EREADONLY: return "the cache is read-only";
    case CLSHIM_EUNTRUSTED:
        return "an entry this process does not trust is there, and without CLSHIM_SIGN_KEY it keeps it";
    case CLSHIM_ETOOBIG:
        return "its size is outside CLSHIM_CACHE_MIN_ENTRY..CLSHIM_CACHE_MAX_ENTRY, or over CLSHIM_CACHE_MAX_SIZE";
    default: return clshim_strerror(rc);
    }
}

/* A store that failed for a fault (not a policy): one warning per process,
 * whichever path stored, saying what to do where it can. */
static void warn_store_failed(int rc)
{
    static int warned;
    if (rc == CLSHIM_EREADONLY || rc == CLSHIM_ETOOBIG || rc == CLSHIM_EUNTRUSTED ||
        __atomic_exchange_n(&warned, 1, __ATOMIC_ACQ_REL))
        return;
    char dir[4096] = "the cache directory";
    config_cache_dir(config_get(), dir, sizeof dir);
    if (rc == CLSHIM_ENOSPC)
        log_msg(LOG_WARN, "cannot store built programs: no space left on device for %s (free space there, or "
                          "set CLSHIM_CACHE_DIR elsewhere); the app goes on uncached", dir);
    else
        log_msg(LOG_WARN, "cannot store a built program in %s (%s); the app goes on uncached", dir,
                clshim_strerror(rc));
}

/* What a late store will do, as the miss line says it. */
static const char *late_plan(void)
{
    const struct clshim_config *cfg = config_get();
    if (!cfg->cache || !pipeline_store()) return "not stored (no persistent cache)";
    if (cfg->cache_readonly) return "not stored (read-only cache)";
    if (!cfg->capture_exit_budget)
        return "to be stored at its first use or release (not at exit: CLSHIM_CAPTURE_EXIT_BUDGET=0)";
    return "to be stored at its first use, its release or exit";
}

/* Whether fl's build read exactly the bytes its key names (the caller's
 * sandbox said so, or the key names no file): a binary of other inputs is
 * never stored under this key. Counted and said when not. */
#define NOT_EXACT "its build could not be shown to read exactly the files its key names"
static int inputs_exact(struct pipeline_flight *fl)
{
    if (fl->exact) return 1;
    STAT_ADD(proc_stats.capture_lost[CAPTURE_LOST_INPUTS], 1);
    return 0;
}

/* A miss of a key the store evicted (store_was_evicted(); asked before the
 * key is stored again): counted, with the largest size limit that would
 * have kept such a key this run (an atomic maximum: threads count at once). */
static void count_evicted_miss(store *st, struct cache_hash hash)
{
    struct store_evicted ev;
    if (!st || store_was_evicted(st, hash, &ev) != CLSHIM_OK) return;
    STAT_ADD(proc_stats.misses_evicted, 1);
    char prefix[17];
    key_prefix(hash, prefix);
    if (ev.why == STORE_EVICTED_AGE) {
        STAT_ADD(proc_stats.misses_evicted_age, 1);
        log_msg(LOG_INFO, "%s was evicted for age (unused for CLSHIM_CACHE_MAX_AGE days): compiled again", prefix);
        return;
    }
    uint64_t seen = __atomic_load_n(&proc_stats.evicted_keep_limit, __ATOMIC_RELAXED);
    while (seen < ev.keep_limit && !__atomic_compare_exchange_n(&proc_stats.evicted_keep_limit, &seen, ev.keep_limit,
                                                                1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {}
    log_msg(LOG_INFO, "%s was evicted for size (%llu bytes stored): compiled again; a CLSHIM_CACHE_MAX_SIZE of %llu "
                      "bytes would have kept it", prefix, (unsigned long long)ev.size,
            (unsigned long long)ev.keep_limit);
}

/* A miss explained (cache/keydiff.h): recorded as the last miss for
 * `clshim cache why --last` and, with CLSHIM_LOG=info, the line that names
 * the nearest stored entry of the same program and what differs, into
 * `line` ("" when the store holds none). Before the new entry is stored.
 * Its line has no "miss " in it: scripts count those, one per miss. What it
 * adds to a miss: docs/cache.md, "Why a key missed". */
static void explain_miss(store *st, const struct pipeline_flight *fl, char *line, size_t len)
{
    line[0] = 0;
    struct keydiff_miss m;
    if (!st || !fl->key || keydiff_miss_of(fl->hash, fl->key, fl->key_len, &m) != 0) return;
    if (!store_is_readonly(st)) keydiff_note_miss(st, &m);
    struct keydiff_near near;
    if (!log_enabled(LOG_INFO) || keydiff_nearest(st, &m, &near) != 1) return;
    char prefix[17], nearest[17], what[1024];
    key_prefix(fl->hash, prefix);
    key_prefix(near.hash, nearest);
    keydiff_summary(near.diff, what, sizeof what);
    snprintf(line, len, "%s missed: nearest stored entry %s differs in %s", prefix, nearest, what);
    keydiff_free(near.diff);
}

void pipeline_built(struct pipeline_flight *f, size_t n, const struct pipeline_output *out)
{
    if (out->error) {
        built_failed(f, n, out, out->share_failure);
        return;
    }
    store *st = pipeline_store();
    for (size_t i = 0; i < n; i++) {
        struct pipeline_flight *fl = &f[i];
        if (!fl->filling) continue;
        STAT_ADD(proc_stats.misses, 1);
        count_evicted_miss(st, fl->hash);
        const char *log = out->logs && out->logs[i] ? out->logs[i] : "";
        fl->compile_ns = out->clock->cpu_ns / n;
        double ms = out->clock->wall_ns / n / 1e6;
        char prefix[17];
        key_prefix(fl->hash, prefix);
        const char *dev = fl->device ? fl->device : "?", *noun = kind_noun(fl->kind), *verb = kind_verb(fl->kind);
        char why[1200];
        explain_miss(st, fl, why, sizeof why);
        if (__atomic_load_n(&profile_active, __ATOMIC_RELAXED))
            profile_build(key_kind_name(fl->kind), prefix, "miss", dev, fl->t0, out->clock->wall_ns / n,
                          fl->compile_ns, fl->compile_ns);
        if (!out->late && !inputs_exact(fl)) {
            log_msg(LOG_INFO, "miss %s%s on '%s': %s in %.1f ms (%.1f ms CPU), not stored (" NOT_EXACT ")", noun,
                    prefix, dev, verb, ms, fl->compile_ns / 1e6);
            if (*why) log_msg(LOG_INFO, "%s", why);
            memtier_abandon(fl->entry);
            fl->entry = NULL;
            fl->filling = 0;
            free(fl->key);
            fl->key = NULL;
            fl->key_len = 0;
            continue;
        }
        if (out->late) {
            /* Filled with the attached program (or nothing): waiters wake
             * to it; the binary is stored by pipeline_store_late(). */
            if (memtier_fill(fl->entry, NULL, 0, log, fl->compile_ns) != 0) fl->entry = NULL;
            fl->filling = 0;
            fl->stored_size = 0;
            fl->owes_store = 1;
            /* Waiting processes want that binary: the claim stays, for
             * CLAIM_GRACE_BUILDS builds' time at most. */
            if (fl->claimed && hold_claim(fl->hash, CLAIM_GRACE_BUILDS * out->clock->wall_ns) == 0)
                fl->claimed = 0;
            log_msg(LOG_INFO, "miss %s%s on '%s': %s in %.1f ms (%.1f ms CPU), %s", noun, prefix, dev, verb, ms,
                    fl->compile_ns / 1e6, late_plan());
            if (*why) log_msg(LOG_INFO, "%s", why);
            continue;
        }
        if (!out->binaries || !out->binaries[i]) {
            memtier_abandon(fl->entry);
            fl->entry = NULL;
            fl->filling = 0;
            continue;
        }
        if (memtier_fill(fl->entry, out->binaries[i], out->sizes[i], log, fl->compile_ns) != 0) fl->entry = NULL;
        fl->filling = 0;
        if (!st) {
            log_msg(LOG_INFO, "miss %s%s on '%s': %s in %.1f ms (%.1f ms CPU)", noun, prefix, dev, verb, ms,
                    fl->compile_ns / 1e6);
            continue;
        }
        struct store_record sr = {out->binaries[i], out->sizes[i], log, fl->compile_ns, (uint32_t)fl->kind, dev, NULL};
        int rc = tier_put(st, fl->hash, fl->key, fl->key_len, &sr);
        if (rc == CLSHIM_OK) {
            STAT_ADD(proc_stats.stores, 1);
            fl->stored_size = out->sizes[i];
        } else {
            warn_store_failed(rc);
        }
        log_msg(LOG_INFO, "miss %s%s on '%s': %s in %.1f ms (%.1f ms CPU), %s %zu bytes%s%s%s", noun, prefix, dev, verb,
                ms, fl->compile_ns / 1e6, rc == CLSHIM_OK ? "stored" : "not stored", out->sizes[i],
                rc == CLSHIM_OK ? "" : " (", rc == CLSHIM_OK ? "" : not_stored_why(rc), rc == CLSHIM_OK ? "" : ")");
        if (*why) log_msg(LOG_INFO, "%s", why);
    }
}

void pipeline_uncacheable(struct pipeline_flight *f, size_t n)
{
    STAT_ADD(proc_stats.uncacheable, 1);
    for (size_t i = 0; i < n; i++) {
        if (f[i].filling) memtier_abandon(f[i].entry), f[i].entry = NULL, f[i].filling = 0;
        free(f[i].key);
        f[i].key = NULL;
        f[i].key_len = 0;
    }
}

int pipeline_store_late(struct pipeline_flight *f, const void *binary, size_t size, const char *log,
                        uint64_t read_cpu_ns)
{
    store *st = pipeline_store();
    if (!st || !f->key || size == f->stored_size) return 0;
    char prefix[17];
    key_prefix(f->hash, prefix);
    if (!inputs_exact(f)) {
        log_msg(LOG_INFO, "not stored %s: " NOT_EXACT, prefix);
        return 0;
    }
    struct store_record sr = {binary, size, log ? log : "", f->compile_ns + read_cpu_ns, (uint32_t)f->kind,
                              f->device ? f->device : "", NULL};
    int rc = tier_put(st, f->hash, f->key, f->key_len, &sr);
    if (rc == CLSHIM_OK) {
        STAT_ADD(proc_stats.stores, f->stored_size == 0);
        STAT_ADD(proc_stats.captures_stored, 1);
        log_msg(LOG_INFO, "stored %s%s: %zu bytes%s", kind_noun(f->kind), prefix, size,
                f->stored_size ? " (replaces the one stored at build)" : "");
        f->stored_size = size;
        return 1;
    }
    STAT_ADD(proc_stats.capture_lost[CAPTURE_LOST_STORE], 1);
    warn_store_failed(rc);
    log_msg(LOG_INFO, "not stored %s (%zu bytes): %s", prefix, size, not_stored_why(rc));
    return 0;
}

void pipeline_let_go(struct pipeline_flight *f)
{
    f->owes_store = 0;
    if (!f->key) return;
    drop_claim(f->hash);
    remote *rm = get_remote();
    if (rm) remote_release(rm, f->hash); /* a no-op after a push */
}

/* Keys whose claim this process passed to its capture helper: this process
 * never waits for them (it would wait for its own capture), the others do. */
#define PASSED_MAX 256
static struct cache_hash passed[PASSED_MAX];
static size_t npassed, passed_next;

static int passed_to_helper(struct cache_hash h)
{
    int found = 0;
    pthread_mutex_lock(&claims_lock);
    for (size_t i = 0; i < npassed && !found; i++) found = passed[i].lo == h.lo && passed[i].hi == h.hi;
    pthread_mutex_unlock(&claims_lock);
    return found;
}

void pipeline_pass_claim(struct pipeline_flight *f)
{
    f->owes_store = 0;
    f->claimed = 0;
    if (!f->key) return;
    pthread_mutex_lock(&claims_lock);
    for (size_t i = 0; i < nclaims; i++)
        if (claims[i].hash.lo == f->hash.lo && claims[i].hash.hi == f->hash.hi) {
            claims[i] = claims[--nclaims];
            break;
        }
    passed[passed_next] = f->hash; /* a ring: the oldest are long captured */
    passed_next = (passed_next + 1) % PASSED_MAX;
    if (npassed < PASSED_MAX) npassed++;
    pthread_mutex_unlock(&claims_lock);
    remote *rm = get_remote();
    if (rm) remote_release(rm, f->hash);
}

void pipeline_end(struct pipeline_flight *f, size_t n)
{
    store *st = pipeline_store();
    remote *rm = get_remote();
    for (size_t i = 0; i < n; i++) {
        struct pipeline_flight *fl = &f[i];
        if (fl->pending) finish_pending(fl, 0, NULL);
        /* The fleet claim goes now unless a late store still owes the
         * binary (a push gave it up already; a failed build never pushes). */
        if (fl->key && !fl->owes_store && rm) remote_release(rm, fl->hash);
        if (fl->filling) memtier_abandon(fl->entry);
        else if (fl->entry) memtier_release(fl->entry);
        fl->entry = NULL;
        fl->filling = 0;
        if (fl->claimed && st) store_release_build(st, fl->hash);
        fl->claimed = 0;
    }
}

void pipeline_flight_free(struct pipeline_flight *f)
{
    if (f->pending) finish_pending(f, 0, NULL);
    if (f->owes_store) pipeline_let_go(f);
    free(f->key);
    f->key = NULL;
    f->key_len = 0;
    snapshot_free(f->snap);
    f->snap = NULL;
}

/* ---- accounting and exit ----------------------------------------------------- */

void pipeline_count_translation(void) { STAT_ADD(stat_translations, 1); }
void pipeline_count_uncacheable(void) { STAT_ADD(proc_stats.uncacheable, 1); }
void pipeline_count_handed(void) { STAT_ADD(proc_stats.captures_handed, 1); }
void pipeline_count_capture_lost(enum capture_lost why, uint64_t n)
{
    if ((unsigned)why < CAPTURE_LOST_COUNT) STAT_ADD(proc_stats.capture_lost[why], n);
}

/* The counters so far added to the store and zeroed: a long-lived process
 * (the capture helper) makes its work visible before it ends. */
void pipeline_flush_stats(void)
{
    store *st = pipeline_store();
    if (!st || store_is_readonly(st)) return;
    struct store_stats delta = proc_stats;
    memset(&proc_stats, 0, sizeof proc_stats);
    if (store_stats_add(st, &delta) != CLSHIM_OK) log_msg(LOG_DEBUG, "cannot add counters to the store");
}

void pipeline_stats(struct pipeline_stats *out)
{
    out->store = proc_stats;
    out->memory_hits = proc_stats.memory_hits;
    out->slow_loads = stat_slow_loads;
    out->translations = stat_translations;
    out->failed = stat_failed;
    out->failed_shared = stat_failed_shared;
}

void pipeline_print_summary(void)
{
    struct pipeline_stats s;
    pipeline_stats(&s);
    /* What this process did not store itself: handed over (stored after
     * it, `clshim cache wait`) or not made, by reason. */
    char handed[512] = "";
    size_t at = 0;
    if (s.store.captures_handed)
        at += (size_t)snprintf(handed, sizeof handed, ", %llu handed to the capture helper",
                               (unsigned long long)s.store.captures_handed);
    if (s.slow_loads && at < sizeof handed)
        at += (size_t)snprintf(handed + at, sizeof handed - at, ", %llu compiled as loading is slower",
                               (unsigned long long)s.slow_loads);
    for (int i = 0, first = 1; i < CAPTURE_LOST_COUNT && at < sizeof handed; i++)
        if (s.store.capture_lost[i]) {
            at += (size_t)snprintf(handed + at, sizeof handed - at, "%s%llu %s", first ? ", captures not made: " : " ",
                                   (unsigned long long)s.store.capture_lost[i], capture_lost_name((enum capture_lost)i));
            first = 0;
        }
    char evicted[64] = "";
    if (s.store.misses_evicted)
        snprintf(evicted, sizeof evicted, " (%llu of evicted entries)", (unsigned long long)s.store.misses_evicted);
    log_msg(LOG_WARN,
            "summary: %llu hits (%llu from memory), %llu misses%s, %llu failed (%llu shared), %llu stored%s%s, "
            "%llu rejected, %llu uncacheable, %llu IL translations; compile CPU time saved %.1f ms",
            (unsigned long long)s.store.hits, (unsigned long long)s.memory_hits, (unsigned long long)s.store.misses,
            evicted, (unsigned long long)s.failed, (unsigned long long)s.failed_shared,
            (unsigned long long)s.store.stores,
            handed, config_get()->cache_readonly ? " (read-only: counters not written)" : "",
            (unsigned long long)s.store.rejected, (unsigned long long)s.store.uncacheable,
            (unsigned long long)s.translations, s.store.compile_ns_saved / 1e6);
}

/* The remote tier's counters since the last call into proc_stats. */
static void count_remote(const struct remote_counters *now)
{
    const struct remote_counters *was = &remote_counted;
    proc_stats.remote_hits += now->hits - was->hits, proc_stats.remote_misses += now->misses - was->misses;
    proc_stats.remote_errors += now->errors - was->errors, proc_stats.remote_corrupt += now->corrupt - was->corrupt;
    proc_stats.remote_pushes += now->pushes - was->pushes, proc_stats.remote_timeouts += now->timeouts - was->timeouts;
    proc_stats.remote_lost += now->lost - was->lost, proc_stats.remote_garbage += now->garbage - was->garbage;
    proc_stats.remote_oversize += now->oversize - was->oversize;
    proc_stats.remote_refused += now->refused - was->refused;
    proc_stats.remote_untrusted += now->untrusted - was->untrusted;
    proc_stats.remote_pushes_refused += now->pushes_refused - was->pushes_refused;
    remote_counted = *now;
}

void pipeline_hold_remote_refusals(void) { hold_remote_refusals = 1; }

unsigned pipeline_remote_settle(char *line, size_t len)
{
    if (len) *line = 0;
    remote *rm = __atomic_load_n(&the_remote, __ATOMIC_ACQUIRE);
    if (!rm) return 0; /* not opened: nothing was pushed */
    remote_flush(rm, REMOTE_DRAIN_MS);
    struct remote_counters now;
    remote_counters_get(rm, &now);
    count_remote(&now);
    return remote_take_refusals(rm, line, len);
}

void pipeline_exit(void)
{
    store *st = the_store;
    drop_all_claims();
    if (the_remote) {
        struct remote_counters rc;
        remote_close(the_remote, &rc); /* waits a bounded time for queued pushes */
        the_remote = NULL;
        count_remote(&rc);
        memset(&remote_counted, 0, sizeof remote_counted);
    }
    if (st) {
        /* A read-only run writes nothing, its counters included. */
        if (!store_is_readonly(st)) store_stats_add(st, &proc_stats);
        store_close(st);
        the_store = NULL;
    }
}

void pipeline_after_fork_in_child(void)
{
    the_store = NULL;
    store_once = (pthread_once_t)PTHREAD_ONCE_INIT;
    memset(&proc_stats, 0, sizeof proc_stats);
    stat_translations = stat_failed = stat_failed_shared = stat_slow_loads = 0;
    claims_lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    nclaims = 0; /* the parent's; its thread is not in this process */
    reaper_running = 0;
}
