/* cmdtable.h — the one table of the `clshim` command's commands and options.
 *
 * Every command and option a user can type is a row here and nowhere else:
 * tools/help.c prints `clshim --help` and each command's help from it, and
 * generates the man page (docs/clshim.1) and docs/commands.md (`make docs`);
 * tests/integration/test_commands.sh fails when those files drift from the
 * table, or when scripts/clshim, clshim-tool or `clshim cache` dispatch a
 * command or option that has no row.
 *
 * C(NAME, ARGS, TEXT)  a command: NAME as typed after `clshim` ("cache
 *                      evict"), its arguments, what it does
 * O(OPTION, TEXT)      an option of the command above it
 * TEXT is one paragraph; the printers wrap it.
 */
#ifndef CLSHIM_CMDTABLE_H
#define CLSHIM_CMDTABLE_H

#define CLSHIM_COMMANDS(C, O)                                                                       \
    C("run", "[--mode MODE] [--stats] [--log LEVEL] [--wait] [--profile] [--json FILE] [--trace FILE] [--] CMD [ARGS...]", \
      "Run CMD through the shim. Its output and exit status are CMD's own. An existing "            \
      "LD_PRELOAD, LD_LIBRARY_PATH and OPENCL_LAYERS are kept.")                                    \
    O("--mode MODE",                                                                                \
      "How clshim gets into CMD (docs/modes.md): preload (default; LD_PRELOAD, for programs "       \
      "linked with libOpenCL), loader (clshim's libOpenCL.so.1 first on LD_LIBRARY_PATH, for "      \
      "programs that dlopen OpenCL), layer (OPENCL_LAYERS, for a layer-capable ICD loader), "       \
      "auto (chosen from CMD), or several joined with '+'.")                                        \
    O("--stats",                                                                                    \
      "Print the cache summary of each process at exit (CLSHIM_STATS=1), then one line for the "    \
      "whole run: hits, misses by cause (new, evicted, uncacheable), stored, compile time saved, "  \
      "and the size limit that would have kept the evicted entries. Where GITHUB_STEP_SUMMARY "     \
      "names a file, the same is appended to it as a Markdown table, one per run.")                 \
    O("--log LEVEL", "Set CLSHIM_LOG for this run: error, warn, info or debug.")                    \
    O("--wait",                                                                                     \
      "After CMD, wait until the capture helper has stored its binaries (as `clshim cache "         \
      "wait`); CMD's exit status is kept.")                                                         \
    O("--profile",                                                                                  \
      "Time every kernel launch on the device (queues get profiling on; every query still "        \
      "answers as CMD made its queues), count fused launches and record builds; after CMD, print "  \
      "to standard error a table of kernels (launches, device time total, mean, min, max), of "    \
      "fused sequences (launches, launches replaced, measured gain) and of builds (hits, misses, "  \
      "times). CMD's exit status is kept (docs/profile.md).")                                       \
    O("--json FILE", "With --profile (implied): the same as one JSON object in FILE.")              \
    O("--trace FILE",                                                                               \
      "With --profile (implied): the launches and builds as a Chrome trace in FILE (open it in "   \
      "Perfetto or chrome://tracing).")                                                             \
    C("doctor", "[--] CMD [ARGS...]",                                                               \
      "Run CMD once per mode (preload, loader, layer), report which modes reach clshim and the "    \
      "cache hits and misses of each, and print the `clshim run` line to use.")                     \
    C("plan suggest", "[--] CMD [ARGS...]",                                                         \
      "Run CMD once with automatic fusion (its output goes to standard error) and print a fusion "  \
      "plan of the kernel sequences that clshim fused, grouped by the recurring run each is part "  \
      "of, with what of that run fused, why the rest did not, and the expected gain as the "        \
      "program issues the sequence (docs/fusion.md).")                                              \
    C("profile report", "DIR [--json] [--trace FILE]",                                              \
      "The tables of `clshim run --profile` from the profiles the processes of a run wrote to DIR " \
      "(CLSHIM_PROFILE=DIR).")                                                                      \
    O("--json", "One JSON object instead of the tables.")                                          \
    O("--trace FILE", "Also write the launches and builds as a Chrome trace in FILE.")              \
    C("config", "[--docs]",                                                                         \
      "Print every knob's effective value and where it came from (default, config file or "         \
      "environment).")                                                                              \
    O("--docs", "Print the configuration reference (docs/config.md) instead.")                      \
    C("cache", "[--dir DIR] SUBCOMMAND [ARGS]",                                                     \
      "Inspect and manage the persistent cache. The cache directory is CLSHIM_CACHE_DIR, else "     \
      "$XDG_CACHE_HOME/clshim, else ~/.cache/clshim. Exit status: 0 done, 1 failed, 2 usage.")      \
    O("--dir DIR", "Use the cache in DIR (before or after the subcommand).")                        \
    C("cache stats", "[--json]",                                                                    \
      "Hits, misses, sizes, evictions and compile time saved, with this cache's counters.")         \
    O("--json", "One JSON object instead of text.")                                                 \
    C("cache zero", "", "Reset the statistics; entries stay.")                                      \
    C("cache list", "[--sort=size|age|hits|last-use] [--json]", "One line per entry.")              \
    O("--sort=size|age|hits|last-use", "The order of the lines (default: key).")                    \
    O("--json", "One JSON array instead of text.")                                                  \
    C("cache show", "KEYPREFIX",                                                                    \
      "One entry in full: its key material, build log, checks and source.")                         \
    C("cache why", "KEYPREFIX|--last [--json]",                                                     \
      "Why a key missed: the nearest stored entry of the same program (the same main source, IL "   \
      "or binaries) and every field in which the two keys differ: a header's content, an option "   \
      "or a define's value, the device, the driver version, a driver variable, clshim's key "       \
      "format. KEYPREFIX names a stored entry or the last miss. A key with no stored neighbour "    \
      "says so in one line (exit 0).")                                                              \
    O("--last", "The most recent miss in this cache, by any process, stored or not.")              \
    O("--json", "One JSON object instead of text.")                                                 \
    C("cache rm", "KEYPREFIX...", "Remove these entries from the local cache.")                     \
    C("cache evict", "[--older-than AGE] [--to-size SIZE] [--origin=remote]",                      \
      "Evict entries unused for AGE, or least recently used entries down to SIZE, or local "       \
      "copies of remote values.")                                                                   \
    O("--older-than AGE",                                                                           \
      "Entries unused for at least AGE: a number with s, m, h, d or w (seconds, minutes, hours, "  \
      "days, weeks), e.g. 30m, 12h, 7d; a bare number is days.")                                \
    O("--to-size SIZE", "Least recently used entries until the cache holds at most SIZE (K, M, G).") \
    O("--origin=remote", "Every local copy of a value that came from the remote tier.")             \
    C("cache clear", "", "Remove every entry.")                                                     \
    C("cache verify", "[--trust FILES] [--fix]",                                                    \
      "Check every entry and name each bad one (its key and what is wrong); exit 1 when bad "      \
      "entries remain.")                                         \
    O("--trust FILES", "Also count as bad every entry not sealed by one of these public keys "     \
      "(':'-separated files or directories of FILE.pub, as CLSHIM_TRUST).")                         \
    O("--fix", "Remove the bad entries.")                                                           \
    C("cache compact", "", "Rewrite the database file without its free space.")                     \
    C("cache export", "[--sign KEYFILE] [--with-driver-caches] [--wait S] FILE",                    \
      "Write every entry to FILE ('-': standard output).")                                          \
    O("--sign KEYFILE", "Sign the export with KEYFILE's ed25519 key (`clshim cache keygen`).")      \
    O("--with-driver-caches",                                                                       \
      "Also write FILE.drivers.tar.gz, the drivers' caches kept in the cache directory "            \
      "(CLSHIM_DRIVER_CACHES=1), unsigned.")                                                        \
    O("--wait S", "First wait up to S seconds (default 600; 0: not) for capture helpers.")          \
    C("cache import", "[--trust PUBKEY] [--with-driver-caches] FILE",                               \
      "Add the verified entries of an export ('-': standard input).")                               \
    O("--trust PUBKEY", "Only an export signed by PUBKEY's key, unchanged.")                        \
    O("--with-driver-caches", "Also unpack FILE.drivers.tar.gz.")                                   \
    C("cache keygen", "FILE",                                                                       \
      "Write a new ed25519 key pair: the secret key to FILE (mode 0600) and the public key to "     \
      "FILE.pub; never overwrites a file. The secret key signs exports (export --sign FILE) and "   \
      "remote values (CLSHIM_REMOTE_SIGN_KEY=FILE); readers trust FILE.pub (import --trust, "       \
      "CLSHIM_REMOTE_TRUST).")                                                                      \
    C("cache remote", "ping|stats [--json]|rm KEYPREFIX...",                                        \
      "The remote tier (CLSHIM_REMOTE): round trip, the server's and this cache's counters, or "    \
      "delete entries on the server.")                                                              \
    C("cache wait", "[--timeout S]",                                                                \
      "Wait until every capture handed to a capture helper is stored or dropped, raising the "      \
      "helpers to normal priority; a line every 5 s says what it waits for, and one at the end "    \
      "what became of the captures handed over since the last wait. Exit 1: captures still "       \
      "outstanding after S seconds (default 600), or some were not stored (how many and why).")   \
    O("--timeout S", "Wait at most S seconds.")                                                     \
    C("cache warm", "[--device NAME] [--jobs N] [--push] [--json]",                                \
      "Build, for the present devices with the present driver, every stored program (built from "   \
      "source, compiled, or linked) that the cache holds for another device or driver, so that "    \
      "the first run after a driver upgrade hits. Each is built in a process of its own at low "    \
      "priority from the bytes its new key names (headers are found from the working directory: "   \
      "run it where the application runs); a program whose headers or embedded headers changed "    \
      "since it was stored is skipped and named. One line per program skipped, a summary. Exit 1: " \
      "a build could not be stored or a push was refused.")                                          \
    O("--device NAME", "Only the devices whose name contains NAME (default: every device).")        \
    O("--jobs N", "At most N builds at once (default: the number of processors).")                  \
    O("--push", "Also push what it builds (and what it finds warm already) to the remote tier "      \
      "(CLSHIM_REMOTE), signed with CLSHIM_SIGN_KEY or CLSHIM_REMOTE_SIGN_KEY when set.")             \
    O("--json", "One JSON object: the counts and every program's outcome.")                         \
    C("cache help", "", "The help of `clshim cache`.")                                              \
    C("fuse", "--plan \"a+b+c\" [OPTIONS] FILE.cl",                                                 \
      "What the fuser makes of a plan, offline: the fused kernel as generated OpenCL C, the "       \
      "fused SPIR module, or its PTX for NVIDIA, or why it is refused (exit 1).")                   \
    O("--plan \"a+b+c\"", "The kernels to fuse, in launch order.")                                  \
    O("--emit=cl|ll|spir|ptx",                                                                      \
      "cl (default): generated OpenCL C; ll: the fused SPIR module as LLVM assembly; spir: as "     \
      "bitcode; ptx: lowered to PTX as `clshim ptx` does.")                                         \
    O("--global N[,N,N]", "The ND-range (default 1048576).")                                        \
    O("--local N[,N,N]", "The work-group size (default none).")                                     \
    O("--options OPTS", "The build options.")                                                       \
    O("--force-barrier", "Put a barrier between the fused kernels.")                                \
    O("--internal[=K.A,...]", "The plan option internal= (docs/fusion.md).")                        \
    O("--sm N", "The NVIDIA architecture for --emit=ptx (default: LLVM's newest).")                 \
    O("-o FILE", "Write to FILE instead of standard output.")                                       \
    C("ptx", "[OPTIONS] FILE.cl|FILE.spv",                                                          \
      "A program's PTX as route (a) makes it for NVIDIA's driver (docs/spirv.md), or why it is "    \
      "refused (exit 1).")                                                                          \
    O("--sm N", "The NVIDIA architecture (default: LLVM's newest).")                                \
    O("--options OPTS", "The build options (-cl-fast-relaxed-math, -cl-denorms-are-zero matter).")  \
    O("--builtins=vendor-differs-ok",                                                               \
      "Go on when the program calls built-ins whose results differ from NVIDIA's; they are named "  \
      "on standard error.")                                                                         \
    O("--libdevice PATH",                                                                           \
      "CUDA's libdevice.10.bc (default: under $CUDA_HOME or /usr/local/cuda; \"\": none).")         \
    O("-o FILE", "Write to FILE instead of standard output.")                                       \
    C("help", "[COMMAND]", "This text, or one command's help (also `clshim COMMAND --help`).")      \
    C("--version", "", "Print clshim's version (also -V).")

#endif
