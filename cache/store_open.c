/* store_open.c — opening and closing the persistent cache: where the
 * directory and file checks of store.h live (ownership, modes, links),
 * recovery from a damaged data.mdb, the read-only fallbacks, and the
 * compact.lock every handle holds shared. */
#include "cache/store.h"

#include <errno.h>
#include <fcntl.h>
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

static int env_try_open(store *s, unsigned flags)
{
    int rc = mdb_env_create(&s->env);
    if (rc) return rc;
    mdb_env_set_maxdbs(s->env, 8);
    mdb_env_set_maxreaders(s->env, 510);
    if (!(flags & MDB_RDONLY)) mdb_env_set_mapsize(s->env, (size_t)initial_mapsize(&s->opt));
    rc = mdb_env_open(s->env, s->dir, flags, 0600);
    if (rc) {
        mdb_env_close(s->env);
        s->env = NULL;
    }
    return rc;
}

/* A file shorter than its meta page says would fault (SIGBUS) on access. */
static int env_truncated(store *s)
{
    MDB_envinfo info;
    MDB_stat st;
    struct stat fs;
    char path[4200];
    snprintf(path, sizeof path, "%s/data.mdb", s->dir);
    if (mdb_env_info(s->env, &info) || mdb_env_stat(s->env, &st) || stat(path, &fs)) return 0;
    return ((uint64_t)info.me_last_pgno + 1) * st.ms_psize > (uint64_t)fs.st_size;
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
    if (rc == 0) rc = open_dbs(s);
    if (rc) store_env_close(s);
    return rc;
}

void store_env_close(store *s)
{
    if (s->env) mdb_env_close(s->env);
    s->env = NULL;
    s->have_dbs = 0;
}

static int mkdir_p(const char *dir)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) return ENAMETOOLONG;
    for (char *p = path + 1;; p++) {
        if (*p == '/' || *p == 0) {
            char c = *p;
            *p = 0;
            if (mkdir(path, 0700) != 0 && errno != EEXIST) return errno;
            *p = c;
            if (!c) return 0;
        }
    }
}

/* Checks that a directory or file is ours and not writable by others.
 * Returns NULL when it is, else the reason. */
static const char *unsafe_reason(const struct stat *st)
{
    if (st->st_uid != geteuid()) return "it is owned by another user";
    if (st->st_mode & (S_IWGRP | S_IWOTH)) return "it is writable by group or others";
    return NULL;
}

/* 0: fine; 1: not private but allowed (read-only); else CLSHIM_EPERM/EIO. */
static int check_file(store *s, const char *name, int shared)
{
    char path[4200];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", s->dir, name);
    if (lstat(path, &st) != 0) return errno == ENOENT ? 0 : CLSHIM_EIO;
    if (S_ISLNK(st.st_mode) || !S_ISREG(st.st_mode)) {
        log_msg(LOG_WARN, "cache file %s is not used: %s (links are never followed)", path,
                S_ISLNK(st.st_mode) ? "it is a symbolic link" : "it is not a regular file");
        return CLSHIM_EPERM;
    }
    const char *why = shared ? NULL : unsafe_reason(&st);
    if (!why) return 0;
    if (s->opt.allow_shared) return 1;
    log_msg(LOG_WARN, "cache file %s is not used: %s (set CLSHIM_CACHE_ALLOW_SHARED=1 to read it anyway, "
            "read-only)", path, why);
    return CLSHIM_EPERM;
}

/* Checks the directory; sets *shared when it is not private but allowed. */
static int check_dir(store *s, int *shared)
{
    struct stat st;
    if (lstat(s->dir, &st) != 0) return errno == ENOENT ? CLSHIM_ENOTFOUND : CLSHIM_EIO;
    if (S_ISLNK(st.st_mode)) {
        /* A user may point the cache at another disk; the link must be
         * theirs (or root's), and what it points at is checked below. */
        if (st.st_uid != geteuid() && st.st_uid != 0) {
            log_msg(LOG_WARN, "cache directory %s is not used: it is a symbolic link owned by another user",
                    s->dir);
            return CLSHIM_EPERM;
        }
        if (stat(s->dir, &st) != 0) return CLSHIM_EIO;
    }
    if (!S_ISDIR(st.st_mode)) {
        log_msg(LOG_WARN, "cache directory %s is not a directory", s->dir);
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

static int take_open_lock(store *s)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/compact.lock", s->dir);
    s->lock_fd = open(path, (s->readonly ? O_RDONLY : O_RDWR | O_CREAT) | O_CLOEXEC | O_NOFOLLOW, 0600);
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
    char from[4200], to[4300];
    snprintf(from, sizeof from, "%s/data.mdb", s->dir);
    snprintf(to, sizeof to, "%s/data.mdb.corrupt-%llu", s->dir, (unsigned long long)time(NULL));
    if (rename(from, to) == 0)
        log_msg(LOG_WARN, "cache file %s is not a valid database (%s); moved to %s and started afresh", from,
                mdb_strerror(rc), to);
}

static int open_checked(store *s)
{
    int shared = 0, rc;
    if (!s->readonly) {
        int e = mkdir_p(s->dir);
        if (e && e != EACCES && e != EROFS && e != EPERM) {
            log_msg(LOG_WARN, "cache directory %s cannot be created: %s", s->dir, strerror(e));
            return CLSHIM_EIO;
        }
    }
    if ((rc = check_dir(s, &shared)) != 0) return rc;
    if (shared) s->readonly = 1;
    for (int i = 0; i < 2; i++) {
        rc = check_file(s, i ? "lock.mdb" : "data.mdb", shared);
        if (rc == 1) s->readonly = 1;
        else if (rc) return rc;
    }
    if (!s->readonly && access(s->dir, W_OK) != 0) {
        log_msg(LOG_WARN, "cache directory %s is not writable; using it read-only", s->dir);
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
    else if (rc)
        log_msg(LOG_WARN, "cache %s cannot be opened: %s", s->dir, mdb_strerror(rc));
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
    s->dir = strdup(opt->dir);
    s->opt.dir = s->dir;
    s->readonly = opt->readonly;
    s->lock_fd = -1;
    s->queue = calloc(2 * STORE_QUEUE_MAX, sizeof *s->queue);
    pthread_rwlock_init(&s->maplock, NULL);
    pthread_mutex_init(&s->qlock, NULL);
    read_boot_id(s->boot_id);
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
    *out = s;
    return CLSHIM_OK;
}

int store_is_readonly(const store *s) { return s ? s->readonly : 1; }

void store_close(store *s)
{
    if (!s) return;
    if (s->env) store_flush(s);
    store_env_close(s);
    if (s->lock_fd >= 0) close(s->lock_fd);
    pthread_rwlock_destroy(&s->maplock);
    pthread_mutex_destroy(&s->qlock);
    free(s->queue);
    free(s->dir);
    free(s);
}
