// rope: rotary position embedding of x (B, T, H, hd), positions pos_offset..pos_offset+T-1.
#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>

#include "ops/cpu/rope.h"
#include "ops/dispatch.h"
#include "ops/ops.h"

#if HYLO_WITH_CUDA
#include "kernels/rope/rope.h"
#endif

namespace hylo {

namespace {

struct RopeTables {
  int positions = 0;
  Tensor cos_PD2, sin_PD2;  // fp32 on the op's device
};

// Tables per (theta, head dim, device), grown to the longest sequence seen: computed once, not
// per call.
const RopeTables& rope_tables_for(double theta, int D, int T, Device device) {
  static std::mutex mutex;
  static std::map<std::tuple<double, int, Device>, RopeTables> cache;
  std::lock_guard lock(mutex);
  RopeTables& t = cache[{theta, D, device}];
  if (t.positions < T) {
    // Doubling: decoding asks for one more position per step. Entries depend only on their own
    // position, so a longer table rotates the earlier positions identically.
    const int P = std::max(T, 2 * t.positions);
    Tensor c = Tensor::empty({P, D / 2}, DType::f32), s = Tensor::empty({P, D / 2}, DType::f32);
    cpu::rope_tables(P, D, theta, c.data<float>(), s.data<float>());
    t = {P, c.to(device), s.to(device)};
  }
  return t;
}

void rope_apply(const Tensor& in, Tensor& out, double theta, int pos_offset, bool inverse) {
  const int B = int(in.size(0)), T = int(in.size(1)), H = int(in.size(2)), D = int(in.size(3));
  const RopeTables& tables = rope_tables_for(theta, D, pos_offset + T, in.device());
  const float* cos_PD2 = tables.cos_PD2.data<float>();
  const float* sin_PD2 = tables.sin_PD2.data<float>();
  if (on_cuda(in, "rope", [&] {
#if HYLO_WITH_CUDA
        auto fn = inverse ? cuda::rope_backward : cuda::rope_forward;
        fn(B, T, H, D, pos_offset, tables.positions, cos_PD2, sin_PD2, in.data<bf16>(), out.data<bf16>(), cuda::stream());
#endif
      }))
    return;
  with_cpu_float(in, "rope", [&](auto* tag) {
    using T_ = std::remove_pointer_t<decltype(tag)>;
    auto fn = inverse ? cpu::rope_backward<T_> : cpu::rope_forward<T_>;
    fn(B, T, H, D, pos_offset, tables.positions, cos_PD2, sin_PD2, in.data<T_>(), out.data<T_>());
  });
}

}  // namespace

Var rope(const Var& x, double theta, int pos_offset) {
  const Tensor& X = x.value();
  check_contiguous("rope", X);
  HYLO_CHECK(X.dim() == 4 && X.size(3) % 2 == 0, "rope: x {} must be (B, T, H, even head_dim)", shape_str(X.shape()));
  HYLO_CHECK(pos_offset >= 0, "rope: position offset must be >= 0, got {}", pos_offset);
  Tensor Y = X;  // in place: see ops.h
  rope_apply(X, Y, theta, pos_offset, false);
  return Var::from_op(Y, {x}, [theta, pos_offset](const Tensor& dY, std::vector<Var>& in) {
    Tensor dX = dY;  // the incoming gradient is this op's alone: rotate it in place
    rope_apply(dY, dX, theta, pos_offset, true);
    in[0].accumulate_grad(dX);
  });
}

}  // namespace hylo
