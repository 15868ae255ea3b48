/* sandbox.c — a build that reads exactly the bytes its key names (see
 * sandbox.h). Files are opened here with the system call itself, never
 * through libc's open (which interpose/files.c replaces). */
#include "cache/sandbox.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cache/key.h"
#include "cache/snapshot.h"
#include "common/check.h"
#include "common/log.h"

int sandbox_active_count;
void *sandbox_interposer;
long (*sandbox_binder)(void);

struct sandbox {
    const struct key_snapshot *snap;
    struct key_inputs *in;
    char **clean;        /* per key field: its clean path (driver-dir fields: the name) */
    int *masters;        /* per snapshot file: its memory file, -1 until needed */
    char cwd[4096];
    char driver_dir[4096]; /* clean; "" when none */
    int interposed;
    long bound_sites; /* sandbox_binder()'s count at the start; -1: not bound by it */
    unsigned long served, violations;
    char first[1200];
    struct sandbox *next; /* the active list (active_lock) */
    /* Record mode (no key yet: the key is finished after the build): each
     * file of the user's the build opens or stats, read once into a memory
     * file that the build is then served, its hash judged later. */
    int recording;
    struct recorded {
        char *path;
        char hex[33];
        uint64_t dev, ino; /* of the real file */
        int fd;            /* its memory file */
    } *rec;
    size_t nrec, caprec;
};

static __thread struct sandbox *current;
static pthread_mutex_t active_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sandbox *active;

static int sys_open(int dirfd, const char *path, int flags)
{
    return (int)syscall(SYS_openat, dirfd, path, flags, 0);
}

/* Under active_lock: another thread may report one too. */
static void violation(struct sandbox *sb, const char *what, const char *path)
{
    pthread_mutex_lock(&active_lock);
    if (!sb->violations++) snprintf(sb->first, sizeof sb->first, "%s %.1000s", what, path);
    pthread_mutex_unlock(&active_lock);
}

/* The key's field of a clean path (or, in the driver's directory, of a
 * name): its index, or -1. */
static long field_of(const struct sandbox *sb, const char *clean, int *driver_dir_name)
{
    *driver_dir_name = 0;
    size_t dl = strlen(sb->driver_dir);
    const char *name = NULL;
    if (dl && !strncmp(clean, sb->driver_dir, dl) && clean[dl] == '/' && !strchr(clean + dl + 1, '/'))
        name = clean + dl + 1;
    for (size_t i = 0; i < key_inputs_count(sb->in); i++) {
        const char *path, *hex;
        int ddir;
        key_inputs_get(sb->in, i, &path, &hex, &ddir);
        if (!sb->clean[i]) continue;
        if (ddir ? name && !strcmp(sb->clean[i], name) : !strcmp(sb->clean[i], clean)) {
            *driver_dir_name = ddir;
            return (long)i;
        }
    }
    return -1;
}

/* Whether a file the key does not name belongs to the driver: its
 * installation, the system's pseudo files, its own cache directory. */
static int drivers_own(const struct sandbox *sb, const char *clean)
{
    static const char *const prefixes[] = {"/usr/", "/lib/", "/lib64/", "/opt/", "/etc/", "/proc/", "/sys/", "/dev/"};
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++)
        if (!strncmp(clean, prefixes[i], strlen(prefixes[i]))) return 1;
    size_t dl = strlen(sb->driver_dir);
    return dl && !strncmp(clean, sb->driver_dir, dl) && clean[dl] == '/';
}

/* The memory file of snapshot file fi, made at first need: one per file
 * identity (the first path of its alias class owns it), so the compiler
 * sees the identities the key names (`#pragma once`, hard links). */
