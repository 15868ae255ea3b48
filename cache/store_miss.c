/* store_miss.c — what the store keeps to explain a miss (store.h,
 * "Explaining a miss"): the index of each program's entries (a "family"
 * record in "meta", written in the store's own transaction) and the last
 * miss (a small file beside data.mdb).
 *
 * Why an index and not a scan: a miss wants the entries of its own
 * program, a handful among what may be 10^5 entries of others, and it must
 * cost next to nothing beside the compile (docs/cache.md, "Why a key
 * missed", measures it). A scan would read every entry's header, O(store);
 * the family record makes it one B-tree lookup plus one per member, at most
 * STORE_FAMILY_MAX. The record is kept up to date where entries are added
 * (put_fn), never where they go: a member evicted or removed since is
 * skipped when read and dropped at the family's next store, so eviction
 * and removal stay as they were.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/entry.h"
#include "cache/key.h"
#include "cache/store.h"
#include "cache/store_int.h"
#include "common/error.h"

#define LAST_MISS "last-miss"

/* A family record: per member, newest first, the entry's hash key and
 * where its key's input field starts (4 bytes, little-endian), so reading
 * a member's key material never walks its fields. */
#define MEMBER_LEN (STORE_KEY_LEN + 4)

static void family_name(struct cache_hash family, char name[48])
{
    snprintf(name, 48, "family %016llx%016llx", (unsigned long long)family.hi, (unsigned long long)family.lo);
}

int store_family_of(const void *rec, size_t len, struct store_family_ref *ref)
{
    const void *key;
    size_t key_len, at;
    if (entry_peek_key(rec, len, &key, &key_len, NULL) != CLSHIM_OK ||
        key_family(key, key_len, &ref->family, &at) != 1 || at > UINT32_MAX)
        return 0;
    ref->input_at = (uint32_t)at;
    return 1;
}

int store_family_add(store *s, MDB_txn *txn, const struct store_family_ref *ref, const unsigned char key[STORE_KEY_LEN])
{
    char name[48];
    family_name(ref->family, name);
    unsigned char list[STORE_FAMILY_MAX * MEMBER_LEN];
    size_t n = 1;
    memcpy(list, key, STORE_KEY_LEN);
    for (int b = 0; b < 4; b++) list[STORE_KEY_LEN + b] = (unsigned char)(ref->input_at >> (8 * b));
    MDB_val k = {strlen(name), name}, v;
    int rc = mdb_get(txn, s->db_meta, &k, &v);
    if (rc && rc != MDB_NOTFOUND) return rc;
    for (size_t i = 0; rc == 0 && n < STORE_FAMILY_MAX && (i + 1) * MEMBER_LEN <= v.mv_size; i++) {
        const unsigned char *m = (const unsigned char *)v.mv_data + i * MEMBER_LEN;
        MDB_val mk = {STORE_KEY_LEN, (void *)m}, mv;
        if (memcmp(m, key, STORE_KEY_LEN) == 0 || mdb_get(txn, s->db_entries, &mk, &mv) != 0) continue;
        memcpy(list + n++ * MEMBER_LEN, m, MEMBER_LEN);
    }
    MDB_val nv = {n * MEMBER_LEN, list};
    return mdb_put(txn, s->db_meta, &k, &nv, 0);
}

void store_family_free(struct store_family_member *m, size_t n)
{
    for (size_t i = 0; m && i < n; i++) {
        free(m[i].key);
        m[i].key = NULL;
    }
}

/* Member i of the family record v into *out: 1 when it is still stored
 * (a copy of its key before the input), 0 when not, -1 out of memory. The
 * key under a hash the record lists is the one that was added (an entry's
 * hash is of its key material): only where its input starts is checked.
 * Reads the map: the caller's guard is armed. */
static int read_member(store *s, MDB_txn *txn, const MDB_val *v, size_t i, struct store_family_member *out)
{
    const unsigned char *m = (const unsigned char *)v->mv_data + i * MEMBER_LEN;
    MDB_val mk = {STORE_KEY_LEN, (void *)m}, mv;
    const void *key;
    size_t key_len, at = (size_t)m[16] | (size_t)m[17] << 8 | (size_t)m[18] << 16 | (size_t)m[19] << 24;
    uint64_t created;
    if (mdb_get(txn, s->db_entries, &mk, &mv) != 0 ||
        entry_peek_key(mv.mv_data, mv.mv_size, &key, &key_len, &created) != CLSHIM_OK || at + 6 > key_len ||
        memcmp((const char *)key + at, "input=", 6) != 0)
        return 0;
    if (!(out->key = malloc(at ? at : 1))) return -1;
    memcpy(out->key, key, at);
    out->key_len = at;
    out->hash = store_key_hash(m);
    out->created = created;
    return 1;
}

