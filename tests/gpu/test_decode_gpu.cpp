// CUDA decode attention vs the CPU decode reference (float, on the same bf16-rounded caches): every
// cache kind's live-slot pattern (Flash-PBB at every block offset r, in the first block and
// later ones; SWA ring before and after wrapping; linear SWA; full), head dims 64 and 128, batch
// 1 / 16 / 64, MHA and GQA groups 2, 3, 4, 8 and 24, one pass and split-KV. Every cache slot holds
// random data, so a kernel that reads a slot that is not live gets the wrong answer. Outputs are
// poisoned (NaN) before every launch. Then the append / compaction kernels, a token-by-token
// decode through device caches driven by KvSlotMap against the CPU KvCache, and the same with
// all steps queued back to back on one stream.
// Shape legend: B batch, Hq/Hkv heads, S slots, D head dim; q/out (B, Hq, D), caches (B, Hkv, S, D).
#include <cuda_runtime.h>  // before gpu_test_util.h: its typed cudaMalloc(T**) overload
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "kernels/decode/decode.h"
#include "nn/kv_cache.h"
#include "ops/cpu/decode_attention.h"
#include "ops/decode.h"

using namespace hylo;
using namespace hylo::test;

namespace {

struct Step {
  std::string what;
  LiveSlots live;
};

// Live-slot patterns of each cache kind for a cache of `slots` slots (PBB b = 64, w = 16; ring and
// linear W = 48; full up to 200).
std::vector<Step> steps_for(KvCacheKind kind) {
  std::vector<Step> steps;
  switch (kind) {
    case KvCacheKind::pbb:
      for (int64_t t = 0; t < 2 * 64; ++t)  // every offset r, in block 0 (no bridge) and block 1
        steps.push_back({"pbb t=" + std::to_string(t), pbb_live_slots(t, 64, 16)});
      break;
    case KvCacheKind::swa_ring:
      for (int64_t t : {0, 1, 30, 46, 47, 48, 49, 70, 95, 96, 143})
        steps.push_back({"ring t=" + std::to_string(t), ring_live_slots(t, 48)});
      break;
    case KvCacheKind::swa_linear: {
      KvSlotMap map = KvSlotMap::swa_linear(48);
      for (int64_t t = 0; t < 160; ++t) {
        map.append(t);
        if (t % 9 == 0 || t == 95 || t == 96 || t == 97) steps.push_back({"linear t=" + std::to_string(t), map.live(t)});
      }
      break;
    }
    case KvCacheKind::full:
      for (int64_t t : {0, 5, 63, 64, 150, 199}) steps.push_back({"full t=" + std::to_string(t), {{}, {0, int(t + 1)}}});
      break;
  }
  return steps;
}

int slots_for(KvCacheKind kind) {
  switch (kind) {
    case KvCacheKind::pbb: return 64;
    case KvCacheKind::swa_ring: return 48;
    case KvCacheKind::swa_linear: return 96;
    case KvCacheKind::full: break;
  }
  return 200;
}

// Worst relative error over the steps of one cache kind.
double check_kind(KvCacheKind kind, int B, int Hq, int Hkv, int D, uint64_t seed, int& max_splits) {
  const DecodeShape sh{B, Hq, Hkv, D, slots_for(kind)};
  const size_t nq = size_t(B) * Hq * D, nkv = size_t(B) * Hkv * sh.slots * D;
  const auto k_b = to_bf16(random_floats(nkv, seed)), v_b = to_bf16(random_floats(nkv, seed + 1));
  const auto k = to_float(k_b), v = to_float(v_b);
  DeviceBuffer<bf16> k_d(k_b), v_d(v_b), q_d(nq), out_d(nq);
  DeviceBuffer<unsigned char> work_d(std::max<size_t>(cuda::decode_workspace_bytes(sh, sh.slots), 1));
  std::vector<float> ref(nq);
  double worst = 0;
  uint64_t step_seed = seed + 2;
  for (const Step& st : steps_for(kind)) {
    const auto q_b = to_bf16(random_floats(nq, ++step_seed, 2.0f));  // scale 2: peakier softmax
    const auto q = to_float(q_b);
    q_d.upload(q_b);
    cpu::decode_attention_forward(sh, st.live, q.data(), k.data(), v.data(), ref.data(), static_cast<float*>(nullptr));
    out_d.poison();
    work_d.poison();
    cuda::decode_attention_forward(sh, st.live, q_d.ptr, k_d.ptr, v_d.ptr, out_d.ptr, work_d.ptr, work_d.count,
                                   nullptr);
    max_splits = std::max(max_splits, cuda::decode_num_splits(sh, st.live.keys()));
    const double err = relative_error(out_d.download(), ref);
    CAPTURE(st.what);
    CAPTURE(B);
    CAPTURE(Hq);
    CAPTURE(Hkv);
    CAPTURE(D);
    CHECK(err <= 1e-2);
    worst = std::max(worst, err);
  }
  return worst;
}

const char* kind_name(KvCacheKind kind) {
  switch (kind) {
    case KvCacheKind::pbb: return "pbb(64,16)";
    case KvCacheKind::swa_ring: return "swa ring(48)";
    case KvCacheKind::swa_linear: return "swa linear(48)";
    case KvCacheKind::full: break;
  }
  return "full(200)";
}

}  // namespace

