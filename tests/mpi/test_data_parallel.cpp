// Data parallelism on CPU (SPEC §6). Two suites: "ranks" runs under `mpirun -np 2` (the
// communicator's collectives, and the gradient sum against one process's arithmetic); "launch"
// runs as one process and starts `mpirun -np 2 hylo train` itself (resume, world-size changes,
// errors). ctest runs each suite once (tests/CMakeLists.txt).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "../cpu/small_model.h"
#include "../cpu/training_workspace.h"
#include "mpi_test_util.h"
#include "core/file.h"
#include "core/rng.h"
#include "parallel/communicator.h"
#include "nn/transformer.h"
#include "ops/ops.h"
#include "parallel/gradient_sync.h"
#include "parallel/layout.h"
#include "parallel/zero.h"

using namespace hylo;

namespace {

// Rank q's values for a test: the same on every rank, so each can compute the expected sum.
std::vector<float> values_of(int q, int n, uint64_t salt) {
  Rng rng{salt, uint64_t(q), 0};
  std::vector<float> v(size_t(n), 0.f);
  for (float& x : v) x = float(rng.uniform()) - 0.5f;
  return v;
}

ModelConfig small_model(bool moe) {
  ModelConfig c = test::small_hybrid(29);
  c.tie_embeddings = true;  // one parameter read twice: its gradient is final only after both
  if (moe) {
    c.moe.experts = 4;
    c.moe.top_k = 2;
  }
  return c;
}

// Rank q's gradient of a step of two micro-batches, each scaled by 1 / (all micro-batches).
void accumulate_rank_step(Transformer& model, int q, int world, GradientSync* sync) {
  for (int m = 0; m < 2; ++m) {
    auto [inputs, targets] = test::rank_micro_batch(q, m, 77);
    if (sync && m == 1) sync->arm();
    scale(model.loss(inputs, targets, 29), 1.0 / (2 * world)).backward();
  }
  if (sync) sync->finish();
}

}  // namespace

