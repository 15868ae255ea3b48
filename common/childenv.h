/* childenv.h — the environment of a process clshim starts (clang, the
 * capture helper): the application's, without clshim in it.
 *
 * child_environ() copies environ, leaving out every LD_PRELOAD entry that
 * names libclshim and, in loader mode (this library is a libOpenCL.so.1),
 * the LD_LIBRARY_PATH entry that puts this library first: the child then
 * loads the real ICD loader, and a sanitizer-built shim cannot stop it from
 * starting (the sanitizer runtime must come first); and every OPENCL_LAYERS
 * entry that names libclshim (the capture helper must see the driver's own
 * devices, not what clshim's layer answers for them). NULL on out-of-memory
 * (the caller uses environ). free_environ() frees it.
 */
#ifndef CLSHIM_CHILDENV_H
#define CLSHIM_CHILDENV_H

char **child_environ(void);
void free_environ(char **env);

#endif
