// Attention forward on warpgroup MMA (sm_90a), head dims 64 and 128: a persistent, warp-specialised
// kernel after FlashAttention-3. Built only for sm_90a (HYLO_WGMMA); attention_fwd_mma.cu serves
// other targets.
//
// Why this shape: the one-warpgroup-per-block forward (v19) ran pbb's kernels at 41-61% of the DRAM
// peak and 65-90% of L2 throughput, most of it K and V tiles read once per 64-row block. Here a
// block of three warpgroups owns an SM for the whole call:
//   warpgroup 0, the producer (one thread, 40 registers): asks the copy engine for every tile ahead
//   of use: each consumer's Q (two buffers, so the next item's arrives during this one) and a ring
//   of kFwdStages<D> K and V buffers;
//   warpgroups 1 and 2, the consumers (232 registers): 64 query rows each of a 128-row item, both
//   reading every K and V tile from the one ring, so K and V cross L2 once per 128 rows.
// Nothing ties the consumers together: each buffer has a "full" mbarrier (the copy's bytes) and
// the ring an "empty" one per buffer that every consumer warp arrives at when done with it, so each
// consumer runs at its own pace, and the producer refills a buffer once both are done.
// An item is (128 query rows, head, batch); they are numbered row tile slowest, the longest rows
// first (the causal tail balances), and block k takes items k, k + grid, ... Its tiles are the
// union of the consumers' key ranges, walked from the highest; a consumer waits for the tiles
// outside its own range (at the ends of the walk) too, then releases them at once: that keeps
// every consumer's count of each buffer's fills equal to the producer's, which the mbarriers'
// phase parity relies on (a consumer that released without waiting could run a fill ahead, and its
// two arrivals would complete the other consumer's phase).
// Inside a consumer the score product of the next tile runs while the softmax of this one works
// (its output rescale waits until the P V product that reads O is done), and O leaves through the
// item's own Q buffer by a bulk copy.
#include <cuda_bf16.h>

#include <cmath>

#include "kernels/attention/attention_fwd.cuh"
#include "kernels/attention/wgmma.cuh"

#if HYLO_WGMMA
namespace hylo::cuda::attn {
namespace {

// Per head dim: consumer warpgroups, and the registers of the launch (65536 / threads, rounded
// down to 8), of the producer (which gives back all but these) and of each consumer (which takes
// them, setmaxnreg); Q buffers per consumer (two: the next item's arrives during this one) and K/V
// ring depth. hd64: 4 consumers of 112 registers, 2 Q buffers, 8 stages (192 KB); hd128: 3 of
// 160, 1 Q buffer, 4 stages (176 KB; the consumers' staggered walks hold up to 3 ring buffers).
template <int D>
struct FwdShape {
  static constexpr int kConsumers = D == 64 ? 4 : 3, kThreads = (1 + kConsumers) * kWgThreads;
  static constexpr int kItemRows = kConsumers * kWgRows;
  static constexpr int kLaunchRegs = 65536 / kThreads / 8 * 8, kProducerRegs = 24;
  static constexpr int kConsumerRegs = (kThreads * kLaunchRegs - kWgThreads * kProducerRegs) / (kConsumers * kWgThreads) / 8 * 8;
  static constexpr int kQBufs = D == 128 ? 1 : 2, kStages = D == 128 ? 4 : 8;
};
static_assert(FwdShape<64>::kConsumerRegs == 112 && FwdShape<128>::kConsumerRegs == 160);
template <int D>
constexpr int kFwdStages = FwdShape<D>::kStages;
template <int D>
constexpr int kFwdQBufs = FwdShape<D>::kQBufs;

// Shared memory: Q buffers (consumer c, buffer j at 2c + j), then the K ring, the V ring, then the
// mbarriers (full / empty of each Q buffer; full of each K and V buffer, empty of each ring slot).
template <int D>
struct FwdSmem {
  static constexpr int kTile = kWgTileBytes<D>, kStages = kFwdStages<D>, kQ = kFwdQBufs<D> * FwdShape<D>::kConsumers;
  static constexpr int kTiles = kQ + 2 * kStages, kBars = 2 * kQ + 3 * kStages;
  static constexpr int kBytes = 1024 /* alignment slack */ + kTiles * kTile + kBars * 8;
  uint32_t base;

