#include "parallel/mpi_communicator.h"

#include <cstdint>
#include <cstring>

#include "core/error.h"

namespace hylo::dist {

void check_mpi(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(rc, text, &length);
  HYLO_FAIL("{} failed: {}", call, std::string(text, size_t(length)));
}

namespace {

// The job's own message space: a duplicate of MPI_COMM_WORLD.
MPI_Comm duplicate_world() {
  MPI_Comm world = MPI_COMM_NULL;
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &world), "MPI_Comm_dup");
  return world;
}

}  // namespace

MpiCommunicator::MpiCommunicator() : MpiCommunicator(duplicate_world()) {}

MpiCommunicator::MpiCommunicator(MPI_Comm comm) : comm_(comm) {
  // Errors come back as return codes (check_mpi names the call) instead of aborting silently.
  check_mpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&comm_);
}

namespace {

// The floats of `tensors` (contiguous f32 CPU tensors) one after the other.
std::vector<float> pack(const std::vector<Tensor>& tensors) {
  size_t total = 0;
  for (const Tensor& t : tensors) {
    HYLO_CHECK(t.device() == Device::cpu && t.dtype() == DType::f32 && t.is_contiguous(),
               "data parallel: MPI moves contiguous f32 CPU tensors, got {} on {}", dtype_name(t.dtype()),
               device_name(t.device()));
    total += size_t(t.numel());
  }
  HYLO_CHECK(total <= size_t(INT32_MAX), "data parallel: {} floats are too many for one MPI message", total);
  std::vector<float> buffer(total);
  size_t at = 0;
  for (const Tensor& t : tensors) {
    std::memcpy(buffer.data() + at, t.data<float>(), t.nbytes());
    at += size_t(t.numel());
  }
  return buffer;
}

void unpack(const std::vector<float>& buffer, const std::vector<Tensor>& tensors) {
  size_t at = 0;
  for (const Tensor& t : tensors) {
    std::memcpy(t.data<float>(), buffer.data() + at, t.nbytes());
    at += size_t(t.numel());
  }
}

}  // namespace

void MpiCommunicator::start_sum(std::vector<Tensor> tensors) {
  auto p = std::make_unique<Pending>();
  p->buffer = pack(tensors);
  p->tensors = std::move(tensors);
  check_mpi(MPI_Iallreduce(MPI_IN_PLACE, p->buffer.data(), int(p->buffer.size()), MPI_FLOAT, MPI_SUM, comm_,
                           &p->request),
            "MPI_Iallreduce");
  pending_.push_back(std::move(p));
  progress();
}

namespace {

// MPI counts are ints.
int part_count(int64_t n) {
  HYLO_CHECK(n <= INT32_MAX, "ZeRO-1: {} floats per rank are too many for one MPI message", n);
  return int(n);
}

void check_f32(const Tensor& flat) {
  HYLO_CHECK(flat.dtype() == DType::f32, "ZeRO-1: MPI moves f32 CPU tensors, got {}", dtype_name(flat.dtype()));
}

}  // namespace

void MpiCommunicator::start_reduce_scatter(Tensor flat) {
  const int n = part_count(part_size(flat, Device::cpu));
  check_f32(flat);
  auto p = std::make_unique<Pending>();
  check_mpi(MPI_Ireduce_scatter_block(MPI_IN_PLACE, flat.data<float>(), n, MPI_FLOAT, MPI_SUM, comm_, &p->request),
            "MPI_Ireduce_scatter_block");
  p->part_at = int64_t(rank_) * n;
  p->part_size = n;
  p->tensors = {std::move(flat)};  // kept alive
  pending_.push_back(std::move(p));
  progress();
}

// MPI moves non-blocking collectives along only inside MPI calls (no progress thread): give the
// earlier buckets a turn while backward still runs.
void MpiCommunicator::progress() {
  for (auto& q : pending_) {
    int done = 0;
    if (q->request != MPI_REQUEST_NULL) check_mpi(MPI_Test(&q->request, &done, MPI_STATUS_IGNORE), "MPI_Test");
  }
}

