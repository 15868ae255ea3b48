/* error.c — descriptions of clshim's internal error codes. */
#include "common/error.h"

const char *clshim_strerror(int err)
{
    switch (err) {
    case CLSHIM_OK: return "success";
    case CLSHIM_ENOTFOUND: return "not found";
    case CLSHIM_ECORRUPT: return "corrupt data";
    case CLSHIM_ECOLLISION: return "hash collision (key material differs)";
    case CLSHIM_ENOMEM: return "out of memory";
    case CLSHIM_EIO: return "I/O error";
    case CLSHIM_EFULL: return "cache full";
    case CLSHIM_EPERM: return "unsafe ownership or permissions";
    case CLSHIM_EREADONLY: return "cache is read-only";
    case CLSHIM_EBUSY: return "busy";
    case CLSHIM_EINVAL: return "invalid argument or malformed input";
    case CLSHIM_ETOOBIG: return "outside the entry size limits";
    case CLSHIM_EUNSUPPORTED: return "unsupported";
    case CLSHIM_EDISABLED: return "disabled by configuration";
    case CLSHIM_ENOSPC: return "no space left on device";
    case CLSHIM_EUNTRUSTED: return "not sealed by a trusted key";
    }
    return "unknown error";
}
