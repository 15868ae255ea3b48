/* clapi.c — a cl_api table of the loader's functions (tests, tools).
 * Looked up by name at run time, not referenced: libclshim.so links this
 * file too, and a link-time reference to, say, an OpenCL 2.2 function would
 * stop the shim from loading at all on an older loader. */
#include "common/clapi.h"

#include <dlfcn.h>

void clapi_from_loader(struct cl_api *api)
{
#define CLAPI_SET(name) api->name = (__typeof__(name) *)dlsym(RTLD_DEFAULT, #name);
    CLAPI_FUNCTIONS(CLAPI_SET)
#undef CLAPI_SET
}
