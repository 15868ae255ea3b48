/* help.c — the help, the man page and docs/commands.md from the command
 * table (tools/cmdtable.h), and the knobs' part of the man page from the
 * knob table (common/knobs.h). */
#include "tools/help.h"

#include <string.h>

#include "common/knobs.h"
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
    /* The command's words joined: `clshim help cache evict`. */
    char command[128] = "";
    for (int i = 1; i < argc; i++) {
        size_t len = strlen(command);
        if (len + strlen(argv[i]) + 2 > sizeof command) break;
        snprintf(command + len, sizeof command - len, "%s%s", len ? " " : "", argv[i]);
    }
    if (help_print(stdout, command) == 0) return 0;
    fprintf(stderr, "clshim: no command '%s' (clshim --help lists them)\n", command);
    return 2;
}