int store_family_get(store *s, struct cache_hash family, struct store_family_member *out, size_t max, size_t *n)
{
    *n = 0;
    if (!s || (max && !out)) return CLSHIM_EINVAL;
    if (!s->have_dbs) return CLSHIM_OK;
    MDB_txn *txn;
    int rc = store_read_begin(s, &txn);
    if (rc) return rc;
    volatile size_t got = 0;
    struct store_guard g;
    store_guard_arm(&g);
    if (sigsetjmp(g.jb, 0)) { /* a page of the record or an entry is past the end of data.mdb */
        store_family_free(out, got);
        store_read_fault(s, txn);
        return CLSHIM_EIO;
    }
    char name[48];
    family_name(family, name);
    MDB_val k = {strlen(name), name}, v;
    rc = mdb_get(txn, s->db_meta, &k, &v) == 0 ? CLSHIM_OK : CLSHIM_ENOTFOUND;
    for (size_t i = 0; rc == CLSHIM_OK && got < max && (i + 1) * MEMBER_LEN <= v.mv_size; i++) {
        int r = read_member(s, txn, &v, i, &out[got]);
        if (r < 0) rc = CLSHIM_ENOMEM;
        got += r > 0;
    }
    store_guard_disarm(&g);
    store_read_end(s, txn);
    if (rc == CLSHIM_ENOMEM) {
        store_family_free(out, got);
        return rc;
    }
    *n = got;
    return CLSHIM_OK;
}

/* ---- the last miss ----
 * Written in place under an exclusive flock, read under a shared one: a
 * file created and renamed over the last (or truncated to zero and
 * written) makes ext4 flush it at once (its auto_da_alloc), 140-700 us of
 * a miss where this costs 3 us. The frame (length, XXH3-64) catches what a
 * crash part way leaves. */

#define LAST_MISS_FRAME 16

int store_note_last_miss(store *s, const void *rec, size_t len)
{
    if (!s || (!rec && len)) return CLSHIM_EINVAL;
    if (store_is_readonly(s)) return CLSHIM_EREADONLY;
    if (len > STORE_LAST_MISS_MAX) return CLSHIM_ETOOBIG;
    unsigned char *frame = malloc(LAST_MISS_FRAME + len);
    if (!frame) return CLSHIM_ENOMEM;
    store_put64(frame, len);
    store_put64(frame + 8, entry_xxh3_64(rec, len));
    memcpy(frame + LAST_MISS_FRAME, rec, len);
    int rc = CLSHIM_EIO;
    int fd = openat(s->dir_fd, LAST_MISS, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0 && flock(fd, LOCK_EX) == 0 &&
        pwrite(fd, frame, LAST_MISS_FRAME + len, 0) == (ssize_t)(LAST_MISS_FRAME + len) &&
        ftruncate(fd, (off_t)(LAST_MISS_FRAME + len)) == 0)
        rc = CLSHIM_OK;
    if (fd >= 0) close(fd);
    free(frame);
    return rc;
}

int store_last_miss(store *s, void **rec, size_t *len)
{
    *rec = NULL;
    *len = 0;
    if (!s) return CLSHIM_EINVAL;
    int fd = openat(s->dir_fd, LAST_MISS, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT ? CLSHIM_ENOTFOUND : CLSHIM_EIO;
    struct stat st;
    unsigned char *buf = NULL;
    int rc = flock(fd, LOCK_SH) == 0 && fstat(fd, &st) == 0 ? CLSHIM_OK : CLSHIM_EIO;
    if (rc == CLSHIM_OK && (!S_ISREG(st.st_mode) || st.st_size < LAST_MISS_FRAME ||
                            (uint64_t)st.st_size > LAST_MISS_FRAME + (uint64_t)STORE_LAST_MISS_MAX))
        rc = CLSHIM_ECORRUPT;
    if (rc == CLSHIM_OK && !(buf = malloc((size_t)st.st_size + 1))) rc = CLSHIM_ENOMEM;
    if (rc == CLSHIM_OK && pread(fd, buf, (size_t)st.st_size, 0) != (ssize_t)st.st_size) rc = CLSHIM_EIO;
    close(fd);
    size_t n = rc == CLSHIM_OK ? (size_t)store_get64(buf) : 0;
    if (rc == CLSHIM_OK && (n != (size_t)st.st_size - LAST_MISS_FRAME ||
                            entry_xxh3_64(buf + LAST_MISS_FRAME, n) != store_get64(buf + 8)))
        rc = CLSHIM_ECORRUPT;
    if (rc) {
        free(buf);
        return rc;
    }
    memmove(buf, buf + LAST_MISS_FRAME, n);
    buf[n] = 0;
    *rec = buf;
    *len = n;
    return CLSHIM_OK;
}
