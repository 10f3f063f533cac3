// What every attention kernel reads of the call: its sizes and mask (AttnDims), and q, k, v with,
// on sm_90a, their tile-copy maps (AttnInputs). FwdParams (attention_fwd.cuh) and BwdParams
// (attention_bwd.cuh) start with both, so QueryBlock and the host entries serve either.
#pragma once
#include <cuda_bf16.h>

#include <cmath>

#include "kernels/attention/attention.h"
#include "kernels/common/tiles.cuh"
#include "kernels/attention/tma.cuh"

namespace hylo::cuda::attn {

struct AttnDims {
  int B, T, Hq, Hkv, group;  // group = Hq / Hkv query heads per kv head
  FastDiv per_group;         // query head -> its kv head, without an integer division per block
  MaskBounds mask;           // as the kernels evaluate it (ops/mask.h)
  float scale, scale_log2;   // 1/sqrt(D), and times log2(e) for exp2
};

struct AttnInputs : AttnDims {
  const __nv_bfloat16 *q, *k, *v;
#if HYLO_WGMMA
  CUtensorMap tm_q, tm_k, tm_v;  // 64-row tile copies (tma.cuh); read in place (__grid_constant__)
#endif

  // Host: the call's sizes, mask and inputs.
  void set(const AttnShape& shape, const AttnMask& m, const bf16* q_BTHD, const bf16* k_BTHD, const bf16* v_BTHD) {
    B = shape.B;
    T = shape.T;
    Hq = shape.Hq;
    Hkv = shape.Hkv;
    group = shape.Hq / shape.Hkv;
    per_group = FastDiv(group);
    mask = MaskBounds(m);
    scale = 1.f / std::sqrt(float(shape.D));
    scale_log2 = scale * kLog2e;
    q = reinterpret_cast<const __nv_bfloat16*>(q_BTHD);
    k = reinterpret_cast<const __nv_bfloat16*>(k_BTHD);
    v = reinterpret_cast<const __nv_bfloat16*>(v_BTHD);
#if HYLO_WGMMA
    tm_q = make_head_tile_map(q_BTHD, shape.B, shape.T, shape.Hq, shape.D);
    tm_k = make_head_tile_map(k_BTHD, shape.B, shape.T, shape.Hkv, shape.D);
    tm_v = make_head_tile_map(v_BTHD, shape.B, shape.T, shape.Hkv, shape.D);
#endif
  }
};

}  // namespace hylo::cuda::attn
