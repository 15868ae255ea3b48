/* store_admin.c — whole-cache operations of store.h: listing, invariant
 * checks, verify and repair, compaction, export and import. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "cache/entry.h"
#include "cache/sign.h"
#include "cache/key.h"
#include "cache/store.h"
#include "cache/store_int.h"
#include "common/error.h"
#include "common/log.h"

static const char export_magic[8] = {'C', 'L', 'S', 'H', 'I', 'M', 'X', '1'};

/* The access record of key, or 0 when missing or malformed. */
static int access_get(store *s, MDB_txn *txn, const void *key, uint64_t out[3])
{
    MDB_val k = {STORE_KEY_LEN, (void *)key}, v;
    if (mdb_get(txn, s->db_access, &k, &v) != 0 || v.mv_size != STORE_ACCESS_LEN) return 0;
    for (int i = 0; i < 3; i++) out[i] = store_get64((const char *)v.mv_data + 8 * i);
    return 1;
}

static int atime_has(store *s, MDB_txn *txn, const void *key, uint64_t t)
{
    unsigned char ak[STORE_ATIME_KEY_LEN];
    for (int i = 0; i < 8; i++) ak[i] = (unsigned char)(t >> (56 - 8 * i));
    memcpy(ak + 8, key, STORE_KEY_LEN);
    MDB_val k = {sizeof ak, ak}, v;
    return mdb_get(txn, s->db_atime, &k, &v) == 0;
}

static uint64_t db_count(MDB_txn *txn, MDB_dbi dbi)
{
    MDB_stat st;
    return mdb_stat(txn, dbi, &st) == 0 ? (uint64_t)st.ms_entries : UINT64_MAX;
}

int store_foreach(store *s, int (*fn)(const struct store_entry_info *, void *), void *ctx)
{
    if (!s || !fn) return CLSHIM_EINVAL;
    if (!s->have_dbs) return CLSHIM_OK;
    MDB_txn *txn;
    MDB_cursor *c;
    int rc = store_read_begin(s, &txn);
    if (rc) return rc;
    if ((rc = mdb_cursor_open(txn, s->db_entries, &c)) != 0) {
        store_read_end(s, txn);
        return store_map_err(rc);
    }
    MDB_val k, v;
    char dev[256];
    for (int op = MDB_FIRST; (rc = mdb_cursor_get(c, &k, &v, op)) == 0; op = MDB_NEXT) {
        struct entry_view e;
        uint64_t acc[3];
        if (k.mv_size != STORE_KEY_LEN || entry_parse(v.mv_data, v.mv_size, &e) != CLSHIM_OK) continue;
        if (!access_get(s, txn, k.mv_data, acc)) acc[0] = e.last_access, acc[1] = e.hits;
        size_t n = e.device_len < sizeof dev - 1 ? e.device_len : sizeof dev - 1;
        memcpy(dev, e.device, n);
        dev[n] = 0;
        struct store_source src;
        int has_src = entry_source(&e, &src);
        struct store_entry_info info = {store_key_hash(k.mv_data), v.mv_size, e.binary_size, e.created,
                                        acc[0], acc[1], e.origin, dev, e.key, e.key_len, has_src ? &src : NULL};
        if (fn(&info, ctx)) break;
    }
    mdb_cursor_close(c);
    store_read_end(s, txn);
    return rc == 0 || rc == MDB_NOTFOUND ? CLSHIM_OK : store_map_err(rc);
}

/* Invariants 1-2 (store.h) within txn. */
static int invariants_hold(store *s, MDB_txn *txn)
{
    struct store_acct a;
    if (store_acct_load(s, txn, &a) != 0) return 0;
    MDB_cursor *c;
    if (mdb_cursor_open(txn, s->db_entries, &c) != 0) return 0;
    uint64_t count = 0, bytes = 0, ubytes = 0;
    int ok = 1, rc;
    MDB_val k, v;
    for (int op = MDB_FIRST; ok && (rc = mdb_cursor_get(c, &k, &v, op)) == 0; op = MDB_NEXT) {
        uint64_t acc[3];
        ok = k.mv_size == STORE_KEY_LEN && access_get(s, txn, k.mv_data, acc) &&
             atime_has(s, txn, k.mv_data, acc[0]);
        count++, bytes += v.mv_size, ubytes += ok ? acc[2] : 0;
    }
    mdb_cursor_close(c);
    return ok && count == a.count && bytes == a.bytes && ubytes == a.ubytes &&
           db_count(txn, s->db_atime) == count && db_count(txn, s->db_access) == count;
}

