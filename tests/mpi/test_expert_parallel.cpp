// Expert parallelism on CPU (SPEC §6), in the two suites of test_data_parallel.cpp: "ranks" under
// `mpirun -np 2` (the exchange and split collectives; an expert-parallel step's gradients against
// one process holding every expert), "launch" as one process starting `mpirun -np 2 hylo train`
// with train.expert_parallel=2 (against data parallelism, resume, checkpoints that load on one
// process, bad layouts).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "../cpu/small_model.h"
#include "../cpu/training_workspace.h"
#include "mpi_test_util.h"
#include "core/file.h"
#include "core/rng.h"
#include "parallel/communicator.h"
#include "nn/transformer.h"
#include "ops/ops.h"
#include "parallel/expert_dispatch.h"
#include "parallel/expert_parallel.h"
#include "nn/flops.h"
#include "parallel/gradient_sync.h"
#include "parallel/layout.h"

using namespace hylo;

namespace {

ModelConfig moe_model() {
  ModelConfig c = test::small_hybrid(29);
  c.moe.experts = 4;
  c.moe.top_k = 2;
  c.moe.shared_experts = 1;
  return c;
}

// Rank q's share of a step of two micro-batches per rank, each loss scaled by 1 / (all of them).
void rank_step(Transformer& model, int q, GradientSync* sync) {
  for (int m = 0; m < 2; ++m) {
    auto [inputs, targets] = test::rank_micro_batch(q, m, 91);
    if (sync && m == 1) sync->arm();
    scale(model.loss(inputs, targets, 29), 1.0 / 4).backward();
  }
  if (sync) sync->finish();
}

// max |a - b| / max |b|: the experts' products group rows differently on one process, so the
// sums agree to rounding, not to the bit.
double relative_difference(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to_vector<float>(), y = b.to_vector<float>();
  REQUIRE(x.size() == y.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    diff = std::max(diff, double(std::fabs(x[i] - y[i])));
    scale = std::max(scale, double(std::fabs(y[i])));
  }
  REQUIRE(scale > 0);
  return diff / scale;
}

}  // namespace

