/* test_store_safety.c — what store_open refuses and how it survives damaged
 * files: private modes, ownership and permission checks, the allow-shared
 * override, the directories on the way (walked by descriptor), symbolic
 * links, garbage and truncated databases, read-only mode that writes nothing.
 *
 * These tests run as root, which bypasses permission bits: a directory we
 * cannot write, or a lock.mdb we cannot write (the MDB_NOLOCK fallback),
 * cannot be produced here, so those two paths are not exercised; ownership
 * is tested with chown to uid 65534 instead. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <dirent.h>
#include <fcntl.h>

#include "tests/unit/store_util.h"

static void path_of(char *buf, size_t len, const char *dir, const char *name)
{
    snprintf(buf, len, "%s/%s", dir, name);
}

static unsigned mode_of(const char *dir, const char *name)
{
    char p[4400];
    struct stat st;
    path_of(p, sizeof p, dir, name);
    assert_int_equal(stat(p, &st), 0);
    return (unsigned)st.st_mode & 07777;
}

static int count_prefix(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) n++;
    closedir(d);
    return n;
}

static void populate(struct fixture *fx, int n)
{
    store *s = open_default(fx, 3);
    for (int i = 0; i < n; i++) assert_int_equal(put_key(s, i, 3000), CLSHIM_OK);
    store_close(s);
}

/* the directory (and missing parents) is created 0700, the files 0600 */
static void new_cache_is_private(void **state)
{
    struct fixture *fx = *state;
    snprintf(fx->dir, sizeof fx->dir, "%s/a/b/cache", fx->root);
    umask(0);
    populate(fx, 1);
    umask(022);
    assert_int_equal(mode_of(fx->root, "a"), 0700);
    assert_int_equal(mode_of(fx->root, "a/b"), 0700);
    assert_int_equal(mode_of(fx->dir, "."), 0700);
    assert_int_equal(mode_of(fx->dir, "data.mdb"), 0600);
    assert_int_equal(mode_of(fx->dir, "lock.mdb"), 0600);
    assert_int_equal(mode_of(fx->dir, "compact.lock"), 0600);
}

/* a directory writable by group or others is refused; with allow_shared it
 * is opened read-only */
static void writable_by_others_is_refused_unless_shared(void **state)
{
    struct fixture *fx = *state;
    populate(fx, 3);
    struct store_options o = default_options(fx, 3);
    store *s = (store *)1;
    static const mode_t bad[] = {0777, 0720, 0702};
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(chmod(fx->dir, bad[i]), 0);
        assert_int_equal(store_open(&o, &s), CLSHIM_EPERM);
        assert_null(s);
    }
    o.allow_shared = 1;
    assert_int_equal(store_open(&o, &s), CLSHIM_OK);
    assert_true(store_is_readonly(s));
    assert_int_equal(get_key(s, 1), CLSHIM_OK);
    assert_int_equal(put_key(s, 9, 100), CLSHIM_EREADONLY);
    store_close(s);
    assert_int_equal(chmod(fx->dir, 0700), 0);
}

/* a directory or data file owned by another user is refused; allow_shared
 * reads the directory read-only */
static void owned_by_another_user_is_refused(void **state)
{
    struct fixture *fx = *state;
    populate(fx, 2);
    struct store_options o = default_options(fx, 3);
    store *s;
    assert_int_equal(chown(fx->dir, 65534, 65534), 0);
    assert_int_equal(store_open(&o, &s), CLSHIM_EPERM);
    o.allow_shared = 1;
    assert_int_equal(store_open(&o, &s), CLSHIM_OK);
    assert_true(store_is_readonly(s));
    assert_int_equal(get_key(s, 0), CLSHIM_OK);
    store_close(s);
    o.allow_shared = 0;
    assert_int_equal(chown(fx->dir, geteuid(), getegid()), 0);
    char p[4400];
    path_of(p, sizeof p, fx->dir, "data.mdb");
    assert_int_equal(chown(p, 65534, 65534), 0);
    assert_int_equal(store_open(&o, &s), CLSHIM_EPERM);
    assert_int_equal(chown(p, geteuid(), getegid()), 0);
    assert_int_equal(chmod(p, 0666), 0);
    assert_int_equal(store_open(&o, &s), CLSHIM_EPERM);
    assert_int_equal(chmod(p, 0600), 0);
    assert_int_equal(store_open(&o, &s), CLSHIM_OK);
    store_close(s);
}

