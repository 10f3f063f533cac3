// The MPI communicator: collectives over MPI_COMM_WORLD for CPU jobs, and the host side (rank,
// host sums, the NCCL id's broadcast) of GPU jobs. Used by communicator.cpp and the NCCL
// communicator only.
#pragma once
#include <mpi.h>

#include <memory>
#include <vector>

#include "parallel/communicator.h"

namespace hylo::dist {

// Throws naming the MPI call and MPI's own message unless `rc` is MPI_SUCCESS.
void check_mpi(int rc, const char* call);

class MpiCommunicator : public Communicator {
 public:
  MpiCommunicator();                     // over a duplicate of MPI_COMM_WORLD
  explicit MpiCommunicator(MPI_Comm comm);  // takes `comm` over (a split)
  ~MpiCommunicator() override;

  void start_sum(std::vector<Tensor> tensors) override;
  void start_reduce_scatter(Tensor flat) override;
  void wait() override;
  void all_gather(Tensor flat) override;
  void sum(std::span<double> values) override;
  void sum(std::span<int64_t> values) override;
  std::vector<uint64_t> all_gather(std::span<const uint64_t> values) override;
  Tensor all_to_all(const Tensor& send, std::span<const int64_t> send_rows,
                    std::span<const int64_t> recv_rows) override;
  std::vector<int64_t> all_to_all(std::span<const int64_t> values) override;
  std::unique_ptr<Communicator> split(int color, int key) override;

 protected:
  // The MPI communicator of the ranks that give the same color (MPI_Comm_split).
  MPI_Comm split_comm(int color, int key) const;

  MPI_Comm comm_ = MPI_COMM_NULL;  // a duplicate of MPI_COMM_WORLD: its own message space

 private:
  // One started sum: its tensors packed into `buffer` while the reduction runs. A reduce-scatter
  // reads and writes its one tensor directly; MPI leaves this rank's sums at its start, and
  // `part_at` (when not 0) is where they belong.
  struct Pending {
    std::vector<Tensor> tensors;
    std::vector<float> buffer;
    int64_t part_at = 0, part_size = 0;
    MPI_Request request = MPI_REQUEST_NULL;
  };
  void progress();  // gives the started collectives a turn
  std::vector<std::unique_ptr<Pending>> pending_;
};

#if HYLO_WITH_CUDA
// NCCL for device tensors, MPI for the rest (dist/cuda/nccl_communicator.cpp).
std::unique_ptr<Communicator> make_nccl_communicator();
#endif

}  // namespace hylo::dist
