// ZeRO-1 (SPEC §6; train.zero1): the optimizer state sharded over the data-parallel ranks, as
// Megatron's distributed optimizer shards it. Each gradient bucket (parallel/gradient_sync.h) is laid
// out as one flat vector per class of parameters: the replicated ones, over every rank, and under
// expert parallelism the expert shards, over the ranks that hold the same experts. Rank r of a
// class's ranks owns the r-th of the vector's equal parts, whichever parameters it cuts through.
// The parameters' values and gradients are views of these vectors. Per step the gradients are
// reduce-scattered in place, each rank updates the elements it owns (AdamW over element ranges),
// which lands in its part of the values, and the values are all-gathered in place. Every rank
// thus keeps 1/N of the moments (and on CUDA of the fp32 masters), to within the padding. The checkpoint format
// stays per parameter (gathered on rank 0), so a ZeRO-1 checkpoint resumes without ZeRO-1 or on
// another number of ranks.
#pragma once
#include <functional>
#include <vector>

#include "nn/parameter.h"
#include "optim/optimizer.h"
#include "parallel/layout.h"

namespace hylo {

class ZeroLayout {
 public:
  // Parameters start, and parts are cut, at multiples of this many elements: every owned range then
  // starts 256-byte aligned in fp32 (the vector paths of the update kernels).
  static constexpr int64_t kAlign = 64;

  // One class's parameters of one bucket as a flat vector.
  struct Flat {
    bool experts = false;
    std::vector<size_t> params;   // in the bucket's order
    std::vector<int64_t> offset;  // each one's first element
    int64_t length = 0;           // a multiple of (ranks of the class) x kAlign
  };

  // `buckets`: parameter indices, as GradientSync sums them. A class's ranks are layout.of(class);
  // `layout` must outlive this.
  ZeroLayout(const ParamList& params, const std::vector<std::vector<size_t>>& buckets, const ParallelLayout& layout);

  // Per parameter: the elements this rank updates (for the optimizer).
  const std::vector<ElementRange>& owned() const { return owned_; }
  // Bucket b's flat vectors, the replicated class first (a class the bucket lacks has none).
  const std::vector<Flat>& flats(size_t bucket) const { return flats_[bucket]; }
  size_t buckets() const { return flats_.size(); }
  dist::Communicator& comm(const Flat& f) const { return layout_.of(f.experts); }

  // A new flat vector of `f` holding `whole(param)` (a tensor of the parameter's shape) of each of
  // its parameters, zeros between them.
  Tensor pack(const Flat& f, const std::function<Tensor(size_t param)>& whole, DType dtype, Device device) const;
  // A new flat vector of `f` in which every rank's part holds what its owner gave as
  // `owned_of(param)`: an all-gather over the class's ranks, which all must call it.
  Tensor gather(const Flat& f, const std::function<Tensor(size_t param)>& owned_of, DType dtype, Device device) const;
  // Parameter k of `f` in a flat vector, as a view of the parameter's shape.
  static Tensor param_view(const Tensor& flat, const Flat& f, size_t k, const Shape& shape);

  // Moves every parameter's value (on CUDA the bf16 copy the forward reads) into flat vectors of
  // this layout and leaves the parameters as views of them, so that the optimizer's updates land
  // in this rank's parts. Call once, on the parameters the layout was made from, after the
  // optimizer has placed the values.
  void bind_values(ParamList& params);
  // After the owners' updates: every rank's part of the values gathered onto every rank of its
  // class, straight into the parameters (bind_values first).
  void share_updated_values();
  // Gives every parameter a zero gradient that is a view of a flat vector of this layout (made on
  // the first call, in the values' dtype), so that backward accumulates straight into what the
  // ranks reduce-scatter: no copy, and no second buffer of gradients. Call before each step's first
  // backward instead of the optimizer's zero_grad().
  void zero_grads(ParamList& params);
  // The gradients of bucket b's flat vector k (zero_grads first): GradientSync reduce-scatters it
  // once `params`' gradients in it are final, and fails if one was replaced instead of added to.
  const Tensor& flat_grads(size_t bucket, size_t k, const ParamList& params) const;

  // This rank's part of `f`: [part_begin(f), part_begin(f) + part_size(f)).
  int64_t part_size(const Flat& f) const { return f.length / comm(f).size(); }
  int64_t part_begin(const Flat& f) const { return comm(f).rank() * part_size(f); }

 private:
  const ParallelLayout& layout_;
  std::vector<std::vector<Flat>> flats_;  // per bucket
  std::vector<ElementRange> owned_;
  // The flat vectors the parameters' values (bind_values) and gradients (zero_grads) view, per
  // bucket as flats_.
  std::vector<std::vector<Tensor>> values_, grads_;
};

// Every parameter's fp32 master and moments as CPU tensors of its shape on rank 0 (other ranks get
// empty vectors): what a checkpoint saves. Under ZeRO-1 (`zero` given) each is gathered from its
// owners; without, rank 0 holds them all. Expert shards come whole: rank 0's expert group gathers
// its ranks' rows (parallel/expert_parallel.h). Every rank must call this.
struct OptimizerState {
  std::vector<Tensor> masters, m, v;
};
OptimizerState optimizer_state_on_rank0(const AdamW& optimizer, const ParamList& params, const ZeroLayout* zero,
                                        const ParallelLayout& layout);

}  // namespace hylo
