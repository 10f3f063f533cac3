// Data-parallel sums and expert-parallel exchanges of device tensors over NCCL; MPI gives the
// ranks, broadcasts NCCL's id and carries the host values (MpiCommunicator).
#include <cuda_runtime.h>
#include <nccl.h>

#include <exception>

#include "core/cuda/check.h"
#include "core/cuda/tensor_kernels.h"
#include "core/error.h"
#include "parallel/mpi_communicator.h"

namespace hylo::dist {
namespace {

#define HYLO_NCCL_CHECK(call)                                                                     \
  do {                                                                                            \
    ncclResult_t hylo_nccl_rc_ = (call);                                                          \
    HYLO_CHECK(hylo_nccl_rc_ == ncclSuccess, "{} failed: {}", #call, ncclGetErrorString(hylo_nccl_rc_)); \
  } while (0)

class NcclCommunicator final : public MpiCommunicator {
 public:
  NcclCommunicator() {
    // The rank's GPU: its index among the ranks of its node, among the GPUs it can see (one,
    // under srun --gpus-per-task=1). Chosen before this process touches any device memory.
    MPI_Comm node = MPI_COMM_NULL;
    check_mpi(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node), "MPI_Comm_split_type");
    int local_rank = 0, devices = 0;
    check_mpi(MPI_Comm_rank(node, &local_rank), "MPI_Comm_rank");
    MPI_Comm_free(&node);
    HYLO_CUDA_CHECK(cudaGetDeviceCount(&devices));
    HYLO_CHECK(devices > 0, "data parallel: rank {} sees no GPU", rank_);
    HYLO_CUDA_CHECK(cudaSetDevice(local_rank % devices));

    ncclUniqueId id{};
    if (rank_ == 0) HYLO_NCCL_CHECK(ncclGetUniqueId(&id));
    check_mpi(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, comm_), "MPI_Bcast");
    HYLO_NCCL_CHECK(ncclCommInitRank(&nccl_, size_, id, rank_));
    create_stream_and_events();
  }

  // A split: the MPI side and the NCCL side of the same ranks.
  NcclCommunicator(MPI_Comm host, ncclComm_t nccl) : MpiCommunicator(host), nccl_(nccl) { create_stream_and_events(); }

  ~NcclCommunicator() override {
    // Unwinding after an error on this rank: main() prints it and aborts the job next. Destroying
    // the communicator may wait for peers that are themselves waiting in a collective, which would
    // hold the error back until the watchdog; the process is about to end, so leave it.
    if (std::uncaught_exceptions() == 0) ncclCommDestroy(nccl_);
    cudaEventDestroy(queued_);
    cudaEventDestroy(summed_);
    cudaStreamDestroy(stream_);
  }

  void start_sum(std::vector<Tensor> tensors) override {
    queue(tensors, [&] {
      for (const Tensor& t : tensors)
        HYLO_NCCL_CHECK(ncclAllReduce(t.raw(), t.raw(), size_t(t.numel()), nccl_type(t), ncclSum, nccl_, stream_));
    });
  }

  // In place (NCCL's form of it: the receive buffer is this rank's part of the send buffer).
  void start_reduce_scatter(Tensor flat) override {
    const size_t n = size_t(part_size(flat, Device::cuda));
    queue({flat}, [&] {
      HYLO_NCCL_CHECK(ncclReduceScatter(flat.raw(), own_part(flat, n), n, nccl_type(flat), ncclSum, nccl_, stream_));
    });
  }

  void wait() override {
    HYLO_CUDA_CHECK(cudaEventRecord(summed_, stream_));
    HYLO_CUDA_CHECK(cudaStreamWaitEvent(cuda::stream(), summed_));
    held_.clear();  // freed memory is reused on the compute stream, which now waits for the sums
  }

  // In place: this rank's part is already where the gathered tensor wants it.
  void all_gather(Tensor flat) override {
    const size_t n = size_t(part_size(flat, Device::cuda));
    queue({flat},
          [&] { HYLO_NCCL_CHECK(ncclAllGather(own_part(flat, n), flat.raw(), n, nccl_type(flat), nccl_, stream_)); });
    wait();
  }

  // One send and one receive per rank, as one group, in bytes.
  Tensor all_to_all(const Tensor& send, std::span<const int64_t> send_rows,
                    std::span<const int64_t> recv_rows) override {
    const int64_t rows = rows_to_receive(send, Device::cuda, send_rows, recv_rows);
    Tensor recv = Tensor::empty({rows, send.size(1)}, send.dtype(), Device::cuda, "expert exchange");
    const size_t row_bytes = size_t(send.size(1)) * dtype_size(send.dtype());
    const auto* from = static_cast<const char*>(send.raw());
    auto* to = static_cast<char*>(recv.raw());
    queue({send}, [&] {
      for (int q = 0; q < size_; ++q) {
        const size_t n_send = size_t(send_rows[size_t(q)]) * row_bytes,
                     n_recv = size_t(recv_rows[size_t(q)]) * row_bytes;
        if (n_send > 0) HYLO_NCCL_CHECK(ncclSend(from, n_send, ncclChar, q, nccl_, stream_));
        if (n_recv > 0) HYLO_NCCL_CHECK(ncclRecv(to, n_recv, ncclChar, q, nccl_, stream_));
        from += n_send;
        to += n_recv;
      }
    });
    wait();
    return recv;
  }

  std::unique_ptr<Communicator> split(int color, int key) override {
    MPI_Comm host = split_comm(color, key);
    ncclComm_t part = nullptr;
    HYLO_NCCL_CHECK(ncclCommSplit(nccl_, color, key, &part, nullptr));
    return std::make_unique<NcclCommunicator>(host, part);
  }

 private:
  void create_stream_and_events() {
    HYLO_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    HYLO_CUDA_CHECK(cudaEventCreateWithFlags(&queued_, cudaEventDisableTiming));
    HYLO_CUDA_CHECK(cudaEventCreateWithFlags(&summed_, cudaEventDisableTiming));
  }

  static ncclDataType_t nccl_type(const Tensor& t) {
    const bool bf16 = t.dtype() == DType::bf16;
    HYLO_CHECK(t.device() == Device::cuda && t.is_contiguous() && (bf16 || t.dtype() == DType::f32),
               "data parallel: NCCL moves contiguous bf16 or f32 CUDA tensors, got {} on {}", dtype_name(t.dtype()),
               device_name(t.device()));
    return bf16 ? ncclBfloat16 : ncclFloat32;
  }

  // Where this rank's part of `flat` (parts of n elements) starts.
  void* own_part(const Tensor& flat, size_t n) const {
    return static_cast<char*>(flat.raw()) + size_t(rank_) * n * dtype_size(flat.dtype());
  }

  // `issue`'s NCCL calls as one group (NCCL fuses them), on this communicator's stream after the
  // work already queued on the compute stream.
  template <class Issue>
  void queue(const std::vector<Tensor>& tensors, Issue issue) {
    HYLO_CUDA_CHECK(cudaEventRecord(queued_, cuda::stream()));
    HYLO_CUDA_CHECK(cudaStreamWaitEvent(stream_, queued_));
    HYLO_NCCL_CHECK(ncclGroupStart());
    issue();
    HYLO_NCCL_CHECK(ncclGroupEnd());
    // Kept alive until wait(): the caching allocator may not hand their memory out meanwhile.
    held_.insert(held_.end(), tensors.begin(), tensors.end());
  }

  ncclComm_t nccl_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t queued_ = nullptr, summed_ = nullptr;
  std::vector<Tensor> held_;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator() { return std::make_unique<NcclCommunicator>(); }

}  // namespace hylo::dist