TEST_CASE("cuda decode attention matches the CPU decode reference for every cache kind") {
  struct Heads {
    int Hq, Hkv;
  };
  // MHA (at batch 1 and 16 on decode_mma_kernel, at 64 on decode_kernel: plan_for, checked below);
  // GQA groups 2, 4, 3, 8 and 24 (24 = three blocks of 8 heads). On 132 SMs decode_mma_kernel runs
  // with 4 stages where its grid fits one block per SM and with 3 at batch 64 group 24 (384 blocks).
  const std::vector<Heads> heads = {{32, 32}, {4, 2}, {8, 2}, {6, 2}, {16, 2}, {48, 2}};
  uint64_t seed = 7000;
  int index = 0;
  double worst = 0;
  bool mha_on[2] = {false, false};  // MHA run on DecodeKernel::lane_groups, ::tensor_cores
  for (int D : {64, 128})
    for (int B : {1, 16, 64})
      for (KvCacheKind kind :
           {KvCacheKind::pbb, KvCacheKind::swa_ring, KvCacheKind::swa_linear, KvCacheKind::full}) {
        // The 24 (D, B, kind) cases give each of the 6 head layouts every kind, at both head dims.
        const Heads h = heads[size_t(index / 4 + index % 4) % heads.size()];
        ++index;
        const auto kernel = cuda::decode_kernel_for(DecodeShape{B, h.Hq, h.Hkv, D, slots_for(kind)});
        if (h.Hq == h.Hkv)
          mha_on[kernel == cuda::DecodeKernel::tensor_cores] = true;
        else
          CHECK(kernel == cuda::DecodeKernel::tensor_cores);  // every GQA group
        int max_splits = 1;
        const double err = check_kind(kind, B, h.Hq, h.Hkv, D, seed += 10, max_splits);
        const char* kernel_name = kernel == cuda::DecodeKernel::tensor_cores ? "tensor cores" : "lane groups";
        std::printf("decode D=%3d B=%2d Hq=%2d Hkv=%d %-15s %-12s worst rel err %.2e (up to %d splits)\n", D, B,
                    h.Hq, h.Hkv, kind_name(kind), kernel_name, err, max_splits);
        worst = std::max(worst, err);
      }
  std::printf("decode worst rel err %.2e\n", worst);
  // The table's batches are chosen so that MHA runs on both kernels; a change to plan_for that
  // moves one of them would otherwise drop that kernel's MHA coverage without a sound.
  CHECK(mha_on[0]);
  CHECK(mha_on[1]);
}

