/* preproc.c — header discovery by the real preprocessor, with manifests
 * (preproc.h). */
#include "cache/preproc.h"
#include "cache/snapshot.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/clang.h"
#include "common/error.h"

/* 2: probed places, absent ones as ABSENT_MARK; 3: up to MANIFEST_VARIANTS
 * variants (one per preprocessor run that found other files) separated by
 * an empty line, the newest first (and no longer keyed by the working
 * directory) */
#define MANIFEST_MAGIC "clshim-manifest 3\n"
#define ABSENT_MARK "--------------------------------" /* 32 characters, where a hash would be */
#define MANIFEST_VARIANTS 8 /* kept per manifest; an older one is dropped */
#define MAX_ARGS 1024

/* ---- the device's predefined macros ------------------------------------- */

/* The value of "name=" in the identity text, up to the line end. */
static int identity_field(const char *identity, const char *name, char *out, size_t out_len)
{
    size_t n = strlen(name);
    for (const char *p = identity; p && *p;) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        if (len > n && !strncmp(p, name, n) && p[n] == '=') {
            snprintf(out, out_len, "%.*s", (int)(len - n - 1), p + n + 1);
            return 0;
        }
        p = eol ? eol + 1 : NULL;
    }
    out[0] = 0;
    return -1;
}

/* "OpenCL C 1.2 pocl" -> major 1, minor 2 (the first "d.d" in the text). */
static int parse_version(const char *text, int *major, int *minor)
{
    for (const char *p = text; *p; p++)
        if (isdigit((unsigned char)p[0]) && p[1] == '.' && isdigit((unsigned char)p[2])) {
            *major = p[0] - '0';
            *minor = p[2] - '0';
            return 0;
        }
    return -1;
}

struct args {
    char *arg[MAX_ARGS + 1];
    int count;
    int oom;
};

static void add_arg(struct args *a, const char *fmt, const char *value)
{
    if (a->oom) return;
    if (a->count == MAX_ARGS) {
        a->oom = 1;
        return;
    }
    char *s = NULL;
    if (asprintf(&s, fmt, value) < 0) s = NULL;
    if (!s) {
        a->oom = 1;
        return;
    }
    a->arg[a->count++] = s;
    a->arg[a->count] = NULL;
}

static void free_args(struct args *a)
{
    for (int i = 0; i < a->count; i++) free(a->arg[i]);
    a->count = 0;
}

static void add_predefines(struct args *a, const char *identity, int *has_default_std, char *std, size_t std_len)
{
    char value[8192];
    identity_field(identity, "device.extensions", value, sizeof value);
    for (char *save = NULL, *ext = strtok_r(value, " ", &save); ext; ext = strtok_r(NULL, " ", &save))
        add_arg(a, "-D%s=1", ext);
    int major, minor;
    identity_field(identity, "device.version", value, sizeof value);
    if (parse_version(value, &major, &minor) == 0) {
        char v[16];
        snprintf(v, sizeof v, "%d", major * 100 + minor * 10);
        add_arg(a, "-D__OPENCL_VERSION__=%s", v);
    }
    add_arg(a, "-D__ENDIAN_LITTLE__=%s", "1");
    add_arg(a, "-D__IMAGE_SUPPORT__=%s", "1");
    identity_field(identity, "platform.name", value, sizeof value);
    if (strstr(value, "Portable Computing Language")) {
        identity_field(identity, "device.address_bits", value, sizeof value);
        add_arg(a, "-DPOCL_DEVICE_ADDRESS_BITS=%s", value[0] ? value : "64");
        add_arg(a, "-D__USE_CLANG_OPENCL_C_H%s", "");
    }
    identity_field(identity, "device.opencl_c", value, sizeof value);
    *has_default_std = parse_version(value, &major, &minor) == 0;
    snprintf(std, std_len, "-cl-std=CL%d.%d", *has_default_std ? major : 1, *has_default_std ? minor : 2);
}

/* The application options the preprocessor must see; *has_std when -cl-std
 * is among them. -1 on a malformed option list. */
static int add_app_options(struct args *a, const char *options, int *has_std)
{
    static const char *const with_value[] = {"-D", "-U", "-I", "-include", "-imacros", "-isystem", "-iquote",
                                             "-idirafter"};
    static const char *const math[] = {"-cl-fast-relaxed-math", "-cl-finite-math-only",
                                       "-cl-unsafe-math-optimizations", "-cl-single-precision-constant",
                                       "-cl-denorms-are-zero", "-cl-no-signed-zeros", "-cl-mad-enable"};
    char **argv;
    int argc;
    if (key_split_options(options, &argv, &argc) != 0) return -1;
    for (int i = 0; i < argc; i++) {
        const char *t = argv[i];
        int taken = 0;
        for (size_t w = 0; w < sizeof with_value / sizeof *with_value && !taken; w++) {
            size_t n = strlen(with_value[w]);
            if (strncmp(t, with_value[w], n) != 0) continue;
            if (t[n] == 0 && i + 1 < argc) {
                add_arg(a, "%s", t);
                add_arg(a, "%s", argv[++i]);
                taken = 1;
            } else if (t[n]) { /* joined: -DX, -Idir, -includefile.h */
                add_arg(a, "%s", t);
                taken = 1;
            }
        }
        if (taken) continue;
        if (!strncmp(t, "-cl-std=", 8)) *has_std = 1;
        if (!strncmp(t, "-cl-std=", 8) || !strncmp(t, "-cl-ext=", 8) || !strcmp(t, "-nostdinc")) {
            add_arg(a, "%s", t);
            continue;
        }
        for (size_t m = 0; m < sizeof math / sizeof *math; m++)
            if (!strcmp(t, math[m])) add_arg(a, "%s", t);
    }
    key_free_options(argv, argc);
    return 0;
}