static int master_of(struct sandbox *sb, size_t fi)
{
    const struct snap_file *f = &sb->snap->files[fi];
    for (size_t j = 0; j < fi && !f->driver_dir; j++) {
        const struct snap_file *g = &sb->snap->files[j];
        if (!g->driver_dir && g->dev == f->dev && g->ino == f->ino) {
            fi = j;
            f = g;
            break;
        }
    }
    if (sb->masters[fi] >= 0) return sb->masters[fi];
    int fd = memfd_create("clshim-snapshot", MFD_CLOEXEC);
    if (fd < 0) return -1;
    for (size_t off = 0; off < f->len;) {
        ssize_t w = write(fd, f->bytes + off, f->len - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            close(fd);
            return -1;
        }
        off += (size_t)w;
    }
    return sb->masters[fi] = fd;
}

/* The snapshot file a field names (present), or -1. */
static long snap_index(const struct sandbox *sb, size_t field)
{
    const char *path, *hex;
    int ddir;
    key_inputs_get(sb->in, field, &path, &hex, &ddir);
    if (!hex[0]) return -1;
    const struct snap_file *f = snapshot_find(sb->snap, sb->clean[field], ddir);
    return f ? (long)(f - sb->snap->files) : -1;
}

struct sandbox *sandbox_begin(const struct key_snapshot *snap, const void *key, size_t key_len,
                              const char *driver_dir)
{
    struct sandbox *sb = calloc(1, sizeof *sb);
    if (!sb) return NULL;
    sb->bound_sites = -1;
    sb->snap = snap;
    sb->recording = key == NULL;
    if (!getcwd(sb->cwd, sizeof sb->cwd)) goto bad;
    if (!sb->recording && key_inputs_parse(key, key_len, &sb->in) != 0) goto bad; /* record mode: no fields */
    if (driver_dir && snapshot_norm(sb->cwd, driver_dir, sb->driver_dir, sizeof sb->driver_dir) != 0) goto bad;
    size_t n = key_inputs_count(sb->in);
    sb->clean = calloc(n ? n : 1, sizeof *sb->clean);
    sb->masters = malloc((snap && snap->n ? snap->n : 1) * sizeof *sb->masters);
    if (!sb->clean || !sb->masters) goto bad;
    for (size_t i = 0; snap && i < snap->n; i++) sb->masters[i] = -1;
    for (size_t i = 0; i < n; i++) {
        const char *path, *hex;
        int ddir;
        key_inputs_get(sb->in, i, &path, &hex, &ddir);
        char clean[8192];
        /* Relative fields are the key's working directory's (the snapshot's). */
        if (ddir) sb->clean[i] = strdup(path);
        else if (snapshot_norm(snap ? snap->cwd : sb->cwd, path, clean, sizeof clean) == 0) sb->clean[i] = strdup(clean);
        if (!sb->clean[i]) goto bad;
        if (hex[0] && snap_index(sb, i) < 0) goto bad; /* named, not in the snapshot: nothing to serve */
    }
    sb->interposed = sandbox_interposer && dlsym(RTLD_DEFAULT, "open") == sandbox_interposer;
    if (sandbox_interposer && !sb->interposed && sandbox_binder) {
        sb->bound_sites = sandbox_binder();
        sb->interposed = sb->bound_sites >= 0;
    }
    pthread_mutex_lock(&active_lock);
    sb->next = active;
    active = sb;
    __atomic_add_fetch(&sandbox_active_count, 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&active_lock);
    CLSHIM_ASSERT(!current);
    current = sb;
    return sb;
bad:
    sb->violations = 1; /* not listed yet: no other thread sees it */
    snprintf(sb->first, sizeof sb->first, "the key's files cannot be served");
    sandbox_end(sb, NULL, 0);
    return NULL;
}

int sandbox_covers(const struct sandbox *sb, const void *key, size_t key_len)
{
    struct key_inputs *other;
    if (!sb || key_inputs_parse(key, key_len, &other) != 0) return 0;
    int same = key_inputs_count(other) == key_inputs_count(sb->in);
    for (size_t i = 0; same && i < key_inputs_count(other); i++) {
        const char *p1, *h1, *p2, *h2;
        int d1, d2;
        key_inputs_get(sb->in, i, &p1, &h1, &d1);
        key_inputs_get(other, i, &p2, &h2, &d2);
        same = d1 == d2 && !strcmp(p1, p2) && !strcmp(h1, h2);
    }
    key_inputs_free(other);
    return same;
}

