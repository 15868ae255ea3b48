/* store_evicted.c — the record of evicted keys (store.h, "Evicted keys"):
 * which keys eviction deleted, each with its entry's stored size, why, and
 * how many bytes had been evicted up to it, so that a miss of one can be
 * told from a miss of a key never stored, and the size limit that would
 * have kept it estimated (store_was_evicted()).
 *
 * Layout. "evicted": 16-byte hash -> EV_LEN bytes (little-endian u64s:
 * seq, stored size, bytes evicted up to and with it, why); "evicted-order":
 * 8-byte big-endian seq -> 16-byte hash, so the oldest is the first record;
 * meta "evicted": the next seq and the bytes ever evicted. Every change is
 * made in the caller's write transaction, beside the eviction or store
 * that causes it (invariant 4 of store.h).
 */
#include <string.h>

#include "cache/store_int.h"
#include "common/error.h"

#define EV_LEN 32

static uint64_t evicted_max; /* 0: STORE_EVICTED_MAX */
void store_set_evicted_max_for_test(uint64_t n) { evicted_max = n; }
static uint64_t record_cap(void) { return evicted_max ? evicted_max : STORE_EVICTED_MAX; }

int store_evicted_open(store *s, MDB_txn *txn)
{
    unsigned create = s->readonly ? 0 : MDB_CREATE;
    s->have_evicted = 0;
    int rc = mdb_dbi_open(txn, "evicted", create, &s->db_evicted);
    if (rc == 0) rc = mdb_dbi_open(txn, "evicted-order", create, &s->db_evicted_order);
    if (rc == 0) s->have_evicted = 1;
    return rc == MDB_NOTFOUND && s->readonly ? 0 : rc; /* a cache older than the record */
}

/* Deletes key's two records; MDB_NOTFOUND when it has none. */
static int forget(store *s, MDB_txn *txn, const unsigned char *key)
{
    MDB_val k = {STORE_KEY_LEN, (void *)key}, v;
    int rc = mdb_get(txn, s->db_evicted, &k, &v);
    if (rc) return rc;
    unsigned char seq[8];
    store_put_be64(seq, v.mv_size == EV_LEN ? store_get64(v.mv_data) : 0);
    MDB_val ok = {sizeof seq, seq};
    rc = mdb_del(txn, s->db_evicted_order, &ok, NULL);
    if (rc && rc != MDB_NOTFOUND) return rc;
    return mdb_del(txn, s->db_evicted, &k, NULL);
}

