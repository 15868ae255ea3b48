/* keydiff.c — a key's nearest stored neighbour and the difference (keydiff.h). */
#include "cache/keydiff.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache/entry.h"
#include "cache/key.h"
#include "common/error.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

const char *keydiff_field_name(enum keydiff_field field)
{
    switch (field) {
    case KEYDIFF_CLSHIM: return "clshim";
    case KEYDIFF_KIND: return "kind";
    case KEYDIFF_DEVICE: return "device";
    case KEYDIFF_DRIVER: return "driver.version";
    case KEYDIFF_DRIVER_ENV: return "driver.env";
    case KEYDIFF_OPTION: return "option";
    case KEYDIFF_HEADER: return "header";
    case KEYDIFF_DRIVER_DIR: return "driver-dir-header";
    case KEYDIFF_EMBEDDED: return "embedded-header";
    case KEYDIFF_HEADER_PLACE: return "header-place";
    case KEYDIFF_OTHER: return "field";
    }
    return "field";
}

/* ---- one key's items ---------------------------------------------------------- */

/* An item of one key. Its name and value are hashed (XXH3-64): ranking
 * the neighbours compares hashes only (keydiff_nearest() reads up to
 * STORE_FAMILY_MAX keys on a miss); the strings are kept only for the
 * diff that is shown (side.copy). */
struct ent {
    enum keydiff_field field;
    int device_name;  /* device.name: first of the device's lines */
    int empty;        /* an empty value (a header absent at a place) */
    uint64_t nh, vh;  /* hashes of name and value */
    char *name, *value; /* NULL unless copied */
    size_t seq;       /* order of appearance, then rank among items of one name */
};

struct side {
    struct ent *e;
    size_t n, cap;
    int copy;      /* keep the strings */
    char *options; /* the options as the key has them (unescaped; copy only) */
    int has_options;
    int oom;
};

static void side_free(struct side *s)
{
    for (size_t i = 0; i < s->n; i++) free(s->e[i].name), free(s->e[i].value);
    free(s->e);
    free(s->options);
}

/* Room for one more of n items of `size` bytes in *p (capacity *cap,
 * doubling from `first`); -1 when out of memory (*p kept). */
static int grow(void *p, size_t *cap, size_t n, size_t size, size_t first)
{
    if (n < *cap) return 0;
    size_t c = *cap ? 2 * *cap : first;
    void *q = realloc(*(void **)p, c * size);
    if (!q) return -1;
    *(void **)p = q;
    *cap = c;
    return 0;
}

static void add(struct side *s, enum keydiff_field field, const char *name, size_t name_len, const char *value,
                size_t value_len)
{
    if (s->oom) return;
    if (grow(&s->e, &s->cap, s->n, sizeof *s->e, 64)) { s->oom = 1; return; }
    struct ent *e = &s->e[s->n];
    *e = (struct ent){field, field == KEYDIFF_DEVICE && name_len == 11 && !memcmp(name, "device.name", 11),
                      value_len == 0, entry_xxh3_64(name, name_len), entry_xxh3_64(value, value_len), NULL, NULL,
                      s->n};
    if (s->copy && (!(e->name = strndup(name, name_len)) || !(e->value = strndup(value, value_len)))) {
        free(e->name);
        s->oom = 1;
        return;
    }
    s->n++;
}

/* key_add_text()'s escapes undone: malloc'd, NULL when out of memory. */
static int starts(const char *s, size_t n, const char *prefix)
{
    size_t p = strlen(prefix);
    return n > p && !memcmp(s, prefix, p);
}

/* The options, one item each: "-D X" and "-DX" alike as "-DX", a define
 * named by its macro so a changed value pairs with the old one. */
