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
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "common/config.h"
#include "common/log.h"
#include "fusion/batch_int.h"
#include "program/origin.h"

struct fh_entry {
    struct fh_entry *next;
    cl_device_id dev;
    uint32_t seq;
    unsigned char id[16];        /* the sequence's kernels (identity_of): the record's key */
    int known;                   /* h is an earlier run's record */
    struct pc_derived_history h; /* as read */
    uint32_t load_us;            /* this run's load (atomic); 0: none measured */
    int logged;                  /* the deferral was logged (atomic) */
};

static pthread_mutex_t fh_lock = PTHREAD_MUTEX_INITIALIZER; /* a leaf: the list below */
static struct fh_entry *entries;                            /* never freed: a few per process */
static pthread_once_t fh_once = PTHREAD_ONCE_INIT;

/* What the record of a sequence is kept under: its kernels in order, each
 * by its program's origin (kind, options, input: fk_kernel.origin_hash)
 * and its name. Known when the sequence is learned, before any occurrence
 * is held, so that a sequence whose fused program would not pay is never
 * held nor keyed (the hold, the fused key and its first look cost a
 * 30-chain run on NVIDIA 6 % before). Two fused programs of one sequence
 * (other ranges, argument classes) share it: a prediction. -1 when a
 * kernel's program is not known (it cannot be fused). */
static int identity_of(const struct fk_kernel *const *ks, uint32_t n, unsigned char id[16])
{
    XXH3_state_t st;
    XXH3_128bits_reset(&st);
    for (uint32_t i = 0; i < n; i++) {
        if (!ks[i] || !ks[i]->origin_ok || !ks[i]->name) return -1;
        XXH3_128bits_update(&st, ks[i]->origin_hash, sizeof ks[i]->origin_hash);
        XXH3_128bits_update(&st, ks[i]->name, strlen(ks[i]->name) + 1);
    }
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(&st));
    memcpy(id, c.digest, 16);
    return 0;
}

uint32_t fh_wait(uint32_t last, uint64_t seen, uint32_t load_us, uint32_t loads, int32_t gain_ns)
{
    if (loads < 2 || gain_ns <= 0) return 0;
    uint64_t left = last > seen ? last - seen : 0;
    if (left < seen) left = seen;
    uint64_t gain = (uint64_t)gain_ns, load = (uint64_t)load_us * 1000 * FH_MARGIN;
    if (left * gain >= load) return 0;
    uint64_t pays_at = (load + gain - 1) / gain; /* from this count on, seen * gain >= FH_MARGIN loads */
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
        pc_derived_history_put(e->dev, "", e->id, sizeof e->id, &out);
    }
    pthread_mutex_unlock(&fh_lock);
}

static void arm(void) { pc_before_cache_exit(write_all); }

static struct fh_entry *find(cl_device_id dev, uint32_t seq)
{
    CLSHIM_ASSERT_HELD(&fh_lock);
    struct fh_entry *e = entries;
    while (e && !(e->dev == dev && e->seq == seq)) e = e->next;
    return e;
}

/* The entry of sequence seq on dev, made on first use with the cache's
 * record of kernels ks (NULL: find only); NULL when none, on OOM, or when
 * a kernel's program is not known. */
static struct fh_entry *entry_of(cl_device_id dev, uint32_t seq, const struct fk_kernel *const *ks, uint32_t n)
{
    pthread_mutex_lock(&fh_lock);
    struct fh_entry *e = find(dev, seq);
    pthread_mutex_unlock(&fh_lock);
    if (e || !ks) return e;
    unsigned char id[16];
    if (identity_of(ks, n, id) != 0 || !(e = calloc(1, sizeof *e))) return NULL;
    e->dev = dev;
    e->seq = seq;
    memcpy(e->id, id, sizeof id);
    /* A read, outside the lock. A record is written by a run (runs >= 1):
     * one that says otherwise (a remote tier's, damaged) predicts nothing. */
    e->known = pc_derived_history_get(dev, "", id, sizeof id, &e->h) == 0 && e->h.runs > 0;
    if (e->known && log_enabled(LOG_DEBUG)) {
        char names[512];
        fa_seq_names(&fb()->plan->seqs[seq], names, sizeof names);
        log_msg(LOG_DEBUG, "fusion: auto: history of %s: %u occurrences in the last of %u runs, load %u us (%u "
                "measured), gain %.1f us", names, (unsigned)e->h.occurrences, (unsigned)e->h.runs,
                (unsigned)e->h.load_us, (unsigned)e->h.loads, e->h.gain_ns / 1e3);
    }
    pthread_once(&fh_once, arm);
    pthread_mutex_lock(&fh_lock);
    struct fh_entry *other = find(dev, seq); /* another queue's thread, meanwhile */
    if (!other) {
        e->next = entries;
        entries = e;
    }
    pthread_mutex_unlock(&fh_lock);
    if (other) free(e);
    return other ? other : e;
}

