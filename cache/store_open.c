/* store_open.c — opening and closing the persistent cache: where the
 * directory and file checks of store.h live (the walk from "/" by
 * descriptor, ownership, modes, links),
 * recovery from a damaged data.mdb, the read-only fallbacks, and the
 * compact.lock every handle holds shared. */
#include "cache/store.h"

#include <errno.h>
#include <setjmp.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cache/store_int.h"
#include "common/error.h"
#include "common/log.h"

#define MAP_MIN ((uint64_t)256 << 20)
#define MAP_CAP STORE_MAP_CAP
#define MAP_UNLIMITED_START ((uint64_t)1 << 30)
#define OPEN_LOCK_WAIT_MS 5000

static uint64_t test_mapsize;
static int test_nosync;
void store_set_mapsize_for_test(uint64_t bytes) { test_mapsize = bytes; }
void store_set_nosync_for_test(int on) { test_nosync = on; }


static int is_corrupt_rc(int rc)
{
    return rc == MDB_INVALID || rc == MDB_VERSION_MISMATCH || rc == MDB_CORRUPTED ||
           rc == MDB_PAGE_NOTFOUND || rc == MDB_INCOMPATIBLE;
}

static uint64_t initial_mapsize(const struct store_options *o)
{
    if (test_mapsize) return test_mapsize;
    if (!o->max_size) return MAP_UNLIMITED_START;
    uint64_t m = o->max_size > (MAP_CAP - (64u << 20)) / 2 ? MAP_CAP : 2 * o->max_size + (64u << 20);
    return m < MAP_MIN ? MAP_MIN : m > MAP_CAP ? MAP_CAP : m;
}

/* Opening maps lock.mdb and data.mdb and writes through the maps: on a full
 * file system a fresh sparse file faults (SIGBUS) there, which would kill
 * the application. Guarded: the half-open environment is then left alone
 * (closing it would touch the maps again), a small one-time leak, and the
 * cache reads as "no space left on device". */
static int env_try_open(store *s, unsigned flags)
{
    int rc = mdb_env_create(&s->env);
    if (rc) return rc;
    mdb_env_set_maxdbs(s->env, 8);
    mdb_env_set_maxreaders(s->env, 510);
    if (!(flags & MDB_RDONLY)) mdb_env_set_mapsize(s->env, (size_t)initial_mapsize(&s->opt));
    struct store_guard g;
    store_guard_arm(&g);
    if (sigsetjmp(g.jb, 0)) {
        s->env = NULL;
        return CLSHIM_ENOSPC;
    }
    rc = mdb_env_open(s->env, s->env_path, flags, 0600);
    store_guard_disarm(&g);
    if (rc) {
        mdb_env_close(s->env);
        s->env = NULL;
    }
    return rc;
}

/* The most pages past the end of data.mdb that are looked up in the free
 * list (a larger gap is a truncation). */
#define FREE_TAIL_MAX ((uint64_t)1 << 20)

/* Whether every page in [from, to] is on LMDB's free list (database 0:
 * transaction id -> a count and that many page numbers, native size_t).
 * LMDB never writes a page that the transaction which allocated it freed
 * again (a "loose" page), so a valid file may end before its last page
 * number; such a tail is never read before it is written again. */
static int tail_is_free(store *s, uint64_t from, uint64_t to)
{
    if (to < from || to - from >= FREE_TAIL_MAX) return 0;
    size_t n = (size_t)(to - from + 1), left = n;
    unsigned char *seen = calloc(n, 1);
    MDB_txn *txn;
    MDB_cursor *c;
    if (!seen || mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn) != 0) {
        free(seen);
        return 0;
    }
    if (mdb_cursor_open(txn, 0, &c) == 0) {
        MDB_val k, v;
        while (left && mdb_cursor_get(c, &k, &v, MDB_NEXT) == 0) {
            size_t count = 0, pg; /* copied out: a node's data is not aligned */
            if (v.mv_size >= sizeof count) memcpy(&count, v.mv_data, sizeof count);
            if (count > v.mv_size / sizeof pg - 1) break;
            for (size_t i = 1; i <= count; i++) {
                memcpy(&pg, (const char *)v.mv_data + i * sizeof pg, sizeof pg);
                if (pg >= from && pg <= to && !seen[pg - from]) seen[pg - from] = 1, left--;
            }
        }
        mdb_cursor_close(c);
    }
    mdb_txn_abort(txn);
    free(seen);
    return left == 0;
}

