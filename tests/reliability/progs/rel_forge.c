/* rel_forge — injects damage into a real cache directory, below the store
 * (raw LMDB edits) or through it, for the corruption and driver-fault tests.
 *
 *   rel_forge corrupt DIR MODE    damage every value in "entries":
 *       flip      one bit flipped at a pseudo-random offset
 *       truncate  the value cut to half its length
 *       extend    64 garbage bytes appended
 *       sizes     the binary-size field set to 2^40 and the record checksum
 *                 recomputed, so only the decoder's size checks can catch it
 *       keylen    the key-length field made larger than the record, checksum
 *                 recomputed
 *       swap      each entry gets the next entry's binary, moved with its
 *                 sizes, flags and binding, the record checksum recomputed:
 *                 every record self-consistent, every binary under the wrong
 *                 key (needs two entries)
 *   rel_forge garble DIR          through the store API: every entry's binary
 *                                 replaced by garbage of the same size (the
 *                                 checksums are valid: only the driver can
 *                                 refuse it)
 *   rel_forge huge DIR MIB        the same with MIB-MiB binaries (a huge binary
 *                                 for out-of-memory tests)
 *   rel_forge stale-reader DIR    a child opens a read transaction and is
 *                                 SIGKILLed, leaving its reader slot in lock.mdb
 *   rel_forge stale-writer DIR    the same holding the write lock (a writer
 *                                 killed mid-transaction)
 *   rel_forge hold DIR            keeps the environment open until killed (so
 *                                 the next opener does not reset lock.mdb)
 *   rel_forge seed FILE           writes one valid encoded entry (fuzz seed)
 *   rel_forge swap-files A B OUT  "swap" on two records in files (the remote
 *                                 tier's values): OUT is A with B's binary
 *   rel_forge plant DIR FROM [--seal KEYFILE | --keep-seal]
 *                                 through the store API: every entry of DIR
 *                                 gets the binary and log of FROM's first
 *                                 entry (another program's real binary) under
 *                                 its own, honest key: every check but a seal
 *                                 passes. --seal seals it with KEYFILE (the
 *                                 attacker's own key); --keep-seal keeps the
 *                                 entry's seal (made for its old binary)
 * Prints how many values it changed; exit 1 when none. */
#include <lmdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cache/entry.h"
#include "cache/sign.h"
#include "cache/store.h"
#include "common/error.h"

static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* Recomputes the record checksum (offset 64, computed with the field zero). */
static void reseal(unsigned char *rec, size_t len)
{
    put64(rec + 64, 0);
    put64(rec + 64, entry_xxh3_64(rec, len));
}

/* Record a with the binary of record b, moved together with everything that
 * describes it (flags, sizes, binding) and resealed: a self-consistent record
 * whose binary belongs to another key. Returns its length (0: unparsable). */
static size_t swapped_record(const MDB_val *a, const MDB_val *b, unsigned char **out)
{
    struct entry_view va, vb;
    if (entry_parse(a->mv_data, a->mv_size, &va) || entry_parse(b->mv_data, b->mv_size, &vb)) return 0;
    struct entry_fields f = {
        .hash = va.hash, .flags = vb.flags, .origin = va.origin, .binary_size = vb.binary_size,
        .binding = vb.binding, .created = va.created, .last_access = va.last_access, .hits = va.hits,
        .compile_ns = va.compile_ns, .key = va.key, .key_len = va.key_len, .device = va.device,
        .device_len = va.device_len, .log = va.log, .log_len = va.log_len, .payload = vb.payload,
        .payload_size = vb.payload_size,
    };
    size_t n = entry_encoded_size(&f);
    if (!n || !(*out = malloc(n))) return 0;
    entry_write(*out, &f);
    return n;
}

static int env_open(const char *dir, MDB_env **env, MDB_txn **txn, MDB_dbi *dbi)
{
    int rc = mdb_env_create(env);
    if (!rc) rc = mdb_env_set_maxdbs(*env, 8);
    if (!rc) rc = mdb_env_set_mapsize(*env, (size_t)1 << 30);
    if (!rc) rc = mdb_env_open(*env, dir, MDB_NOTLS, 0600);
    if (!rc) rc = mdb_txn_begin(*env, NULL, 0, txn);
    if (!rc) rc = mdb_dbi_open(*txn, "entries", 0, dbi);
    if (rc) fprintf(stderr, "rel_forge: %s: %s\n", dir, mdb_strerror(rc));
    return rc;
}

