// CUDA attention vs the CPU reference (float, on the same bf16-rounded inputs): forward out and
// lse, backward dq/dk/dv, for every mask kind, head dims 64 and 128, MHA and GQA, and sequence
// lengths that are not multiples of any tile. Outputs are poisoned (NaN) before every launch.
// Shape legend: B batch, T sequence, Hq/Hkv heads, D head dim; tensors (B, T, H, D), lse (B, Hq, T).
#include <cuda_runtime.h>  // before gpu_test_util.h: its typed cudaMalloc(T**) overload
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "gpu_test_util.h"
#include "kernels/attention/attention.h"
#include "ops/cpu/attention.h"

using namespace hylo;
using namespace hylo::test;

namespace {

std::string mask_name(const AttnMask& m) {
  if (m.kind == MaskKind::full) return "full";
  if (m.kind == MaskKind::swa) return "swa(" + std::to_string(m.window) + ")";
  return "pbb(" + std::to_string(m.block) + "," + std::to_string(m.bridge) + ")";
}

// Relative error, except against an all-zero reference (T = 1: one key, so dq = dk = 0 exactly),
// where the kernel's rounding residue (~1e-6) is compared as an RMS instead.
double gradient_error(const std::vector<bf16>& out, const std::vector<float>& ref) {
  double ref_norm = 0, out_sq = 0;
  for (float r : ref) ref_norm += double(r) * r;
  if (ref_norm > 0) return relative_error(out, ref);
  for (float o : to_float(out)) {
    if (!std::isfinite(o)) return INFINITY;
    out_sq += double(o) * o;
  }
  return std::sqrt(out_sq / double(out.size()));
}

struct Errors {
  double out = 0, lse = 0, dq = 0, dk = 0, dv = 0;
};

// Runs one case on both backends; returns the relative errors and checks them.
Errors check_case(const AttnShape& sh, const AttnMask& mask, uint64_t seed) {
  const size_t nq = size_t(sh.B) * sh.T * sh.Hq * sh.D, nkv = size_t(sh.B) * sh.T * sh.Hkv * sh.D;
  const size_t nlse = size_t(sh.B) * sh.Hq * sh.T;
  const auto q_b = to_bf16(random_floats(nq, seed)), k_b = to_bf16(random_floats(nkv, seed + 1));
  const auto v_b = to_bf16(random_floats(nkv, seed + 2)), dout_b = to_bf16(random_floats(nq, seed + 3));
  const auto q = to_float(q_b), k = to_float(k_b), v = to_float(v_b), dout = to_float(dout_b);

  std::vector<float> out_ref(nq), lse_ref(nlse), dq_ref(nq), dk_ref(nkv), dv_ref(nkv);
  cpu::attention_forward(sh, mask, q.data(), k.data(), v.data(), out_ref.data(), lse_ref.data());
  cpu::attention_backward(sh, mask, q.data(), k.data(), v.data(), out_ref.data(), lse_ref.data(), dout.data(),
                          dq_ref.data(), dk_ref.data(), dv_ref.data());

  DeviceBuffer<bf16> q_d(q_b), k_d(k_b), v_d(v_b), dout_d(dout_b), out_d(nq), dq_d(nq), dk_d(nkv), dv_d(nkv);
  DeviceBuffer<float> lse_d(nlse);
  DeviceBuffer<unsigned char> work_d(cuda::attention_backward_workspace_bytes(sh));
  out_d.poison();
  lse_d.poison();
  cuda::attention_forward(sh, mask, q_d.ptr, k_d.ptr, v_d.ptr, out_d.ptr, lse_d.ptr, nullptr);
  Errors e;
  e.out = relative_error(out_d.download(), out_ref);
  e.lse = relative_error(lse_d.download(), lse_ref);

  dq_d.poison();
  dk_d.poison();
  dv_d.poison();
  work_d.poison();
  cuda::attention_backward(sh, mask, q_d.ptr, k_d.ptr, v_d.ptr, out_d.ptr, lse_d.ptr, dout_d.ptr, dq_d.ptr, dk_d.ptr,
                           dv_d.ptr, work_d.ptr, nullptr);
  const auto dq = dq_d.download(), dk = dk_d.download(), dv = dv_d.download();
  e.dq = gradient_error(dq, dq_ref);
  e.dk = gradient_error(dk, dk_ref);
  e.dv = gradient_error(dv, dv_ref);

  CAPTURE(mask_name(mask));
  CAPTURE(sh.D);
  CAPTURE(sh.T);
  CAPTURE(sh.Hq);
  CAPTURE(sh.Hkv);
  CHECK(e.out < 1e-2);
  CHECK(e.lse < 1e-5);
  CHECK(e.dq < 1e-2);
  CHECK(e.dk < 1e-2);
  CHECK(e.dv < 1e-2);

  // Deterministic: a second backward gives the same bits.
  if (sh.T >= 200) {
    dq_d.poison();
    dk_d.poison();
    cuda::attention_backward(sh, mask, q_d.ptr, k_d.ptr, v_d.ptr, out_d.ptr, lse_d.ptr, dout_d.ptr, dq_d.ptr,
                             dk_d.ptr, dv_d.ptr, work_d.ptr, nullptr);
    const auto dq2 = dq_d.download(), dk2 = dk_d.download();
    CHECK(std::memcmp(dq.data(), dq2.data(), nq * sizeof(bf16)) == 0);
    CHECK(std::memcmp(dk.data(), dk2.data(), nkv * sizeof(bf16)) == 0);
  }
  return e;
}

}  // namespace

