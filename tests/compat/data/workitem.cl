/* workitem.cl — the work-item functions alone, for reading how NVIDIA's
 * compiler lowers them (nvidia_builtins.sh dumps its PTX). */
__kernel void wi(__global uint *o)
{
    size_t i = get_global_id(0) - get_global_offset(0);
    o[i] = (uint)get_work_dim() ^ (uint)get_global_size(1) ^ (uint)get_global_offset(1) ^
           (uint)get_global_offset(2) ^ (uint)get_enqueued_local_size(0) ^ (uint)get_global_linear_id() ^
           (uint)get_local_linear_id() ^ (uint)get_num_groups(2) ^ (uint)get_global_id(2);
}
__kernel void loc(__global float *o, __local float *scratch, __constant float *k)
{
    scratch[get_local_id(0)] = o[get_global_id(0)] * k[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    o[get_global_id(0)] = scratch[get_local_size(0) - 1 - get_local_id(0)];
}
