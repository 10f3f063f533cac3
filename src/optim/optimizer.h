// AdamW with decoupled weight decay and global-norm clipping. The optimizer owns the fp32 master
// weights: on the CPU they are the parameters themselves; on CUDA the parameters become bf16
// copies that every step rewrites from the masters (llm.c style). Under ZeRO-1 a rank owns a range
// of each parameter's elements (often all or none): it keeps moments (and, on CUDA, masters) for
// those only and updates only them; the trainer shares the results (parallel/zero.h).
#pragma once
#include <optional>
#include <vector>

#include "nn/parameter.h"

namespace hylo {

struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
};

// The gradient scale of global-norm clipping: clip / norm when the norm exceeds clip, else 1.
// clip <= 0 turns clipping off.
inline double clip_scale(double norm, double clip) { return clip > 0 && norm > clip ? clip / norm : 1.0; }

// Elements [begin, end) of a parameter, flattened.
struct ElementRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const ElementRange&) const = default;
};

// The elements `r` of contiguous `t` as a 1-D view.
inline Tensor element_range(const Tensor& t, ElementRange r) { return t.view({-1}).slice(0, r.begin, r.end); }

class AdamW {
 public:
  // Places the parameters on `device` (bf16 compute copies on CUDA) and zeroes the moments.
  // `owned`: per parameter, the elements this rank updates (empty: all of every parameter).
  AdamW(ParamList& params, AdamWOptions options, Device device, std::vector<ElementRange> owned = {});

  const ElementRange& owned(size_t param) const { return owned_[param]; }
  // L2 norm of the owned elements' gradients (missing gradients count as zero); with `only`, of
  // the parameters whose expert_shard flag equals *only.
  double grad_norm(std::optional<bool> only = std::nullopt) const;
  // One update with learning rate `lr`; gradients are multiplied by grad_scale first (clipping).
  void step(double lr, double grad_scale);
  void zero_grad();

  // Updates applied so far (the bias-correction step; skipped steps do not count), saved with checkpoints.
  int64_t steps_taken() const { return step_; }
  void set_steps_taken(int64_t s) { step_ = s; }
  // The fp32 master and moments of parameter i's owned elements, 1-D (undefined where this rank owns
  // none). On the CPU the master is a view of the parameter itself, wherever its storage is now.
  Tensor master(size_t i) const;
  const Tensor& moment_m(size_t i) const { return m_[i]; }
  const Tensor& moment_v(size_t i) const { return v_[i]; }
  // Whole parameters' values (checkpoint load, CPU tensors of the parameters' shapes): the owned
  // elements' masters, and every compute copy, owned or not.
  void load_masters(const std::vector<Tensor>& values_cpu);
  // Whole parameters' moments (checkpoint load): each owned range takes its elements.
  void load_moments(const std::vector<Tensor>& m_cpu, const std::vector<Tensor>& v_cpu);

 private:
  ParamList& params_;
  AdamWOptions options_;
  Device device_;
  int64_t step_ = 0;
  std::vector<ElementRange> owned_;
  std::vector<Tensor> master_, m_, v_;  // master_: CUDA only
};

}  // namespace hylo
