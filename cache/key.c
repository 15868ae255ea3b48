/* key.c — key material and its XXH3-128 hash. */
#include "cache/key.h"

#include "cache/snapshot.h"
#include "common/check.h"
#include "common/error.h"

#include <ctype.h>
#include <glob.h>
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
    case KEY_MANIFEST: return "manifest";
    }
    return "?";
}

void key_append(struct key_buf *k, const void *data, size_t len)
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
    key_append(k, name, strlen(name));
    key_append(k, "=", 1);
    /* Newlines in a value would blur field boundaries: escaped. The runs
     * between them are appended whole (a device's identity is kilobytes:
     * 15 us byte by byte on an H100's host, on the path that decides a
     * fused program's load). */
    for (const char *p = value ? value : ""; *p;) {
        size_t run = strcspn(p, "\n\\");
        key_append(k, p, run);
        p += run;
        if (*p) key_append(k, *p++ == '\n' ? "\\n" : "\\\\", 2);
    }
    key_append(k, "\n", 1);
}

char *key_field_text(const struct key_field *f)
{
    const char *v = f->value;
    char *out = malloc(f->value_len + 1), *o = out;
    if (!out) return NULL;
    for (size_t i = 0; i < f->value_len; i++) {
        if (v[i] == '\\' && i + 1 < f->value_len && (v[i + 1] == 'n' || v[i + 1] == '\\'))
            *o++ = v[++i] == 'n' ? '\n' : '\\';
        else *o++ = v[i];
    }
    *o = 0;
    return out;
}

void key_add_blob(struct key_buf *k, const char *name, const void *data, size_t len)
{
    char head[128];
    int n = snprintf(head, sizeof head, "%s=%zu bytes\n", name, len);
    key_append(k, head, (size_t)n);
    key_append(k, data, len);
    key_append(k, "\n", 1);
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
    key_append(k, head, (size_t)n);
    key_add_text(k, "kind", key_kind_name(kind));
    char *norm = key_normalize_options(options);
    if (!norm) { k->oom = 1; return; }
    key_add_text(k, "options", norm);
    free(norm);
}

void key_free(struct key_buf *k)
{
    snapshot_free(k->snap);
    k->snap = NULL;
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
    int space = 0, quoted = 0;
    while (isspace((unsigned char)*p)) p++;
    for (; *p; p++) {
        /* Inside double quotes white space is part of a value (-D "A=1  2"):
         * kept byte for byte, so programs that differ never share a key. */
        if (!quoted && isspace((unsigned char)*p)) { space = 1; continue; }
        if (space) *o++ = ' ';
        space = 0;
        if (*p == '\\' && p[1]) {
            *o++ = *p++;
        } else if (*p == '"') {
            quoted = !quoted;
        }
        *o++ = *p;
    }
    *o = 0;
    return out;
}

int key_split_options(const char *options, char ***argv_out, int *argc_out)
{
    *argv_out = NULL;
    *argc_out = 0;
    size_t n = options ? strlen(options) : 0;
    char **argv = calloc(n / 2 + 2, sizeof *argv);
    char *tok = malloc(n + 1);
    if (!argv || !tok) {
        free(argv);
        free(tok);
        return CLSHIM_ENOMEM;
    }
    int argc = 0, rc = 0;
    const char *p = options;
    while (p && *p && rc == 0) {
        while (isspace((unsigned char)*p)) p++;
        if (!*p) break;
        size_t len = 0;
        int quoted = 0;
        while (*p && (quoted || !isspace((unsigned char)*p))) {
            if (*p == '"') {
                quoted = !quoted;
                p++;
            } else if (*p == '\\' && p[1]) {
                tok[len++] = p[1];
                p += 2;
            } else {
                tok[len++] = *p++;
            }
        }
        tok[len] = 0;
        if (quoted) rc = CLSHIM_EINVAL;
        else if (!(argv[argc] = strdup(tok))) rc = CLSHIM_ENOMEM;
        else argc++;
    }
    free(tok);
    if (rc) {
        key_free_options(argv, argc);
        return rc;
    }
    *argv_out = argv;
    *argc_out = argc;
    return 0;
}

void key_free_options(char **argv, int argc)
{
    for (int i = 0; argv && i < argc; i++) free(argv[i]);
    free(argv);
}

/* ---- header discovery ------------------------------------------------- */

#define MAX_INCLUDE_DIRS 64
#define MAX_HEADERS 256
#define MAX_DEPTH 32
#define MAX_HEADER_BYTES (64u << 20)

