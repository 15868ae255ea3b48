/* plan.c — the fusion plan parser (format in plan.h).
 *
 * One small scanner with line/column tracking serves both forms. Every
 * read is bounds-checked against `len`; words quoted in messages are
 * sanitised (printable ASCII, truncated), so a hostile file cannot garble
 * the log line.
 */
#include "fusion/plan.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/error.h"

struct scan {
    const char *s;
    size_t len, i;
    uint32_t line;
    size_t line_start;
    const char *origin;
    char *err;
    size_t err_len;
};

static uint32_t col_of(const struct scan *sc, size_t at) { return (uint32_t)(at - sc->line_start + 1); }

static int fail_at(struct scan *sc, size_t at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail_at(struct scan *sc, size_t at, const char *fmt, ...)
{
    if (sc->err && sc->err_len) {
        int n = snprintf(sc->err, sc->err_len, "%s:%u:%u: ", sc->origin, (unsigned)sc->line,
                         (unsigned)col_of(sc, at));
        if (n >= 0 && (size_t)n < sc->err_len) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(sc->err + n, sc->err_len - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return CLSHIM_EINVAL;
}

/* A word for a message: printable ASCII, others as \xNN, at most 40 bytes. */
static void quote(const char *w, size_t n, char *out, size_t out_len)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 5 < out_len; i++) {
        unsigned char c = (unsigned char)w[i];
        if (i >= 40) {
            memcpy(out + o, "...", 3);
            o += 3;
            break;
        }
        if (c >= 0x20 && c < 0x7f) out[o++] = (char)c;
        else o += (size_t)snprintf(out + o, out_len - o, "\\x%02x", c);
    }
    out[o] = 0;
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }
static int is_ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int is_ident(char c) { return is_ident_start(c) || (c >= '0' && c <= '9'); }

static void skip_space(struct scan *sc)
{
    while (sc->i < sc->len && is_space(sc->s[sc->i])) sc->i++;
}

/* The length of the run of non-space bytes at i (up to end), for messages. */
static size_t word_len_at(const struct scan *sc, size_t i, size_t end)
{
    size_t j = i;
    while (j < end && sc->s[j] != '\n' && !is_space(sc->s[j])) j++;
    return j > i ? j - i : (i < end ? 1 : 0);
}

/* A byte no plan may contain anywhere (comments included). */
static int check_bytes(struct scan *sc)
{
    size_t line_start = 0;
    uint32_t line = 1;
    for (size_t i = 0; i < sc->len; i++) {
        unsigned char c = (unsigned char)sc->s[i];
        if (c == '\n') {
            line++;
            line_start = i + 1;
        } else if ((c < 0x20 && !is_space((char)c)) || c == 0x7f) {
            sc->line = line;
            sc->line_start = line_start;
            return fail_at(sc, i, "unexpected control byte 0x%02x", c);
        }
    }
    return 0;
}

/* ---- building sequences -------------------------------------------------- */

struct seq_builder {
    struct plan_seq seq;
    uint32_t cap;
};

static int add_name(struct scan *sc, struct seq_builder *b, size_t at, size_t n)
{
    char q[64];
    if (n > PLAN_MAX_NAME) {
        quote(sc->s + at, n, q, sizeof q);
        return fail_at(sc, at, "kernel name '%s' is longer than %d bytes", q, PLAN_MAX_NAME);
    }
    if (b->seq.n >= PLAN_MAX_SEQ) return fail_at(sc, at, "a sequence has at most %d kernels", PLAN_MAX_SEQ);
    if (b->seq.n == b->cap) {
        uint32_t cap = b->cap ? b->cap * 2 : 4;
        char **names = realloc(b->seq.names, cap * sizeof *names);
        if (!names) return CLSHIM_ENOMEM;
        b->seq.names = names;
        b->cap = cap;
    }
    char *name = malloc(n + 1);
    if (!name) return CLSHIM_ENOMEM;
    memcpy(name, sc->s + at, n);
    name[n] = 0;
    b->seq.names[b->seq.n++] = name;
    return 0;
}

static void seq_clear(struct plan_seq *s)
{
    for (uint32_t i = 0; i < s->n; i++) free(s->names[i]);
    free(s->names);
    free(s->where);
    free(s->internal_args);
    memset(s, 0, sizeof *s);
}

static int finish_seq(struct scan *sc, struct fusion_plan *plan, struct seq_builder *b, size_t at)
{
    if (b->seq.n < 2) return fail_at(sc, at, "a sequence needs at least 2 kernels, found %u", (unsigned)b->seq.n);
    if (plan->nseqs >= PLAN_MAX_SEQS) return fail_at(sc, at, "a plan has at most %d sequences", PLAN_MAX_SEQS);
    char where[64];
    snprintf(where, sizeof where, ":%u:%u", (unsigned)sc->line, (unsigned)col_of(sc, at));
    size_t ol = strlen(sc->origin), wl = strlen(where);
    b->seq.where = malloc(ol + wl + 1);
    struct plan_seq *seqs = realloc(plan->seqs, (plan->nseqs + 1) * sizeof *seqs);
    if (!b->seq.where || !seqs) {
        if (seqs) plan->seqs = seqs;
        return CLSHIM_ENOMEM;
    }
    memcpy(b->seq.where, sc->origin, ol);
    memcpy(b->seq.where + ol, where, wl + 1);
    plan->seqs = seqs;
    plan->seqs[plan->nseqs++] = b->seq;
    memset(b, 0, sizeof *b);
    return 0;
}

/* Applies an option word; CLSHIM_EINVAL for an unknown one. */
static int apply_option(struct scan *sc, struct seq_builder *b, size_t at, size_t n)
{
    if (n == 13 && !memcmp(sc->s + at, "force-barrier", 13)) {
        b->seq.force_barrier = 1;
        return 0;
    }
    if (n == 8 && !memcmp(sc->s + at, "internal", 8)) {
        if (b->seq.internal_args) return fail_at(sc, at, "'internal' and 'internal=' together (give one)");
        b->seq.internal = 1;
        return 0;
    }
    if (n == 5 && !memcmp(sc->s + at, "const", 5)) {
        b->seq.consts = 1;
        return 0;
    }
    char q[64];
    quote(sc->s + at, n, q, sizeof q);
    return fail_at(sc, at, "unknown option '%s' (known: force-barrier, internal, internal=KERNEL.ARG,..., const)", q);
}

/* The end of the internal= item "KERNEL.ARG" starting at i (ARG a C
 * identifier or a decimal index of at most 3 digits), or 0 when none starts
 * there; *dot gets the position of the '.'. */
static size_t internal_item_end(const char *s, size_t len, size_t i, size_t *dot)
{
    if (i >= len || !is_ident_start(s[i])) return 0;
    while (i < len && is_ident(s[i])) i++;
    if (i >= len || s[i] != '.') return 0;
    *dot = i++;
    size_t arg = i;
    if (i < len && is_ident_start(s[i])) {
        while (i < len && is_ident(s[i])) i++;
    } else {
        while (i < len && s[i] >= '0' && s[i] <= '9') i++;
        if (i == arg || i - arg > 3) return 0;
    }
    return i;
}

/* Parses the list of `internal=` from `at` (just after the '='), up to
 * `end` in the file form (the word must end there); in the inline form a
 * ',' followed by something other than an item ends the list (the next
 * option). Sets sc->i after the list. */
static int parse_internal_list(struct scan *sc, struct seq_builder *b, size_t at, size_t end, int file_form)
{
    if (b->seq.internal) return fail_at(sc, at, "'internal' and 'internal=' together (give one)");
    size_t i = at;
    for (;;) {
        size_t dot = 0, e = internal_item_end(sc->s, end, i, &dot);
        if (!e) {
            char q[64];
            quote(sc->s + i, word_len_at(sc, i, end), q, sizeof q);
            return fail_at(sc, i, "expected KERNEL.ARG (a kernel of the sequence and its parameter's name or "
                           "index) in internal=, found '%s'", q);
        }
        if (dot - i > PLAN_MAX_NAME || e - dot - 1 > PLAN_MAX_NAME)
            return fail_at(sc, i, "a name in internal= is longer than %d bytes", PLAN_MAX_NAME);
        int known = 0;
        for (uint32_t k = 0; k < b->seq.n && !known; k++)
            known = strlen(b->seq.names[k]) == dot - i && !memcmp(b->seq.names[k], sc->s + i, dot - i);
        if (!known) {
            char q[64];
            quote(sc->s + i, dot - i, q, sizeof q);
            return fail_at(sc, i, "internal=: kernel '%s' is not in the sequence", q);
        }
        i = e;
        size_t next_dot;
        if (i < end && sc->s[i] == ',' && (file_form || internal_item_end(sc->s, end, i + 1, &next_dot))) {
            i++;
            continue;
        }
        break;
    }
    if (file_form && i != end) {
        char q[16];
        quote(sc->s + i, 1, q, sizeof q);
        return fail_at(sc, i, "unexpected '%s' in internal= (items are KERNEL.ARG separated by ',')", q);
    }
    if (!(b->seq.internal_args = malloc(i - at + 1))) return CLSHIM_ENOMEM;
    memcpy(b->seq.internal_args, sc->s + at, i - at);
    b->seq.internal_args[i - at] = 0;
    b->seq.internal = 1;
    sc->i = i;
    return 0;
}

/* ---- the file form --------------------------------------------------------- */

static size_t word_end(const struct scan *sc, size_t i)
{
    while (i < sc->len && sc->s[i] != '\n' && sc->s[i] != '#' && !is_space(sc->s[i])) i++;
    return i;
}

/* Splits a word of names joined by '+' into the builder. */
static int add_names(struct scan *sc, struct seq_builder *b, size_t at, size_t end)
{
    size_t i = at;
    for (;;) {
        size_t start = i;
        if (i >= end || !is_ident_start(sc->s[i])) {
            char q[64];
            quote(sc->s + at, end - at, q, sizeof q);
            if (i < end && sc->s[i] != '+')
                return fail_at(sc, i, "'%s' is not a kernel name (names are C identifiers)", q);
            return fail_at(sc, i, "missing kernel name in '%s'", q);
        }
        while (i < end && is_ident(sc->s[i])) i++;
        int rc = add_name(sc, b, start, i - start);
        if (rc) return rc;
        if (i == end) return 0;
        if (sc->s[i] != '+') {
            char q[64];
            quote(sc->s + at, end - at, q, sizeof q);
            return fail_at(sc, i, "'%s' is not a kernel name (names are C identifiers)", q);
        }
        i++;
    }
}

static int parse_line(struct scan *sc, struct fusion_plan *plan)
{
    skip_space(sc);
    if (sc->i >= sc->len || sc->s[sc->i] == '\n' || sc->s[sc->i] == '#') return 0;
    size_t at = sc->i, end = word_end(sc, at);
    if (end - at != 4 || memcmp(sc->s + at, "fuse", 4)) {
        char q[64];
        quote(sc->s + at, end - at, q, sizeof q);
        return fail_at(sc, at, "expected 'fuse', found '%s'", q);
    }
    sc->i = end;
    struct seq_builder b;
    memset(&b, 0, sizeof b);
    int options_seen = 0, rc = 0;
    for (;;) {
        skip_space(sc);
        if (sc->i >= sc->len || sc->s[sc->i] == '\n' || sc->s[sc->i] == '#') break;
        size_t w = sc->i, we = word_end(sc, w);
        sc->i = we;
        /* `internal` alone is the option; a kernel of that name is written
         * joined by '+' (fuse a+internal). */
        int internal_word = we - w == 8 && !memcmp(sc->s + w, "internal", 8);
        internal_word |= we - w == 5 && !memcmp(sc->s + w, "const", 5); /* a keyword: never a kernel's name */
        if (we - w >= 9 && !memcmp(sc->s + w, "internal=", 9)) {
            options_seen = 1;
            if ((rc = parse_internal_list(sc, &b, w + 9, we, 1))) break;
        } else if (is_ident_start(sc->s[w]) && !internal_word && memchr(sc->s + w, '-', we - w) == NULL) {
            if (options_seen) {
                rc = fail_at(sc, w, "kernel names must come before options");
                break;
            }
            if ((rc = add_names(sc, &b, w, we))) break;
        } else if (sc->s[w] == '+' || (we > w && sc->s[we - 1] == '+')) {
            rc = add_names(sc, &b, w, we);
            break;
        } else if (is_ident_start(sc->s[w])) {
            options_seen = 1;
            if ((rc = apply_option(sc, &b, w, we - w))) break;
        } else {
            char q[64];
            quote(sc->s + w, we - w, q, sizeof q);
            rc = fail_at(sc, w, "'%s' is not a kernel name (names are C identifiers)", q);
            break;
        }
    }
    if (!rc) rc = finish_seq(sc, plan, &b, at);
    seq_clear(&b.seq);
    return rc;
}

static int parse_file_form(struct scan *sc, struct fusion_plan *plan)
{
    while (sc->i < sc->len) {
        int rc = parse_line(sc, plan);
        if (rc) return rc;
        while (sc->i < sc->len && sc->s[sc->i] != '\n') sc->i++; /* the rest is a comment */
        if (sc->i < sc->len) {
            sc->i++;
            sc->line++;
            sc->line_start = sc->i;
        }
    }
    return 0;
}

/* ---- the inline form ------------------------------------------------------- */

static void skip_inline_space(struct scan *sc)
{
    while (sc->i < sc->len && (is_space(sc->s[sc->i]) || sc->s[sc->i] == '\n')) {
        if (sc->s[sc->i] == '\n') {
            sc->line++;
            sc->line_start = sc->i + 1;
        }
        sc->i++;
    }
}

static int inline_name(struct scan *sc, struct seq_builder *b)
{
    skip_inline_space(sc);
    size_t at = sc->i;
    if (at >= sc->len || !is_ident_start(sc->s[at])) {
        if (at >= sc->len) return fail_at(sc, at, "expected a kernel name at the end");
        char q[16];
        quote(sc->s + at, 1, q, sizeof q);
        return fail_at(sc, at, "expected a kernel name, found '%s'", q);
    }
    while (sc->i < sc->len && is_ident(sc->s[sc->i])) sc->i++;
    return add_name(sc, b, at, sc->i - at);
}

static int parse_inline_form(struct scan *sc, struct fusion_plan *plan)
{
    for (;;) {
        skip_inline_space(sc);
        if (sc->i >= sc->len) return 0;
        if (sc->s[sc->i] == ';') {
            sc->i++;
            continue;
        }
        struct seq_builder b;
        memset(&b, 0, sizeof b);
        size_t at = sc->i;
        int rc = inline_name(sc, &b);
        for (;;) {
            if (rc) break;
            skip_inline_space(sc);
            if (sc->i < sc->len && sc->s[sc->i] == '+') {
                sc->i++;
                rc = inline_name(sc, &b);
                continue;
            }
            break;
        }
        if (!rc && sc->i < sc->len && sc->s[sc->i] == ':') {
            do {
                sc->i++;
                skip_inline_space(sc);
                size_t w = sc->i;
                while (sc->i < sc->len && (is_ident(sc->s[sc->i]) || sc->s[sc->i] == '-')) sc->i++;
                if (sc->i == w) {
                    rc = fail_at(sc, w, "expected an option after ':' or ','");
                    break;
                }
                if (sc->i - w == 8 && !memcmp(sc->s + w, "internal", 8) && sc->i < sc->len && sc->s[sc->i] == '=') {
                    if ((rc = parse_internal_list(sc, &b, sc->i + 1, sc->len, 0))) break;
                } else if ((rc = apply_option(sc, &b, w, sc->i - w))) {
                    break;
                }
                skip_inline_space(sc);
            } while (sc->i < sc->len && sc->s[sc->i] == ',');
        }
        if (!rc && sc->i < sc->len && sc->s[sc->i] != ';') {
            char q[16];
            quote(sc->s + sc->i, 1, q, sizeof q);
            rc = fail_at(sc, sc->i, "expected '+', ':' or ';', found '%s'", q);
        }
        if (!rc) rc = finish_seq(sc, plan, &b, at);
        seq_clear(&b.seq);
        if (rc) return rc;
    }
}

/* ---- public ------------------------------------------------------------------ */

int plan_parse(struct fusion_plan *plan, const char *text, size_t len, enum plan_form form, const char *origin,
               char *err, size_t err_len)
{
    struct scan sc = {text, len, 0, 1, 0, origin ? origin : "plan", err, err_len};
    if (err && err_len) err[0] = 0;
    if (!text) len = sc.len = 0;
    int rc = check_bytes(&sc);
    if (rc) return rc;
    rc = form == PLAN_FILE_FORM ? parse_file_form(&sc, plan) : parse_inline_form(&sc, plan);
    if (rc == CLSHIM_ENOMEM && err && err_len) snprintf(err, err_len, "%s: out of memory", sc.origin);
    return rc;
}

static int seq_is_prefix(const struct plan_seq *a, const struct plan_seq *b)
{
    if (a->n > b->n) return 0;
    for (uint32_t i = 0; i < a->n; i++)
        if (strcmp(a->names[i], b->names[i])) return 0;
    return 1;
}

int plan_check(const struct fusion_plan *plan, char *err, size_t err_len)
{
    for (uint32_t j = 1; j < plan->nseqs; j++)
        for (uint32_t i = 0; i < j; i++) {
            const struct plan_seq *a = &plan->seqs[i], *b = &plan->seqs[j];
            const char *what = NULL;
            if (a->n == b->n && seq_is_prefix(a, b)) what = "repeats the sequence at";
            else if (seq_is_prefix(a, b)) what = "extends the sequence at";
            else if (seq_is_prefix(b, a)) what = "is a prefix of the sequence at";
            if (what) {
                if (err && err_len)
                    snprintf(err, err_len, "%s: this sequence %s %s (a sequence must not start another)", b->where,
                             what, a->where);
                return CLSHIM_EINVAL;
            }
        }
    return 0;
}

static int read_plan_file(const char *path, char **text, size_t *len, char *err, size_t err_len)
{
    FILE *f = fopen(path, "rb");
    struct stat st;
    const char *why = NULL;
    if (!f) why = strerror(errno);
    else if (fstat(fileno(f), &st) != 0) why = strerror(errno);
    else if (!S_ISREG(st.st_mode)) why = "not a regular file";
    if (why) {
        snprintf(err, err_len, "%s: cannot read the fusion plan (%s)", path, why);
        if (f) fclose(f);
        return CLSHIM_EIO;
    }
    if ((uint64_t)st.st_size > PLAN_MAX_FILE) {
        snprintf(err, err_len, "%s: the fusion plan is larger than %u bytes", path, PLAN_MAX_FILE);
        fclose(f);
        return CLSHIM_EINVAL;
    }
    char *buf = malloc((size_t)st.st_size + 1);
    size_t n = buf ? fread(buf, 1, (size_t)st.st_size, f) : 0;
    int bad = buf && ferror(f);
    fclose(f);
    if (!buf || bad) {
        free(buf);
        snprintf(err, err_len, "%s: cannot read the fusion plan (%s)", path, buf ? "read error" : "out of memory");
        return buf ? CLSHIM_EIO : CLSHIM_ENOMEM;
    }
    *text = buf;
    *len = n;
    return 0;
}

int plan_load(const char *path, const char *inline_text, struct fusion_plan **out, char *err, size_t err_len)
{
    *out = NULL;
    if (err && err_len) err[0] = 0;
    int has_file = path && *path, has_inline = inline_text && *inline_text;
    if (!has_file && !has_inline) return 0;
    struct fusion_plan *plan = calloc(1, sizeof *plan);
    if (!plan) return CLSHIM_ENOMEM;
    int rc = 0;
    if (has_file) {
        char *text = NULL;
        size_t len = 0;
        rc = read_plan_file(path, &text, &len, err, err_len);
        if (!rc) rc = plan_parse(plan, text, len, PLAN_FILE_FORM, path, err, err_len);
        free(text);
    }
    if (!rc && has_inline)
        rc = plan_parse(plan, inline_text, strlen(inline_text), PLAN_INLINE_FORM, "CLSHIM_FUSE", err, err_len);
    if (!rc) rc = plan_check(plan, err, err_len);
    if (rc) {
        plan_free(plan);
        return rc;
    }
    *out = plan;
    return 0;
}

int plan_internal_args_valid(const char *list)
{
    if (!list) return CLSHIM_EINVAL;
    size_t len = strlen(list), i = 0, dot;
    for (;;) {
        size_t e = internal_item_end(list, len, i, &dot);
        if (!e || dot - i > PLAN_MAX_NAME || e - dot - 1 > PLAN_MAX_NAME) return CLSHIM_EINVAL;
        if (e == len) return 0;
        if (list[e] != ',') return CLSHIM_EINVAL;
        i = e + 1;
    }
}

int plan_has_kernel(const struct fusion_plan *plan, const char *name)
{
    if (!plan || !name) return 0;
    for (uint32_t i = 0; i < plan->nseqs; i++)
        for (uint32_t j = 0; j < plan->seqs[i].n; j++)
            if (!strcmp(plan->seqs[i].names[j], name)) return 1;
    return 0;
}

static int ident_char(unsigned char c) { return c == '_' || (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'z'); }

static int plan_has_name(const struct fusion_plan *plan, const unsigned char *name, size_t n)
{
    for (uint32_t i = 0; i < plan->nseqs; i++)
        for (uint32_t j = 0; j < plan->seqs[i].n; j++) {
            const char *candidate = plan->seqs[i].names[j];
            if (candidate[0] == name[0] && strlen(candidate) == n && !memcmp(candidate, name, n)) return 1;
        }
    return 0;
}

int plan_names_in_program(const struct fusion_plan *plan, const void *text, size_t len, int il)
{
    if (!plan || !text) return 0;
    const unsigned char *t = text, *end = t + len;
    if (il) { /* SPIR-V: literal strings are NUL-terminated, at word boundaries */
        for (uint32_t i = 0; i < plan->nseqs; i++)
            for (uint32_t j = 0; j < plan->seqs[i].n; j++) {
                const char *name = plan->seqs[i].names[j];
                size_t n = strlen(name) + 1; /* with its NUL */
                for (const unsigned char *p = t; p < end && (p = memmem(p, (size_t)(end - p), name, n)); p++)
                    if ((size_t)(p - t) % 4 == 0) return 1;
            }
        return 0;
    }
    /* OpenCL C: one pass over the identifiers (a name is at most PLAN_MAX_NAME bytes). */
    for (const unsigned char *p = t; p < end;) {
        if (!ident_char(*p)) {
            p++;
            continue;
        }
        const unsigned char *start = p;
        while (p < end && ident_char(*p)) p++;
        size_t n = (size_t)(p - start);
        if (n <= PLAN_MAX_NAME && !(*start >= '0' && *start <= '9') && plan_has_name(plan, start, n)) return 1;
    }
    return 0;
}

void plan_free(struct fusion_plan *plan)
{
    if (!plan) return;
    for (uint32_t i = 0; i < plan->nseqs; i++) seq_clear(&plan->seqs[i]);
    free(plan->seqs);
    free(plan);
}
