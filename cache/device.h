/* device.h — what identifies a device's code generation, asked once.
 *
 * device_info() returns, for a cl_device_id, the identity text that goes
 * into every key (platform name and version, device name and version,
 * driver version, vendor id, OpenCL C version, extensions, address bits,
 * type) and the capabilities clshim routes on (native IL, SPIR). The answer
 * is computed on first use per device and kept for the process; thread-safe.
 */
#ifndef CLSHIM_DEVICE_H
#define CLSHIM_DEVICE_H

#include <stdint.h>

#include "common/clapi.h"

struct device_info {
    char *identity;     /* "platform.name=...\n..." for the key */
    unsigned char identity_digest[16]; /* XXH3-128 of identity (canonical): a record keyed by
                                          the device that need not name it (the fusion history) */
    char name[256];     /* device name, for log lines and `cache list` */
    int has_native_il;  /* CL_DEVICE_IL_VERSION non-empty */
    int has_spir;       /* cl_khr_spir */
    int takes_ptx;      /* program binaries are PTX text (NVIDIA's driver):
                           SPIR-V goes through route (a), compiler/llvm/ptx.c */
    uint32_t nv_sm;     /* NVIDIA's compute capability, major*10+minor; 0 unknown */
    int lazy_codegen;   /* PoCL: compiles work-group functions at first
                           enqueue and freezes its binary at the first read */
    int shared_codegen_cache; /* PoCL with its kernel cache on: another process
                           building the same source finds the code this one
                           generated at first enqueue (the capture helper,
                           program/capture_proc.h, rebuilds there) */
    unsigned quirks;    /* enum driver_quirk bits (cache/quirks.h) */
};

/* NULL when the device cannot be queried (the caller then does not cache). */
const struct device_info *device_info(const struct cl_api *real, cl_device_id dev);

#endif