/* Whether the history is kept for sequence seq of q: a learned one, with the cache and the history on. */
static int kept(const struct fq *q, int seq)
{
    return seq >= 0 && fb()->automatic && fb()->history && !q->ext && (uint32_t)seq >= fb()->plan_user &&
           config_get()->cache;
}

/* Entry e's decision with `seen` occurrences counted: 1 with the
 * sequence's back-off set and `why` (where why_len > 0), 0 to load now. */
static int decide(struct fh_entry *e, uint32_t seq, char *why, size_t why_len)
{
    if (!e || !e->known) return 0;
    uint64_t seen = __atomic_load_n(&fb()->backoff[seq].occurrences, __ATOMIC_RELAXED);
    uint32_t wait = fh_wait(e->h.occurrences, seen, e->h.load_us, e->h.loads, e->h.gain_ns);
    CLSHIM_ASSERT(wait < FB_BACKOFF_NEVER); /* a deferral ends some day: never the retirement's mark */
    if (!wait) {
        if (e->h.gain_ns > 0) fs_known_faster(seq); /* loaded now: measured again later */
        return 0;
    }
    fb_backoff_skip(seq, wait);
    /* Written only where it is read: formatting it cost a deferred 30-chain
     * run a quarter of its learning (7,300 of 27,000 instructions). */
    int log_now = !__atomic_exchange_n(&e->logged, 1, __ATOMIC_RELAXED) && log_enabled(LOG_INFO);
    if (!why_len && !log_now) return 1;
    char text[300];
    snprintf(text, sizeof text, "its last run had %u occurrences; loading the fused program costs %u us and an "
             "occurrence saves %.1f us: decided again after %u more", (unsigned)e->h.occurrences,
             (unsigned)e->h.load_us, e->h.gain_ns / 1e3, (unsigned)wait);
    if (why_len) snprintf(why, why_len, "%s", text);
    if (log_now) {
        char names[512];
        fa_seq_names(&fb()->plan->seqs[seq], names, sizeof names);
        log_msg(LOG_INFO, "fusion: auto: %s runs unfused for now: %s", names, text);
    }
    return 1;
}

void fh_learned(const struct fq *q, uint32_t seq, struct fk_kernel *const *run, uint32_t n)
{
    if (!kept(q, (int)seq)) return;
    decide(entry_of(q->dev, seq, (const struct fk_kernel *const *)run, n), seq, NULL, 0);
}

int fh_defers(const struct fq *q, int seq, struct fh_entry **entry, char *why, size_t why_len)
{
    *entry = NULL;
    if (!kept(q, seq)) return 0;
    const struct fk_kernel *ks[PLAN_MAX_SEQ];
    uint32_t n = q->nheld <= PLAN_MAX_SEQ ? q->nheld : 0;
    for (uint32_t i = 0; i < n; i++) ks[i] = q->held[i].rec;
    /* Learned on this device, the record is read (fh_learned); on another
     * device, or a window learned at a refusal, it is read now. */
    struct fh_entry *e = *entry = entry_of(q->dev, (uint32_t)seq, n ? ks : NULL, n);
    return decide(e, (uint32_t)seq, why, why_len);
}

void fh_loaded(struct fh_entry *e, double us)
{
    if (fb()->test_load_us) us = fb()->test_load_us; /* CLSHIM_FUSION_TEST_LOAD_US */
    uint32_t v = us < 1 ? 1u : us > 4e9 ? 4000000000u : (uint32_t)us;
    __atomic_store_n(&e->load_us, v, __ATOMIC_RELAXED);
    log_msg(LOG_DEBUG, "fusion: auto: loading a fused program and its first launch took %u us", (unsigned)v);
}
