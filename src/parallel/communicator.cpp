#include "parallel/communicator.h"

#include <mpi.h>

#include <cstdlib>

#include "core/error.h"
#include "parallel/launch_guard.h"
#include "parallel/mpi_communicator.h"
#include "parallel/single_process.h"

namespace hylo::dist {
namespace {

// MPI is initialised once per process and finalised at exit, so that several communicators (the
// tests make one per case) share it.
void init_mpi_once() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return;
  check_mpi(MPI_Init(nullptr, nullptr), "MPI_Init");
  std::atexit([] {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  });
}

}  // namespace

// Under a launcher even a job of one rank takes the MPI (or NCCL) path: `mpirun -np 1` runs on a
// single GPU everything a larger job runs.
std::unique_ptr<Communicator> connect(Device device) {
  if (!started_by_mpi_launcher()) {
    check_launch();  // one of several srun tasks that MPI does not connect
    return std::make_unique<SingleProcess>();
  }
  init_mpi_once();
  if (device == Device::cpu) return std::make_unique<MpiCommunicator>();
#if HYLO_WITH_CUDA
  return make_nccl_communicator();
#else
  HYLO_FAIL("data parallel on cuda needs a CUDA build");
#endif
}

int64_t Communicator::rows_to_receive(const Tensor& send, Device device, std::span<const int64_t> send_rows,
                                      std::span<const int64_t> recv_rows) const {
  HYLO_CHECK(send.device() == device && send.dim() == 2 && send.is_contiguous(),
             "expert parallel: the exchange takes contiguous 2-D {} tensors, got {} on {}", device_name(device),
             shape_str(send.shape()), device_name(send.device()));
  HYLO_CHECK(send_rows.size() == size_t(size_) && recv_rows.size() == size_t(size_),
             "expert parallel: {} / {} row counts for {} ranks", send_rows.size(), recv_rows.size(), size_);
  int64_t sent = 0, received = 0;
  for (size_t q = 0; q < size_t(size_); ++q) {
    sent += send_rows[q];
    received += recv_rows[q];
  }
  HYLO_CHECK(sent == send.size(0), "expert parallel: {} rows to send, the tensor has {}", sent, send.size(0));
  return received;
}

int64_t Communicator::part_size(const Tensor& flat, Device device) const {
  HYLO_CHECK(flat.device() == device && flat.dim() == 1 && flat.is_contiguous() && flat.numel() % size_ == 0,
             "ZeRO-1: a flat {} tensor of a multiple of {} elements expected, got {} on {}", device_name(device), size_,
             shape_str(flat.shape()), device_name(flat.device()));
  return flat.numel() / size_;
}

void abort_job(int exit_code) {
  int initialized = 0, finalized = 0, size = 1;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size > 1) MPI_Abort(MPI_COMM_WORLD, exit_code);
}

}  // namespace hylo::dist
