/* help.c — the help, the man page and docs/commands.md from the command
 * table (tools/cmdtable.h), and the knobs' part of the man page from the
 * knob table (common/knobs.h). */
#include "tools/help.h"

#include <ctype.h>
#include <string.h>

#include "common/knobs.h"
#include "common/suggest.h"
#include "tools/cmdtable.h"

struct row {
    const char *name; /* the command, or the option of the command above */
    const char *args; /* NULL for an option */
    const char *text;
};

static const struct row rows[] = {
#define HELP_CMD(name, args, text) {name, args, text},
#define HELP_OPT(option, text) {option, NULL, text},
    CLSHIM_COMMANDS(HELP_CMD, HELP_OPT)
#undef HELP_CMD
#undef HELP_OPT
};
#define ROW_COUNT (sizeof rows / sizeof rows[0])

static const struct {
    const char *name, *doc;
} knobs[] = {
#define HELP_KNOB(NAME, type, field, def, since, doc) {#NAME, doc},
    CLSHIM_KNOBS(HELP_KNOB)
#undef HELP_KNOB
};

/* `text` wrapped at 79 columns, every line indented by `indent`. */
static void wrap(FILE *out, const char *text, int indent)
{
    const int width = 79;
    int col = 0;
    while (*text) {
        while (*text == ' ') text++;
        size_t n = strcspn(text, " ");
        if (!n) break;
        if (col && col + 1 + (int)n > width) {
            fputc('\n', out);
            col = 0;
        }
        if (!col) col = fprintf(out, "%*s", indent, "");
        else col += fprintf(out, " ");
        col += fprintf(out, "%.*s", (int)n, text);
        text += n;
    }
    fputc('\n', out);
}

/* Whether `name` is `command` or a command under it ("cache" for "cache stats"). */
static int under(const char *name, const char *command)
{
    size_t n = strlen(command);
    return !strncmp(name, command, n) && (name[n] == 0 || name[n] == ' ');
}

int help_print(FILE *out, const char *command)
{
    if (!command || !*command) {
        for (size_t i = 0; i < ROW_COUNT; i++)
            if (rows[i].args)
                fprintf(out, "%s clshim %s%s%s\n", i ? "      " : "usage:", rows[i].name, *rows[i].args ? " " : "",
                        rows[i].args);
        fprintf(out, "'clshim help COMMAND' (or 'clshim COMMAND --help') tells what a command does\n"
                     "and its options. Configuration: CLSHIM_* environment variables or\n"
                     "$XDG_CONFIG_HOME/clshim/clshim.conf; see 'clshim config' and 'man clshim'.\n");
        return 0;
    }
    int shown = 0;
    for (size_t i = 0; i < ROW_COUNT; i++) {
        if (!rows[i].args || !under(rows[i].name, command)) continue;
        fprintf(out, "%sclshim %s%s%s\n", shown++ ? "\n" : "usage: ", rows[i].name, *rows[i].args ? " " : "",
                rows[i].args);
        wrap(out, rows[i].text, 4);
        for (size_t j = i + 1; j < ROW_COUNT && !rows[j].args; j++) {
            fprintf(out, "  %s\n", rows[j].name);
            wrap(out, rows[j].text, 8);
        }
    }
    return shown ? 0 : -1;
}

/* The row of `command` ("" for none: clshim itself), or ROW_COUNT. */
static size_t command_row(const char *command)
{
    for (size_t i = 0; i < ROW_COUNT; i++)
        if (rows[i].args && !strcmp(rows[i].name, command)) return i;
    return ROW_COUNT;
}

/* The length of an option's name in its row: "--sort" of "--sort=size|age". */
static size_t option_len(const char *row_name) { return strcspn(row_name, " =["); }

/* The rows of `command`'s options: from the one returned to *end. */
static size_t options_of(const char *command, size_t *end)
{
    size_t c = command_row(command), j = c < ROW_COUNT ? c + 1 : ROW_COUNT;
    for (*end = j; *end < ROW_COUNT && !rows[*end].args; (*end)++) continue;
    return j;
}

/* The row of option `option` (n bytes) of `command`, or NULL. */
static const char *find_option(const char *command, const char *option, size_t n)
{
    size_t end;
    for (size_t j = options_of(command, &end); j < end; j++)
        if (option_len(rows[j].name) == n && !strncmp(rows[j].name, option, n)) return rows[j].name;
    return NULL;
}

/* The next of the alternatives "a|b c|d": past the '|' after p. */
static const char *next_alternative(const char *p)
{
    p += strcspn(p, "|");
    return *p ? p + 1 : p;
}

