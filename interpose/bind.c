/* bind.c — the driver's file calls bound to files.c where the dynamic
 * linker bound them elsewhere (interpose/files.h says when and why).
 *
 * For each loaded object not bound yet (libc, the dynamic linker and this
 * object excepted), its dynamic relocations are walked; each GOT slot of a
 * name in files_entries (R_X86_64_JUMP_SLOT: calls through the PLT,
 * R_X86_64_GLOB_DAT: -fno-plt calls and taken addresses) is pointed at
 * files.c's function, which calls the function the name had (found with
 * dlsym(RTLD_NEXT)). A slot is one aligned pointer, stored atomically, so a
 * thread calling through it meanwhile reaches one function or the other;
 * a slot in the object's RELRO range (read-only after relocation) is made
 * writable for the store and read-only again.
 *
 * dl_iterate_phdr's load and unload counters say when the object list
 * changed; only then are the objects walked again (a slot already bound is
 * left as it is and not counted), so a sandbox that begins with nothing
 * new pays for one look at the counters. Walking every object, not only
 * new ones, binds an object loaded where an unloaded one was.
 */
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cache/sandbox.h"
#include "common/log.h"
#include "interpose/files.h"

#if !defined(__x86_64__)
#error "interpose/bind.c reads x86-64 relocations"
#endif

static pthread_mutex_t bind_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned long long seen_adds = ~0ULL, seen_subs = ~0ULL;
static long sites_bound;     /* monotonic: what sandbox_binder() returns */
static int cannot_bind;      /* a slot could not be written: reads may go unseen */
static ElfW(Addr) self_base; /* this object's, never bound */

static const struct files_entry *entry_of(const char *name)
{
    for (const struct files_entry *e = files_entries; e->name; e++)
        if (!strcmp(e->name, name)) return e;
    return NULL;
}

/* The objects whose own calls are not what LD_PRELOAD would change. */
static int excluded(const struct dl_phdr_info *info)
{
    const char *name = info->dlpi_name ? info->dlpi_name : "";
    const char *base = strrchr(name, '/');
    base = base ? base + 1 : name;
    static const char *const skip[] = {"libc.so", "ld-linux", "linux-vdso",
                                       /* sanitizer runtimes intercept these names themselves */
                                       "libasan.so", "libtsan.so", "libubsan.so", "liblsan.so"};
    if (info->dlpi_addr == self_base) return 1;
    for (size_t i = 0; i < sizeof skip / sizeof *skip; i++)
        if (!strncmp(base, skip[i], strlen(skip[i]))) return 1;
    return 0;
}

/* glibc stores relocated addresses in .dynamic on x86-64; a value below
 * the load address is a file offset still (as other C libraries leave it). */
static uintptr_t dyn_ptr(const struct dl_phdr_info *info, ElfW(Addr) p)
{
    return p < info->dlpi_addr ? info->dlpi_addr + p : p;
}

/* Stores `fn` in the slot: 1, 0 when it held it already, -1 when the page
 * cannot be made writable. */
static int store_slot(void **slot, void *fn, uintptr_t relro_lo, uintptr_t relro_hi)
{
    if (__atomic_load_n(slot, __ATOMIC_RELAXED) == fn) return 0;
    uintptr_t at = (uintptr_t)slot;
    int in_relro = at >= relro_lo && at < relro_hi;
    uintptr_t page = at & ~(uintptr_t)(sysconf(_SC_PAGESIZE) - 1);
    if (in_relro && mprotect((void *)page, (size_t)sysconf(_SC_PAGESIZE), PROT_READ | PROT_WRITE) != 0) return -1;
    __atomic_store_n(slot, fn, __ATOMIC_RELEASE);
    if (in_relro) mprotect((void *)page, (size_t)sysconf(_SC_PAGESIZE), PROT_READ);
    return 1;
}

