/* progcache.h — the program layer: creation, build, queries, kernels.
 *
 * The interposer hands every program- and kernel-related call here when the
 * shim is enabled. Design: the application's cl_program handle is always a
 * real program of the driver (so the ICD loader dispatches it as usual).
 *  - Source (and native IL) programs: the handle is the program the app
 *    created. At clBuildProgram, per device, the key is looked up in the
 *    in-memory tier, then the persistent store. When every device hits, a
 *    second real program is created from the cached binaries and built (the
 *    "effective" program); the handle stays unbuilt and queries about the
 *    build, binaries and kernels are answered from the effective program —
 *    except the build log and options, which are the original build's.
 *    Kernels are created from the effective program; each one retains the
 *    handle (as a driver's kernel retains its program) and reports it as
 *    CL_KERNEL_PROGRAM.
 *  - On a miss the handle itself is built by the driver, and its binary is
 *    stored at once and captured again when the handle is released or the
 *    process exits (PoCL adds the work-group functions it compiles at first
 *    enqueue; that binary loads several times faster).
 *  - IL on a device without IL support but with cl_khr_spir: the handle is a
 *    placeholder (an empty source program, so CL_PROGRAM_SOURCE is empty as
 *    for any IL program); the build translates the IL to SPIR (libclshim-llvm,
 *    loaded lazily) — or takes the cached binary, then nothing is translated.
 * Any internal failure falls back to the real call; the app sees exactly the
 * driver's error codes and logs.
 */
#ifndef CLSHIM_PROGCACHE_H
#define CLSHIM_PROGCACHE_H

#include "common/clapi.h"

/* Sets the real-driver table (once, before any other call). */
void pc_init(const struct cl_api *real);

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

/* clGetDeviceInfo with CLSHIM_ADVERTISE_IL: IL version and extension. */
cl_int pc_get_device_info(cl_device_id dev, cl_device_info param, size_t size, void *value, size_t *size_ret);

/* What fusion needs to know about a kernel's program: its IR input. Fills
 * *kind (KEY_SOURCE or KEY_IL), a pointer to the source or IL bytes (valid
 * while the kernel lives), the program's last build options and the kernel's
 * name. Returns 0, or -1 when the kernel's program is not one clshim
 * tracks (e.g. created from a binary). */
int pc_kernel_origin(cl_kernel k, int *kind, const void **input, size_t *input_len, const char **options,
                     const char **name);

/* A tracked program's kind (KEY_SOURCE or KEY_IL) and its source or IL
 * bytes (valid while the program lives). 0, or -1 when not tracked. */
int pc_program_input(cl_program prog, int *kind, const void **input, size_t *input_len);

/* The specialization constants set on the kernel's program (an IL program;
 * none for source): copies at most `max` into out (any order) and returns
 * how many there are, or -1 when the kernel's program is not tracked.
 * Fusion translates the IL with them, as the program's own build did. */
struct llvm_spec_const;
int pc_kernel_spec_constants(cl_kernel k, struct llvm_spec_const *out, size_t max);

/* A program clshim derives itself (a fused kernel), built through the cache.
 * `key` is the caller's key material: everything that determines the
 * program (its inputs' keys, kernel names, ranges, argument classes, plan
 * options). The cached value is the caller's metadata plus the device
 * binary. On a hit nothing is made: *meta receives the stored metadata. On a
 * miss make() returns SPIR bitcode and metadata (malloc'd; freed here), the
 * program is created from the bitcode and built, and its device binary is
 * stored (on PoCL at exit, after first use). Returns the built program (the
 * caller owns one reference) and *meta (malloc'd, caller frees), or NULL
 * with *errcode_ret set and nothing to free. Thread-safe. */
typedef int (*pc_make_fn)(void *arg, void **bitcode, size_t *bitcode_size, void **meta, size_t *meta_size);
cl_program pc_build_derived(cl_context ctx, cl_device_id dev, const char *options, const void *key, size_t key_len,
                            pc_make_fn make, void *arg, void **meta, size_t *meta_size, cl_int *errcode_ret);

/* Late capture (PoCL). A program built here whose binary is stored after
 * use is "pending" until its handle is released or the first
 * synchronisation after one of its kernels ran (clFinish, clWaitForEvents,
 * a blocking read or map): then the binary, with the work-group functions
 * PoCL compiled at the first enqueue, is read and stored. Never at exit:
 * reading a PoCL binary may compile, and LLVM is being torn down then.
 * The enqueue and sync wrappers call these only while pc_capture_pending()
 * (one relaxed load). */
extern int pc_pending_captures;
static inline int pc_capture_pending(void)
{
    return __atomic_load_n(&pc_pending_captures, __ATOMIC_RELAXED) != 0;
}
void pc_note_enqueue(cl_kernel kernel);
void pc_sync_point(void);

/* Per-process statistics and the exit summary. */
void pc_print_summary(void);

#endif
