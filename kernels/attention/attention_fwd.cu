// Attention forward, host entry: the parameters (and on sm_90a the tile-copy tensor maps) and the
// launch of the kernels in attention_fwd_wgmma.cu or attention_fwd_mma.cu; the scheme is described
// in attention_fwd.cuh.
#include "kernels/attention/attention_fwd.cuh"

namespace hylo::cuda {

bool attention_supports_head_dim(int D) { return D == 64 || D == 128; }

void attention_forward(const AttnShape& shape, const AttnMask& mask, const bf16* q, const bf16* k,
                       const bf16* v, bf16* out, float* lse, cudaStream_t stream) {
  check_attention_args(shape, mask);
  HYLO_CUDA_REQUIRE(attention_supports_head_dim(shape.D), "attention_forward (CUDA): head dim %d unsupported (64 or 128)",
                    shape.D);
  attn::FwdParams p;
  p.set(shape, mask, q, k, v);
  p.out = reinterpret_cast<__nv_bfloat16*>(out);
  p.lse = lse;
#if HYLO_WGMMA
  p.tm_out = attn::make_head_tile_map(out, shape.B, shape.T, shape.Hq, shape.D);
#endif
  if (shape.D == 64)
    attn::launch_forward<64>(p, stream);
  else
    attn::launch_forward<128>(p, stream);
}

}  // namespace hylo::cuda