/* A file shorter than its meta page says would fault (SIGBUS) on access,
 * unless the pages it lacks are free ones (tail_is_free()). Reading the free
 * list may fault too: that is a truncation (the transaction is left). */
static int env_truncated(store *s)
{
    MDB_envinfo info;
    MDB_stat st;
    struct stat fs;
    mdb_filehandle_t fd;
    if (mdb_env_info(s->env, &info) || mdb_env_stat(s->env, &st) || mdb_env_get_fd(s->env, &fd) ||
        fstat(fd, &fs))
        return 0;
    uint64_t pages = (uint64_t)fs.st_size / st.ms_psize;
    if ((uint64_t)info.me_last_pgno < pages) return 0;
    struct store_guard g;
    store_guard_arm(&g);
    if (sigsetjmp(g.jb, 0)) return 1;
    int free_tail = (uint64_t)fs.st_size % st.ms_psize == 0 && tail_is_free(s, pages, info.me_last_pgno);
    store_guard_disarm(&g);
    return !free_tail;
}

static int open_dbs(store *s)
{
    MDB_txn *txn;
    unsigned create = s->readonly ? 0 : MDB_CREATE;
    int rc = mdb_txn_begin(s->env, NULL, s->readonly ? MDB_RDONLY : 0, &txn);
    if (rc) return rc;
    rc = mdb_dbi_open(txn, "entries", create, &s->db_entries);
    if (rc == 0) rc = mdb_dbi_open(txn, "atime", create, &s->db_atime);
    if (rc == 0) rc = mdb_dbi_open(txn, "meta", create, &s->db_meta);
    if (rc == 0) rc = mdb_dbi_open(txn, "building", create, &s->db_building);
    if (rc == 0) rc = mdb_dbi_open(txn, "access", create, &s->db_access);
    if (rc == 0) rc = store_evicted_open(s, txn);
    uint64_t version = 0;
    if (rc == 0) rc = store_meta_get(s, txn, "version", &version, 1);
    if (rc == 0 && version > STORE_FORMAT_VERSION) rc = CLSHIM_EUNSUPPORTED;
    if (rc == 0 && !s->readonly && version == 0) {
        version = STORE_FORMAT_VERSION;
        rc = store_meta_put(s, txn, "version", &version, 1);
    }
    uint64_t last_sweep = 0;
    if (rc == 0) rc = store_meta_get(s, txn, "sweep", &last_sweep, 1);
    s->next_sweep = last_sweep + STORE_SWEEP_INTERVAL_S;
    if (rc == 0) rc = mdb_txn_commit(txn); /* a read txn too: its commit keeps the handles */
    else mdb_txn_abort(txn);
    if (rc == MDB_NOTFOUND && s->readonly) return 0; /* never written: an empty cache */
    if (rc == 0) s->have_dbs = 1;
    return rc;
}

int store_env_open(store *s)
{
    /* MDB_NOMETASYNC: one fdatasync per commit, and a machine crash loses at
     * most the last commit, never the tree's integrity (MDB_NOSYNC could). */
    unsigned flags = MDB_NOTLS | MDB_NOMETASYNC | (s->readonly ? MDB_RDONLY : 0) | (test_nosync ? MDB_NOSYNC : 0);
    s->nolock = 0;
    s->have_dbs = 0;
    int rc = env_try_open(s, flags);
    if (rc && s->readonly && (rc == EACCES || rc == EPERM || rc == EROFS)) {
        rc = env_try_open(s, flags | MDB_NOLOCK); /* lock.mdb unwritable: read without locking */
        if (rc == 0) s->nolock = 1;
    }
    if (rc) return rc;
    if (env_truncated(s)) rc = MDB_CORRUPTED;
    if (rc == 0) {
        struct store_guard g;
        store_guard_arm(&g);
        if (sigsetjmp(g.jb, 0)) {
            s->env = NULL; /* as in env_try_open */
            return CLSHIM_ENOSPC;
        }
        rc = open_dbs(s);
        store_guard_disarm(&g);
    }
    if (rc) store_env_close(s);
    return rc;
}

void store_env_close(store *s)
{
    if (s->env) mdb_env_close(s->env);
    s->env = NULL;
    s->have_dbs = 0;
}

/* Checks that a directory or file is ours and not writable by others.
 * Returns NULL when it is, else the reason. */