/* What a scan_source() pass looks for. */
enum scan_mode {
    SCAN_FULL,       /* the scanner: includes followed, probes, time macros, the driver directory */
    SCAN_PROBES,     /* key_scan_probes(): probes and time macros; includes are listed by the preprocessor */
    SCAN_DRIVER_DIR, /* key_scan_driver_dir(): the main source's quoted names in the driver directory */
};

struct include_ctx {
    enum scan_mode mode;
    const char *driver_dir;
    void (*note)(void *arg, const char *path, const char *hex);
    void *note_arg;
    const char *dirs[MAX_INCLUDE_DIRS];
    size_t ndirs;
    char *seen[MAX_HEADERS];
    size_t nseen;
    const struct key_embedded *embedded;
    size_t nembedded;
    struct key_buf *k;
    char *why;
    size_t why_len;
};

static int hand_off(struct include_ctx *c, const char *fmt, const char *detail)
{
    snprintf(c->why, c->why_len, fmt, detail);
    return -1;
}

/* Takes the options' -I directories; any other option that changes where or
 * what the preprocessor reads (-include, -imacros, -isystem, -iquote,
 * -nostdinc, --...) hands the program to the preprocessor. For probes
 * (SCAN_PROBES), the -iquote, -isystem and -idirafter directories count
 * too and other options are the preprocessor's. */
static int parse_include_dirs(struct include_ctx *c, char **argv, int argc)
{
    static const char *const probe_dirs[] = {"-I", "-iquote", "-isystem", "-idirafter"};
    for (int i = 0; i < argc; i++) {
        const char *tok = argv[i];
        size_t opt = 0;
        if (c->mode == SCAN_PROBES) {
            for (size_t d = 0; d < sizeof probe_dirs / sizeof *probe_dirs && !opt; d++)
                if (!strncmp(tok, probe_dirs[d], strlen(probe_dirs[d]))) opt = strlen(probe_dirs[d]);
            if (!opt) continue;
        } else {
            if (!strncmp(tok, "-i", 2) || !strncmp(tok, "--", 2) || !strncmp(tok, "-nostd", 6))
                return hand_off(c, "option %s changes what the preprocessor reads", tok);
            if (strncmp(tok, "-I", 2) != 0) continue;
            opt = 2;
        }
        const char *dir = tok[opt] ? tok + opt : (i + 1 < argc ? argv[++i] : NULL);
        if (!dir) return hand_off(c, "option %s has no directory", tok);
        if (c->ndirs == MAX_INCLUDE_DIRS) return hand_off(c, "more than %s -I directories", "64");
        c->dirs[c->ndirs++] = dir;
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

int key_read_input(struct key_buf *k, const char *path, const char **text, size_t *len, char hex[33],
                   char **owned)
{
    *owned = NULL;
    if (k && k->snap) {
        const unsigned char *bytes;
        if (snapshot_read(k->snap, path, MAX_HEADER_BYTES, &bytes, len, hex) != 0) return -1;
        *text = (const char *)bytes;
        return 0;
    }
    if (!(*owned = read_file(path, len))) return -1;
    *text = *owned;
    key_hash_hex(key_hash(*owned, *len), hex);
    return 0;
}

int key_hash_input(struct key_buf *k, const char *path, char hex[33])
{
    const char *text;
    size_t len;
    char *owned;
    if (key_read_input(k, path, &text, &len, hex, &owned) != 0) return -1;
    free(owned);
    return 0;
}

size_t key_snapshot_files(const struct key_buf *k) { return k->snap ? k->snap->n : 0; }

void key_rewind(struct key_buf *k, size_t len, size_t nfiles)
{
    if (CLSHIM_ASSERT(len <= k->len)) k->len = len;
    while (k->snap && k->snap->n > nfiles) {
        struct snap_file *f = &k->snap->files[--k->snap->n];
        free(f->path);
        free(f->bytes);
    }
}

int key_take_snapshot(struct key_buf *k, struct key_buf *from)
{
    struct key_snapshot *src = from->snap;
    if (!src || !k->snap) return 0;
    int rc = 0;
    for (size_t i = 0; i < src->n; i++) {
        struct snap_file *f = &src->files[i];
        const struct snap_file *have = snapshot_find(k->snap, f->path, f->driver_dir);
        if (have) {
            if (strcmp(have->hex, f->hex) != 0) rc = -1;
            continue;
        }
        if (k->snap->n == k->snap->cap) {
            size_t cap = k->snap->cap ? k->snap->cap * 2 : 16;
            struct snap_file *nf = realloc(k->snap->files, cap * sizeof *nf);
            if (!nf) {
                k->oom = 1;
                return -1;
            }
            k->snap->files = nf;
            k->snap->cap = cap;
        }
        k->snap->files[k->snap->n++] = *f;
        f->path = NULL;
        f->bytes = NULL;
    }
    return rc;
}

static int scan_source(struct include_ctx *c, const char *src, size_t len, const char *from_dir, int depth);

/* The driver directory's field for a quoted name of the main source: by
 * name, never the directory's path, so keys stay the same on machines
 * whose drivers keep that directory elsewhere. */
static void driver_dir_place(struct include_ctx *c, const char *name)
{
    if (!c->driver_dir || name[0] == '/') return;
    char path[4200], field[1200], hex[33];
    snprintf(path, sizeof path, "%s/%s", c->driver_dir, name);
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(field, sizeof field, "driver-dir-absent %s", name);
        key_add_text(c->k, field, "");
        return;
    }
    snprintf(field, sizeof field, "driver-dir-header %s", name);
    int read = c->k->snap ? snapshot_read_driver_dir(c->k->snap, name, path, MAX_HEADER_BYTES, hex)
                          : key_hash_input(NULL, path, hex);
    key_add_text(c->k, field, read == 0 ? hex : "unreadable");
}

/* One place a probed name could be found: its hash, or its absence. */
static int probe_place(struct include_ctx *c, const char *path)
{
    char field[4200], hex[33];
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(field, sizeof field, "header-absent %s", path);
        key_add_text(c->k, field, "");
        if (c->note) c->note(c->note_arg, path, NULL);
        return 0;
    }
    if (key_hash_input(c->k, path, hex) != 0) return hand_off(c, "cannot read %s, a name __has_include probes", path);
    snprintf(field, sizeof field, "header %s", path);
    key_add_text(c->k, field, hex);
    if (c->note) c->note(c->note_arg, path, hex);
    return 0;
}