  __device__ uint32_t q(int c, int j) const { return base + (kFwdQBufs<D> * c + j) * kTile; }
  __device__ uint32_t k(int s) const { return base + (kQ + s) * kTile; }
  __device__ uint32_t v(int s) const { return base + (kQ + kStages + s) * kTile; }
  __device__ uint32_t bar(int i) const { return base + kTiles * kTile + 8 * i; }
  __device__ uint32_t q_full(int c, int j) const { return bar(kFwdQBufs<D> * c + j); }
  __device__ uint32_t q_empty(int c, int j) const { return bar(kQ + kFwdQBufs<D> * c + j); }
  __device__ uint32_t k_full(int s) const { return bar(2 * kQ + s); }
  __device__ uint32_t v_full(int s) const { return bar(2 * kQ + kStages + s); }
  __device__ uint32_t kv_empty(int s) const { return bar(2 * kQ + 2 * kStages + s); }
};
static_assert(FwdSmem<128>::kBytes <= 227 * 1024 && FwdSmem<64>::kBytes <= 227 * 1024);

// A position in the K/V ring: the buffer, and the parity of its fill (fills of one buffer alternate).
template <int kStages>
struct RingSlot {
  int stage = 0;
  uint32_t parity = 0;
  __device__ void advance() {
    if (++stage == kStages) stage = 0, parity ^= 1;
  }
};

// One item: query rows m0.. (two consumers' 64) of head h, batch b, and the key tiles any of its
// rows sees, n_first..n_last.
template <int D>
struct FwdItem {
  int m0, h, b, n_first, n_last;
  __device__ FwdItem(const FwdParams& p, int item, int row_tiles) {
    const int heads = p.Hq * p.B, tile = item / heads, hb = item - tile * heads;
    m0 = (row_tiles - 1 - tile) * FwdShape<D>::kItemRows;
    h = hb % p.Hq;
    b = hb / p.Hq;
    n_first = p.mask.lowest_key(m0) / kWgRows;
    n_last = min(m0 + FwdShape<D>::kItemRows - 1, p.T - 1) / kWgRows;
  }
};

template <int D>
__device__ __forceinline__ int fwd_row_tiles(const FwdParams& p) { return int(ceil_div(p.T, FwdShape<D>::kItemRows)); }

// Consumer c's 128 threads wait for each other (named barrier 1 + c; 0 is __syncthreads).
__device__ __forceinline__ void consumer_sync(int c) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(1 + c), "n"(kWgThreads) : "memory");
}

template <int D>
__device__ void produce(const FwdParams& p, const FwdSmem<D>& sm) {
  constexpr uint32_t kBytes = kTmaTileBytes<D>;
  const int row_tiles = fwd_row_tiles<D>(p), items = row_tiles * p.Hq * p.B;
  RingSlot<kFwdStages<D>> slot;
  for (int item = blockIdx.x, k = 0; item < items; item += gridDim.x, ++k) {
    const FwdItem<D> it(p, item, row_tiles);
    const int j = k % kFwdQBufs<D>;
    const uint32_t q_parity = (k / kFwdQBufs<D>) & 1;
    // Consumer 1's rows end at the diagonal tile, where the walk starts: its Q goes first.
    for (int c = FwdShape<D>::kConsumers - 1; c >= 0; --c) {
      mbarrier_wait(sm.q_empty(c, j), q_parity ^ 1);  // fresh barriers pass the first wait
      const int r0 = it.m0 + c * kWgRows;
      if (r0 < p.T) {
        mbarrier_arrive_expect_bytes(sm.q_full(c, j), kBytes);
        load_head_tile<D>(p.tm_q, sm.q(c, j), r0, it.h, it.b, sm.q_full(c, j));
      } else {
        mbarrier_arrive(sm.q_full(c, j));  // no rows: nothing to copy, the consumer only releases it
      }
    }
    const int hk = p.per_group(it.h);
    for (int n = it.n_last; n >= it.n_first; --n, slot.advance()) {
      mbarrier_wait(sm.kv_empty(slot.stage), slot.parity ^ 1);
      mbarrier_arrive_expect_bytes(sm.k_full(slot.stage), kBytes);
      load_head_tile<D>(p.tm_k, sm.k(slot.stage), n * kWgRows, hk, it.b, sm.k_full(slot.stage));
      mbarrier_arrive_expect_bytes(sm.v_full(slot.stage), kBytes);
      load_head_tile<D>(p.tm_v, sm.v(slot.stage), n * kWgRows, hk, it.b, sm.v_full(slot.stage));
    }
  }
}