const char *help_closest(const char *command, const char *word, char *buf, size_t len)
{
    int dashed = word[0] == '-';
    struct suggest s;
    suggest_init(&s, word, dashed ? strcspn(word, "=") : strlen(word));
    size_t end;
    for (size_t j = options_of(command, &end); dashed && j < end; j++)
        suggest_add(&s, rows[j].name, option_len(rows[j].name));
    /* Its subcommands: the word after it ("stats" of "cache stats"); an
     * option-like command ("--version") only for a word like an option. */
    size_t n = strlen(command);
    for (size_t i = 0; i < ROW_COUNT; i++) {
        const char *name = rows[i].name;
        if (!rows[i].args || (n && (!under(name, command) || !name[n]))) continue;
        name += n ? n + 1 : 0;
        if ((name[0] == '-') == dashed) suggest_add(&s, name, strcspn(name, " "));
    }
    /* Subcommands in its arguments: "ping|stats [--json]|rm KEYPREFIX...". */
    size_t c = command_row(command);
    const char *args = c < ROW_COUNT ? rows[c].args : "";
    if (islower((unsigned char)args[0]) && !dashed)
        for (const char *p = args; *p; p = next_alternative(p)) suggest_add(&s, p, strcspn(p, " |"));
    size_t found = 0;
    const char *best = suggest_get(&s, &found);
    if (!best || found >= len) return NULL;
    snprintf(buf, len, "%.*s", (int)found, best);
    return buf;
}

int help_asked(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return 1;
    return 0;
}

/* "PREFIX: unknown WHAT 'WORD'; did you mean 'CLOSEST'?", or with TAIL
 * instead of the question where nothing is close. */
static int say_unknown(const char *prefix, const char *what, const char *word, const char *closest,
                       const char *tail)
{
    if (closest) fprintf(stderr, "%s: unknown %s '%s'; did you mean '%s'?\n", prefix, what, word, closest);
    else fprintf(stderr, "%s: unknown %s '%s' (%s)\n", prefix, what, word, tail);
    return 2;
}

/* "(clshim help COMMAND)", or the hint of clshim itself. */
static const char *help_hint(const char *command, char *buf, size_t len)
{
    if (!*command) return "clshim --help lists them";
    snprintf(buf, len, "clshim help %s", command);
    return buf;
}

int help_unknown(const char *prefix, const char *command, const char *word)
{
    char closest[64], hint[160];
    if (word[0] == '-') {
        size_t n = strcspn(word, "=");
        const char *row = find_option(command, word, n);
        if (row) { /* an option of the table, used wrongly */
            int takes_value = row[option_len(row)] != 0;
            if (word[n] == '=' && takes_value) return help_bad_value(prefix, command, row, word + n + 1);
            fprintf(stderr, "%s: %.*s %s\n", prefix, (int)n, word, takes_value ? "needs a value" : "takes no value");
            return 2;
        }
    }
    return say_unknown(prefix, word[0] == '-' ? "option" : "command", word,
                       help_closest(command, word, closest, sizeof closest), help_hint(command, hint, sizeof hint));
}

int help_bad_value(const char *prefix, const char *command, const char *option, const char *value)
{
    size_t n = option_len(option);
    const char *row = find_option(command, option, n);
    /* A closed list: "--sort=size|age|hits|last-use". */
    const char *list = row && row[n] == '=' ? row + n + 1 : NULL;
    char what[80], hint[256];
    snprintf(what, sizeof what, "%.*s value", (int)n, option);
    if (!list) return say_unknown(prefix, what, value, NULL, help_hint(command, hint, sizeof hint));
    struct suggest s;
    suggest_init(&s, value, strlen(value));
    size_t at = 0;
    for (const char *p = list; *p; p = next_alternative(p)) {
        size_t k = strcspn(p, "|");
        suggest_add(&s, p, k);
        if (at < sizeof hint)
            at += (size_t)snprintf(hint + at, sizeof hint - at, "%s%.*s", !at ? "" : p[k] ? ", " : " or ", (int)k, p);
    }
    size_t k = 0;
    const char *best = suggest_get(&s, &k);
    char closest[64];
    if (best) snprintf(closest, sizeof closest, "%.*s", (int)k, best);
    return say_unknown(prefix, what, value, best ? closest : NULL, hint);
}

/* Text for roff: '-' and '\' escaped, a leading '.' or '\'' kept literal. */
static void roff(FILE *out, const char *text)
{
    if (*text == '.' || *text == '\'') fputs("\\&", out);
    for (; *text; text++) {
        if (*text == '-') fputs("\\-", out);
        else if (*text == '\\') fputs("\\e", out);
        else fputc(*text, out);
    }
}

