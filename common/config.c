/* config.c — loading, printing and documenting the knob table. */
#include "common/config.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/suggest.h"

extern char **environ;

struct knob_info {
    const char *name; /* without the CLSHIM_ prefix */
    enum config_type type;
    const char *def;
    const char *since;
    const char *doc;
    size_t offset;
};

static const struct knob_info knobs[CONFIG_KNOB_COUNT] = {
#define CONFIG_INFO(NAME, type, field, def, since, doc) \
    {#NAME, CONFIG_##type, def, since, doc, offsetof(struct clshim_config, field)},
    CLSHIM_KNOBS(CONFIG_INFO)
#undef CONFIG_INFO
};

static const char *level_names[] = {"error", "warn", "info", "debug"};

const char *config_accepts(enum config_type type)
{
    switch (type) {
    case CONFIG_BOOL: return "0 or 1 (also true/false, yes/no, on/off)";
    case CONFIG_LEVEL: return "error, warn, info or debug";
    case CONFIG_SIZE: return "a byte count with an optional K, M or G suffix";
    case CONFIG_UINT: return "a non-negative integer";
    case CONFIG_PATH: return "a path";
    case CONFIG_STRING: return "text";
    }
    return "?";
}

static int parse_uint(const char *text, uint64_t *out, int allow_suffix)
{
    const char *p = text;
    while (isspace((unsigned char)*p)) p++;
    if (!isdigit((unsigned char)*p)) return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(p, &end, 10);
    if (errno) return -1;
    uint64_t mult = 1;
    if (allow_suffix && *end) {
        switch (toupper((unsigned char)*end)) {
        case 'K': mult = 1ULL << 10; break;
        case 'M': mult = 1ULL << 20; break;
        case 'G': mult = 1ULL << 30; break;
        case 'T': mult = 1ULL << 40; break;
        default: return -1;
        }
        end++;
        if (toupper((unsigned char)*end) == 'I') end++;
        if (toupper((unsigned char)*end) == 'B') end++;
    }
    while (isspace((unsigned char)*end)) end++;
    if (*end) return -1;
    if (mult > 1 && v > UINT64_MAX / mult) return -1;
    *out = (uint64_t)v * mult;
    return 0;
}

int config_parse(enum config_type type, const char *text, uint64_t *out_num)
{
    if (!text) return -1;
    switch (type) {
    case CONFIG_BOOL: {
        static const char *yes[] = {"1", "true", "yes", "on"};
        static const char *no[] = {"0", "false", "no", "off"};
        for (size_t i = 0; i < 4; i++) {
            if (!strcasecmp(text, yes[i])) { *out_num = 1; return 0; }
            if (!strcasecmp(text, no[i])) { *out_num = 0; return 0; }
        }
        return -1;
    }
    case CONFIG_LEVEL:
        for (size_t i = 0; i < 4; i++)
            if (!strcasecmp(text, level_names[i])) { *out_num = i; return 0; }
        return -1;
    case CONFIG_SIZE: return parse_uint(text, out_num, 1);
    case CONFIG_UINT: return parse_uint(text, out_num, 0);
    case CONFIG_PATH:
    case CONFIG_STRING: return 0;
    }
    return -1;
}

/* Text storage for PATH/STRING values: one growing arena per config. */
struct arena {
    char *buf;
    size_t len, cap;
    size_t offsets[CONFIG_KNOB_COUNT];
    int has[CONFIG_KNOB_COUNT];
};

static int arena_put(struct arena *a, int knob, const char *text)
{
    size_t n = strlen(text) + 1;
    if (a->len + n > a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 256;
        while (cap < a->len + n) cap *= 2;
        char *nb = realloc(a->buf, cap);
        if (!nb) return -1;
        a->buf = nb;
        a->cap = cap;
    }
    memcpy(a->buf + a->len, text, n);
    a->offsets[knob] = a->len;
    a->has[knob] = 1;
    a->len += n;
    return 0;
}

/* STRING knobs that take one of a few words, checked like any other value. */
static const struct {
    const char *knob;
    const char *words[5];
    const char *accepts;
} choices[] = {
    {"CAPTURE", {"auto", "build", "release", NULL}, "auto, build or release"},
    {"FUSION", {"off", "auto", NULL}, "off or auto"},
    {"FUSION_BUILD", {"helper", "app", NULL}, "helper or app"},
    {"FUSE_ROUTE", {"auto", "ir", "source", "ptx", NULL}, "auto, ir, source or ptx"},
    {"DRIVER_CACHES", {"auto", "0", "1", NULL}, "auto, 0 or 1"},
    {"CI_CONTEXT", {"auto", "trusted", "untrusted", NULL}, "auto, trusted or untrusted"},
};

/* What a knob accepts: its choices, else its type's values. NULL *words
 * when any text of the type is valid. */
static const char *knob_accepts(const struct knob_info *k, const char *const **words)
{
    *words = NULL;
    for (size_t i = 0; i < sizeof choices / sizeof choices[0]; i++)
        if (!strcmp(choices[i].knob, k->name)) {
            *words = choices[i].words;
            return choices[i].accepts;
        }
    return config_accepts(k->type);
}

static int knob_parse(const struct knob_info *k, const char *text, uint64_t *num)
{
    const char *const *words;
    knob_accepts(k, &words);
    if (config_parse(k->type, text, num) != 0) return -1;
    if (!words) return 0;
    for (size_t i = 0; words[i]; i++)
        if (!strcmp(words[i], text)) return 0;
    return -1;
}

/* Writes len bytes of text into out (cap bytes, at least 4 * max + 4) as it
 * can be shown in a log line: printable ASCII as is, a backslash doubled,
 * every other byte as \xHH; past max bytes, "..." instead of the rest. */
static void escape(char *out, size_t cap, const char *text, size_t len, size_t max)
{
    size_t o = 0, i;
    for (i = 0; i < len && i < max && o + 8 < cap; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c == '\\') o += (size_t)snprintf(out + o, cap - o, "\\\\");
        else if (c < 0x20 || c >= 0x7f) o += (size_t)snprintf(out + o, cap - o, "\\x%02x", c);
        else out[o++] = (char)c;
    }
    snprintf(out + o, cap - o, "%s", i < len ? "..." : "");
}

