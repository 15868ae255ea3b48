/* help.h — `clshim help`: the help, man page and docs/commands.md, all
 * printed from the one command table (tools/cmdtable.h), and from the same
 * table the one-line did-you-mean of a misspelt command, option or value. */
#ifndef CLSHIM_HELP_H
#define CLSHIM_HELP_H

#include <stdio.h>

/* Every command's usage line (command NULL or ""), or the full help of one
 * command and of the commands under it ("cache" includes "cache stats"...).
 * Returns 0, or -1 when the table has no such command (nothing printed). */
int help_print(FILE *out, const char *command);

/* The man page (roff), with every knob of common/knobs.h. */
void help_print_man(FILE *out);

/* docs/commands.md (Markdown). */
void help_print_docs(FILE *out);

/* For a did-you-mean (common/suggest.h), from the table: the name closest
 * to `word` among `command`'s subcommands (the word after it: "stats" of
 * "cache stats"; `command` "" for clshim's own) and, for a word starting
 * with '-', its options (the name up to a space, '=' or '['; the word up
 * to '='). Copied into buf; NULL when none is close. */
const char *help_closest(const char *command, const char *word, char *buf, size_t len);

/* Whether an argument after argv[0] is --help or -h. */
int help_asked(int argc, char **argv);

/* A word that is no subcommand or option of `command`, said in one line on
 * standard error:
 *     PREFIX: unknown command 'WORD'; did you mean 'NAME'?
 *     PREFIX: unknown option 'WORD'; did you mean 'NAME'?
 * ending "(clshim help COMMAND)" instead where no name is close; an option
 * of the table given without its value, or with one it does not take:
 *     PREFIX: OPTION needs a value / PREFIX: OPTION takes no value
 * Returns 2, the exit status of a usage error. */
int help_unknown(const char *prefix, const char *command, const char *word);

/* `value` is no value of `command`'s option `option`, in one line: with a
 * closed list in its row ("--sort=size|age|hits|last-use")
 *     PREFIX: unknown --sort value 'hit'; did you mean 'hits'?
 * ending with the list instead where none is close. Returns 2. */
int help_bad_value(const char *prefix, const char *command, const char *option, const char *value);

/* `clshim help [--man|--docs|--list|COMMAND...]`; --list prints each
 * command, and each option as "COMMAND OPTION", one a line (for the test
 * that dispatch and table agree). For scripts/clshim: `--unknown PREFIX
 * COMMAND WORD` is help_unknown, `--closest WORD NAME...` prints the NAME
 * closest to WORD (nothing, exit 1, where none is close). Returns the exit
 * status. */
int help_main(int argc, char **argv);

#endif