static void bind_relocs(const struct dl_phdr_info *info, const ElfW(Rela) *rel, size_t size, const ElfW(Sym) *symtab,
                        const char *strtab, uintptr_t relro_lo, uintptr_t relro_hi)
{
    for (size_t i = 0; rel && i < size / sizeof *rel; i++) {
        unsigned long type = ELF64_R_TYPE(rel[i].r_info), sym = ELF64_R_SYM(rel[i].r_info);
        if ((type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT) || !sym) continue;
        const struct files_entry *e = entry_of(strtab + symtab[sym].st_name);
        if (!e || symtab[sym].st_shndx != SHN_UNDEF) continue; /* the object's own definition: not a libc call */
        int stored = store_slot((void **)(info->dlpi_addr + rel[i].r_offset), e->fn, relro_lo, relro_hi);
        if (stored < 0) cannot_bind = 1;
        else sites_bound += stored;
    }
}

static int bind_object(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size, (void)arg;
    if (excluded(info)) return 0;
    const ElfW(Dyn) *dyn = NULL;
    uintptr_t relro_lo = 0, relro_hi = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_DYNAMIC) dyn = (const ElfW(Dyn) *)(info->dlpi_addr + ph->p_vaddr);
        if (ph->p_type == PT_GNU_RELRO) relro_lo = info->dlpi_addr + ph->p_vaddr, relro_hi = relro_lo + ph->p_memsz;
    }
    if (!dyn) return 0;
    const ElfW(Sym) *symtab = NULL;
    const char *strtab = NULL;
    const ElfW(Rela) *jmprel = NULL, *rela = NULL;
    size_t jmprel_size = 0, rela_size = 0;
    for (const ElfW(Dyn) *d = dyn; d->d_tag != DT_NULL; d++) {
        switch (d->d_tag) {
        case DT_SYMTAB: symtab = (const ElfW(Sym) *)dyn_ptr(info, d->d_un.d_ptr); break;
        case DT_STRTAB: strtab = (const char *)dyn_ptr(info, d->d_un.d_ptr); break;
        case DT_JMPREL: jmprel = (const ElfW(Rela) *)dyn_ptr(info, d->d_un.d_ptr); break;
        case DT_PLTRELSZ: jmprel_size = d->d_un.d_val; break;
        case DT_RELA: rela = (const ElfW(Rela) *)dyn_ptr(info, d->d_un.d_ptr); break;
        case DT_RELASZ: rela_size = d->d_un.d_val; break;
        case DT_PLTREL: if (d->d_un.d_val != DT_RELA) return 0; break; /* never on x86-64 */
        }
    }
    if (!symtab || !strtab) return 0;
    bind_relocs(info, jmprel, jmprel_size, symtab, strtab, relro_lo, relro_hi);
    bind_relocs(info, rela, rela_size, symtab, strtab, relro_lo, relro_hi);
    return 0;
}

static int load_counts(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    unsigned long long *counts = arg;
    counts[0] = info->dlpi_adds, counts[1] = info->dlpi_subs;
    return 1; /* the counters are the same in every entry */
}

static long bind_driver_files(void)
{
    pthread_mutex_lock(&bind_lock);
    unsigned long long counts[2] = {0, 0};
    dl_iterate_phdr(load_counts, counts);
    if (counts[0] != seen_adds || counts[1] != seen_subs) {
        long before = sites_bound;
        dl_iterate_phdr(bind_object, NULL);
        seen_adds = counts[0], seen_subs = counts[1];
        if (sites_bound != before)
            log_msg(LOG_DEBUG, "bound %ld file call site%s of the driver's libraries to clshim's (it was loaded "
                               "by dlopen)", sites_bound - before, sites_bound - before == 1 ? "" : "s");
    }
    long rc = cannot_bind ? -1 : sites_bound;
    pthread_mutex_unlock(&bind_lock);
    return rc;
}

__attribute__((constructor)) static void bind_register(void)
{
    Dl_info self;
    if (dladdr((void *)files_entries, &self) && self.dli_fbase) {
        self_base = (ElfW(Addr))self.dli_fbase;
        /* dli_fbase is the mapping's start; dlpi_addr the load bias: equal for
         * a shared object linked at address 0, as every one here is. */
        sandbox_binder = bind_driver_files;
    }
}