TEST_CASE("cuda attention forward and backward match the CPU reference") {
  const std::vector<AttnMask> masks = {
      {MaskKind::full, 0, 0, 0},     {MaskKind::swa, 37, 0, 0},     {MaskKind::swa, 256, 0, 0},
      {MaskKind::pbb, 0, 48, 16},    {MaskKind::pbb, 0, 100, 1},    {MaskKind::pbb, 0, 64, 64},
  };
  Errors worst;
  uint64_t seed = 1000;
  int index = 0;
  for (int D : {64, 128})
    for (int T : {1, 17, 200, 1000})
      for (const auto& mask : masks) {
        // Alternate GQA (4 query heads on 2 kv heads) and MHA; one sequence at T = 1000 keeps the
        // CPU reference quick.
        const bool gqa = index++ % 2 == 1;
        const AttnShape sh{T >= 1000 ? 1 : 2, T, gqa ? 4 : 2, 2, D};
        const Errors e = check_case(sh, mask, seed += 10);
        std::printf("attention D=%3d T=%4d Hq=%d Hkv=%d %-12s out %.2e lse %.2e dq %.2e dk %.2e dv %.2e\n", D, T,
                    sh.Hq, sh.Hkv, mask_name(mask).c_str(), e.out, e.lse, e.dq, e.dk, e.dv);
        worst.out = std::max(worst.out, e.out);
        worst.lse = std::max(worst.lse, e.lse);
        worst.dq = std::max(worst.dq, e.dq);
        worst.dk = std::max(worst.dk, e.dk);
        worst.dv = std::max(worst.dv, e.dv);
      }
  std::printf("attention worst: out %.2e lse %.2e dq %.2e dk %.2e dv %.2e\n", worst.out, worst.lse, worst.dq,
              worst.dk, worst.dv);
}

// The cases above launch at most a few dozen blocks, one each per SM. These fill the GPU more than
// once over (a persistent kernel then takes several query tiles per block, one after another), at
// T = 1050: its last 128 rows hold only 26, so a block's second 64 have none.
TEST_CASE("cuda attention matches the CPU reference on shapes beyond one wave of the GPU") {
  uint64_t seed = 5000;
  for (const auto& [D, Hkv, mask] : {std::tuple{128, 16, AttnMask{MaskKind::pbb, 0, 512, 128}},
                                     std::tuple{64, 4, AttnMask{MaskKind::swa, 256, 0, 0}},
                                     std::tuple{64, 16, AttnMask{MaskKind::full, 0, 0, 0}}}) {
    const AttnShape sh{2, 1050, 16, Hkv, D};
    const Errors e = check_case(sh, mask, seed += 10);
    std::printf("attention D=%3d T=%4d B=2 Hq=16 Hkv=%2d %-12s out %.2e lse %.2e dq %.2e dk %.2e dv %.2e\n", D, sh.T,
                Hkv, mask_name(mask).c_str(), e.out, e.lse, e.dq, e.dk, e.dv);
  }
}

// The first cases above launch at most a few dozen blocks; a race between the pipeline stages of a
// block (cp.async groups or mbarriers, barriers, the async proxy) shows up only sometimes, and more readily when
// every SM holds several blocks. So: a shape that fills the GPU, run twice, bit-compared.
TEST_CASE("cuda attention forward and backward are bit-identical across runs on a GPU-filling shape") {
  for (int D : {64, 128})
    for (const AttnMask& mask : {AttnMask{MaskKind::full, 0, 0, 0}, AttnMask{MaskKind::pbb, 0, 512, 128}}) {
      const AttnShape sh{4, 4096, 16, 16, D};
      const size_t n = size_t(sh.B) * sh.T * sh.Hq * D, nlse = size_t(sh.B) * sh.Hq * sh.T;
      DeviceBuffer<bf16> q(to_bf16(random_floats(n, 7))), k(to_bf16(random_floats(n, 8))),
          v(to_bf16(random_floats(n, 9))), dout(to_bf16(random_floats(n, 10))), out(n), dq(n), dk(n), dv(n);
      DeviceBuffer<float> lse(nlse);
      DeviceBuffer<unsigned char> work(cuda::attention_backward_workspace_bytes(sh));
      std::vector<bf16> first[4];
      for (int run = 0; run < 2; ++run) {
        out.poison();
        dq.poison();
        dk.poison();
        dv.poison();
        cuda::attention_forward(sh, mask, q.ptr, k.ptr, v.ptr, out.ptr, lse.ptr, nullptr);
        cuda::attention_backward(sh, mask, q.ptr, k.ptr, v.ptr, out.ptr, lse.ptr, dout.ptr, dq.ptr, dk.ptr, dv.ptr,
                                 work.ptr, nullptr);
        std::vector<bf16> now[4] = {out.download(), dq.download(), dk.download(), dv.download()};
        CAPTURE(mask_name(mask));
        CAPTURE(D);
        if (run == 0) {
          for (const auto& t : now) {  // every poisoned value was overwritten
            const auto f = to_float(t);
            CHECK(std::all_of(f.begin(), f.end(), [](float x) { return std::isfinite(x); }));
          }
          for (int i = 0; i < 4; ++i) first[i] = now[i];
        } else {
          for (int i = 0; i < 4; ++i) CHECK(std::memcmp(first[i].data(), now[i].data(), n * sizeof(bf16)) == 0);
        }
      }
    }
}

TEST_CASE("cuda attention rejects unsupported head dims") {
  const AttnShape sh{1, 8, 2, 2, 96};
  CHECK_THROWS(cuda::attention_forward(sh, AttnMask{}, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr));
}
