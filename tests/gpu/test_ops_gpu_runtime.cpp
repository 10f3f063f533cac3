// GPU op properties the CPU comparison table cannot show: the caching allocator (reuse with no
// cudaMalloc after warm-up, statistics, the out-of-memory message), bitwise run-to-run
// determinism of the reductions, stochastic rounding reproduced bit for bit from host Philox, and
// error messages that name the failing call.
#include <cuda_runtime.h>  // before gpu_test_util.h: its typed cudaMalloc(T**) overload
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "core/cuda/allocator.h"
#include "core/cuda/check.h"
#include "core/cuda/tensor_kernels.h"
#include "core/error.h"
#include "gpu_test_util.h"
#include "kernels/adamw/adamw.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/embedding/embedding.h"
#include "kernels/gemm/gemm.h"
#include "kernels/rmsnorm/rmsnorm.h"
#include "kernels/rope/rope.h"
#include "nn/transformer.h"
#include "optim/optimizer.h"
#include "data/step_batch.h"

using namespace hylo;
using namespace hylo::test;

namespace {

template <class T>
bool bitwise_equal(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

std::vector<int32_t> skewed_ids(int N, int V) {
  Rng rng{77, 0, 0};
  std::vector<int32_t> ids(N);
  for (auto& id : ids) id = rng.uniform() < 0.3 ? 17 : int32_t(rng.below(V));
  return ids;
}

}  // namespace

TEST_CASE("allocator: buckets, reuse without cudaMalloc after warm-up, statistics, out-of-memory message") {
  CHECK(cuda::bucket_size(1) == 512);
  CHECK(cuda::bucket_size(513) == 1024);
  CHECK(cuda::bucket_size(size_t(1) << 20) == size_t(1) << 20);
  CHECK(cuda::bucket_size((size_t(1) << 20) + 1) == (size_t(1) << 20) + (size_t(1) << 17));  // 8 steps per octave
  CHECK(cuda::bucket_size(size_t(3) << 30) == size_t(3) << 30);

  cuda::empty_cache();
  cuda::AllocatorStats base = cuda::allocator_stats();
  const std::vector<size_t> sizes = {1000, size_t(4096) * 4096 * 2, 300000, 77, size_t(5) << 20};
  auto one_step = [&] {  // allocate a step's buffers, release them in a different order
    std::vector<void*> ptrs;
    for (size_t i = 0; i < sizes.size(); ++i)
      ptrs.push_back(cuda::allocate(sizes[i], i % 2 ? "activations: test" : "grads: test"));
    for (size_t i : {2, 0, 4, 1, 3}) cuda::release(ptrs[i]);
  };
  one_step();
  cuda::AllocatorStats warm = cuda::allocator_stats();
  CHECK(warm.device_mallocs == base.device_mallocs + sizes.size());
  for (int step = 0; step < 5; ++step) one_step();
  cuda::AllocatorStats after = cuda::allocator_stats();
  CHECK(after.device_mallocs == warm.device_mallocs);  // every block came from a free list
  CHECK(after.current_bytes == base.current_bytes);
  size_t step_bytes = 0;
  for (size_t s : sizes) step_bytes += cuda::bucket_size(s);
  CHECK(after.peak_bytes >= base.current_bytes + step_bytes);
  CHECK(after.cached_bytes >= step_bytes);

  void* a = cuda::allocate(4096, "activations: live");
  void* g = cuda::allocate(8192, "grads: live");
  cuda::AllocatorStats live = cuda::allocator_stats();
  CHECK(live.current_by_category["activations"] >= 4096);
  CHECK(live.current_by_category["grads"] >= 8192);
  CHECK(live.peak_by_category["activations"] >= cuda::bucket_size(sizes[1]));
  cuda::release(a);
  cuda::release(g);
  CHECK_THROWS_AS(cuda::release(a), Error);  // double free is reported, not ignored

  try {
    cuda::allocate(size_t(1) << 50, "activations: deliberately huge");
    FAIL("a 1 PiB allocation succeeded");
  } catch (const Error& e) {
    std::string msg = e.what();
    INFO(msg);
    CHECK(msg.find("out of memory allocating activations: deliberately huge") != std::string::npos);
    CHECK(msg.find("train.recompute: true") != std::string::npos);
  }
  CHECK(cudaGetLastError() == cudaSuccess);  // the failed cudaMalloc left no sticky error behind
}

TEST_CASE("allocator: training steps of a small hybrid make no cudaMalloc after warm-up") {
  // Every op of a real step (embedding, attention, linear, rmsnorm, rope, swiglu, LM head + CE,
  // grad norm, AdamW) allocates through the caching allocator, so warmed-up steps must be served
  // from its free lists.
  ModelConfig c;
  c.vocab_size = 512;
  c.d_model = 128;
  c.n_layers = 2;
  c.n_heads = 2;  // head dim 64: the CUDA attention kernels
  c.ffn_hidden = 256;
  c.pattern = "LG";
  c.local = {"pbb", 0, 32, 8};
  const int B = 2, T = 96;
  Transformer model(c, 5);
  AdamW optimizer(model.parameters(), AdamWOptions{0.9, 0.95, 1e-8, 0.1}, Device::cuda);
  std::vector<int32_t> tokens(size_t(B) * (T + 1));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 7919) % 509);
  const StepBatch batch = make_step_batch(tokens, B, T, Device::cuda);
  auto step = [&] {
    optimizer.zero_grad();
    model.loss(batch.inputs_BT, batch.targets_N, c.vocab_size).backward();
    optimizer.step(1e-3, std::min(1.0, 1.0 / optimizer.grad_norm()));
    cuda::synchronize();
  };
  step();
  step();
  const uint64_t mallocs = cuda::allocator_stats().device_mallocs;
  for (int i = 0; i < 3; ++i) step();
  CHECK(cuda::allocator_stats().device_mallocs == mallocs);
}