/* ---- embedded headers: a private directory ------------------------------- */

struct embed_dir {
    char path[256];
    char **made; /* files and directories created, in creation order */
    size_t nmade;
};

static int remember(struct embed_dir *d, const char *path)
{
    char **m = realloc(d->made, (d->nmade + 1) * sizeof *m);
    if (!m) return -1;
    d->made = m;
    if (!(m[d->nmade] = strdup(path))) return -1;
    d->nmade++;
    return 0;
}

static void remove_embed_dir(struct embed_dir *d)
{
    for (size_t i = d->nmade; i-- > 0;) {
        if (unlink(d->made[i]) != 0) rmdir(d->made[i]);
        free(d->made[i]);
    }
    free(d->made);
    if (d->path[0]) rmdir(d->path);
    memset(d, 0, sizeof *d);
}

static int write_embedded(struct embed_dir *d, const struct key_source *in, char *why, size_t why_len)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(d->path, sizeof d->path, "%s/clshim-pp.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(d->path)) {
        snprintf(why, why_len, "cannot make a directory for embedded headers: %s", strerror(errno));
        d->path[0] = 0;
        return -1;
    }
    for (size_t i = 0; i < in->nembedded; i++) {
        const char *name = in->embedded[i].name;
        if (name[0] == '/' || strstr(name, "..") || strlen(name) > 2000) {
            snprintf(why, why_len, "embedded header name %.200s", name);
            return -1;
        }
        char path[2300];
        snprintf(path, sizeof path, "%s/%s", d->path, name);
        for (char *s = path + strlen(d->path) + 1; (s = strchr(s, '/')); s++) {
            *s = 0;
            if (mkdir(path, 0700) == 0 && remember(d, path) != 0) return -1;
            *s = '/';
        }
        FILE *f = fopen(path, "wbx");
        if (!f || remember(d, path) != 0) {
            if (f) fclose(f);
            snprintf(why, why_len, "cannot write embedded header %.200s", name);
            return -1;
        }
        int ok = fwrite(in->embedded[i].source, 1, in->embedded[i].len, f) == in->embedded[i].len;
        if (fclose(f) != 0 || !ok) {
            snprintf(why, why_len, "cannot write embedded header %.200s", name);
            return -1;
        }
    }
    return 0;
}

/* ---- preprocessor mode ---------------------------------------------------- */

void preproc_free_files(char **files, size_t n)
{
    for (size_t i = 0; files && i < n; i++) free(files[i]);
    free(files);
}

/* Make's dependency syntax as clang writes it: "k: a b\ c \<newline> d". */
static int parse_deps(const char *text, const char *skip_dir, char ***files, size_t *n)
{
    *files = NULL;
    *n = 0;
    const char *p = strchr(text, ':');
    if (!p) return -1;
    p++;
    size_t tlen = strlen(p);
    char *tok = malloc(tlen + 1);
    if (!tok) return -1;
    size_t skip_len = skip_dir ? strlen(skip_dir) : 0;
    int rc = 0;
    while (*p && rc == 0) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || (*p == '\\' && (p[1] == '\n' || p[1] == '\r')))
            p++;
        if (!*p) break;
        size_t len = 0;
        while (*p && *p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            if (*p == '\\' && (p[1] == ' ' || p[1] == '#' || p[1] == '\\')) p++;
            else if (*p == '\\' && (p[1] == '\n' || p[1] == '\r')) break;
            else if (*p == '$' && p[1] == '$') p++;
            tok[len++] = *p++;
        }
        tok[len] = 0;
        if (!len || (skip_len && !strncmp(tok, skip_dir, skip_len) && tok[skip_len] == '/')) continue;
        char **f = realloc(*files, (*n + 1) * sizeof *f);
        if (!f || !(f[*n] = strdup(tok))) {
            if (f) *files = f;
            rc = -1;
            break;
        }
        *files = f;
        (*n)++;
    }
    free(tok);
    if (rc) {
        preproc_free_files(*files, *n);
        *files = NULL;
        *n = 0;
    }
    return rc;
}

/* The preprocessor's command line for `in` on the device of `identity`:
 * clang's mode (`mode`, NULL-terminated) first, then the driver's
 * predefines, `extra`, the embedded headers' directory (written into d),
 * the application's options, the OpenCL C version, and the source on
 * standard input. 0, or -1 with why. */
