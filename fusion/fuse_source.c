/* fuse_source.c — the fused kernel as generated OpenCL C (route (b); see
 * fuse_source.h), and the join of several programs' sources it needs for
 * kernels of different programs (below). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "fusion/fuse_source.h"

struct text {
    char *p;
    size_t len, cap;
    int oom;
};

static void add(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(struct text *t, const char *fmt, ...)
{
    if (t->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->p ? t->p + t->len : NULL, t->p ? t->cap - t->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->oom = 1;
            return;
        }
        if (t->p && t->len + (size_t)n < t->cap) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = t->cap ? t->cap : 4096;
        while (cap <= t->len + (size_t)n) cap *= 2;
        char *p = realloc(t->p, cap);
        if (!p) {
            t->oom = 1;
            return;
        }
        t->p = p;
        t->cap = cap;
    }
}

static void add_bytes(struct text *t, const char *s, size_t n)
{
    add(t, "%.*s", (int)n, s);
}

static int occurs(const char *hay, size_t len, const char *needle)
{
    return memmem(hay, len, needle, strlen(needle)) != NULL;
}

/* The fused parameter that kernel i's parameter j receives; -1 when none. */
static int param_of(const struct fuse_request *req, const struct fuse_result *res, uint32_t i, uint32_t j)
{
    for (uint32_t p = 0; p < res->num_params; p++)
        if (res->param_kernel[p] == i && res->param_index[p] == j) return (int)p;
    uint32_t cls = req->kernels[i].arg_class[j];
    for (uint32_t p = 0; p < res->num_params; p++)
        if (req->kernels[res->param_kernel[p]].arg_class[res->param_index[p]] == cls) return (int)p;
    return -1;
}

static int guarded(const struct fuse_request *req, const struct fuse_result *res, uint32_t i)
{
    const struct fuse_kernel *k = &req->kernels[i];
    for (uint32_t d = 0; d < k->work_dim; d++)
        if (k->global_size[d] < res->global_size[d]) return 1;
    return 0;
}

static int refuse(char *why, size_t why_len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int refuse(char *why, size_t why_len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, why_len, fmt, ap);
    va_end(ap);
    return CLSHIM_EUNSUPPORTED;
}

static int check(const struct fuse_request *req, const struct fuse_result *res, const struct kernel_info *info,
                 char *why, size_t why_len)
{
    int has_local = res->local_size[0] || res->local_size[1] || res->local_size[2];
    for (uint32_t i = 0; i < req->num_kernels; i++) {
        const struct fuse_kernel *k = &req->kernels[i];
        if (info[i].num_params != k->num_args)
            return refuse(why, why_len, "kernel '%s': %u parameters in the IR, %u arguments set", k->name,
                          (unsigned)info[i].num_params, (unsigned)k->num_args);
        if (info[i].kernel_scope_locals)
            return refuse(why, why_len, "kernel '%s' declares __local variables at kernel scope "
                          "(generated OpenCL C cannot call it)", k->name);
        if (!guarded(req, res, i)) continue;
        uint32_t bad = KI_CALLS_GLOBAL_SIZE | KI_CALLS_NUM_GROUPS | KI_CALLS_LINEAR | (has_local ? 0 : KI_CALLS_LOCAL);
        if (info[i].calls & bad)
            return refuse(why, why_len, "kernel '%s' runs over a smaller range than the fused one and its "
                          "program queries the range (generated OpenCL C cannot remap that)", k->name);
    }
    for (uint32_t p = 0; p < res->num_params; p++) {
        const struct kernel_param_info *fp = &info[res->param_kernel[p]].params[res->param_index[p]];
        for (uint32_t i = 0; i < req->num_kernels; i++)
            for (uint32_t j = 0; j < req->kernels[i].num_args; j++) {
                if (param_of(req, res, i, j) != (int)p) continue;
                const struct kernel_param_info *kp = &info[i].params[j];
                if (kp->addr_space != fp->addr_space || strcmp(kp->type, fp->type))
                    return refuse(why, why_len, "kernel '%s' parameter %u (%s) receives the same argument "
                                  "as a parameter of type %s", req->kernels[i].name, (unsigned)j, kp->type,
                                  fp->type);
            }
    }
    for (uint32_t i = 0; i < req->num_kernels; i++)
        for (uint32_t j = 0; j < req->kernels[i].num_args; j++)
            if (param_of(req, res, i, j) < 0)
                return refuse(why, why_len, "kernel '%s' parameter %u has no fused parameter", req->kernels[i].name,
                              (unsigned)j);
    return 0;
}

