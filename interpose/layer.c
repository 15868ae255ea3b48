/* layer.c — clshim as an OpenCL loader layer (OPENCL_LAYERS=.../libclshim.so).
 *
 * The ICD loader (ocl-icd >= 2.3, the Khronos loader >= 2020.06) dlopens each
 * library named in OPENCL_LAYERS and calls clGetLayerInfo, then clInitLayer
 * (newer Khronos loaders: clInitLayerWithProperties) with the dispatch table
 * one step closer to the driver. The layer answers with its own table; the
 * loader then routes every API call of the process, whether the app linked
 * libOpenCL or dlopen'ed it, through that table.
 *
 * Our table holds clshim's own exported entry points — the very functions
 * that serve LD_PRELOAD — so the core cannot tell the modes apart; slots
 * clshim does not define stay NULL and the loader fills them from the target.
 * The target table becomes real_table (real.c), so clshim's calls to the
 * driver never go back through the loader. The entries are found by name in
 * this library's own symbol table (dlsym on our handle, checked with dladdr)
 * rather than by address-of: a reference to an exported name may bind to an
 * earlier definition in the process (the ICD loader's, or a preloaded copy),
 * which would send the loader's call straight back to itself.
 */
#include "interpose/entry.h"

#include <CL/cl_icd.h>
#include <CL/cl_layer.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>

#include "common/log.h"

/* Every slot of struct _cl_icd_dispatch, in header order (the order does not
 * matter: each is placed by offsetof). */
#define LAYER_SLOTS(X)                                                                              \
    X(clGetPlatformIDs) X(clGetPlatformInfo) X(clGetDeviceIDs) X(clGetDeviceInfo) X(clCreateContext) \
    X(clCreateContextFromType) X(clRetainContext) X(clReleaseContext) X(clGetContextInfo)           \
    X(clCreateCommandQueue) X(clRetainCommandQueue) X(clReleaseCommandQueue)                        \
    X(clGetCommandQueueInfo) X(clSetCommandQueueProperty) X(clCreateBuffer) X(clCreateImage2D)      \
    X(clCreateImage3D) X(clRetainMemObject) X(clReleaseMemObject) X(clGetSupportedImageFormats)     \
    X(clGetMemObjectInfo) X(clGetImageInfo) X(clCreateSampler) X(clRetainSampler)                   \
    X(clReleaseSampler) X(clGetSamplerInfo) X(clCreateProgramWithSource)                            \
    X(clCreateProgramWithBinary) X(clRetainProgram) X(clReleaseProgram) X(clBuildProgram)           \
    X(clUnloadCompiler) X(clGetProgramInfo) X(clGetProgramBuildInfo) X(clCreateKernel)              \
    X(clCreateKernelsInProgram) X(clRetainKernel) X(clReleaseKernel) X(clSetKernelArg)              \
    X(clGetKernelInfo) X(clGetKernelWorkGroupInfo) X(clWaitForEvents) X(clGetEventInfo)             \
    X(clRetainEvent) X(clReleaseEvent) X(clGetEventProfilingInfo) X(clFlush) X(clFinish)            \
    X(clEnqueueReadBuffer) X(clEnqueueWriteBuffer) X(clEnqueueCopyBuffer) X(clEnqueueReadImage)     \
    X(clEnqueueWriteImage) X(clEnqueueCopyImage) X(clEnqueueCopyImageToBuffer)                      \
    X(clEnqueueCopyBufferToImage) X(clEnqueueMapBuffer) X(clEnqueueMapImage)                        \
    X(clEnqueueUnmapMemObject) X(clEnqueueNDRangeKernel) X(clEnqueueTask) X(clEnqueueNativeKernel)  \
    X(clEnqueueMarker) X(clEnqueueWaitForEvents) X(clEnqueueBarrier)                                \
    X(clGetExtensionFunctionAddress) X(clCreateFromGLBuffer) X(clCreateFromGLTexture2D)             \
    X(clCreateFromGLTexture3D) X(clCreateFromGLRenderbuffer) X(clGetGLObjectInfo)                   \
    X(clGetGLTextureInfo) X(clEnqueueAcquireGLObjects) X(clEnqueueReleaseGLObjects)                 \
    X(clGetGLContextInfoKHR) X(clGetDeviceIDsFromD3D10KHR) X(clCreateFromD3D10BufferKHR)            \
    X(clCreateFromD3D10Texture2DKHR) X(clCreateFromD3D10Texture3DKHR)                               \
    X(clEnqueueAcquireD3D10ObjectsKHR) X(clEnqueueReleaseD3D10ObjectsKHR) X(clSetEventCallback)     \
    X(clCreateSubBuffer) X(clSetMemObjectDestructorCallback) X(clCreateUserEvent)                   \
    X(clSetUserEventStatus) X(clEnqueueReadBufferRect) X(clEnqueueWriteBufferRect)                  \
    X(clEnqueueCopyBufferRect) X(clCreateSubDevicesEXT) X(clRetainDeviceEXT) X(clReleaseDeviceEXT)  \
    X(clCreateEventFromGLsyncKHR) X(clCreateSubDevices) X(clRetainDevice) X(clReleaseDevice)        \
    X(clCreateImage) X(clCreateProgramWithBuiltInKernels) X(clCompileProgram) X(clLinkProgram)      \
    X(clUnloadPlatformCompiler) X(clGetKernelArgInfo) X(clEnqueueFillBuffer) X(clEnqueueFillImage)  \
    X(clEnqueueMigrateMemObjects) X(clEnqueueMarkerWithWaitList) X(clEnqueueBarrierWithWaitList)    \
    X(clGetExtensionFunctionAddressForPlatform) X(clCreateFromGLTexture)                            \
    X(clGetDeviceIDsFromD3D11KHR) X(clCreateFromD3D11BufferKHR) X(clCreateFromD3D11Texture2DKHR)    \
    X(clCreateFromD3D11Texture3DKHR) X(clCreateFromDX9MediaSurfaceKHR)                              \
    X(clEnqueueAcquireD3D11ObjectsKHR) X(clEnqueueReleaseD3D11ObjectsKHR)                           \
    X(clGetDeviceIDsFromDX9MediaAdapterKHR) X(clEnqueueAcquireDX9MediaSurfacesKHR)                  \
    X(clEnqueueReleaseDX9MediaSurfacesKHR) X(clCreateFromEGLImageKHR)                               \
    X(clEnqueueAcquireEGLObjectsKHR) X(clEnqueueReleaseEGLObjectsKHR) X(clCreateEventFromEGLSyncKHR) \
    X(clCreateCommandQueueWithProperties) X(clCreatePipe) X(clGetPipeInfo) X(clSVMAlloc)            \
    X(clSVMFree) X(clEnqueueSVMFree) X(clEnqueueSVMMemcpy) X(clEnqueueSVMMemFill)                   \
    X(clEnqueueSVMMap) X(clEnqueueSVMUnmap) X(clCreateSamplerWithProperties)                        \
    X(clSetKernelArgSVMPointer) X(clSetKernelExecInfo) X(clGetKernelSubGroupInfoKHR)                \
    X(clCloneKernel) X(clCreateProgramWithIL) X(clEnqueueSVMMigrateMem) X(clGetDeviceAndHostTimer)  \
    X(clGetHostTimer) X(clGetKernelSubGroupInfo) X(clSetDefaultDeviceCommandQueue)                  \
    X(clSetProgramReleaseCallback) X(clSetProgramSpecializationConstant)                            \
    X(clCreateBufferWithProperties) X(clCreateImageWithProperties) X(clSetContextDestructorCallback)

