/* config.c — loading, printing and documenting the knob table. */
#include "common/config.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/log.h"

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
    {"FUSE_ROUTE", {"auto", "ir", "source", "ptx", NULL}, "auto, ir, source or ptx"},
    {"DRIVER_CACHES", {"auto", "0", "1", NULL}, "auto, 0 or 1"},
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

/* `where` is "" for the environment, else "FILE:LINE: ". */
static void set_value(struct clshim_config *cfg, struct arena *a, int knob, const char *text,
                      enum config_source source, const char *where, int line,
                      void (*report)(const char *), int *invalid)
{
    const struct knob_info *k = &knobs[knob];
    char *field = (char *)cfg + k->offset;
    uint64_t num = 0;
    if (knob_parse(k, text, &num) != 0) {
        if (report) {
            /* What stays in effect: the default, or a valid value from the file. */
            char msg[1024], value[256];
            const char *const *words;
            if (cfg->source[knob] == CONFIG_FROM_DEFAULT)
                snprintf(value, sizeof value, "%s", k->def);
            else if (k->type == CONFIG_PATH || k->type == CONFIG_STRING)
                snprintf(value, sizeof value, "%s", a->buf + a->offsets[knob]);
            else
                config_format_value(cfg, knob, value, sizeof value);
            snprintf(msg, sizeof msg, "%sCLSHIM_%s=%.64s%s is not valid (accepts %s); using %s\"%s\"%s", where,
                     k->name, text, strlen(text) > 64 ? "..." : "", knob_accepts(k, &words),
                     cfg->source[knob] == CONFIG_FROM_DEFAULT ? "the default " : "", value,
                     cfg->source[knob] == CONFIG_FROM_FILE ? " from the config file" : "");
            report(msg);
        }
        cfg->invalid_line[knob] = line;
        (*invalid)++;
        return;
    }
    switch (k->type) {
    case CONFIG_BOOL:
    case CONFIG_LEVEL: *(int *)field = (int)num; break;
    case CONFIG_SIZE:
    case CONFIG_UINT: *(uint64_t *)field = num; break;
    case CONFIG_PATH:
    case CONFIG_STRING:
        if (arena_put(a, knob, text) != 0) return;
        break;
    }
    cfg->source[knob] = source;
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

/* Edit distance between a and b (b at most 63 characters). */
static size_t edit_distance(const char *a, size_t la, const char *b, size_t lb)
{
    size_t row[64];
    if (lb >= 64) return (size_t)-1;
    for (size_t j = 0; j <= lb; j++) row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (toupper((unsigned char)a[i - 1]) != b[j - 1]);
            if (row[j] + 1 < best) best = row[j] + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/* An unknown CLSHIM_ name (len bytes of name, prefix included): 1 after
 * reporting it with the closest knob, 0 when it is one of not_knobs. */
static int report_unknown(const char *where, const char *name, size_t len, void (*report)(const char *))
{
    const char *rest = name + 7;
    size_t rlen = len - 7;
    for (size_t i = 0; i < sizeof not_knobs / sizeof not_knobs[0]; i++)
        if (strlen(not_knobs[i]) == rlen && !strncmp(not_knobs[i], rest, rlen)) return 0;
    if (!report) return 1;
    size_t best = (size_t)-1;
    int closest = 0;
    for (int i = 0; i < CONFIG_KNOB_COUNT; i++) {
        size_t d = edit_distance(rest, rlen, knobs[i].name, strlen(knobs[i].name));
        if (d < best) best = d, closest = i;
    }
    char msg[512];
    /* A suggestion only where it is likely the intended name. */
    if (best <= 2 || best * 3 <= rlen)
        snprintf(msg, sizeof msg, "%s%.*s is not a clshim knob; ignored (did you mean CLSHIM_%s?)", where,
                 (int)(len > 64 ? 64 : len), name, knobs[closest].name);
    else
        snprintf(msg, sizeof msg, "%s%.*s is not a clshim knob; ignored ('clshim config' lists them)", where,
                 (int)(len > 64 ? 64 : len), name);
    report(msg);
    return 1;
}

static void load_file(struct clshim_config *cfg, struct arena *a, const char *path,
                      void (*report)(const char *), int *invalid)
{
    FILE *f = fopen(path, "re");
    if (!f) return;
    char line[4096];
    int lineno = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        char *p = line;
        while (isspace((unsigned char)*p)) p++;
        if (!*p || *p == '#') continue;
        size_t n = strlen(p);
        while (n && isspace((unsigned char)p[n - 1])) p[--n] = 0;
        char *eq = strchr(p, '=');
        int knob = eq ? knob_by_name(p, (size_t)(eq - p)) : -1;
        char where[4200];
        snprintf(where, sizeof where, "%s:%d: ", path, lineno);
        if (knob < 0) {
            if (eq && !strncmp(p, "CLSHIM_", 7) && eq - p > 7) {
                *invalid += report_unknown(where, p, (size_t)(eq - p), report);
                continue;
            }
            if (report) {
                char msg[4400];
                snprintf(msg, sizeof msg, "%snot a CLSHIM_NAME=value setting; ignored", where);
                report(msg);
            }
            (*invalid)++;
            continue;
        }
        set_value(cfg, a, knob, eq + 1, CONFIG_FROM_FILE, where, lineno, report, invalid);
    }
    fclose(f);
}

int config_load(struct clshim_config *cfg, char *const *env, const char *conf_path,
                void (*report)(const char *message))
{
    struct arena a = {0};
    int invalid = 0;
    memset(cfg, 0, sizeof *cfg);
    for (int i = 0; i < CONFIG_KNOB_COUNT; i++)
        set_value(cfg, &a, i, knobs[i].def, CONFIG_FROM_DEFAULT, "", 0, NULL, &invalid);
    if (conf_path) load_file(cfg, &a, conf_path, report, &invalid);
    for (char *const *e = env; e && *e; e++) {
        const char *eq = strchr(*e, '=');
        if (!eq) continue;
        int knob = knob_by_name(*e, (size_t)(eq - *e));
        if (knob >= 0) set_value(cfg, &a, knob, eq + 1, CONFIG_FROM_ENV, "", -1, report, &invalid);
        else if (!strncmp(*e, "CLSHIM_", 7) && eq - *e > 7) invalid += report_unknown("", *e, (size_t)(eq - *e), report);
    }
    /* Point PATH/STRING fields into the arena now that it no longer moves. */
    for (int i = 0; i < CONFIG_KNOB_COUNT; i++) {
        if (knobs[i].type != CONFIG_PATH && knobs[i].type != CONFIG_STRING) continue;
        const char **field = (const char **)((char *)cfg + knobs[i].offset);
        *field = a.has[i] ? a.buf + a.offsets[i] : "";
    }
    cfg->strings = a.buf;
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
    if (knob == CONFIG_KNOB_REMOTE) config_redact_url(*(const char *const *)field, buf, len);
}

void config_redact_url(const char *url, char *buf, size_t len)
{
    const char *scheme = strstr(url, "://");
    const char *rest = scheme ? scheme + 3 : url;
    const char *at = strrchr(rest, '@');
    const char *colon = at ? memchr(rest, ':', (size_t)(at - rest)) : NULL;
    if (!colon) {
        snprintf(buf, len, "%s", url);
        return;
    }
    /* user:password@ -> user:***@ */
    snprintf(buf, len, "%.*s***%s", (int)(colon + 1 - url), url, at);
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
            "`CLSHIM_NAME=value` a line, `#` for comments; the environment wins. An invalid value\n"
            "is reported once per application run (not once per process that loads clshim), naming\n"
            "the knob, what it accepts, the file and line when it is in the config file, and the\n"
            "value used instead (the default, or the config file's). A `CLSHIM_` name that is no\n"
            "knob is reported the same way, with the closest knob's name.\n"
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