TEST_CASE("cuda kv cache append and compaction write exactly the named rows") {
  const DecodeShape sh{3, 4, 2, 64, 10};
  const size_t nkv = size_t(sh.B) * sh.Hkv * sh.slots * sh.D, nnew = size_t(sh.B) * sh.Hkv * sh.D;
  auto k = to_bf16(random_floats(nkv, 11)), v = to_bf16(random_floats(nkv, 12));
  const auto k_new = to_bf16(random_floats(nnew, 13)), v_new = to_bf16(random_floats(nnew, 14));
  DeviceBuffer<bf16> k_d(k), v_d(v), k_new_d(k_new), v_new_d(v_new);
  cuda::kv_cache_append(sh, 7, k_new_d.ptr, v_new_d.ptr, k_d.ptr, v_d.ptr, nullptr);
  cuda::kv_cache_move(sh, 6, 1, 4, k_d.ptr, v_d.ptr, nullptr);  // rows 6..9 -> 1..4 (7 is the new one)
  auto apply = [&](std::vector<bf16>& cache, const std::vector<bf16>& row) {
    for (int head = 0; head < sh.B * sh.Hkv; ++head) {
      bf16* c = cache.data() + size_t(head) * sh.slots * sh.D;
      std::copy_n(row.data() + size_t(head) * sh.D, sh.D, c + 7 * sh.D);
      std::copy_n(c + 6 * sh.D, 4 * sh.D, c + 1 * sh.D);
    }
  };
  apply(k, k_new);
  apply(v, v_new);
  const auto k_got = k_d.download(), v_got = v_d.download();
  CHECK(std::equal(k_got.begin(), k_got.end(), k.begin(), [](bf16 a, bf16 b) { return a.bits == b.bits; }));
  CHECK(std::equal(v_got.begin(), v_got.end(), v.begin(), [](bf16 a, bf16 b) { return a.bits == b.bits; }));
  CHECK_THROWS(cuda::kv_cache_move(sh, 2, 4, 4, k_d.ptr, v_d.ptr, nullptr));  // overlapping
  CHECK_THROWS(cuda::kv_cache_append(sh, 10, k_new_d.ptr, v_new_d.ptr, k_d.ptr, v_d.ptr, nullptr));
}

TEST_CASE("token-by-token cuda decode through device caches matches the CPU caches") {
  const int B = 4, Hq = 4, Hkv = 2, D = 64, T = 150;
  const std::vector<KvSlotMap> maps = {KvSlotMap::pbb(32, 8), KvSlotMap::pbb(32, 32), KvSlotMap::swa_ring(24),
                                       KvSlotMap::swa_linear(24), KvSlotMap::full(T)};
  uint64_t seed = 9100;
  for (KvSlotMap map : maps) {
    KvCache host(map, B, Hkv, D);
    const DecodeShape sh = host.decode_shape(Hq);
    const size_t nkv = size_t(B) * Hkv * sh.slots * D, nq = size_t(B) * Hq * D, nnew = size_t(B) * Hkv * D;
    DeviceBuffer<bf16> k_d(to_bf16(random_floats(nkv, ++seed))), v_d(to_bf16(random_floats(nkv, ++seed)));
    DeviceBuffer<bf16> q_d(nq), out_d(nq), k_new_d(nnew), v_new_d(nnew);
    DeviceBuffer<unsigned char> work_d(std::max<size_t>(cuda::decode_workspace_bytes(sh, sh.slots), 1));
    std::vector<float> ref(nq);
    double worst = 0;
    for (int t = 0; t < T; ++t) {
      const auto q_b = to_bf16(random_floats(nq, ++seed)), k_b = to_bf16(random_floats(nnew, ++seed));
      const auto v_b = to_bf16(random_floats(nnew, ++seed));
      const auto q = to_float(q_b), k_new = to_float(k_b), v_new = to_float(v_b);
      host.append(t, Tensor::from_vector(k_new, {B, Hkv, D}), Tensor::from_vector(v_new, {B, Hkv, D}));
      const KvSlotMap::Append a = map.append(t);
      cuda::kv_cache_move(sh, a.move.src, a.move.dst, a.move.count, k_d.ptr, v_d.ptr, nullptr);
      k_new_d.upload(k_b);
      v_new_d.upload(v_b);
      cuda::kv_cache_append(sh, a.slot, k_new_d.ptr, v_new_d.ptr, k_d.ptr, v_d.ptr, nullptr);
      q_d.upload(q_b);
      const LiveSlots live = map.live(t);
      cpu::decode_attention_forward(sh, live, q.data(), host.k().data<float>(), host.v().data<float>(), ref.data(),
                                    static_cast<float*>(nullptr));
      out_d.poison();
      cuda::decode_attention_forward(sh, live, q_d.ptr, k_d.ptr, v_d.ptr, out_d.ptr, work_d.ptr, work_d.count,
                                     nullptr);
      worst = std::max(worst, relative_error(out_d.download(), ref));
    }
    CAPTURE(map.slots());
    CHECK(worst <= 1e-2);
    std::printf("token-by-token decode, cache of %d slots (kind %d): worst rel err %.2e\n", map.slots(),
                int(map.kind()), worst);
  }
}