#define LAYER_NUM_SLOTS ((cl_uint)(sizeof(struct _cl_icd_dispatch) / sizeof(void *)))

static const struct {
    const char *name;
    size_t offset;
} slots[] = {
#define LAYER_SLOT(name) {#name, offsetof(struct _cl_icd_dispatch, name)},
    LAYER_SLOTS(LAYER_SLOT)
#undef LAYER_SLOT
};

static struct _cl_icd_dispatch own_table;    /* what the loader calls */
static struct _cl_icd_dispatch target_table; /* what clshim calls */
static unsigned target_slots;
static int target_set; /* release-published once target_table is filled */
static pthread_once_t own_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;

typedef void *(CL_API_CALL *gefa_fn)(const char *);
typedef void *(CL_API_CALL *gefap_fn)(cl_platform_id, const char *);
static gefa_fn own_gefa;
static gefap_fn own_gefap;

static void *CL_API_CALL layer_gefa(const char *name);
static void *CL_API_CALL layer_gefap(cl_platform_id platform, const char *name);

const struct _cl_icd_dispatch *layer_target(unsigned *num_entries)
{
    if (!__atomic_load_n(&target_set, __ATOMIC_ACQUIRE)) return NULL;
    if (num_entries) *num_entries = target_slots;
    return &target_table;
}

/* Fills own_table with the entry points this library itself defines. */
static void build_own_table(void)
{
    Dl_info info;
    if (!dladdr((void *)build_own_table, &info) || !info.dli_fname) return;
    void *self_base = info.dli_fbase;
    void *self = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
    if (!self) return;
    void **table = (void **)&own_table;
    int count = 0;
    for (size_t i = 0; i < sizeof slots / sizeof *slots; i++) {
        void *f = dlsym(self, slots[i].name);
        Dl_info where;
        if (!f || !dladdr(f, &where) || where.dli_fbase != self_base) continue;
        table[slots[i].offset / sizeof(void *)] = f;
        count++;
    }
    /* The extension lookups answer the marker before reaching clshim's entry. */
    own_gefa = (gefa_fn)own_table.clGetExtensionFunctionAddress;
    own_gefap = (gefap_fn)own_table.clGetExtensionFunctionAddressForPlatform;
    own_table.clGetExtensionFunctionAddress = layer_gefa;
    own_table.clGetExtensionFunctionAddressForPlatform = layer_gefap;
    dlclose(self); /* RTLD_NOLOAD took a reference; we stay loaded */
    log_msg(LOG_DEBUG, "layer: %d entry points in clshim's dispatch table", count);
}

