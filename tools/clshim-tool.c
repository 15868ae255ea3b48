/* clshim-tool — the C side of the `clshim` command: `config`, `cache`,
 * `fuse`, `ptx`, `help` and `--version`.
 * The wrapper script (scripts/clshim) runs it; it never loads the shim. */
#include <stdio.h>
#include <string.h>

#include "common/config.h"
#include "tools/commands.h"
#include "tools/help.h"

int config_cmd_main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--docs")) {
        config_print_docs(stdout);
        return 0;
    }
    if (argc > 1 && argv[1][0] == '-') return help_unknown("clshim: config", "config", argv[1]);
    if (argc > 1) {
        fprintf(stderr, "usage: clshim config [--docs]\n");
        return 2;
    }
    config_print(stdout, config_get());
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: clshim-tool config|cache|fuse|ptx|help|--version ...\n");
        return 2;
    }
    if (!strcmp(argv[1], "config")) return config_cmd_main(argc - 1, argv + 1);
    if (!strcmp(argv[1], "cache")) return cache_cmd_main(argc - 1, argv + 1);
    if (!strcmp(argv[1], "fuse")) return fuse_cmd_main(argc - 1, argv + 1);
    if (!strcmp(argv[1], "ptx")) return ptx_cmd_main(argc - 1, argv + 1);
    if (!strcmp(argv[1], "help")) return help_main(argc - 1, argv + 1);
    if (!strcmp(argv[1], "--version")) return printf("clshim %s\n", CLSHIM_VERSION) < 0;
    if (!strcmp(argv[1], "capture-helper")) return capture_helper_main(argc - 1, argv + 1);
    if (!strcmp(argv[1], "capture-one")) return capture_one_main(argc - 1, argv + 1);
    if (!strcmp(argv[1], "llvm-child")) return llvm_child_main(argc - 1, argv + 1);
    if (!strcmp(argv[1], "profile")) return profile_cmd_main(argc - 1, argv + 1);
    return help_unknown("clshim", "", argv[1]);
}
