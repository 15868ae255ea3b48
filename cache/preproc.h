/* preproc.h — the headers of a source program, as exact as the compiler:
 * the ccache model, direct mode backed by preprocessor mode.
 *
 * preproc_add_headers() is the one call key derivation makes for a program
 * built or compiled from source. It adds to the key material the "header"
 * fields (path and content hash) of every file the program's preprocessing
 * opens, taken from the first of:
 *   1. the scanner (key_scan_headers in cache/key.h), when it is exact:
 *      plain #include "..." / <...> lines, found in the -I directories;
 *   2. direct mode: a manifest stored by an earlier preprocessor run for the
 *      same source, options, embedded headers and device (a store record of
 *      kind "manifest", keyed by that), listing each file's path as the
 *      preprocessor wrote it (relative where the include was: `-I inc`
 *      gives inc/x.h) and its content hash. Every listed file is hashed
 *      again; when all match, the fields come from the manifest and no
 *      process is started: a warm run does not pay the preprocessor;
 *   3. preprocessor mode: clang (CLSHIM_CLANG, default clang-15), spawned
 *      without clshim in LD_PRELOAD, as
 *        clang -x cl -M -MT k <predefines> -cl-std=<...> [-I <embedded dir>]
 *              [app options that reach the preprocessor] -
 *      with the source on its standard input. Its dependency list is every
 *      file it opened; each is hashed, and a new manifest is stored.
 *      The list lacks names __has_include probed: key_scan_probes()
 *      (cache/key.h) scans the source and every listed file for them and
 *      for the time macros; each probed place is keyed and written to the
 *      manifest (hash, or 32 '-' when absent), re-verified by direct mode.
 * The app options passed on (joined or separate, quotes respected): -D,
 * -U, -I, -include, -imacros, -isystem, -iquote, -idirafter; -nostdinc,
 * -cl-std=, -cl-ext= and the -cl-* math options (some define macros).
 * -cl-std defaults to the device's OpenCL C version. The predefines are the
 * driver's, read from the device identity (cache/device.h): one macro per
 * extension the device reports, __OPENCL_VERSION__ from the device version,
 * __ENDIAN_LITTLE__, __IMAGE_SUPPORT__, and on PoCL its
 * POCL_DEVICE_ADDRESS_BITS and __USE_CLANG_OPENCL_C_H. Embedded headers
 * (clCompileProgram's input_headers) are written under their names into a
 * private temporary directory searched first; they appear in the key as
 * content already (the caller adds them), not by path.
 *
 *      A manifest is not trusted either when a file of the same relative name
 *      as a listed one exists under another search root (the working
 *      directory, an -I directory, a listed file's directory): it could be
 *      found first now, so the preprocessor decides again.
 *
 *      The working directory is not in the manifest's key, so a run from
 *      another directory (a CI checkout at another path) finds it. That is
 *      exact because nothing the manifest says is taken on trust from
 *      where it was made: it lists paths as the preprocessor wrote them
 *      (relative where the include was), and each is resolved where the
 *      process runs now: every listed file opened and hashed from the
 *      current directory (into the key's snapshot: the bytes the build
 *      reads), every absent place looked for there, the shadowing check
 *      made there. The key's fields are those paths as written and the
 *      hashes of what they resolve to now, never the directory. A
 *      directory whose relative names resolve to the same bytes gets the
 *      same key and the binary built from exactly those bytes; one where a
 *      name resolves to other bytes (another file, or one found first) is
 *      refused as a header changed in place is, and the preprocessor lists
 *      its own files: another key.
 *      A manifest holds up to 8 variants (format 3), the newest first, and
 *      the first that holds is used: a preprocessor run adds its own to
 *      those that did not hold, so directories whose headers differ (two
 *      branches' checkouts) keep one each instead of replacing each other's.
 *
 * A manifest is an ordinary store record: evicted, or refused by
 * CLSHIM_CACHE_MIN_ENTRY, it is rebuilt by the next preprocessor run.
 *
 * What is not seen: macros a driver predefines beyond the list above (the
 * key holds the device identity, so only the header selection could
 * differ).
 *
 * Whatever the route, the driver directory's fields (key_scan_driver_dir)
 * follow the header fields when in->driver_dir is set.
 *
 * Returns 0; -1 when the preprocessor itself fails (the program is then
 * not cacheable; `why` says the include line that needed it and clang's
 * first error line); KEY_TIME_MACROS or KEY_UNCACHEABLE (cache/key.h)
 * when the source or a header uses a time macro or probes a non-literal
 * name (`why` says which). Thread-safe.
 */