static void add_param(struct text *t, const struct kernel_param_info *p, const char *name, uint32_t index)
{
    static const char *const space[] = {"", "__global ", "__constant ", "__local "};
    add(t, "%s", p->addr_space < 4 ? space[p->addr_space] : "");
    if (p->qual & KI_CONST) add(t, "const ");
    if (p->qual & KI_VOLATILE) add(t, "volatile ");
    add(t, "%s %s%s_%u", p->type, p->qual & KI_RESTRICT ? "restrict " : "", name, (unsigned)index);
}

/* fs_generate, calling kernel i by callee[i] (NULL: by its name). */
static int generate(const char *source, size_t len, const struct fuse_request *req, const struct fuse_result *res,
                    const struct kernel_info *info, char *const *callee, struct fs_program *out, char *why,
                    size_t why_len)
{
    memset(out, 0, sizeof *out);
    int rc = check(req, res, info, why, why_len);
    if (rc) return rc;
    char name[32];
    for (unsigned n = 0;; n++) {
        snprintf(name, sizeof name, "clshim_f%u", n);
        if (!occurs(source, len, name)) break;
    }
    struct text t = {0};
    add_bytes(&t, source, len);
    add(&t, "\n\n/* clshim: the kernels ");
    for (uint32_t i = 0; i < req->num_kernels; i++) add(&t, "%s%s", i ? "+" : "", req->kernels[i].name);
    add(&t, " as one (generated, route (b)) */\n__kernel ");
    const uint32_t *wg = info[0].reqd_wg;
    if (wg[0] || wg[1] || wg[2])
        add(&t, "__attribute__((reqd_work_group_size(%u, %u, %u))) ", (unsigned)wg[0], (unsigned)wg[1],
            (unsigned)wg[2]);
    add(&t, "void %s(", name);
    for (uint32_t p = 0; p < res->num_params; p++) {
        if (p) add(&t, ", ");
        add_param(&t, &info[res->param_kernel[p]].params[res->param_index[p]], name, p);
    }
    add(&t, ")\n{\n");
    for (uint32_t i = 0; i < req->num_kernels; i++) {
        const struct fuse_kernel *k = &req->kernels[i];
        if (i && res->barrier_inserted) add(&t, "    barrier(CLK_GLOBAL_MEM_FENCE);\n");
        add(&t, "    ");
        if (guarded(req, res, i)) {
            add(&t, "if (");
            for (uint32_t d = 0, first = 1; d < k->work_dim; d++) {
                if (k->global_size[d] >= res->global_size[d]) continue;
                add(&t, "%sget_global_id(%u) < (size_t)%zu", first ? "" : " && ", (unsigned)d,
                    k->global_offset[d] + k->global_size[d]);
                first = 0;
            }
            add(&t, ") ");
        }
        add(&t, "%s(", callee ? callee[i] : k->name);
        for (uint32_t j = 0; j < k->num_args; j++)
            add(&t, "%s%s_%d", j ? ", " : "", name, param_of(req, res, i, j));
        add(&t, ");\n");
    }
    add(&t, "}\n");
    out->is_buf = malloc(res->num_params ? res->num_params : 1);
    if (t.oom || !out->is_buf) {
        free(t.p);
        free(out->is_buf);
        memset(out, 0, sizeof *out);
        snprintf(why, why_len, "out of memory");
        return CLSHIM_ENOMEM;
    }
    for (uint32_t p = 0; p < res->num_params; p++) {
        uint32_t as = info[res->param_kernel[p]].params[res->param_index[p]].addr_space;
        out->is_buf[p] = as == 1 || as == 2;
    }
    out->text = t.p;
    out->len = t.len;
    snprintf(out->name, sizeof out->name, "%s", name);
    return 0;
}