TEST_SUITE("ranks") {
  TEST_CASE("the MPI communicator's sums and gathers give every rank the expected bits") {
    auto comm = dist::connect(Device::cpu);
    REQUIRE_MESSAGE(comm->size() == 2, "run under mpirun -np 2");
    const int rank = comm->rank();
    Tensor a = Tensor::from_vector(values_of(rank, 1000, 1), {10, 100});
    Tensor b = Tensor::from_vector(values_of(rank, 7, 2), {7});
    Tensor c = Tensor::from_vector(values_of(rank, 33, 3), {3, 11});
    comm->start_sum({a});
    comm->start_sum({b, c});  // a second message, of two tensors
    // A reduce-scatter in place: rank q's elements [3q, 3q + 3) receive their sums.
    Tensor d = Tensor::from_vector(values_of(rank, 6, 4), {6});
    comm->start_reduce_scatter(d);
    comm->wait();
    for (auto [t, n, salt] : {std::tuple{a, 1000, 1}, std::tuple{b, 7, 2}, std::tuple{c, 33, 3}}) {
      const std::vector<float> v0 = values_of(0, n, salt), v1 = values_of(1, n, salt), got = t.to_vector<float>();
      for (size_t i = 0; i < v0.size(); ++i) REQUIRE(got[i] == v0[i] + v1[i]);
    }
    const std::vector<float> d0 = values_of(0, 6, 4), d1 = values_of(1, 6, 4), got = d.to_vector<float>();
    for (size_t i = 3 * size_t(rank); i < 3 * size_t(rank) + 3; ++i) CHECK(got[i] == d0[i] + d1[i]);
    // An all-gather in place: each rank fills in its part, every rank ends with both.
    Tensor e = Tensor::zeros({8}, DType::f32);
    e.slice(0, 4 * rank, 4 * rank + 4).copy_from(Tensor::from_vector(values_of(rank, 4, 5), {4}));
    comm->all_gather(e);
    std::vector<float> both = values_of(0, 4, 5);
    for (float x : values_of(1, 4, 5)) both.push_back(x);
    CHECK(e.to_vector<float>() == both);

    double host[2] = {0.25 * (rank + 1), -1.0};
    comm->sum(std::span<double>(host, 2));
    CHECK(host[0] == 0.75);
    CHECK(host[1] == -2.0);
    int64_t count = rank + 5;
    comm->sum(std::span<int64_t>(&count, 1));
    CHECK(count == 11);
    const uint64_t mine[2] = {uint64_t(rank), uint64_t(10 + rank)};
    CHECK(comm->all_gather(mine) == std::vector<uint64_t>{0, 10, 1, 11});
  }

  TEST_CASE("data-parallel gradients are the sum of each rank's step, bit for bit (dense and MoE)") {
    auto comm = dist::connect(Device::cpu);
    REQUIRE(comm->size() == 2);
    for (bool moe : {false, true}) {
      CAPTURE(moe);
      // This rank's model, synced in buckets of 4 KB (several per model), recomputing its blocks
      // (their parameters become final inside a nested backward).
      Transformer dp(small_model(moe), 5);
      dp.set_recompute(true);
      const ParallelLayout layout(*comm, 1, "test");
      GradientSync sync(dp.parameters(), layout, gradient_buckets(dp.parameters(), 4096));
      accumulate_rank_step(dp, comm->rank(), 2, &sync);
      // The same arithmetic in this process: each rank's step on its own copy, then their sum.
      Transformer rank0(small_model(moe), 5), rank1(small_model(moe), 5);
      accumulate_rank_step(rank0, 0, 2, nullptr);
      accumulate_rank_step(rank1, 1, 2, nullptr);
      const ParamList& p = dp.parameters();
      REQUIRE(p.size() == rank0.parameters().size());
      for (size_t i = 0; i < p.size(); ++i) {
        CAPTURE(p[i].name);
        const std::vector<float> got = p[i].var.grad().to_vector<float>();
        const std::vector<float> g0 = rank0.parameters()[i].var.grad().to_vector<float>();
        const std::vector<float> g1 = rank1.parameters()[i].var.grad().to_vector<float>();
        bool same = true, nonzero = false;
        for (size_t j = 0; j < got.size(); ++j) {
          same = same && got[j] == g0[j] + g1[j];
          nonzero = nonzero || got[j] != 0.f;
        }
        CHECK(same);
        CHECK(nonzero);
      }
      // The router's load tallies (what the bias update reads), summed as the trainer sums them.
      std::vector<std::span<int64_t>> tallies = dp.router_load_tallies();
      CHECK(tallies.size() == (moe ? 2u : 0u));
      for (size_t layer = 0; layer < tallies.size(); ++layer) {
        comm->sum(tallies[layer]);
        const auto t0 = rank0.router_load_tallies()[layer], t1 = rank1.router_load_tallies()[layer];
        for (size_t e = 0; e < tallies[layer].size(); ++e) CHECK(tallies[layer][e] == t0[e] + t1[e]);
      }
    }
  }

  TEST_CASE("ZeRO-1: each rank receives the sums of the elements it owns, and the two ranks own them all") {
    auto comm = dist::connect(Device::cpu);
    REQUIRE(comm->size() == 2);
    Transformer dp(small_model(true), 5);
    const std::vector<std::vector<size_t>> buckets = gradient_buckets(dp.parameters(), 4096);
    const ParallelLayout layout(*comm, 1, "test");
    ZeroLayout zero(dp.parameters(), buckets, layout);
    GradientSync sync(dp.parameters(), layout, buckets, &zero);
    zero.zero_grads(dp.parameters());
    accumulate_rank_step(dp, comm->rank(), 2, &sync);
    Transformer rank0(small_model(true), 5), rank1(small_model(true), 5);
    accumulate_rank_step(rank0, 0, 2, nullptr);
    accumulate_rank_step(rank1, 1, 2, nullptr);
    const ParamList& p = dp.parameters();
    int64_t owned = 0, total = 0;
    for (size_t i = 0; i < p.size(); ++i) {
      CAPTURE(p[i].name);
      const ElementRange r = zero.owned()[i];
      const std::vector<float> got = element_range(p[i].var.grad(), r).to_vector<float>();
      const std::vector<float> g0 = element_range(rank0.parameters()[i].var.grad(), r).to_vector<float>();
      const std::vector<float> g1 = element_range(rank1.parameters()[i].var.grad(), r).to_vector<float>();
      bool same = true;
      for (size_t j = 0; j < got.size(); ++j) same = same && got[j] == g0[j] + g1[j];
      CHECK(same);
      owned += r.size();
      total += p[i].var.value().numel();
    }
    comm->sum(std::span<int64_t>(&owned, 1));
    CHECK(owned == total);  // summed over the ranks: each element once
  }
}

