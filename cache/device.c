/* device.c — per-device identity, queried once. */
#include "cache/device.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "cache/quirks.h"
#include "common/objmap.h"

static objmap *devices;
static pthread_once_t devices_once = PTHREAD_ONCE_INIT;
static void make_map(void) { devices = objmap_new(); }

static char *query(const struct cl_api *real, cl_device_id dev, cl_platform_id plat, cl_uint param)
{
    size_t n = 0;
    cl_int rc = plat ? real->clGetPlatformInfo(plat, param, 0, NULL, &n)
                     : real->clGetDeviceInfo(dev, param, 0, NULL, &n);
    if (rc != CL_SUCCESS) return strdup("");
    char *s = calloc(1, n + 1);
    if (!s) return NULL;
    rc = plat ? real->clGetPlatformInfo(plat, param, n, s, NULL) : real->clGetDeviceInfo(dev, param, n, s, NULL);
    if (rc != CL_SUCCESS) s[0] = 0;
    return s;
}

static int has_word(const char *list, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = list; (p = strstr(p, word)); p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == 0 || p[n] == ' ')) return 1;
    return 0;
}

static struct device_info *make_info(const struct cl_api *real, cl_device_id dev)
{
    cl_platform_id plat = NULL;
    cl_uint vendor = 0, bits = 0;
    cl_device_type type = 0;
    if (real->clGetDeviceInfo(dev, CL_DEVICE_PLATFORM, sizeof plat, &plat, NULL) != CL_SUCCESS) return NULL;
    real->clGetDeviceInfo(dev, CL_DEVICE_VENDOR_ID, sizeof vendor, &vendor, NULL);
    real->clGetDeviceInfo(dev, CL_DEVICE_ADDRESS_BITS, sizeof bits, &bits, NULL);
    real->clGetDeviceInfo(dev, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    char *pname = query(real, NULL, plat, CL_PLATFORM_NAME);
    char *pver = query(real, NULL, plat, CL_PLATFORM_VERSION);
    char *dname = query(real, dev, NULL, CL_DEVICE_NAME);
    char *dver = query(real, dev, NULL, CL_DEVICE_VERSION);
    char *drv = query(real, dev, NULL, CL_DRIVER_VERSION);
    char *clc = query(real, dev, NULL, CL_DEVICE_OPENCL_C_VERSION);
    char *ext = query(real, dev, NULL, CL_DEVICE_EXTENSIONS);
    char *il = query(real, dev, NULL, CL_DEVICE_IL_VERSION);
    struct device_info *info = calloc(1, sizeof *info);
    char env[24 * 1100];
    size_t envlen = pname ? quirk_driver_env(pname, env, sizeof env) : 0;
    if (info && pname && pver && dname && dver && drv && clc && ext && il && envlen != (size_t)-1) {
        size_t n = strlen(pname) + strlen(pver) + strlen(dname) + strlen(dver) + strlen(drv) + strlen(clc) +
                   strlen(ext) + envlen + 512;
        info->identity = malloc(n);
        if (info->identity)
            snprintf(info->identity, n,
                     "platform.name=%s\nplatform.version=%s\ndevice.name=%s\ndevice.version=%s\n"
                     "driver.version=%s\ndevice.vendor_id=0x%x\ndevice.opencl_c=%s\ndevice.extensions=%s\n"
                     "device.address_bits=%u\ndevice.type=0x%llx\n%s",
                     pname, pver, dname, dver, drv, vendor, clc, ext, bits, (unsigned long long)type, envlen ? env : "");
        if (info->identity) {
            XXH128_canonical_t c;
            XXH128_canonicalFromHash(&c, XXH3_128bits(info->identity, strlen(info->identity)));
            memcpy(info->identity_digest, c.digest, sizeof info->identity_digest);
        }
        snprintf(info->name, sizeof info->name, "%s", dname);
        info->has_native_il = il[0] != 0;
        info->has_spir = has_word(ext, "cl_khr_spir");
        /* NVIDIA's OpenCL: binaries are PTX; cl_nv_device_attribute_query
         * gives the compute capability (CL_DEVICE_COMPUTE_CAPABILITY_*_NV) */
        info->takes_ptx = !strcmp(pname, "NVIDIA CUDA");
        cl_uint major = 0, minor = 0;
        if (info->takes_ptx && has_word(ext, "cl_nv_device_attribute_query") &&
            real->clGetDeviceInfo(dev, 0x4000, sizeof major, &major, NULL) == CL_SUCCESS &&
            real->clGetDeviceInfo(dev, 0x4001, sizeof minor, &minor, NULL) == CL_SUCCESS)
            info->nv_sm = major * 10 + minor;
        info->lazy_codegen = strstr(pname, "Portable Computing Language") != NULL;
        info->quirks = quirks_for(pname, drv);
        info->shared_codegen_cache = info->lazy_codegen && !(info->quirks & QUIRK_STAND_ASIDE_UNCACHED);
    }
    free(pname); free(pver); free(dname); free(dver); free(drv); free(clc); free(ext); free(il);
    if (info && !info->identity) {
        free(info);
        info = NULL;
    }
    return info;
}

const struct device_info *device_info(const struct cl_api *real, cl_device_id dev)
{
    pthread_once(&devices_once, make_map);
    if (!devices || !dev) return NULL;
    struct device_info *info = objmap_get(devices, dev);
    if (info) return info;
    info = make_info(real, dev);
    if (!info) return NULL;
    /* Two threads may race to fill the same device: both answers are equal,
     * keep the first and drop ours. */
    static pthread_mutex_t fill_lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&fill_lock);
    struct device_info *old = objmap_get(devices, dev);
    if (old) {
        free(info->identity);
        free(info);
        info = old;
    } else if (objmap_put(devices, dev, info) != 0) {
        free(info->identity);
        free(info);
        info = NULL;
    }
    pthread_mutex_unlock(&fill_lock);
    return info;
}
