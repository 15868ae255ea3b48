/* files.c — the process's file entry points, for cache/sandbox.h.
 *
 * A build clshim will store must read exactly the bytes its key names, so
 * while one runs on a thread (sandbox_active_count is then nonzero), the
 * driver's compiler asks the sandbox before it opens or stats a file. Every
 * other call costs one relaxed load and the real function, found with
 * dlsym(RTLD_NEXT) (so other interposers below clshim still run). The same
 * object is linked into clshim-tool, whose capture helper builds under a
 * sandbox too (its link exports these names: the Makefile's dynamic list).
 *
 * cache/driver_writes.h likewise asks about fsync, fdatasync and renames
 * while a hit's binary is loaded.
 *
 * Loading this does nothing else (interpose/real.h: PoCL's linker child
 * inherits LD_PRELOAD).
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cache/driver_writes.h"
#include "cache/sandbox.h"
#include "interpose/files.h"

/* Each entry point is a static function exported under the libc name by
 * an alias: its address taken here is this object's own, never the one a
 * dynamic linker would bind the name to (interpose/bind.c needs those). */
#define EXPORT_AS(name, impl) extern __typeof(impl) name __attribute__((alias(#impl), visibility("default")))

typedef int (*open_fn)(const char *, int, ...);
typedef int (*openat_fn)(int, const char *, int, ...);
typedef int (*stat_fn)(const char *, struct stat *);
typedef int (*access_fn)(const char *, int);
typedef int (*sync_fn)(int);
typedef int (*rename_fn)(const char *, const char *);
typedef int (*renameat_fn)(int, const char *, int, const char *);
typedef int (*renameat2_fn)(int, const char *, int, const char *, unsigned);

static open_fn real_open, real_open64;
static openat_fn real_openat, real_openat64;
static stat_fn real_stat, real_lstat;
static access_fn real_access;
static sync_fn real_fsync, real_fdatasync;
static rename_fn real_rename;
static renameat_fn real_renameat;
static renameat2_fn real_renameat2;

static int files_open(const char *path, int flags, ...);

/* Resolved here before any thread of the application can race it: the
 * constructor runs at load, single-threaded in preload mode. dlsym() may
 * open files itself, so a call made while these are being found goes to
 * the system call. */
__attribute__((constructor)) static void files_resolve(void)
{
    real_open = (open_fn)dlsym(RTLD_NEXT, "open");
    real_open64 = (open_fn)dlsym(RTLD_NEXT, "open64");
    real_openat = (openat_fn)dlsym(RTLD_NEXT, "openat");
    real_openat64 = (openat_fn)dlsym(RTLD_NEXT, "openat64");
    real_stat = (stat_fn)dlsym(RTLD_NEXT, "stat");
    real_lstat = (stat_fn)dlsym(RTLD_NEXT, "lstat");
    real_access = (access_fn)dlsym(RTLD_NEXT, "access");
    real_fsync = (sync_fn)dlsym(RTLD_NEXT, "fsync");
    real_fdatasync = (sync_fn)dlsym(RTLD_NEXT, "fdatasync");
    real_rename = (rename_fn)dlsym(RTLD_NEXT, "rename");
    real_renameat = (renameat_fn)dlsym(RTLD_NEXT, "renameat");
    real_renameat2 = (renameat2_fn)dlsym(RTLD_NEXT, "renameat2");
    sandbox_interposer = (void *)files_open;
}

static int active(void) { return __atomic_load_n(&sandbox_active_count, __ATOMIC_RELAXED) != 0; }
static int writes_active(void) { return __atomic_load_n(&driver_writes_active_count, __ATOMIC_RELAXED) != 0; }

static mode_t mode_arg(int flags, va_list ap)
{
    return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? (mode_t)va_arg(ap, int) : 0;
}

static int do_open(open_fn real, int dirfd, const char *path, int flags, mode_t mode)
{
    int fd;
    if (active() && sandbox_open(dirfd, path, flags, &fd)) return fd;
    if (real && dirfd == AT_FDCWD) fd = real(path, flags, mode);
    else fd = (int)syscall(SYS_openat, dirfd, path, flags, mode);
    if (active()) sandbox_note_open(dirfd, path, flags, fd);
    return fd;
}

static int do_openat(openat_fn real, int dirfd, const char *path, int flags, mode_t mode)
{
    int fd;
    if (active() && sandbox_open(dirfd, path, flags, &fd)) return fd;
    fd = real ? real(dirfd, path, flags, mode) : (int)syscall(SYS_openat, dirfd, path, flags, mode);
    if (active()) sandbox_note_open(dirfd, path, flags, fd);
    return fd;
}

/* The mode argument exists only with O_CREAT or O_TMPFILE. */
#define WITH_MODE(flags, call)                                                                                 \
    do {                                                                                                       \
        va_list ap;                                                                                            \
        va_start(ap, flags);                                                                                   \
        mode_t mode = mode_arg(flags, ap);                                                                     \
        va_end(ap);                                                                                            \
        return call;                                                                                           \
    } while (0)

static int files_open(const char *path, int flags, ...) { WITH_MODE(flags, do_open(real_open, AT_FDCWD, path, flags, mode)); }
EXPORT_AS(open, files_open);
static int files_open64(const char *path, int flags, ...) { WITH_MODE(flags, do_open(real_open64, AT_FDCWD, path, flags, mode)); }
static int files_openat(int dirfd, const char *path, int flags, ...)
{
    WITH_MODE(flags, do_openat(real_openat, dirfd, path, flags, mode));
}
static int files_openat64(int dirfd, const char *path, int flags, ...)
{
    WITH_MODE(flags, do_openat(real_openat64, dirfd, path, flags, mode));
}