TEST_CASE("determinism: embedding/rmsnorm weight gradients, reductions and gemm are bitwise reproducible") {
  const int N = 4096, V = 512, D = 384;
  auto ids = skewed_ids(N, V);
  auto dout_h = to_bf16(random_floats(size_t(N) * D, 10));
  auto x_h = to_bf16(random_floats(size_t(N) * D, 11));
  auto w_h = to_bf16(random_floats(D, 12));
  DeviceBuffer<int32_t> id(ids);
  DeviceBuffer<bf16> dout(dout_h), x(x_h), w(w_h), dx(size_t(N) * D), y(size_t(N) * D);
  DeviceBuffer<float> rstd(N), norm(1);
  DeviceBuffer<bf16> b(to_bf16(random_floats(size_t(8192) * 256, 14)));
  DeviceBuffer<float> c(size_t(256) * 256);
  auto run = [&] {
    DeviceBuffer<bf16> dtable(size_t(V) * D), dw(D);
    CUDA_OK(cudaMemset(dtable.ptr, 0, size_t(V) * D * 2));
    CUDA_OK(cudaMemset(dw.ptr, 0, size_t(D) * 2));
    norm.poison();  // outputs reused across runs: a run that writes nothing must not match
    c.poison();
    cuda::embedding_backward(N, V, D, id.ptr, dout.ptr, dtable.ptr, nullptr);
    cuda::rmsnorm_forward(N, D, 1e-5f, x.ptr, w.ptr, y.ptr, rstd.ptr, nullptr);
    cuda::rmsnorm_backward(N, D, x.ptr, w.ptr, rstd.ptr, dout.ptr, dx.ptr, false, dw.ptr, nullptr);
    const bf16* bufs[] = {dout.ptr, x.ptr};
    int64_t sizes[] = {int64_t(N) * D, int64_t(N) * D - 5};
    cuda::global_norm(2, bufs, sizes, norm.ptr, nullptr);
    cuda::gemm(true, false, 256, 256, 8192, 1.f, b.ptr, b.ptr, 0.f, c.ptr, nullptr);  // long K: split-K territory
    return std::make_tuple(dtable.download(), dw.download(), norm.download(), c.download());
  };
  auto first = run();
  auto second = run();
  CHECK(bitwise_equal(std::get<0>(first), std::get<0>(second)));
  CHECK(bitwise_equal(std::get<1>(first), std::get<1>(second)));
  CHECK(bitwise_equal(std::get<2>(first), std::get<2>(second)));
  CHECK(bitwise_equal(std::get<3>(first), std::get<3>(second)));
}

