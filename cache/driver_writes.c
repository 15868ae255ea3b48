/* driver_writes.c — a hit's driver writes synced once, in the background
 * (see driver_writes.h). Files here are opened and synced with the system
 * calls themselves, never through libc's (interpose/files.c replaces them).
 *
 * A marker is text, one record a line:
 *     clshim-unsynced 1
 *     boot <boot id>
 *     pid <pid>
 *     dir <absolute path> <xxh64 of the path, 16 hex digits>
 * A dir line counts only with its checksum: a line cut by a crash was never
 * synced, so no sync it covered was skipped yet.
 */
#include "cache/driver_writes.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "common/check.h"
#include "common/config.h"
#include "common/log.h"

int driver_writes_active_count;

enum { MAX_DIRS = 32, PATH_CAP = 4096, MARKER_CAP = 65536 };

struct driver_writes {
    char root[PATH_CAP];  /* the driver's cache directory, absolute and clean */
    char *dirs[MAX_DIRS]; /* what the marker names, durable */
    size_t ndirs;
    int marker_fd;            /* -1 until the first skipped sync */
    char marker[PATH_CAP];    /* its path */
    char sync_dir[PATH_CAP];  /* a directory on the files' file system */
    int lock_fd;
    int fallback;             /* the marker failed: sync the file system */
    unsigned long skipped;
};

static __thread struct driver_writes *current;

static struct {
    unsigned long windows, syncs_skipped, markers, recovered_dirs, fallbacks;
} counts;

static void count(unsigned long *c, unsigned long n) { __atomic_add_fetch(c, n, __ATOMIC_RELAXED); }

/* ---- small helpers ----------------------------------------------------- */

static int sys_open(const char *path, int flags, mode_t mode)
{
    return (int)syscall(SYS_openat, AT_FDCWD, path, flags | O_CLOEXEC, mode);
}

static int sys_datasync(int fd) { return (int)syscall(SYS_fdatasync, fd); }

static char boot_buf[64];
static pthread_once_t boot_once = PTHREAD_ONCE_INIT;

static void read_boot_id(void)
{
    int fd = sys_open("/proc/sys/kernel/random/boot_id", O_RDONLY, 0);
    ssize_t n = fd >= 0 ? read(fd, boot_buf, sizeof boot_buf - 1) : -1;
    if (fd >= 0) close(fd);
    if (n <= 0) n = 0;
    boot_buf[n] = 0;
    boot_buf[strcspn(boot_buf, "\n")] = 0;
}

static const char *this_boot(void)
{
    pthread_once(&boot_once, read_boot_id);
    return boot_buf;
}

/* <cache dir>/unsynced into buf, created; -1 when there is none, or the
 * cache is read-only (CLSHIM_CACHE_READONLY: nothing is written there). */
static int marker_dir(char *buf, size_t len)
{
    char base[PATH_CAP];
    const struct clshim_config *cfg = config_get();
    if (cfg->cache_readonly || config_cache_dir(cfg, base, sizeof base) != 0) return -1;
    if ((size_t)snprintf(buf, len, "%s/unsynced", base) >= len) return -1;
    if (mkdir(buf, 0700) != 0 && errno != EEXIST) return -1;
    return 0;
}

/* A clean absolute path: no "." or ".." components, no "//", no "/" at
 * the end. */
static int clean_path(const char *d)
{
    size_t n = strlen(d);
    if (d[0] != '/' || n < 2 || d[n - 1] == '/' || strstr(d, "//") || strstr(d, "/./") || strstr(d, "/../"))
        return 0;
    if (n >= 2 && !strcmp(d + n - 2, "/.")) return 0;
    return !(n >= 3 && !strcmp(d + n - 3, "/.."));
}

/* A directory the recovery may delete: clean, and at least two components
 * inside the clean driver cache directory `root` (PoCL's layout is
 * root/XX/HASH/...: never the root or a level of its index). */
static int removable_dir(const char *d, const char *root)
{
    size_t n = strlen(root);
    if (!clean_path(d) || !clean_path(root) || strncmp(d, root, n) != 0 || d[n] != '/') return 0;
    const char *rest = d + n + 1, *slash = strchr(rest, '/');
    return slash && slash > rest && slash[1];
}

/* The absolute directory of `path` (relative to dirfd) into out, textual;
 * -1 when it cannot be had. */
