/* snapshot.c — the bytes a key names, as read (see snapshot.h). */
#include "cache/snapshot.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/key.h"
#include "common/check.h"

struct key_snapshot *snapshot_new(void)
{
    struct key_snapshot *s = calloc(1, sizeof *s);
    if (s && !(s->cwd = getcwd(NULL, 0))) {
        free(s);
        return NULL;
    }
    return s;
}

void snapshot_free(struct key_snapshot *s)
{
    if (!s) return;
    for (size_t i = 0; i < s->n; i++) {
        free(s->files[i].path);
        free(s->files[i].bytes);
    }
    free(s->files);
    free(s->cwd);
    free(s);
}

int snapshot_norm(const char *cwd, const char *path, char *out, size_t out_len)
{
    char joined[8192];
    int n = path[0] == '/' ? snprintf(joined, sizeof joined, "%s", path)
                           : snprintf(joined, sizeof joined, "%s/%s", cwd ? cwd : "", path);
    if (n < 0 || (size_t)n >= sizeof joined || (size_t)n >= out_len) return -1;
    size_t o = 0;
    for (const char *p = joined; *p;) {
        if (p[0] == '/' && (p[1] == '/' || !p[1]) && o) { /* "//", or a trailing "/" */
            p++;
            continue;
        }
        if (p[0] == '/' && p[1] == '.' && (p[2] == '/' || !p[2])) { /* "/./" or a trailing "/." */
            p += 2;
            continue;
        }
        out[o++] = *p++;
    }
    if (o == 0) out[o++] = '/';
    out[o] = 0;
    return 0;
}

const struct snap_file *snapshot_find(const struct key_snapshot *s, const char *clean_path, int driver_dir)
{
    for (size_t i = 0; s && i < s->n; i++)
        if (s->files[i].driver_dir == driver_dir && !strcmp(s->files[i].path, clean_path)) return &s->files[i];
    return NULL;
}

/* Reads an open regular file whole; its identity from the same descriptor. */
static unsigned char *read_fd(int fd, size_t max, size_t *len, struct stat *st)
{
    if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode) || (uint64_t)st->st_size > max) return NULL;
    size_t cap = (size_t)st->st_size + 1, got = 0;
    unsigned char *buf = malloc(cap);
    for (;;) {
        if (!buf) return NULL;
        if (got + 1 >= cap) { /* grown since fstat: read on, up to max */
            if (cap > max) break;
            unsigned char *nb = realloc(buf, cap * 2);
            if (!nb) break;
            buf = nb;
            cap *= 2;
        }
        ssize_t r = read(fd, buf + got, cap - 1 - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) break;
        if (r == 0) {
            buf[got] = 0;
            *len = got;
            return buf;
        }
        got += (size_t)r;
    }
    free(buf);
    return NULL;
}

static struct snap_file *add(struct key_snapshot *s, const char *path, int driver_dir, const char *full, size_t max)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        struct snap_file *nf = realloc(s->files, cap * sizeof *nf);
        if (!nf) return NULL;
        s->files = nf;
        s->cap = cap;
    }
    int fd = open(full, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) return NULL;
    struct snap_file f = {0};
    struct stat st;
    f.bytes = read_fd(fd, max, &f.len, &st);
    close(fd);
    if (!f.bytes || !(f.path = strdup(path))) {
        free(f.bytes);
        return NULL;
    }
    f.dev = (uint64_t)st.st_dev;
    f.ino = (uint64_t)st.st_ino;
    f.driver_dir = driver_dir;
    key_hash_hex(key_hash(f.bytes, f.len), f.hex);
    s->files[s->n] = f;
    return &s->files[s->n++];
}

int snapshot_read(struct key_snapshot *s, const char *path, size_t max, const unsigned char **bytes, size_t *len,
                  char hex[33])
{
    char clean[8192];
    if (snapshot_norm(s->cwd, path, clean, sizeof clean) != 0) return -1;
    const struct snap_file *f = snapshot_find(s, clean, 0);
    if (!f) f = add(s, clean, 0, clean, max);
    if (!f) return -1;
    *bytes = f->bytes;
    *len = f->len;
    memcpy(hex, f->hex, 33);
    return 0;
}

int snapshot_read_driver_dir(struct key_snapshot *s, const char *name, const char *full, size_t max, char hex[33])
{
    const struct snap_file *f = snapshot_find(s, name, 1);
    if (!f) f = add(s, name, 1, full, max);
    if (!f) return -1;
    memcpy(hex, f->hex, 33);
    return 0;
}

void snapshot_add_aliases(const struct key_snapshot *s, struct key_buf *k)
{
    for (size_t i = 0; s && i < s->n; i++) {
        const struct snap_file *f = &s->files[i];
        for (size_t j = 0; j < i; j++) {
            const struct snap_file *g = &s->files[j];
            if (g->dev != f->dev || g->ino != f->ino || g->driver_dir || f->driver_dir) continue;
            char field[8300];
            snprintf(field, sizeof field, "header-alias %s", f->path);
            key_add_text(k, field, g->path);
            break;
        }
    }
}