static int add_header(struct include_ctx *c, const char *path, int depth)
{
    for (size_t i = 0; i < c->nseen; i++)
        if (!strcmp(c->seen[i], path)) return 0;
    if (c->nseen == MAX_HEADERS) return hand_off(c, "more than %s headers", "256");
    size_t len;
    const char *text;
    char *owned, field[33];
    if (key_read_input(c->k, path, &text, &len, field, &owned) != 0) return hand_off(c, "cannot read header %s", path);
    c->seen[c->nseen++] = strdup(path);
    char name[4200];
    snprintf(name, sizeof name, "header %s", path);
    key_add_text(c->k, name, field);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else snprintf(dir, sizeof dir, ".");
    int rc = scan_source(c, text, len, dir, depth + 1);
    free(owned);
    return rc;
}

static const char *const system_dirs[] = {"/usr/lib/llvm-*/lib/clang/*/include", "/usr/local/include",
                                          "/usr/include/*-linux-gnu*", "/usr/include"};

/* A name in no -I directory, nor the including file's, nor the working
 * directory: the compiler would search its system directories next. When
 * the name exists in one (clang's resource directories, /usr/local/include,
 * /usr/include and its multiarch directories), only the preprocessor can
 * say what is opened. Otherwise the include sits in an inactive #if branch
 * (else the compile fails and nothing is stored): its absence is recorded,
 * and a scan after the file appears anywhere takes another path. */
static int not_found(struct include_ctx *c, const char *name)
{
    for (size_t i = 0; i < sizeof system_dirs / sizeof *system_dirs; i++) {
        char pattern[1200];
        snprintf(pattern, sizeof pattern, "%s/%s", system_dirs[i], name);
        glob_t g;
        int rc = glob(pattern, GLOB_NOSORT | GLOB_NOESCAPE, NULL, &g);
        globfree(&g);
        if (rc != GLOB_NOMATCH)
            return hand_off(c, "#include of %s, a name the compiler's own directories may have", name);
    }
    char field[1100];
    snprintf(field, sizeof field, "header-absent %s", name);
    key_add_text(c->k, field, "");
    return 0;
}

/* Every place the name could come from, in any search order: the including
 * file's directory (quoted), the -I directories, the working directory (the
 * directory of a program's source for a driver that reads it from memory).
 * Each existing candidate is hashed and followed and each missing one is
 * recorded as absent, so neither the search order nor a file appearing
 * later can make a key stale. A name found nowhere: not_found(). */