static int dir_of(int dirfd, const char *path, char *out, size_t len)
{
    char base[PATH_CAP], full[2 * PATH_CAP + 2];
    if (path[0] == '/') {
        snprintf(full, sizeof full, "%s", path);
    } else {
        if (dirfd == AT_FDCWD) {
            if (!getcwd(base, sizeof base)) return -1;
        } else {
            char link[64];
            snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
            ssize_t n = readlink(link, base, sizeof base - 1);
            if (n <= 0) return -1;
            base[n] = 0;
        }
        snprintf(full, sizeof full, "%s/%s", base, path);
    }
    char *slash = strrchr(full, '/');
    if (!slash || slash == full) return -1;
    *slash = 0;
    if (strlen(full) >= len) return -1;
    memcpy(out, full, strlen(full) + 1);
    return 0;
}

static int covered(const struct driver_writes *w, const char *dir)
{
    for (size_t i = 0; i < w->ndirs; i++) {
        size_t n = strlen(w->dirs[i]);
        if (!strncmp(dir, w->dirs[i], n) && (dir[n] == 0 || dir[n] == '/')) return 1;
    }
    return 0;
}

static int write_all(int fd, const char *s, size_t n)
{
    while (n) {
        ssize_t k = write(fd, s, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        s += k, n -= (size_t)k;
    }
    return 0;
}

/* Makes `dir` named by the window's marker, durably (the marker created
 * on first use, its directory entry synced). 0, or -1: then the window
 * falls back to syncing. */
static int cover(struct driver_writes *w, const char *dir)
{
    if (covered(w, dir)) return 0;
    if (w->fallback || !removable_dir(dir, w->root) || w->ndirs == MAX_DIRS) return -1;
    char line[PATH_CAP + 64];
    int n;
    if (w->marker_fd < 0) {
        char mdir[PATH_CAP];
        static unsigned long seq;
        if (marker_dir(mdir, sizeof mdir) != 0) return -1;
        if ((size_t)snprintf(w->marker, sizeof w->marker, "%.3900s/%ld-%ld-%lu", mdir, (long)getpid(),
                             (long)syscall(SYS_gettid), __atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED)) >= sizeof w->marker)
            return -1;
        w->marker_fd = sys_open(w->marker, O_WRONLY | O_CREAT | O_EXCL, 0600);
        if (w->marker_fd < 0) return -1;
        n = snprintf(line, sizeof line, "clshim-unsynced 1\nboot %s\npid %ld\nroot %s %016llx\n", this_boot(),
                     (long)getpid(), w->root, (unsigned long long)XXH64(w->root, strlen(w->root), 0));
        if (write_all(w->marker_fd, line, (size_t)n) != 0) return -1;
        int dfd = sys_open(mdir, O_RDONLY | O_DIRECTORY, 0);
        int synced = dfd >= 0 && (int)syscall(SYS_fsync, dfd) == 0;
        if (dfd >= 0) close(dfd);
        if (!synced) return -1;
        count(&counts.markers, 1);
        snprintf(w->sync_dir, sizeof w->sync_dir, "%s", dir);
    }
    n = snprintf(line, sizeof line, "dir %s %016llx\n", dir, (unsigned long long)XXH64(dir, strlen(dir), 0));
    if (write_all(w->marker_fd, line, (size_t)n) != 0 || sys_datasync(w->marker_fd) != 0) return -1;
    w->dirs[w->ndirs] = strdup(dir);
    if (!w->dirs[w->ndirs]) return -1;
    w->ndirs++;
    return 0;
}

/* A marker that failed: from here on the window syncs as the driver would,
 * and what it skipped so far is synced now. */
static void fall_back(struct driver_writes *w, const char *dir)
{
    if (!w->fallback) {
        w->fallback = 1;
        count(&counts.fallbacks, 1);
        log_msg(LOG_DEBUG, "driver files of a hit: no marker could be written; syncing them now");
    }
    if (!w->skipped) return;
    int fd = dir[0] ? sys_open(dir, O_RDONLY | O_DIRECTORY, 0) : -1;
    if (fd >= 0) {
        syscall(SYS_syncfs, fd);
        close(fd);
    } else {
        sync();
    }
}

/* ---- the background syncer ---------------------------------------------- */

struct queued {
    char *marker, *dir;
    struct queued *next;
};

static pthread_mutex_t q_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t q_cond = PTHREAD_COND_INITIALIZER;
static struct queued *q_head;
static int q_busy;
static pid_t syncer_pid; /* the process whose syncer runs (0: none) */

