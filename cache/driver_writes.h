/* driver_writes.h — the files a driver writes while it loads a hit, synced
 * once in the background instead of one by one on the critical path.
 *
 * A hit hands the driver a binary, and PoCL unpacks it into its kernel
 * cache: program.bc and a .so per kernel and work-group size, each written
 * to a temporary name, fdatasync'ed, then renamed. On ext4 those syncs are
 * two thirds of the load (the large benchmark program: 127 of them, 60 of
 * the 90 ms; docs/cache.md). The bytes are derived — clshim's store holds
 * the binary they come from — so a load run between driver_writes_begin()
 * and driver_writes_end() on a thread skips the per-file syncs of the files
 * it creates, and keeps PoCL's promise (after a crash no file stands under
 * its final name with bytes other than those written) another way:
 *
 *  - before the first rename of the load, a marker naming the directory of
 *    the renamed file is made durable in <cache dir>/unsynced (one
 *    file and two syncs per load, not per file);
 *  - after the load a background thread syncs the file system (syncfs)
 *    and then deletes the marker; the process waits for it at exit, up
 *    to 2 s (a busy disk's sync can take longer: then the marker is left);
 *  - a marker left by an earlier boot means the machine went down before
 *    the files were surely on disk: before this process loads a hit, the
 *    directories it names are deleted (the driver writes them again from
 *    the binary at its next load, since PoCL unpacks only what is missing),
 *    and the marker with them. A marker of this boot whose process is gone
 *    is synced and deleted in the background; the page cache is coherent
 *    within a boot, so its files are whole.
 *
 * Loads of several processes and the removal exclude each other with an
 * flock on <cache dir>/unsynced/lock (shared for a load, exclusive
 * for the removal). Where no marker can be written (no cache directory,
 * read-only, full), driver_writes_begin() returns NULL and the driver
 * syncs as it always does; a marker that fails at a rename makes that
 * window sync the file system there and then (slow, never unsafe).
 */
#ifndef CLSHIM_DRIVER_WRITES_H
#define CLSHIM_DRIVER_WRITES_H

#include <stddef.h>

struct driver_writes;

/* Starts a window on this thread for the load of a hit whose driver keeps
 * its cache in `driver_root` (cache/quirks.h: quirk_source_dir); removes
 * what an earlier boot's markers name first. Only regular files at least
 * two levels inside that directory are synced lazily (PoCL's layout:
 * root/XX/HASH/...), so a recovery never removes anything else. NULL when
 * the syncs must stay (no root, no marker place): then nothing changes. */
struct driver_writes *driver_writes_begin(const char *driver_root);
/* Ends it: a marker written is handed to the background syncer. NULL: no-op. */
void driver_writes_end(struct driver_writes *w);

/* What begin() does first with the markers, done at the first OpenCL
 * call so that the driver's own builds find no truncated file either;
 * creates nothing (a process with no marker directory reads one stat). */
void driver_writes_recover_early(void);

/* Counts of this process, for tests and the debug line. */
struct driver_writes_stats {
    unsigned long windows, syncs_skipped, markers, recovered_dirs, fallbacks;
};
void driver_writes_stats(struct driver_writes_stats *out);

/* Blocks until the background syncer has nothing left (tests, exit paths
 * that want the markers gone); 0, or -1 after timeout_ms. */
int driver_writes_settle(int timeout_ms);

/* What driver_writes_begin() does with the markers in `dir` as if this
 * boot's id were `boot_id`: removes what other boots' markers name, queues
 * this boot's dead writers' markers. Returns the directories removed. For
 * tests; begin() uses the real boot id and directory. */
int driver_writes_recover(const char *dir, const char *boot_id);

/* ---- for interpose/files.c ----
 * driver_writes_sync() returns 1 when it answered (*ret = 0: a sync
 * skipped), 0 when the real call must run; driver_writes_before_rename()
 * is told of every rename made while a window is active anywhere. */
extern int driver_writes_active_count; /* read relaxed: 0 except during a hit's load */
int driver_writes_sync(int fd, int *ret);
void driver_writes_before_rename(int dirfd, const char *target);

#endif
