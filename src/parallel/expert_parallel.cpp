#include "parallel/expert_parallel.h"

#include <algorithm>
#include <vector>

#include "core/error.h"

namespace hylo {

Tensor expert_rows(const Tensor& all, int rank, int ranks) {
  HYLO_CHECK(all.dim() >= 1 && all.size(0) % ranks == 0, "expert parallel: {} rows do not split over {} ranks",
             all.dim() >= 1 ? all.size(0) : 0, ranks);
  const int64_t per_rank = all.size(0) / ranks;
  return all.slice(0, rank * per_rank, (rank + 1) * per_rank).contiguous();
}

// A gather as an exchange in which every rank sends all its rows to rank 0 and nothing elsewhere.
Tensor gather_expert_rows(const Tensor& mine, dist::Communicator& ep_group) {
  const int ranks = ep_group.size();
  const int64_t rows = mine.size(0), width = mine.numel() / std::max<int64_t>(rows, 1);
  std::vector<int64_t> send(size_t(ranks), 0), recv(size_t(ranks), 0);
  send[0] = rows;
  if (ep_group.rank() == 0) recv.assign(size_t(ranks), rows);
  const Tensor received = ep_group.all_to_all(mine.contiguous().view({rows, width}), send, recv);
  if (ep_group.rank() != 0) return Tensor();
  Shape shape = mine.shape();
  shape[0] = rows * ranks;
  return received.to(Device::cpu).view(shape);
}

}  // namespace hylo
