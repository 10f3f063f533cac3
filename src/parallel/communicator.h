// Collectives across the processes of one training job (SPEC §6). One process per device; rank
// and world size come from the MPI launcher (mpirun, or srun with PMI/PMIx). Device tensors move
// through NCCL on GPUs and through MPI on CPUs; host values always through MPI. Replicated
// weights stay replicated only if every rank gets the same bits from a sum: NCCL's ring and tree
// sums and Open MPI's give that, but MPI does not promise it, so the trainer compares the
// replicas before each checkpoint.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/tensor.h"

namespace hylo::dist {

class Communicator {
 public:
  virtual ~Communicator() = default;
  int rank() const { return rank_; }
  int size() const { return size_; }

  // Starts an in-place sum over ranks of `tensors` (contiguous, on the job's device: f32 on CPU,
  // bf16 or f32 on CUDA) as one message; wait() finishes every sum started. On CUDA the sums run
  // on the communicator's own stream after the work already queued on the compute stream.
  virtual void start_sum(std::vector<Tensor> tensors) = 0;
  // Starts a sum over ranks of `flat` (1-D, contiguous, numel a multiple of size(), dtypes as
  // start_sum's) of which this rank keeps part rank() only: elements [rank() n, (rank() + 1) n) for
  // n = numel / size() hold their sums, the other parts are left undefined. A reduce-scatter in
  // place, ZeRO-1's gradient sum. wait() finishes it.
  virtual void start_reduce_scatter(Tensor flat) = 0;
  // After it the started sums are in place (on CUDA: ordered before the compute stream's next work).
  virtual void wait() = 0;
  // Every rank's part q of `flat` (laid out as in start_reduce_scatter, each rank's own part
  // filled in) copied into every other rank's, in place: an all-gather. Done on return (on CUDA:
  // ordered as wait() orders the sums).
  virtual void all_gather(Tensor flat) = 0;
  // Host values summed over ranks, in place.
  virtual void sum(std::span<double> values) = 0;
  virtual void sum(std::span<int64_t> values) = 0;
  // Every rank's `values` (the same length on each), rank-major.
  virtual std::vector<uint64_t> all_gather(std::span<const uint64_t> values) = 0;

  // Expert parallelism's exchange (SPEC §6). Rows of `send` (2-D, contiguous, on the job's device)
  // go to the ranks in order: the first send_rows[0] to rank 0, the next send_rows[1] to rank 1,
  // ...; returns the rows received, rank 0's first, recv_rows[q] from rank q (what rank q sent
  // this rank). Done on return (on CUDA: ordered on the compute stream).
  virtual Tensor all_to_all(const Tensor& send, std::span<const int64_t> send_rows,
                            std::span<const int64_t> recv_rows) = 0;
  // Host values: `values` holds size() equal parts, part q for rank q; returns the part each rank
  // sent this one, rank-major.
  virtual std::vector<int64_t> all_to_all(std::span<const int64_t> values) = 0;
  // The ranks that give the same `color`, ranked by (key, rank); every rank must call it.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

 protected:
  // Checks an exchange's row counts against `send` (2-D, contiguous, on `device`) and the ranks;
  // returns the number of rows this rank receives.
  int64_t rows_to_receive(const Tensor& send, Device device, std::span<const int64_t> send_rows,
                          std::span<const int64_t> recv_rows) const;
  // Checks a reduce-scatter's or all-gather's flat tensor against the ranks and `device`; returns
  // the elements of one part.
  int64_t part_size(const Tensor& flat, Device device) const;

  int rank_ = 0, size_ = 1;
};

// The job's communicator for `device`. A process not started by an MPI launcher is a job of one
// and never initialises MPI. On CUDA each rank takes the GPU of its rank on the node.
std::unique_ptr<Communicator> connect(Device device);

// Ends every rank of the job after an error on this one: a rank that exits while the others wait
// in a collective would leave them hanging. Returns only when the job is a single process.
void abort_job(int exit_code);

}  // namespace hylo::dist