void sandbox_stop(struct sandbox *sb)
{
    if (!sb) return;
    if (sb->interposed && sb->bound_sites >= 0 && current == sb && sandbox_binder() != sb->bound_sites) {
        sb->interposed = 0; /* a library loaded meanwhile called libc's file functions */
        log_msg(LOG_DEBUG, "sandbox: the driver loaded a library that reads files during the build");
    }
    pthread_mutex_lock(&active_lock);
    for (struct sandbox **at = &active; *at; at = &(*at)->next)
        if (*at == sb) {
            *at = sb->next;
            __atomic_sub_fetch(&sandbox_active_count, 1, __ATOMIC_RELAXED);
            if (CLSHIM_ASSERT(current == sb)) current = NULL;
            break;
        }
    pthread_mutex_unlock(&active_lock);
}

/* Record mode: whether every file the build read is one the key names,
 * with the content it read. */
static int judge_records(const struct sandbox *sb, const void *key, size_t key_len, char *why, size_t why_len)
{
    struct key_inputs *in;
    if (key_inputs_parse(key, key_len, &in) != 0) {
        snprintf(why, why_len, "the key cannot be read");
        return -1;
    }
    int rc = 0;
    for (size_t r = 0; rc == 0 && r < sb->nrec; r++) {
        const struct recorded *f = &sb->rec[r];
        int named = 0;
        for (size_t i = 0; !named && i < key_inputs_count(in); i++) {
            const char *path, *hex;
            int ddir;
            key_inputs_get(in, i, &path, &hex, &ddir);
            char clean[8192];
            if (ddir || snapshot_norm(sb->cwd, path, clean, sizeof clean) != 0 || strcmp(clean, f->path)) continue;
            named = 1;
            if (strcmp(hex, f->hex) != 0) {
                snprintf(why, why_len, "the build read %.1000s, %s", f->path,
                         hex[0] ? "with other content than the key names" : "which the key names as absent");
                rc = -1;
            }
        }
        if (!named) {
            snprintf(why, why_len, "the build read a file the key does not name: %.1000s", f->path);
            rc = -1;
        }
    }
    key_inputs_free(in);
    return rc;
}

int sandbox_verdict(const struct sandbox *sb, const void *key, size_t key_len, char *why, size_t why_len)
{
    char none[8];
    if (!why) why = none, why_len = sizeof none;
    if (!sb) {
        snprintf(why, why_len, "no sandbox could be set up");
        return -1;
    }
    if (sb->violations) {
        snprintf(why, why_len, "%s", sb->first);
        return -1;
    }
    if (!sb->interposed) {
        snprintf(why, why_len, "the driver's file reads cannot be seen (clshim is not first in the process, and its calls could not be bound)");
        return -1;
    }
    if (sb->recording) return key ? judge_records(sb, key, key_len, why, why_len) : -1;
    return key && !sandbox_covers(sb, key, key_len) ? (snprintf(why, why_len, "another key's files"), -1) : 0;
}

int sandbox_sees(const struct sandbox *sb) { return sb && sb->interposed; }

void sandbox_free(struct sandbox *sb)
{
    if (!sb) return;
    sandbox_stop(sb);
    log_msg(LOG_DEBUG, "sandbox: the build was served %lu file%s of the key's snapshot, recorded %zu", sb->served,
            sb->served == 1 ? "" : "s", sb->nrec);
    for (size_t i = 0; sb->masters && sb->snap && i < sb->snap->n; i++)
        if (sb->masters[i] >= 0) close(sb->masters[i]);
    for (size_t i = 0; i < sb->nrec; i++) {
        free(sb->rec[i].path);
        if (sb->rec[i].fd >= 0) close(sb->rec[i].fd);
    }
    free(sb->rec);
    for (size_t i = 0; sb->clean && i < key_inputs_count(sb->in); i++) free(sb->clean[i]);
    free(sb->clean);
    free(sb->masters);
    key_inputs_free(sb->in);
    free(sb);
}