static int preprocessor_args(struct args *a, struct embed_dir *d, const struct key_source *in, const char *identity,
                             const char *const *mode, const char *const *extra, char *why, size_t why_len)
{
    add_arg(a, "%s", "-x");
    add_arg(a, "%s", "cl");
    for (size_t i = 0; mode[i]; i++) add_arg(a, "%s", mode[i]);
    int has_default_std = 0, has_std = 0;
    char std[32];
    add_predefines(a, identity ? identity : "", &has_default_std, std, sizeof std);
    for (size_t i = 0; extra && extra[i]; i++) add_arg(a, "%s", extra[i]);
    int rc = 0;
    if (in->nembedded) {
        rc = write_embedded(d, in, why, why_len);
        add_arg(a, "-I%s", d->path);
    }
    if (rc == 0 && add_app_options(a, in->options, &has_std) != 0) {
        snprintf(why, why_len, "an unclosed quote in the build options");
        rc = -1;
    }
    if (!has_std) add_arg(a, "%s", std);
    add_arg(a, "%s", "-");
    if (rc == 0 && a->oom) {
        snprintf(why, why_len, "out of memory or too many options");
        rc = -1;
    }
    return rc;
}

int preproc_files(const struct key_source *in, const char *identity, char ***files, size_t *n, char *why,
                  size_t why_len)
{
    *files = NULL;
    *n = 0;
    struct args a = {.count = 0};
    struct embed_dir d = {.nmade = 0};
    static const char *const mode[] = {"-M", "-MT", "k", NULL};
    int rc = preprocessor_args(&a, &d, in, identity, mode, NULL, why, why_len);
    if (rc == 0) {
        char *out = NULL, err[512];
        size_t out_len = 0;
        int crc = clang_run((const char *const *)a.arg, in->source, in->len, &out, &out_len, err,
                                     sizeof err);
        if (crc != 0) {
            snprintf(why, why_len, "%s", err[0] ? err : "the preprocessor failed");
            rc = -1;
        } else if (parse_deps(out, d.path[0] ? d.path : NULL, files, n) != 0) {
            snprintf(why, why_len, "cannot read the preprocessor's dependency list");
            rc = -1;
        }
        free(out);
    }
    remove_embed_dir(&d);
    free_args(&a);
    return rc;
}

/* ---- time and place after macro expansion ---------------------------------- */

#define TIME_MARK "__clshim_time_or_place__"

/* The YAML of a clang VFS overlay (-ivfsoverlay) that puts each snapshot
 * file's bytes (written into dir) at its path; NULL when out of room. */
