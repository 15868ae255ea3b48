/* Specialisation constants (SpecId 7, default 42; SpecId 8, default 100):
 * OpenCL C cannot spell one, but the translator turns this declaration into
 * OpSpecConstant. spec_add follows spec in the fusion tests. */
int __attribute__((overloadable)) __spirv_SpecConstant(int id, int def);
__kernel void spec(__global int *out) { out[get_global_id(0)] = __spirv_SpecConstant(7, 42) + (int)get_global_id(0); }
__kernel void spec_add(__global int *out) { out[get_global_id(0)] += __spirv_SpecConstant(8, 100); }
