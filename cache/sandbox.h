/* sandbox.h — a driver's build that reads exactly the bytes its key names.
 *
 * The cache stores a binary under a key only when the compiler that made it
 * read the bytes the key names: no file the key names is read from the file
 * system after the key was computed (a check before and after cannot see a
 * change undone in between). A build is run on this thread between
 * sandbox_begin() and sandbox_end(); the file entry points of the process
 * (interpose/files.c: open, stat, access and their variants, which the
 * dynamic linker binds the driver's compiler to) ask sandbox_open() and
 * sandbox_stat() first, and while a sandbox is active on the calling thread:
 *
 *  - a path the key names as present is served from the key's snapshot
 *    (cache/snapshot.h): a private memory file holding the bytes that were
 *    hashed, one per file identity, so `#pragma once` sees the identities
 *    the key names (header-alias fields);
 *  - a path the key names as absent is absent (ENOENT);
 *  - a name of the driver's source directory the key names is served or
 *    absent likewise;
 *  - any other regular file the build opens for reading is the driver's own
 *    (its installation: /usr, /lib, /opt, /etc; its cache and source
 *    directory; /proc, /sys, /dev) or a violation: the build read a file the
 *    key does not name. It is opened as usual (the build behaves as plain),
 *    and sandbox_end() says so.
 *
 * sandbox_end() returns 0 only when the file entry points really were
 * consulted (sandbox_begin() checks that the process's `open` is
 * interpose/files.c's: not so when clshim is loaded as a layer) and no
 * violation happened. A binary of such a build is exact by construction.
 * Threads: a sandbox belongs to the thread that began it (PoCL compiles on
 * the calling thread: checked, every header opened there once); a file of
 * an active sandbox's snapshot opened by another thread meanwhile is a
 * violation of that sandbox, so a driver compiling on threads of its own
 * never passes for exact.
 */
#ifndef CLSHIM_SANDBOX_H
#define CLSHIM_SANDBOX_H

#include <stddef.h>
#include <sys/stat.h>
#include <sys/types.h>

struct key_snapshot;
struct sandbox;

/* Starts serving `snap` (the key's, not copied: it must outlive the
 * sandbox) for the key `key` on this thread. `driver_dir` (may be NULL) is
 * the driver's source directory here (cache/quirks.h). NULL when out of
 * memory (then nothing is served and the build is not exact).
 *
 * Record mode (key NULL, for a key finished after the build: the
 * preprocessor beside a compile, cache/preproc.h): each file of the user's
 * the build opens or stats is read once into a memory file, which the
 * build is served, and its hash kept; sandbox_verdict() then judges them
 * against the key: exact when every file read is named with that content. */
struct sandbox *sandbox_begin(const struct key_snapshot *snap, const void *key, size_t key_len,
                              const char *driver_dir);
/* Whether another key names the same files with the same content (a
 * second device of the same build): its binary is then exact too. */
int sandbox_covers(const struct sandbox *sb, const void *key, size_t key_len);
/* No longer active on this thread (idempotent); the records stay. */
void sandbox_stop(struct sandbox *sb);
/* 0 when the build read exactly the bytes `key` names (NULL: the key it
 * began with), else -1 with the reason. sb NULL: -1. */
int sandbox_verdict(const struct sandbox *sb, const void *key, size_t key_len, char *why, size_t why_len);
void sandbox_free(struct sandbox *sb);
/* Whether the build's file reads reach this sandbox (the process's `open`
 * is interpose/files.c's): only then is its verdict about the build. */
int sandbox_sees(const struct sandbox *sb);
/* stop, verdict on its own key, free. */
int sandbox_end(struct sandbox *sb, char *why, size_t why_len);

/* ---- for interpose/files.c ----
 * Each returns 1 when it answered (the result in *ret, errno set as the
 * call would), 0 when the real call must run. sandbox_note_open() is told
 * of every real open made while a sandbox is active anywhere. */
extern int sandbox_active_count; /* read relaxed: 0 on every path but a build's */
int sandbox_open(int dirfd, const char *path, int flags, int *ret);
int sandbox_stat(int dirfd, const char *path, struct stat *st, int *ret);
int sandbox_access(const char *path, int mode, int *ret);
void sandbox_note_open(int dirfd, const char *path, int flags, int fd);
/* Set by interpose/files.c's constructor: the address of its `open`, which
 * sandbox_begin() compares with what the dynamic linker resolves. */
extern void *sandbox_interposer;
/* Set by interpose/bind.c where clshim may be loaded by dlopen: binds the
 * file calls of every object loaded since its last call to files.c's and
 * returns how many call sites it has bound in this process so far (it only
 * grows), or -1 when some could not be. sandbox_begin() calls it when the
 * dynamic linker's `open` is not files.c's; sandbox_stop() again, and a
 * count that grew means an object loaded during the build read unseen. */
extern long (*sandbox_binder)(void);

#endif