TEST_CASE("adamw: stochastic rounding of the bf16 copy is reproduced bit for bit by host Philox") {
  const int64_t n = 10007;
  auto p_h = random_floats(n, 20), m_h = random_floats(n, 21, 0.1f), v_h = random_floats(n, 22, 0.1f);
  for (auto& v : v_h) v *= v;
  DeviceBuffer<float> p(p_h), m(m_h), v(v_h);
  DeviceBuffer<bf16> g(to_bf16(random_floats(n, 23))), pb(n);
  cuda::AdamWStep hp;
  hp.lr = 1e-3f, hp.step = 123, hp.stochastic_rounding = true, hp.seed = 0x123456789abcdefull, hp.param_index = 42;
  pb.poison();
  cuda::adamw(n, p.ptr, m.ptr, v.ptr, g.ptr, pb.ptr, hp, nullptr);
  std::vector<float> p_new = p.download();
  std::vector<bf16> got = pb.download();
  int64_t mismatches = 0, rounded_up = 0, inexact = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint64_t block = uint64_t(i) >> 2;
    auto words = philox4x32({uint32_t(block), uint32_t(block >> 32), uint32_t(hp.step), hp.param_index},
                            {uint32_t(hp.seed), uint32_t(hp.seed >> 32)});
    uint32_t bits;
    std::memcpy(&bits, &p_new[i], 4);
    uint16_t expected = uint16_t((bits + (words[i & 3] & 0xffffu)) >> 16);
    mismatches += got[i].bits != expected;
    inexact += (bits & 0xffffu) != 0;
    rounded_up += expected != uint16_t(bits >> 16);
  }
  CHECK(mismatches == 0);
  // Rounding is random: a fair share of inexact values round up, not all and not none.
  CHECK(rounded_up > inexact / 4);
  CHECK(rounded_up < inexact * 3 / 4);
}

TEST_CASE("embedding: an invalid id yields a NaN row forward and no gradient backward") {
  const int N = 4, V = 5, D = 16;
  std::vector<int32_t> ids = {1, -1, 5, 1};  // -1 and V are invalid
  DeviceBuffer<int32_t> id(ids);
  auto table_h = to_bf16(random_floats(size_t(V) * D, 30));
  DeviceBuffer<bf16> table(table_h), out(size_t(N) * D), dtable(size_t(V) * D);
  DeviceBuffer<bf16> dout(to_bf16(std::vector<float>(size_t(N) * D, 1.f)));
  CUDA_OK(cudaMemset(dtable.ptr, 0, size_t(V) * D * 2));
  cuda::embedding_forward(N, V, D, id.ptr, table.ptr, out.ptr, nullptr);
  cuda::embedding_backward(N, V, D, id.ptr, dout.ptr, dtable.ptr, nullptr);
  auto o = to_float(out.download());
  auto dt = to_float(dtable.download());
  for (int d = 0; d < D; ++d) {
    CHECK(o[0 * D + d] == bf16_to_float(table_h[1 * D + d]));
    CHECK(std::isnan(o[1 * D + d]));
    CHECK(std::isnan(o[2 * D + d]));
    CHECK(dt[1 * D + d] == 2.f);  // the two valid rows of id 1
    for (int v : {0, 2, 3, 4}) CHECK(dt[v * D + d] == 0.f);
  }
}

TEST_CASE("errors: CUDA failures and bad arguments name the call site") {
  DeviceBuffer<float> buf(4);
  try {
    HYLO_CUDA_CHECK(cudaSetDevice(9999));  // a clean, non-sticky failure
    FAIL("cudaSetDevice(9999) succeeded");
  } catch (const Error& e) {
    std::string msg = e.what();
    INFO(msg);
    CHECK(msg.find("cudaSetDevice(9999)") != std::string::npos);
    CHECK(msg.find("test_ops_gpu_runtime.cpp") != std::string::npos);
  }
  (void)cudaGetLastError();
  try {
    cuda::rope_forward(1, 4, 1, 7, 0, 4, buf.ptr, buf.ptr, nullptr, nullptr, nullptr);  // odd head dim
    FAIL("rope accepted an odd head dim");
  } catch (const Error& e) {
    std::string msg = e.what();
    INFO(msg);
    CHECK(msg.find("rope") != std::string::npos);
    CHECK(std::string(e.where()).find("rope.cu") != std::string::npos);
  }
}