/* A fault of the configuration, told as "<what><then><hint>": what is wrong
 * (the part a summary of many repeats), what clshim does about it, and a
 * hint. */
struct fault {
    char what[512];
    char then[320];
    char hint[160];
};

static void report_fault(void (*report)(const char *), const char *where, const struct fault *f)
{
    if (!report) return;
    char msg[4096 + sizeof f->what + sizeof f->then + sizeof f->hint];
    /* A longer message (a path near PATH_MAX) is cut, not dropped. */
    if (snprintf(msg, sizeof msg, "%s%s%s%s", where, f->what, f->then, f->hint) >= 0) report(msg);
}

/* Sets a knob from text. Returns 0, or -1 when the text is not a valid value:
 * the value before stays, `line` is noted as where the invalid one was (0
 * for none, -1 the environment) and *f (when f is not NULL) says so. */
static int set_value(struct clshim_config *cfg, struct arena *a, int knob, const char *text,
                     enum config_source source, int line, struct fault *f)
{
    const struct knob_info *k = &knobs[knob];
    char *field = (char *)cfg + k->offset;
    uint64_t num = 0;
    if (knob_parse(k, text, &num) != 0) {
        if (f) {
            /* What stays in effect: the default, or a valid value from the file. */
            char value[256], shown[4 * 64 + 4];
            const char *const *words;
            if (cfg->source[knob] == CONFIG_FROM_DEFAULT)
                snprintf(value, sizeof value, "%s", k->def);
            else if (k->type == CONFIG_PATH || k->type == CONFIG_STRING)
                snprintf(value, sizeof value, "%s", a->buf + a->offsets[knob]);
            else
                config_format_value(cfg, knob, value, sizeof value);
            escape(shown, sizeof shown, text, strlen(text), 64);
            snprintf(f->what, sizeof f->what, "CLSHIM_%s=%s is not valid (accepts %s)", k->name, shown,
                     knob_accepts(k, &words));
            escape(shown, sizeof shown, value, strlen(value), 64);
            snprintf(f->then, sizeof f->then, "; using %s\"%s\"%s",
                     cfg->source[knob] == CONFIG_FROM_DEFAULT ? "the default " : "", shown,
                     cfg->source[knob] == CONFIG_FROM_FILE ? " from the config file" : "");
            f->hint[0] = 0;
        }
        cfg->invalid_line[knob] = line;
        return -1;
    }
    switch (k->type) {
    case CONFIG_BOOL:
    case CONFIG_LEVEL: *(int *)field = (int)num; break;
    case CONFIG_SIZE:
    case CONFIG_UINT: *(uint64_t *)field = num; break;
    case CONFIG_PATH:
    case CONFIG_STRING:
        if (arena_put(a, knob, text) != 0) return 0;
        break;
    }
    cfg->source[knob] = source;
    return 0;
}

