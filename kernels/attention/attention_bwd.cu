// Attention backward, host entry: the workspace, the parameters (and on sm_90a the tile-copy
// tensor maps) and the launch of the kernels in attention_bwd_wgmma.cu or attention_bwd_mma.cu; the
// scheme is described in attention_bwd.cuh.
#include "kernels/attention/attention_bwd.cuh"

namespace hylo::cuda {

size_t attention_backward_workspace_bytes(const AttnShape& shape) {
  const size_t bytes = 2 * size_t(shape.B) * shape.Hq * attn::padded_rows(shape.T) * sizeof(float);
  return (bytes + 255) / 256 * 256;
}

void attention_backward(const AttnShape& shape, const AttnMask& mask, const bf16* q, const bf16* k,
                        const bf16* v, const bf16* out, const float* lse, const bf16* dout, bf16* dq,
                        bf16* dk, bf16* dv, void* workspace, cudaStream_t stream) {
  check_attention_args(shape, mask);
  HYLO_CUDA_REQUIRE(attention_supports_head_dim(shape.D),
                    "attention_backward (CUDA): head dim %d unsupported (64 or 128)", shape.D);
  HYLO_CUDA_REQUIRE(workspace != nullptr, "attention_backward (CUDA): needs a workspace of %zu bytes",
                    attention_backward_workspace_bytes(shape));
  attn::BwdParams p;
  p.set(shape, mask, q, k, v);
  p.out = reinterpret_cast<const __nv_bfloat16*>(out);
  p.dout = reinterpret_cast<const __nv_bfloat16*>(dout);
  p.lse = lse;
  p.dq = reinterpret_cast<__nv_bfloat16*>(dq);
  p.dk = reinterpret_cast<__nv_bfloat16*>(dk);
  p.dv = reinterpret_cast<__nv_bfloat16*>(dv);
  p.rows = static_cast<float*>(workspace);
#if HYLO_WGMMA
  p.tm_dout = attn::make_head_tile_map(dout, shape.B, shape.T, shape.Hq, shape.D);
  p.tm_dq = attn::make_head_tile_map(dq, shape.B, shape.T, shape.Hq, shape.D);
  p.tm_dk = attn::make_head_tile_map(dk, shape.B, shape.T, shape.Hkv, shape.D);
  p.tm_dv = attn::make_head_tile_map(dv, shape.B, shape.T, shape.Hkv, shape.D);
  p.tm_rows = attn::make_row_map(p.rows, 2 * shape.B * shape.Hq, attn::padded_rows(shape.T));
#endif
  if (shape.D == 64)
    attn::launch_backward<64>(p, stream);
  else
    attn::launch_backward<128>(p, stream);
}

}  // namespace hylo::cuda