void help_print_man(FILE *out)
{
    fprintf(out, ".\\\" Generated from tools/cmdtable.h and common/knobs.h by `clshim help --man`; do not edit.\n"
                 ".TH CLSHIM 1 \"%s\" \"clshim %s\" \"User Commands\"\n"
                 ".SH NAME\n"
                 "clshim \\- run OpenCL programs with a persistent program cache and kernel fusion\n"
                 ".SH SYNOPSIS\n",
            "2026", CLSHIM_VERSION);
    for (size_t i = 0; i < ROW_COUNT; i++) {
        if (!rows[i].args || !strncmp(rows[i].name, "cache ", 6)) continue;
        fputs(".B clshim ", out);
        roff(out, rows[i].name);
        fputs("\n", out);
        if (*rows[i].args) {
            roff(out, rows[i].args);
            fputs("\n", out);
        }
        fputs(".br\n", out);
    }
    fputs(".SH DESCRIPTION\n"
          ".B clshim\n"
          "puts a shim between an unmodified OpenCL program and the real driver. Built programs are cached\n"
          "persistently (a later build of the same program loads the stored binary), kernel sequences\n"
          "are fused when a plan or automatic fusion asks for it, and SPIR\\-V is translated for drivers\n"
          "without IL support. Results never change; any internal fault falls back to the driver's own\n"
          "path with one log line.\n"
          ".SH COMMANDS\n",
          out);
    for (size_t i = 0; i < ROW_COUNT; i++) {
        if (rows[i].args) {
            fputs(".TP\n\\fBclshim ", out);
            roff(out, rows[i].name);
            fputs("\\fR ", out);
            roff(out, rows[i].args);
            fputs("\n", out);
            roff(out, rows[i].text);
            fputs("\n", out);
        } else {
            fputs(".RS\n.TP\n.B ", out);
            roff(out, rows[i].name);
            fputs("\n", out);
            roff(out, rows[i].text);
            fputs("\n.RE\n", out);
        }
    }
    fputs(".SH ENVIRONMENT\n"
          "Every knob is a CLSHIM_* environment variable, also read from the configuration file;\n"
          "the environment wins. \\fBclshim config\\fR prints the value in effect and its source.\n",
          out);
    for (size_t i = 0; i < sizeof knobs / sizeof knobs[0]; i++) {
        fprintf(out, ".TP\n.B CLSHIM_%s\n", knobs[i].name);
        roff(out, knobs[i].doc);
        fputs("\n", out);
    }
    fputs(".SH FILES\n"
          ".TP\n.I $XDG_CACHE_HOME/clshim\n"
          "The cache (LMDB), created with mode 0700 (else ~/.cache/clshim).\n"
          ".TP\n.I $XDG_CONFIG_HOME/clshim/clshim.conf\n"
          "Optional configuration, one CLSHIM_NAME=value per line, # for comments (else\n"
          "~/.config/clshim/clshim.conf).\n"
          ".SH SEE ALSO\n"
          "README.md and the guides in docs/ of the source tree, installed in share/doc/clshim.\n",
          out);
}

void help_print_docs(FILE *out)
{
    fputs("# The clshim command\n\n"
          "<!-- Generated from tools/cmdtable.h by `clshim help --docs`; do not edit. -->\n\n"
          "Every command and option of `clshim`. The same table gives `clshim --help`,\n"
          "`clshim help COMMAND` and the man page (`man clshim`). The knobs (`CLSHIM_*`) are in\n"
          "[config.md](config.md).\n",
          out);
    for (size_t i = 0; i < ROW_COUNT; i++) {
        if (rows[i].args)
            fprintf(out, "\n## `clshim %s%s%s`\n\n%s\n", rows[i].name, *rows[i].args ? " " : "", rows[i].args,
                    rows[i].text);
        else
            fprintf(out, "%s- `%s`: %s\n", rows[i - 1].args ? "\n" : "", rows[i].name, rows[i].text);
    }
}

int help_main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "--man")) {
        help_print_man(stdout);
        return 0;
    }
    if (argc == 2 && !strcmp(argv[1], "--docs")) {
        help_print_docs(stdout);
        return 0;
    }
    if (argc == 2 && !strcmp(argv[1], "--list")) {
        const char *command = "";
        for (size_t i = 0; i < ROW_COUNT; i++) {
            if (rows[i].args) command = rows[i].name;
            if (rows[i].args) printf("%s\n", command);
            else printf("%s %.*s\n", command, (int)strcspn(rows[i].name, " ["), rows[i].name);
        }
        return 0;
    }
    if (argc == 5 && !strcmp(argv[1], "--unknown")) return help_unknown(argv[2], argv[3], argv[4]);
    if (argc >= 3 && !strcmp(argv[1], "--closest")) {
        struct suggest s;
        suggest_init(&s, argv[2], strlen(argv[2]));
        for (int i = 3; i < argc; i++) suggest_add(&s, argv[i], strlen(argv[i]));
        size_t n = 0;
        const char *best = suggest_get(&s, &n);
        if (best) printf("%.*s\n", (int)n, best);
        return !best;
    }
    /* The command's words joined: `clshim help cache evict`. */
    char command[128] = "";
    for (int i = 1; i < argc; i++) {
        size_t len = strlen(command);
        if (len + strlen(argv[i]) + 2 > sizeof command) break;
        snprintf(command + len, sizeof command - len, "%s%s", len ? " " : "", argv[i]);
    }
    if (help_print(stdout, command) == 0) return 0;
    /* `clshim help cache stat`: the closest of the commands under the words before. */
    const char *last = strrchr(command, ' '), *word = last ? last + 1 : command;
    char parent[128], closest[64];
    snprintf(parent, sizeof parent, "%.*s", last ? (int)(last - command) : 0, command);
    if (help_closest(parent, word, closest, sizeof closest))
        fprintf(stderr, "clshim: no command '%s'; did you mean '%s%s%s'?\n", command, parent, *parent ? " " : "",
                closest);
    else
        fprintf(stderr, "clshim: no command '%s' (clshim --help lists them)\n", command);
    return 2;
}
