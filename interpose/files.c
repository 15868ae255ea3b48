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

#include "cache/sandbox.h"

#define EXPORT __attribute__((visibility("default")))

typedef int (*open_fn)(const char *, int, ...);
typedef int (*openat_fn)(int, const char *, int, ...);
typedef int (*stat_fn)(const char *, struct stat *);
typedef int (*access_fn)(const char *, int);

static open_fn real_open, real_open64;
static openat_fn real_openat, real_openat64;
static stat_fn real_stat, real_lstat;
static access_fn real_access;

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
    sandbox_interposer = (void *)files_open;
}

static int active(void) { return __atomic_load_n(&sandbox_active_count, __ATOMIC_RELAXED) != 0; }

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
extern __typeof(files_open) open __attribute__((alias("files_open"), visibility("default")));
EXPORT int open64(const char *path, int flags, ...) { WITH_MODE(flags, do_open(real_open64, AT_FDCWD, path, flags, mode)); }
EXPORT int openat(int dirfd, const char *path, int flags, ...)
{
    WITH_MODE(flags, do_openat(real_openat, dirfd, path, flags, mode));
}
EXPORT int openat64(int dirfd, const char *path, int flags, ...)
{
    WITH_MODE(flags, do_openat(real_openat64, dirfd, path, flags, mode));
}

/* _FORTIFY_SOURCE's checked forms (no mode: O_CREAT is refused by them). */
EXPORT int __open_2(const char *path, int flags) { return do_open(real_open, AT_FDCWD, path, flags, 0); }
EXPORT int __open64_2(const char *path, int flags) { return do_open(real_open64, AT_FDCWD, path, flags, 0); }
EXPORT int __openat_2(int dirfd, const char *path, int flags) { return do_openat(real_openat, dirfd, path, flags, 0); }
EXPORT int __openat64_2(int dirfd, const char *path, int flags)
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

EXPORT int stat(const char *path, struct stat *st) { return do_stat(real_stat, 1, path, st); }
EXPORT int lstat(const char *path, struct stat *st) { return do_stat(real_lstat, 0, path, st); }
/* On x86-64 struct stat64 has struct stat's layout. */
_Static_assert(sizeof(struct stat64) == sizeof(struct stat), "stat64 is stat");
EXPORT int stat64(const char *path, struct stat64 *st) { return do_stat(real_stat, 1, path, (struct stat *)st); }
EXPORT int lstat64(const char *path, struct stat64 *st) { return do_stat(real_lstat, 0, path, (struct stat *)st); }

EXPORT int access(const char *path, int mode)
{
    int rc;
    if (active() && sandbox_access(path, mode, &rc)) return rc;
    return real_access ? real_access(path, mode) : (int)syscall(SYS_faccessat, AT_FDCWD, path, mode);
}
