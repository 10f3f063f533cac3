// A communicator that only claims to be rank `rank` of `size`, for building the ParallelLayout of
// any rank of any job in one process: a layout (of ep = 1, or over pretended expert groups and
// replicas) reads nothing else of it. Its collectives do nothing.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "parallel/communicator.h"

namespace hylo::test {

class PretendRanks final : public dist::Communicator {
 public:
  PretendRanks(int rank, int size) {
    rank_ = rank;
    size_ = size;
  }
  void start_sum(std::vector<Tensor>) override {}
  void start_reduce_scatter(Tensor) override {}
  void wait() override {}
  void all_gather(Tensor) override {}
  void sum(std::span<double>) override {}
  void sum(std::span<int64_t>) override {}
  std::vector<uint64_t> all_gather(std::span<const uint64_t> v) override { return {v.begin(), v.end()}; }
  Tensor all_to_all(const Tensor& send, std::span<const int64_t>, std::span<const int64_t>) override { return send; }
  std::vector<int64_t> all_to_all(std::span<const int64_t> v) override { return {v.begin(), v.end()}; }
  std::unique_ptr<Communicator> split(int, int) override { return nullptr; }
};

}  // namespace hylo::test