TEST_SUITE("launch") {
  namespace fs = std::filesystem;
  const std::string kMpirun = test::mpirun(2);

  using test::succeeds;

  // Runs `a` and `b` (12 steps each) have the same loss at every step.
  void check_same_losses(const test::TrainingWorkspace& ws, const std::string& a, const std::string& b) {
    const auto rows_a = ws.loss_rows(a), rows_b = ws.loss_rows(b);
    REQUIRE(rows_a.size() == 12);
    REQUIRE(rows_b.size() == 12);
    for (size_t i = 0; i < rows_a.size(); ++i) CHECK(rows_a[i] == rows_b[i]);
  }

  TEST_CASE("mpirun -np 2 hylo train: a 2-rank checkpoint resumes bit-exactly, and on 1 rank") {
    test::TrainingWorkspace ws("dp");
    const std::string steps = "--set train.steps=12 --set train.micro_batch_size=1 --set train.eval_every=6 ";
    CHECK(succeeds(kMpirun + ws.train("straight", steps)).output.find("2 data-parallel ranks") != std::string::npos);
    succeeds(kMpirun + ws.train("split", steps + "--set train.checkpoint_every=6 --stop-at 6"));
    succeeds(kMpirun + ws.train("split", steps + "--resume auto"));
    check_same_losses(ws, "straight", "split");

    // The ranks share the evaluation batches: the final val loss is the one process's `hylo eval`.
    const std::string json = (ws.dir / "eval.json").string();
    succeeds(ws.hylo + " eval " + (ws.dir / "straight").string() + " --json " + json);
    const double alone = nlohmann::json::parse(read_file(json).value())["val"]["loss"].get<double>();
    const double ranks = test::last_metric(ws.dir / "straight", "val_loss");
    CHECK(alone == doctest::Approx(ranks).epsilon(1e-12));

    // The same checkpoint on one process: weights and moments carry over, the data order cannot.
    fs::create_directories(ws.dir / "single");
    fs::copy(ws.dir / "split/checkpoints", ws.dir / "single/checkpoints", fs::copy_options::recursive);
    const std::string checkpoint = (ws.dir / "single/checkpoints/step_6.h5").string();
    const auto single = succeeds(ws.train("single", steps + "--resume " + checkpoint));
    CHECK(single.output.find("saved by 2 data-parallel ranks, resumed on 1") != std::string::npos);
  }

  TEST_CASE("mpirun -np 2 hylo train with ZeRO-1 follows the unsharded run; its checkpoint resumes without ZeRO-1") {
    test::TrainingWorkspace ws("zero");
    // No clipping: the two runs add the gradient's squares in different orders, and the clip scale
    // would carry that last-bit difference into the weights.
    const std::string steps = "--set train.steps=12 --set train.micro_batch_size=1 --set train.grad_clip=0 ";
    succeeds(kMpirun + ws.train("plain", steps));
    const auto zero = succeeds(
        kMpirun + ws.train("zero", steps + "--set train.zero1=true --set train.checkpoint_every=6 --stop-at 6"));
    CHECK(zero.output.find("2 data-parallel ranks with ZeRO-1") != std::string::npos);
    succeeds(kMpirun + ws.train("zero", steps + "--resume auto"));
    check_same_losses(ws, "plain", "zero");
  }

  TEST_CASE("mpirun -np 2 hylo train in fp8: the ranks keep one amax history, and a 2-rank checkpoint resumes bit-exactly") {
    // Each rank's casts see only its own micro-batches; the histories take the maximum over the
    // ranks at every step, so the scales, and with them the weights, stay replicated (the
    // checkpoint's replica check compares them at steps 6 and 12).
    test::TrainingWorkspace ws("dp_fp8");
    const std::string steps = "--set train.steps=12 --set train.micro_batch_size=1 --set train.precision=fp8 ";
    succeeds(kMpirun + ws.train("straight", steps + "--set train.checkpoint_every=6"));
    succeeds(kMpirun + ws.train("split", steps + "--set train.checkpoint_every=6 --stop-at 6"));
    succeeds(kMpirun + ws.train("split", steps + "--resume auto"));
    check_same_losses(ws, "straight", "split");
    CHECK(fs::exists(ws.dir / "straight/checkpoints/step_12.h5"));
  }

  TEST_CASE("mpirun -np 2 hylo train on an MoE model: the router biases follow every rank's load") {
    // Each rank's bias update sees the load summed over the ranks, so the biases stay replicated;
    // the checkpoint's replica check (weights and buffers) would fail otherwise.
    test::TrainingWorkspace ws("dp_moe");
    succeeds(kMpirun + ws.train("moe", "--set train.steps=6 --set train.checkpoint_every=3 --set model.moe.experts=4 "
                                       "--set model.moe.bias_update_rate=0.01"));
    CHECK(fs::exists(ws.dir / "moe/checkpoints/step_6.h5"));
  }

  TEST_CASE("mpirun -np 2 hylo train: a batch the ranks cannot share fails on every rank in one line") {
    test::TrainingWorkspace ws("dp_bad");
    auto r = test::run_command(kMpirun + ws.train("run", "--set train.batch_size=6 --set train.micro_batch_size=2"));
    CHECK(r.exit_code != 0);
    CHECK(r.output.find("train.batch_size=6 is not divisible by train.micro_batch_size=2 x 2 data-parallel ranks") !=
          std::string::npos);
    // Without a micro-batch size each rank takes its share of the batch in one.
    auto odd = test::run_command(kMpirun + ws.train("run", "--set train.batch_size=5"));
    CHECK(odd.exit_code != 0);
    CHECK(odd.output.find("train.batch_size=5 is not divisible by 2 data-parallel ranks") != std::string::npos);
    CHECK(!fs::exists(ws.dir / "run"));
  }

  TEST_CASE("a sweep with ranks: 2 runs each point under mpirun -np 2 (--local) or asks for 2 tasks (--slurm)") {
    test::TrainingWorkspace ws("sweep_ranks");
    const fs::path file = ws.dir / "sweep.yaml", out = ws.dir / "sweeps";
    std::ofstream(file) << "name: dp\nbase: " << (ws.dir / "tiny.yaml").string()
                        << "\nset: {train.steps: 6, train.eval_every: 0}\ngrid: {train.lr: [1.0e-3, 3.0e-3]}\nranks: 2\n";
    // mpirun comes from PATH, as a user's would; Open MPI's root and slot settings from the environment.
    const std::string env = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 ";
    succeeds(env + ws.hylo + " sweep " + file.string() + " --local --out " + out.string());
    int points = 0;
    for (const auto& run : fs::directory_iterator(out / "dp")) {
      if (!run.is_directory()) continue;
      ++points;
      CAPTURE(run.path().string());
      CHECK(read_file((run.path() / "log.txt").string()).value_or("").find("2 data-parallel ranks") != std::string::npos);
      CHECK(ws.loss_rows(fs::relative(run.path(), ws.dir).string()).size() == 6);
    }
    CHECK(points == 2);
    succeeds(ws.hylo + " sweep " + file.string() + " --slurm --out " + (ws.dir / "slurm").string());
    const std::string sbatch = read_file((ws.dir / "slurm/dp/submit.sbatch").string()).value_or("");
    CHECK(sbatch.find("#SBATCH --ntasks=2\n#SBATCH --cpus-per-task=1\n") != std::string::npos);
    CHECK(sbatch.find("gpus") == std::string::npos);  // the config trains on the CPU
    CHECK(sbatch.find("srun --mpi=pmix --ntasks=2 ") != std::string::npos);

    std::ofstream(file) << "base: " << (ws.dir / "tiny.yaml").string() << "\ngrid: {train.lr: [1.0e-3]}\nranks: 3\n";
    const auto odd = test::run_command(ws.hylo + " sweep " + file.string() + " --dry-run");
    CHECK(odd.exit_code != 0);
    CHECK(odd.output.find("train.batch_size=4 is not divisible by ranks=3") != std::string::npos);
  }
}