static const char *unsafe_reason(const struct stat *st)
{
    if (st->st_uid != geteuid()) return "it is owned by another user";
    if (st->st_mode & (S_IWGRP | S_IWOTH)) return "it is writable by group or others";
    return NULL;
}

/* What the walk tolerates of another owner on the way: nobody, unless the
 * cache is read as shared (allow_shared), where the one other user who owns
 * the cache directory may own directories above it too (an administrator's
 * cache in their home): that user is already trusted with the code. */
struct walk_owner {
    int allow;       /* allow_shared */
    uid_t uid;       /* the other owner met on the way; valid when seen */
    int seen;
    char path[256];  /* where, for the message */
};

/* The rule for every directory on the way to the cache, and for symbolic
 * links followed (OpenSSH's StrictModes): owned by root or us, and not
 * writable by anyone else unless sticky (where others cannot rename or
 * remove what is not theirs). A directory that fails it lets another user
 * swap the cache for their own. */
static const char *unsafe_ancestor(const struct stat *st, const char *path, struct walk_owner *other)
{
    if (S_ISDIR(st->st_mode) && (st->st_mode & (S_IWGRP | S_IWOTH)) && !(st->st_mode & S_ISVTX))
        return "is writable by group or others and not sticky";
    if (st->st_uid == 0 || st->st_uid == geteuid()) return NULL;
    if (!other->allow || (other->seen && other->uid != st->st_uid)) return "is owned by another user";
    if (!other->seen) snprintf(other->path, sizeof other->path, "%s", path);
    other->uid = st->st_uid, other->seen = 1;
    return NULL; /* for now: check_dir compares it with the cache directory's owner */
}

#define WALK_MAX_LINKS 40
#define WALK_PATH_MAX 8192

/* The remaining components after `p`, with `target` (a link's text) in
 * front: target "/" rest. 0, or ENAMETOOLONG. */
