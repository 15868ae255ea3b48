/* quirks.h — driver bugs clshim steps around, in one table (like Mesa's
 * driconf). Each entry names the driver it applies to, the condition, what
 * clshim does instead (does not capture, or stands aside), and the test that
 * shows the bug without clshim (tests/integration/test_driver_quirks.sh).
 *
 * quirks_for() is asked once per device by device_info(); the program layer
 * tests the bits. Adding an entry: a row in quirks.c, a bit here, the
 * check where the bug would be triggered, and a scenario in
 * tests/integration/progs/driver_quirks.c that shows it plainly.
 */
#ifndef CLSHIM_QUIRKS_H
#define CLSHIM_QUIRKS_H

#include <stddef.h>

enum driver_quirk {
    /* PoCL 3.x: code generation of a kernel whose name has 255 or more
     * characters aborts the process. Reading CL_PROGRAM_BINARIES makes PoCL
     * generate code, so such a program is never captured (nor cached). */
    QUIRK_LONG_KERNEL_NAME_CODEGEN = 1u << 0,
    /* PoCL 3.x with POCL_KERNEL_CACHE=0: creating, building or releasing
     * programs made from binaries on several threads at once aborts
     * ("Can't get stat() on ..._UNCACHED_..."), and programs made from one
     * binary share their program-scope variables (they load one object
     * file). An app building from source never meets either, so clshim
     * stands aside: nothing is cached on that device. */
    QUIRK_STAND_ASIDE_UNCACHED = 1u << 1,
    /* PoCL 3.x compiles a program's source from a temporary file in its
     * kernel cache directory (quirk_source_dir), so a quoted #include of
     * the main source finds a header there first. The key holds, for each
     * quoted name of the main source, whether that directory has it and
     * its content (struct key_source's driver_dir, cache/key.h). */
    QUIRK_POCL_SOURCE_DIR = 1u << 2,
    /* PoCL 3.x serializes a binary (CL_PROGRAM_BINARIES) through a 256 MiB
     * scratch allocation it does not check: under an address-space limit
     * (ulimit -v) that leaves less, the read segfaults, where the plain
     * application, which never reads its binaries, runs. clshim reads none
     * while less than QUIRK_BINARY_HEADROOM is left under the limit. */
    QUIRK_BINARY_SCRATCH = 1u << 3,
};

/* The address space QUIRK_BINARY_SCRATCH wants free under RLIMIT_AS. */
#define QUIRK_BINARY_HEADROOM (512ull << 20)

/* The longest kernel name QUIRK_LONG_KERNEL_NAME_CODEGEN allows. */
#define QUIRK_KERNEL_NAME_MAX 254

/* The quirk bits that apply to a device of this platform, in this process's
 * environment. */
unsigned quirks_for(const char *platform_name, const char *driver_version);

/* The environment variables of that driver that change what it builds, as
 * set now: "driver.env.NAME=value\n" lines into out (the device identity
 * ends with them, so every key holds them). Returns the length, or
 * (size_t)-1 when they do not fit. */
size_t quirk_driver_env(const char *platform_name, char *out, size_t out_len);

/* The directory the driver compiles the source from, when `quirks` has
 * QUIRK_POCL_SOURCE_DIR: $POCL_CACHE_DIR when set and not empty, else
 * $XDG_CACHE_HOME/pocl/kcache, else $HOME/.cache/pocl/kcache (as PoCL 3.1
 * picks it; it need not exist yet). 0 with `out` filled, -1 when the quirk
 * is off or no directory can be named. Read on every call: tests change it. */
int quirk_source_dir(unsigned quirks, char *out, size_t out_len);

/* A one-line description of a quirk bit, for log lines. */
const char *quirk_description(unsigned quirk);

/* ---- applications that defeat driver caches on purpose ----------------------
 * An application marker: a declaration with a fresh random name that an
 * application appends to every source it builds, so that no driver cache can
 * serve it. Keyed as it is, such a source never hits and every run adds
 * entries (issue 45: PyOpenCL's suite with its own cache cold, 3 hits of 41
 * builds, 38 new entries per run). The table (quirks.c) holds each marker's
 * exact text and its application: PyOpenCL 2022.3.1 (pyopencl/cache.py),
 * after each miss in its own binary cache, appends
 * "\n\n__constant int pyopencl_defeat_cache_<uuid4 hex> = 0;".
 *
 * What clshim does instead (program/build.c): it keys the source with the
 * marker's random part made zeros, its *neutral form*, and has the driver
 * build exactly that text, so a binary stored under such a key was built from
 * the very text the key names (docs/cache.md, "Exact by construction"). The
 * two texts differ in the spelling of one identifier that nothing uses: the
 * stem occurs once in the source, nowhere in the options, the driver's
 * environment or a header the key names (else the marker stays in the key:
 * one line says what to set instead). Renamed rather than removed, the
 * declaration is still there for whatever the compiler says of it (a
 * `#pragma clang diagnostic` warning or error about it, its line and
 * column), and a build log naming it is given back with the application's
 * own name (quirk_app_marker_restore): what the application can query is
 * what the plain driver answers (integration/test_pyopencl_marker).
 */
struct app_marker {
    const char *app;     /* "PyOpenCL" */
    const char *stem;    /* the name's fixed part, "pyopencl_defeat_cache_" */
    const char *instead; /* what the application's user sets to leave the marker out */
    size_t at, len;      /* the random part: source[at, at + len) */
    unsigned row;        /* the table's row, below 32 (a line per application) */
};

/* Whether `source` ends with a marker of the table: 0, none; 1, one whose
 * neutral form changes nothing the application sees (*m filled); -1, one
 * that must stay in the key (*m filled, `why` says why): its stem occurs
 * elsewhere in the source, in `options` (a -D would make it a macro) or in
 * `identity` (the driver's environment, cache/device.h). */
int quirk_app_marker(const char *source, size_t len, const char *options, const char *identity,
                     struct app_marker *m, char *why, size_t why_len);

/* Whether `bytes` (a header the key names) mention the marker's stem: the
 * neutral form could then differ from the application's text in more than a
 * name. 1 or 0. */
int quirk_app_marker_named(const struct app_marker *m, const void *bytes, size_t len);

/* The neutral form, in place: text (a copy of the source) gets zeros for
 * the random part. */
void quirk_app_marker_neutral(const struct app_marker *m, char *text);

/* The driver's words about the neutral text (a build log), in place: every
 * neutral name in text[0, len) becomes the name in `own` (the application's
 * source). The names are of one length: sizes do not change. */
void quirk_app_marker_restore(const struct app_marker *m, const char *own, char *text, size_t len);

#endif
