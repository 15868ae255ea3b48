/* commands.h — the subcommands of clshim-tool (the `clshim` wrapper runs it
 * for `clshim config`, `clshim cache ...`, `clshim fuse ...`). Each takes the arguments after
 * its own name (argv[0] is the subcommand) and returns the exit status. */
#ifndef CLSHIM_COMMANDS_H
#define CLSHIM_COMMANDS_H

int config_cmd_main(int argc, char **argv);
int cache_cmd_main(int argc, char **argv);
int fuse_cmd_main(int argc, char **argv); /* tools/fuse_cmd.c */
int capture_helper_main(int argc, char **argv); /* tools/capture_helper.c: started by the shim */

#endif
