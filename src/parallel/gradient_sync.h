// Data parallelism's gradient sum (SPEC §6). Every rank holds the whole model and runs its own
// micro-batches; the gradients are summed over the ranks in buckets of parameters while the
// step's last backward still runs: a bucket starts as soon as the last of its parameters'
// gradients is final (the autograd's grad-ready hook), so the sums of later layers travel while
// earlier layers are still being differentiated.
#pragma once
#include <vector>

#include "nn/parameter.h"
#include "parallel/layout.h"

namespace hylo {

class ZeroLayout;

// Parameter indices in buckets of about `bucket_bytes` of fp32 gradient each, in reverse
// registration order (the order backward finishes them).
std::vector<std::vector<size_t>> gradient_buckets(const ParamList& params, size_t bucket_bytes = size_t(25) << 20);

class GradientSync {
 public:
  // Sums `buckets` (gradient_buckets) over the ranks of `layout`: the replicated parameters' over
  // every rank, under expert parallelism the expert shards' over the ranks that hold the same
  // experts (a group of one sums nothing). `zero`: under ZeRO-1 each bucket's flat vectors of
  // gradients are reduce-scattered in place, and each rank receives the sums of the elements it
  // owns only (parallel/zero.h; the same buckets; its zero_grads() before each step). Installs the
  // grad-ready hooks: the object must outlive every backward of `params`, and not move; `layout`
  // must outlive it.
  GradientSync(ParamList& params, const ParallelLayout& layout, std::vector<std::vector<size_t>> buckets,
               const ZeroLayout* zero = nullptr);
  GradientSync(const GradientSync&) = delete;
  GradientSync& operator=(const GradientSync&) = delete;

  // Call before the step's last backward: from then on final gradients join their buckets.
  void arm();
  // Call after that backward: starts what is left (a parameter with no gradient sums zeros, as the
  // other ranks may have one), waits, and disarms. Buckets start in one order on every rank. Under
  // ZeRO-1 only the owned elements of each gradient hold sums afterwards.
  void finish();

 private:
  void on_ready(size_t param);
  void start_ready_buckets();
  void start_flats(size_t bucket);

  ParamList& params_;
  const ParallelLayout& layout_;
  std::vector<std::vector<size_t>> buckets_;  // parameter indices
  const ZeroLayout* zero_;
  std::vector<size_t> bucket_of_;             // per parameter
  std::vector<size_t> waiting_;               // per bucket: gradients not yet final
  std::vector<bool> ready_;                   // per parameter, this step
  size_t next_bucket_ = 0;                    // buckets below it have been started
  bool armed_ = false;
};

}  // namespace hylo
