/* fhistory.c — automatic fusion's run-length history (fusion/fhistory.h).
 *
 * One entry per (device, learned sequence, fused program key) this process
 * looked up, with the cache's record as read; at exit, before the cache
 * closes, each entry with occurrences writes this run's record: its count
 * (fb_backoff.occurrences), the load measured here (else the record's),
 * the gain fspeed.c measured here (else the record's).
 */
#include "fusion/fhistory.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/log.h"
#include "fusion/batch_int.h"
#include "program/origin.h"

struct fh_entry {
    struct fh_entry *next;
    cl_device_id dev;
    uint32_t seq;
    unsigned char *key;
    size_t key_len;
    char *options;
    int known;                   /* h is an earlier run's record */
    struct pc_derived_history h; /* as read */
    uint32_t load_us;            /* this run's load (atomic); 0: none measured */
    int logged;                  /* the deferral was logged (atomic) */
};

static pthread_mutex_t fh_lock = PTHREAD_MUTEX_INITIALIZER; /* a leaf: the list below */
static struct fh_entry *entries;                            /* never freed: a few per process */
static pthread_once_t fh_once = PTHREAD_ONCE_INIT;

uint32_t fh_wait(uint32_t last, uint64_t seen, uint32_t load_us, uint32_t loads, int32_t gain_ns)
{
    if (loads < 2 || gain_ns <= 0) return 0;
    uint64_t left = last > seen ? last - seen : 0;
    if (left < seen) left = seen;
    uint64_t gain = (uint64_t)gain_ns, load = (uint64_t)load_us * 1000;
    if (left * gain >= load) return 0;
    uint64_t pays_at = (load + gain - 1) / gain; /* from this count on, seen * gain >= load */
    CLSHIM_ASSERT(pays_at > seen);               /* else left >= seen paid above */
    uint64_t wait = pays_at - seen;
    return wait >= FB_BACKOFF_NEVER ? FB_BACKOFF_NEVER - 1 : (uint32_t)wait;
}

/* At exit, before the cache closes: this run's record of each entry. */
static void write_all(void)
{
    pthread_mutex_lock(&fh_lock);
    for (struct fh_entry *e = entries; e; e = e->next) {
        struct pc_derived_history out = e->known ? e->h : (struct pc_derived_history){0, 0, 0, 0, 0};
        out.occurrences = __atomic_load_n(&fb()->backoff[e->seq].occurrences, __ATOMIC_RELAXED);
        if (!out.occurrences) continue;
        if (out.runs < UINT32_MAX) out.runs++;
        uint32_t load = __atomic_load_n(&e->load_us, __ATOMIC_RELAXED);
        if (load) {
            out.load_us = load;
            if (out.loads < UINT32_MAX) out.loads++;
        }
        double fused_ms, unfused_ms;
        if (fs_measured(e->seq, &fused_ms, &unfused_ms)) {
            double gain = (unfused_ms - fused_ms) * 1e6;
            out.gain_ns = gain > INT32_MAX ? INT32_MAX : gain < -INT32_MAX ? -INT32_MAX : (int32_t)gain;
        }
        pc_derived_history_put(e->dev, e->options, e->key, e->key_len, &out);
    }
    pthread_mutex_unlock(&fh_lock);
}

static void arm(void) { pc_before_cache_exit(write_all); }

static struct fh_entry *find(cl_device_id dev, uint32_t seq, const void *key, size_t key_len)
{
    CLSHIM_ASSERT_HELD(&fh_lock);
    struct fh_entry *e = entries;
    while (e && !(e->dev == dev && e->seq == seq && e->key_len == key_len && !memcmp(e->key, key, key_len)))
        e = e->next;
    return e;
}