int sandbox_end(struct sandbox *sb, char *why, size_t why_len)
{
    sandbox_stop(sb);
    int rc = sandbox_verdict(sb, NULL, 0, why, why_len);
    sandbox_free(sb);
    return rc;
}

/* ---- the file entry points' side ---- */

/* path made clean against this sandbox's directory; -1 when it cannot be
 * (a path relative to another directory descriptor). */
static int clean_path(const struct sandbox *sb, int dirfd, const char *path, char *out, size_t len)
{
    if (path[0] != '/' && dirfd != AT_FDCWD) return -1;
    return snapshot_norm(sb->cwd, path, out, len);
}

/* A new open file description of a memory file (its own offset, the same
 * identity), or a duplicate when /proc is not there. */
static int reopen(int master, int flags)
{
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", master);
    int fd = sys_open(AT_FDCWD, proc, O_RDONLY | (flags & O_CLOEXEC));
    if (fd >= 0) return fd;
    fd = (flags & O_CLOEXEC) ? fcntl(master, F_DUPFD_CLOEXEC, 0) : dup(master);
    if (fd >= 0) lseek(fd, 0, SEEK_SET);
    return fd;
}

/* Record mode: the memory file of the user's file at `clean` (opened as
 * fd, which this closes), read once; -1 when it is not a regular file or
 * cannot be read (the caller then uses the real one). */
static int record(struct sandbox *sb, const char *clean, int fd)
{
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return -1;
    }
    for (size_t i = 0; i < sb->nrec; i++)
        if (!strcmp(sb->rec[i].path, clean)) {
            close(fd);
            return sb->rec[i].fd;
        }
    /* Read through a snapshot of one file: its bytes, hash and identity. */
    struct key_snapshot one = {0};
    char proc[64], hex[33];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    const unsigned char *bytes;
    size_t len;
    int read = snapshot_read(&one, proc, (size_t)1 << 26, &bytes, &len, hex);
    close(fd);
    if (read != 0) {
        for (size_t i = 0; i < one.n; i++) free(one.files[i].path), free(one.files[i].bytes);
        free(one.files);
        violation(sb, "the build read a file that could not be recorded:", clean);
        return -1;
    }
    int mfd = -1;
    for (size_t i = 0; i < sb->nrec && mfd < 0; i++)
        if (sb->rec[i].dev == (uint64_t)st.st_dev && sb->rec[i].ino == (uint64_t)st.st_ino &&
            !strcmp(sb->rec[i].hex, hex))
            mfd = sb->rec[i].fd; /* one memory file per identity */
    int own = mfd < 0;
    if (own && (mfd = memfd_create("clshim-recorded", MFD_CLOEXEC)) >= 0)
        for (size_t off = 0; off < len;) {
            ssize_t w = write(mfd, bytes + off, len - off);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) {
                close(mfd);
                mfd = -1;
                break;
            }
            off += (size_t)w;
        }
    for (size_t i = 0; i < one.n; i++) free(one.files[i].path), free(one.files[i].bytes);
    free(one.files);
    if (mfd < 0 || (sb->nrec == sb->caprec &&
                    !(sb->rec = realloc(sb->rec, (sb->caprec = sb->caprec ? 2 * sb->caprec : 16) * sizeof *sb->rec)))) {
        violation(sb, "the build read a file that could not be recorded:", clean);
        return -1;
    }
    struct recorded *r = &sb->rec[sb->nrec++];
    r->path = strdup(clean);
    memcpy(r->hex, hex, 33);
    r->dev = (uint64_t)st.st_dev;
    r->ino = (uint64_t)st.st_ino;
    r->fd = own ? mfd : dup(mfd);
    return r->fd;
}