void MpiCommunicator::wait() {
  for (auto& p : pending_) {
    check_mpi(MPI_Wait(&p->request, MPI_STATUS_IGNORE), "MPI_Wait");  // at once if MPI_Test finished it
    if (!p->buffer.empty()) unpack(p->buffer, p->tensors);
    if (p->part_at > 0) {  // from the start of the tensor, [0, n), to [rank n, (rank + 1) n): no overlap
      float* flat = p->tensors[0].data<float>();
      std::memcpy(flat + p->part_at, flat, size_t(p->part_size) * sizeof(float));
    }
  }
  pending_.clear();
}

void MpiCommunicator::all_gather(Tensor flat) {
  const int n = part_count(part_size(flat, Device::cpu));
  check_f32(flat);
  check_mpi(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, flat.data<float>(), n, MPI_FLOAT, comm_),
            "MPI_Allgather");
}

void MpiCommunicator::sum(std::span<double> values) {
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, values.data(), int(values.size()), MPI_DOUBLE, MPI_SUM, comm_),
            "MPI_Allreduce");
}

void MpiCommunicator::sum(std::span<int64_t> values) {
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, values.data(), int(values.size()), MPI_INT64_T, MPI_SUM, comm_),
            "MPI_Allreduce");
}

std::vector<uint64_t> MpiCommunicator::all_gather(std::span<const uint64_t> values) {
  std::vector<uint64_t> all(values.size() * size_t(size_));
  check_mpi(MPI_Allgather(values.data(), int(values.size()), MPI_UINT64_T, all.data(), int(values.size()),
                          MPI_UINT64_T, comm_),
            "MPI_Allgather");
  return all;
}

// MPI counts are ints: rows become bytes, which must fit.
Tensor MpiCommunicator::all_to_all(const Tensor& send, std::span<const int64_t> send_rows,
                                   std::span<const int64_t> recv_rows) {
  const int64_t rows = rows_to_receive(send, Device::cpu, send_rows, recv_rows);
  const int64_t row_bytes = send.size(1) * int64_t(dtype_size(send.dtype()));
  const size_t n = size_t(size_);
  std::vector<int> send_bytes(n), send_at(n), recv_bytes(n), recv_at(n);
  int64_t sent = 0, received = 0;
  for (size_t q = 0; q < size_t(size_); ++q) {
    HYLO_CHECK((sent + send_rows[q]) * row_bytes <= INT32_MAX && (received + recv_rows[q]) * row_bytes <= INT32_MAX,
               "expert parallel: more than 2 GiB in one MPI exchange");
    send_at[q] = int(sent * row_bytes);
    send_bytes[q] = int(send_rows[q] * row_bytes);
    recv_at[q] = int(received * row_bytes);
    recv_bytes[q] = int(recv_rows[q] * row_bytes);
    sent += send_rows[q];
    received += recv_rows[q];
  }
  Tensor recv = Tensor::empty({rows, send.size(1)}, send.dtype(), Device::cpu, "expert exchange");
  check_mpi(MPI_Alltoallv(send.raw(), send_bytes.data(), send_at.data(), MPI_BYTE, recv.raw(), recv_bytes.data(),
                          recv_at.data(), MPI_BYTE, comm_),
            "MPI_Alltoallv");
  return recv;
}

std::vector<int64_t> MpiCommunicator::all_to_all(std::span<const int64_t> values) {
  HYLO_CHECK(values.size() % size_t(size_) == 0, "all_to_all: {} values do not split into {} parts", values.size(),
             size_);
  const int part = int(values.size() / size_t(size_));
  std::vector<int64_t> received(values.size());
  check_mpi(MPI_Alltoall(values.data(), part, MPI_INT64_T, received.data(), part, MPI_INT64_T, comm_), "MPI_Alltoall");
  return received;
}

MPI_Comm MpiCommunicator::split_comm(int color, int key) const {
  MPI_Comm part = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split(comm_, color, key, &part), "MPI_Comm_split");
  return part;
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key) {
  return std::make_unique<MpiCommunicator>(split_comm(color, key));
}

}  // namespace hylo::dist
