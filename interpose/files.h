/* files.h — the process's file entry points (files.c), and binding the
 * driver's calls to them where the dynamic linker does not (bind.c).
 *
 * A sandboxed build (cache/sandbox.h) is exact only when the driver's
 * compiler opens and stats files through files.c. With libclshim.so in
 * LD_PRELOAD (and in clshim-tool, which exports the names) the dynamic
 * linker sees to that. When clshim is itself loaded by dlopen — the loader
 * library of a program that dlopens OpenCL (hashcat), a layer — the driver
 * and its libraries resolve `open` to libc's, so clshim would see none of
 * their reads. bind.c then points those objects' own relocations (the GOT
 * slots of the names below) at files.c's functions: each loaded object but
 * libc, the dynamic linker and this object, as LD_PRELOAD would have bound
 * them. It runs only when a sandbox begins and the dynamic linker's choice
 * is not files.c's (cache/sandbox.h: sandbox_binder).
 */
#ifndef CLSHIM_FILES_H
#define CLSHIM_FILES_H

/* A libc name and files.c's function for it; the table ends with NULLs. */
struct files_entry {
    const char *name;
    void *fn;
};
extern const struct files_entry files_entries[];

#endif