template <int D>
__device__ void consume(const FwdParams& p, const FwdSmem<D>& sm, int c) {
  constexpr int BN = kWgRows;
  const int tid = threadIdx.x % kWgThreads, lane = tid & 31, warp = tid >> 5, g = lane >> 2;
  const int row_tiles = fwd_row_tiles<D>(p), items = row_tiles * p.Hq * p.B, T = p.T;
  RingSlot<kFwdStages<D>> slot;
  // This warp is done with the ring buffer of `s` (every consumer warp arrives: 8 per fill).
  auto release = [&](const RingSlot<kFwdStages<D>>& s) {
    __syncwarp();
    if (lane == 0) mbarrier_arrive(sm.kv_empty(s.stage));
  };
  // A tile outside this consumer's rows' reach: wait for its fill, then release it (see the top).
  auto pass = [&] {
    mbarrier_wait(sm.k_full(slot.stage), slot.parity);
    release(slot);
    slot.advance();
  };

  for (int item = blockIdx.x, k = 0; item < items; item += gridDim.x, ++k) {
    const FwdItem<D> it(p, item, row_tiles);
    const int j = k % kFwdQBufs<D>, r0 = it.m0 + c * kWgRows;
    const uint32_t sQ = sm.q(c, j);
    // This consumer's key tiles lo..hi (none when its rows start past T).
    int lo = it.n_first, hi = it.n_first - 1;
    if (r0 < T) {
      lo = p.mask.lowest_key(r0) / BN;
      hi = min(r0 + kWgRows - 1, T - 1) / BN;
    }
    mbarrier_wait(sm.q_full(c, j), (k / kFwdQBufs<D>) & 1);
    for (int n = it.n_last; n > hi; --n) pass();

    if (hi >= lo) {
      const int w0 = r0 + warp * 16, w1_lo = p.mask.lowest_key(w0 + 15);
      int row_lo[2];
#pragma unroll
      for (int half = 0; half < 2; ++half) row_lo[half] = p.mask.lowest_key(w0 + g + 8 * half);
      float o_acc[D / 8][4];  // C tile j = output columns 8j..8j+7
      float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f}, correction[2];
      zero_acc(o_acc);
      float s_acc[BN / 8][4];
      uint32_t p_frag[BN / 16][4];

      // S = Q K^T of the tile in `slot` (raw scores; the first k-step overwrites s_acc), one group.
      auto issue_scores = [&] {
        mbarrier_wait(sm.k_full(slot.stage), slot.parity);
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < D / 16; ++ks)
          wgmma_ss(s_acc, kmajor_desc<kWgRows>(sQ, ks), kmajor_desc<BN>(sm.k(slot.stage), ks), ks > 0);
        wgmma_commit();
      };
      // O += P V of the tile in `pv` (P in p_frag), one group.
      auto issue_pv = [&](const RingSlot<kFwdStages<D>>& pv) {
        mbarrier_wait(sm.v_full(pv.stage), pv.parity);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk)
#pragma unroll
          for (int h = 0; h < D / 64; ++h)
            wgmma_rs_bn(acc_half(o_acc, h), p_frag[kk], nmajor_desc<BN>(sm.v(pv.stage), kk, h));
        wgmma_commit();
      };
      // The scores of tile n become probabilities (the rescale of O is left to the caller).
      auto softmax = [&](int n) {
        const int n0 = n * BN;
        if (!(n0 + BN - 1 <= w0 && n0 >= w1_lo)) mask_scores(s_acc, w0, row_lo, n0, lane);
        softmax_scores(s_acc, row_max, row_sum, correction, p.scale_log2);
      };
      auto to_p = [&] {
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) c_to_a(p_frag[kk], s_acc, kk);
      };

      issue_scores();
      wgmma_wait<0>();
      register_fence(s_acc);
      softmax(hi);
      to_p();
      RingSlot<kFwdStages<D>> pv = slot;  // the tile whose P V is next
      slot.advance();
      for (int n = hi - 1; n >= lo; --n) {
        issue_scores();
        issue_pv(pv);
        wgmma_wait<1>();  // the scores are in; P V may still run
        register_fence(s_acc);
        softmax(n);
        wgmma_wait<0>();
        register_fence(o_acc);
        release(pv);
        rescale_rows(o_acc, correction);
        to_p();
        pv = slot;
        slot.advance();
      }
      issue_pv(pv);
      wgmma_wait<0>();
      register_fence(o_acc);
      release(pv);

      // Every warp's products are done with Q: its buffer carries O out.
      float inv[2];
      finish_rows(row_max, row_sum, p.scale, p.lse + (size_t(it.b) * p.Hq + it.h) * T, w0, T, lane, inv);
      consumer_sync(c);
      stage_rows<D>(sQ, o_acc, inv[0], inv[1], warp, lane);
      fence_proxy_async();
      consumer_sync(c);
      if (tid == 0) store_head_tile<D>(p.tm_out, sQ, r0, it.h, it.b);  // returns once the tile is read
    }
    for (int n = lo - 1; n >= it.n_first; --n) pass();
    if (tid == 0) mbarrier_arrive(sm.q_empty(c, j));
  }
}

