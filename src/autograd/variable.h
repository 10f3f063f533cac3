// Reverse-mode autograd, flashlight style: every op returns a Var holding its value and one
// backward closure over its inputs. The tape is the graph of Vars itself, built as code runs.
//
// Gradients accumulate: a leaf's grad keeps growing across backward() calls (micro-batches)
// until zero_grad(). A leaf's grad-ready hook fires once per backward(), as soon as every
// consumer of that leaf has contributed, so data-parallel code can start reducing early. A
// consumer that receives no gradient never runs its backward, so its leaves' hooks do not fire
// in that pass: callers must cover them (GradientSync::finish sums what no hook handed over).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace hylo {

class Var;
// Receives d(loss)/d(output) and must call inputs[i].accumulate_grad(...) for inputs needing it.
using BackwardFn = std::function<void(const Tensor& grad_out, std::vector<Var>& inputs)>;
using GradReadyHook = std::function<void(Var&)>;

class Var {
 public:
  Var() = default;
  explicit Var(Tensor value, bool requires_grad = false, std::string name = "");

  // Result of an op: records the backward closure only when grad mode is on and some input
  // needs a gradient; otherwise the result is a constant and the inputs are not kept alive.
  static Var from_op(Tensor value, std::vector<Var> inputs, BackwardFn backward);

  bool defined() const { return node_ != nullptr; }
  const Tensor& value() const { return node_->value; }
  Tensor& mutable_value() { return node_->value; }
  const Shape& shape() const { return node_->value.shape(); }
  bool requires_grad() const { return node_ && node_->requires_grad; }
  const std::string& name() const { return node_->name; }
  bool has_grad() const { return node_->grad.defined(); }
  const Tensor& grad() const { return node_->grad; }
  Tensor& mutable_grad() { return node_->grad; }
  void zero_grad() { node_->grad = Tensor(); }
  void set_grad_ready_hook(GradReadyHook hook) { node_->grad_ready = std::move(hook); }

  // Adds g into this Var's gradient (adopting g when there is none yet; a leaf adopts a copy unless
  // `owned`: g is the caller's own buffer, which nothing else will write).
  void accumulate_grad(const Tensor& g, bool owned = false);

  // Back-propagates from this scalar with d(loss)/d(this) = 1.
  void backward();
  // Back-propagates from any output with the given d(loss)/d(this) (same shape); used when a
  // backward closure differentiates a recomputed sub-graph (activation recomputation).
  void backward(const Tensor& seed);

 private:
  struct Node {
    Tensor value;
    Tensor grad;
    bool requires_grad = false;
    std::string name;
    std::vector<Var> inputs;
    BackwardFn backward;
    GradReadyHook grad_ready;
  };
  std::shared_ptr<Node> node_;
};

// Where a backward closure writes one input's gradient. When the input already has one (later
// micro-batches, a second reader of the same tensor) the kernel adds straight into it
// (accumulate(): beta = 1) instead of writing a temporary that is then added; otherwise it writes a
// new buffer that finish() hands to the input. Not wanted() when the input needs no gradient.
class GradTarget {
 public:
  // zeroed: the new buffer starts at zero, for kernels that always add (scatter-adds, row sums).
  // contiguous: add into an existing gradient only if it is contiguous (else: new buffer + add).
  GradTarget(Var& input, const Shape& shape, const char* what, bool zeroed = false, bool contiguous = false);
  bool wanted() const { return wanted_; }
  bool accumulate() const { return accumulate_; }
  Tensor& tensor() { return tensor_; }
  void finish();

 private:
  Var& input_;
  bool wanted_, accumulate_;
  Tensor tensor_;
};

bool grad_enabled();
// True while Var::backward() runs the backward closures (op profiling tells phases apart).
bool in_backward();

// Disables taping in its scope (evaluation, optimizer updates).
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace hylo