static void add_options(struct side *s, const char *options)
{
    char **argv;
    int argc;
    if (key_split_options(options, &argv, &argc) != 0) { /* an unclosed quote: the text as one */
        add(s, KEYDIFF_OPTION, "options", 7, options, strlen(options));
        return;
    }
    char *tok = malloc(strlen(options) + 1); /* at least any two tokens joined */
    for (int i = 0; tok && i < argc; i++) {
        size_t n = strlen(argv[i]);
        memcpy(tok, argv[i], n + 1);
        if (n == 2 && argv[i][0] == '-' && strchr("DUI", argv[i][1]) && i + 1 < argc) { /* "-D X": "-DX" */
            size_t m = strlen(argv[++i]);
            memcpy(tok + n, argv[i], m + 1);
            n += m;
        }
        size_t name_len = n;
        if (tok[0] == '-' && (tok[1] == 'D' || tok[1] == 'U')) name_len = strcspn(tok, "=");
        add(s, KEYDIFF_OPTION, tok, name_len, tok, n);
    }
    if (!tok) s->oom = 1;
    free(tok);
    key_free_options(argv, argc);
}

/* The device identity (cache/device.c), one item per line. */
static void add_device(struct side *s, const char *identity)
{
    for (const char *p = identity; *p;) {
        size_t n = strcspn(p, "\n"), k = strcspn(p, "=");
        if (k > n) k = n;
        enum keydiff_field f = KEYDIFF_DEVICE;
        size_t skip = 0;
        if (k == 14 && !memcmp(p, "driver.version", 14)) f = KEYDIFF_DRIVER;
        else if (starts(p, k, "driver.env.")) f = KEYDIFF_DRIVER_ENV, skip = 11;
        add(s, f, p + skip, k - skip, p + (k < n ? k + 1 : n), k < n ? n - k - 1 : 0);
        p += n + (p[n] == '\n');
    }
}

static void add_hash(struct side *s, enum keydiff_field field, const char *name, size_t name_len, const void *data,
                     size_t len)
{
    char hex[33];
    key_hash_hex(key_hash(data, len), hex);
    add(s, field, name, name_len, hex, 32);
}

static int read_field(const struct key_field *f, void *arg)
{
    struct side *s = arg;
    const char *n = f->name;
    size_t nl = f->name_len;
    static const struct {
        const char *prefix;
        enum keydiff_field field;
        int absent;
    } named[] = {
        {"header ", KEYDIFF_HEADER, 0},
        {"header-absent ", KEYDIFF_HEADER, 1},
        {"driver-dir-header ", KEYDIFF_DRIVER_DIR, 0},
        {"driver-dir-absent ", KEYDIFF_DRIVER_DIR, 1},
    };
    for (size_t i = 0; !f->blob && i < sizeof named / sizeof *named; i++) {
        if (!starts(n, nl, named[i].prefix)) continue;
        size_t pl = strlen(named[i].prefix);
        add(s, named[i].field, n + pl, nl - pl, f->value, named[i].absent ? 0 : f->value_len);
        return 0;
    }
    if (f->blob) {
        int embedded = starts(n, nl, "embedded-header ");
        add_hash(s, embedded ? KEYDIFF_EMBEDDED : KEYDIFF_OTHER, n + (embedded ? 16 : 0), nl - (embedded ? 16 : 0),
                 f->value, f->value_len);
        return 0;
    }
    char *v = key_field_text(f);
    if (!v) {
        s->oom = 1;
        return 1;
    }
    if (nl == 10 && !memcmp(n, "clshim-key", 10)) add(s, KEYDIFF_CLSHIM, "key format", 10, v, strlen(v));
    else if (nl == 4 && !memcmp(n, "kind", 4)) add(s, KEYDIFF_KIND, "kind", 4, v, strlen(v));
    else if (nl == 6 && !memcmp(n, "device", 6)) add_device(s, v);
    else if (nl == 7 && !memcmp(n, "options", 7) && !s->has_options) {
        add_options(s, v);
        s->has_options = 1;
        if (s->copy) s->options = v, v = NULL;
    }
    else add(s, KEYDIFF_OTHER, n, nl, v, strlen(v));
    free(v);
    return s->oom;
}

/* Items in order: field, the device's name first of its lines, name (by
 * hash), appearance. */
