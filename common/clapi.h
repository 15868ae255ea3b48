/* clapi.h — a table of OpenCL entry points.
 *
 * The interposer fills one with the real driver's functions (dlsym
 * RTLD_NEXT); cache/ and fusion/ call the driver only through a table they
 * are handed, so they never depend on how the call was intercepted, and unit
 * tests can hand them the ICD loader's functions directly.
 * CLAPI_FUNCTIONS lists every entry point clshim defines or calls.
 */
#ifndef CLSHIM_CLAPI_H
#define CLSHIM_CLAPI_H

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 300
#endif
#define CL_USE_DEPRECATED_OPENCL_1_0_APIS
#define CL_USE_DEPRECATED_OPENCL_1_1_APIS
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#define CL_USE_DEPRECATED_OPENCL_2_0_APIS
#define CL_USE_DEPRECATED_OPENCL_2_2_APIS
#include <CL/cl.h>
#include <CL/cl_ext.h>

#define CLAPI_FUNCTIONS(X)                                                    \
    X(clGetPlatformIDs) X(clGetPlatformInfo) X(clGetDeviceIDs) X(clGetDeviceInfo) \
    X(clCreateContext) X(clCreateContextFromType) X(clRetainContext)           \
    X(clReleaseContext) X(clGetContextInfo)                                    \
    X(clCreateCommandQueue) X(clCreateCommandQueueWithProperties)              \
    X(clRetainCommandQueue) X(clReleaseCommandQueue) X(clGetCommandQueueInfo)  \
    X(clCreateBuffer) X(clCreateSubBuffer) X(clRetainMemObject)                \
    X(clReleaseMemObject) X(clGetMemObjectInfo)                                \
    X(clCreateProgramWithSource) X(clCreateProgramWithBinary)                  \
    X(clCreateProgramWithIL) X(clCreateProgramWithBuiltInKernels)              \
    X(clRetainProgram) X(clReleaseProgram) X(clBuildProgram)                   \
    X(clCompileProgram) X(clLinkProgram) X(clGetProgramInfo)                   \
    X(clGetProgramBuildInfo) X(clSetProgramSpecializationConstant)             \
    X(clSetProgramReleaseCallback)                                             \
    X(clCreateKernel) X(clCreateKernelsInProgram) X(clCloneKernel)             \
    X(clRetainKernel) X(clReleaseKernel) X(clSetKernelArg)                     \
    X(clSetKernelArgSVMPointer) X(clSetKernelExecInfo) X(clGetKernelInfo)      \
    X(clGetKernelArgInfo) X(clGetKernelWorkGroupInfo)                          \
    X(clWaitForEvents) X(clGetEventInfo) X(clCreateUserEvent)                  \
    X(clRetainEvent) X(clReleaseEvent) X(clSetUserEventStatus)                 \
    X(clSetEventCallback) X(clGetEventProfilingInfo) X(clFlush) X(clFinish)    \
    X(clEnqueueReadBuffer) X(clEnqueueReadBufferRect) X(clEnqueueWriteBuffer)  \
    X(clEnqueueWriteBufferRect) X(clEnqueueFillBuffer) X(clEnqueueCopyBuffer)  \
    X(clEnqueueCopyBufferRect) X(clEnqueueReadImage) X(clEnqueueWriteImage)    \
    X(clEnqueueFillImage) X(clEnqueueCopyImage) X(clEnqueueCopyImageToBuffer)  \
    X(clEnqueueCopyBufferToImage) X(clEnqueueMapBuffer) X(clEnqueueMapImage)   \
    X(clEnqueueUnmapMemObject) X(clEnqueueMigrateMemObjects)                   \
    X(clEnqueueNDRangeKernel) X(clEnqueueTask) X(clEnqueueNativeKernel)        \
    X(clEnqueueMarkerWithWaitList) X(clEnqueueBarrierWithWaitList)             \
    X(clEnqueueMarker) X(clEnqueueWaitForEvents) X(clEnqueueBarrier)           \
    X(clEnqueueSVMFree) X(clEnqueueSVMMemcpy) X(clEnqueueSVMMemFill)           \
    X(clEnqueueSVMMap) X(clEnqueueSVMUnmap) X(clEnqueueSVMMigrateMem)          \
    X(clGetExtensionFunctionAddress) X(clGetExtensionFunctionAddressForPlatform)

struct cl_api {
#define CLAPI_MEMBER(name) __typeof__(name) *name;
    CLAPI_FUNCTIONS(CLAPI_MEMBER)
#undef CLAPI_MEMBER
};

/* Fills `api` with the ICD loader's own functions (for tests and the tool,
 * which link libOpenCL directly). */
void clapi_from_loader(struct cl_api *api);

#endif