static int knob_by_name(const char *name, size_t len)
{
    if (len < 7 || strncmp(name, "CLSHIM_", 7) != 0) return -1;
    name += 7;
    len -= 7;
    for (int i = 0; i < CONFIG_KNOB_COUNT; i++)
        if (strlen(knobs[i].name) == len && !strncmp(knobs[i].name, name, len)) return i;
    return -1;
}

/* Names that start with CLSHIM_ and are no knob, read by clshim's own
 * scripts: the wrapper's library directory, and the test suite's. */
static const char *const not_knobs[] = {"LIBDIR", "BUILD", "ROOT", "LONG", "SANITIZED", "TEST_JOBS",
                                        "FUZZ_SECONDS", "FUZZ_TRANSLATE_RUNS", "FUZZ_BUILD"};

/* An unknown CLSHIM_ name (len bytes of name, prefix included): 1 with *f
 * naming it and the closest knob, 0 when it is one of not_knobs. */
static int unknown_name(const char *name, size_t len, struct fault *f)
{
    const char *rest = name + 7;
    size_t rlen = len - 7;
    for (size_t i = 0; i < sizeof not_knobs / sizeof not_knobs[0]; i++)
        if (strlen(not_knobs[i]) == rlen && !strncmp(not_knobs[i], rest, rlen)) return 0;
    struct suggest sg;
    suggest_init(&sg, rest, rlen);
    for (int i = 0; i < CONFIG_KNOB_COUNT; i++) suggest_add(&sg, knobs[i].name, strlen(knobs[i].name));
    const char *closest = suggest_get(&sg, NULL);
    char shown[4 * 64 + 4];
    escape(shown, sizeof shown, name, len, 64);
    snprintf(f->what, sizeof f->what, "%s is not a clshim knob", shown);
    snprintf(f->then, sizeof f->then, "; ignored");
    /* A suggestion only where it is likely the intended name. */
    if (closest)
        snprintf(f->hint, sizeof f->hint, " (did you mean CLSHIM_%s?)", closest);
    else
        snprintf(f->hint, sizeof f->hint, " ('clshim config' lists them)");
    return 1;
}

/* The most of a config file read: one of CLSHIM_NAME=value lines is a few
 * KiB; past this it is something else, which clshim would read at load,
 * before the application's main. docs/config.md says it. */
#define CONFIG_FILE_MAX (1 << 20)

static const char *file_kind(mode_t mode)
{
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISSOCK(mode)) return "a socket";
    return "of an unknown kind";
}

/* The text of the config file, NUL-terminated, its length in *len; NULL for
 * none: the file is missing, or is not a regular file of at most
 * CONFIG_FILE_MAX bytes, or cannot be read (these reported, one line). It is
 * opened without blocking (a FIFO's open would wait for a writer) and
 * checked on the descriptor, not the path, which could be replaced between
 * a check and the open; no more is read than the size checked. */