static int resolve_include(struct include_ctx *c, const char *name, int quoted, const char *from_dir, int depth)
{
    if (quoted && depth == 0) driver_dir_place(c, name);
    for (size_t i = 0; i < c->nembedded; i++)
        if (!strcmp(c->embedded[i].name, name)) {
            /* An embedded header shadows files of the same name (the
             * driver writes it where its search finds it first); its
             * content is in the key already. Its own includes count. */
            return scan_source(c, c->embedded[i].source, c->embedded[i].len, NULL, depth + 1);
        }
    if (name[0] == '/') return add_header(c, name, depth);
    char path[4096];
    struct stat st;
    int found = 0;
    for (size_t i = 0; i <= c->ndirs + 1; i++) {
        const char *dir = i == 0 ? (quoted ? from_dir : NULL) : i <= c->ndirs ? c->dirs[i - 1] : ".";
        if (!dir) continue;
        if (!strcmp(dir, ".")) snprintf(path, sizeof path, "%s", name);
        else snprintf(path, sizeof path, "%s/%s", dir, name);
        if (stat(path, &st) == 0) {
            found = 1;
            int rc = add_header(c, path, depth);
            if (rc != 0) return rc;
        } else {
            char field[4200];
            snprintf(field, sizeof field, "header-absent %s", path);
            key_add_text(c->k, field, "");
        }
    }
    if (!found) return not_found(c, name);
    return 0;
}

/* ---- the scanner -----------------------------------------------------------
 * Exact or hands off. Works on the source after translation phase 2 (line
 * splices removed, including a backslash followed by blanks, which clang
 * accepts), then lexes it the way the preprocessor does: comments (block
 * and line), string and character literals (a "/ *" inside one opens
 * nothing), and directives introduced by '#' or the digraph "%:" as the
 * first token of a line, comments and NUL bytes (clang ignores them) allowed
 * around it. Every #include and
 * #import counts whatever #if surrounds it (a superset). Handed to the
 * preprocessor: trigraphs, #include_next, __has_include, an include whose
 * operand is not a plain "..." or <...> (macros), a name found nowhere. */

static char *remove_splices(const char *src, size_t len, size_t *out_len)
{
    char *out = malloc(len + 1);
    if (!out) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\\') {
            size_t j = i + 1;
            while (j < len && (src[j] == ' ' || src[j] == '\t' || src[j] == '\f' || src[j] == '\v')) j++;
            if (j < len && src[j] == '\r') j++;
            if (j < len && src[j] == '\n') {
                i = j;
                continue;
            }
        }
        out[o++] = src[i];
    }
    out[o] = 0;
    *out_len = o;
    return out;
}