static char *write_overlay(const struct key_snapshot *snap, const char *dir)
{
    struct key_buf y = {0};
    static const char head[] = "{ 'version': 0, 'roots': [\n";
    key_append(&y, head, sizeof head - 1);
    for (size_t i = 0; snap && i < snap->n; i++) {
        const struct snap_file *f = &snap->files[i];
        char file[4200], line[17000];
        snprintf(file, sizeof file, "%s/%zu", dir, i);
        int fd = open(file, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        int ok = fd >= 0 && write(fd, f->bytes, f->len) == (ssize_t)f->len;
        if (fd >= 0) close(fd);
        if (!ok || strchr(f->path, '\'') || strchr(f->path, '\n')) {
            key_free(&y);
            return NULL;
        }
        int n = snprintf(line, sizeof line, "%s{ 'type': 'file', 'name': '%s%s', 'external-contents': '%s' }\n",
                         i ? "," : "", f->driver_dir ? "/clshim-driver-dir/" : "", f->path, file);
        key_append(&y, line, (size_t)n);
    }
    key_append(&y, "] }\n", 4);
    key_append(&y, "", 1);
    return y.oom ? (key_free(&y), NULL) : y.data;
}

int preproc_expands_time(const struct key_source *in, const char *identity, const struct key_snapshot *snap,
                         char *why, size_t why_len)
{
    struct args a = {.count = 0};
    struct embed_dir d = {.nmade = 0};
    char vdir[256];
    const char *tmp = getenv("TMPDIR");
    snprintf(vdir, sizeof vdir, "%s/clshim-vfs.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(vdir)) {
        snprintf(why, why_len, "cannot make a directory to check the macros: %s", strerror(errno));
        return -1;
    }
    char overlay[300];
    snprintf(overlay, sizeof overlay, "%s/overlay.yaml", vdir);
    char *yaml = write_overlay(snap, vdir);
    int rc = yaml ? 0 : -1;
    if (!yaml) snprintf(why, why_len, "cannot write the snapshot for the macro check");
    FILE *y = rc == 0 ? fopen(overlay, "wx") : NULL;
    if (rc == 0 && (!y || fputs(yaml, y) < 0)) {
        snprintf(why, why_len, "cannot write the snapshot for the macro check");
        rc = -1;
    }
    if (y) fclose(y);
    free(yaml);
    /* Every way a time or place macro can arise (token pasting, -D values,
     * headers) ends in the preprocessor's own expansion: redefined, they
     * leave a mark; the main source's __FILE__ is "<stdin>" here (the
     * driver's: a temporary path of its own, another at every build). */
    static const char *const mode[] = {"-E", "-P", NULL};
    const char *extra[] = {"-Wno-builtin-macro-redefined", "-D__TIME__=" TIME_MARK, "-D__DATE__=" TIME_MARK,
                           "-D__TIMESTAMP__=" TIME_MARK, "-ivfsoverlay", overlay, "-iquote/clshim-driver-dir", NULL};
    if (rc == 0) rc = preprocessor_args(&a, &d, in, identity, mode, extra, why, why_len);
    if (rc == 0) {
        char *out = NULL, err[512];
        size_t out_len = 0;
        if (clang_run((const char *const *)a.arg, in->source, in->len, &out, &out_len, err, sizeof err) != 0) {
            snprintf(why, why_len, "the macro check's preprocessor failed: %s", err[0] ? err : "?");
            rc = -1;
        } else if (memmem(out, out_len, TIME_MARK, sizeof TIME_MARK - 1)) {
            snprintf(why, why_len, "a time macro (__DATE__, __TIME__ or __TIMESTAMP__) arises after macro "
                                   "expansion: its build differs by when it ran");
            rc = KEY_TIME_MACROS;
        } else if (memmem(out, out_len, "\"<stdin>\"", 9)) {
            snprintf(why, why_len, "__FILE__ of the program source arises after macro expansion: the driver "
                                   "compiles it from a path of its own, another at every build");
            rc = KEY_TIME_MACROS;
        }
        free(out);
    }
    remove_embed_dir(&d);
    free_args(&a);
    for (size_t i = 0; snap && i < snap->n; i++) {
        char file[300];
        snprintf(file, sizeof file, "%s/%zu", vdir, i);
        unlink(file);
    }
    unlink(overlay);
    rmdir(vdir);
    return rc;
}

static const char *device_name_of(const char *identity, char *out, size_t out_len);

/* preproc_expands_time() where the program may need it, once per key: a
 * clean verdict is kept in the store (a record keyed by the key so far and
 * the source), so a warm run pays one lookup, not a preprocessor run. */
static int expansion_checked(struct key_buf *k, store *st, const struct key_source *in, const char *identity,
                             char *why, size_t why_len)
{
    if (!preproc_may_expand_time(in, k->snap)) return 0;
    struct key_buf m = {0};
    key_add_blob(&m, "expansion-checked", k->data, k->len);
    key_add_blob(&m, "input", in->source, in->len);
    struct cache_hash mh = key_hash(m.data, m.len);
    struct store_record rec;
    void *arena = NULL;
    int rc = -1;
    if (!m.oom && st && store_get(st, mh, m.data, m.len, &rec, &arena) == CLSHIM_OK)
        rc = rec.binary_size == 5 && !memcmp(rec.binary, "clean", 5) ? 0 : -1;
    store_record_free(arena);
    if (rc != 0) {
        rc = preproc_expands_time(in, identity, k->snap, why, why_len);
        if (rc == -1) rc = KEY_UNCACHEABLE; /* unchecked: not cached */
        char dev[256];
        struct store_record clean = {"clean", 5, "", 0, KEY_MANIFEST, device_name_of(identity, dev, sizeof dev), NULL};
        if (rc == 0 && st && !m.oom && !store_is_readonly(st)) store_put(st, mh, m.data, m.len, &clean);
    }
    key_free(&m);
    return rc;
}

int preproc_may_expand_time(const struct key_source *in, const struct key_snapshot *snap)
{
    /* Without token pasting, the scanner's lexical look finds every use;
     * an option can spell a macro anywhere. */
    if (memmem(in->source, in->len, "##", 2)) return 1;
    if (in->options && (strstr(in->options, "##") || strstr(in->options, "__TIME__") ||
                        strstr(in->options, "__DATE__") || strstr(in->options, "__TIMESTAMP__") ||
                        strstr(in->options, "__FILE__")))
        return 1;
    for (size_t i = 0; i < in->nembedded; i++)
        if (memmem(in->embedded[i].source, in->embedded[i].len, "##", 2)) return 1;
    for (size_t i = 0; snap && i < snap->n; i++)
        if (memmem(snap->files[i].bytes, snap->files[i].len, "##", 2)) return 1;
    return 0;
}

/* ---- direct mode: manifests ------------------------------------------------ */

/* The manifest's key: everything in the key so far (kind, options, device,
 * embedded headers) and the source. Not the working directory: a relative
 * path the manifest lists is resolved and hashed again from wherever the
 * process runs (use_variant()), so a directory holding the same files uses
 * it and one holding others is refused by the hashes, as a changed header
 * is. */
static int manifest_key(const struct key_buf *k, const struct key_source *in, struct key_buf *m)
{
    memset(m, 0, sizeof *m);
    key_add_blob(m, "manifest-of", k->data, k->len);
    key_add_blob(m, "input", in->source, in->len);
    return m->oom ? -1 : 0;
}

static void add_header_field(struct key_buf *k, const char *path, const char *hex)
{
    char name[4200];
    snprintf(name, sizeof name, "header %s", path);
    key_add_text(k, name, hex);
}

static void add_absent_field(struct key_buf *k, const char *path)
{
    char name[4200];
    snprintf(name, sizeof name, "header-absent %s", path);
    key_add_text(k, name, "");
}

/* key_scan_probes()'s places, as manifest lines (re-verified by
 * use_manifest(): a hash, or ABSENT_MARK for a place that must stay absent). */
static void note_probe(void *arg, const char *path, const char *hex)
{
    struct key_buf *m = arg;
    if (strchr(path, '\n') || strlen(path) >= 4096) m->oom = 1; /* no manifest then */
    key_append(m, hex ? hex : ABSENT_MARK, 32);
    key_append(m, " ", 1);
    key_append(m, path, strlen(path));
    key_append(m, "\n", 1);
}

/* Search roots for the shadowing check: "" (the working directory), each
 * -I directory, the directory of each listed file. */
struct roots {
    char **dir;
    size_t n;
};

static void add_root(struct roots *r, const char *dir, size_t len)
{
    for (size_t i = 0; i < r->n; i++)
        if (strlen(r->dir[i]) == len && !memcmp(r->dir[i], dir, len)) return;
    char **d = realloc(r->dir, (r->n + 1) * sizeof *d);
    if (!d) return;
    r->dir = d;
    if ((d[r->n] = strndup(dir, len))) r->n++;
}

/* 1 when a file of the same relative name as `path` exists under another
 * search root: it could now be found first (a header created earlier in
 * the search path), so the manifest is not trusted and the preprocessor
 * decides again. Conservative: any such file counts, whatever the order. */
static int maybe_shadowed(const struct roots *r, const char *path)
{
    struct stat self;
    if (stat(path, &self) != 0) return 1;
    for (size_t i = 0; i < r->n; i++) {
        size_t len = strlen(r->dir[i]);
        const char *rel = !len ? path : !strncmp(path, r->dir[i], len) && path[len] == '/' ? path + len + 1 : NULL;
        if (!rel || !*rel || rel[0] == '/') continue;
        for (size_t j = 0; j < r->n; j++) {
            if (j == i) continue;
            char other[8300];
            if (r->dir[j][0]) snprintf(other, sizeof other, "%s/%s", r->dir[j], rel);
            else snprintf(other, sizeof other, "%s", rel);
            struct stat st;
            if (stat(other, &st) == 0 && (st.st_ino != self.st_ino || st.st_dev != self.st_dev)) return 1;
        }
    }
    return 0;
}

/* Adds one variant's fields (lines `body`..`end`) when every listed file,
 * resolved from the working directory now (relative paths are), still has
 * its hash, every absent place is still absent, and none may be shadowed
 * by a new file. -1 (k unchanged) otherwise. */
static int use_variant(struct key_buf *k, const struct key_source *in, const char *body, const char *end)
{
    size_t mark = k->len, files_mark = key_snapshot_files(k);
    struct roots r = {NULL, 0};
    add_root(&r, "", 0);
    char **argv;
    int argc;
    if (key_split_options(in->options, &argv, &argc) != 0) return -1;
    for (int i = 0; i < argc; i++)
        if (!strncmp(argv[i], "-I", 2)) {
            const char *dir = argv[i][2] ? argv[i] + 2 : i + 1 < argc ? argv[++i] : "";
            size_t dl = strlen(dir);
            while (dl > 1 && dir[dl - 1] == '/') dl--;
            add_root(&r, dir, dl);
        }
    key_free_options(argv, argc);
    for (const char *p = body; p < end;) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol) break;
        if (*p == '-' || eol - p < 34) { /* an absent place is no search root */
            p = eol + 1;
            continue;
        }
        const char *slash = memrchr(p + 33, '/', (size_t)(eol - p - 33));
        if (slash) add_root(&r, p + 33, (size_t)(slash - p - 33));
        p = eol + 1;
    }
    int rc = 0;
    for (const char *p = body; p < end && rc == 0;) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        char want[33], got[33], path[4096];
        if (!eol || eol - p < 34 || p[32] != ' ' || eol - p - 33 >= 4096) {
            rc = -1;
            break;
        }
        memcpy(want, p, 32);
        want[32] = 0;
        memcpy(path, p + 33, (size_t)(eol - p - 33));
        path[eol - p - 33] = 0;
        struct stat st;
        if (!strcmp(want, ABSENT_MARK)) { /* a place __has_include probed: still absent? */
            if (stat(path, &st) == 0) rc = -1;
            else add_absent_field(k, path);
        } else if (key_hash_input(k, path, got) != 0 || strcmp(got, want) != 0 || maybe_shadowed(&r, path)) rc = -1;
        else add_header_field(k, path, want);
        p = eol + 1;
    }
    for (size_t i = 0; i < r.n; i++) free(r.dir[i]);
    free(r.dir);
    if (rc) key_rewind(k, mark, files_mark);
    return rc;
}