int store_check_invariants(store *s)
{
    if (!s) return 0;
    if (!s->have_dbs) return 1;
    MDB_txn *txn;
    if (store_read_begin(s, &txn) != CLSHIM_OK) return 0;
    int ok = invariants_hold(s, txn) && store_evicted_consistent(s, txn);
    store_read_end(s, txn);
    return ok;
}

/* ---- verify ---- */

struct keylist {
    unsigned char (*k)[STORE_ATIME_KEY_LEN];
    size_t n, cap;
    int oom;
};

static void keylist_add(struct keylist *l, const void *key, size_t len)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        void *p = realloc(l->k, cap * sizeof *l->k);
        if (!p) { l->oom = 1; return; }
        l->k = p, l->cap = cap;
    }
    memset(l->k[l->n], 0, sizeof l->k[0]);
    memcpy(l->k[l->n++], key, len < sizeof l->k[0] ? len : sizeof l->k[0]);
}

/* Full check of one record under key: decodes, compares the key hash with
 * the material, the header and the database key, and the binary checksum.
 * NULL when good, else why not (for `clshim cache verify`). */
/* With a trust set: why the entry is not sealed by one of its keys, or NULL. */
static const char *untrusted_why(const store *s, const struct entry_view *e, const void *bin)
{
    if (!s->opt.trust) return NULL;
    static __thread char why[200];
    char *log = malloc(e->log_len + 1);
    if (!log) return "out of memory while checking it";
    memcpy(log, e->log, e->log_len);
    log[e->log_len] = 0;
    struct store_source src;
    int has = entry_source(e, &src);
    struct store_record r = {bin, (size_t)e->binary_size, log, e->compile_ns, e->origin, "", has ? &src : NULL};
    const char *bad = sign_check_seal(e->key, e->key_len, &r, s->opt.trust);
    free(log);
    if (!bad) return NULL;
    snprintf(why, sizeof why, "untrusted: %s", bad);
    return why;
}

static const char *entry_problem(const store *s, const MDB_val *k, const MDB_val *v)
{
    struct entry_view e;
    if (k->mv_size != STORE_KEY_LEN) return "its database key has the wrong length";
    if (entry_parse(v->mv_data, v->mv_size, &e) != CLSHIM_OK)
        return "it does not decode (damaged, or another format version)";
    struct cache_hash h = entry_xxh3_128(e.key, e.key_len), kh = store_key_hash(k->mv_data);
    if (h.lo != e.hash.lo || h.hi != e.hash.hi) return "its key material does not hash to its key";
    if (h.lo != kh.lo || h.hi != kh.hi) return "it is stored under another key";
    void *bin = malloc(e.binary_size ? (size_t)e.binary_size : 1);
    if (!bin) return "out of memory while checking it";
    int rc = entry_unpack_binary(&e, bin);
    const char *why = rc == CLSHIM_OK ? untrusted_why(s, &e, bin) : "its binary fails its checksum (damaged)";
    free(bin);
    return why;
}

struct repair {
    struct keylist bad;   /* entries to delete */
    struct keylist stray; /* atime keys with no matching entry/access */
    struct keylist orphan;/* access keys with no entry */
};

