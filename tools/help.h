/* help.h — `clshim help`: the help, man page and docs/commands.md, all
 * printed from the one command table (tools/cmdtable.h). */
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

/* `clshim help [--man|--docs|--list|COMMAND...]`; --list prints each
 * command, and each option as "COMMAND OPTION", one a line (for the test
 * that dispatch and table agree). Returns the exit status. */
int help_main(int argc, char **argv);

#endif