/* data.mdb or lock.mdb as a symbolic link is refused, even when shared */
static void symlinked_files_are_refused(void **state)
{
    struct fixture *fx = *state;
    populate(fx, 1);
    char p[4400], real[4400];
    struct store_options o = default_options(fx, 3);
    store *s;
    static const char *names[] = {"data.mdb", "lock.mdb"};
    for (int i = 0; i < 2; i++) {
        path_of(p, sizeof p, fx->dir, names[i]);
        snprintf(real, sizeof real, "%s/real-%s", fx->root, names[i]);
        assert_int_equal(rename(p, real), 0);
        assert_int_equal(symlink(real, p), 0);
        o.allow_shared = 0;
        assert_int_equal(store_open(&o, &s), CLSHIM_EPERM);
        o.allow_shared = 1;
        assert_int_equal(store_open(&o, &s), CLSHIM_EPERM);
        assert_int_equal(unlink(p), 0);
        assert_int_equal(rename(real, p), 0);
    }
    o.allow_shared = 0;
    assert_int_equal(store_open(&o, &s), CLSHIM_OK);
    assert_int_equal(get_key(s, 0), CLSHIM_OK);
    store_close(s);
}

/* Captures the log lines of one store_open (stderr redirected to a file). */
static int open_logged(struct store_options *o, store **s, char *log, size_t len)
{
    char path[4400];
    snprintf(path, sizeof path, "%s.log", o->dir);
    fflush(stderr);
    int saved = dup(2), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(saved >= 0 && fd >= 0);
    dup2(fd, 2);
    close(fd);
    int rc = store_open(o, s);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    FILE *f = fopen(path, "r");
    size_t n = fread(log, 1, len - 1, f);
    log[n] = 0;
    fclose(f);
    return rc;
}

static int count_lines(const char *text, const char *prefix)
{
    int n = 0;
    for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (strncmp(p, prefix, strlen(prefix)) == 0) n++;
    return n;
}

/* a directory on the way to the cache that others can write (0777, not
 * sticky) or that another user owns is refused with one line naming it; a
 * sticky one (like /tmp) is fine; nothing is created below a refused one */
static void open_parent_is_refused(void **state)
{
    struct fixture *fx = *state;
    char parent[4300], log[4096];
    snprintf(parent, sizeof parent, "%s/open", fx->root);
    snprintf(fx->dir, sizeof fx->dir, "%s/open/cache", fx->root);
    populate(fx, 1);
    struct store_options o = default_options(fx, 3);
    store *s = NULL;
    static const mode_t bad[] = {0777, 0775, 0757};
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(chmod(parent, bad[i]), 0);
        assert_int_equal(open_logged(&o, &s, log, sizeof log), CLSHIM_EPERM);
        assert_null(s);
        assert_int_equal(count_lines(log, "clshim:"), 1);
        assert_non_null(strstr(log, parent));
        assert_non_null(strstr(log, "writable by group or others and not sticky"));
        o.allow_shared = 1; /* the override is for the cache itself, not its parents */
        assert_int_equal(store_open(&o, &s), CLSHIM_EPERM);
        o.allow_shared = 0;
    }
    /* a missing cache below it is not created either */
    snprintf(fx->dir, sizeof fx->dir, "%s/open/new/cache", fx->root);
    o = default_options(fx, 3);
    assert_int_equal(store_open(&o, &s), CLSHIM_EPERM);
    struct stat st;
    assert_int_equal(stat(fx->dir, &st), -1);
    /* sticky, like /tmp: others cannot rename what is not theirs */
    assert_int_equal(chmod(parent, 01777), 0);
    snprintf(fx->dir, sizeof fx->dir, "%s/open/cache", fx->root);
    o = default_options(fx, 3);
    assert_int_equal(store_open(&o, &s), CLSHIM_OK);
    assert_int_equal(get_key(s, 0), CLSHIM_OK);
    store_close(s);
    /* owned by another user */
    assert_int_equal(chmod(parent, 0755), 0);
    assert_int_equal(chown(parent, 65534, 65534), 0);
    assert_int_equal(open_logged(&o, &s, log, sizeof log), CLSHIM_EPERM);
    assert_int_equal(count_lines(log, "clshim:"), 1);
    assert_non_null(strstr(log, "owned by another user"));
    /* read as shared: the cache's own owner may own the directories above
     * it (an administrator's cache in their home), nobody else may */
    o.allow_shared = 1;
    assert_int_equal(store_open(&o, &s), CLSHIM_EPERM); /* the cache is ours, the parent theirs */
    assert_int_equal(chown(fx->dir, 65534, 65534), 0);
    assert_int_equal(store_open(&o, &s), CLSHIM_OK);
    assert_true(store_is_readonly(s));
    assert_int_equal(get_key(s, 0), CLSHIM_OK);
    store_close(s);
    assert_int_equal(chown(fx->dir, 65533, 65533), 0);
    assert_int_equal(open_logged(&o, &s, log, sizeof log), CLSHIM_EPERM);
    assert_non_null(strstr(log, "owned by another user than the cache's owner"));
    assert_int_equal(chown(fx->dir, geteuid(), getegid()), 0);
    o.allow_shared = 0;
    assert_int_equal(chown(parent, geteuid(), getegid()), 0);
    assert_int_equal(store_open(&o, &s), CLSHIM_OK);
    store_close(s);
}

