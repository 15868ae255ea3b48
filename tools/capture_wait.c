/* capture_wait.c — waiting for the captures of a cache directory
 * (tools/capture_wait.h says what and why). */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "program/capture_proc.h"
#include "tools/capture_wait.h"
#include "cache/store.h"

#define SCAN_PERIOD_S 1.0 /* helpers looked for (and raised) again */
#define FIRST_REPORT_S 1.0 /* a shorter wait says nothing */
#define MAX_HELPERS 16     /* named in a line and raised per scan */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The captures outstanding on the lock file `st`: its shared FLOCK lines
 * in /proc/locks ("1: FLOCK  ADVISORY  READ  1234 08:01:5678 0 EOF"; a
 * blocked request reads "1: -> FLOCK ..." and is not one); -1 when
 * /proc/locks cannot be read. The kernel's device numbers can differ from
 * stat's (overlayfs): where no line has the device and the inode, lines
 * with the inode count. */
static int count_captures(const struct stat *st)
{
    FILE *f = fopen("/proc/locks", "re");
    if (!f) return -1;
    char line[256];
    int both = 0, inode_only = 0;
    while (fgets(line, sizeof line, f)) {
        char kind[16], mode[16], type[16];
        unsigned maj, min;
        unsigned long long ino;
        if (sscanf(line, "%*d: %15s %15s %15s %*d %x:%x:%llu", kind, mode, type, &maj, &min, &ino) != 6) continue;
        if (strcmp(kind, "FLOCK") || strcmp(type, "READ") || ino != (unsigned long long)st->st_ino) continue;
        inode_only++;
        if (maj == major(st->st_dev) && min == minor(st->st_dev)) both++;
    }
    fclose(f);
    return both ? both : inode_only;
}

/* Whether process `pid` is a capture helper: `... capture-helper`
 * (program/capture_proc.c starts it so; CLSHIM_CAPTURE_HELPER may name
 * another path, never another argument). */
static int is_helper(const char *pid)
{
    char path[300], args[512];
    snprintf(path, sizeof path, "/proc/%s/cmdline", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, args, sizeof args - 1);
    close(fd);
    if (n <= 0) return 0;
    args[n] = '\0';
    size_t second = strlen(args) + 1;
    return second < (size_t)n && !strcmp(args + second, "capture-helper");
}

/* Whether process `pid` has the file `st` open. */
static int holds(const char *pid, const struct stat *st)
{
    char path[300];
    snprintf(path, sizeof path, "/proc/%s/fd", pid);
    DIR *d = opendir(path);
    if (!d) return 0; /* gone, or another user's */
    int found = 0;
    struct dirent *e;
    while (!found && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char fd_path[600], link[4200];
        snprintf(fd_path, sizeof fd_path, "/proc/%s/fd/%s", pid, e->d_name);
        ssize_t len = readlink(fd_path, link, sizeof link - 1);
        if (len <= 0) continue;
        link[len] = '\0';
        const char *base = strrchr(link, '/');
        if (!base || strcmp(base + 1, CAPTURE_PROC_LOCK)) continue;
        struct stat fst; /* the open file itself, wherever its path leads now */
        found = stat(fd_path, &fst) == 0 && fst.st_ino == st->st_ino && fst.st_dev == st->st_dev;
    }
    closedir(d);
    return found;
}

/* The helpers with the lock file `st` open: up to `max` pids; how many. */
static int find_helpers(const struct stat *st, int *pids, int max)
{
    DIR *proc = opendir("/proc");
    if (!proc) return 0;
    int n = 0, self = (int)getpid();
    struct dirent *p;
    while (n < max && (p = readdir(proc))) {
        if (!isdigit((unsigned char)p->d_name[0]) || atoi(p->d_name) == self) continue;
        if (is_helper(p->d_name) && holds(p->d_name, st)) pids[n++] = atoi(p->d_name);
    }
    closedir(proc);
    return n;
}