int fs_generate(const char *source, size_t len, const struct fuse_request *req, const struct fuse_result *res,
                const struct kernel_info *info, struct fs_program *out, char *why, size_t why_len)
{
    return generate(source, len, req, res, info, NULL, out, why, why_len);
}

void fs_program_free(struct fs_program *p)
{
    free(p->text);
    free(p->is_buf);
    memset(p, 0, sizeof *p);
}

/* Several programs: joins them, renames each kernel's callee name and
 * parameter types as the join spells them, and generates. A refusal of the
 * join itself follows from the programs alone: res->permanent is set. */
static int generate_joined(const struct fs_part *parts, uint32_t nparts, const uint32_t *kpart,
                           const struct fuse_request *req, struct fuse_result *res, struct kernel_info *info,
                           struct fs_program *out, char *why, size_t why_len)
{
    res->permanent = 1;
    for (uint32_t p = 1; p < nparts; p++) {
        int rc = fs_join_options(parts[0].options, parts[p].options, why, why_len);
        if (rc) return rc;
    }
    struct fs_join j;
    int rc = fs_join(parts, nparts, &j, why, why_len);
    if (rc) return rc;
    char **callee = calloc(req->num_kernels, sizeof *callee);
    if (!callee) {
        snprintf(why, why_len, "out of memory");
        rc = CLSHIM_ENOMEM;
    }
    for (uint32_t i = 0; i < req->num_kernels && !rc; i++) {
        const char *name = req->kernels[i].name;
        size_t size = strlen(j.prefix) + 16 + strlen(name);
        if (!(callee[i] = malloc(size))) {
            snprintf(why, why_len, "out of memory");
            rc = CLSHIM_ENOMEM;
            break;
        }
        if (!fs_join_name(&j, kpart[i], name, callee[i], size))
            rc = refuse(why, why_len, "kernel '%s': its program's source does not declare that name as such (a "
                        "macro makes it?), so it cannot be renamed apart", name);
        for (uint32_t p = 0; p < info[i].num_params && !rc; p++)
            if (fs_join_type(&j, kpart[i], info[i].params[p].type, sizeof info[i].params[p].type))
                rc = refuse(why, why_len, "kernel '%s' parameter %u: its type renamed is too long", name,
                            (unsigned)p);
    }
    if (!rc) {
        res->permanent = 0; /* what generate refuses depends on the ranges and the arguments too */
        rc = generate(j.text, j.len, req, res, info, callee, out, why, why_len);
    }
    for (uint32_t i = 0; callee && i < req->num_kernels; i++) free(callee[i]);
    free(callee);
    fs_join_free(&j);
    return rc;
}

int fs_fuse(const struct clshim_llvm_api *api, const char *source, size_t len, const struct fuse_request *req,
            struct fuse_result *res, struct fs_program *out, char *why, size_t why_len)
{
    struct fs_part part = {source, len, NULL};
    return fs_fuse_parts(api, &part, 1, NULL, req, res, out, why, why_len);
}