// As hylo generate queues them, with nothing between the steps but the next append: one stream, no
// host sync, so each decode kernel is a programmatic dependent launch behind the append (and its
// first keys' loads race ahead of the wait) and the split combine of one step is followed by the
// next step's decode writing the same workspace. Every step has its own q and out.
TEST_CASE("back-to-back cuda decode steps queued without a sync match the CPU caches") {
  struct Case {
    int B, Hq, Hkv, D;
    bool splits;  // split-KV on every cache (the combine and the shared workspace exercised)
  };
  const int T = 300;
  uint64_t seed = 9500;
  // MHA at batch 32 on decode_mma_kernel in one pass (512 blocks), at batch 64 on decode_kernel
  // (1024 blocks); MHA at H 4 and GQA group 8 on grids of 4 blocks, on decode_mma_kernel split in
  // 4 on both caches once they hold 256 live keys (4 rounds of its 64)
  for (const Case c : {Case{32, 16, 16, 64, false}, Case{64, 16, 16, 128, false}, Case{1, 4, 4, 64, true},
                       Case{2, 16, 2, 128, true}})
    for (KvSlotMap map : {KvSlotMap::pbb(256, 64), KvSlotMap::swa_ring(256)}) {
      KvCache host(map, c.B, c.Hkv, c.D);
      const DecodeShape sh = host.decode_shape(c.Hq);
      const size_t nkv = size_t(c.B) * c.Hkv * sh.slots * c.D, nq = size_t(c.B) * c.Hq * c.D;
      const size_t nnew = size_t(c.B) * c.Hkv * c.D;
      const auto q_all = to_bf16(random_floats(nq * T, ++seed)), k_all = to_bf16(random_floats(nnew * T, ++seed));
      const auto v_all = to_bf16(random_floats(nnew * T, ++seed));
      DeviceBuffer<bf16> k_d(to_bf16(random_floats(nkv, ++seed))), v_d(to_bf16(random_floats(nkv, ++seed)));
      DeviceBuffer<bf16> q_d(q_all), k_new_d(k_all), v_new_d(v_all), out_d(nq * T);
      DeviceBuffer<unsigned char> work_d(std::max<size_t>(cuda::decode_workspace_bytes(sh, sh.slots), 1));
      out_d.poison();
      cudaStream_t stream = nullptr;
      CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      CUDA_OK(cudaDeviceSynchronize());  // the uploads and poison, on the legacy stream
      std::vector<LiveSlots> live(T);
      int max_splits = 1;
      for (int t = 0; t < T; ++t) {
        const KvSlotMap::Append a = map.append(t);
        cuda::kv_cache_append(sh, a.slot, k_new_d.ptr + nnew * t, v_new_d.ptr + nnew * t, k_d.ptr, v_d.ptr, stream);
        live[size_t(t)] = map.live(t);
        cuda::decode_attention_forward(sh, live[size_t(t)], q_d.ptr + nq * t, k_d.ptr, v_d.ptr, out_d.ptr + nq * t,
                                       work_d.ptr, work_d.count, stream);
        max_splits = std::max(max_splits, cuda::decode_num_splits(sh, live[size_t(t)].keys()));
      }
      CUDA_OK(cudaStreamSynchronize(stream));
      CUDA_OK(cudaStreamDestroy(stream));
      const auto out = to_float(out_d.download()), q = to_float(q_all), k = to_float(k_all), v = to_float(v_all);
      std::vector<float> ref(nq);
      double worst = 0;
      for (int t = 0; t < T; ++t) {
        const auto row = [&](const std::vector<float>& all) {
          return std::vector<float>(all.begin() + long(nnew) * t, all.begin() + long(nnew) * (t + 1));
        };
        host.append(t, Tensor::from_vector(row(k), {c.B, c.Hkv, c.D}), Tensor::from_vector(row(v), {c.B, c.Hkv, c.D}));
        cpu::decode_attention_forward(sh, live[size_t(t)], q.data() + nq * t, host.k().data<float>(),
                                      host.v().data<float>(), ref.data(), static_cast<float*>(nullptr));
        worst = std::max(worst, relative_error(std::vector<float>(out.begin() + long(nq) * t,
                                                                  out.begin() + long(nq) * (t + 1)), ref));
      }
      CAPTURE(c.B);
      CAPTURE(c.D);
      CAPTURE(map.slots());
      if (c.splits) CHECK(max_splits >= 2);
      CHECK(worst <= 1e-2);
      std::printf("back-to-back decode B=%d D=%d, cache of %d slots (kind %d, up to %d splits): worst rel err %.2e\n",
                  c.B, c.D, map.slots(), int(map.kind()), max_splits, worst);
    }
}