static int repair_fn(store *s, MDB_txn *txn, void *arg)
{
    struct repair *r = arg;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < r->bad.n; i++) {
        MDB_val k = {STORE_KEY_LEN, r->bad.k[i]};
        rc = mdb_del(txn, s->db_entries, &k, NULL);
        if (rc == MDB_NOTFOUND) rc = 0;
    }
    for (size_t i = 0; rc == 0 && i < r->orphan.n; i++) {
        MDB_val k = {STORE_KEY_LEN, r->orphan.k[i]};
        rc = mdb_del(txn, s->db_access, &k, NULL);
        if (rc == MDB_NOTFOUND) rc = 0;
    }
    for (size_t i = 0; rc == 0 && i < r->stray.n; i++) {
        MDB_val k = {STORE_ATIME_KEY_LEN, r->stray.k[i]};
        rc = mdb_del(txn, s->db_atime, &k, NULL);
        if (rc == MDB_NOTFOUND) rc = 0;
    }
    /* Whatever else is off (deleted entries' index records, entries without
     * an access record, the totals) is rebuilt from the entries. */
    MDB_cursor *c;
    if (rc == 0) rc = mdb_cursor_open(txn, s->db_access, &c);
    if (rc) return rc;
    MDB_val k, v;
    for (int op = MDB_FIRST; rc == 0 && (rc = mdb_cursor_get(c, &k, &v, op)) == 0; op = MDB_NEXT) {
        MDB_val e;
        if (k.mv_size == STORE_KEY_LEN && v.mv_size == STORE_ACCESS_LEN &&
            mdb_get(txn, s->db_entries, &k, &e) == 0)
            continue;
        keylist_add(&r->orphan, k.mv_data, k.mv_size);
    }
    mdb_cursor_close(c);
    if (rc != MDB_NOTFOUND) return rc;
    rc = 0;
    for (size_t i = 0; rc == 0 && i < r->orphan.n; i++) {
        uint64_t acc[3];
        if (access_get(s, txn, r->orphan.k[i], acc)) {
            unsigned char ak[STORE_ATIME_KEY_LEN];
            for (int j = 0; j < 8; j++) ak[j] = (unsigned char)(acc[0] >> (56 - 8 * j));
            memcpy(ak + 8, r->orphan.k[i], STORE_KEY_LEN);
            MDB_val k2 = {sizeof ak, ak};
            mdb_del(txn, s->db_atime, &k2, NULL);
        }
        MDB_val k1 = {STORE_KEY_LEN, r->orphan.k[i]};
        rc = mdb_del(txn, s->db_access, &k1, NULL);
        if (rc == MDB_NOTFOUND) rc = 0;
    }
    struct store_acct a;
    if (rc == 0) rc = store_acct_load(s, txn, &a);
    if (rc == 0) rc = mdb_cursor_open(txn, s->db_entries, &c);
    if (rc) return rc;
    a.count = a.bytes = a.ubytes = 0;
    uint64_t now = store_now();
    for (int op = MDB_FIRST; rc == 0 && (rc = mdb_cursor_get(c, &k, &v, op)) == 0; op = MDB_NEXT) {
        uint64_t acc[3];
        unsigned char key[STORE_KEY_LEN];
        memcpy(key, k.mv_data, sizeof key);
        if (!access_get(s, txn, key, acc)) {
            struct entry_view e;
            acc[0] = now, acc[1] = 0;
            acc[2] = entry_parse(v.mv_data, v.mv_size, &e) == CLSHIM_OK ? e.binary_size : 0;
        }
        a.count++, a.bytes += v.mv_size, a.ubytes += acc[2];
        if (!atime_has(s, txn, key, acc[0])) {
            unsigned char ak[STORE_ATIME_KEY_LEN], accb[STORE_ACCESS_LEN];
            for (int j = 0; j < 8; j++) ak[j] = (unsigned char)(acc[0] >> (56 - 8 * j));
            memcpy(ak + 8, key, sizeof key);
            for (int j = 0; j < 3; j++) store_put64(accb + 8 * j, acc[j]);
            MDB_val k1 = {sizeof key, key}, v1 = {sizeof accb, accb}, k2 = {sizeof ak, ak}, v2 = {0, NULL};
            rc = mdb_put(txn, s->db_access, &k1, &v1, 0);
            if (rc == 0) rc = mdb_put(txn, s->db_atime, &k2, &v2, 0);
        }
    }
    mdb_cursor_close(c);
    if (rc != MDB_NOTFOUND) return rc;
    return store_acct_save(s, txn, &a);
}

int store_verify(store *s, int fix, uint64_t *checked, uint64_t *bad)
{
    return store_verify_report(s, fix, checked, bad, NULL, NULL);
}