static char *read_config_file(const char *path, size_t *len, void (*report)(const char *))
{
    static const char fix[] = "make it a regular file of CLSHIM_NAME=value lines, or remove it";
    char msg[4096 + 256];
    char *text = NULL;
    struct stat st;
    size_t n = 0;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        if (errno == ENOENT || errno == ENOTDIR) return NULL;
        snprintf(msg, sizeof msg, "config file %s cannot be opened (%s); ignored: %s", path, strerror(errno), fix);
    } else if (fstat(fd, &st) != 0) {
        snprintf(msg, sizeof msg, "config file %s cannot be read (%s); ignored: %s", path, strerror(errno), fix);
    } else if (!S_ISREG(st.st_mode)) {
        snprintf(msg, sizeof msg, "config file %s is not a regular file (%s); ignored: %s", path,
                 file_kind(st.st_mode), fix);
    } else if (st.st_size > CONFIG_FILE_MAX) {
        snprintf(msg, sizeof msg,
                 "config file %s is %lld bytes, more than the 1 MiB a config file may have; ignored: "
                 "keep only CLSHIM_NAME=value lines in it, or remove it",
                 path, (long long)st.st_size);
    } else if (!(text = malloc((size_t)st.st_size + 1))) {
        snprintf(msg, sizeof msg, "config file %s: no memory to read it; ignored", path);
    } else {
        ssize_t got = 0;
        while (n < (size_t)st.st_size &&
               ((got = read(fd, text + n, (size_t)st.st_size - n)) > 0 || (got < 0 && errno == EINTR)))
            if (got > 0) n += (size_t)got;
        msg[0] = 0;
        if (got < 0)
            snprintf(msg, sizeof msg, "config file %s cannot be read (%s); ignored: %s", path, strerror(errno), fix);
    }
    if (fd >= 0) close(fd);
    if (text && !msg[0]) {
        text[n] = 0;
        *len = n;
        return text;
    }
    free(text);
    if (report) report(msg);
    return NULL;
}

/* Reads the config file's settings. One bad line is reported as it is;
 * more (a file that is not a config file, say) in one line: how many, and
 * the first. */
static void load_file(struct clshim_config *cfg, struct arena *a, const char *path,
                      void (*report)(const char *), int *invalid)
{
    size_t len;
    char *text = read_config_file(path, &len, report);
    if (!text) return;
    struct fault f, first;
    int lineno = 0, bad = 0, first_line = 0;
    for (char *line = text, *end; line < text + len; line = end + 1) {
        end = memchr(line, '\n', (size_t)(text + len - line));
        if (!end) end = text + len;
        *end = 0;
        lineno++;
        char *p = line;
        while (p < end && isspace((unsigned char)*p)) p++;
        size_t n = (size_t)(end - p);
        while (n && isspace((unsigned char)p[n - 1])) p[--n] = 0;
        if (!n || *p == '#') continue;
        /* NAME=value, spaces allowed around the '='; a NUL byte makes no setting. */
        char *eq = memchr(p, 0, n) ? NULL : strchr(p, '=');
        size_t name_len = eq ? (size_t)(eq - p) : 0;
        while (name_len && isspace((unsigned char)p[name_len - 1])) name_len--;
        int knob = eq ? knob_by_name(p, name_len) : -1;
        int fault = 1;
        if (knob >= 0) {
            char *value = eq + 1;
            while (isspace((unsigned char)*value)) value++;
            fault = set_value(cfg, a, knob, value, CONFIG_FROM_FILE, lineno, &f) != 0;
        } else if (eq && !strncmp(p, "CLSHIM_", 7) && name_len > 7) {
            fault = unknown_name(p, name_len, &f);
        } else {
            char shown[4 * 40 + 4];
            escape(shown, sizeof shown, p, n, 40);
            snprintf(f.what, sizeof f.what, "\"%s\" is not a CLSHIM_NAME=value setting", shown);
            snprintf(f.then, sizeof f.then, "; ignored");
            f.hint[0] = 0;
        }
        if (!fault) continue;
        (*invalid)++;
        if (bad++ == 0) first = f, first_line = lineno;
    }
    free(text);
    char where[4096 + 32];
    if (bad == 1) {
        snprintf(where, sizeof where, "%s:%d: ", path, first_line);
        report_fault(report, where, &first);
    } else if (bad > 1) {
        snprintf(where, sizeof where, "config file %s: %d lines ignored; the first, line %d: ", path, bad,
                 first_line);
        first.then[0] = 0;
        report_fault(report, where, &first);
    }
}

static const char *env_value(char *const *env, const char *name)
{
    size_t n = strlen(name);
    for (char *const *e = env; e && *e; e++)
        if (!strncmp(*e, name, n) && (*e)[n] == '=') return *e + n + 1;
    return NULL;
}