static void *syncer(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&q_lock);
    for (;;) {
        while (!q_head) pthread_cond_wait(&q_cond, &q_lock);
        struct queued *batch = q_head;
        q_head = NULL;
        q_busy = 1;
        pthread_mutex_unlock(&q_lock);
        /* One syncfs per file system the batch touched; then the markers,
         * whose files are now on disk, go. */
        dev_t done[MAX_DIRS];
        size_t ndone = 0;
        for (struct queued *e = batch; e; e = e->next) {
            int fd = sys_open(e->dir, O_RDONLY | O_DIRECTORY, 0);
            struct stat st;
            if (fd < 0) {
                sync();
            } else if (fstat(fd, &st) == 0) {
                size_t i = 0;
                while (i < ndone && done[i] != st.st_dev) i++;
                if (i == ndone) {
                    syscall(SYS_syncfs, fd);
                    if (ndone < MAX_DIRS) done[ndone++] = st.st_dev;
                }
            }
            if (fd >= 0) close(fd);
        }
        while (batch) {
            struct queued *e = batch;
            batch = e->next;
            unlink(e->marker);
            free(e->marker);
            free(e->dir);
            free(e);
        }
        pthread_mutex_lock(&q_lock);
        q_busy = 0;
        pthread_cond_broadcast(&q_cond);
    }
    return NULL;
}

/* A fork while the syncer holds the lock would leave the child's locked
 * for good: the child starts afresh (its own syncer, on demand); markers
 * the parent queued are the parent's to delete. */
static void q_prepare(void) { pthread_mutex_lock(&q_lock); }
static void q_parent(void) { pthread_mutex_unlock(&q_lock); }
static void q_child(void)
{
    pthread_mutex_init(&q_lock, NULL);
    pthread_cond_init(&q_cond, NULL);
    q_head = NULL;
    q_busy = 0;
    syncer_pid = 0;
}
/* At exit the process waits, bounded, for its syncer: a short run's
 * process would otherwise end before the sync it started, and leave its
 * marker for the next process of this boot to sync and delete. The wait
 * costs no more than the syncs the driver would have made itself. */
#define EXIT_SETTLE_MS 2000
static void settle_at_exit(void)
{
    if (driver_writes_settle(EXIT_SETTLE_MS) != 0)
        log_msg(LOG_DEBUG, "driver files of a hit still being synced at exit; their marker is left for a later "
                           "process");
}
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static void register_atfork(void)
{
    pthread_atfork(q_prepare, q_parent, q_child);
    atexit(settle_at_exit);
}

/* Hands a marker to the syncer, started in this process if it is not. */
static void queue_marker(const char *marker, const char *dir)
{
    struct queued *e = calloc(1, sizeof *e);
    if (e) e->marker = strdup(marker), e->dir = strdup(dir);
    if (!e || !e->marker || !e->dir) {
        if (e) free(e->marker), free(e->dir), free(e);
        return; /* the marker stays: the next process syncs it */
    }
    pthread_once(&atfork_once, register_atfork);
    pthread_mutex_lock(&q_lock);
    if (syncer_pid != getpid()) { /* none yet */
        pthread_attr_t attr;
        pthread_t t;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        if (pthread_create(&t, &attr, syncer, NULL) == 0) syncer_pid = getpid();
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        pthread_attr_destroy(&attr);
    }
    if (syncer_pid == getpid()) {
        e->next = q_head;
        q_head = e;
        pthread_cond_signal(&q_cond);
        e = NULL;
    }
    pthread_mutex_unlock(&q_lock);
    if (e) free(e->marker), free(e->dir), free(e);
}

int driver_writes_settle(int timeout_ms)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
    int rc = 0;
    pthread_mutex_lock(&q_lock);
    while (syncer_pid == getpid() && (q_head || q_busy) && rc == 0)
        rc = pthread_cond_timedwait(&q_cond, &q_lock, &until);
    pthread_mutex_unlock(&q_lock);
    return rc == 0 ? 0 : -1;
}

/* ---- recovery ------------------------------------------------------------ */

struct marker_info {
    char boot[64];
    long pid;
    char *dirs[MAX_DIRS];
    size_t ndirs;
};

static void marker_info_free(struct marker_info *m)
{
    for (size_t i = 0; i < m->ndirs; i++) free(m->dirs[i]);
    m->ndirs = 0;
}

/* "PATH SUM" with SUM the path's xxh64: PATH (cut in place), else NULL. */
static const char *summed(char *text)
{
    char *sum = strrchr(text, ' ');
    if (!sum || sum == text || strlen(sum + 1) != 16) return NULL;
    *sum++ = 0;
    char want[17];
    snprintf(want, sizeof want, "%016llx", (unsigned long long)XXH64(text, strlen(text), 0));
    return strcmp(want, sum) == 0 ? text : NULL;
}

