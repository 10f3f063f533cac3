// add, residual_add, scale, reshape.
#include "ops/dispatch.h"
#include "ops/ops.h"

namespace hylo {

Var add(const Var& a, const Var& b) {
  check_same_device("add", a.value(), b.value());
  HYLO_CHECK(a.shape() == b.shape(), "add: shapes {} and {}", shape_str(a.shape()), shape_str(b.shape()));
  Tensor out = a.value().clone();
  out.add_(b.value());
  return Var::from_op(out, {a, b}, [](const Tensor& g, std::vector<Var>& in) {
    // Each input gets its own buffer: gradients adopted by two Vars must not alias.
    if (in[0].requires_grad()) in[0].accumulate_grad(in[1].requires_grad() ? g.clone() : g);
    if (in[1].requires_grad()) in[1].accumulate_grad(g);
  });
}

Var residual_add(const Var& x, const Var& branch) {
  check_same_device("residual_add", x.value(), branch.value());
  HYLO_CHECK(x.shape() == branch.shape(), "residual_add: shapes {} and {}", shape_str(x.shape()),
             shape_str(branch.shape()));
  Tensor out = branch.value();  // shares the branch's storage: see ops.h
  out.add_(x.value());
  return Var::from_op(out, {x, branch}, [](const Tensor& g, std::vector<Var>& in) {
    // Both inputs may share one gradient buffer: the branch is computed from x, so every other
    // reader of x is an ancestor of the branch and adds into x's gradient only after the
    // branch's own backward has consumed it (reverse topological order).
    if (in[0].requires_grad()) in[0].accumulate_grad(g);
    if (in[1].requires_grad()) in[1].accumulate_grad(g);
  });
}

Var scale(const Var& x, double factor) {
  Tensor out = Tensor::zeros(x.shape(), x.value().dtype(), x.value().device(), "scale output");
  out.add_(x.value(), factor);
  return Var::from_op(out, {x}, [factor](const Tensor& g, std::vector<Var>& in) {
    Tensor d = Tensor::zeros(g.shape(), g.dtype(), g.device(), "scale grad");
    d.add_(g, factor);
    in[0].accumulate_grad(d);
  });
}

Var reshape(const Var& x, const Shape& shape) {
  Tensor out = x.value().view(shape);
  Shape original = x.shape();
  return Var::from_op(out, {x}, [original](const Tensor& g, std::vector<Var>& in) {
    in[0].accumulate_grad(g.view(original));
  });
}

}  // namespace hylo
