/* snapshot.h — the bytes a key names, as key derivation read them.
 *
 * A key names files by path and content hash ("header <path>=<hex>",
 * cache/key.h). The cache's promise is that a binary stored under a key was
 * built by a compiler that read exactly those bytes. Reading a file twice
 * (once to hash it, once to compile it) cannot keep that promise: the file
 * may change in between and back, which no check before and after can see.
 * So key derivation reads each file once, into a snapshot, and hashes the
 * bytes it keeps; a build run under cache/sandbox.h is then served these
 * bytes (or has every byte it reads compared with them), never the file
 * system's at another moment.
 *
 * Invariants (checked by snapshot_matches_key() and in snapshot_read()):
 *  1. One version per path: a path read again returns the first read's
 *     bytes, so the key and the scanner see the same text.
 *  2. Paths are absolute and lexically clean (snapshot_norm): "//" and "/./"
 *     folded, ".." kept (with symbolic links, "a/link/.." is not "a").
 *  3. A file's identity (device, inode) is the one of the descriptor its
 *     bytes came from; files of one identity form an alias class, which the
 *     key names (snapshot_add_aliases: `#pragma once` decides by identity).
 *
 * Not thread-safe: one snapshot belongs to one key derivation, then is only
 * read. Encoded, it travels to the capture helper (program/capture_proc.h).
 */
#ifndef CLSHIM_SNAPSHOT_H
#define CLSHIM_SNAPSHOT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct key_buf;

struct snap_file {
    char *path;           /* absolute, clean (invariant 2) */
    unsigned char *bytes; /* the content read; NUL-terminated beyond len */
    size_t len;
    uint64_t dev, ino;    /* the identity of what was read (invariant 3) */
    char hex[33];         /* XXH3-128 of bytes */
    int driver_dir;       /* a name in the driver's source directory: path is "<name>" */
};

struct key_snapshot {
    struct snap_file *files;
    size_t n, cap;
    char *cwd;            /* relative paths are this directory's */
};

/* An empty snapshot for paths relative to the current directory; NULL when
 * out of memory. */
struct key_snapshot *snapshot_new(void);
void snapshot_free(struct key_snapshot *s);

/* The bytes of `path` (regular files of at most max bytes): read now, or the
 * bytes of the first read of that path. 0 with *bytes (owned by s) and the
 * hash in hex; -1 when it cannot be read. driver_dir: `path` is a name in
 * the driver's directory (cache/key.h's driver_dir fields), `full` its
 * place to read. */
int snapshot_read(struct key_snapshot *s, const char *path, size_t max, const unsigned char **bytes, size_t *len,
                  char hex[33]);
int snapshot_read_driver_dir(struct key_snapshot *s, const char *name, const char *full, size_t max,
                             char hex[33]);

/* Invariant 2: `path` made absolute against cwd and folded into out.
 * -1 when it does not fit. */
int snapshot_norm(const char *cwd, const char *path, char *out, size_t out_len);

/* The file of a clean absolute path (or, driver_dir, of a name); NULL. */
const struct snap_file *snapshot_find(const struct key_snapshot *s, const char *clean_path, int driver_dir);

/* "header-alias <path>=<first path of its identity>" for every file that
 * shares its identity with an earlier one (invariant 3), in read order. */
void snapshot_add_aliases(const struct key_snapshot *s, struct key_buf *k);

/* Whether the snapshot is exactly the files the key names: every "header"
 * and "driver-dir-header" field has a file here with that content, and
 * every file here is named. 0, or -1 with the first difference in why. */
int snapshot_matches_key(const struct key_snapshot *s, const void *key, size_t key_len, char *why, size_t why_len);

/* Into a byte buffer (appended to out), and back: NULL when buf is not a
 * well-formed snapshot. The decoded files' identities are the sender's. */
void snapshot_encode(const struct key_snapshot *s, struct key_buf *out);
struct key_snapshot *snapshot_decode(const void *buf, size_t len);

#endif