/* CLSHIM_CI_CONTEXT: auto decides from the CI's own variables (knobs.h). */
static void ci_context_resolve(struct clshim_config *cfg, char *const *env)
{
    cfg->ci_untrusted = 0;
    cfg->ci_why[0] = 0;
    if (!strcmp(cfg->ci_context, "trusted")) return;
    if (!strcmp(cfg->ci_context, "untrusted")) {
        cfg->ci_untrusted = 1;
        snprintf(cfg->ci_why, sizeof cfg->ci_why, "CLSHIM_CI_CONTEXT=untrusted");
        return;
    }
    const char *v, *event = env_value(env, "GITHUB_EVENT_NAME");
    if ((v = env_value(env, "GITHUB_ACTIONS")) && !strcmp(v, "true") && event &&
        (!strcmp(event, "pull_request") || !strcmp(event, "pull_request_target"))) {
        cfg->ci_untrusted = 1;
        snprintf(cfg->ci_why, sizeof cfg->ci_why, "a GitHub Actions run for a pull request (%s event)", event);
        return;
    }
    if (!(v = env_value(env, "GITLAB_CI")) || strcmp(v, "true")) return;
    const char *protected_ref = env_value(env, "CI_COMMIT_REF_PROTECTED");
    const char *source = env_value(env, "CI_MERGE_REQUEST_SOURCE_PROJECT_ID"), *project = env_value(env, "CI_PROJECT_ID");
    if (source && (!project || strcmp(source, project))) {
        cfg->ci_untrusted = 1;
        snprintf(cfg->ci_why, sizeof cfg->ci_why, "a GitLab pipeline for a merge request from another project");
    } else if (!protected_ref || strcmp(protected_ref, "true")) {
        cfg->ci_untrusted = 1;
        snprintf(cfg->ci_why, sizeof cfg->ci_why, "a GitLab pipeline on an unprotected ref");
    }
}

int config_load(struct clshim_config *cfg, char *const *env, const char *conf_path,
                void (*report)(const char *message))
{
    struct arena a = {0};
    int invalid = 0;
    memset(cfg, 0, sizeof *cfg);
    for (int i = 0; i < CONFIG_KNOB_COUNT; i++) set_value(cfg, &a, i, knobs[i].def, CONFIG_FROM_DEFAULT, 0, NULL);
    if (conf_path) load_file(cfg, &a, conf_path, report, &invalid);
    for (char *const *e = env; e && *e; e++) {
        const char *eq = strchr(*e, '=');
        if (!eq) continue;
        int knob = knob_by_name(*e, (size_t)(eq - *e));
        struct fault f;
        if (knob >= 0 ? set_value(cfg, &a, knob, eq + 1, CONFIG_FROM_ENV, -1, &f) != 0
                      : !strncmp(*e, "CLSHIM_", 7) && eq - *e > 7 && unknown_name(*e, (size_t)(eq - *e), &f)) {
            invalid++;
            report_fault(report, "", &f);
        }
    }
    /* Point PATH/STRING fields into the arena now that it no longer moves. */
    for (int i = 0; i < CONFIG_KNOB_COUNT; i++) {
        if (knobs[i].type != CONFIG_PATH && knobs[i].type != CONFIG_STRING) continue;
        const char **field = (const char **)((char *)cfg + knobs[i].offset);
        *field = a.has[i] ? a.buf + a.offsets[i] : "";
    }
    cfg->strings = a.buf;
    ci_context_resolve(cfg, env);
    return invalid;
}

void config_free(struct clshim_config *cfg)
{
    free(cfg->strings);
    cfg->strings = NULL;
}

const char *config_file_path(char *buf, size_t len)
{
    const char *xdg = getenv("XDG_CONFIG_HOME");
    const char *home = getenv("HOME");
    int n;
    if (xdg && *xdg == '/') n = snprintf(buf, len, "%s/clshim/clshim.conf", xdg);
    else if (home && *home) n = snprintf(buf, len, "%s/.config/clshim/clshim.conf", home);
    else return NULL;
    return n > 0 && (size_t)n < len ? buf : NULL;
}

int config_cache_dir(const struct clshim_config *cfg, char *buf, size_t len)
{
    const char *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    int n;
    if (cfg->cache_dir && *cfg->cache_dir) n = snprintf(buf, len, "%s", cfg->cache_dir);
    else if (xdg && *xdg == '/') n = snprintf(buf, len, "%s/clshim", xdg);
    else if (home && *home) n = snprintf(buf, len, "%s/.cache/clshim", home);
    else return -1;
    return n > 0 && (size_t)n < len ? 0 : -1;
}

/* Messages about the configuration are held until the log level is known. */
#define PENDING_MAX 16
static char pending_reports[PENDING_MAX][600];
static int pending_count;