/* Nice 0 for each thread of helper `pid` above it, and for its session's
 * scheduler group: 0 when done (or gone), else the errno of the first
 * refusal; *group: 1 when its group is at nice 0 or below now. Nothing
 * below nice 0 is touched. */
static int raise_helper(int pid, int *group)
{
    char path[64], text[128];
    int err = 0;
    *group = 0;
    snprintf(path, sizeof path, "/proc/%d/task", pid);
    DIR *d = opendir(path);
    if (!d) return 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!isdigit((unsigned char)e->d_name[0])) continue;
        id_t tid = (id_t)atoi(e->d_name);
        errno = 0;
        int nice = getpriority(PRIO_PROCESS, tid);
        if (errno || nice <= 0) continue;
        if (setpriority(PRIO_PROCESS, tid, 0) != 0 && errno != ESRCH && !err) err = errno;
    }
    closedir(d);
    /* "/autogroup-123 nice 19"; no file: no autogroups (nice is enough).
     * Any user may bring a group's nice down to 0 (below needs
     * CAP_SYS_NICE), but without CAP_SYS_ADMIN the kernel takes one change
     * per 100 ms (EAGAIN): the next scan tries again. */
    snprintf(path, sizeof path, "/proc/%d/autogroup", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return err;
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    text[n > 0 ? n : 0] = '\0';
    const char *at = strstr(text, " nice ");
    if (!at) return err;
    if (atoi(at + 6) <= 0) {
        *group = 1;
        return err;
    }
    if ((fd = open(path, O_WRONLY | O_CLOEXEC)) >= 0 && write(fd, "0", 1) == 1) *group = 1;
    else if (errno != EAGAIN && errno != ENOENT && errno != ESRCH && !err) err = errno;
    if (fd >= 0) close(fd);
    return err;
}

/* The one line on a helper it may not raise, and what that means. */
static void say_refused(const char *who, int pid, int err, int group)
{
    if (group)
        fprintf(stderr, "clshim: %s: cannot raise the threads of capture helper pid %d from nice 19 (%s; that "
                        "needs CAP_SYS_NICE or root); its session's scheduler group is raised to 0, and that is "
                        "what weighs against other sessions' work\n", who, pid, strerror(err));
    else
        fprintf(stderr, "clshim: %s: cannot raise capture helper pid %d to normal priority (%s; that needs "
                        "CAP_SYS_NICE or root): it stays at nice 19 and gets only the time the machine's other "
                        "work leaves, so this wait may take long\n", who, pid, strerror(err));
}

int capture_wait(const char *dir, unsigned long timeout_s, const char *who, const char *waiting)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, CAPTURE_PROC_LOCK);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0; /* no helper ever ran here */
    struct stat st;
    if (fstat(fd, &st) != 0) memset(&st, 0, sizeof st);
    double t0 = now_s(), next_scan = 0, next_report = FIRST_REPORT_S;
    int said_refused = 0, rc = 1;
    for (int said = 0;; said = 1) {
        if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
            flock(fd, LOCK_UN);
            rc = 0;
            break;
        }
        if (!said && waiting) fprintf(stderr, "%s\n", waiting);
        double t = now_s() - t0;
        if (t >= next_scan) {
            int pids[MAX_HELPERS];
            int n = find_helpers(&st, pids, MAX_HELPERS);
            for (int i = 0; i < n; i++) {
                int group, err = raise_helper(pids[i], &group);
                if (err && !said_refused++) say_refused(who, pids[i], err, group);
            }
            if (!waiting && t >= next_report) {
                int captures = count_captures(&st);
                char count[64], named[MAX_HELPERS * 12 + 64] = "";
                if (captures > 0)
                    snprintf(count, sizeof count, "%d capture%s outstanding", captures, captures == 1 ? "" : "s");
                else
                    snprintf(count, sizeof count, "captures outstanding");
                for (int i = 0, len = 0; i < n && len < (int)sizeof named - 16; i++)
                    len += snprintf(named + len, sizeof named - (size_t)len, "%s%d",
                                    i ? ", " : n == 1 ? " (capture helper pid " : " (capture helpers pid ", pids[i]);
                if (n) strcat(named, ")");
                fprintf(stderr, "clshim: %s: %s%s, %.0f s\n", who, count, named, t);
                next_report += CAPTURE_WAIT_REPORT_S;
            }
            next_scan += SCAN_PERIOD_S;
        }
        if (t >= (double)timeout_s) break;
        nanosleep(&(struct timespec){0, 50 * 1000000L}, NULL);
    }
    close(fd);
    return rc;
}