/* symbolic links on the way are followed by hand, each checked: ours are
 * followed (relative, absolute, "..", chains), another user's are refused */
static void symlinks_on_the_way_are_checked(void **state)
{
    struct fixture *fx = *state;
    char real[4300], link[4300], rel[4300];
    snprintf(real, sizeof real, "%s/real", fx->root);
    snprintf(fx->dir, sizeof fx->dir, "%s/real/cache", fx->root);
    populate(fx, 2);
    snprintf(link, sizeof link, "%s/abs", fx->root);
    assert_int_equal(symlink(real, link), 0);
    snprintf(rel, sizeof rel, "%s/rel", fx->root);
    assert_int_equal(symlink("./x/../real", rel), 0);
    char x[4300];
    snprintf(x, sizeof x, "%s/x", fx->root);
    assert_int_equal(mkdir(x, 0700), 0);
    static const char *via[] = {"abs/cache", "rel/cache", "abs/../real/cache", "chain"};
    char chain[4300];
    snprintf(chain, sizeof chain, "%s/chain", fx->root);
    assert_int_equal(symlink("rel/cache", chain), 0);
    for (int i = 0; i < 4; i++) {
        snprintf(fx->dir, sizeof fx->dir, "%s/%s", fx->root, via[i]);
        struct store_options o = default_options(fx, 3);
        store *s = NULL;
        assert_int_equal(store_open(&o, &s), CLSHIM_OK);
        assert_int_equal(get_key(s, 1), CLSHIM_OK);
        store_close(s);
    }
    /* a link owned by another user is not followed */
    assert_int_equal(lchown(link, 65534, 65534), 0);
    snprintf(fx->dir, sizeof fx->dir, "%s/abs/cache", fx->root);
    struct store_options o = default_options(fx, 3);
    store *s = NULL;
    assert_int_equal(store_open(&o, &s), CLSHIM_EPERM);
    /* a loop ends */
    char loop[4300];
    snprintf(loop, sizeof loop, "%s/loop", fx->root);
    assert_int_equal(symlink("loop", loop), 0);
    snprintf(fx->dir, sizeof fx->dir, "%s/loop/cache", fx->root);
    o = default_options(fx, 3);
    assert_int_equal(store_open(&o, &s), CLSHIM_EIO);
}

/* an entry of the previous format (version 1, whose checksum covered the
 * binary alone) is never served: a quiet miss (not counted as corrupt), and
 * the next store replaces it */
static void older_format_entry_is_a_quiet_miss(void **state)
{
    struct fixture *fx = *state;
    populate(fx, 2);
    raw_xor(fx->dir, key_hash_of(1), 8, ENTRY_VERSION ^ 0x1); /* xor 3: format version 2 becomes 1 */
    store *s = open_default(fx, 3);
    assert_int_equal(get_key(s, 1), CLSHIM_ENOTFOUND);
    assert_int_equal(get_key(s, 0), CLSHIM_OK);
    store_flush(s);
    struct store_stats st;
    assert_int_equal(store_stats_get(s, &st), CLSHIM_OK);
    assert_int_equal(st.corrupt, 0);
    uint64_t checked, bad;
    assert_int_equal(store_verify(s, 0, &checked, &bad), CLSHIM_OK);
    assert_int_equal(bad, 1); /* verify still reports it */
    assert_int_equal(put_key(s, 1, 3000), CLSHIM_OK);
    assert_int_equal(get_key(s, 1), CLSHIM_OK);
    assert_true(store_check_invariants(s));
    store_close(s);
}