static int splice_link(char *rest, const char *target, const char *p)
{
    char tmp[WALK_PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s/%s", target, p) >= (int)sizeof tmp) return ENAMETOOLONG;
    memcpy(rest, tmp, strlen(tmp) + 1);
    return 0;
}

static int open_root(char *walked)
{
    strcpy(walked, "/");
    return open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

/* Opens the cache directory without ever resolving its path in one go:
 * from "/", one component at a time with openat(O_NOFOLLOW|O_DIRECTORY),
 * each directory passed through checked with unsafe_ancestor() on the
 * opened descriptor. Symbolic links are followed by hand, and only when
 * they are owned by root or us. Missing directories are created 0700
 * (unless read-only). The caller checks the last directory itself.
 * Returns 0 with *out, or a clshim error after one warning. */
static int walk_to_dir(store *s, int *out, struct walk_owner *other)
{
    char rest[WALK_PATH_MAX], walked[WALK_PATH_MAX], name[NAME_MAX + 1];
    if (s->dir[0] == '/') {
        if (snprintf(rest, sizeof rest, "%s", s->dir) >= (int)sizeof rest) return CLSHIM_EINVAL;
    } else {
        char cwd[4096];
        if (!getcwd(cwd, sizeof cwd) || snprintf(rest, sizeof rest, "%s/%s", cwd, s->dir) >= (int)sizeof rest)
            return CLSHIM_EIO;
    }
    int fd = open_root(walked), links = 0;
    const char *why = NULL;
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) goto io_error;
    if ((why = unsafe_ancestor(&st, walked, other)) != NULL) goto unsafe;
    for (char *p = rest;;) {
        while (*p == '/') p++;
        if (!*p) break;
        size_t n = strcspn(p, "/");
        if (n > NAME_MAX) { errno = ENAMETOOLONG; goto io_error; }
        memcpy(name, p, n);
        name[n] = 0;
        p += n;
        if (!strcmp(name, ".")) continue;
        int nfd = openat(fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (nfd < 0 && errno == ENOENT && !s->readonly) {
            if (mkdirat(fd, name, 0700) != 0 && errno != EEXIST) {
                if (errno == EACCES || errno == EPERM || errno == EROFS) {
                    log_msg(LOG_WARN, "cache directory %s cannot be created (%s); caching is off for this run (make "
                                      "its parent writable, or set CLSHIM_CACHE_DIR elsewhere)", s->dir,
                            strerror(errno));
                    goto not_found;
                }
                log_msg(LOG_WARN, "cache directory %s cannot be created (%s); caching is off for this run: set "
                                  "CLSHIM_CACHE_DIR to a directory you can write", s->dir, strerror(errno));
                close(fd);
                return CLSHIM_EIO;
            }
            nfd = openat(fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        }
        if (nfd < 0 && (errno == ELOOP || errno == ENOTDIR)) {
            struct stat lst;
            char target[4096];
            if (fstatat(fd, name, &lst, AT_SYMLINK_NOFOLLOW) != 0) goto io_error;
            if (!S_ISLNK(lst.st_mode)) {
                log_msg(LOG_WARN, "cache directory %s cannot be created: %s%s%s is not a directory; caching is off "
                                  "for this run: set CLSHIM_CACHE_DIR to a directory", s->dir,
                        walked, strcmp(walked, "/") ? "/" : "", name);
                close(fd);
                return CLSHIM_EIO;
            }
            snprintf(walked + strlen(walked), sizeof walked - strlen(walked), "%s%s (a symbolic link)",
                     strcmp(walked, "/") ? "/" : "", name);
            if ((why = unsafe_ancestor(&lst, walked, other)) != NULL) goto unsafe;
            *strrchr(walked, '/') = 0; /* back to the directory holding the link */
            if (!*walked) strcpy(walked, "/");
            ssize_t len = readlinkat(fd, name, target, sizeof target - 1);
            if (len <= 0 || ++links > WALK_MAX_LINKS || len >= (ssize_t)sizeof target - 1) {
                errno = len <= 0 ? errno : links > WALK_MAX_LINKS ? ELOOP : ENAMETOOLONG;
                goto io_error;
            }
            target[len] = 0;
            if (splice_link(rest, target, p) != 0) { errno = ENAMETOOLONG; goto io_error; }
            p = rest;
            if (target[0] == '/') {
                close(fd);
                if ((fd = open_root(walked)) < 0) goto io_error;
            }
            continue;
        }
        if (nfd < 0) {
            if (errno == ENOENT) goto not_found;
            goto io_error;
        }
        close(fd);
        fd = nfd;
        size_t w = strlen(walked);
        if (!strcmp(name, "..")) {
            char *slash = strrchr(walked, '/');
            if (slash && slash != walked) *slash = 0;
            else strcpy(walked, "/");
        } else {
            snprintf(walked + w, sizeof walked - w, "%s%s", w > 1 ? "/" : "", name);
        }
        const char *q = p;
        while (*q == '/') q++;
        if (!*q) break; /* the cache directory itself: open_checked's rule */
        if (fstat(fd, &st) != 0) goto io_error;
        if ((why = unsafe_ancestor(&st, walked, other)) != NULL) goto unsafe;
    }
    *out = fd;
    return 0;
unsafe:
    log_msg(LOG_WARN, "cache directory %s is not used: %s on its way %s, so another user could swap the "
            "cache for their own programs", s->dir, walked, why);
    close(fd);
    return CLSHIM_EPERM;
not_found:
    close(fd);
    return CLSHIM_ENOTFOUND;
io_error:
    log_msg(LOG_WARN, "cache directory %s cannot be opened (%s); caching is off for this run", s->dir, strerror(errno));
    if (fd >= 0) close(fd);
    return CLSHIM_EIO;
}

/* 0: fine; 1: not private but allowed (read-only); else CLSHIM_EPERM/EIO.
 * Relative to the directory descriptor: no name is resolved twice. */
static int check_file(store *s, const char *name, int shared)
{
    struct stat st;
    if (fstatat(s->dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return errno == ENOENT ? 0 : CLSHIM_EIO;
    if (S_ISLNK(st.st_mode) || !S_ISREG(st.st_mode)) {
        log_msg(LOG_WARN, "cache file %s/%s is not used: %s (links are never followed)", s->dir, name,
                S_ISLNK(st.st_mode) ? "it is a symbolic link" : "it is not a regular file");
        return CLSHIM_EPERM;
    }
    const char *why = shared ? NULL : unsafe_reason(&st);
    if (!why) return 0;
    if (s->opt.allow_shared) return 1;
    log_msg(LOG_WARN, "cache file %s/%s is not used: %s (set CLSHIM_CACHE_ALLOW_SHARED=1 to read it anyway, "
            "read-only)", s->dir, name, why);
    return CLSHIM_EPERM;
}

/* Opens and checks the directory (s->dir_fd); sets *shared when it is not
 * private but allowed. */
static int check_dir(store *s, int *shared)
{
    struct stat st;
    struct walk_owner other = {.allow = s->opt.allow_shared};
    int rc = walk_to_dir(s, &s->dir_fd, &other);
    if (rc) return rc;
    if (fstat(s->dir_fd, &st) != 0) return CLSHIM_EIO;
    if (other.seen && st.st_uid != other.uid) {
        log_msg(LOG_WARN, "cache directory %s is not used: %s on its way is owned by another user than the "
                "cache's owner, so a third user could swap the cache for their own programs", s->dir, other.path);
        return CLSHIM_EPERM;
    }
    snprintf(s->env_path, sizeof s->env_path, "/proc/self/fd/%d", s->dir_fd);
    struct stat via;
    if (stat(s->env_path, &via) != 0 || via.st_dev != st.st_dev || via.st_ino != st.st_ino) {
        log_msg(LOG_WARN, "cache directory %s is not used: /proc/self/fd is not available to open it by "
                "descriptor", s->dir);
        return CLSHIM_EIO;
    }
    const char *why = unsafe_reason(&st);
    *shared = why != NULL;
    if (!why) return 0;
    if (!s->opt.allow_shared) {
        log_msg(LOG_WARN, "cache directory %s is not used: %s, so whoever can write it could change "
                "the programs your applications run (set CLSHIM_CACHE_ALLOW_SHARED=1 to read it anyway, "
                "read-only)", s->dir, why);
        return CLSHIM_EPERM;
    }
    log_msg(LOG_INFO, "cache directory %s: %s; reading it read-only (CLSHIM_CACHE_ALLOW_SHARED)", s->dir, why);
    return 0;
}

/* After LMDB opened the files: data.mdb as LMDB holds it must be the file
 * checked in the directory (same inode, a regular file), and neither file
 * may have become a link meanwhile. */
static int check_opened(store *s, int shared)
{
    struct stat held, named;
    mdb_filehandle_t fd;
    if (mdb_env_get_fd(s->env, &fd) != 0 || fstat(fd, &held) != 0) return CLSHIM_EIO;
    const char *why = NULL;
    if (fstatat(s->dir_fd, "data.mdb", &named, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(held.st_mode) ||
        named.st_dev != held.st_dev || named.st_ino != held.st_ino)
        why = "it changed while being opened";
    else if (!shared && !s->opt.allow_shared)
        why = unsafe_reason(&held);
    if (!why && (fstatat(s->dir_fd, "lock.mdb", &named, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(named.st_mode)))
        why = "lock.mdb changed while being opened";
    if (!why) return 0;
    log_msg(LOG_WARN, "cache file %s/data.mdb is not used: %s", s->dir, why);
    return CLSHIM_EPERM;
}

static int take_open_lock(store *s)
{
    s->lock_fd = openat(s->dir_fd, "compact.lock",
                        (s->readonly ? O_RDONLY : O_RDWR | O_CREAT) | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (s->lock_fd < 0) return s->readonly ? 0 : CLSHIM_EIO; /* a read-only open goes without */
    for (int waited = 0; flock(s->lock_fd, LOCK_SH | LOCK_NB) != 0; waited += 10) {
        if (errno != EWOULDBLOCK || waited >= OPEN_LOCK_WAIT_MS) {
            log_msg(LOG_WARN, "cache %s is being compacted; not used this time", s->dir);
            return CLSHIM_EBUSY;
        }
        struct timespec ts = {0, 10 * 1000000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

static void move_aside(store *s, int rc)
{
    char to[64];
    snprintf(to, sizeof to, "data.mdb.corrupt-%llu", (unsigned long long)time(NULL));
    if (renameat(s->dir_fd, "data.mdb", s->dir_fd, to) == 0)
        log_msg(LOG_WARN, "cache file %s/data.mdb is not a valid database (%s); moved to %s and started afresh",
                s->dir, mdb_strerror(rc), to);
}

static int open_checked(store *s)
{
    int shared = 0, rc;
    if ((rc = check_dir(s, &shared)) != 0) return rc;
    if (shared) s->readonly = 1;
    for (int i = 0; i < 2; i++) {
        rc = check_file(s, i ? "lock.mdb" : "data.mdb", shared);
        if (rc == 1) s->readonly = 1;
        else if (rc) return rc;
    }
    if (!s->readonly && faccessat(s->dir_fd, ".", W_OK, 0) != 0) {
        int why = errno;
        /* Nothing to read either: one line saying caching is off, and why. */
        if (faccessat(s->dir_fd, "data.mdb", F_OK, 0) != 0) {
            log_msg(LOG_WARN, "cache directory %s cannot be written (%s) and holds no cache: caching is off for "
                              "this run (make it writable, or set CLSHIM_CACHE_DIR elsewhere)", s->dir, strerror(why));
            return CLSHIM_ENOTFOUND;
        }
        log_msg(LOG_WARN, "cache directory %s cannot be written (%s); using its cache read-only", s->dir,
                strerror(why));
        s->readonly = 1;
    }
    if ((rc = take_open_lock(s)) != 0) return rc;
    rc = store_env_open(s);
    if (rc && !s->readonly && (rc == EACCES || rc == EROFS || rc == EPERM)) {
        log_msg(LOG_WARN, "cache %s cannot be written (%s); using it read-only", s->dir, strerror(rc));
        s->readonly = 1;
        rc = store_env_open(s);
    }
    if (rc && is_corrupt_rc(rc) && !s->readonly) {
        move_aside(s, rc);
        rc = store_env_open(s);
    }
    if (rc == ENOENT && s->readonly) return CLSHIM_ENOTFOUND;
    if (rc == CLSHIM_EUNSUPPORTED)
        log_msg(LOG_WARN, "cache %s was written by a newer clshim; not used", s->dir);
    else if (rc == CLSHIM_ENOSPC)
        log_msg(LOG_WARN, "cache %s cannot be opened: no space left on device; caching is off for this run (free "
                          "space there, or set CLSHIM_CACHE_DIR elsewhere)", s->dir);
    else if (rc)
        log_msg(LOG_WARN, "cache %s cannot be opened (%s); caching is off for this run", s->dir,
                rc <= CLSHIM_ENOTFOUND && rc >= CLSHIM_ENOSPC ? clshim_strerror(rc) : mdb_strerror(rc));
    if (rc == 0 && (rc = check_opened(s, shared)) != 0) store_env_close(s);
    return rc;
}

static void read_boot_id(char out[36])
{
    memset(out, 0, 36);
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ssize_t n = read(fd, out, 36);
    (void)n;
    close(fd);
}

int store_open(const struct store_options *opt, store **out)
{
    *out = NULL;
    if (!opt || !opt->dir || !*opt->dir) return CLSHIM_EINVAL;
    store *s = calloc(1, sizeof *s);
    if (!s) return CLSHIM_ENOMEM;
    s->opt = *opt;
    if (opt->seal_key) {
        memcpy(s->seal_key, opt->seal_key, sizeof s->seal_key);
        s->opt.seal_key = s->seal_key;
    }
    s->dir = strdup(opt->dir);
    s->opt.dir = s->dir;
    s->readonly = opt->readonly;
    s->lock_fd = -1;
    s->dir_fd = -1;
    s->queue = calloc(2 * STORE_QUEUE_MAX, sizeof *s->queue);
    pthread_rwlock_init(&s->maplock, NULL);
    pthread_mutex_init(&s->qlock, NULL);
    read_boot_id(s->boot_id);
    store_guard_install();
    int rc = s->dir && s->queue ? open_checked(s) : CLSHIM_ENOMEM;
    if (rc) {
        store_close(s);
        return store_map_err(rc);
    }
    if (s->nolock) log_msg(LOG_INFO, "cache %s: lock file not writable; reading without locks", s->dir);
    if (!s->nolock) {
        int dead = 0;
        mdb_reader_check(s->env, &dead); /* slots of killed processes */
    }
    store_sweep_if_due(s);
    s->opened_at = store_now();
    store_warn_thrash(s);
    *out = s;
    return CLSHIM_OK;
}

int store_is_readonly(const store *s) { return s ? s->readonly || __atomic_load_n(&s->faulted, __ATOMIC_RELAXED) : 1; }

void store_close(store *s)
{
    if (!s) return;
    if (s->env) store_flush(s);
    store_env_close(s);
    if (s->lock_fd >= 0) close(s->lock_fd);
    if (s->dir_fd >= 0) close(s->dir_fd);
    pthread_rwlock_destroy(&s->maplock);
    pthread_mutex_destroy(&s->qlock);
    free(s->queue);
    free(s->dir);
    volatile unsigned char *k = s->seal_key; /* the secret goes with the handle */
    for (size_t i = 0; i < sizeof s->seal_key; i++) k[i] = 0;
    free(s);
}