/* The next variant of a manifest's text from *p (its lines up to an empty
 * line or the end): 0 with [*from, *to), then *p past it; -1 at the end. */
static int next_variant(const char **p, const char *end, const char **from, const char **to)
{
    if (*p >= end) return -1;
    const char *sep = memmem(*p, (size_t)(end - *p), "\n\n", 2);
    *from = *p;
    *to = sep ? sep + 1 : end;
    *p = sep ? sep + 2 : end;
    return 0;
}

/* Adds the fields of the first variant that holds (use_variant()); -1
 * when none does, or the text is no manifest of this format. */
static int use_manifest(struct key_buf *k, const struct key_source *in, const char *text, size_t len)
{
    size_t magic = sizeof MANIFEST_MAGIC - 1;
    if (len < magic || memcmp(text, MANIFEST_MAGIC, magic) != 0) return -1;
    const char *p = text + magic, *end = text + len, *from, *to;
    if (p == end) return use_variant(k, in, p, end); /* one variant, of no file */
    while (next_variant(&p, end, &from, &to) == 0)
        if (use_variant(k, in, from, to) == 0) return 0;
    return -1;
}

static const char *device_name_of(const char *identity, char *out, size_t out_len)
{
    identity_field(identity ? identity : "", "device.name", out, out_len);
    return out;
}

