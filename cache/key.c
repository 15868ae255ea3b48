/* key.c — key material and its XXH3-128 hash. */
#include "cache/key.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

const char *key_kind_name(enum key_kind kind)
{
    switch (kind) {
    case KEY_SOURCE: return "source";
    case KEY_IL: return "il";
    case KEY_BINARY: return "binary";
    case KEY_LINK: return "link";
    case KEY_FUSION: return "fusion";
    case KEY_COMPILE: return "compile";
    }
    return "?";
}

static void append(struct key_buf *k, const void *data, size_t len)
{
    if (k->oom) return;
    if (k->len + len > k->cap) {
        size_t cap = k->cap ? k->cap : 512;
        while (cap < k->len + len) cap *= 2;
        char *nd = realloc(k->data, cap);
        if (!nd) { k->oom = 1; return; }
        k->data = nd;
        k->cap = cap;
    }
    memcpy(k->data + k->len, data, len);
    k->len += len;
}

void key_add_text(struct key_buf *k, const char *name, const char *value)
{
    append(k, name, strlen(name));
    append(k, "=", 1);
    /* Newlines in a value would blur field boundaries: escape them. */
    for (const char *p = value ? value : ""; *p; p++) {
        if (*p == '\n') append(k, "\\n", 2);
        else if (*p == '\\') append(k, "\\\\", 2);
        else append(k, p, 1);
    }
    append(k, "\n", 1);
}

void key_add_blob(struct key_buf *k, const char *name, const void *data, size_t len)
{
    char head[128];
    int n = snprintf(head, sizeof head, "%s=%zu bytes\n", name, len);
    append(k, head, (size_t)n);
    append(k, data, len);
    append(k, "\n", 1);
}

void key_add_u64(struct key_buf *k, const char *name, uint64_t value)
{
    char text[32];
    snprintf(text, sizeof text, "%llu", (unsigned long long)value);
    key_add_text(k, name, text);
}

void key_begin(struct key_buf *k, enum key_kind kind, const char *options)
{
    memset(k, 0, sizeof *k);
    char head[64];
    int n = snprintf(head, sizeof head, "clshim-key %d\n", KEY_FORMAT_VERSION);
    append(k, head, (size_t)n);
    key_add_text(k, "kind", key_kind_name(kind));
    char *norm = key_normalize_options(options);
    if (!norm) { k->oom = 1; return; }
    key_add_text(k, "options", norm);
    free(norm);
}

void key_free(struct key_buf *k)
{
    free(k->data);
    memset(k, 0, sizeof *k);
}

struct cache_hash key_hash(const void *material, size_t len)
{
    XXH128_hash_t h = XXH3_128bits(material, len);
    return (struct cache_hash){h.low64, h.high64};
}

void key_hash_hex(struct cache_hash h, char out[33])
{
    snprintf(out, 33, "%016llx%016llx", (unsigned long long)h.hi, (unsigned long long)h.lo);
}

char *key_normalize_options(const char *options)
{
    const char *p = options ? options : "";
    char *out = malloc(strlen(p) + 1), *o = out;
    if (!out) return NULL;
    int space = 0;
    while (isspace((unsigned char)*p)) p++;
    for (; *p; p++) {
        if (isspace((unsigned char)*p)) { space = 1; continue; }
        if (space) *o++ = ' ';
        space = 0;
        *o++ = *p;
    }
    *o = 0;
    return out;
}

/* ---- header discovery ------------------------------------------------- */

#define MAX_INCLUDE_DIRS 64
#define MAX_HEADERS 256
#define MAX_DEPTH 32
#define MAX_HEADER_BYTES (64u << 20)

struct include_ctx {
    const char *dirs[MAX_INCLUDE_DIRS];
    size_t ndirs;
    char *seen[MAX_HEADERS];
    size_t nseen;
    struct key_buf *k;
    char *why;
    size_t why_len;
};

/* Splits options into -I directories; flags options that pull in files. */
static int parse_include_dirs(struct include_ctx *c, char *opts)
{
    char *save = NULL;
    for (char *tok = strtok_r(opts, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
        if (!strcmp(tok, "-include") || !strcmp(tok, "-imacros")) {
            snprintf(c->why, c->why_len, "option %s names a file", tok);
            return -1;
        }
        if (strncmp(tok, "-I", 2) != 0) continue;
        const char *dir = tok[2] ? tok + 2 : strtok_r(NULL, " ", &save);
        if (!dir) break;
        if (c->ndirs < MAX_INCLUDE_DIRS) c->dirs[c->ndirs++] = dir;
    }
    return 0;
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    struct stat st;
    char *buf = NULL;
    if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size <= MAX_HEADER_BYTES) {
        buf = malloc((size_t)st.st_size + 1);
        if (buf && fread(buf, 1, (size_t)st.st_size, f) == (size_t)st.st_size) {
            buf[st.st_size] = 0;
            *len = (size_t)st.st_size;
        } else {
            free(buf);
            buf = NULL;
        }
    }
    fclose(f);
    return buf;
}