static void *marker(void) { return (void *)&own_table; }

static void *CL_API_CALL layer_gefa(const char *name)
{
    if (name && !strcmp(name, REAL_LAYER_MARKER)) return marker();
    if (own_gefa) return own_gefa(name);
    unsigned n;
    const struct _cl_icd_dispatch *t = layer_target(&n);
    return t && t->clGetExtensionFunctionAddress ? t->clGetExtensionFunctionAddress(name) : NULL;
}

static void *CL_API_CALL layer_gefap(cl_platform_id platform, const char *name)
{
    if (name && !strcmp(name, REAL_LAYER_MARKER)) return marker();
    if (own_gefap) return own_gefap(platform, name);
    unsigned n;
    const struct _cl_icd_dispatch *t = layer_target(&n);
    return t && t->clGetExtensionFunctionAddressForPlatform
               ? t->clGetExtensionFunctionAddressForPlatform(platform, name)
               : NULL;
}

static cl_int init_layer(cl_uint num_entries, const struct _cl_icd_dispatch *target, cl_uint *num_entries_out,
                         const struct _cl_icd_dispatch **layer_dispatch_ret)
{
    if (!target || !num_entries || !num_entries_out || !layer_dispatch_ret) return CL_INVALID_VALUE;
    pthread_once(&own_once, build_own_table);
    pthread_mutex_lock(&init_lock);
    if (__atomic_load_n(&target_set, __ATOMIC_RELAXED)) {
        /* A second loader in the process (clshim's loader library and the
         * real one both listing us): keep serving the first chain. */
        pthread_mutex_unlock(&init_lock);
        log_msg(LOG_WARN, "layer initialised twice; the second loader's calls are forwarded to the first chain");
    } else {
        cl_uint n = num_entries < LAYER_NUM_SLOTS ? num_entries : LAYER_NUM_SLOTS;
        memcpy(&target_table, target, n * sizeof(void *));
        target_slots = n;
        __atomic_store_n(&target_set, 1, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&init_lock);
    }
    *num_entries_out = LAYER_NUM_SLOTS;
    *layer_dispatch_ret = &own_table;
    return CL_SUCCESS;
}

SHIM_EXPORT cl_int CL_API_CALL clGetLayerInfo(cl_layer_info param_name, size_t param_value_size,
                                              void *param_value, size_t *param_value_size_ret)
{
    static const char name[] = "clshim " CLSHIM_VERSION " (program cache, kernel fusion)";
    const void *src;
    size_t size;
    cl_layer_api_version version = CL_LAYER_API_VERSION_100;
    switch (param_name) {
    case CL_LAYER_API_VERSION: src = &version; size = sizeof version; break;
    case CL_LAYER_NAME: src = name; size = sizeof name; break;
    default: return CL_INVALID_VALUE;
    }
    if (param_value) {
        if (param_value_size < size) return CL_INVALID_VALUE;
        memcpy(param_value, src, size);
    }
    if (param_value_size_ret) *param_value_size_ret = size;
    return CL_SUCCESS;
}

SHIM_EXPORT cl_int CL_API_CALL clInitLayer(cl_uint num_entries, const struct _cl_icd_dispatch *target_dispatch,
                                           cl_uint *num_entries_out,
                                           const struct _cl_icd_dispatch **layer_dispatch_ret)
{
    return init_layer(num_entries, target_dispatch, num_entries_out, layer_dispatch_ret);
}

/* Properties (deinitialisation style, so far) are accepted and ignored:
 * refusing one would only leave the app without clshim, and clshim needs no
 * deinitialisation beyond its own exit handlers. */
SHIM_EXPORT cl_int CL_API_CALL clInitLayerWithProperties(cl_uint num_entries,
                                                         const struct _cl_icd_dispatch *target_dispatch,
                                                         cl_uint *num_entries_out,
                                                         const struct _cl_icd_dispatch **layer_dispatch_ret,
                                                         const cl_properties *properties)
{
    (void)properties;
    return init_layer(num_entries, target_dispatch, num_entries_out, layer_dispatch_ret);
}

SHIM_EXPORT cl_int CL_API_CALL clDeinitLayer(void) { return CL_SUCCESS; }
