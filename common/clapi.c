/* clapi.c — a cl_api table of the loader's functions (tests, tools). */
#include "common/clapi.h"

void clapi_from_loader(struct cl_api *api)
{
#define CLAPI_SET(name) api->name = name;
    CLAPI_FUNCTIONS(CLAPI_SET)
#undef CLAPI_SET
}