void preproc_kernel_names(const char *source, size_t len, char *out, size_t out_len)
{
    size_t o = 0;
    out[0] = 0;
    for (size_t i = 0; i + 6 < len && o + 1 < out_len; i++) {
        size_t kw = i + 8 <= len && !memcmp(source + i, "__kernel", 8) ? 8 : !memcmp(source + i, "kernel", 6) ? 6 : 0;
        if (!kw || (i && (isalnum((unsigned char)source[i - 1]) || source[i - 1] == '_'))) continue;
        size_t j = i + kw;
        if (j < len && (isalnum((unsigned char)source[j]) || source[j] == '_')) continue;
        /* the name is the identifier right before the first '(' */
        const char *paren = memchr(source + j, '(', len - j);
        if (!paren || paren - (source + j) > 512) continue;
        const char *e = paren;
        while (e > source + j && isspace((unsigned char)e[-1])) e--;
        const char *s = e;
        while (s > source + j && (isalnum((unsigned char)s[-1]) || s[-1] == '_')) s--;
        if (s == e) continue;
        int w = snprintf(out + o, out_len - o, "%s%.*s", o ? ", " : "", (int)(e - s), s);
        if (w < 0 || (size_t)w >= out_len - o) break;
        o += (size_t)w;
        i = (size_t)(paren - source);
    }
    if (!o) snprintf(out, out_len, "(none found)");
}

/* ---- the three routes ------------------------------------------------------ */

/* What a preprocessor run found: the key's header fields, the manifest that
 * lists them, or why it failed. */
struct pp_result {
    struct key_buf fields;   /* "header <path>=<hex>" fields, appended to the key as they are */
    struct key_buf manifest; /* its variant: "<hash hex> <path>" lines */
    int rc;
    char why[512];
};

static void run_preprocessor(const struct key_source *in, const char *identity, struct pp_result *r)
{
    memset(r, 0, sizeof *r);
    char **files = NULL;
    size_t n = 0;
    /* Hashed and scanned from one read of each file, kept for the build. */
    r->fields.snap = snapshot_new();
    if (!r->fields.snap) r->fields.oom = 1;
    r->rc = preproc_files(in, identity, &files, &n, r->why, sizeof r->why);
    for (size_t i = 0; r->rc == 0 && i < n; i++) {
        char hex[33];
        if (key_hash_input(&r->fields, files[i], hex) != 0) {
            snprintf(r->why, sizeof r->why, "cannot read %s", files[i]);
            r->rc = -1;
            break;
        }
        add_header_field(&r->fields, files[i], hex);
        if (strchr(files[i], '\n') || strlen(files[i]) >= 4096) r->manifest.oom = 1; /* no manifest then */
        key_append(&r->manifest, hex, 32);
        key_append(&r->manifest, " ", 1);
        key_append(&r->manifest, files[i], strlen(files[i]));
        key_append(&r->manifest, "\n", 1);
    }
    /* What -M does not list: names __has_include probed (absent ones
     * above all), and the time macros, in the source and every header. */
    if (r->rc == 0) r->rc = key_scan_probes(&r->fields, in, files, n, note_probe, &r->manifest, r->why, sizeof r->why);
    if (r->rc == 0 && r->fields.oom) {
        snprintf(r->why, sizeof r->why, "out of memory");
        r->rc = -1;
    }
    preproc_free_files(files, n);
}

static void free_result(struct pp_result *r)
{
    key_free(&r->fields);
    key_free(&r->manifest);
}

/* Stores the manifest: r's variant first, then the variants of `old` (the
 * record found, none of which held; NULL when none was) that differ from
 * it, up to MANIFEST_VARIANTS in all. Directories whose relative names
 * resolve to other files (two checkouts of two branches) each keep theirs,
 * so neither pays the preprocessor again when the other ran last. Two
 * processes merging at once may lose a variant: its next run is
 * preprocessor mode. */