/* _FORTIFY_SOURCE's checked forms (no mode: O_CREAT is refused by them). */
static int files___open_2(const char *path, int flags) { return do_open(real_open, AT_FDCWD, path, flags, 0); }
static int files___open64_2(const char *path, int flags) { return do_open(real_open64, AT_FDCWD, path, flags, 0); }
static int files___openat_2(int dirfd, const char *path, int flags) { return do_openat(real_openat, dirfd, path, flags, 0); }
static int files___openat64_2(int dirfd, const char *path, int flags)
{
    return do_openat(real_openat64, dirfd, path, flags, 0);
}

static int do_stat(stat_fn real, int follow, const char *path, struct stat *st)
{
    int rc;
    if (active() && sandbox_stat(AT_FDCWD, path, st, &rc)) return rc;
    if (real) return real(path, st);
    return (int)syscall(SYS_newfstatat, AT_FDCWD, path, st, follow ? 0 : AT_SYMLINK_NOFOLLOW);
}

static int files_stat(const char *path, struct stat *st) { return do_stat(real_stat, 1, path, st); }
static int files_lstat(const char *path, struct stat *st) { return do_stat(real_lstat, 0, path, st); }
/* On x86-64 struct stat64 has struct stat's layout. */
_Static_assert(sizeof(struct stat64) == sizeof(struct stat), "stat64 is stat");
static int files_stat64(const char *path, struct stat64 *st) { return do_stat(real_stat, 1, path, (struct stat *)st); }
static int files_lstat64(const char *path, struct stat64 *st) { return do_stat(real_lstat, 0, path, (struct stat *)st); }

static int files_access(const char *path, int mode)
{
    int rc;
    if (active() && sandbox_access(path, mode, &rc)) return rc;
    return real_access ? real_access(path, mode) : (int)syscall(SYS_faccessat, AT_FDCWD, path, mode);
}

/* ---- cache/driver_writes.h: a hit's load syncs once, in the background ---- */

static int do_sync(sync_fn real, long nr, int fd)
{
    int rc;
    if (writes_active() && driver_writes_sync(fd, &rc)) return rc;
    return real ? real(fd) : (int)syscall(nr, fd);
}

static int files_fsync(int fd) { return do_sync(real_fsync, SYS_fsync, fd); }
static int files_fdatasync(int fd) { return do_sync(real_fdatasync, SYS_fdatasync, fd); }

static int files_rename(const char *from, const char *to)
{
    if (writes_active()) driver_writes_before_rename(AT_FDCWD, to);
    return real_rename ? real_rename(from, to) : (int)syscall(SYS_rename, from, to);
}

static int files_renameat(int fromfd, const char *from, int tofd, const char *to)
{
    if (writes_active()) driver_writes_before_rename(tofd, to);
    return real_renameat ? real_renameat(fromfd, from, tofd, to) : (int)syscall(SYS_renameat, fromfd, from, tofd, to);
}

static int files_renameat2(int fromfd, const char *from, int tofd, const char *to, unsigned flags)
{
    if (writes_active()) driver_writes_before_rename(tofd, to);
    return real_renameat2 ? real_renameat2(fromfd, from, tofd, to, flags)
                          : (int)syscall(SYS_renameat2, fromfd, from, tofd, to, flags);
}

/* The exported names and this object's functions, for interpose/bind.c. */
EXPORT_AS(open64, files_open64);
EXPORT_AS(openat, files_openat);
EXPORT_AS(openat64, files_openat64);
EXPORT_AS(__open_2, files___open_2);
EXPORT_AS(__open64_2, files___open64_2);
EXPORT_AS(__openat_2, files___openat_2);
EXPORT_AS(__openat64_2, files___openat64_2);
EXPORT_AS(stat, files_stat);
EXPORT_AS(lstat, files_lstat);
EXPORT_AS(stat64, files_stat64);
EXPORT_AS(lstat64, files_lstat64);
EXPORT_AS(access, files_access);
EXPORT_AS(fsync, files_fsync);
EXPORT_AS(fdatasync, files_fdatasync);
EXPORT_AS(rename, files_rename);
EXPORT_AS(renameat, files_renameat);
EXPORT_AS(renameat2, files_renameat2);

const struct files_entry files_entries[] = {
    {"open", (void *)files_open},
    {"open64", (void *)files_open64},
    {"openat", (void *)files_openat},
    {"openat64", (void *)files_openat64},
    {"__open_2", (void *)files___open_2},
    {"__open64_2", (void *)files___open64_2},
    {"__openat_2", (void *)files___openat_2},
    {"__openat64_2", (void *)files___openat64_2},
    {"stat", (void *)files_stat},
    {"lstat", (void *)files_lstat},
    {"stat64", (void *)files_stat64},
    {"lstat64", (void *)files_lstat64},
    {"access", (void *)files_access},
    {"fsync", (void *)files_fsync},
    {"fdatasync", (void *)files_fdatasync},
    {"rename", (void *)files_rename},
    {"renameat", (void *)files_renameat},
    {"renameat2", (void *)files_renameat2},
    {NULL, NULL},
};