static void hold_report(const char *message)
{
    if (pending_count < PENDING_MAX) snprintf(pending_reports[pending_count++], 600, "%s", message);
}

static struct clshim_config process_config;
static pthread_once_t process_config_once = PTHREAD_ONCE_INIT;

static int reports_logged;

static void load_process_config(void)
{
    char path[4096];
    config_load(&process_config, environ, config_file_path(path, sizeof path), hold_report);
    log_set_level((enum log_level)process_config.log_level);
}

/* One application run reports its configuration's faults once, not once per
 * process that loads clshim (the driver's linker child, a shell, the
 * capture helper inherit the same environment). The first process to report
 * leaves a digest of what it reported in CONFIG_REPORTED_VAR; a child that
 * would report the same stays quiet, one with other faults reports them;
 * "*" (set by `clshim run --wait` for its `cache wait`, after the run
 * reported) silences every report.
 * Set when the configuration is first read, at load time (the constructor
 * of interpose/entry.c), before the application starts threads of its own. */
#define CONFIG_REPORTED_VAR "_CLSHIM_CONFIG_REPORTED"

static int already_reported(char digest[17])
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (int i = 0; i < pending_count; i++)
        for (const char *p = pending_reports[i]; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    snprintf(digest, 17, "%016llx", (unsigned long long)h);
    const char *seen = getenv(CONFIG_REPORTED_VAR);
    return seen && (!strcmp(seen, digest) || !strcmp(seen, "*"));
}

const struct clshim_config *config_get(void)
{
    pthread_once(&process_config_once, load_process_config);
    /* Report invalid values outside the once: logging reads the
     * configuration (the log file knob) and would wait on it forever. */
    if (pending_count && !__atomic_exchange_n(&reports_logged, 1, __ATOMIC_ACQ_REL)) {
        char digest[17];
        if (!already_reported(digest)) {
            for (int i = 0; i < pending_count; i++) log_msg(LOG_WARN, "%s", pending_reports[i]);
            setenv(CONFIG_REPORTED_VAR, digest, 1);
        }
    }
    return &process_config;
}

void config_format_value(const struct clshim_config *cfg, int knob, char *buf, size_t len)
{
    const struct knob_info *k = &knobs[knob];
    const char *field = (const char *)cfg + k->offset;
    switch (k->type) {
    case CONFIG_BOOL: snprintf(buf, len, "%d", *(const int *)field); break;
    case CONFIG_LEVEL: snprintf(buf, len, "%s", level_names[*(const int *)field & 3]); break;
    case CONFIG_SIZE:
    case CONFIG_UINT: snprintf(buf, len, "%llu", (unsigned long long)*(const uint64_t *)field); break;
    case CONFIG_PATH:
    case CONFIG_STRING: snprintf(buf, len, "%s", *(const char *const *)field); break;
    }
    if (knob == CONFIG_KNOB_REMOTE || knob == CONFIG_KNOB_REMOTE_ENDPOINT)
        config_redact_url(*(const char *const *)field, buf, len);
}

/* Appends k bytes of s to buf (len bytes, *n used), cut where it is full. */
static void append(char *buf, size_t len, size_t *n, const char *s, size_t k)
{
    if (*n + 1 >= len) return;
    if (k > len - 1 - *n) k = len - 1 - *n;
    memcpy(buf + *n, s, k);
    *n += k;
    buf[*n] = 0;
}