int sandbox_open(int dirfd, const char *path, int flags, int *ret)
{
    struct sandbox *sb = current;
    if (!sb || !path) return 0;
    if ((flags & O_ACCMODE) != O_RDONLY || (flags & (O_CREAT | O_TRUNC | O_DIRECTORY | O_PATH))) return 0;
    char clean[8192];
    if (clean_path(sb, dirfd, path, clean, sizeof clean) != 0) {
        int fd = sys_open(dirfd, path, flags);
        struct stat st;
        if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
            violation(sb, "the build read a file relative to a directory descriptor:", path);
        *ret = fd;
        return 1;
    }
    int ddir;
    long field = field_of(sb, clean, &ddir);
    if (field >= 0) {
        long fi = snap_index(sb, (size_t)field);
        if (fi < 0) { /* named absent */
            errno = ENOENT;
            *ret = -1;
            return 1;
        }
        int master = master_of(sb, (size_t)fi);
        int fd = master >= 0 ? reopen(master, flags) : -1;
        if (fd < 0) violation(sb, "a snapshot file could not be served:", clean);
        else sb->served++;
        *ret = fd;
        return 1;
    }
    if (drivers_own(sb, clean)) return 0;
    int fd = sys_open(dirfd, path, flags);
    struct stat st;
    if (fd >= 0 && sb->recording) {
        int mfd = record(sb, clean, dup(fd));
        if (mfd >= 0) {
            close(fd);
            fd = reopen(mfd, flags);
        }
    } else if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        violation(sb, "the build read a file the key does not name:", clean);
    }
    *ret = fd;
    return 1;
}

int sandbox_stat(int dirfd, const char *path, struct stat *st, int *ret)
{
    struct sandbox *sb = current;
    if (!sb || !path) return 0;
    char clean[8192];
    if (clean_path(sb, dirfd, path, clean, sizeof clean) != 0) return 0;
    int ddir;
    long field = field_of(sb, clean, &ddir);
    if (field < 0 && sb->recording && !drivers_own(sb, clean)) {
        /* The identity the build sees is the recorded one, as its opens'. */
        int fd = sys_open(dirfd, path, O_RDONLY | O_CLOEXEC);
        int mfd = fd >= 0 ? record(sb, clean, fd) : -1;
        if (mfd < 0) return 0;
        *ret = fstat(mfd, st);
        return 1;
    }
    if (field < 0) return 0;
    long fi = snap_index(sb, (size_t)field);
    if (fi < 0) {
        errno = ENOENT;
        *ret = -1;
        return 1;
    }
    int master = master_of(sb, (size_t)fi);
    if (master < 0) {
        violation(sb, "a snapshot file could not be served:", clean);
        return 0;
    }
    *ret = fstat(master, st);
    return 1;
}

int sandbox_access(const char *path, int mode, int *ret)
{
    struct sandbox *sb = current;
    if (!sb || !path || (mode & (W_OK | X_OK))) return 0;
    char clean[8192];
    if (clean_path(sb, AT_FDCWD, path, clean, sizeof clean) != 0) return 0;
    int ddir;
    long field = field_of(sb, clean, &ddir);
    if (field < 0) return 0;
    if (snap_index(sb, (size_t)field) < 0) {
        errno = ENOENT;
        *ret = -1;
    } else {
        *ret = 0;
    }
    return 1;
}

void sandbox_note_open(int dirfd, const char *path, int flags, int fd)
{
    if (fd < 0 || !path || current || (flags & O_ACCMODE) != O_RDONLY) return;
    int saved = errno;
    pthread_mutex_lock(&active_lock);
    for (struct sandbox *sb = active; sb; sb = sb->next) {
        char clean[8192];
        int ddir;
        if (clean_path(sb, dirfd, path, clean, sizeof clean) == 0 && field_of(sb, clean, &ddir) >= 0 &&
            !sb->violations++)
            snprintf(sb->first, sizeof sb->first, "another thread read %.1000s, a file the key names, "
                                                  "during the build", clean);
    }
    pthread_mutex_unlock(&active_lock);
    errno = saved;
}