TEST_CASE("cuda decode rejects unsupported arguments") {
  const LiveSlots live{{}, {0, 4}};
  CHECK_THROWS(cuda::decode_attention_forward(DecodeShape{1, 2, 2, 96, 8}, live, nullptr, nullptr, nullptr, nullptr,
                                              nullptr, 0, nullptr));
  CHECK_THROWS(cuda::decode_attention_forward(DecodeShape{1, 2, 2, 64, 3}, live, nullptr, nullptr, nullptr, nullptr,
                                              nullptr, 0, nullptr));  // live slots beyond the cache
}

TEST_CASE("cuda greedy tokens equal the CPU first_argmax on the same bf16 logits") {
  // The r50k vocabulary padded to 50304, 50257 ids valid; random logits with planted rows: a tie
  // of the maximum (the lower id must win, also across threads and warps), NaN at id 0, a row of
  // -inf, the maximum in the padding (must be ignored) and on the last valid id.
  const int V = 50304, valid = 50257;
  for (int B : {1, 16, 64}) {
    std::vector<float> values = random_floats(size_t(B) * V, 9100 + uint64_t(B), 4.0f);
    auto row = [&](int b) { return values.begin() + int64_t(b) * V; };
    if (B > 1) {
      std::fill(row(0), row(1), 1.0f);  // the whole row tied: id 0
      row(1)[40000] = 30.0f, row(1)[257] = 30.0f, row(1)[33] = 29.9f;  // tie at 257 and 40000
      row(2)[0] = NAN, row(2)[1] = 50.0f, row(2)[50300] = 99.0f;       // NaN first, padding larger
      std::fill(row(3), row(4), -INFINITY);
      row(4)[valid - 1] = 60.0f;
    }
    const std::vector<bf16> host = to_bf16(values);
    const Tensor logits = Tensor::from_vector(host, {B, V});
    std::vector<int32_t> expected(static_cast<size_t>(B));
    for (int b = 0; b < B; ++b) expected[size_t(b)] = first_argmax(host.data() + int64_t(b) * V, valid);
    if (B > 1)  // the planted rows, so that the comparison below covers each case
      CHECK(std::vector<int32_t>(expected.begin(), expected.begin() + 5) == std::vector<int32_t>{0, 257, 1, 0, valid - 1});
    CHECK(greedy_tokens(logits.to(Device::cuda), valid) == expected);
    std::printf("greedy tokens B=%2d V=%d valid=%d: equal to the CPU reference\n", B, V, valid);
  }
}

TEST_CASE("cuda target log-probabilities equal the CPU reference on the same bf16 logits") {
  // The r50k vocabulary padded to 50304, 50257 ids valid; random logits, the padding made the
  // largest (it must stay out of the softmax), one row in seven without a target, and targets at
  // both ends of the valid ids. The device sums in fp32, the reference in double.
  const int V = 50304, valid = 50257;
  for (int N : {1, 37, 300}) {
    std::vector<float> values = random_floats(size_t(N) * V, 9300 + uint64_t(N), 4.0f);
    std::vector<int32_t> targets(static_cast<size_t>(N));
    for (int n = 0; n < N; ++n) {
      values[size_t(n) * V + size_t(valid) + 5] = 40.0f;
      targets[size_t(n)] = n % 7 == 6 ? -1 : n % 5 == 0 ? 0 : n % 5 == 1 ? valid - 1 : (n * 7919) % valid;
    }
    const Tensor logits = Tensor::from_vector(to_bf16(values), {N, V});
    const std::vector<double> expected = target_logprobs(logits, targets, valid);
    const Tensor on_gpu = logits.to(Device::cuda);
    const std::vector<double> got = target_logprobs(on_gpu, targets, valid);
    REQUIRE(got.size() == expected.size());
    double worst = 0;
    for (int n = 0; n < N; ++n)
      worst = std::max(worst, std::abs(got[size_t(n)] - expected[size_t(n)]) / std::max(1.0, std::abs(expected[size_t(n)])));
    CHECK(worst < 1e-5);
    // The logits are read, not written: the kernel works on a copy.
    const std::vector<bf16> after = on_gpu.to(Device::cpu).to_vector<bf16>(), before = logits.to_vector<bf16>();
    CHECK(std::equal(after.begin(), after.end(), before.begin(), before.end(),
                     [](bf16 a, bf16 b) { return a.bits == b.bits; }));
    std::printf("target logprobs N=%3d V=%d valid=%d: worst relative error %.2e against the CPU\n", N, V, valid, worst);
  }
}