static void store_manifest(store *st, const struct key_buf *m, struct cache_hash mhash, const char *identity,
                           const struct pp_result *r, const struct key_buf *old)
{
    if (!st || !m->data || r->rc != 0 || r->manifest.oom || store_is_readonly(st)) return;
    struct key_buf text = {0};
    key_append(&text, MANIFEST_MAGIC, sizeof MANIFEST_MAGIC - 1);
    if (r->manifest.len) key_append(&text, r->manifest.data, r->manifest.len);
    size_t magic = sizeof MANIFEST_MAGIC - 1, kept = 1;
    if (r->manifest.len && old && old->len > magic && !memcmp(old->data, MANIFEST_MAGIC, magic)) {
        const char *p = old->data + magic, *end = old->data + old->len, *from, *to;
        while (kept < MANIFEST_VARIANTS && next_variant(&p, end, &from, &to) == 0) {
            size_t vlen = (size_t)(to - from);
            if (!vlen || (vlen == r->manifest.len && !memcmp(from, r->manifest.data, vlen))) continue;
            key_append(&text, "\n", 1);
            key_append(&text, from, vlen);
            kept++;
        }
    }
    char dev[256];
    struct store_record rec = {text.data, text.len, "", 0, KEY_MANIFEST, device_name_of(identity, dev, sizeof dev),
                               NULL};
    if (!text.oom) store_put(st, mhash, m->data, m->len, &rec);
    key_free(&text);
}

/* Appends the preprocessor's fields to k, or says why it cannot. */
static int take_result(struct key_buf *k, const struct key_source *in, const char *scan_why,
                       struct pp_result *r, char *why, size_t why_len)
{
    if (r->rc == 0) {
        key_append(k, r->fields.data, r->fields.len);
        if (key_take_snapshot(k, &r->fields) != 0) {
            snprintf(why, why_len, "a header changed while it was read for the key");
            return KEY_UNCACHEABLE;
        }
        key_scan_driver_dir(k, in);
        return 0;
    }
    if (r->rc != -1) { /* KEY_TIME_MACROS, KEY_UNCACHEABLE: not the preprocessor's failure */
        snprintf(why, why_len, "%s", r->why);
        return r->rc;
    }
    char kernels[256];
    preproc_kernel_names(in->source, in->len, kernels, sizeof kernels);
    snprintf(why, why_len, "%s; the preprocessor failed: %s; kernels: %s", scan_why, r->why, kernels);
    return -1;
}

/* The routes that start no process: the scanner, then direct mode. 0 when
 * k has the header fields; KEY_TIME_MACROS or KEY_UNCACHEABLE (with
 * scan_why) when no route can key the program; 1 when the preprocessor
 * must list them: m is
 * then the manifest's key (m->data NULL when it could not be made),
 * *no_manifest says that the store has no manifest for it at all (as
 * opposed to one that no longer matches), and `old` (else empty) holds the
 * text of one whose variants all failed, for store_manifest(). */
static int headers_without_preprocessor(struct key_buf *k, store *st, const struct key_source *in,
                                        struct key_buf *m, struct cache_hash *mhash, int *no_manifest,
                                        struct key_buf *old, enum preproc_route *route, char *scan_why,
                                        size_t scan_why_len)
{
    size_t mark = k->len, files_mark = key_snapshot_files(k);
    *route = PREPROC_SCANNER;
    memset(m, 0, sizeof *m);
    memset(old, 0, sizeof *old);
    *no_manifest = 0;
    int scan = key_scan_headers(k, in, scan_why, scan_why_len);
    if (scan == 0 || scan < KEY_HANDOFF) return scan;
    key_rewind(k, mark, files_mark); /* the scanner's partial fields and reads */

    if (manifest_key(k, in, m) != 0) {
        key_free(m);
        memset(m, 0, sizeof *m);
    }
    *mhash = m->data ? key_hash(m->data, m->len) : (struct cache_hash){0, 0};
    if (st && m->data) {
        struct store_record rec;
        void *arena = NULL;
        int rc = store_get(st, *mhash, m->data, m->len, &rec, &arena);
        *no_manifest = rc == CLSHIM_ENOTFOUND;
        if (rc == CLSHIM_OK && use_manifest(k, in, rec.binary, rec.binary_size) == 0) {
            store_record_free(arena);
            key_free(m);
            key_scan_driver_dir(k, in);
            *route = PREPROC_DIRECT;
            return 0;
        }
        if (rc == CLSHIM_OK && rec.binary_size) key_append(old, rec.binary, rec.binary_size);
        store_record_free(arena);
    }
    *route = PREPROC_PREPROCESSOR;
    return 1;
}

int preproc_add_headers(struct key_buf *k, store *st, const struct key_source *in, const char *identity,
                        enum preproc_route *route, char *why, size_t why_len)
{
    struct preproc_job *job = NULL;
    return preproc_start(k, st, in, identity, 0, route, &job, why, why_len);
}

/* ---- the preprocessor alongside the driver's compile ------------------------ */

struct preproc_job {
    pthread_t thread;
    int threaded;
    struct key_source in; /* copies, owned */
    struct key_embedded *embedded;
    char *identity;
    store *st;
    struct key_buf mkey;
    struct cache_hash mhash;
    char scan_why[512];
    struct pp_result result;
    uint64_t ran_ns;
};

static uint64_t clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void *job_main(void *arg)
{
    struct preproc_job *job = arg;
    uint64_t t0 = clock_ns();
    run_preprocessor(&job->in, job->identity, &job->result);
    store_manifest(job->st, &job->mkey, job->mhash, job->identity, &job->result, NULL);
    job->ran_ns = clock_ns() - t0;
    return NULL;
}

