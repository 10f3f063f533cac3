#include "autograd/variable.h"

#include <unordered_map>

namespace hylo {

static thread_local bool g_grad_enabled = true;
static thread_local bool g_in_backward = false;

bool grad_enabled() { return g_grad_enabled; }
bool in_backward() { return g_in_backward; }
NoGradGuard::NoGradGuard() : previous_(g_grad_enabled) { g_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { g_grad_enabled = previous_; }

Var::Var(Tensor value, bool requires_grad, std::string name) : node_(std::make_shared<Node>()) {
  node_->value = std::move(value);
  node_->requires_grad = requires_grad;
  node_->name = std::move(name);
}

Var Var::from_op(Tensor value, std::vector<Var> inputs, BackwardFn backward) {
  Var out(std::move(value));
  if (!g_grad_enabled) return out;
  bool any = false;
  for (const Var& in : inputs) any = any || in.requires_grad();
  if (!any) return out;
  out.node_->requires_grad = true;
  out.node_->inputs = std::move(inputs);
  out.node_->backward = std::move(backward);
  return out;
}

void Var::accumulate_grad(const Tensor& g, bool owned) {
  HYLO_CHECK(g.shape() == shape(), "gradient of shape {} for '{}' of shape {}", shape_str(g.shape()), name(),
             shape_str(shape()));
  if (!node_->grad.defined()) {
    // A leaf keeps its grad across micro-batches, so it must own the buffer: a buffer it is not
    // given as its own is copied. Op-internal buffers may be adopted as-is.
    node_->grad = !owned && (node_->inputs.empty() || g.same_storage(value())) ? g.clone() : g;
    return;
  }
  node_->grad.add_(g);
}

GradTarget::GradTarget(Var& input, const Shape& shape, const char* what, bool zeroed, bool contiguous)
    : input_(input), wanted_(input.requires_grad()) {
  accumulate_ = wanted_ && input.has_grad() && (!contiguous || input.mutable_grad().is_contiguous());
  if (accumulate_) {
    tensor_ = input.mutable_grad();
  } else if (wanted_) {
    const Tensor& v = input.value();
    tensor_ = zeroed ? Tensor::zeros(shape, v.dtype(), v.device(), what) : Tensor::empty(shape, v.dtype(), v.device(), what);
  }
}

void GradTarget::finish() {
  // The buffer is this target's own: a leaf keeps it (a copy would cost every weight gradient once
  // a step).
  if (wanted_ && !accumulate_) input_.accumulate_grad(tensor_, /*owned=*/true);
}

void Var::backward() {
  HYLO_CHECK(value().numel() == 1, "backward() needs a scalar, got shape {}", shape_str(shape()));
  Tensor seed = Tensor::empty(shape(), value().dtype(), value().device(), "loss grad");
  seed.fill_(1.0);
  backward(seed);
}

void Var::backward(const Tensor& seed) {
  // Iterative post-order DFS: children before parents; reversed it is a valid backward order.
  // Owning pointers: clearing a node's inputs below must not free nodes still to be visited.
  std::vector<std::shared_ptr<Node>> order;
  std::unordered_map<Node*, int> consumers;  // how many taped nodes read each node
  std::vector<std::pair<std::shared_ptr<Node>, size_t>> stack{{node_, 0}};
  consumers[node_.get()] = 0;
  while (!stack.empty()) {
    auto& [node, next] = stack.back();
    if (next < node->inputs.size()) {
      std::shared_ptr<Node> child = node->inputs[next++].node_;
      if (!child->requires_grad) continue;
      if (consumers[child.get()]++ == 0) stack.push_back({child, 0});
    } else {
      order.push_back(node);
      stack.pop_back();
    }
  }

  accumulate_grad(seed);
  struct BackwardFlag {  // restores the outer value: backward may nest (recomputation)
    bool outer = g_in_backward;
    BackwardFlag() { g_in_backward = true; }
    ~BackwardFlag() { g_in_backward = outer; }
  } flag;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Node* node = it->get();
    if (node->backward && node->grad.defined()) {
      node->backward(node->grad, node->inputs);
      for (Var& in : node->inputs) {
        if (!in.requires_grad()) continue;
        if (--consumers[in.node_.get()] == 0 && in.node_->inputs.empty() && in.node_->grad_ready)
          in.node_->grad_ready(in);
      }
      // Interior gradients and closures are dead after use; freeing them now bounds memory.
      node->grad = Tensor();
      node->backward = nullptr;
      node->inputs.clear();
    }
  }
}

}  // namespace hylo