int snapshot_matches_key(const struct key_snapshot *s, const void *key, size_t key_len, char *why, size_t why_len)
{
    struct key_inputs *in;
    if (key_inputs_parse(key, key_len, &in) != 0) {
        snprintf(why, why_len, "the key cannot be read");
        return -1;
    }
    size_t named = 0;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < key_inputs_count(in); i++) {
        const char *path, *hex;
        int ddir;
        key_inputs_get(in, i, &path, &hex, &ddir);
        if (!hex[0]) continue; /* absent: the sandbox answers ENOENT */
        char clean[8192];
        const struct snap_file *f = NULL;
        if (ddir) f = snapshot_find(s, path, 1);
        else if (snapshot_norm(s->cwd, path, clean, sizeof clean) == 0) f = snapshot_find(s, clean, 0);
        if (!f) {
            snprintf(why, why_len, "%.3000s is named by the key but not in the snapshot", path);
            rc = -1;
        } else if (strcmp(f->hex, hex) != 0) {
            snprintf(why, why_len, "%.3000s in the snapshot is not the content the key names", path);
            rc = -1;
        }
        named++;
    }
    key_inputs_free(in);
    if (rc == 0 && named < (s ? s->n : 0)) {
        /* Every file read for the key is keyed; more files than fields means
         * a path keyed under two spellings, or one read and not keyed. */
        snprintf(why, why_len, "the snapshot holds %zu files the key does not name", s->n - named);
        rc = -1;
    }
    return rc;
}

/* ---- encoding: u32 n, cwd, then per file u32 flags, path, u64 dev, ino,
 * bytes; strings and bytes as u64 length + data. ---- */

static void put_u64(struct key_buf *out, uint64_t v) { key_append(out, &v, sizeof v); }
static void put_bytes(struct key_buf *out, const void *p, size_t n)
{
    put_u64(out, n);
    key_append(out, p, n);
}

void snapshot_encode(const struct key_snapshot *s, struct key_buf *out)
{
    put_u64(out, s ? s->n : 0);
    put_bytes(out, s && s->cwd ? s->cwd : "", s && s->cwd ? strlen(s->cwd) : 0);
    for (size_t i = 0; s && i < s->n; i++) {
        const struct snap_file *f = &s->files[i];
        put_u64(out, (uint64_t)f->driver_dir);
        put_bytes(out, f->path, strlen(f->path));
        put_u64(out, f->dev);
        put_u64(out, f->ino);
        put_bytes(out, f->bytes, f->len);
    }
}

struct reader {
    const unsigned char *p, *end;
};
static int get_u64(struct reader *r, uint64_t *v)
{
    if ((size_t)(r->end - r->p) < sizeof *v) return -1;
    memcpy(v, r->p, sizeof *v);
    r->p += sizeof *v;
    return 0;
}
/* A copy with a NUL after it. */
static unsigned char *get_bytes(struct reader *r, size_t *len)
{
    uint64_t n;
    if (get_u64(r, &n) != 0 || n > (uint64_t)(r->end - r->p)) return NULL;
    unsigned char *b = malloc((size_t)n + 1);
    if (!b) return NULL;
    memcpy(b, r->p, (size_t)n);
    b[n] = 0;
    r->p += n;
    *len = (size_t)n;
    return b;
}

struct key_snapshot *snapshot_decode(const void *buf, size_t len)
{
    struct reader r = {buf, (const unsigned char *)buf + len};
    uint64_t n;
    size_t cwd_len;
    struct key_snapshot *s = calloc(1, sizeof *s);
    if (!s || get_u64(&r, &n) != 0 || n > len || !(s->cwd = (char *)get_bytes(&r, &cwd_len))) goto bad;
    if (n && !(s->files = calloc((size_t)n, sizeof *s->files))) goto bad;
    s->cap = (size_t)n;
    for (; s->n < n; s->n++) {
        struct snap_file *f = &s->files[s->n];
        uint64_t flags;
        size_t plen;
        if (get_u64(&r, &flags) != 0 || flags > 1 || !(f->path = (char *)get_bytes(&r, &plen)) ||
            strlen(f->path) != plen || get_u64(&r, &f->dev) != 0 || get_u64(&r, &f->ino) != 0 ||
            !(f->bytes = get_bytes(&r, &f->len))) {
            s->n++; /* freed with the rest */
            goto bad;
        }
        f->driver_dir = (int)flags;
        if (!f->driver_dir && f->path[0] != '/') {
            s->n++;
            goto bad;
        }
        key_hash_hex(key_hash(f->bytes, f->len), f->hex);
    }
    if (r.p != r.end) goto bad;
    return s;
bad:
    snapshot_free(s);
    return NULL;
}
