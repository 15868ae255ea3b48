/* program.h — the program layer: creation, build, queries, kernels.
 *
 * The interposer hands every program- and kernel-related call here when the
 * shim is enabled. Design: the application's cl_program handle is always a
 * real program of the driver (so the ICD loader dispatches it as usual).
 *  - Source (and native IL) programs: the handle is the program the app
 *    created. At clBuildProgram, per device, the key is looked up in the
 *    in-memory tier, then the persistent store, then the remote tier
 *    (cache/pipeline.h; compile, link and derived programs
 *    too). When every device hits, a
 *    second real program is created from the cached binaries and built (the
 *    "effective" program); the handle stays unbuilt and queries about the
 *    build, binaries and kernels are answered from the effective program —
 *    except the build log and options, which are the original build's.
 *    Kernels are created from the effective program; each one retains the
 *    handle (as a driver's kernel retains its program) and reports it as
 *    CL_KERNEL_PROGRAM.
 *  - On a miss the handle itself is built by the driver, and its binary is
 *    stored at once — or, on PoCL, at the first synchronisation after one of
 *    its kernels ran, or when the handle is released, or at exit within
 *    CLSHIM_CAPTURE_EXIT_BUDGET for a program that did neither (PoCL adds
 *    the work-group functions it compiles at first enqueue; that binary
 *    loads several times faster). See program/origin.h. The captures at a
 *    synchronisation and at exit run on a background thread
 *    (program/capture.h), which holds a driver reference on the program
 *    until its capture is done; the last release captures on the app's
 *    thread (or waits for it).
 *  - The lookup, single flight, store, failure sharing, logging and
 *    accounting of builds, compiles, links and derived programs are the
 *    pipeline's (cache/pipeline.h); this layer keeps the records, answers
 *    the queries and does the driver's work the pipeline asks for.
 *  - A hit never hands out another record's program object: every app
 *    program owns its driver program (program-scope variables, rebuilds).
 *    A build or compile with kernels attached is refused as the driver
 *    refuses it; reference counts, build status (a shared failure), build
 *    options and the binaries of a compile hit are answered as the driver
 *    answers them for the plain program.
 *  - IL on a device without IL support but with cl_khr_spir: the handle is a
 *    placeholder (an empty source program, so CL_PROGRAM_SOURCE is empty as
 *    for any IL program); the build translates the IL to SPIR (libclshim-llvm,
 *    loaded lazily) — or takes the cached binary, then nothing is translated.
 * Any internal failure falls back to the real call; the app sees exactly the
 * driver's error codes and logs.
 */
#ifndef CLSHIM_PROGRAM_H
#define CLSHIM_PROGRAM_H

#include "common/clapi.h"
#include "program/origin.h"

/* Sets the real-driver table (once, before any other call). */
void pc_init(const struct cl_api *pc_real);

cl_program pc_create_with_source(cl_context ctx, cl_uint count, const char **strings,
                                 const size_t *lengths, cl_int *errcode_ret);
cl_program pc_create_with_il(cl_context ctx, const void *il, size_t length, cl_int *errcode_ret);
/* want_arg_info: build with -cl-kernel-arg-info added to non-NULL options
 * (fusion needs to know which arguments are buffers; PoCL answers
 * clGetKernelArgInfo only then). The key covers the options used; queries
 * still answer the application's options. */
cl_int pc_build(cl_program prog, cl_uint num_devices, const cl_device_id *devices, const char *options,
                int want_arg_info, void(CL_CALLBACK *notify)(cl_program, void *), void *user_data);
cl_int pc_compile(cl_program prog, cl_uint num_devices, const cl_device_id *devices, const char *options,
                  int want_arg_info, cl_uint num_headers, const cl_program *headers, const char **header_names,
                  void(CL_CALLBACK *notify)(cl_program, void *), void *user_data);
cl_program pc_link(cl_context ctx, cl_uint num_devices, const cl_device_id *devices, const char *options,
                   cl_uint num_inputs, const cl_program *inputs,
                   void(CL_CALLBACK *notify)(cl_program, void *), void *user_data, cl_int *errcode_ret);
cl_int pc_get_program_info(cl_program prog, cl_program_info param, size_t size, void *value,
                           size_t *size_ret);
cl_int pc_get_build_info(cl_program prog, cl_device_id dev, cl_program_build_info param, size_t size,
                         void *value, size_t *size_ret);
cl_int pc_set_spec_constant(cl_program prog, cl_uint spec_id, size_t spec_size, const void *spec_value);
cl_int pc_retain_program(cl_program prog);
cl_int pc_release_program(cl_program prog);

cl_kernel pc_create_kernel(cl_program prog, const char *name, cl_int *errcode_ret);
cl_int pc_create_kernels(cl_program prog, cl_uint num, cl_kernel *kernels, cl_uint *num_ret);
cl_kernel pc_clone_kernel(cl_kernel source, cl_int *errcode_ret);
cl_int pc_get_kernel_info(cl_kernel k, cl_kernel_info param, size_t size, void *value, size_t *size_ret);
cl_int pc_retain_kernel(cl_kernel k);
cl_int pc_release_kernel(cl_kernel k);

/* clGetDeviceInfo with CLSHIM_ADVERTISE_IL: IL version and extension.
 * `also` (may be NULL) is one more extension name CL_DEVICE_EXTENSIONS and
 * CL_DEVICE_EXTENSIONS_WITH_VERSION list (one another module provides);
 * common/extstr.h says how. */
cl_int pc_get_device_info(cl_device_id dev, cl_device_info param, size_t size, void *value, size_t *size_ret,
                          const char *also);


/* Per-process statistics and the exit summary. */
void pc_print_summary(void);

#endif