/* Parses a marker; 0, or -1 when it is not one (then it is left alone). */
static int read_marker(const char *path, struct marker_info *m)
{
    memset(m, 0, sizeof *m);
    m->pid = -1;
    int fd = sys_open(path, O_RDONLY | O_NOFOLLOW, 0);
    if (fd < 0) return -1;
    char *buf = malloc(MARKER_CAP + 1);
    ssize_t n = buf ? read(fd, buf, MARKER_CAP) : -1;
    close(fd);
    if (n < 0) {
        free(buf);
        return -1;
    }
    buf[n] = 0;
    if (strncmp(buf, "clshim-unsynced 1\n", 18) != 0) {
        free(buf);
        return -1;
    }
    char root[PATH_CAP] = "";
    for (char *line = buf, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (!next) break; /* a line cut short was never synced */
        *next++ = 0;
        const char *path;
        if (!strncmp(line, "boot ", 5)) snprintf(m->boot, sizeof m->boot, "%s", line + 5);
        else if (!strncmp(line, "pid ", 4)) m->pid = strtol(line + 4, NULL, 10);
        else if (!strncmp(line, "root ", 5) && (path = summed(line + 5))) snprintf(root, sizeof root, "%s", path);
        else if (!strncmp(line, "dir ", 4) && m->ndirs < MAX_DIRS && (path = summed(line + 4)) &&
                 removable_dir(path, root) && (m->dirs[m->ndirs] = strdup(path)))
            m->ndirs++;
    }
    free(buf);
    return m->boot[0] && m->pid > 0 ? 0 : -1;
}

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st, (void)ftw;
    if (type == FTW_DP) rmdir(path);
    else unlink(path);
    return 0;
}

static int process_alive(long pid) { return kill((pid_t)pid, 0) == 0 || errno == EPERM; }

/* Under the exclusive lock: removes what other boots' markers name. */
static int recover_locked(const char *dir, const char *boot)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || !strcmp(e->d_name, "lock")) continue;
        char path[PATH_CAP];
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= sizeof path) continue;
        struct marker_info m;
        if (read_marker(path, &m) != 0) continue;
        if (strcmp(m.boot, boot) != 0) {
            for (size_t i = 0; i < m.ndirs; i++) {
                nftw(m.dirs[i], remove_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
                removed++;
            }
            unlink(path);
            log_msg(LOG_INFO, "removed %zu driver cache director%s written unsynced before a restart", m.ndirs,
                    m.ndirs == 1 ? "y" : "ies");
        } else if (m.pid != (long)getpid() && !process_alive(m.pid)) {
            queue_marker(path, m.ndirs ? m.dirs[0] : dir);
        }
        marker_info_free(&m);
    }
    closedir(d);
    return removed;
}

/* Whether the directory holds a marker of another boot (cheap scan). */
static int other_boot_marker(const char *dir, const char *boot)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    int found = 0;
    struct dirent *e;
    while (!found && (e = readdir(d))) {
        if (e->d_name[0] == '.' || !strcmp(e->d_name, "lock")) continue;
        char path[PATH_CAP];
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= sizeof path) continue;
        struct marker_info m;
        if (read_marker(path, &m) == 0) found = strcmp(m.boot, boot) != 0 || (m.pid != getpid() && !process_alive(m.pid));
        marker_info_free(&m);
    }
    closedir(d);
    return found;
}

static int open_lock(const char *dir)
{
    char path[PATH_CAP];
    if ((size_t)snprintf(path, sizeof path, "%s/lock", dir) >= sizeof path) return -1;
    return sys_open(path, O_RDWR | O_CREAT, 0600);
}

int driver_writes_recover(const char *dir, const char *boot)
{
    int fd = open_lock(dir);
    if (fd < 0) return 0;
    int removed = 0;
    if (flock(fd, LOCK_EX) == 0) removed = recover_locked(dir, boot);
    close(fd);
    count(&counts.recovered_dirs, (unsigned long)removed);
    return removed;
}

void driver_writes_recover_early(void)
{
    char base[PATH_CAP], dir[PATH_CAP];
    struct stat st;
    if (config_cache_dir(config_get(), base, sizeof base) != 0 ||
        (size_t)snprintf(dir, sizeof dir, "%s/unsynced", base) >= sizeof dir || stat(dir, &st) != 0 ||
        !this_boot()[0] || !other_boot_marker(dir, this_boot()))
        return;
    count(&counts.recovered_dirs, (unsigned long)driver_writes_recover(dir, this_boot()));
}