static int corrupt(const char *dir, const char *mode)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    if (env_open(dir, &env, &txn, &dbi)) return 1;
    /* Collect first: values are rewritten after the scan. */
    size_t n = 0, cap = 64;
    MDB_val *keys = malloc(cap * sizeof *keys), *vals = malloc(cap * sizeof *vals);
    MDB_cursor *c;
    mdb_cursor_open(txn, dbi, &c);
    MDB_val k, v;
    for (int op = MDB_FIRST; mdb_cursor_get(c, &k, &v, op) == 0; op = MDB_NEXT) {
        if (n == cap) {
            cap *= 2;
            keys = realloc(keys, cap * sizeof *keys);
            vals = realloc(vals, cap * sizeof *vals);
        }
        keys[n].mv_size = k.mv_size;
        keys[n].mv_data = malloc(k.mv_size);
        memcpy(keys[n].mv_data, k.mv_data, k.mv_size);
        vals[n].mv_size = v.mv_size;
        vals[n].mv_data = malloc(v.mv_size + 64);
        memcpy(vals[n].mv_data, v.mv_data, v.mv_size);
        n++;
    }
    mdb_cursor_close(c);
    /* The originals, for "swap" (which reads entry i + 1 after rewriting i). */
    MDB_val *keep = malloc((n ? n : 1) * sizeof *keep);
    for (size_t i = 0; i < n; i++) {
        keep[i].mv_size = vals[i].mv_size;
        keep[i].mv_data = malloc(vals[i].mv_size);
        memcpy(keep[i].mv_data, vals[i].mv_data, vals[i].mv_size);
    }
    int changed = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char *rec = vals[i].mv_data;
        size_t len = vals[i].mv_size;
        if (!strcmp(mode, "flip")) {
            size_t off = (len * 7919u + i * 104729u) % len;
            rec[off] ^= (unsigned char)(1u << (off % 8));
        } else if (!strcmp(mode, "truncate")) {
            vals[i].mv_size = len / 2;
        } else if (!strcmp(mode, "extend")) {
            for (int j = 0; j < 64; j++) rec[len + j] = (unsigned char)(j * 37 + 11);
            vals[i].mv_size = len + 64;
        } else if (!strcmp(mode, "sizes")) {
            put64(rec + 32, (uint64_t)1 << 40);
            reseal(rec, len);
        } else if (!strcmp(mode, "keylen")) {
            put32(rec + 104, (uint32_t)len);
            reseal(rec, len);
        } else if (!strcmp(mode, "swap")) {
            if (n < 2) break;
            unsigned char *out;
            size_t m = swapped_record(&keep[i], &keep[(i + 1) % n], &out);
            if (!m) continue;
            vals[i].mv_data = out, vals[i].mv_size = m;
        } else {
            fprintf(stderr, "rel_forge: unknown mode %s\n", mode);
            return 2;
        }
        int rc = mdb_put(txn, dbi, &keys[i], &vals[i], 0);
        if (rc) {
            fprintf(stderr, "rel_forge: put: %s\n", mdb_strerror(rc));
            return 1;
        }
        changed++;
    }
    int rc = mdb_txn_commit(txn);
    mdb_env_close(env);
    if (rc) {
        fprintf(stderr, "rel_forge: commit: %s\n", mdb_strerror(rc));
        return 1;
    }
    printf("corrupted %d entries (%s)\n", changed, mode);
    return changed ? 0 : 1;
}

struct garble_list {
    size_t n;
    struct cache_hash hash[64];
    void *key[64];
    size_t key_len[64];
    uint64_t size[64];
};

static int collect(const struct store_entry_info *e, void *ctx)
{
    struct garble_list *l = ctx;
    if (l->n == 64) return 1;
    l->hash[l->n] = e->hash;
    l->key[l->n] = malloc(e->key_len);
    memcpy(l->key[l->n], e->key, e->key_len);
    l->key_len[l->n] = e->key_len;
    l->size[l->n] = e->binary_size;
    l->n++;
    return 0;
}

static int garble_sized(const char *dir, uint64_t forced_size);
static int garble(const char *dir) { return garble_sized(dir, 0); }

/* Every entry's binary replaced by forced_size bytes (0: its own size) of
 * garbage, through the store API, so its checksums verify. */