int fs_fuse_parts(const struct clshim_llvm_api *api, const struct fs_part *parts, uint32_t nparts,
                  const uint32_t *kpart, const struct fuse_request *req, struct fuse_result *res,
                  struct fs_program *out, char *why, size_t why_len)
{
    memset(out, 0, sizeof *out);
    memset(res, 0, sizeof *res);
    struct fuse_request analysis = *req;
    analysis.internal = 0;
    analysis.consts = NULL; /* the generated kernel passes every scalar as an argument */
    analysis.num_consts = 0;
    int rc = api->fuse(&analysis, res);
    if (rc) {
        snprintf(why, why_len, "%s", res->reason[0] ? res->reason : clshim_strerror(rc));
        return rc;
    }
    api->free(res->bitcode);
    res->bitcode = NULL;
    for (size_t i = 0; i < req->num_kernels && !rc; i++)
        if (req->kernels[i].work_dim != res->work_dim)
            rc = refuse(why, why_len, "the kernels have different work dimensions: generated OpenCL C does "
                        "not remap work-items (the IR route does)");
    struct kernel_info *info = calloc(req->num_kernels, sizeof *info);
    if (!info) {
        snprintf(why, why_len, "out of memory");
        rc = CLSHIM_ENOMEM;
    }
    for (size_t i = 0; i < req->num_kernels && !rc; i++) {
        const struct fuse_kernel *k = &req->kernels[i];
        char err[256] = "";
        rc = api->kernel_info(k->module_bc, k->module_size, k->name, &info[i], err, sizeof err);
        if (rc) snprintf(why, why_len, "kernel '%s': %s", k->name, err);
    }
    if (!rc && nparts > 1) {
        rc = generate_joined(parts, nparts, kpart, req, res, info, out, why, why_len);
        if (rc != CLSHIM_EUNSUPPORTED) res->permanent = 0; /* out of memory is not the programs' doing */
    }
    else if (!rc) rc = generate(parts[0].source, parts[0].len, req, res, info, NULL, out, why, why_len);
    for (size_t i = 0; info && i < req->num_kernels; i++) api->free(info[i].params);
    free(info);
    if (rc) {
        api->free(res->param_kernel);
        api->free(res->param_index);
        res->param_kernel = res->param_index = NULL;
    }
    return rc;
}

/* ---- joining programs (fs_join; fuse_source.h says what is renamed and why) ----
 *
 * The scanner below is not a parser: it finds the names a source declares
 * at file scope (functions, variables, typedefs, struct/union/enum tags,
 * enumerators) and the macros it defines, well enough to rename them. What
 * it gets wrong can only make the joined program fail to compile — a name
 * it misses collides (a redefinition error), a name it adds by mistake is
 * renamed consistently within its own program — and a failed build of a
 * fused program is a refusal (the original kernels run). What could change
 * the code silently is refused outright: #include (a header seen by two
 * programs, its guards), #undef of a name the program did not define
 * (options' -D), pragmas that hold beyond the program (FP_CONTRACT), and a
 * renamed name in a conditional directive (`#ifdef helper` would turn true).
 */

/* A set of names (a sorted array once built). */
struct fs_names {
    char **v;
    uint32_t n, cap;
    int oom;
};

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int names_has(const struct fs_names *s, const char *p, size_t len)
{
    for (uint32_t i = 0; i < s->n; i++)
        if (strlen(s->v[i]) == len && !memcmp(s->v[i], p, len)) return 1;
    return 0;
}

static void names_add(struct fs_names *s, const char *p, size_t len)
{
    if (s->oom || names_has(s, p, len)) return;
    if (s->n == s->cap) {
        uint32_t cap = s->cap ? 2 * s->cap : 16;
        char **v = realloc(s->v, cap * sizeof *v);
        if (!v) {
            s->oom = 1;
            return;
        }
        s->v = v;
        s->cap = cap;
    }
    if (!(s->v[s->n] = strndup(p, len))) s->oom = 1;
    else s->n++;
}

static void names_free(struct fs_names *s)
{
    for (uint32_t i = 0; i < s->n; i++) free(s->v[i]);
    free(s->v);
    memset(s, 0, sizeof *s);
}

