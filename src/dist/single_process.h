// The communicator of a job of one process: every collective is the identity.
#pragma once
#include "dist/communicator.h"

namespace hylo::dist {

class SingleProcess final : public Communicator {
 public:
  void start_sum(std::vector<Tensor>, int) override {}
  void wait() override {}
  void broadcast(std::vector<Tensor>, int) override {}
  void sum(std::span<double>) override {}
  void sum(std::span<int64_t>) override {}
  std::vector<uint64_t> all_gather(std::span<const uint64_t> values) override {
    return {values.begin(), values.end()};
  }
};

}  // namespace hylo::dist