static int garble_sized(const char *dir, uint64_t forced_size)
{
    struct store_options o = {.dir = dir, .compress_level = 3};
    store *s;
    int rc = store_open(&o, &s);
    if (rc) {
        fprintf(stderr, "rel_forge: open: %s\n", clshim_strerror(rc));
        return 1;
    }
    static struct garble_list l;
    store_foreach(s, collect, &l);
    int changed = 0;
    for (size_t i = 0; i < l.n; i++) {
        uint64_t size = forced_size ? forced_size : l.size[i];
        unsigned char *bin = malloc(size);
        if (!bin) return 1;
        for (uint64_t j = 0; j < size; j++) bin[j] = (unsigned char)((j * 2654435761u) >> 13);
        struct store_record r = {bin, size, "", 1000000, ENTRY_ORIGIN_SOURCE, "forged", NULL};
        if (store_put(s, l.hash[i], l.key[i], l.key_len[i], &r) == CLSHIM_OK) changed++;
        free(bin);
    }
    store_close(s);
    printf("garbled %d entries\n", changed);
    return changed ? 0 : 1;
}

static int plant(const char *dir, const char *from, const char *mode, const char *keyfile)
{
    struct store_options fo = {.dir = from, .readonly = 1};
    store *fs;
    if (store_open(&fo, &fs) != CLSHIM_OK) return fprintf(stderr, "rel_forge: cannot open %s\n", from), 1;
    static struct garble_list src, dst;
    store_foreach(fs, collect, &src);
    struct store_record fr;
    void *farena = NULL;
    if (!src.n || store_get(fs, src.hash[0], src.key[0], src.key_len[0], &fr, &farena) != CLSHIM_OK)
        return fprintf(stderr, "rel_forge: no entry to take from %s\n", from), 1;
    unsigned char sk[SIGN_SECRET_BYTES];
    char err[512];
    if (keyfile && sign_read_secret(keyfile, sk, err, sizeof err) != 0) return fprintf(stderr, "rel_forge: %s\n", err), 1;
    struct store_options o = {.dir = dir, .compress_level = 3, .seal_key = keyfile ? sk : NULL};
    store *s;
    if (store_open(&o, &s) != CLSHIM_OK) return fprintf(stderr, "rel_forge: cannot open %s\n", dir), 1;
    store_foreach(s, collect, &dst);
    int changed = 0;
    for (size_t i = 0; i < dst.n; i++) {
        struct store_record old;
        void *arena = NULL;
        struct store_source keep;
        int have = store_get(s, dst.hash[i], dst.key[i], dst.key_len[i], &old, &arena) == CLSHIM_OK && old.source;
        if (have) keep = *old.source;
        store_record_free(arena);
        if (!strcmp(mode, "keep-seal") && !have) continue; /* nothing sealed to keep */
        struct store_record r = fr;
        r.source = !strcmp(mode, "keep-seal") ? &keep : NULL;
        if (store_put(s, dst.hash[i], dst.key[i], dst.key_len[i], &r) == CLSHIM_OK) changed++;
    }
    store_close(s);
    store_record_free(farena);
    store_close(fs);
    printf("planted %d entries\n", changed);
    return changed ? 0 : 1;
}

/* A child opens a transaction (read-only, or the write lock) and dies
 * holding it. */
static int stale_txn(const char *dir, unsigned flags)
{
    pid_t pid = fork();
    if (pid == 0) {
        MDB_env *env;
        MDB_txn *txn;
        if (mdb_env_create(&env) || mdb_env_set_maxdbs(env, 8) || mdb_env_open(env, dir, MDB_NOTLS, 0600) ||
            mdb_txn_begin(env, NULL, flags, &txn))
            _exit(3);
        printf("pid %d dies holding a %s transaction\n", (int)getpid(), flags ? "read" : "write");
        fflush(stdout);
        kill(getpid(), SIGKILL);
        _exit(4);
    }
    int st;
    waitpid(pid, &st, 0);
    return WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL ? 0 : 1;
}

/* Keeps the environment open (so lock.mdb is not reset by the next opener)
 * until killed. */
static int hold(const char *dir)
{
    MDB_env *env;
    if (mdb_env_create(&env) || mdb_env_set_maxdbs(env, 8) || mdb_env_open(env, dir, MDB_NOTLS, 0600)) return 1;
    printf("holding\n");
    fflush(stdout);
    for (;;) pause();
}