static int is_id0(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static int is_id(char c)
{
    return is_id0(c) || (c >= '0' && c <= '9');
}

/* Words that are never a declared name (keywords, qualifiers, attributes). */
static int keyword(const char *p, size_t n)
{
    static const char *const kw[] = {
        "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else", "enum", "extern",
        "float", "for", "goto", "if", "inline", "int", "long", "register", "restrict", "return", "short", "signed",
        "sizeof", "static", "struct", "switch", "typedef", "union", "unsigned", "void", "volatile", "while",
        "bool", "half", "uchar", "ushort", "uint", "ulong", "size_t", "_Bool", "_Alignas", "_Alignof",
        "_Static_assert", "__kernel", "kernel", "__global", "global", "__local", "local", "__constant", "constant",
        "__private", "private", "__generic", "generic", "__read_only", "read_only", "__write_only", "write_only",
        "__read_write", "read_write", "__attribute__", "__attribute", "__restrict", "__restrict__", "__inline",
        "__inline__", "__const", "__volatile__", "typeof", "__typeof__", "defined", NULL};
    for (int i = 0; kw[i]; i++)
        if (strlen(kw[i]) == n && !memcmp(kw[i], p, n)) return 1;
    return 0;
}

/* One program's source, scanned. */
struct scan {
    const char *s;
    size_t len, at;
    struct fs_names decl;    /* declared at file scope (renamed) */
    struct fs_names macros;  /* #define'd (#undef'd after the program) */
    struct fs_names cond;    /* identifiers of #if/#ifdef/#ifndef/#elif lines */
    struct fs_names ext;     /* extensions enabled (disabled again after the program) */
};

/* Skips white space, comments and backslash-newlines (in a directive, up
 * to the end of its line). */
static void skip_space(struct scan *sc, int in_directive)
{
    while (sc->at < sc->len) {
        const char *p = sc->s + sc->at;
        size_t left = sc->len - sc->at;
        if (*p == '\\' && left > 1 && p[1] == '\n') sc->at += 2;
        else if (*p == '\n' && in_directive) return;
        else if (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == '\f' || *p == '\v') sc->at++;
        else if (left > 1 && p[0] == '/' && p[1] == '/') {
            while (sc->at < sc->len && sc->s[sc->at] != '\n') {
                if (sc->s[sc->at] == '\\' && sc->at + 1 < sc->len && sc->s[sc->at + 1] == '\n') sc->at++;
                sc->at++;
            }
        } else if (left > 1 && p[0] == '/' && p[1] == '*') {
            const char *end = memmem(p + 2, left - 2, "*/", 2);
            sc->at = end ? (size_t)(end - sc->s) + 2 : sc->len;
        } else return;
    }
}

/* The next token: kind 'i' identifier, '"' a literal, else its first char
 * ('#' only at a line start); 0 at the end. */
static char next_token(struct scan *sc, const char **tok, size_t *tok_len, int in_directive, int *line_start)
{
    size_t before = sc->at;
    skip_space(sc, in_directive);
    if (line_start) {
        int ls = before == 0;
        for (size_t i = before; i < sc->at; i++)
            if (sc->s[i] == '\n' && !(i > 0 && sc->s[i - 1] == '\\')) ls = 1;
        *line_start = ls;
    }
    if (sc->at >= sc->len || (in_directive && sc->s[sc->at] == '\n')) return 0;
    const char *p = sc->s + sc->at;
    *tok = p;
    if (is_id0(*p)) {
        size_t n = 1;
        while (sc->at + n < sc->len && is_id(p[n])) n++;
        sc->at += n;
        *tok_len = n;
        return 'i';
    }
    if (*p == '"' || *p == '\'') {
        size_t n = 1;
        while (sc->at + n < sc->len && p[n] != *p && p[n] != '\n') n += p[n] == '\\' ? 2 : 1;
        sc->at = sc->at + n + 1 > sc->len ? sc->len : sc->at + n + 1;
        *tok_len = 1;
        return '"';
    }
    if (*p >= '0' && *p <= '9') { /* a number, suffixes and exponents included */
        size_t n = 1;
        while (sc->at + n < sc->len && (is_id(p[n]) || p[n] == '.' ||
                                        ((p[n] == '+' || p[n] == '-') && (p[n - 1] == 'e' || p[n - 1] == 'E' ||
                                                                          p[n - 1] == 'p' || p[n - 1] == 'P'))))
            n++;
        sc->at += n;
        *tok_len = n;
        return '0';
    }
    sc->at++;
    *tok_len = 1;
    return *p;
}

static int word_is(const char *p, size_t n, const char *w)
{
    return strlen(w) == n && !memcmp(p, w, n);
}

/* A preprocessor directive (the '#' consumed). */
static int directive(struct scan *sc, uint32_t part, char *why, size_t why_len)
{
    const char *t;
    size_t n;
    char k = next_token(sc, &t, &n, 1, NULL);
    if (k != 'i') goto rest; /* a null directive, or a line marker */
    if (word_is(t, n, "include") || word_is(t, n, "import") || word_is(t, n, "include_next"))
        return refuse(why, why_len, "program %u has #include (a header shared by the programs cannot be "
                      "renamed apart)", (unsigned)part + 1);
    if (word_is(t, n, "define")) {
        if (next_token(sc, &t, &n, 1, NULL) == 'i') names_add(&sc->macros, t, n);
    } else if (word_is(t, n, "undef")) {
        if (next_token(sc, &t, &n, 1, NULL) == 'i' && !names_has(&sc->macros, t, n))
            return refuse(why, why_len, "program %u has #undef %.*s, a macro it does not define (it would "
                          "hold for the programs after it)", (unsigned)part + 1, (int)n, t);
    } else if (word_is(t, n, "pragma")) {
        const char *w[4];
        size_t wn[4];
        int nw = 0;
        char c;
        while (nw < 4 && (c = next_token(sc, &w[nw], &wn[nw], 1, NULL)) != 0) nw += c == 'i';
        int ok = nw >= 1 && (word_is(w[0], wn[0], "unroll") || word_is(w[0], wn[0], "nounroll"));
        ok |= nw == 4 && word_is(w[0], wn[0], "OPENCL") && word_is(w[1], wn[1], "EXTENSION") &&
              word_is(w[3], wn[3], "enable");
        if (!ok)
            return refuse(why, why_len, "program %u has a #pragma other than OPENCL EXTENSION ...: enable "
                          "(it could hold for the programs after it)", (unsigned)part + 1);
        if (nw == 4) names_add(&sc->ext, w[2], wn[2]);
    } else if (word_is(t, n, "if") || word_is(t, n, "ifdef") || word_is(t, n, "ifndef") || word_is(t, n, "elif")) {
        char c;
        while ((c = next_token(sc, &t, &n, 1, NULL)) != 0)
            if (c == 'i') names_add(&sc->cond, t, n);
    }
rest:
    while (next_token(sc, &t, &n, 1, NULL)) continue;
    return 0;
}

/* Scans one program: its file-scope names, its macros, the identifiers of
 * its conditional directives. */
static int scan_source(struct scan *sc, uint32_t part, char *why, size_t why_len)
{
    int brace = 0, paren = 0, in_init = 0, line_start;
    int enum_at = -1;     /* the brace depth of an enum's list (its enumerators), else -1 */
    int tag_next = 0;     /* the last word was struct/union/enum */
    int enum_next = 0;    /* ... and it was enum */
    int enum_pending = 0; /* an enum keyword seen, its '{' not yet */
    const char *prev = NULL; /* the identifier just before, at file scope */
    size_t prev_len = 0;
    char prev_kind = 0, k;
    const char *t;
    size_t n;
    while ((k = next_token(sc, &t, &n, 0, &line_start)) != 0) {
        if (k == '#' && line_start) {
            int rc = directive(sc, part, why, why_len);
            if (rc) return rc;
            prev = NULL;
            continue;
        }
        int top = brace == 0 && paren == 0;
        if (k == 'i') {
            /* Joined, each kernel is renamed: a function's own name would
             * read the new one (sizeof(__func__) too). */
            if (word_is(t, n, "__func__") || word_is(t, n, "__FUNCTION__") || word_is(t, n, "__PRETTY_FUNCTION__"))
                return refuse(why, why_len, "program %u reads a function's own name (%.*s), which joined programs "
                              "rename", (unsigned)part + 1, (int)n, t);
            if (tag_next && !keyword(t, n)) names_add(&sc->decl, t, n);
            if (enum_at >= 0 && brace == enum_at && (prev_kind == '{' || prev_kind == ',') && !keyword(t, n))
                names_add(&sc->decl, t, n);
            enum_pending |= enum_next = word_is(t, n, "enum");
            tag_next = word_is(t, n, "struct") || word_is(t, n, "union") || enum_next;
            if (top && !in_init && prev && (word_is(t, n, "__attribute__") || word_is(t, n, "__attribute")))
                names_add(&sc->decl, prev, prev_len); /* typedef float f4 __attribute__((...)); */
            prev = top && !keyword(t, n) ? t : NULL;
            prev_len = n;
            prev_kind = k;
            continue;
        }
        tag_next = 0;
        if (top && !in_init && prev && (k == '(' || k == '=' || k == ';' || k == ',' || k == '['))
            names_add(&sc->decl, prev, prev_len);
        switch (k) {
        case '{':
            if (enum_pending && enum_at < 0) enum_at = brace + 1;
            enum_pending = 0;
            brace++;
            break;
        case '}':
            if (brace > 0) brace--;
            if (enum_at > brace) enum_at = -1;
            break;
        case '(': paren++; break;
        case ')': if (paren > 0) paren--; break;
        case '=': if (top) in_init = 1; break;
        case ',': if (top) in_init = 0; break;
        case ';':
            if (top) in_init = enum_pending = 0;
            break;
        }
        prev = NULL;
        prev_kind = k;
    }
    return 0;
}

/* Whether the text of the program contains `needle`. */
static int spells(const struct fs_part *p, const char *needle)
{
    return memmem(p->source, p->len, needle, strlen(needle)) != NULL;
}

void fs_join_free(struct fs_join *j)
{
    for (uint32_t i = 0; j->names && i < j->nparts; i++) names_free(&j->names[i]);
    free(j->names);
    free(j->text);
    memset(j, 0, sizeof *j);
}

int fs_join(const struct fs_part *parts, uint32_t n, struct fs_join *out, char *why, size_t why_len)
{
    memset(out, 0, sizeof *out);
    for (unsigned i = 0;; i++) { /* a prefix no program spells */
        snprintf(out->prefix, sizeof out->prefix, "clshim_j%u_", i);
        uint32_t p;
        for (p = 0; p < n && !spells(&parts[p], out->prefix); p++) continue;
        if (p == n) break;
    }
    out->nparts = n;
    if (!(out->names = calloc(n ? n : 1, sizeof *out->names))) goto oom;
    struct text t = {0};
    add(&t, "%s", "/* clshim: programs joined (route (b)); each one's file-scope names renamed */\n");
    int rc = 0;
    for (uint32_t p = 0; p < n && !rc; p++) {
        struct scan sc = {parts[p].source, parts[p].len, 0, {0}, {0}, {0}, {0}};
        /* A name pasted together (##) is not seen by the scan, and its
         * pieces can spell a function's own name: no join. */
        if (spells(&parts[p], "##")) {
            rc = refuse(why, why_len, "program %u pastes tokens (##), which could spell __func__, and joined "
                        "programs rename their functions", (unsigned)p + 1);
            break;
        }
        rc = scan_source(&sc, p, why, why_len);
        for (uint32_t i = 0; !rc && i < sc.decl.n; i++) {
            const char *name = sc.decl.v[i];
            if (names_has(&sc.macros, name, strlen(name)))
                rc = refuse(why, why_len, "program %u defines '%s' both as a macro and as a name", (unsigned)p + 1,
                            name);
            else if (names_has(&sc.cond, name, strlen(name)))
                rc = refuse(why, why_len, "program %u tests '%s' in a conditional directive, and that name is "
                            "renamed", (unsigned)p + 1, name);
        }
        if (sc.decl.oom || sc.macros.oom || sc.cond.oom || sc.ext.oom) rc = CLSHIM_ENOMEM;
        if (!rc) {
            for (uint32_t i = 0; i < sc.decl.n; i++)
                add(&t, "#define %s %s%u_%s\n", sc.decl.v[i], out->prefix, (unsigned)p, sc.decl.v[i]);
            add(&t, "%s", "#line 1\n");
            add_bytes(&t, parts[p].source, parts[p].len);
            add(&t, "%s", "\n");
            for (uint32_t s = 0; s < 2; s++) {
                const struct fs_names *set = s ? &sc.macros : &sc.decl;
                for (uint32_t i = 0; i < set->n; i++) add(&t, "#undef %s\n", set->v[i]);
            }
            /* A program starts with every extension disabled (OpenCL C 6.1 "#pragma"): an enabled
             * one would change the next program's code (a double literal stays double). */
            for (uint32_t i = 0; i < sc.ext.n; i++) add(&t, "#pragma OPENCL EXTENSION %s : disable\n", sc.ext.v[i]);
            if (sc.decl.n) qsort(sc.decl.v, sc.decl.n, sizeof *sc.decl.v, cmp_str);
            out->names[p] = sc.decl;
            memset(&sc.decl, 0, sizeof sc.decl);
        }
        names_free(&sc.decl);
        names_free(&sc.macros);
        names_free(&sc.cond);
        names_free(&sc.ext);
    }
    if (rc) {
        free(t.p);
        fs_join_free(out);
        if (rc == CLSHIM_ENOMEM) snprintf(why, why_len, "out of memory");
        return rc;
    }
    if (t.oom) {
        free(t.p);
        goto oom;
    }
    out->text = t.p;
    out->len = t.len;
    return 0;
oom:
    fs_join_free(out);
    snprintf(why, why_len, "out of memory");
    return CLSHIM_ENOMEM;
}

int fs_join_name(const struct fs_join *j, uint32_t part, const char *name, char *out, size_t len)
{
    const struct fs_names *s = &j->names[part];
    const char *key = name;
    if (!s->n || !bsearch(&key, s->v, s->n, sizeof *s->v, cmp_str)) return 0;
    snprintf(out, len, "%s%u_%s", j->prefix, (unsigned)part, name);
    return 1;
}

int fs_join_type(const struct fs_join *j, uint32_t part, char *type, size_t len)
{
    char out[256];
    size_t o = 0;
    for (const char *p = type; *p;) {
        size_t n = 1;
        if (is_id0(*p))
            while (is_id(p[n])) n++;
        char word[256], renamed[300];
        const char *piece = p;
        size_t pn = n;
        if (is_id0(*p) && n < sizeof word) {
            memcpy(word, p, n);
            word[n] = 0;
            if (fs_join_name(j, part, word, renamed, sizeof renamed)) piece = renamed, pn = strlen(renamed);
        }
        if (o + pn >= sizeof out || o + pn >= len) return -1;
        memcpy(out + o, piece, pn);
        o += pn;
        p += n;
    }
    out[o] = 0;
    memcpy(type, out, o + 1);
    return 0;
}

/* Build options split at white space (double quotes group), without those
 * that change no code of a program that includes nothing. */
static int option_words(const char *s, char ***out, uint32_t *n)
{
    *out = NULL;
    *n = 0;
    uint32_t cap = 0;
    int skip_next = 0;
    while (s && *s) {
        while (*s == ' ' || *s == '\t' || *s == '\n') s++;
        if (!*s) break;
        char w[1024];
        size_t o = 0;
        int quoted = 0;
        for (; *s && (quoted || (*s != ' ' && *s != '\t' && *s != '\n')); s++) {
            if (*s == '"') quoted = !quoted;
            else if (o + 1 < sizeof w) w[o++] = *s;
        }
        w[o] = 0;
        int harmless = skip_next || !strcmp(w, "-cl-kernel-arg-info") || !strcmp(w, "-w") || !strcmp(w, "-g") ||
                       !strncmp(w, "-I", 2);
        skip_next = !strcmp(w, "-I"); /* its directory follows */
        if (harmless) continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 8;
            char **v = realloc(*out, cap * sizeof *v);
            if (!v) return -1;
            *out = v;
        }
        if (!((*out)[*n] = strdup(w))) return -1;
        (*n)++;
    }
    return 0;
}

int fs_join_options(const char *a, const char *b, char *why, size_t why_len)
{
    char **wa, **wb;
    uint32_t na, nb;
    int rc = option_words(a, &wa, &na) | option_words(b, &wb, &nb);
    uint32_t i;
    for (i = 0; !rc && i < na && i < nb && !strcmp(wa[i], wb[i]); i++) continue;
    if (rc) snprintf(why, why_len, "out of memory"), rc = CLSHIM_ENOMEM;
    else if (i < na || i < nb)
        rc = refuse(why, why_len, "the kernels' programs were built with options that differ: '%s' against '%s' "
                    "(joined, one program would be compiled with the other's)", i < na ? wa[i] : "(none)",
                    i < nb ? wb[i] : "(none)");
    for (i = 0; wa && i < na; i++) free(wa[i]);
    for (i = 0; wb && i < nb; i++) free(wb[i]);
    free(wa);
    free(wb);
    return rc;
}
