/* knobs.h — the one table of clshim's configuration knobs.
 *
 * Every knob clshim reads is a row here and nowhere else: common/config.c
 * includes this table to declare the fields, to parse values, to print
 * `clshim config`, and to generate docs/config.md (a test fails when the docs
 * drift from this table).
 *
 * X(NAME, type, field, default, since, description)
 *   NAME     the environment variable without the CLSHIM_ prefix
 *   type     BOOL | LEVEL | SIZE | UINT | PATH | STRING
 *   field    the member of struct clshim_config that holds the value
 *   default  the default as text, parsed like any other value
 *   since    the clshim version that introduced the knob
 */
#ifndef CLSHIM_KNOBS_H
#define CLSHIM_KNOBS_H

#define CLSHIM_KNOBS(X)                                                        \
    X(DISABLE, BOOL, disable, "0", "0.1",                                      \
      "1 makes the shim a pure pass-through: every call is forwarded "         \
      "unchanged and nothing is read or written.")                             \
    X(LOG, LEVEL, log_level, "warn", "0.1",                                    \
      "Log level: error, warn, info or debug. info prints one line per build " \
      "(hit, miss, stored, rejected) and a summary at exit.")                  \
    X(LOG_FILE, PATH, log_file, "", "0.1",                                     \
      "Append log lines to this file instead of standard error.")              \
    X(STATS, BOOL, stats, "0", "0.1",                                          \
      "1 prints the per-process cache summary at exit even below log level "   \
      "info (`clshim run --stats` sets it).")                                  \
    X(STATS_FILE, PATH, stats_file, "", "0.2",                                 \
      "Each process that built a program appends its cache counters at exit "  \
      "to this file, as one line of NAME=N words (hits, misses by cause, "     \
      "stored, compile time saved; docs/cache.md, \"Statistics\"). Empty: "    \
      "none. `clshim run --stats` sets it to a file of its own and sums the "  \
      "lines into the run's last line.")                                       \
    X(CACHE, BOOL, cache, "1", "0.1",                                          \
      "0 turns program caching off; the rest of the shim stays active.")       \
    X(CACHE_DIR, PATH, cache_dir, "", "0.1",                                   \
      "Directory of the persistent cache. Empty means "                        \
      "$XDG_CACHE_HOME/clshim, else ~/.cache/clshim. Created with mode 0700.") \
    X(CACHE_MAX_SIZE, SIZE, cache_max_size, "1G", "0.1",                       \
      "Size limit of the persistent cache (stored, compressed bytes); K/M/G "  \
      "suffixes; 0 means no limit. Past it, least recently used entries are "  \
      "evicted down to 90 % of the limit. A limit below what one run stores "  \
      "evicts that run's own entries (every run compiles): it is warned "      \
      "about once, with the run's size, then and at later runs.")              \
    X(CACHE_MAX_AGE, UINT, cache_max_age_days, "30", "0.1",                    \
      "Entries unused for this many days are evicted (checked at most once a " \
      "day); 0 turns age eviction off.")                                       \
    X(CACHE_MIN_ENTRY, SIZE, cache_min_entry, "0", "0.1",                      \
      "Binaries smaller than this many bytes are not stored.")                 \
    X(CACHE_MAX_ENTRY, SIZE, cache_max_entry, "256M", "0.1",                   \
      "Binaries larger than this many bytes are not stored.")                  \
    X(CACHE_READONLY, BOOL, cache_readonly, "0", "0.1",                        \
      "1 uses the cache but never writes it (shared CI caches).")              \
    X(CACHE_ALLOW_SHARED, BOOL, cache_allow_shared, "0", "0.1",                \
      "1 reads a cache directory owned by another user or writable by group "  \
      "or others (an administrator's shared cache). Such a cache is only "     \
      "read, never written. Whoever can write it can run code in your apps.")  \
    X(CACHE_COMPRESS_LEVEL, UINT, cache_compress_level, "3", "0.1",            \
      "zstd level for stored binaries (1-19); 0 stores them uncompressed.")    \
    X(REMOTE, STRING, remote, "", "0.1",                                      \
      "A shared second tier behind the local cache: Redis "                    \
      "(redis://[user:password@]host[:port][/db] or "                          \
      "unix://[user:password@]/path/to/socket[?db=N]), an HTTP cache server "  \
      "(http[s]://[user:password@]host[:port]/prefix: GET and PUT of one "     \
      "object per entry) or S3 (s3://bucket/prefix, see "                      \
      "CLSHIM_REMOTE_ENDPOINT). Lookups go memory, "                           \
      "local cache, remote, compile; a remote hit is stored locally; a "       \
      "compile is pushed in the background. Empty means no remote tier "       \
      "(docs/cache.md, docs/security.md).")                                    \
    X(REMOTE_READONLY, BOOL, remote_readonly, "0", "0.1",                      \
      "1 reads the remote tier but never writes it: no pushes, no build "      \
      "claims, no statistics (untrusted jobs).")                               \
    X(REMOTE_NAMESPACE, STRING, remote_namespace, "clshim", "0.1",             \
      "Prefix of every key clshim uses on the server, so projects can share "  \
      "one server without sharing entries.")                                   \
    X(REMOTE_PASSWORD_FILE, PATH, remote_password_file, "", "0.1",             \
      "A file whose first line is the server password (instead of one in "     \
      "CLSHIM_REMOTE); for HTTP, user:password (basic) or a bearer token. "   \
      "Never logged.")                                         \
    X(REMOTE_ENDPOINT, STRING, remote_endpoint, "", "0.1",                     \
      "With CLSHIM_REMOTE=s3://...: the S3 service's URL (an S3-compatible "  \
      "store's, e.g. http://minio.internal:9000); empty: AWS, "               \
      "https://s3.<AWS_REGION>.amazonaws.com. Requests are signed (AWS "      \
      "SigV4) with AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY for "          \
      "AWS_REGION (default us-east-1).")                                       \
    X(REMOTE_CA, PATH, remote_ca, "", "0.2",                                  \
      "For an https:// or s3:// remote: a PEM file of the certificate "       \
      "authorities to trust (a fleet's private CA) instead of the system's. " \
      "The server's certificate and name are always verified.")              \
    X(REMOTE_TIMEOUT, UINT, remote_timeout_ms, "50", "0.1",                    \
      "Milliseconds a whole remote lookup may take: resolving the host, "     \
      "connecting, authenticating, every command and every byte of every "    \
      "reply, against one deadline (a server that trickles its reply or "     \
      "sends a huge value slowly is cut off there). Pushes are sent in the "   \
      "background, each with this deadline plus its size at 8 MiB/s. A "      \
      "failure opens the circuit breaker: the remote tier is skipped for "    \
      "30 s, with one log line.")                                              \
    X(REMOTE_MAX_VALUE, SIZE, remote_max_value, "64M", "0.1",                  \
      "Largest value read from or written to the remote tier (bytes of the "   \
      "encoded entry); larger ones are neither pushed nor accepted.")          \
    X(REMOTE_EXPIRE, UINT, remote_expire_days, "0", "0.1",                     \
      "Remote entries expire this many days after their last push or hit; "    \
      "0 leaves eviction to the server (maxmemory + allkeys-lru).")            \
    X(REMOTE_SIGN_KEY, PATH, remote_sign_key, "", "0.1",                       \
      "A secret key file (`clshim cache keygen FILE`): every value this "     \
      "process pushes is signed with it (ed25519), so readers with "          \
      "CLSHIM_REMOTE_TRUST take it. Give it to trusted builders only. When "  \
      "it cannot be read, nothing is pushed (one log line). Empty: values "   \
      "are pushed unsigned.")                                                  \
    X(REMOTE_TRUST, STRING, remote_trust, "", "0.1",                           \
      "Public key files (FILE.pub of `clshim cache keygen`), separated by "   \
      "':'. Set, a remote value is taken only when signed by one of these "   \
      "keys; unsigned, unknown-key and forged values are ignored and "        \
      "counted (untrusted), never copied into the local cache, and a local "  \
      "copy of a remote value whose signer is no longer listed is deleted "   \
      "at its next lookup (also with CLSHIM_REMOTE unset). A file that "      \
      "cannot be read trusts nothing (one log line). A process with TRUST "   \
      "and no SIGN_KEY never writes the server. Empty: any value that "       \
      "verifies is taken (docs/security.md says what that trusts).")          \
    X(SIGN_KEY, PATH, sign_key, "", "0.2",                                     \
      "A secret key file (`clshim cache keygen FILE`): every entry this "     \
      "process builds and stores is sealed with it (ed25519), locally and "   \
      "on the remote tier (where it also signs the value unless "             \
      "CLSHIM_REMOTE_SIGN_KEY names another key), so readers with "           \
      "CLSHIM_TRUST use it. When it cannot be read, nothing is stored (one "  \
      "log line). Empty: entries are stored unsealed.")                        \
    X(TRUST, STRING, trust, "", "0.2",                                         \
      "Public key files (FILE.pub of `clshim cache keygen`), or directories " \
      "of them, separated by ':'. Set, an entry is used only when sealed by " \
      "one of these keys, whoever wrote it (a restored CI cache directory, "  \
      "an import, the remote tier): unsealed, other-key and forged entries "  \
      "are ignored and counted (untrusted, one line a run), never deleted "   \
      "by a reader (`clshim cache verify --trust` lists them, `--fix` "       \
      "removes them). What a process without CLSHIM_SIGN_KEY builds is "      \
      "stored unsealed, which such readers ignore. A file that cannot be "    \
      "read adds no key (one log line). Rotation: docs/security.md.")          \
    X(CI_CONTEXT, STRING, ci_context, "auto", "0.2",                           \
      "Whether this CI job may write what others trust: trusted, untrusted "  \
      "or auto. Untrusted never pushes to the remote tier and never signs, "  \
      "whatever else is set (one log line says why). auto: untrusted in a "   \
      "GitHub Actions run for a pull request (GITHUB_ACTIONS=true and "       \
      "GITHUB_EVENT_NAME pull_request or pull_request_target: forks and "     \
      "branches alike, as the event file is not read) and in a GitLab "       \
      "pipeline on an unprotected ref (GITLAB_CI=true and "                   \
      "CI_COMMIT_REF_PROTECTED not true) or for a merge request from "        \
      "another project (CI_MERGE_REQUEST_SOURCE_PROJECT_ID not "              \
      "CI_PROJECT_ID); trusted elsewhere (docs/security.md).")                 \
    X(CAPTURE, STRING, capture, "auto", "0.1",                                 \
      "When a built binary is stored: build (right after clBuildProgram), "    \
      "release (after its first use: the first synchronisation after a "     \
      "kernel of it ran, its release, or exit, so it holds what the driver "   \
      "compiled at first enqueue, and the read is off the application's "     \
      "way) or auto (release, on every driver).")                              \
    X(CAPTURE_BACKGROUND, BOOL, capture_background, "1", "0.1",               \
      "Read and store late-captured binaries on a background thread of "     \
      "the lowest priority (0: on the application's thread, at the "         \
      "synchronisation or release, as before).")                             \
    X(CAPTURE_EXIT_BUDGET, UINT, capture_exit_budget, "2000", "0.1",          \
      "Milliseconds exit spends at most on binaries still owed: captures "    \
      "queued for the background worker, and programs built here that "      \
      "neither ran nor were released (read and stored at exit); what is "    \
      "left then is not stored (one line says how many). 0: nothing is "     \
      "read or waited for at exit.")                                         \
    X(CAPTURE_PROCESS, BOOL, capture_process, "1", "0.1",                     \
      "On drivers whose own code cache a second process shares (PoCL with "   \
      "its kernel cache on), late captures of programs built from source are " \
      "done by a detached helper process at nice 19 (`clshim-tool "            \
      "capture-helper`): it builds the program again there, from the "         \
      "driver's cache, reads the binary and stores it, so the application "    \
      "never waits for that code generation. 0: captured in the application " \
      "(the background thread, CLSHIM_CAPTURE_BACKGROUND).")                   \
    X(CAPTURE_HELPER, PATH, capture_helper, "", "0.1",                         \
      "The clshim-tool that clshim starts: as the capture helper, and for "   \
      "SPIR-V translation and PTX lowering (`clshim-tool llvm-child`); "       \
      "empty: the one next to the library (the installed layout and build/). "\
      "When the helper cannot be started, captures stay in the application "  \
      "(one line); without it, a translation fails with that reason.")         \
    X(CAPTURE_HELPER_BUDGET, UINT, capture_helper_budget, "300", "0.1",        \
      "CPU seconds the capture helper goes on storing after the application "  \
      "exited (wall time at most ten times that, for a helper starved on a "   \
      "busy machine); what is left then is not stored (one line). `clshim "    \
      "cache wait` waits for the helpers of a cache directory.")               \
    X(CAPTURE_DEFER_MAX, UINT, capture_defer_max, "60", "0.1",                 \
      "Seconds a capture helper's request waits at most while the "            \
      "application is busy (its threads run or wait to run more than a "      \
      "quarter of one core): the helper captures when the application is "     \
      "idle or has exited. Past this, it captures beside the busy "            \
      "application, working at most a fifth of the time. The capture in "      \
      "the application (CLSHIM_CAPTURE_PROCESS=0) waits the same way "         \
      "before each capture. 0: no waiting.")                                   \
    X(MEM_CACHE, BOOL, mem_cache, "1", "0.2",                                  \
      "0 switches the in-process tier off: no binary or built program is "    \
      "kept in memory between builds (concurrent builds of one program "      \
      "still wait for one compile); the persistent cache, CLSHIM_CACHE, "     \
      "stays on. CLSHIM_MEM_CACHE_MAX is then ignored.")                      \
    X(MEM_CACHE_MAX, SIZE, mem_cache_max, "256M", "0.1",                       \
      "Bytes of binaries the in-process tier keeps; 0 means unbounded (not "  \
      "off: CLSHIM_MEM_CACHE=0 is off). Entries in use are never dropped.")   \
    X(BUILD_OPTIONS_APPEND, STRING, build_options_append, "", "0.2",          \
      "Options appended (after a space) to the options of every "            \
      "clBuildProgram and clCompileProgram the application makes, e.g. "     \
      "\"-DV=2\" or \"-cl-fast-relaxed-math\". They are part of the cache "     \
      "key (the key's options field, `clshim cache show`), and "              \
      "CL_PROGRAM_BUILD_OPTIONS answers the combined options, as the "        \
      "driver given them would. Empty: nothing is appended.")                 \
    X(LINK_OPTIONS_APPEND, STRING, link_options_append, "", "0.2",            \
      "As CLSHIM_BUILD_OPTIONS_APPEND, for every clLinkProgram.")              \
    X(BUILD_WAIT_MS, UINT, build_wait_ms, "120000", "0.1",                     \
      "How long a process waits for another process that is compiling the "    \
      "same program before it compiles itself (milliseconds).")                \
    X(ADVERTISE_IL, BOOL, advertise_il, "0", "0.1",                            \
      "1 makes devices that clshim can feed SPIR-V report "                    \
      "CL_DEVICE_IL_VERSION and cl_khr_il_program.")                           \
    X(SPIRV, BOOL, spirv, "1", "0.1",                                          \
      "0 turns SPIR-V translation off: clCreateProgramWithIL is forwarded "    \
      "unchanged.")                                                            \
    X(TRANSLATE_TIMEOUT, UINT, translate_timeout, "60", "0.1",                 \
      "Seconds one SPIR-V translation may take. The translator runs in a "     \
      "child process; past this it is killed and the module rejected. 0 "      \
      "means no bound.")                                                       \
    X(TRANSLATE_MAX_MEMORY, SIZE, translate_max_memory, "2G", "0.1",           \
      "Bytes the translator's child process may allocate; past this it "       \
      "fails and the module is rejected. 0 means no bound.")                   \
    X(PTX_BUILTINS, STRING, ptx_builtins, "matched", "0.2",                    \
      "SPIR-V on NVIDIA (route (a), docs/spirv.md): matched builds only "      \
      "modules whose built-ins give NVIDIA's results bit for bit; a module "   \
      "calling others fails to build with their names in the build log. "      \
      "vendor-differs-ok builds them anyway (results may differ from an "     \
      "OpenCL C build in the last bits).")                                     \
    X(LIBDEVICE, PATH, libdevice, "", "0.2",                                   \
      "Route (a): the CUDA toolkit's libdevice.10.bc, whose math functions "   \
      "are NVIDIA's. Empty means $CUDA_HOME/nvvm/libdevice/libdevice.10.bc, "  \
      "else /usr/local/cuda/...; where none is readable those built-ins are "  \
      "not matched.")                                                          \
    X(LIBCLC, PATH, libclc, "/usr/lib/clc/nvptx64--nvidiacl.bc", "0.2",        \
      "Route (a): libclc's NVPTX built-in library (Debian libclc-15).")        \
    X(FUSION_PLAN, PATH, fusion_plan, "", "0.1",                               \
      "A fusion plan file naming kernel sequences to fuse (docs/fusion.md).")  \
    X(FUSE, STRING, fuse, "", "0.1",                                           \
      "Inline fusion plan: sequences like \"k1+k2+k3\" separated by ';'.")     \
    X(FUSION, STRING, fusion, "off", "0.1",                                    \
      "auto: watch each in-order queue and fuse kernel sequences that recur "  \
      "back to back, where the analysis proves them equivalent without a "     \
      "barrier (docs/fusion.md, \"Automatic fusion\"); off: only plans and "   \
      "the extension API fuse.")                                               \
    X(FUSION_BUILD, STRING, fusion_build, "helper", "0.2",                     \
      "Where automatic fusion makes a fused program the cache does not "      \
      "hold: helper (the capture helper process, where one serves: PoCL "     \
      "with its kernel cache on, CLSHIM_CAPTURE_PROCESS=1; made when the "     \
      "application is idle or has exited, as captures are; the occurrences "  \
      "before it is ready run unfused, and the application never waits for "  \
      "it) or app (on the "                                                    \
      "application's thread, at the sequence's first fused occurrence). "     \
      "Plans, the extension API and other drivers make it in the "            \
      "application.")                                                          \
    X(FUSION_HISTORY, BOOL, fusion_history, "1", "0.2",                       \
      "With CLSHIM_FUSION=auto: 1 keeps in the cache, per fused program and "  \
      "device, how often its sequence occurred in the last run, what loading " \
      "it cost and what a fused occurrence saved, and loads a cached fused "   \
      "program only where the run is expected to go on long enough for it "   \
      "to pay (docs/fusion.md, \"Never slower\"); 0 loads it at the "         \
      "sequence's first fused occurrence, whatever the run's length.")        \
    X(FUSION_HOLD_MS, UINT, fusion_hold_ms, "50", "0.2",                       \
      "The longest a queue holds kernels of a fusion sequence while the "     \
      "application enqueues nothing more on it: after 1 to 2 times this "      \
      "many milliseconds the held kernels go to the driver unfused, as the "   \
      "plain driver would have run them (an application may wait for their "  \
      "results by means clshim cannot see). Kernels enqueued back to back "    \
      "are never affected. 0 holds them until the application's next call "   \
      "on the queue. Not for the extension API, which holds until "            \
      "clCompleteFusionCLSHIM as asked (docs/fusion.md).")                     \
    X(FUSION_TEST_SLOWDOWN_US, UINT, fusion_test_slowdown_us, "0", "0.2",     \
      "For tests only: each fused launch of a plan or learned sequence first "  \
      "sleeps this many microseconds, so that a test can make fusion slower "  \
      "than the unfused kernels on purpose and check that automatic fusion "   \
      "then runs them unfused (docs/fusion.md, \"Never slower\"). 0: off.")     \
    X(FUSION_TEST_LOAD_US, UINT, fusion_test_load_us, "0", "0.2",             \
      "For tests only: a fused program's load is recorded in the run-length "  \
      "history (CLSHIM_FUSION_HISTORY) as taking this many microseconds "      \
      "instead of the time measured, so that a test can make loading cost "    \
      "more than a short run gains. 0: off.")                                  \
    X(FUSION_REPORT, PATH, fusion_report, "", "0.1",                           \
      "With CLSHIM_FUSION=auto: at exit, append to this file one line per "    \
      "kernel sequence that recurred or was learned (names, the run it is a "  \
      "window of, how it was issued, work-items, occurrences, verdict, time "  \
      "per occurrence unfused and fused, measured or timed). `clshim plan "    \
      "suggest` sets it and turns the lines into a plan.")                     \
    X(PROFILE, PATH, profile, "", "0.2",                                      \
      "A directory: each process times every kernel launch on the device, "    \
      "counts its fused launches and records its builds, and writes them at "  \
      "exit to DIR/profile.PID.txt. Queues are then created with profiling "   \
      "on; every query still answers as the application made them. `clshim "  \
      "run --profile` sets it and prints the tables (docs/profile.md).")       \
    X(DRIVER_CACHES, STRING, driver_caches, "auto", "0.2",                    \
      "Keep the drivers' own caches inside clshim's cache directory: "       \
      "CUDA_CACHE_PATH (NVIDIA's ComputeCache) and POCL_CACHE_DIR (PoCL's "    \
      "kcache) are set to <cache dir>/driver/nvidia and .../pocl when "        \
      "libclshim.so is loaded, where not set already. 1: always; 0: never; "   \
      "auto: when CLSHIM_CACHE_DIR (in the environment or the config file) "   \
      "names the cache directory and the cache is writable, as in a CI job "   \
      "that keeps that directory: on NVIDIA a kept clshim cache without the "  \
      "ComputeCache still JIT-compiles every PTX binary (docs/cache.md).")    \
    X(FUSE_ROUTE, STRING, fuse_route, "auto", "0.2",                           \
      "How fused kernels are built: ir (a fused SPIR module, for drivers "     \
      "with cl_khr_spir), source (generated OpenCL C that calls the original " \
      "kernels, built by the driver; programs built from source only), ptx "   \
      "(route (a): the fused IR lowered to PTX, for NVIDIA), or auto: ir "     \
      "where the device has cl_khr_spir; on NVIDIA ptx for programs from "     \
      "SPIR-V and plans with internal, else source.")                         \
    X(FUSE_PTX_TEST, STRING, fuse_ptx_test, "", "0.2",                         \
      "Tests and priming only: SM[:DIR], e.g. 90:/tmp/ptx. Fusion treats the " \
      "device as NVIDIA's sm_SM (route selection, the fused PTX made and "     \
      "cached apart from the device), writes each fused PTX to DIR, then "     \
      "refuses the fused launch, which this device cannot load: the original " \
      "kernels run (docs/fusion.md, \"Route (a)\").")                         \
    X(CLANG, PATH, clang, "clang-15", "0.1",                                   \
      "The clang that compiles OpenCL C to SPIR for fusion of source "         \
      "programs, and preprocesses sources whose includes the program cache "  \
      "cannot list by itself (cache/preproc.h).")                              \
    X(PREPROC_OVERLAP, BOOL, preproc_overlap, "1", "0.1",                      \
      "1 runs the preprocessor beside the driver's compile in "                \
      "clCompileProgram when a source needs it and was never seen (no "        \
      "manifest): its start-up no longer adds to a miss. 0 runs it first, "    \
      "so a stored key whose manifest alone was evicted still hits. Ignored "  \
      "(0) with a read-only cache, CLSHIM_REMOTE or CLSHIM_CACHE_MIN_ENTRY, "  \
      "where a missing manifest need not mean a missing binary.")             \
    X(LLVM_LIB, PATH, llvm_lib, "", "0.1",                                     \
      "Path of libclshim-llvm.so (translation and fusion). Empty means the "   \
      "directory libclshim.so was loaded from.")                               \
    X(REAL_LOADER, PATH, real_loader, "", "0.1",                               \
      "Loader mode only (docs/modes.md): absolute path of the real ICD "       \
      "loader that clshim's libOpenCL.so.1 forwards to. Empty means the path " \
      "found when clshim was built, then the usual library directories.")      \
    X(DOCTOR, BOOL, doctor, "0", "0.1",                                        \
      "1 prints one line at exit naming the entry mode that delivered the "    \
      "process's OpenCL calls to clshim (preload, loader or layer) and "       \
      "whether this copy intercepted or forwarded them (`clshim doctor`).")  \
    X(STRICT, BOOL, strict, "0", "0.1",                                        \
      "1 makes a broken internal invariant of clshim abort the process "       \
      "(the test suite sets it, to find bugs). 0 falls back instead: the "     \
      "work involved goes to the driver unchanged, the feature concerned "     \
      "(e.g. fusion on that queue) is turned off, and one line is logged.")

#endif
