/* store_guard.c — faults in the mapped database never kill the app.
 *
 * LMDB reads data.mdb through a shared map. If the file shrinks under the
 * map (truncated by someone, a full disk on a sparse file, a network file
 * system), touching a page past its end raises SIGBUS, which would kill the
 * application. So every store operation that touches the map runs "armed":
 * the thread pushes a guard (a sigjmp_buf) and a process-wide SIGBUS handler,
 * installed once and chained to whatever handler was there before, jumps
 * back to the innermost guard of the faulting thread. A SIGBUS in a thread
 * with no guard armed is not ours: the previous handler gets it, or the
 * default action, exactly as without clshim.
 *
 * Why guard the map rather than read with pread: LMDB walks its B-tree
 * through the map inside mdb_get and mdb_txn_begin, so reading only the
 * values with pread would still leave the tree pages unguarded; and arming
 * costs a thread-local store and a sigsetjmp without saving the signal mask
 * (no system call), where a pread is a system call per lookup. Measured in
 * docs/security.md.
 *
 * The handler is installed with SA_NODEFER so that SIGBUS is not left
 * blocked after jumping out of it (sigsetjmp(.., 0) restores no mask). An
 * application that installs its own SIGBUS handler later replaces this one;
 * the guard then no longer helps, and that application's handler decides. */
#include <pthread.h>
#include <signal.h>
#include <string.h>

#include "cache/store_int.h"
#include "common/log.h"

static struct sigaction previous;
static pthread_once_t install_once = PTHREAD_ONCE_INIT;
static __thread struct store_guard *armed;

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
    struct store_guard *g = armed;
    if (g) {
        armed = g->prev;
        siglongjmp(g->jb, 1);
    }
    /* Not a fault of ours: as if clshim had never installed anything. */
    if (previous.sa_flags & SA_SIGINFO) {
        previous.sa_sigaction(sig, si, uc);
        return;
    }
    if (previous.sa_handler == SIG_IGN && si && si->si_code <= 0) return; /* sent, and ignored */
    if (previous.sa_handler == SIG_DFL || previous.sa_handler == SIG_IGN) {
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigaction(sig, &dfl, NULL);
        raise(sig);
        return;
    }
    previous.sa_handler(sig);
}

static void install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGBUS, &sa, &previous) != 0)
        log_msg(LOG_DEBUG, "cache: no SIGBUS guard (sigaction failed); a shrunk data.mdb would be fatal");
}

void store_guard_install(void) { pthread_once(&install_once, install); }

void store_guard_arm(struct store_guard *g)
{
    g->prev = armed;
    armed = g;
}

void store_guard_disarm(struct store_guard *g) { armed = g->prev; }

void store_fault_noted(store *s)
{
    if (__atomic_exchange_n(&s->faulted, 1, __ATOMIC_ACQ_REL)) return;
    log_msg(LOG_WARN, "cache %s: data.mdb changed under this process (truncated or shrunk); the cache is set "
            "aside for the rest of this run", s->dir);
}