static int seed(const char *file)
{
    const char key[] = "clshim-key 1\nkind=source\noptions=-O2\ninput=12 bytes\nkernel k(){}";
    unsigned char bin[300];
    for (size_t i = 0; i < sizeof bin; i++) bin[i] = (unsigned char)(i % 7 == 0 ? i : 'a');
    void *z = NULL;
    size_t zn = 0;
    uint32_t flags = 0;
    if (entry_compress(bin, sizeof bin, 3, &z, &zn, &flags)) return 1;
    struct entry_fields f = {
        .hash = entry_xxh3_128(key, sizeof key - 1), .flags = flags, .origin = ENTRY_ORIGIN_SOURCE,
        .binary_size = sizeof bin, .binding = entry_binding(key, sizeof key - 1, bin, sizeof bin), .created = 1700000000,
        .last_access = 1700000100, .hits = 3, .compile_ns = 123456, .key = key, .key_len = sizeof key - 1,
        .device = "pthread", .device_len = 7, .log = "ok", .log_len = 2,
        .payload = z ? z : (void *)bin, .payload_size = z ? zn : sizeof bin,
    };
    size_t n = entry_encoded_size(&f);
    unsigned char *rec = malloc(n);
    entry_write(rec, &f);
    FILE *out = fopen(file, "wb");
    if (!out || fwrite(rec, 1, n, out) != n) return 1;
    fclose(out);
    free(rec);
    free(z);
    return 0;
}

/* The whole of file `path` in a malloc'd buffer (v->mv_size bytes); 1 on failure. */
static int read_whole(const char *path, MDB_val *v)
{
    FILE *f = fopen(path, "rb");
    if (!f) return 1;
    size_t cap = 1 << 16, n = 0, got;
    unsigned char *buf = malloc(cap);
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0)
        if ((n += got) == cap) buf = realloc(buf, cap *= 2);
    fclose(f);
    v->mv_data = buf;
    v->mv_size = n;
    return buf ? 0 : 1;
}

/* The "swap" of two records outside a cache (the remote tier's values are
 * the same records): OUT gets record A resealed around B's binary. */
static int swap_files(const char *a_path, const char *b_path, const char *out_path)
{
    MDB_val a, b;
    unsigned char *rec = NULL;
    if (read_whole(a_path, &a) || read_whole(b_path, &b)) {
        fprintf(stderr, "rel_forge: cannot read %s or %s\n", a_path, b_path);
        return 1;
    }
    size_t n = swapped_record(&a, &b, &rec);
    FILE *f = n ? fopen(out_path, "wb") : NULL;
    int rc = !f || fwrite(rec, 1, n, f) != n;
    if (f) rc |= fclose(f) != 0;
    if (rc) fprintf(stderr, "rel_forge: %s\n", n ? "cannot write the swapped record" : "unparsable records");
    free(rec);
    free(a.mv_data);
    free(b.mv_data);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "corrupt")) return corrupt(argv[2], argv[3]);
    if (argc == 3 && !strcmp(argv[1], "garble")) return garble(argv[2]);
    if (argc == 4 && !strcmp(argv[1], "huge")) return garble_sized(argv[2], strtoull(argv[3], NULL, 10) << 20);
    if (argc == 3 && !strcmp(argv[1], "stale-reader")) return stale_txn(argv[2], MDB_RDONLY);
    if (argc == 3 && !strcmp(argv[1], "stale-writer")) return stale_txn(argv[2], 0);
    if (argc == 3 && !strcmp(argv[1], "seed")) return seed(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "hold")) return hold(argv[2]);
    if (argc == 5 && !strcmp(argv[1], "swap-files")) return swap_files(argv[2], argv[3], argv[4]);
    if (argc == 4 && !strcmp(argv[1], "plant")) return plant(argv[2], argv[3], "plain", NULL);
    if (argc == 6 && !strcmp(argv[1], "plant") && !strcmp(argv[4], "--seal")) return plant(argv[2], argv[3], "seal", argv[5]);
    if (argc == 5 && !strcmp(argv[1], "plant") && !strcmp(argv[4], "--keep-seal"))
        return plant(argv[2], argv[3], "keep-seal", NULL);
    fprintf(stderr, "usage: rel_forge corrupt DIR flip|truncate|extend|sizes|keylen|swap | garble DIR | huge DIR MIB | "
                    "stale-reader DIR | stale-writer DIR | hold DIR | seed FILE | swap-files A B OUT\n");
    return 2;
}