int store_verify_report(store *s, int fix, uint64_t *checked, uint64_t *bad,
                        void (*report)(const char *what, const char *why, void *ctx), void *ctx)
{
    uint64_t nchecked = 0, nbad = 0;
    if (checked) *checked = 0;
    if (bad) *bad = 0;
    if (!s) return CLSHIM_EINVAL;
    if (!s->have_dbs) return CLSHIM_OK;
    if (fix && s->readonly) return CLSHIM_EREADONLY;
    store_flush(s);
    struct repair r = {{0}, {0}, {0}};
    MDB_txn *txn;
    MDB_cursor *c;
    int rc = store_read_begin(s, &txn);
    if (rc) return rc;
    MDB_val k, v;
    int mrc = mdb_cursor_open(txn, s->db_entries, &c);
    if (mrc == 0) {
        for (int op = MDB_FIRST; (mrc = mdb_cursor_get(c, &k, &v, op)) == 0; op = MDB_NEXT) {
            nchecked++;
            const char *why = entry_problem(s, &k, &v);
            if (!why) continue;
            keylist_add(&r.bad, k.mv_data, k.mv_size), nbad++;
            if (report) {
                char hex[33] = "(unnamed)";
                if (k.mv_size == STORE_KEY_LEN) key_hash_hex(store_key_hash(k.mv_data), hex);
                report(hex, why, ctx);
            }
        }
        mdb_cursor_close(c);
    }
    /* Index records that point at nothing, or at the wrong time. */
    if (mrc == MDB_NOTFOUND && (mrc = mdb_cursor_open(txn, s->db_atime, &c)) == 0) {
        for (int op = MDB_FIRST; (mrc = mdb_cursor_get(c, &k, &v, op)) == 0; op = MDB_NEXT) {
            uint64_t acc[3], t = 0;
            MDB_val e, hk = {STORE_KEY_LEN, (char *)k.mv_data + 8};
            for (int i = 0; i < 8 && k.mv_size == STORE_ATIME_KEY_LEN; i++)
                t = t << 8 | ((unsigned char *)k.mv_data)[i];
            if (k.mv_size != STORE_ATIME_KEY_LEN || mdb_get(txn, s->db_entries, &hk, &e) != 0 ||
                !access_get(s, txn, hk.mv_data, acc) || acc[0] != t) {
                keylist_add(&r.stray, k.mv_data, k.mv_size), nbad++;
                if (report) report("index", "a last-use record points at no entry, or at the wrong time", ctx);
            }
        }
        mdb_cursor_close(c);
    }
    int inv = invariants_hold(s, txn);
    store_read_end(s, txn);
    if (mrc != MDB_NOTFOUND) rc = store_map_err(mrc);
    else if (r.bad.oom || r.stray.oom) rc = CLSHIM_ENOMEM;
    if (rc == CLSHIM_OK && !inv && nbad == 0) { /* totals or access records off */
        nbad = 1;
        if (report) report("totals", "the entry count or sizes, or the access records, do not match the entries", ctx);
    }
    if (rc == CLSHIM_OK && fix && nbad) {
        rc = store_write(s, repair_fn, &r);
        if (rc == CLSHIM_OK && r.bad.n)
            log_msg(LOG_INFO, "cache: %zu bad entries deleted", r.bad.n);
    }
    free(r.bad.k), free(r.stray.k), free(r.orphan.k);
    if (checked) *checked = nchecked;
    if (bad) *bad = nbad;
    return rc;
}

/* ---- compaction ---- */