static int is_blank(char ch) { return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\f' || ch == '\v' || ch == 0; }
static int is_ident(char ch) { return isalnum((unsigned char)ch) || ch == '_' || ch == '$' || (ch & 0x80); }

/* Skips blanks and comments within the line; sets *newline when a block
 * comment spanned lines. */
static const char *skip_blanks(const char *p, const char *end, int *newline)
{
    for (;;) {
        while (p < end && is_blank(*p)) p++;
        if (end - p >= 2 && p[0] == '/' && p[1] == '*') {
            const char *q = p + 2;
            while (q + 1 < end && !(q[0] == '*' && q[1] == '/')) q++;
            const char *stop = q + 1 < end ? q + 2 : end;
            if (newline && memchr(p, '\n', (size_t)(stop - p))) *newline = 1;
            p = stop;
            continue;
        }
        return p;
    }
}

/* A __has_include / __has_include_next operand: every place the name could
 * be found, in any search order (which makes __has_include_next the same
 * superset), present (hashed, not followed: a probe reads nothing) or
 * absent, the compiler's system directories included. */
static int resolve_probe(struct include_ctx *c, const char *name, int quoted, const char *from_dir, int depth)
{
    if (quoted && depth == 0 && c->mode != SCAN_PROBES) driver_dir_place(c, name);
    if (c->mode == SCAN_DRIVER_DIR) return 0;
    for (size_t i = 0; i < c->nembedded; i++)
        if (!strcmp(c->embedded[i].name, name)) return 0; /* found there first; its content is keyed */
    if (name[0] == '/') return probe_place(c, name);
    char path[4096];
    for (size_t i = 0; i <= c->ndirs + 1; i++) {
        const char *dir = i == 0 ? (quoted ? from_dir : NULL) : i <= c->ndirs ? c->dirs[i - 1] : ".";
        if (!dir) continue;
        if (!strcmp(dir, ".")) snprintf(path, sizeof path, "%s", name);
        else snprintf(path, sizeof path, "%s/%s", dir, name);
        if (probe_place(c, path) != 0) return -1;
    }
    for (size_t i = 0; i < sizeof system_dirs / sizeof *system_dirs; i++) {
        char pattern[1200];
        snprintf(pattern, sizeof pattern, "%s/%s", system_dirs[i], name);
        glob_t g;
        int rc = glob(pattern, GLOB_NOESCAPE, NULL, &g);
        for (size_t m = 0; rc == 0 && m < g.gl_pathc; m++)
            if (probe_place(c, g.gl_pathv[m]) != 0) rc = -1;
        globfree(&g);
        if (rc == -1) return -1;
    }
    return 0;
}

/* After the identifier __has_include(_next): "(" operand ")". Not followed
 * by "(" it is no probe (#ifdef __has_include, defined(__has_include)). An
 * operand other than one "..." or <...> literal is KEY_UNCACHEABLE. */
static int scan_probe(struct include_ctx *c, const char **pp, const char *end, const char *from_dir, int depth)
{
    const char *p = skip_blanks(*pp, end, NULL);
    if (p >= end || *p != '(') return 0;
    p = skip_blanks(p + 1, end, NULL);
    char close = p < end && *p == '"' ? '"' : p < end && *p == '<' ? '>' : 0;
    const char *eol = memchr(p, '\n', (size_t)(end - p));
    if (!eol) eol = end;
    const char *q = close && p < eol ? memchr(p + 1, close, (size_t)(eol - p - 1)) : NULL;
    const char *r = q ? skip_blanks(q + 1, end, NULL) : NULL;
    char name[1024];
    size_t n = q ? (size_t)(q - p - 1) : 0;
    if (!r || r >= end || *r != ')' || n == 0 || n >= sizeof name || memchr(p + 1, 0, n)) {
        snprintf(c->why, c->why_len, "a __has_include whose operand is not a plain \"...\" or <...>: %.*s",
                 (int)(eol - p > 200 ? 200 : eol - p), p);
        return KEY_UNCACHEABLE;
    }
    memcpy(name, p + 1, n);
    name[n] = 0;
    *pp = r + 1;
    return resolve_probe(c, name, close == '"', from_dir, depth);
}

static int scan_directive(struct include_ctx *c, const char **pp, const char *end, const char *from_dir,
                          int depth)
{
    const char *p = skip_blanks(*pp, end, NULL);
    const char *id = p;
    while (p < end && is_ident(*p)) p++;
    size_t n = (size_t)(p - id);
    *pp = p;
    int include = (n == 7 && !memcmp(id, "include", 7)) || (n == 6 && !memcmp(id, "import", 6));
    if (c->mode == SCAN_PROBES || (c->mode == SCAN_DRIVER_DIR && depth > 0)) return 0;
    if (n == 12 && !memcmp(id, "include_next", 12) && c->mode == SCAN_FULL)
        return hand_off(c, "an %s", "#include_next");
    if (!include) return 0;
    p = skip_blanks(p, end, NULL);
    char close = p < end && *p == '"' ? '"' : p < end && *p == '<' ? '>' : 0;
    const char *eol = memchr(p, '\n', (size_t)(end - p));
    if (!eol) eol = end;
    const char *q = close && p < eol ? memchr(p + 1, close, (size_t)(eol - p - 1)) : NULL;
    if (!q && c->mode == SCAN_DRIVER_DIR) return 0;
    if (!q) {
        snprintf(c->why, c->why_len, "a computed #%s %.*s", n == 6 ? "import" : "include",
                 (int)(eol - p > 200 ? 200 : eol - p), p);
        return -1;
    }
    char name[1024];
    n = (size_t)(q - p - 1);
    if (n == 0 || n >= sizeof name || memchr(p + 1, 0, n)) return hand_off(c, "a malformed #%s", "include");
    memcpy(name, p + 1, n);
    name[n] = 0;
    *pp = q + 1;
    if (c->mode == SCAN_DRIVER_DIR) {
        if (close == '"') driver_dir_place(c, name);
        return 0;
    }
    return resolve_include(c, name, close == '"', from_dir, depth);
}

static int scan_source(struct include_ctx *c, const char *raw, size_t raw_len, const char *from_dir, int depth)
{
    if (depth > MAX_DEPTH) return hand_off(c, "includes nested deeper than %s", "32");
    if (c->mode == SCAN_FULL && memmem(raw, raw_len, "??", 2)) return hand_off(c, "a possible %s", "trigraph");
    size_t len;
    char *src = remove_splices(raw, raw_len, &len);
    if (!src) return hand_off(c, "%s", "out of memory");
    const char *p = src, *end = src + len;
    int line_start = 1, rc = 0;
    while (rc == 0 && p < end) {
        char ch = *p;
        if (ch == '\n') {
            line_start = 1;
            p++;
        } else if (is_blank(ch) || (ch == '/' && p + 1 < end && p[1] == '*')) {
            p = skip_blanks(p, end, &line_start);
        } else if (ch == '/' && p + 1 < end && p[1] == '/') {
            while (p < end && *p != '\n') p++;
        } else if (line_start && (ch == '#' || (ch == '%' && p + 1 < end && p[1] == ':'))) {
            p += ch == '#' ? 1 : 2;
            line_start = 0;
            rc = scan_directive(c, &p, end, from_dir, depth);
        } else if (ch == '"' || ch == '\'') {
            line_start = 0;
            for (p++; p < end && *p != ch && *p != '\n'; p++)
                if (*p == '\\' && p + 1 < end && p[1] != '\n') p++;
            if (p < end && *p == ch) p++;
        } else if (is_ident(ch)) {
            line_start = 0;
            const char *id = p;
            while (p < end && is_ident(*p)) p++;
            size_t n = (size_t)(p - id);
            if ((n == 13 && !memcmp(id, "__has_include", 13)) || (n == 18 && !memcmp(id, "__has_include_next", 18))) {
                rc = scan_probe(c, &p, end, from_dir, depth);
            } else if (c->mode != SCAN_DRIVER_DIR && ((n == 8 && (!memcmp(id, "__DATE__", 8) || !memcmp(id, "__TIME__", 8))) ||
                                                      (n == 13 && !memcmp(id, "__TIMESTAMP__", 13)))) {
                snprintf(c->why, c->why_len, "%s uses %.*s: its build differs by when it ran",
                         depth == 0 ? "the program source" : "a header it reads", (int)n, id);
                rc = KEY_TIME_MACROS;
            } else if (c->mode != SCAN_DRIVER_DIR && !from_dir && n == 8 && !memcmp(id, "__FILE__", 8)) {
                /* The driver compiles the source (and embedded headers) from
                 * a temporary path of its own: another at every build. */
                snprintf(c->why, c->why_len, "%s uses __FILE__: the driver compiles it from a path of its own, "
                                             "another at every build",
                         depth == 0 ? "the program source" : "an embedded header");
                rc = KEY_TIME_MACROS;
            }
        } else {
            line_start = 0;
            p++;
        }
    }
    free(src);
    return rc;
}

int key_scan_headers(struct key_buf *k, const struct key_source *in, char *why, size_t why_len)
{
    char none[8];
    if (!why) { why = none; why_len = sizeof none; }
    why[0] = 0;
    struct include_ctx c = {.k = k, .why = why, .why_len = why_len, .embedded = in->embedded,
                            .nembedded = in->nembedded, .driver_dir = in->driver_dir};
    char **argv;
    int argc;
    int rc = key_split_options(in->options, &argv, &argc);
    if (rc) {
        snprintf(why, why_len, "%s", rc == CLSHIM_ENOMEM ? "out of memory" : "an unclosed quote in the options");
        return -1;
    }
    rc = parse_include_dirs(&c, argv, argc);
    /* Most programs include nothing. Without the words "include" and
     * "import" and without a backslash (a line splice), no directive can
     * open a file: the scan is skipped. */
    int may_include = memmem(in->source, in->len, "include", 7) || memmem(in->source, in->len, "import", 6) ||
                      memchr(in->source, '\\', in->len) || memmem(in->source, in->len, "??", 2) ||
                      memmem(in->source, in->len, "__DATE__", 8) || memmem(in->source, in->len, "__TIME", 6) ||
                      memmem(in->source, in->len, "__FILE__", 8);
    if (rc == 0 && may_include) rc = scan_source(&c, in->source, in->len, NULL, 0);
    for (size_t i = 0; rc == 0 && i < in->nembedded; i++)
        rc = scan_source(&c, in->embedded[i].source, in->embedded[i].len, NULL, 1);
    for (size_t i = 0; i < c.nseen; i++) free(c.seen[i]);
    key_free_options(argv, argc);
    return rc;
}

int key_scan_probes(struct key_buf *k, const struct key_source *in, char *const *files, size_t nfiles,
                    void (*note)(void *arg, const char *path, const char *hex), void *arg, char *why,
                    size_t why_len)
{
    char none[8];
    if (!why) { why = none; why_len = sizeof none; }
    why[0] = 0;
    struct include_ctx c = {.mode = SCAN_PROBES, .k = k, .why = why, .why_len = why_len, .note = note,
                            .note_arg = arg, .embedded = in->embedded, .nembedded = in->nembedded};
    char **argv;
    int argc;
    if (key_split_options(in->options, &argv, &argc) != 0) {
        snprintf(why, why_len, "%s", "an unclosed quote in the options");
        return KEY_UNCACHEABLE;
    }
    int rc = parse_include_dirs(&c, argv, argc);
    if (rc == 0) rc = scan_source(&c, in->source, in->len, NULL, 0);
    for (size_t i = 0; rc == 0 && i < in->nembedded; i++)
        rc = scan_source(&c, in->embedded[i].source, in->embedded[i].len, NULL, 1);
    for (size_t i = 0; rc == 0 && i < nfiles; i++) {
        size_t len;
        const char *text;
        char *owned, hex[33];
        if (key_read_input(k, files[i], &text, &len, hex, &owned) != 0) {
            rc = hand_off(&c, "cannot read %s", files[i]);
            break;
        }
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", files[i]);
        char *slash = strrchr(dir, '/');
        if (slash) *slash = 0;
        else snprintf(dir, sizeof dir, ".");
        rc = scan_source(&c, text, len, dir, 1);
        free(owned);
    }
    key_free_options(argv, argc);
    return rc == KEY_HANDOFF ? KEY_UNCACHEABLE : rc; /* no other route is left */
}

void key_scan_driver_dir(struct key_buf *k, const struct key_source *in)
{
    if (!in->driver_dir) return;
    char why[256];
    struct include_ctx c = {.mode = SCAN_DRIVER_DIR, .driver_dir = in->driver_dir, .k = k, .why = why,
                            .why_len = sizeof why};
    scan_source(&c, in->source, in->len, NULL, 0);
}

int key_add_headers(struct key_buf *k, const char *source, size_t len, const char *options, char *why,
                    size_t why_len)
{
    struct key_source in = {.source = source, .len = len, .options = options};
    return key_scan_headers(k, &in, why, why_len);
}

int key_input_is(const void *key, size_t key_len, const void *input, size_t len)
{
    char head[64]; /* a field before it ends with its newline (key_add_blob) */
    int n = snprintf(head, sizeof head, "\ninput=%zu bytes\n", len);
    const char *k = key;
    size_t tail = (size_t)n + len + 1;
    return key && key_len >= tail && k[key_len - 1] == '\n' && memcmp(k + key_len - tail, head, (size_t)n) == 0 &&
           (len == 0 || memcmp(k + key_len - 1 - len, input, len) == 0);
}

/* ---- the files a key names (key.h) --------------------------------------- */

struct key_input_file {
    char *path;
    char hex[33];  /* "" for a file the key names as absent */
    int driver_dir;
};

struct key_inputs {
    struct key_input_file *file;
    size_t n;
};

#define NAME(s) {s, sizeof s - 1}
struct field_name {
    const char *s;
    size_t len;
};

/* Fields whose value is "<n> bytes" followed by n raw bytes (key_add_blob). */
static int is_blob_field(const char *name, size_t len)
{
    static const struct field_name blobs[] = {NAME("input"), NAME("manifest-of"), NAME("derived"),
                                              NAME("derived-any-device")};
    for (size_t i = 0; i < sizeof blobs / sizeof *blobs; i++)
        if (len == blobs[i].len && !memcmp(name, blobs[i].s, len)) return 1;
    return len > 16 && !memcmp(name, "embedded-header ", 16);
}

/* Fields named by a path or a header's name, which may hold '=' itself:
 * their line splits at its last '=' (the value, a hash or "<n> bytes",
 * has none); every other line at its first (an option's value may). */
static int is_path_field(const char *line, size_t len)
{
    static const struct field_name named[] = {NAME("header "), NAME("header-absent "), NAME("header-alias "),
                                              NAME("driver-dir-header "), NAME("driver-dir-absent "),
                                              NAME("embedded-header ")};
    if (len < 7 || (line[0] != 'h' && line[0] != 'd' && line[0] != 'e')) return 0;
    for (size_t i = 0; i < sizeof named / sizeof *named; i++)
        if (len > named[i].len && !memcmp(line, named[i].s, named[i].len)) return 1;
    return 0;
}

int key_fields(const void *key, size_t len, int (*fn)(const struct key_field *f, void *arg), void *arg)
{
    const char *p = key, *end = p + len;
    const char *eol = len ? memchr(p, '\n', len) : NULL;
    if (!eol || strncmp(p, "clshim-key ", 11) != 0) return -1;
    struct key_field f = {"clshim-key", 10, p + 11, (size_t)(eol - p) - 11, 0};
    if (fn(&f, arg)) return 0;
    for (p = eol + 1; p < end; p = eol + 1) {
        if (!(eol = memchr(p, '\n', (size_t)(end - p)))) return -1;
        size_t line = (size_t)(eol - p);
        const char *eq = is_path_field(p, line) ? memrchr(p, '=', line) : memchr(p, '=', line);
        if (!eq) return -1;
        f = (struct key_field){p, (size_t)(eq - p), eq + 1, (size_t)(eol - eq - 1), 0};
        char *after = NULL;
        int named_blob = is_blob_field(p, f.name_len);
        unsigned long long blob = named_blob ? strtoull(f.value, &after, 10) : 0;
        if (named_blob && after > f.value && after == eol - 6 && !memcmp(after, " bytes", 6)) {
            if (blob >= (unsigned long long)(end - eol - 1) || eol[1 + blob] != '\n') return -1;
            f.value = eol + 1, f.value_len = (size_t)blob, f.blob = 1;
            eol += 1 + blob; /* the blob's closing newline */
        }
        if (fn(&f, arg)) return 0;
    }
    return 0;
}

static int add_input(struct key_inputs *in, const char *path, size_t len, const char *hex, size_t hex_len,
                     int driver_dir)
{
    if (hex_len != 0 && hex_len != 32) return -1;
    struct key_input_file *f = realloc(in->file, (in->n + 1) * sizeof *f);
    if (!f) return -1;
    in->file = f;
    f += in->n;
    memset(f, 0, sizeof *f);
    if (!(f->path = strndup(path, len))) return -1;
    memcpy(f->hex, hex, hex_len);
    f->driver_dir = driver_dir;
    in->n++;
    return 0;
}

/* The field names key_inputs_parse() lists, with the value each must have. */
static const struct {
    const char *prefix;
    int absent, driver_dir;
} input_fields[] = {
    {"header ", 0, 0},
    {"header-absent ", 1, 0},
    {"driver-dir-header ", 0, 1},
    {"driver-dir-absent ", 1, 1},
};

struct inputs_walk {
    struct key_inputs *in;
    int bad;
};

static int list_input(const struct key_field *f, void *arg)
{
    struct inputs_walk *w = arg;
    if (f->blob) return 0;
    for (size_t i = 0; i < sizeof input_fields / sizeof *input_fields; i++) {
        size_t pl = strlen(input_fields[i].prefix);
        if (f->name_len <= pl || memcmp(f->name, input_fields[i].prefix, pl) != 0) continue;
        w->bad = (input_fields[i].absent && f->value_len != 0) ||
                 add_input(w->in, f->name + pl, f->name_len - pl, f->value, f->value_len, input_fields[i].driver_dir) != 0;
        return w->bad;
    }
    return 0;
}

int key_inputs_parse(const void *key, size_t len, struct key_inputs **out)
{
    struct inputs_walk w = {calloc(1, sizeof *w.in), 0};
    if (!w.in) return -1;
    if (key_fields(key, len, list_input, &w) != 0 || w.bad) {
        key_inputs_free(w.in);
        return -1;
    }
    *out = w.in;
    return 0;
}

size_t key_inputs_count(const struct key_inputs *in) { return in ? in->n : 0; }

void key_inputs_get(const struct key_inputs *in, size_t i, const char **path, const char **hex, int *driver_dir)
{
    (void)CLSHIM_ASSERT(i < in->n);
    *path = in->file[i].path;
    *hex = in->file[i].hex;
    *driver_dir = in->file[i].driver_dir;
}

void key_inputs_free(struct key_inputs *in)
{
    if (!in) return;
    for (size_t i = 0; i < in->n; i++) free(in->file[i].path);
    free(in->file);
    free(in);
}

/* ---- the family of a key (key.h) ------------------------------------------ */

struct family_walk {
    int manifest, found;
    struct key_field input;
};

static int find_input(const struct key_field *f, void *arg)
{
    struct family_walk *w = arg;
    if (f->name_len == 4 && !memcmp(f->name, "kind", 4))
        w->manifest = f->value_len == 8 && !memcmp(f->value, "manifest", 8);
    if (!f->blob || f->name_len != 5 || memcmp(f->name, "input", 5) != 0) return 0;
    w->input = *f;
    w->found = 1;
    return 1;
}

int key_family(const void *key, size_t len, struct cache_hash *family, size_t *input_at)
{
    struct family_walk w = {0, 0, {0}};
    if (key_fields(key, len, find_input, &w) != 0) return -1;
    if (!w.found || w.manifest) return 0;
    if (family) *family = key_hash(w.input.value, w.input.value_len);
    if (input_at) *input_at = (size_t)(w.input.name - (const char *)key);
    return 1;
}