TEST_SUITE("ranks") {
  TEST_CASE("the MPI exchange sends each rank its rows, host parts likewise; split groups by color") {
    auto comm = dist::connect(Device::cpu);
    REQUIRE(comm->size() == 2);
    const int r = comm->rank();
    // Rank r sends r + 1 rows to rank 0 and 2 - r rows to rank 1; row values name sender and row.
    const std::vector<int64_t> send = {r + 1, 2 - r};
    std::vector<float> rows;
    for (int i = 0; i < 3; ++i) rows.insert(rows.end(), {float(10 * r + i), float(-10 * r - i)});
    const std::vector<int64_t> recv = {r == 0 ? 1 : 2, r == 0 ? 2 : 1};  // what ranks 0, 1 send to r
    const Tensor got = comm->all_to_all(Tensor::from_vector(rows, {3, 2}), send, recv);
    const std::vector<float> expect = r == 0 ? std::vector<float>{0, 0, 10, -10, 11, -11}
                                             : std::vector<float>{1, -1, 2, -2, 12, -12};
    CHECK(got.to_vector<float>() == expect);

    const std::vector<int64_t> parts = {100 * r, 100 * r + 1, 100 * r + 10, 100 * r + 11};
    CHECK(comm->all_to_all(parts) ==
          (r == 0 ? std::vector<int64_t>{0, 1, 100, 101} : std::vector<int64_t>{10, 11, 110, 111}));

    auto alone = comm->split(r, 0), together = comm->split(0, -r);  // key -r: rank 1 first
    CHECK(alone->size() == 1);
    CHECK(together->size() == 2);
    CHECK(together->rank() == 1 - r);
  }

  TEST_CASE("expert-parallel gradients are one process's over both ranks' batches, also when a rank gets no rows") {
    auto comm = dist::connect(Device::cpu);
    REQUIRE(comm->size() == 2);
    const ParallelLayout layout(*comm, 2, "test");  // one expert group of both ranks, replicas of one
    REQUIRE(layout.ep() == 2);
    CHECK(layout.expert_group()->rank() == comm->rank());
    CHECK(layout.expert_replicas()->size() == 1);
    CHECK(layout.str() == "dp=2,ep=2");
    // Router biases that send every token to experts 0 and 1 (rank 0's): rank 1 receives nothing.
    for (const std::vector<float>& bias : {std::vector<float>(4, 0.f), std::vector<float>{10, 10, -10, -10}}) {
      const bool starved = bias[0] != 0;
      CAPTURE(starved);
      Transformer ep(moe_model(), 5), whole(moe_model(), 5);  // whole: every expert, both ranks' batches
      for (Transformer* model : {&ep, &whole})
        for (const NamedBufferRef& b : model->buffers()) std::copy(bias.begin(), bias.end(), b.value.data<float>());
      const std::unique_ptr<ExpertDispatch> dispatch = parallelize_experts(ep, layout);
      REQUIRE(dispatch);
      CHECK(ep.expert_parallel());
      GradientSync sync(ep.parameters(), layout, gradient_buckets(ep.parameters(), 4096));
      rank_step(ep, comm->rank(), &sync);
      rank_step(whole, 0, nullptr);
      rank_step(whole, 1, nullptr);
      const ParamList &p = ep.parameters(), &all = whole.parameters();
      REQUIRE(p.size() == all.size());
      int shards = 0;
      for (size_t i = 0; i < p.size(); ++i) {
        CAPTURE(p[i].name);
        Tensor expected = all[i].var.has_grad() ? all[i].var.grad() : Tensor::zeros(all[i].var.shape(), DType::f32);
        if (p[i].expert_shard) {
          ++shards;
          CHECK(p[i].var.shape()[0] == 2);  // 4 experts over 2 ranks
          expected = expert_rows(expected, comm->rank(), 2);
        }
        if (starved && p[i].expert_shard && comm->rank() == 1)
          CHECK(p[i].var.grad().to_vector<float>() == expected.to_vector<float>());  // both zero
        else
          CHECK(relative_difference(p[i].var.grad(), expected) < 1e-5);
      }
      CHECK(shards == 4);  // w_in and w_out of both MoE layers
      int64_t stored = 0;  // what `hylo params` reports per rank
      for (const Parameter& q : p) stored += q.var.value().numel();
      CHECK(stored == parameters_per_rank(moe_model(), 2));
    }
  }
}