#ifndef CLSHIM_PREPROC_H
#define CLSHIM_PREPROC_H

#include <stddef.h>
#include <stdint.h>

#include "cache/key.h"
#include "cache/store.h"

/* How the header fields were found, for the log and tests. */
enum preproc_route { PREPROC_SCANNER = 1, PREPROC_DIRECT = 2, PREPROC_PREPROCESSOR = 3 };

/* `st` may be NULL (no direct mode). `identity` is the device identity text
 * already in the key. `route` (may be NULL) receives how. */
int preproc_add_headers(struct key_buf *k, store *st, const struct key_source *in, const char *identity,
                        enum preproc_route *route, char *why, size_t why_len);

/* The preprocessor alongside the driver's compile (clCompileProgram).
 *
 * A program never seen before in preprocessor mode is compiled whatever its
 * key turns out to be, so the ~30-70 ms clang takes to start need not come
 * before the compile. preproc_start() is preproc_add_headers() for a
 * caller that compiles when the key misses: when the headers need the
 * preprocessor, `may_overlap` is set and the store (writable) has no
 * manifest at all for this source, options and device (from any directory),
 * it starts the preprocessor on a thread of its own and returns 0 at once
 * with *job set and nothing added to k. The caller then compiles and calls
 * preproc_finish(), which waits for the thread and adds the header fields
 * to k (k must not change in between: the manifest was keyed by it). In
 * every other case it does what preproc_add_headers() does and sets *job
 * to NULL: the scanner, direct mode, and a manifest that no longer matches
 * (a header changed, perhaps back to a version whose binary is stored: the
 * key is decided first, so it can still hit).
 *
 * The job owns copies of `in` and `identity`; the thread stores the new
 * manifest itself, runs with every signal blocked, and is always joined by
 * preproc_finish(); if no thread can be made, preproc_finish() runs the
 * preprocessor itself. The caller must call preproc_finish() exactly once
 * for each job, with k NULL to discard it.
 *
 * A key found this way may turn out to be stored already (another process
 * stored it meanwhile, or the manifest alone was evicted): the compile was
 * then not needed, and storing its binary again is harmless.
 *
 * preproc_finish() returns 0 with the fields added, or -1 (k unchanged)
 * when the preprocessor failed (`why` as preproc_add_headers() says it) or
 * k is NULL, or KEY_TIME_MACROS / KEY_UNCACHEABLE as preproc_add_headers(). *ran_ns (may be NULL) receives how long the preprocessor ran. */
struct preproc_job;
int preproc_start(struct key_buf *k, store *st, const struct key_source *in, const char *identity,
                  int may_overlap, enum preproc_route *route, struct preproc_job **job, char *why,
                  size_t why_len);
int preproc_finish(struct preproc_job *job, struct key_buf *k, uint64_t *ran_ns, char *why, size_t why_len);

/* Preprocessor mode alone: the files clang opens for `in` on the device,
 * as a malloc'd array of malloc'd paths (*n of them; free with
 * preproc_free_files). Files of the embedded-header directory are left out.
 * 0, or -1 with `why`. For tests and the fuzz target. */
int preproc_files(const struct key_source *in, const char *identity, char ***files, size_t *n, char *why,
                  size_t why_len);
void preproc_free_files(char **files, size_t n);

/* Time and place after macro expansion. The scanner finds __DATE__,
 * __TIME__ and __TIMESTAMP__ as tokens; token pasting (CAT(__TI,ME__)) and
 * -D values make them where no token shows. preproc_may_expand_time() says
 * whether the program could (a "##" in the source, an embedded header or a
 * snapshot file; a time macro or __FILE__ named in the options);
 * preproc_expands_time() then runs the preprocessor (clang -E) on the
 * snapshot's bytes (a VFS overlay: the files as the key read them) with
 * those macros redefined to a mark, and looks for the mark and for the main
 * source's __FILE__. 0: none arises; KEY_TIME_MACROS with why; -1 when the
 * check could not run (why). */
struct key_snapshot;
int preproc_may_expand_time(const struct key_source *in, const struct key_snapshot *snap);
int preproc_expands_time(const struct key_source *in, const char *identity, const struct key_snapshot *snap,
                         char *why, size_t why_len);

/* The kernel names a source declares ("a, b"), for log lines about it. */
void preproc_kernel_names(const char *source, size_t len, char *out, size_t out_len);

#endif
