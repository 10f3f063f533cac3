// FP8 linear layers (train.precision: fp8): y (N, out) = x (N, in) @ w (out, in)^T with all three
// GEMMs (forward y = x w^T, dx = dy w, dw = dy^T x) on FP8 operands and fp32 accumulation; the
// result and dx are bf16 (f32 on the CPU), dw accumulates into the weight's gradient as the bf16
// path does. x and w are e4m3; dy is e5m2 (TransformerEngine's "hybrid") or e4m3.
//
// Scaling is per tensor: each operand is multiplied by a scale before it is rounded to FP8, and
// the GEMM multiplies the product back by both operands' scale inverses. Delayed scaling
// (TransformerEngine's): every (linear, role) with role in {x, w, dy} keeps the amax of its last
// H optimizer steps; a cast uses scale = fp8_max / max(history) / 2^margin (core/fp8.h) and
// records its own amax into the step's slot; roll() after each applied optimizer step pushes the
// step's amax into the history and computes the next step's scales. Until a first step has been
// recorded (a fresh run: history empty) and always with current scaling, a cast measures the
// amax of its own tensor first and scales by that.
//
// Weights change only at the optimizer step, so a linear's weight is cast (with its transposed
// copy) once per step and reused by every micro-batch, recomputation and evaluation until roll().
// Linears that read one input (q, k and v read the same normed x) can share its cast: declared with
// share_input, the first of them casts x under its own x role and the others reuse those codes
// while the input is the same tensor (their own x roles stay unrecorded). Same numbers as three
// casts, since three histories of one tensor are equal; a third of the forward cast traffic less.
// Only training passes (grad mode) record x's amax: evaluation reads the scales, never moves them.
//
// CUDA: kernels/fp8 casts (and transposes: cuBLASLt's FP8 GEMMs take K-contiguous operands only)
// and cuda::gemm_fp8 multiplies. CPU: an exact emulation of the same numbers, the reference: the
// same fp32 scales, operands rounded by the software codec (core/fp8.h) and kept as the fp32
// values of their FP8 codes, an fp32 GEMM scaled by the two scale inverses.
#pragma once
#include <cstdint>
#include <vector>

#include "autograd/variable.h"
#include "core/fp8.h"

namespace hylo {

struct Fp8Recipe {
  Fp8Format grad_format = Fp8Format::e5m2;  // dy; x and w are always e4m3
  bool current_scaling = false;             // every cast scales by its own amax (no history)
  int history = 16;                         // steps of amax history (delayed scaling)
  int margin = 0;                           // scale = fp8_max / amax / 2^margin
};

// One operand rounded to FP8, as a GEMM reads it.
struct Fp8Operand {
  Tensor codes;      // (rows, cols): CUDA u8 FP8 codes; CPU f32, the values of the FP8 codes
  Tensor codes_t;    // (cols, rows) u8, CUDA only, when the cast was asked for the transpose
  Tensor scale_inv;  // (1) f32 on the operand's device: 1 / the scale it was cast with
  Fp8Format format = Fp8Format::e4m3;
};

enum class Fp8Role { x = 0, w = 1, dy = 2 };

// The FP8 scaling state of a model's FP8 linears, numbered 0 .. linears-1 by their owner; each has
// the roles {x, w, dy}, role index 3 * linear + role. History and scales live on `device`.
class Fp8State {
 public:
  Fp8State(const Fp8Recipe& recipe, int linears, Device device);

  const Fp8Recipe& recipe() const { return recipe_; }
  int linears() const { return linears_; }

  // After each applied optimizer step (every rank, with the same step amaxes): the step's amaxes
  // enter the histories, the scales follow, the cached weight casts are dropped.
  void roll();
  // After a skipped step (non-finite): its amaxes are forgotten, nothing else changes.
  void discard_step();

  // Checkpoint state: the histories (roles, H) f32 newest first, and the steps recorded so far
  // (0: no history yet, the first step scales each tensor by its own amax).
  Tensor amax_history() const;  // CPU copy
  int64_t steps_recorded() const { return steps_recorded_; }
  // Restores both (shapes must match: one line naming `where` otherwise) and recomputes the scales.
  void restore(const Tensor& amax_history, int64_t steps_recorded, const std::string& where);

  // Data parallelism: this step's amaxes (as fp32 bits), for the ranks to take the maximum of, so
  // that every rank keeps the same histories.
  std::vector<uint32_t> step_amax_bits() const;
  void set_step_amax_bits(const std::vector<uint32_t>& bits);

  // The cast of one role of one linear (what fp8_linear does; public for tests). `transpose`:
  // also the transposed codes (CUDA); `record`: fold this tensor's amax into the step's.
  Fp8Operand quantize(const Tensor& t, int linear, Fp8Role role, bool transpose, bool record);
  // The weight's cast with its transpose, made once per step (see above).
  const Fp8Operand& weight(const Tensor& w, int linear);
  // Linears first .. first + count - 1 read the same input: one cast of it serves them all.
  void share_input(int first, int count);
  // The input x of `linear`'s forward, cast (and in training transposed and recorded) or, for a
  // linear sharing its input, the cast its group made of this same tensor.
  Fp8Operand input(const Tensor& x, int linear, bool training);

 private:
  int role_index(int linear, Fp8Role role) const;
  Fp8Format format(Fp8Role role) const { return role == Fp8Role::dy ? recipe_.grad_format : Fp8Format::e4m3; }
  void update_scales(bool shift);

  Fp8Recipe recipe_;
  int linears_;
  Device device_;
  Tensor history_;    // (3 * linears, H) f32
  Tensor step_amax_;  // (3 * linears) f32: max |t| of this step's recorded casts
  Tensor scale_;      // (3 * linears) f32: the scales from the histories
  int64_t steps_recorded_ = 0;
  struct CachedWeight {
    const void* data = nullptr;  // the weight tensor it was cast from
    Fp8Operand cast;
  };
  std::vector<CachedWeight> weights_;  // per linear; cleared by roll() and restore()
  std::vector<int> input_group_;       // per linear: the first linear of its shared-input group, -1: its own
  struct CachedInput {
    Tensor source;  // holds the input's storage, so that no other tensor can take its address
    int group = -1;
    bool training = false;
    Fp8Operand cast;
  };
  CachedInput input_;  // the last shared cast; cleared by roll() and restore()
};

// C (M, N) = a' (M, K) @ b' (N, K)^T scaled by both scale inverses, a' = a.codes or, when a_t,
// a's transposed codes (the same for b); accumulate adds into C. C is bf16 on CUDA, f32 on the CPU.
void fp8_matmul(const Fp8Operand& a, bool a_t, const Fp8Operand& b, bool b_t, int M, int N, int K, Tensor& C,
                bool accumulate);

// y = x @ w^T through FP8 linear number `linear` of `state` (semantics above). CPU tensors are f32.
Var fp8_linear(const Var& x, const Var& w, Fp8State& state, int linear);

}  // namespace hylo