static void free_job(struct preproc_job *job)
{
    if (!job) return;
    free((char *)job->in.source);
    free((char *)job->in.options);
    for (size_t i = 0; job->embedded && i < job->in.nembedded; i++) {
        free((char *)job->embedded[i].name);
        free((char *)job->embedded[i].source);
    }
    free(job->embedded);
    free(job->identity);
    free((char *)job->in.driver_dir);
    key_free(&job->mkey);
    free_result(&job->result);
    free(job);
}

static char *copy_bytes(const char *p, size_t len)
{
    char *c = malloc(len + 1);
    if (c) {
        if (len) memcpy(c, p, len);
        c[len] = 0;
    }
    return c;
}

/* A job owning copies of the inputs, so the caller's may go before the
 * join; NULL on out-of-memory. */
static struct preproc_job *new_job(const struct key_source *in, const char *identity, store *st,
                                   struct cache_hash mhash, const char *scan_why)
{
    struct preproc_job *job = calloc(1, sizeof *job);
    if (!job) return NULL;
    job->st = st;
    job->mhash = mhash;
    snprintf(job->scan_why, sizeof job->scan_why, "%s", scan_why);
    const char *options = in->options ? in->options : "";
    job->in.source = copy_bytes(in->source, in->len);
    job->in.len = in->len;
    job->in.options = copy_bytes(options, strlen(options));
    job->identity = copy_bytes(identity ? identity : "", identity ? strlen(identity) : 0);
    if (in->driver_dir) job->in.driver_dir = copy_bytes(in->driver_dir, strlen(in->driver_dir));
    int ok = job->in.source && job->in.options && job->identity && (!in->driver_dir || job->in.driver_dir);
    if (ok && in->nembedded) {
        ok = (job->embedded = calloc(in->nembedded, sizeof *job->embedded)) != NULL;
        for (size_t i = 0; ok && i < in->nembedded; i++) {
            job->in.nembedded = i + 1;
            job->embedded[i].name = copy_bytes(in->embedded[i].name, strlen(in->embedded[i].name));
            job->embedded[i].source = copy_bytes(in->embedded[i].source, in->embedded[i].len);
            job->embedded[i].len = in->embedded[i].len;
            ok = job->embedded[i].name && job->embedded[i].source;
        }
        job->in.embedded = job->embedded;
    }
    if (!ok) {
        free_job(job);
        return NULL;
    }
    return job;
}

/* Starts the job's thread with every signal blocked (the app's handlers
 * never run on it); job->threaded says whether one could be made. */
static void start_thread(struct preproc_job *job)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&job->thread, NULL, job_main, job);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    job->threaded = rc == 0;
}

int preproc_start(struct key_buf *k, store *st, const struct key_source *in, const char *identity,
                  int may_overlap, enum preproc_route *route, struct preproc_job **job, char *why, size_t why_len)
{
    char none[8];
    if (!why) {
        why = none;
        why_len = sizeof none;
    }
    why[0] = 0;
    *job = NULL;
    enum preproc_route dummy;
    if (!route) route = &dummy;
    struct key_buf m, old;
    struct cache_hash mhash;
    int no_manifest;
    char scan_why[512];
    int h = headers_without_preprocessor(k, st, in, &m, &mhash, &no_manifest, &old, route, scan_why,
                                         sizeof scan_why);
    if (h == 0) return expansion_checked(k, st, in, identity, why, why_len);
    if (h < 0) {
        snprintf(why, why_len, "%s", scan_why);
        return h;
    }

    /* Never seen (no manifest at all): a compile is all but certain, so the
     * preprocessor may run beside it. A manifest that no longer matches
     * (a header changed, perhaps back to a version whose binary is stored)
     * is decided now, so such a key can still hit. */
    if (may_overlap && no_manifest && st && !store_is_readonly(st)) {
        struct preproc_job *j = new_job(in, identity, st, mhash, scan_why);
        if (j) {
            j->mkey = m; /* the job's now */
            key_free(&old); /* empty: there was no manifest */
            start_thread(j); /* without a thread, preproc_finish() runs it */
            *job = j;
            return 0;
        }
    }

    struct pp_result r;
    run_preprocessor(in, identity, &r);
    store_manifest(st, &m, mhash, identity, &r, &old);
    int rc = take_result(k, in, scan_why, &r, why, why_len);
    free_result(&r);
    key_free(&m);
    key_free(&old);
    return rc == 0 ? expansion_checked(k, st, in, identity, why, why_len) : rc;
}

int preproc_finish(struct preproc_job *job, struct key_buf *k, uint64_t *ran_ns, char *why, size_t why_len)
{
    char none[8];
    if (!why) {
        why = none;
        why_len = sizeof none;
    }
    why[0] = 0;
    if (job->threaded) pthread_join(job->thread, NULL);
    else job_main(job);
    if (ran_ns) *ran_ns = job->ran_ns;
    int rc = k ? take_result(k, &job->in, job->scan_why, &job->result, why, why_len) : -1;
    if (rc == 0) rc = expansion_checked(k, job->st, &job->in, job->identity, why, why_len);
    free_job(job);
    return rc;
}