static int scan_source(struct include_ctx *c, const char *src, size_t len, const char *from_dir, int depth);

static int add_header(struct include_ctx *c, const char *path, int depth)
{
    for (size_t i = 0; i < c->nseen; i++)
        if (!strcmp(c->seen[i], path)) return 0;
    if (c->nseen == MAX_HEADERS) {
        snprintf(c->why, c->why_len, "more than %d headers", MAX_HEADERS);
        return -1;
    }
    size_t len;
    char *text = read_file(path, &len);
    if (!text) {
        snprintf(c->why, c->why_len, "cannot read header %s", path);
        return -1;
    }
    c->seen[c->nseen++] = strdup(path);
    XXH128_hash_t h = XXH3_128bits(text, len);
    char field[64];
    snprintf(field, sizeof field, "%016llx%016llx", (unsigned long long)h.high64, (unsigned long long)h.low64);
    char name[4200];
    snprintf(name, sizeof name, "header %s", path);
    key_add_text(c->k, name, field);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
    int rc = scan_source(c, text, len, dir, depth + 1);
    free(text);
    return rc;
}

static int resolve_include(struct include_ctx *c, const char *name, int quoted, const char *from_dir, int depth)
{
    char path[4096];
    struct stat st;
    if (name[0] == '/') return add_header(c, name, depth);
    if (quoted && from_dir) {
        snprintf(path, sizeof path, "%s/%s", from_dir, name);
        if (stat(path, &st) == 0) return add_header(c, path, depth);
    }
    for (size_t i = 0; i < c->ndirs; i++) {
        snprintf(path, sizeof path, "%s/%s", c->dirs[i], name);
        if (stat(path, &st) == 0) return add_header(c, path, depth);
    }
    if (stat(name, &st) == 0) return add_header(c, name, depth);
    /* Not found anywhere: the #include must sit in an inactive #if branch
     * (else the compile fails and nothing is stored). Its absence is part of
     * the key, so the key changes if the file appears later. */
    char field[1100];
    snprintf(field, sizeof field, "header-absent %c%s%c", quoted ? '"' : '<', name, quoted ? '"' : '>');
    key_add_text(c->k, field, "");
    return 0;
}

static int scan_source(struct include_ctx *c, const char *src, size_t len, const char *from_dir, int depth)
{
    if (depth > MAX_DEPTH) {
        snprintf(c->why, c->why_len, "includes nested deeper than %d", MAX_DEPTH);
        return -1;
    }
    const char *end = src + len;
    for (const char *line = src; line < end;) {
        const char *eol = memchr(line, '\n', (size_t)(end - line));
        if (!eol) eol = end;
        const char *p = line;
        while (p < eol && (*p == ' ' || *p == '\t')) p++;
        if (p < eol && *p == '#') {
            p++;
            while (p < eol && (*p == ' ' || *p == '\t')) p++;
            if ((size_t)(eol - p) >= 7 && !strncmp(p, "include", 7)) {
                p += 7;
                while (p < eol && (*p == ' ' || *p == '\t')) p++;
                char close = p < eol && *p == '"' ? '"' : p < eol && *p == '<' ? '>' : 0;
                const char *q = close ? memchr(p + 1, close, (size_t)(eol - p - 1)) : NULL;
                if (!q) {
                    snprintf(c->why, c->why_len, "a computed #include");
                    return -1;
                }
                char name[1024];
                size_t n = (size_t)(q - p - 1);
                if (n == 0 || n >= sizeof name) {
                    snprintf(c->why, c->why_len, "a malformed #include");
                    return -1;
                }
                memcpy(name, p + 1, n);
                name[n] = 0;
                if (resolve_include(c, name, close == '"', from_dir, depth) != 0) return -1;
            }
        }
        line = eol + 1;
    }
    return 0;
}

int key_add_headers(struct key_buf *k, const char *source, size_t len, const char *options, char *why,
                    size_t why_len)
{
    char none[8];
    if (!why) { why = none; why_len = sizeof none; }
    why[0] = 0;
    /* Most programs include nothing: skip the scan unless "include" occurs. */
    if (!memmem(source, len, "include", 7) && !(options && strstr(options, "-include"))) return 0;
    struct include_ctx c = {.k = k, .why = why, .why_len = why_len};
    char *opts = key_normalize_options(options);
    if (!opts) { snprintf(why, why_len, "out of memory"); return -1; }
    int rc = parse_include_dirs(&c, opts);
    if (rc == 0) rc = scan_source(&c, source, len, NULL, 0);
    for (size_t i = 0; i < c.nseen; i++) free(c.seen[i]);
    free(opts);
    return rc;
}
