// AdamW with decoupled weight decay and global-norm clipping. The optimizer owns the fp32 master
// weights: on the CPU they are the parameters themselves; on CUDA the parameters become bf16
// copies that every step rewrites from the masters (llm.c style). Under ZeRO-1 a rank owns a
// subset of the parameters: it keeps moments (and, on CUDA, masters) for those only and updates
// only them; the trainer shares the results (train/zero.h).
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

class AdamW {
 public:
  // Places the parameters on `device` (bf16 compute copies on CUDA) and zeroes the moments.
  // `owned`: which parameters this rank updates (empty: all).
  AdamW(ParamList& params, AdamWOptions options, Device device, std::vector<bool> owned = {});

  bool owns(size_t param) const { return owned_[param]; }
  // L2 norm of the owned parameters' gradients (missing gradients count as zero); with `only`, of
  // those whose expert_shard flag equals *only.
  double grad_norm(std::optional<bool> only = std::nullopt) const;
  // One update with learning rate `lr`; gradients are multiplied by grad_scale first (clipping).
  void step(double lr, double grad_scale);
  void zero_grad();

  int64_t steps_taken() const { return step_; }
  void set_steps_taken(int64_t s) { step_ = s; }
  // fp32 masters and moments, in parameter order (undefined for parameters not owned; on the CPU
  // every master is its parameter).
  const std::vector<Tensor>& masters() const { return master_; }
  std::vector<Tensor>& moments_m() { return m_; }
  std::vector<Tensor>& moments_v() { return v_; }
  // Copies new master values in (checkpoint load) and refreshes the compute copies, owned or not.
  void load_masters(const std::vector<Tensor>& values_cpu);

 private:
  ParamList& params_;
  AdamWOptions options_;
  Device device_;
  int64_t step_ = 0;
  std::vector<bool> owned_;
  std::vector<Tensor> master_, m_, v_;
};

}  // namespace hylo