/* The entry, made with the cache's record on first use; NULL on OOM. */
static struct fh_entry *entry_of(cl_device_id dev, uint32_t seq, const void *key, size_t key_len,
                                 const char *options)
{
    pthread_mutex_lock(&fh_lock);
    struct fh_entry *e = find(dev, seq, key, key_len);
    pthread_mutex_unlock(&fh_lock);
    if (e) return e;
    if (!(e = calloc(1, sizeof *e)) || !(e->key = malloc(key_len ? key_len : 1)) || !(e->options = strdup(options))) {
        if (e) free(e->key);
        free(e);
        return NULL;
    }
    memcpy(e->key, key, key_len);
    *e = (struct fh_entry){NULL, dev, seq, e->key, key_len, e->options, 0, {0, 0, 0, 0, 0}, 0, 0};
    e->known = pc_derived_history_get(dev, options, key, key_len, &e->h) == 0; /* a read: outside the lock */
    if (e->known && log_enabled(LOG_DEBUG)) {
        char names[512];
        fa_seq_names(&fb()->plan->seqs[seq], names, sizeof names);
        log_msg(LOG_DEBUG, "fusion: auto: history of %s: %u occurrences in the last of %u runs, load %u us (%u "
                "measured), gain %.1f us", names, (unsigned)e->h.occurrences, (unsigned)e->h.runs,
                (unsigned)e->h.load_us, (unsigned)e->h.loads, e->h.gain_ns / 1e3);
    }
    pthread_once(&fh_once, arm);
    pthread_mutex_lock(&fh_lock);
    struct fh_entry *other = find(dev, seq, key, key_len); /* another queue's thread, meanwhile */
    if (!other) {
        e->next = entries;
        entries = e;
    }
    pthread_mutex_unlock(&fh_lock);
    if (other) {
        free(e->key);
        free(e->options);
        free(e);
    }
    return other ? other : e;
}

int fh_defers(const struct fq *q, int seq, const void *key, size_t key_len, const char *options,
              struct fh_entry **entry, char *why, size_t why_len)
{
    *entry = NULL;
    if (seq < 0 || !fb()->automatic || !fb()->history || q->ext || (uint32_t)seq < fb()->plan_user ||
        !config_get()->cache)
        return 0;
    struct fh_entry *e = *entry = entry_of(q->dev, (uint32_t)seq, key, key_len, options);
    if (!e || !e->known) return 0;
    uint64_t seen = __atomic_load_n(&fb()->backoff[seq].occurrences, __ATOMIC_RELAXED);
    uint32_t wait = fh_wait(e->h.occurrences, seen, e->h.load_us, e->h.loads, e->h.gain_ns);
    if (!wait) {
        if (e->h.gain_ns > 0) fs_known_faster((uint32_t)seq); /* loaded now: measured again later */
        return 0;
    }
    fb_backoff_skip((uint32_t)seq, wait);
    snprintf(why, why_len, "its last run had %u occurrences; loading the fused program costs %u us and an occurrence "
             "saves %.1f us: decided again after %u more", (unsigned)e->h.occurrences, (unsigned)e->h.load_us,
             e->h.gain_ns / 1e3, (unsigned)wait);
    if (!__atomic_exchange_n(&e->logged, 1, __ATOMIC_RELAXED) && log_enabled(LOG_INFO)) {
        char names[512];
        fa_seq_names(&fb()->plan->seqs[seq], names, sizeof names);
        log_msg(LOG_INFO, "fusion: auto: %s runs unfused for now: %s", names, why);
    }
    return 1;
}

void fh_loaded(struct fh_entry *e, double us)
{
    if (fb()->test_load_us) us = fb()->test_load_us; /* CLSHIM_FUSION_TEST_LOAD_US */
    uint32_t v = us < 1 ? 1u : us > 4e9 ? 4000000000u : (uint32_t)us;
    __atomic_store_n(&e->load_us, v, __ATOMIC_RELAXED);
    log_msg(LOG_DEBUG, "fusion: auto: loading a fused program and its first launch took %u us", (unsigned)v);
}