int store_compact(store *s)
{
    if (!s) return CLSHIM_EINVAL;
    if (s->readonly) return CLSHIM_EREADONLY;
    if (s->lock_fd < 0) return CLSHIM_EIO;
    store_flush(s);
    /* Converting our shared lock fails while any other handle holds one. */
    if (flock(s->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        log_msg(LOG_WARN, "cache %s is in use by another process; compaction needs it to be the only "
                "user (close the applications using it and retry)", s->dir);
        return errno == EWOULDBLOCK ? CLSHIM_EBUSY : CLSHIM_EIO;
    }
    static const char tmp[] = "data.mdb.compact"; /* one name: a crash leaves one stray */
    unlinkat(s->dir_fd, tmp, 0);
    int rc = CLSHIM_EIO;
    int fd = openat(s->dir_fd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    pthread_rwlock_wrlock(&s->maplock);
    if (fd >= 0) {
        int mrc = mdb_env_copyfd2(s->env, fd, MDB_CP_COMPACT);
        rc = mrc ? store_map_err(mrc) : fsync(fd) == 0 ? CLSHIM_OK : CLSHIM_EIO;
        close(fd);
    }
    if (rc == CLSHIM_OK) {
        store_env_close(s);
        if (renameat(s->dir_fd, tmp, s->dir_fd, "data.mdb") != 0) rc = CLSHIM_EIO;
        fsync(s->dir_fd);
        int orc = store_env_open(s); /* the new file, or the old one if rename failed */
        if (orc) {
            log_msg(LOG_ERROR, "cache %s cannot be reopened after compaction: %s", s->dir, mdb_strerror(orc));
            rc = store_map_err(orc);
        }
    }
    pthread_rwlock_unlock(&s->maplock);
    if (rc != CLSHIM_OK) unlinkat(s->dir_fd, tmp, 0);
    flock(s->lock_fd, LOCK_SH);
    return rc;
}

/* ---- export and import ---- */

static int write_u64(FILE *f, uint64_t v)
{
    unsigned char b[8];
    store_put64(b, v);
    return fwrite(b, 1, 8, f) == 8 ? 0 : -1;
}

static int read_u64(FILE *f, uint64_t *v)
{
    unsigned char b[8];
    if (fread(b, 1, 8, f) != 8) return -1;
    *v = store_get64(b);
    return 0;
}

int store_export(store *s, FILE *out, uint64_t *count)
{
    uint64_t n = 0;
    if (count) *count = 0;
    if (!s || !out) return CLSHIM_EINVAL;
    store_flush(s);
    if (fwrite(export_magic, 1, sizeof export_magic, out) != sizeof export_magic) return CLSHIM_EIO;
    int rc = CLSHIM_OK;
    if (s->have_dbs) {
        MDB_txn *txn;
        MDB_cursor *c;
        if ((rc = store_read_begin(s, &txn)) != CLSHIM_OK) return rc;
        int mrc = mdb_cursor_open(txn, s->db_entries, &c), opened = mrc == 0;
        MDB_val k, v;
        for (int op = MDB_FIRST; mrc == 0 && (mrc = mdb_cursor_get(c, &k, &v, op)) == 0; op = MDB_NEXT) {
            struct entry_view e;
            uint64_t acc[3];
            if (entry_parse(v.mv_data, v.mv_size, &e) != CLSHIM_OK) continue; /* verify reports it */
            void *rec = malloc(v.mv_size);
            if (!rec) { rc = CLSHIM_ENOMEM; break; }
            memcpy(rec, v.mv_data, v.mv_size);
            if (access_get(s, txn, k.mv_data, acc)) entry_set_access(rec, v.mv_size, acc[0], acc[1]);
            int w = write_u64(out, v.mv_size) || fwrite(rec, 1, v.mv_size, out) != v.mv_size;
            free(rec);
            if (w) { rc = CLSHIM_EIO; break; }
            n++;
        }
        if (opened) mdb_cursor_close(c);
        if (mrc != MDB_NOTFOUND && rc == CLSHIM_OK) rc = store_map_err(mrc);
        store_read_end(s, txn);
    }
    if (rc == CLSHIM_OK && (write_u64(out, 0) || write_u64(out, n) || fflush(out) != 0)) rc = CLSHIM_EIO;
    if (count) *count = n;
    return rc;
}

/* Checks an imported record as store_verify checks a stored one, plus the
 * limits of this cache. Returns NULL when it may be stored, else why not. */
static const char *import_check(store *s, const void *rec, size_t len, struct entry_view *e)
{
    if (entry_parse(rec, len, e) != CLSHIM_OK) return "it does not decode (damaged, or another format version)";
    struct cache_hash h = entry_xxh3_128(e->key, e->key_len);
    if (h.lo != e->hash.lo || h.hi != e->hash.hi) return "its key material does not hash to its key";
    if (e->binary_size < s->opt.min_entry || (s->opt.max_entry && e->binary_size > s->opt.max_entry))
        return "its binary is outside this cache's entry-size limits";
    void *bin = malloc(e->binary_size ? (size_t)e->binary_size : 1);
    int ok = bin && entry_unpack_binary(e, bin) == CLSHIM_OK;
    free(bin);
    return ok ? NULL : "its binary is not the one made for its key (binding mismatch)";
}

int store_import(store *s, FILE *in, uint64_t *count, uint64_t *rejected)
{
    uint64_t n = 0, bad = 0;
    if (count) *count = 0;
    if (rejected) *rejected = 0;
    if (!s || !in) return CLSHIM_EINVAL;
    if (s->readonly) return CLSHIM_EREADONLY;
    char magic[8];
    if (fread(magic, 1, 8, in) != 8 || memcmp(magic, export_magic, 8) != 0) return CLSHIM_EINVAL;
    int rc = CLSHIM_OK;
    for (;;) {
        uint64_t len, total;
        if (read_u64(in, &len) != 0) { rc = CLSHIM_EINVAL; break; }
        if (len == 0) {
            if (read_u64(in, &total) != 0 || total != n + bad) rc = CLSHIM_EINVAL;
            break;
        }
        if (len < ENTRY_HEADER_SIZE || len > ENTRY_MAX_RECORD) { rc = CLSHIM_EINVAL; break; }
        void *rec = malloc((size_t)len);
        if (!rec) { rc = CLSHIM_ENOMEM; break; }
        if (fread(rec, 1, (size_t)len, in) != len) {
            free(rec);
            rc = CLSHIM_EINVAL;
            break;
        }
        struct entry_view e;
        const char *why = import_check(s, rec, (size_t)len, &e);
        if (why) {
            bad++;
            log_msg(LOG_WARN, "cache import: record %llu rejected: %s", (unsigned long long)(n + bad), why);
        } else {
            int prc = store_put_encoded(s, e.hash, rec, (size_t)len, e.binary_size, e.last_access, e.hits);
            if (prc == CLSHIM_OK) n++;
            else if (prc == CLSHIM_ETOOBIG) bad++;
            else rc = prc;
        }
        free(rec);
        if (rc) break;
    }
    if (count) *count = n;
    if (rejected) *rejected = bad;
    return rc;
}