TEST_SUITE("launch") {
  namespace fs = std::filesystem;
  const std::string kMpirun = test::mpirun(2);
  const std::string kMoe = "--set model.moe.experts=4 --set model.moe.top_k=2 --set train.steps=12 "
                           "--set train.micro_batch_size=1 --set train.eval_every=6 ";

  using test::succeeds;

  // The loss of every metrics row with one ("step": N, ..., "loss": L).
  std::vector<double> losses(const test::TrainingWorkspace& ws, const std::string& run) {
    std::vector<double> out;
    for (const std::string& row : ws.loss_rows(run)) out.push_back(std::stod(row.substr(row.rfind(':') + 1)));
    return out;
  }

  TEST_CASE("mpirun -np 2 hylo train with experts over 2 ranks follows data parallelism, resumes bit-exactly") {
    test::TrainingWorkspace ws("ep");
    succeeds(kMpirun + ws.train("dp", kMoe));
    const auto ep = succeeds(kMpirun + ws.train("ep", kMoe + "--set train.expert_parallel=2"));
    CHECK(ep.output.find("experts over groups of 2") != std::string::npos);
    const std::vector<double> dp_loss = losses(ws, "dp"), ep_loss = losses(ws, "ep");
    REQUIRE(dp_loss.size() == 12);
    REQUIRE(ep_loss.size() == 12);
    for (size_t i = 0; i < dp_loss.size(); ++i) CHECK(ep_loss[i] == doctest::Approx(dp_loss[i]).epsilon(1e-4));

    // Stopped and resumed on the same layout: the same bits.
    const std::string split = kMoe + "--set train.expert_parallel=2 --set train.checkpoint_every=6 ";
    succeeds(kMpirun + ws.train("split", split + "--stop-at 6"));
    succeeds(kMpirun + ws.train("split", split + "--resume auto"));
    CHECK(ws.loss_rows("split") == ws.loss_rows("ep"));

    // The checkpoint holds every expert: one process evaluates it as the two ranks did.
    const std::string json = (ws.dir / "eval.json").string();
    succeeds(ws.hylo + " eval " + (ws.dir / "ep").string() + " --json " + json);
    const double alone = nlohmann::json::parse(read_file(json).value())["val"]["loss"].get<double>();
    const double ranks = test::last_metric(ws.dir / "ep", "val_loss");
    CHECK(alone == doctest::Approx(ranks).epsilon(1e-5));
    // ... and trains on from it without expert parallelism.
    fs::create_directories(ws.dir / "single");
    fs::copy(ws.dir / "split/checkpoints", ws.dir / "single/checkpoints", fs::copy_options::recursive);
    succeeds(ws.train("single", kMoe + "--resume " + (ws.dir / "single/checkpoints/step_6.h5").string()));
  }

  TEST_CASE("mpirun -np 4 hylo train with expert groups of 2: the replicas of each expert sum their gradients, also under ZeRO-1") {
    // Ranks 0, 1 and ranks 2, 3 each share out the experts; ranks 0, 2 (and 1, 3) hold the same
    // ones. Without the replicas' sum they would drift apart and the checkpoint's check would stop
    // the run.
    test::TrainingWorkspace ws("ep4");
    const std::string mpirun4 = test::mpirun(4);
    succeeds(mpirun4 + ws.train("dp", kMoe));
    succeeds(mpirun4 + ws.train("ep", kMoe + "--set train.expert_parallel=2 --set train.checkpoint_every=6"));
    const std::vector<double> dp_loss = losses(ws, "dp"), ep_loss = losses(ws, "ep");
    REQUIRE(dp_loss.size() == 12);
    REQUIRE(ep_loss.size() == 12);
    for (size_t i = 0; i < dp_loss.size(); ++i) CHECK(ep_loss[i] == doctest::Approx(dp_loss[i]).epsilon(1e-4));
    CHECK(fs::exists(ws.dir / "ep/checkpoints/step_12.h5"));

    // ZeRO-1 on top: replicated parameters owned among all 4 ranks, expert shards among the 2 that
    // hold them. No clipping, as in the ZeRO-1 test of test_data_parallel.cpp: then the same bits.
    const std::string plain = kMoe + "--set train.expert_parallel=2 --set train.grad_clip=0 ";
    succeeds(mpirun4 + ws.train("ep_plain", plain));
    succeeds(mpirun4 + ws.train("ep_zero", plain + "--set train.zero1=true --set train.checkpoint_every=6 --stop-at 6"));
    succeeds(mpirun4 + ws.train("ep_zero", plain + "--set train.zero1=true --resume auto"));
    CHECK(ws.loss_rows("ep_zero") == ws.loss_rows("ep_plain"));
    // Its checkpoint holds every expert and its moments: it resumes with 4 experts over 4 ranks, and
    // without ZeRO-1 or expert parallelism.
    const std::string step6 = (ws.dir / "ep_zero/checkpoints/step_6.h5").string();
    succeeds(mpirun4 + ws.train("ep4", plain + "--set train.expert_parallel=4 --resume " + step6));
    fs::create_directories(ws.dir / "single");
    fs::copy(ws.dir / "ep_zero/checkpoints", ws.dir / "single/checkpoints", fs::copy_options::recursive);
    succeeds(ws.train("single", kMoe + "--set train.grad_clip=0 --resume " +
                                    (ws.dir / "single/checkpoints/step_6.h5").string()));
  }

  TEST_CASE("expert parallelism refuses layouts it cannot build, in one line, before writing the run") {
    test::TrainingWorkspace ws("ep_bad");
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"--set train.expert_parallel=2", "train.expert_parallel=2 needs an MoE model"},
        {kMoe + "--set model.moe.experts=3 --set train.expert_parallel=2",
         "model.moe.experts=3 is not divisible by train.expert_parallel=2"},
        {kMoe + "--set train.expert_parallel=4", "train.expert_parallel=4 does not divide the 2 ranks"},
    };
    for (const auto& [flags, message] : cases) {
      CAPTURE(flags);
      const auto r = test::run_command(kMpirun + ws.train("run", flags));
      CHECK(r.exit_code != 0);
      CHECK(r.output.find(message) != std::string::npos);
      CHECK(!fs::exists(ws.dir / "run"));
    }
  }
}