void config_redact_url(const char *url, char *buf, size_t len)
{
    if (!len) return;
    buf[0] = 0;
    size_t n = 0;
    const char *scheme = strstr(url, "://");
    const char *rest = scheme ? scheme + 3 : url;
    const char *query = rest + strcspn(rest, "?#");
    /* The user part ends at the last '@' before the query, so a password
     * holding '/' or '@' (which no URL parser takes) is still hidden whole. */
    const char *at = NULL;
    for (const char *p = rest; p < query; p++)
        if (*p == '@') at = p;
    const char *colon = at ? memchr(rest, ':', (size_t)(at - rest)) : NULL;
    if (colon) { /* user:password@ -> user:***@ */
        append(buf, len, &n, url, (size_t)(colon + 1 - url));
        append(buf, len, &n, "***", 3);
        append(buf, len, &n, at, (size_t)(query - at));
    } else if (at && at < rest + strcspn(rest, "/")) { /* token@host: a token as the user -> ***@ */
        append(buf, len, &n, url, (size_t)(rest - url));
        append(buf, len, &n, "***", 3);
        append(buf, len, &n, at, (size_t)(query - at));
    } else {
        append(buf, len, &n, url, (size_t)(query - url));
    }
    /* ?token=...&sig=... -> ?token=***&sig=***: query values are
     * credentials as often as not (presigned URLs, tokens); only unix://'s
     * db number is shown. A fragment is hidden whole. */
    const char *p = query;
    if (*p == '?') {
        append(buf, len, &n, "?", 1);
        for (p++; *p && *p != '#';) {
            size_t k = strcspn(p, "&;#"), name = strcspn(p, "=&;#");
            if (name < k && !(name == 2 && !strncmp(p, "db", 2))) {
                append(buf, len, &n, p, name + 1);
                append(buf, len, &n, "***", 3);
            } else if (name < k || k == 0) {
                append(buf, len, &n, p, k);
            } else {
                append(buf, len, &n, "***", 3); /* a bare value: ?TOKEN */
            }
            p += k;
            if (*p == '&' || *p == ';') append(buf, len, &n, p++, 1);
        }
    }
    if (*p == '#') append(buf, len, &n, "#***", p[1] ? 4 : 1);
}

void config_print(FILE *out, const struct clshim_config *cfg)
{
    static const char *from[] = {"default", "config file", "environment"};
    char value[1024];
    for (int i = 0; i < CONFIG_KNOB_COUNT; i++) {
        config_format_value(cfg, i, value, sizeof value);
        char bad[64] = "";
        if (cfg->invalid_line[i] < 0) snprintf(bad, sizeof bad, "; the environment's value is not valid");
        else if (cfg->invalid_line[i] > 0)
            snprintf(bad, sizeof bad, "; line %d of the config file is not valid", cfg->invalid_line[i]);
        fprintf(out, "CLSHIM_%-22s = %-24s (%s%s)\n", knobs[i].name, value, from[cfg->source[i]], bad);
    }
    char dir[4096];
    if (config_cache_dir(cfg, dir, sizeof dir) == 0) fprintf(out, "# cache directory: %s\n", dir);
    char path[4096];
    const char *conf = config_file_path(path, sizeof path);
    fprintf(out, "# config file: %s\n", conf ? conf : "(none: no HOME)");
}

void config_print_docs(FILE *out)
{
    static const char *type_names[] = {"boolean", "log level", "size", "integer", "path", "text"};
    fprintf(out,
            "# Configuration\n\n"
            "<!-- Generated from common/knobs.h by `clshim config --docs`; do not edit. -->\n\n"
            "Every knob is an environment variable. The same names may be set in\n"
            "`$XDG_CONFIG_HOME/clshim/clshim.conf` (else `~/.config/clshim/clshim.conf`), one\n"
            "`CLSHIM_NAME=value` a line (spaces around the `=` allowed), `#` for comments; the\n"
            "environment wins. The file is read only when it is a regular file of at most 1 MiB:\n"
            "anything else there (a FIFO, a device, a directory, a larger file) is ignored, with one\n"
            "line saying so. An invalid value is reported once per application run (not once per\n"
            "process that loads clshim), naming the knob, what it accepts, the file and line when it\n"
            "is in the config file, and the value used instead (the default, or the config file's).\n"
            "A `CLSHIM_` name that is no knob is reported the same way, with the closest knob's name.\n"
            "A config file with more than one bad line is reported in one line: how many lines were\n"
            "ignored, and the first.\n"
            "`clshim config` prints the effective value of each knob and where it came from.\n\n"
            "| Knob | Type | Default | Since | Meaning |\n"
            "| --- | --- | --- | --- | --- |\n");
    for (int i = 0; i < CONFIG_KNOB_COUNT; i++)
        fprintf(out, "| `CLSHIM_%s` | %s | `%s` | %s | %s |\n", knobs[i].name, type_names[knobs[i].type],
                *knobs[i].def ? knobs[i].def : "(empty)", knobs[i].since, knobs[i].doc);
    fprintf(out, "\nAccepted values: ");
    for (int t = CONFIG_BOOL; t <= CONFIG_UINT; t++)
        fprintf(out, "%s%s: %s", t ? "; " : "", type_names[t], config_accepts((enum config_type)t));
    fprintf(out, ".\n");
}