static int cmp_ent(const void *a, const void *b)
{
    const struct ent *x = a, *y = b;
    if (x->field != y->field) return x->field < y->field ? -1 : 1;
    if (x->device_name != y->device_name) return x->device_name ? -1 : 1;
    if (x->nh != y->nh) return x->nh < y->nh ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* The items read, in order; -1 (s freed) when out of memory. */
static int finish_side(struct side *s)
{
    if (s->oom) {
        side_free(s);
        return -1;
    }
    if (s->n) qsort(s->e, s->n, sizeof *s->e, cmp_ent);
    /* seq becomes the rank among items of one field and name: the second
     * -DX of one key pairs with the other's second. */
    for (size_t i = 0; i < s->n; i++)
        s->e[i].seq = i && s->e[i - 1].field == s->e[i].field && s->e[i - 1].nh == s->e[i].nh ? s->e[i - 1].seq + 1 : 0;
    return 0;
}

/* Walks two sides' items in step: fn(x, y, arg) for each pair that
 * differs, x or y NULL for an item only the other has. */
static void walk(const struct side *a, const struct side *b,
                 void (*fn)(const struct ent *x, const struct ent *y, void *arg), void *arg)
{
    size_t i = 0, j = 0;
    while (i < a->n || j < b->n) {
        int c = i == a->n ? 1 : j == b->n ? -1 : cmp_ent(&a->e[i], &b->e[j]);
        const struct ent *x = c <= 0 ? &a->e[i] : NULL, *y = c >= 0 ? &b->e[j] : NULL;
        if (!x || !y || x->vh != y->vh) fn(x, y, arg);
        i += c <= 0, j += c >= 0;
    }
}

/* A header place: absent in one key (an empty value), not named in the other. */
static int is_place(const struct ent *x, const struct ent *y)
{
    const struct ent *e = x ? x : y;
    return e->field == KEYDIFF_HEADER && (!x || x->empty) && (!y || y->empty);
}

/* ---- the difference ------------------------------------------------------------ */

struct keydiff {
    struct side stored, now;
    struct keydiff_item *item;
    size_t n, cap;
    int oom;
};

static void add_item(const struct ent *x, const struct ent *y, void *arg)
{
    struct keydiff *d = arg;
    if (d->oom) return;
    if (grow(&d->item, &d->cap, d->n, sizeof *d->item, 16)) { d->oom = 1; return; }
    const struct ent *e = x ? x : y;
    d->item[d->n++] = (struct keydiff_item){is_place(x, y) ? KEYDIFF_HEADER_PLACE : e->field, e->name,
                                            x ? x->value : NULL, y ? y->value : NULL};
}

/* What matters first, then by name (the device's name first of its lines). */
static int cmp_item(const void *a, const void *b)
{
    const struct keydiff_item *x = a, *y = b;
    if (x->field != y->field) return x->field < y->field ? -1 : 1;
    int xd = x->field == KEYDIFF_DEVICE && !strcmp(x->name, "device.name");
    int yd = y->field == KEYDIFF_DEVICE && !strcmp(y->name, "device.name");
    if (xd != yd) return xd ? -1 : 1;
    int c = strcmp(x->name, y->name);
    if (c) return c;
    c = strcmp(x->stored ? x->stored : "", y->stored ? y->stored : "");
    return c ? c : strcmp(x->now ? x->now : "", y->now ? y->now : "");
}

/* The diff of two sides (read_unshared(), strings kept); d owns them. */
static struct keydiff *diff_sides(struct keydiff *d)
{
    walk(&d->stored, &d->now, add_item, d);
    size_t options = 0;
    for (size_t i = 0; i < d->n; i++) options += d->item[i].field == KEYDIFF_OPTION;
    /* The same options in another order (-D order matters to the driver),
     * or spelt otherwise ("-D X" for "-DX"): the key differs all the same. */
    const struct side *a = &d->stored, *b = &d->now;
    if (!d->oom && !options && a->options && b->options && strcmp(a->options, b->options)) {
        struct ent x = {.field = KEYDIFF_OPTION, .name = "order", .value = a->options};
        struct ent y = {.field = KEYDIFF_OPTION, .name = "order", .value = b->options};
        add_item(&x, &y, d);
    }
    if (d->oom) {
        keydiff_free(d);
        return NULL;
    }
    if (d->n) qsort(d->item, d->n, sizeof *d->item, cmp_item);
    return d;
}

size_t keydiff_count(const struct keydiff *d) { return d ? d->n : 0; }

const struct keydiff_item *keydiff_item(const struct keydiff *d, size_t i) { return i < d->n ? &d->item[i] : NULL; }

void keydiff_free(struct keydiff *d)
{
    if (!d) return;
    side_free(&d->stored);
    side_free(&d->now);
    free(d->item);
    free(d);
}

/* A value as a line shows it: quoted, cut at 60 characters; "unset". */
static const char *shown(const char *v, char buf[80])
{
    if (!v) return "unset";
    size_t n = strlen(v);
    if (n > 60) snprintf(buf, 80, "'%.57s...'", v);
    else snprintf(buf, 80, "'%s'", v);
    return buf;
}

/* What became of a header: by its hash ("" absent) in each key. */
static const char *header_change(const char *stored, const char *now)
{
    if (stored && *stored && now && *now) return "content";
    if (stored && now) return *now ? "appeared" : "gone";
    return now ? "newly read" : "no longer read";
}

void keydiff_describe(const struct keydiff_item *it, char *out, size_t len)
{
    char a[80], b[80];
    const char *was = it->stored, *now = it->now;
    switch (it->field) {
    case KEYDIFF_CLSHIM: snprintf(out, len, "clshim's key format %s -> %s", shown(was, a), shown(now, b)); break;
    case KEYDIFF_KIND: snprintf(out, len, "kind %s -> %s", shown(was, a), shown(now, b)); break;
    case KEYDIFF_DEVICE:
        if (!strcmp(it->name, "device.name")) snprintf(out, len, "device %s -> %s", shown(was, a), shown(now, b));
        else snprintf(out, len, "device field %s (%s -> %s)", it->name, shown(was, a), shown(now, b));
        break;
    case KEYDIFF_DRIVER: snprintf(out, len, "driver version %s -> %s", shown(was, a), shown(now, b)); break;
    case KEYDIFF_DRIVER_ENV:
        snprintf(out, len, "driver variable %s: %s -> %s", it->name, shown(was, a), shown(now, b));
        break;
    case KEYDIFF_OPTION:
        if (!strcmp(it->name, "order") && was && now)
            snprintf(out, len, "options reordered or respelt (%s -> %s)", shown(was, a), shown(now, b));
        else if (was && now) snprintf(out, len, "option %s -> %s", was, now);
        else snprintf(out, len, "option %s %s", was ? was : now, was ? "removed" : "added");
        break;
    case KEYDIFF_HEADER: snprintf(out, len, "header %s (%s)", it->name, header_change(was, now)); break;
    case KEYDIFF_DRIVER_DIR:
        snprintf(out, len, "header %s in the driver's directory (%s)", it->name, header_change(was, now));
        break;
    case KEYDIFF_EMBEDDED:
        snprintf(out, len, "embedded header %s (%s)", it->name, was && now ? "content" : was ? "removed" : "added");
        break;
    case KEYDIFF_HEADER_PLACE:
        snprintf(out, len, "header place %s (%s)", it->name, was ? "no longer looked at" : "newly looked at");
        break;
    case KEYDIFF_OTHER:
        if (was && now) snprintf(out, len, "%s %s -> %s", it->name, shown(was, a), shown(now, b));
        else snprintf(out, len, "%s %s", it->name, was ? "removed" : "added");
        break;
    }
}

#define SUMMARY_ITEMS 6

void keydiff_summary(const struct keydiff *d, char *out, size_t len)
{
    size_t at = 0, said = 0, more = 0, places = 0;
    int device_named = 0;
    out[0] = 0;
    for (size_t i = 0; i < d->n; i++)
        device_named |= d->item[i].field == KEYDIFF_DEVICE && !strcmp(d->item[i].name, "device.name");
    for (size_t i = 0; i < d->n; i++) {
        const struct keydiff_item *it = &d->item[i];
        if (it->field == KEYDIFF_HEADER_PLACE) { places++; continue; }
        if (device_named && it->field == KEYDIFF_DEVICE && strcmp(it->name, "device.name")) continue;
        if (said == SUMMARY_ITEMS) { more++; continue; }
        char one[512];
        keydiff_describe(it, one, sizeof one);
        if (at < len) at += (size_t)snprintf(out + at, len - at, "%s%s", said++ ? ", " : "", one);
    }
    if (places && said < SUMMARY_ITEMS && at < len)
        at += (size_t)snprintf(out + at, len - at, "%s%zu header place%s", said++ ? ", " : "", places,
                               places == 1 ? "" : "s");
    else more += places;
    if (more && at < len) snprintf(out + at, len - at, " and %zu more", more);
}

/* ---- misses and their neighbours --------------------------------------------- */

int keydiff_miss_of(struct cache_hash hash, const void *key, size_t len, struct keydiff_miss *out)
{
    memset(out, 0, sizeof *out);
    size_t at = len;
    int rc = key_family(key, len, &out->family, &at);
    if (rc < 0) return -1;
    out->hash = hash;
    out->has_family = rc == 1;
    out->key = key;
    out->key_len = at;
    return 0;
}

#define LAST_MISS_MAGIC "clshim-last-miss 1\n"

int keydiff_note_miss(store *s, const struct keydiff_miss *m)
{
    char head[128], hex[33], fam[33] = "none";
    key_hash_hex(m->hash, hex);
    if (m->has_family) key_hash_hex(m->family, fam);
    int n = snprintf(head, sizeof head, LAST_MISS_MAGIC "%s\n%s\n%llu\n", hex, fam, (unsigned long long)time(NULL));
    if (m->key_len > STORE_LAST_MISS_MAX - (size_t)n) return CLSHIM_ETOOBIG;
    char *rec = malloc((size_t)n + m->key_len);
    if (!rec) return CLSHIM_ENOMEM;
    memcpy(rec, head, (size_t)n);
    memcpy(rec + n, m->key, m->key_len);
    int rc = store_note_last_miss(s, rec, (size_t)n + m->key_len);
    free(rec);
    return rc;
}

/* 32 hex digits and a newline at *p into *h; -1 when not. */
static int read_hex_line(const char **p, const char *end, struct cache_hash *h)
{
    if (end - *p < 33 || (*p)[32] != '\n') return -1;
    unsigned long long hi, lo;
    char part[17];
    memcpy(part, *p, 16), part[16] = 0;
    char *e;
    hi = strtoull(part, &e, 16);
    if (*e) return -1;
    memcpy(part, *p + 16, 16);
    lo = strtoull(part, &e, 16);
    if (*e) return -1;
    h->hi = hi, h->lo = lo;
    *p += 33;
    return 0;
}

int keydiff_last_miss(store *s, struct keydiff_miss *out)
{
    memset(out, 0, sizeof *out);
    void *rec;
    size_t len;
    int rc = store_last_miss(s, &rec, &len);
    if (rc) return rc;
    const char *p = rec, *end = p + len;
    size_t ml = sizeof LAST_MISS_MAGIC - 1;
    char *e;
    rc = CLSHIM_ECORRUPT;
    if (len < ml || memcmp(p, LAST_MISS_MAGIC, ml) != 0) goto bad;
    p += ml;
    if (read_hex_line(&p, end, &out->hash) != 0) goto bad;
    if (end - p >= 5 && !memcmp(p, "none\n", 5)) p += 5;
    else if (read_hex_line(&p, end, &out->family) == 0) out->has_family = 1;
    else goto bad;
    out->when = strtoull(p, &e, 10);
    if (e == p || e >= end || *e != '\n') goto bad;
    out->key = e + 1;
    out->key_len = (size_t)(end - e - 1);
    out->buf = rec;
    return CLSHIM_OK;
bad:
    free(rec);
    memset(out, 0, sizeof *out);
    return rc;
}

void keydiff_miss_free(struct keydiff_miss *m)
{
    free(m->buf);
    memset(m, 0, sizeof *m);
}

/* ---- ranking the neighbours ----------------------------------------------------
 * Two keys of one program share most of their lines (fields): ranking
 * hashes each whole line of a neighbour, looks it up among the miss's
 * (sorted once), and reads into items only the lines one key lacks, a
 * handful; the options, one line of many items where a define differs,
 * are compared token by token as hashes the same way. So a neighbour costs
 * a walk of its fields; only the nearest gets the full diff. */

struct hashed {
    uint64_t h;
    size_t i; /* the line's (token's) index */
};

struct opt_tok {
    uint64_t full, name; /* the token; a define's macro (else its full hash) */
    int define;
};

struct lines {
    struct key_field *f;
    uint64_t *h;          /* per field: the hash of its whole line */
    size_t n, cap;
    size_t options;       /* the options field's index; SIZE_MAX: none */
    struct opt_tok *tok;  /* its tokens (read_tokens()) */
    size_t ntok;
    struct hashed *by_h, *tok_by_h; /* the miss's lines and tokens by hash (index_lines()) */
    unsigned char *seen, *tok_seen; /* the miss's lines and tokens a neighbour has */
    int oom;
};

static void lines_free(struct lines *l)
{
    free(l->f), free(l->h), free(l->tok);
    free(l->by_h), free(l->tok_by_h), free(l->seen), free(l->tok_seen);
}

static int take_line(const struct key_field *f, void *arg)
{
    struct lines *l = arg;
    size_t hcap = l->cap;
    if (grow(&l->h, &hcap, l->n, sizeof *l->h, 128) || grow(&l->f, &l->cap, l->n, sizeof *l->f, 128)) return l->oom = 1;
    if (l->options == SIZE_MAX && !f->blob && f->name_len == 7 && !memcmp(f->name, "options", 7)) l->options = l->n;
    l->f[l->n] = *f;
    l->h[l->n++] = XXH3_64bits_withSeed(f->value, f->value_len, XXH3_64bits(f->name, f->name_len) ^ (uint64_t)f->blob);
    return 0;
}

/* The next token of options text as key_split_options() splits it (white
 * space separates, double quotes group, a backslash escapes), as written. */
static int next_token(const char **p, const char *end, const char **tok, size_t *len)
{
    while (*p < end && (**p == ' ' || **p == '\t')) ++*p;
    if (*p == end) return 0;
    *tok = *p;
    for (int quoted = 0; *p < end && (quoted || (**p != ' ' && **p != '\t')); ++*p) {
        if (**p == '"') quoted = !quoted;
        else if (**p == '\\' && *p + 1 < end) ++*p;
    }
    *len = (size_t)(*p - *tok);
    return 1;
}

/* l's options as hashed tokens: "-D X" and "-DX" alike, a define named by
 * its macro (as add_options() reads them, from the text as written). */
static int read_tokens(struct lines *l)
{
    if (l->options == SIZE_MAX) return 0;
    const char *p = l->f[l->options].value, *end = p + l->f[l->options].value_len, *t;
    size_t n;
    if (!(l->tok = malloc(((size_t)(end - p) / 2 + 1) * sizeof *l->tok))) return -1;
    while (next_token(&p, end, &t, &n)) {
        struct opt_tok *o = &l->tok[l->ntok++];
        char flag = n >= 2 && t[0] == '-' && strchr("DUI", t[1]) ? t[1] : 0;
        if (flag) { /* "-DX", or "-D" then "X" */
            t += 2, n -= 2;
            if (!n && !next_token(&p, end, &t, &n)) n = 0;
        }
        o->full = XXH3_64bits_withSeed(t, n, (uint64_t)(unsigned char)flag);
        o->define = flag == 'D' || flag == 'U';
        const char *eq = o->define ? memchr(t, '=', n) : NULL;
        o->name = eq ? XXH3_64bits_withSeed(t, (size_t)(eq - t), (uint64_t)(unsigned char)flag) : o->full;
    }
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int cmp_hashed(const void *a, const void *b) { return cmp_u64(&((const struct hashed *)a)->h, &((const struct hashed *)b)->h); }

/* Key material read as lines (and options tokens); with index, sorted for
 * lookups (the miss's). */
static int read_lines(const void *key, size_t len, int index, struct lines *l)
{
    memset(l, 0, sizeof *l);
    l->options = SIZE_MAX;
    if (key_fields(key, len, take_line, l) != 0 || l->oom || read_tokens(l) != 0) goto bad;
    if (!index) return 0;
    l->by_h = malloc((l->n + 1) * sizeof *l->by_h);
    l->tok_by_h = malloc((l->ntok + 1) * sizeof *l->tok_by_h);
    l->seen = malloc(l->n + 1);
    l->tok_seen = malloc(l->ntok + 1);
    if (!l->by_h || !l->tok_by_h || !l->seen || !l->tok_seen) goto bad;
    for (size_t i = 0; i < l->n; i++) l->by_h[i] = (struct hashed){l->h[i], i};
    for (size_t i = 0; i < l->ntok; i++) l->tok_by_h[i] = (struct hashed){l->tok[i].full, i};
    qsort(l->by_h, l->n, sizeof *l->by_h, cmp_hashed);
    qsort(l->tok_by_h, l->ntok, sizeof *l->tok_by_h, cmp_hashed);
    return 0;
bad:
    lines_free(l);
    return -1;
}

/* Whether h is among `by` (n sorted); marks every match in seen. */
static int find_mark(const struct hashed *by, size_t n, unsigned char *seen, uint64_t h)
{
    const struct hashed key = {h, 0}, *p = bsearch(&key, by, n, sizeof *by, cmp_hashed);
    if (!p) return 0;
    for (const struct hashed *q = p; q >= by && q->h == h; q--) seen[q->i] = 1;
    for (const struct hashed *q = p + 1; q < by + n && q->h == h; q++) seen[q->i] = 1;
    return 1;
}

/* The option items that differ: tokens only one key has, a define of one
 * macro in both counted once (its value changed); the options in another
 * order only, one. The neighbour's tokens against the miss's (indexed).
 * UINT64_MAX when out of memory. */
static uint64_t option_distance(const struct lines *other, struct lines *miss)
{
    memset(miss->tok_seen, 0, miss->ntok);
    if (other->options == SIZE_MAX || miss->options == SIZE_MAX || other->h[other->options] == miss->h[miss->options])
        return 0;
    uint64_t *ua = malloc((other->ntok + miss->ntok + 1) * sizeof *ua), *ub = ua + other->ntok, items = 0;
    if (!ua) return UINT64_MAX;
    size_t na = 0, nb = 0;
    for (size_t i = 0; i < other->ntok; i++) {
        if (find_mark(miss->tok_by_h, miss->ntok, miss->tok_seen, other->tok[i].full)) continue;
        if (other->tok[i].define) ua[na++] = other->tok[i].name;
        else items++;
    }
    for (size_t j = 0; j < miss->ntok; j++) {
        if (miss->tok_seen[j]) continue;
        if (miss->tok[j].define) ub[nb++] = miss->tok[j].name;
        else items++;
    }
    qsort(ua, na, sizeof *ua, cmp_u64);
    qsort(ub, nb, sizeof *ub, cmp_u64);
    for (size_t i = 0, j = 0; i < na || j < nb; items++) { /* a macro in both: one item */
        int c = i == na ? 1 : j == nb ? -1 : cmp_u64(&ua[i], &ub[j]);
        i += c <= 0, j += c >= 0;
    }
    free(ua);
    return items ? items : 1;
}

static int has_line(const struct lines *l, uint64_t h)
{
    const struct hashed key = {h, 0};
    return bsearch(&key, l->by_h, l->n, sizeof *l->by_h, cmp_hashed) != NULL;
}

/* The items, strings kept, of a's lines that b (indexed) lacks. */
static int read_unshared(const struct lines *a, const struct lines *b, struct side *s)
{
    memset(s, 0, sizeof *s);
    s->copy = 1;
    for (size_t i = 0; i < a->n && !s->oom; i++)
        if (!has_line(b, a->h[i]) && read_field(&a->f[i], s)) s->oom = 1;
    return finish_side(s);
}

struct keydiff *keydiff_new(const void *stored, size_t stored_len, const void *now, size_t now_len)
{
    /* Lines both keys have give no item: only the others are read. */
    struct lines a, b;
    if (read_lines(stored, stored_len, 1, &a) != 0) return NULL;
    if (read_lines(now, now_len, 1, &b) != 0) {
        lines_free(&a);
        return NULL;
    }
    struct keydiff *d = calloc(1, sizeof *d);
    int ok = d && read_unshared(&a, &b, &d->stored) == 0;
    if (ok && read_unshared(&b, &a, &d->now) != 0) {
        side_free(&d->stored);
        ok = 0;
    }
    lines_free(&a);
    lines_free(&b);
    if (!ok) {
        free(d);
        return NULL;
    }
    return diff_sides(d);
}

/* The miss's items of the lines a neighbour lacks, kept for the next one:
 * neighbours of one miss mostly lack the same lines. */
struct unshared_cache {
    struct side side;
    uint64_t sig; /* which lines: their hashes summed, mixed */
    int have;
};

/* The distance of two keys: the items that differ, those that matter
 * above header places (which break ties), as keydiff_new() would list
 * them. UINT64_MAX when out of memory. */
struct distance {
    uint64_t items, places;
};

static void count_item(const struct ent *x, const struct ent *y, void *arg)
{
    struct distance *d = arg;
    if (is_place(x, y)) d->places++;
    else d->items++;
}

static uint64_t distance(const struct lines *other, struct lines *miss, struct unshared_cache *c)
{
    uint64_t options = option_distance(other, miss);
    if (options == UINT64_MAX) return UINT64_MAX;
    struct side a = {0};
    memset(miss->seen, 0, miss->n);
    for (size_t i = 0; i < other->n && !a.oom; i++)
        if (i != other->options && !find_mark(miss->by_h, miss->n, miss->seen, other->h[i]) && read_field(&other->f[i], &a))
            a.oom = 1;
    if (finish_side(&a) != 0) return UINT64_MAX;
    uint64_t sig = 0x9e3779b97f4a7c15ull;
    for (size_t j = 0; j < miss->n; j++)
        if (j != miss->options && !miss->seen[j]) sig += XXH3_64bits(&miss->h[j], 8);
    if (!c->have || c->sig != sig) {
        if (c->have) side_free(&c->side);
        memset(&c->side, 0, sizeof c->side);
        for (size_t j = 0; j < miss->n && !c->side.oom; j++)
            if (j != miss->options && !miss->seen[j] && read_field(&miss->f[j], &c->side)) c->side.oom = 1;
        c->have = finish_side(&c->side) == 0;
        c->sig = sig;
    }
    struct distance d = {options, 0};
    if (c->have) walk(&a, &c->side, count_item, &d);
    side_free(&a);
    return c->have ? d.items << 32 | d.places : UINT64_MAX;
}

int keydiff_nearest(store *s, const struct keydiff_miss *m, struct keydiff_near *out)
{
    memset(out, 0, sizeof *out);
    if (!m->has_family) return 0;
    struct store_family_member mem[STORE_FAMILY_MAX];
    size_t n;
    int rc = store_family_get(s, m->family, mem, STORE_FAMILY_MAX, &n);
    if (rc) return rc;
    /* Ranked by line hashes, the miss read once; the nearest alone diffed in full. */
    struct lines miss;
    struct unshared_cache cache = {.have = 0};
    size_t best = n;
    uint64_t best_d = UINT64_MAX;
    if (read_lines(m->key, m->key_len, 1, &miss) == 0) {
        for (size_t i = 0; i < n; i++) { /* newest first: a tie keeps the newer */
            struct lines other;
            if ((mem[i].hash.lo == m->hash.lo && mem[i].hash.hi == m->hash.hi) ||
                read_lines(mem[i].key, mem[i].key_len, 0, &other) != 0)
                continue;
            uint64_t d = distance(&other, &miss, &cache);
            if (d < best_d) best = i, best_d = d;
            lines_free(&other);
        }
        if (cache.have) side_free(&cache.side);
        lines_free(&miss);
    }
    if (best < n && (out->diff = keydiff_new(mem[best].key, mem[best].key_len, m->key, m->key_len))) {
        out->hash = mem[best].hash;
        out->created = mem[best].created;
    }
    store_family_free(mem, n);
    return out->diff ? 1 : 0;
}