/* a data.mdb that is not an LMDB file is moved aside and a new cache made */
static void garbage_database_is_moved_aside(void **state)
{
    struct fixture *fx = *state;
    assert_int_equal(mkdir(fx->dir, 0700), 0);
    char p[4400];
    path_of(p, sizeof p, fx->dir, "data.mdb");
    FILE *f = fopen(p, "wb");
    for (int i = 0; i < 65536; i++) fputc((i * 131 + 7) & 0xFF, f);
    fclose(f);
    chmod(p, 0600);
    store *s = open_default(fx, 3);
    assert_int_equal(count_prefix(fx->dir, "data.mdb.corrupt-"), 1);
    assert_int_equal(put_key(s, 1, 500), CLSHIM_OK);
    assert_int_equal(get_key(s, 1), CLSHIM_OK);
    store_close(s);
}

/* a data.mdb cut short (past its meta pages) is moved aside, not mapped */
static void truncated_database_is_moved_aside(void **state)
{
    struct fixture *fx = *state;
    populate(fx, 40);
    char p[4400];
    path_of(p, sizeof p, fx->dir, "data.mdb");
    uint64_t size = file_size(fx->dir, "data.mdb");
    assert_true(size > 64 * 1024);
    assert_int_equal(truncate(p, (off_t)(size / 2)), 0);
    store *s = open_default(fx, 3);
    assert_int_equal(count_prefix(fx->dir, "data.mdb.corrupt-"), 1);
    assert_int_equal(get_key(s, 1), CLSHIM_ENOTFOUND);
    assert_true(store_check_invariants(s));
    store_close(s);
}

/* a data.mdb that ends before its last page number, the pages it lacks
 * free ones (LMDB never writes a page that the transaction which allocated
 * it freed again), is whole: opened as it is, nothing moved aside. An
 * eviction that notes its keys in the record of evicted keys leaves such a
 * file. */
static void free_tail_is_not_a_truncation(void **state)
{
    struct fixture *fx = *state;
    fake_now = 1000000;
    store *s = open_default(fx, 0);
    for (int i = 0; i < 20; i++) {
        fake_now += 100;
        assert_int_equal(put_key(s, i, 500), CLSHIM_OK);
    }
    uint64_t one = record_size(0, 500);
    assert_int_equal(store_evict(s, 0, 15 * one, NULL), CLSHIM_OK);
    assert_int_equal(store_evict(s, 0, 6 * one, NULL), CLSHIM_OK); /* 6 left: 14..19 */
    store_close(s);
    MDB_env *env;
    MDB_txn *txn;
    MDB_envinfo info;
    MDB_stat st;
    raw_begin(fx->dir, &env, &txn);
    mdb_txn_abort(txn);
    assert_int_equal(mdb_env_info(env, &info), 0);
    assert_int_equal(mdb_env_stat(env, &st), 0);
    mdb_env_close(env);
    /* the case itself: the file ends before its last page */
    assert_true(((uint64_t)info.me_last_pgno + 1) * st.ms_psize > file_size(fx->dir, "data.mdb"));
    struct store_options o = default_options(fx, 0);
    o.readonly = 1;
    assert_int_equal(store_open(&o, &s), CLSHIM_OK);
    for (int i = 14; i < 20; i++) assert_int_equal(get_key(s, i), CLSHIM_OK);
    store_close(s);
    s = open_default(fx, 0);
    assert_int_equal(count_prefix(fx->dir, "data.mdb.corrupt-"), 0);
    for (int i = 14; i < 20; i++) assert_int_equal(get_key(s, i), CLSHIM_OK);
    assert_true(store_check_invariants(s));
    store_close(s);
}

/* read-only: gets work, every write is refused, and data.mdb keeps its
 * size and modification time */