/* Drops the oldest record (the first of "evicted-order"). */
static int drop_oldest(store *s, MDB_txn *txn)
{
    MDB_cursor *c;
    int rc = mdb_cursor_open(txn, s->db_evicted_order, &c);
    if (rc) return rc;
    MDB_val k, v;
    unsigned char key[STORE_KEY_LEN];
    rc = mdb_cursor_get(c, &k, &v, MDB_FIRST);
    int named = rc == 0 && v.mv_size == STORE_KEY_LEN;
    if (named) memcpy(key, v.mv_data, sizeof key);
    if (rc == 0) rc = mdb_cursor_del(c, 0);
    mdb_cursor_close(c);
    if (rc || !named) return rc;
    MDB_val hk = {sizeof key, key};
    rc = mdb_del(txn, s->db_evicted, &hk, NULL);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

int store_evicted_note(store *s, MDB_txn *txn, const unsigned char *key, uint64_t size, unsigned why)
{
    if (!s->have_evicted) return 0;
    uint64_t m[2]; /* next seq, bytes ever evicted */
    int rc = store_meta_get(s, txn, "evicted", m, 2);
    if (rc == 0) rc = forget(s, txn, key); /* never two records of one key */
    if (rc && rc != MDB_NOTFOUND) return rc;
    MDB_stat st;
    while ((rc = mdb_stat(txn, s->db_evicted_order, &st)) == 0 && st.ms_entries >= record_cap())
        if ((rc = drop_oldest(s, txn)) != 0) return rc;
    if (rc) return rc;
    uint64_t seq = m[0]++;
    m[1] += size;
    unsigned char val[EV_LEN], seq_be[8];
    store_put64(val, seq);
    store_put64(val + 8, size);
    store_put64(val + 16, m[1]);
    store_put64(val + 24, why);
    store_put_be64(seq_be, seq);
    MDB_val k = {STORE_KEY_LEN, (void *)key}, v = {sizeof val, val};
    MDB_val ok = {sizeof seq_be, seq_be}, ov = {STORE_KEY_LEN, (void *)key};
    if ((rc = mdb_put(txn, s->db_evicted, &k, &v, 0)) != 0) return rc;
    if ((rc = mdb_put(txn, s->db_evicted_order, &ok, &ov, 0)) != 0) return rc;
    return store_meta_put(s, txn, "evicted", m, 2);
}

int store_evicted_forget(store *s, MDB_txn *txn, const unsigned char *key)
{
    if (!s->have_evicted) return 0;
    int rc = forget(s, txn, key);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

int store_evicted_drop(store *s, MDB_txn *txn)
{
    if (!s->have_evicted) return 0;
    int rc = mdb_drop(txn, s->db_evicted, 0);
    return rc ? rc : mdb_drop(txn, s->db_evicted_order, 0);
}

/* The estimate is store.h's (store_was_evicted()): the bytes stored now
 * and those evicted after the entry were all used after it, so LRU keeps
 * the entry only under a limit whose low water holds them and the entry. */
int store_evicted_get(store *s, MDB_txn *txn, const unsigned char *key, struct store_evicted *out)
{
    if (!s->have_evicted) return MDB_NOTFOUND;
    MDB_val k = {STORE_KEY_LEN, (void *)key}, v;
    int rc = mdb_get(txn, s->db_evicted, &k, &v);
    if (rc) return rc;
    if (v.mv_size != EV_LEN) return MDB_CORRUPTED;
    const unsigned char *p = v.mv_data;
    uint64_t size = store_get64(p + 8), upto = store_get64(p + 16), m[2];
    struct store_acct a;
    if ((rc = store_acct_load(s, txn, &a)) != 0 || (rc = store_meta_get(s, txn, "evicted", m, 2)) != 0) return rc;
    uint64_t needed = a.bytes + (m[1] > upto ? m[1] - upto : 0) + size;
    out->size = size;
    out->why = (uint32_t)store_get64(p + 24);
    out->keep_limit = (needed * 100 + STORE_LOW_WATER_PCT - 1) / STORE_LOW_WATER_PCT;
    return 0;
}

int store_evicted_consistent(store *s, MDB_txn *txn)
{
    if (!s->have_evicted) return 1;
    MDB_stat byhash, byseq;
    if (mdb_stat(txn, s->db_evicted, &byhash) || mdb_stat(txn, s->db_evicted_order, &byseq)) return 0;
    if (byhash.ms_entries != byseq.ms_entries || byseq.ms_entries > record_cap()) return 0;
    MDB_cursor *c;
    if (mdb_cursor_open(txn, s->db_evicted_order, &c) != 0) return 0;
    MDB_val k, v;
    int ok = 1;
    for (MDB_cursor_op op = MDB_FIRST; ok && mdb_cursor_get(c, &k, &v, op) == 0; op = MDB_NEXT) {
        MDB_val rec, entry;
        /* each seq names a key whose record has that seq, and whose entry is gone */
        ok = k.mv_size == 8 && v.mv_size == STORE_KEY_LEN && mdb_get(txn, s->db_evicted, &v, &rec) == 0 &&
             rec.mv_size == EV_LEN && store_get64(rec.mv_data) == store_get_be64(k.mv_data) &&
             mdb_get(txn, s->db_entries, &v, &entry) == MDB_NOTFOUND;
    }
    mdb_cursor_close(c);
    return ok;
}