/* ---- the journal (capture_wait.h) ---- */

/* The journal's places: in the cache directory, and in /dev/shm for when
 * that directory's file system is full (what a lost capture often means). */
static void journal_path(const char *dir, int spare, char *out, size_t len)
{
    if (!spare) {
        snprintf(out, len, "%s/%s", dir, CAPTURE_JOURNAL);
        return;
    }
    unsigned long h = 5381;
    for (const char *p = dir; *p; p++) h = h * 33 + (unsigned char)*p;
    snprintf(out, len, "/dev/shm/clshim-%u-%lx.%s", (unsigned)getuid(), h, CAPTURE_JOURNAL);
}

static int journal_append(const char *path, const char *buf, size_t n)
{
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) return -1;
    struct stat st;
    int ok = fstat(fd, &st) == 0 && st.st_uid == getuid() &&
             (st.st_size >= (off_t)CAPTURE_JOURNAL_MAX || write(fd, buf, n) == (ssize_t)n);
    close(fd);
    return ok ? 0 : -1;
}

void capture_journal_note(const char *dir, const char *line)
{
    char path[4200], buf[1024];
    int n = snprintf(buf, sizeof buf, "%s\n", line);
    if (n > (int)sizeof buf - 1) n = (int)sizeof buf - 1, buf[n - 1] = '\n';
    journal_path(dir, 0, path, sizeof path);
    if (journal_append(path, buf, (size_t)n) == 0) return;
    journal_path(dir, 1, path, sizeof path);
    (void)journal_append(path, buf, (size_t)n); /* best effort: the store's counters say it too */
}

static int take_one(const char *path, struct capture_outcomes *out)
{
    char taken[4300];
    snprintf(taken, sizeof taken, "%s.%d", path, (int)getpid());
    if (rename(path, taken) != 0) return -1;
    FILE *f = fopen(taken, "r");
    char line[1100];
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        if (!strncmp(line, "stored ", 7)) {
            out->stored++;
        } else if (!strncmp(line, "push_refused ", 13)) {
            char *text;
            unsigned long n = strtoul(line + 13, &text, 10);
            if (!out->pushes_refused && *text == ' ')
                snprintf(out->first_refusal, sizeof out->first_refusal, "%.500s", text + 1);
            out->pushes_refused += n;
        } else if (!strncmp(line, "lost ", 5)) {
            if (!out->lost++) snprintf(out->first_lost, sizeof out->first_lost, "%.500s", line + 5);
            size_t wl = strcspn(line + 5, " ");
            for (unsigned r = 0; r < CAPTURE_LOST_COUNT && r < 16; r++)
                if (strlen(capture_lost_name(r)) == wl && !strncmp(line + 5, capture_lost_name(r), wl)) out->lost_by[r]++;
        }
    }
    if (f) fclose(f);
    unlink(taken);
    return 0;
}

int capture_journal_take(const char *dir, struct capture_outcomes *out)
{
    memset(out, 0, sizeof *out);
    char path[4200];
    journal_path(dir, 0, path, sizeof path);
    int found = take_one(path, out) == 0;
    journal_path(dir, 1, path, sizeof path);
    found |= take_one(path, out) == 0;
    return found ? 0 : -1;
}