static void readonly_never_writes(void **state)
{
    struct fixture *fx = *state;
    populate(fx, 5);
    char p[4400];
    path_of(p, sizeof p, fx->dir, "data.mdb");
    struct stat before, after;
    assert_int_equal(stat(p, &before), 0);
    struct timespec ts = {0, 20 * 1000000};
    nanosleep(&ts, NULL); /* a write now would show in the mtime */
    struct store_options o = default_options(fx, 3);
    o.readonly = 1;
    store *s;
    assert_int_equal(store_open(&o, &s), CLSHIM_OK);
    assert_true(store_is_readonly(s));
    for (int round = 0; round < 3; round++)
        for (int i = 0; i < 5; i++) assert_int_equal(get_key(s, i), CLSHIM_OK);
    assert_int_equal(put_key(s, 7, 100), CLSHIM_EREADONLY);
    assert_int_equal(store_delete(s, key_hash_of(1)), CLSHIM_EREADONLY);
    struct store_stats d = {.hits = 1};
    assert_int_equal(store_stats_add(s, &d), CLSHIM_EREADONLY);
    assert_int_equal(store_stats_zero(s), CLSHIM_EREADONLY);
    assert_int_equal(store_clear(s), CLSHIM_EREADONLY);
    assert_int_equal(store_evict(s, 86400, 0, NULL), CLSHIM_EREADONLY);
    assert_int_equal(store_compact(s), CLSHIM_EREADONLY);
    assert_int_equal(store_claim_build(s, key_hash_of(1), 1000), CLSHIM_OK); /* no-op */
    assert_int_equal(store_release_build(s, key_hash_of(1)), CLSHIM_OK);
    assert_int_equal(store_flush(s), CLSHIM_OK);
    uint64_t checked, bad;
    assert_int_equal(store_verify(s, 0, &checked, &bad), CLSHIM_OK);
    assert_int_equal(checked, 5);
    assert_int_equal(store_verify(s, 1, &checked, &bad), CLSHIM_EREADONLY);
    store_close(s);
    assert_int_equal(stat(p, &after), 0);
    assert_int_equal(after.st_size, before.st_size);
    assert_int_equal(after.st_mtim.tv_sec, before.st_mtim.tv_sec);
    assert_int_equal(after.st_mtim.tv_nsec, before.st_mtim.tv_nsec);
    /* The hits were not recorded either. */
    s = open_default(fx, 3);
    assert_int_equal(probe(s, 1).hits, 0);
    store_close(s);
}

/* read-only of a cache that does not exist: ENOTFOUND, nothing created */
static void readonly_missing_cache_creates_nothing(void **state)
{
    struct fixture *fx = *state;
    struct store_options o = default_options(fx, 3);
    o.readonly = 1;
    store *s;
    assert_int_equal(store_open(&o, &s), CLSHIM_ENOTFOUND);
    struct stat st;
    assert_int_equal(stat(fx->dir, &st), -1);
    assert_int_equal(mkdir(fx->dir, 0700), 0);
    assert_int_equal(store_open(&o, &s), CLSHIM_ENOTFOUND);
    assert_int_equal(count_prefix(fx->dir, ""), 2); /* "." and ".." only */
}

/* read-only with a damaged file: reported, left where it is */
static void readonly_garbage_is_reported_not_moved(void **state)
{
    struct fixture *fx = *state;
    assert_int_equal(mkdir(fx->dir, 0700), 0);
    char p[4400];
    path_of(p, sizeof p, fx->dir, "data.mdb");
    FILE *f = fopen(p, "wb");
    for (int i = 0; i < 16384; i++) fputc(i & 0xFF, f);
    fclose(f);
    chmod(p, 0600);
    struct store_options o = default_options(fx, 3);
    o.readonly = 1;
    store *s;
    assert_int_equal(store_open(&o, &s), CLSHIM_ECORRUPT);
    assert_int_equal(count_prefix(fx->dir, "data.mdb.corrupt-"), 0);
    assert_int_equal(file_size(fx->dir, "data.mdb"), 16384);
}

/* a cache written by a newer format is not used (nor overwritten) */
static void newer_format_is_refused(void **state)
{
    struct fixture *fx = *state;
    populate(fx, 1);
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    raw_begin(fx->dir, &env, &txn);
    assert_int_equal(mdb_dbi_open(txn, "meta", 0, &dbi), 0);
    unsigned char v8[8] = {99};
    MDB_val k = {7, "version"}, v = {8, v8};
    assert_int_equal(mdb_put(txn, dbi, &k, &v, 0), 0);
    raw_end(env, txn);
    struct store_options o = default_options(fx, 3);
    store *s;
    assert_int_equal(store_open(&o, &s), CLSHIM_EUNSUPPORTED);
    assert_int_equal(count_prefix(fx->dir, "data.mdb.corrupt-"), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(new_cache_is_private, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(writable_by_others_is_refused_unless_shared, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(owned_by_another_user_is_refused, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(symlinked_files_are_refused, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(open_parent_is_refused, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(older_format_entry_is_a_quiet_miss, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(symlinks_on_the_way_are_checked, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(garbage_database_is_moved_aside, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(truncated_database_is_moved_aside, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(free_tail_is_not_a_truncation, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(readonly_never_writes, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(readonly_missing_cache_creates_nothing, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(readonly_garbage_is_reported_not_moved, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(newer_format_is_refused, fx_setup, fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