/* ---- windows -------------------------------------------------------------- */

struct driver_writes *driver_writes_begin(const char *driver_root)
{
    char dir[PATH_CAP], root[PATH_CAP];
    if (current || !driver_root || !driver_root[0]) return NULL;
    if (driver_root[0] == '/') {
        snprintf(root, sizeof root, "%s", driver_root);
    } else {
        char cwd[PATH_CAP];
        if (!getcwd(cwd, sizeof cwd) || (size_t)snprintf(root, sizeof root, "%s/%s", cwd, driver_root) >= sizeof root)
            return NULL;
    }
    size_t rl = strlen(root);
    while (rl > 1 && root[rl - 1] == '/') root[--rl] = 0;
    if (!clean_path(root) || marker_dir(dir, sizeof dir) != 0 || !this_boot()[0]) return NULL;
    int lock = open_lock(dir);
    if (lock < 0) return NULL;
    /* The scan is a readdir of a directory that is almost always empty. */
    if (other_boot_marker(dir, this_boot())) {
        if (flock(lock, LOCK_EX) != 0) {
            close(lock);
            return NULL;
        }
        count(&counts.recovered_dirs, (unsigned long)recover_locked(dir, this_boot()));
    }
    if (flock(lock, LOCK_SH) != 0) { /* converts an exclusive one */
        close(lock);
        return NULL;
    }
    struct driver_writes *w = calloc(1, sizeof *w);
    if (!w) {
        close(lock);
        return NULL;
    }
    w->lock_fd = lock;
    w->marker_fd = -1;
    memcpy(w->root, root, strlen(root) + 1);
    current = w;
    count(&counts.windows, 1);
    __atomic_add_fetch(&driver_writes_active_count, 1, __ATOMIC_RELAXED);
    return w;
}

void driver_writes_end(struct driver_writes *w)
{
    if (!w) return;
    CLSHIM_ASSERT(current == w);
    current = NULL;
    __atomic_sub_fetch(&driver_writes_active_count, 1, __ATOMIC_RELAXED);
    if (w->marker_fd >= 0) close(w->marker_fd);
    if (w->skipped) {
        count(&counts.syncs_skipped, w->skipped);
        log_msg(LOG_DEBUG, "driver wrote %lu files of a hit without a sync each; synced in the background",
                w->skipped);
    }
    if (w->marker[0]) {
        if (w->fallback) unlink(w->marker); /* what it covers was synced */
        else queue_marker(w->marker, w->sync_dir);
    }
    for (size_t i = 0; i < w->ndirs; i++) free(w->dirs[i]);
    close(w->lock_fd); /* the shared lock goes with it */
    free(w);
}

void driver_writes_stats(struct driver_writes_stats *out)
{
    out->windows = __atomic_load_n(&counts.windows, __ATOMIC_RELAXED);
    out->syncs_skipped = __atomic_load_n(&counts.syncs_skipped, __ATOMIC_RELAXED);
    out->markers = __atomic_load_n(&counts.markers, __ATOMIC_RELAXED);
    out->recovered_dirs = __atomic_load_n(&counts.recovered_dirs, __ATOMIC_RELAXED);
    out->fallbacks = __atomic_load_n(&counts.fallbacks, __ATOMIC_RELAXED);
}

/* ---- the file entry points' side ------------------------------------------ */

int driver_writes_sync(int fd, int *ret)
{
    struct driver_writes *w = current;
    if (!w || w->fallback) return 0;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
    char link[64], path[PATH_CAP], dir[PATH_CAP];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t len = readlink(link, path, sizeof path - 1);
    if (len <= 0) return 0;
    path[len] = 0;
    /* Only the driver's cache files: what a crash could leave is removed. */
    if (dir_of(AT_FDCWD, path, dir, sizeof dir) != 0 || !removable_dir(dir, w->root)) return 0;
    if (cover(w, dir) != 0) {
        fall_back(w, dir);
        return 0;
    }
    w->skipped++;
    *ret = 0;
    return 1;
}

void driver_writes_before_rename(int dirfd, const char *target)
{
    struct driver_writes *w = current;
    char dir[PATH_CAP];
    if (!w || !w->skipped || w->fallback || !target) return;
    if (dir_of(dirfd, target, dir, sizeof dir) != 0) dir[0] = 0;
    if (!dir[0] || cover(w, dir) != 0) fall_back(w, dir);
}