template <int D>
__global__ void __launch_bounds__(FwdShape<D>::kThreads, 1) attention_fwd_wgmma_kernel(const __grid_constant__ FwdParams p) {
  extern __shared__ unsigned char smem_raw[];
  const FwdSmem<D> sm{smem_u32(align_smem_1024(smem_raw))};
  if (threadIdx.x == 0) {
    for (int c = 0; c < FwdShape<D>::kConsumers; ++c)
      for (int j = 0; j < kFwdQBufs<D>; ++j) {
        mbarrier_init(sm.q_full(c, j), 1);
        mbarrier_init(sm.q_empty(c, j), 1);
      }
    for (int s = 0; s < kFwdStages<D>; ++s) {
      mbarrier_init(sm.k_full(s), 1);
      mbarrier_init(sm.v_full(s), 1);
      mbarrier_init(sm.kv_empty(s), FwdShape<D>::kConsumers * kWgThreads / 32);
    }
    mbarrier_init_fence();
  }
  __syncthreads();
  const int wg = threadIdx.x / kWgThreads;
  if (wg == 0) {
    setmaxnreg_dec<FwdShape<D>::kProducerRegs>();
    if (threadIdx.x == 0) produce<D>(p, sm);
  } else {
    setmaxnreg_inc<FwdShape<D>::kConsumerRegs>();
    consume<D>(p, sm, wg - 1);
  }
}

// setmaxnreg.inc waits until the block's pool has the registers, so a launch below
// kFwdLaunchRegs per thread would hang the consumers: refuse it (once per head dim).
template <int D>
void check_launch_regs() {
  static const bool checked = [] {
    cudaFuncAttributes attr{};
    HYLO_CUDA_CHECK(cudaFuncGetAttributes(&attr, attention_fwd_wgmma_kernel<D>));
    HYLO_CUDA_REQUIRE(attr.numRegs == FwdShape<D>::kLaunchRegs,
                      "attention_fwd_wgmma_kernel<%d>: built with %d registers per thread, setmaxnreg needs %d", D,
                      attr.numRegs, FwdShape<D>::kLaunchRegs);
    return true;
  }();
  (void)checked;
}

}  // namespace

template <int D>
void launch_forward(const FwdParams& p, cudaStream_t stream) {
  check_launch_regs<D>();
  const int64_t items = ceil_div(p.T, FwdShape<D>::kItemRows) * p.Hq * p.B;
  const int blocks = int(std::min<int64_t>(items, sm_count()));
  launch_kernel<attention_fwd_wgmma_kernel<D>>(p, dim3(blocks), FwdShape<D>::kThreads, FwdSmem<D>::kBytes, stream);
  HYLO_CUDA_LAUNCH_CHECK("attention_fwd_wgmma_kernel");
}
template void launch_forward<64>(const FwdParams&, cudaStream_t);
template void launch_forward<128>(const FwdParams&, cudaStream_t);

}  // namespace hylo::cuda::attn
#endif  // HYLO_WGMMA
