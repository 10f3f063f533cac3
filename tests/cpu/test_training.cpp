// Training end to end on a small generated shard: overfitting, bit-exact resume, surviving a
// crash during checkpointing, and one-line errors for bad input (SPEC §8).
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "overfit.h"
#include "run_command.h"
#include "small_model.h"
#include "training_workspace.h"
#include "core/file.h"
#include "core/revision.h"
#include "data/shard.h"
#include "nn/transformer.h"
#include "ops/ops.h"
#include "checkpoint/checkpoint.h"
#include "optim/schedule.h"

using namespace hylo;
namespace fs = std::filesystem;

namespace {

using test::CommandResult;
CommandResult run(const std::string& command) { return test::run_command(command); }

using Workspace = test::TrainingWorkspace;

}  // namespace

TEST_CASE("a tiny hybrid overfits one batch") {
  ModelConfig c = test::small_hybrid(64);
  c.ffn_hidden = 64;
  Transformer model(c, 3);
  const test::OverfitResult r = test::overfit_one_batch(model, 64);
  MESSAGE("loss " << r.loss << " after " << r.steps << " steps");
  CHECK(r.loss < 0.1);
}

TEST_CASE("resume is bit-exact: 40 steps straight equal 20 + resume + 20") {
  Workspace ws("resume");
  REQUIRE(run(ws.train("straight")).exit_code == 0);
  const auto first = run(ws.train("split", "--set train.checkpoint_every=20 --stop-at 20"));
  REQUIRE_MESSAGE(first.exit_code == 0, first.output);
  REQUIRE(fs::exists(ws.dir / "split/checkpoints/step_20.h5"));
  // The checkpoint names the source revision it was trained from (SPEC §7).
  const auto meta = load_checkpoint((ws.dir / "split/checkpoints/step_20.h5").string(), /*moments=*/false).meta;
  const std::pair<std::string, std::string> revision{"git_revision", git_revision()};
  CHECK(std::find(meta.begin(), meta.end(), revision) != meta.end());
  if (fs::exists(fs::path(HYLO_SOURCE_DIR) / ".git")) CHECK(revision.second != "unknown");
  // A data cursor that does not fit the run is named by its checkpoint, not by the healthy shard;
  // the failed launch leaves the run as it was.
  const auto reseeded = run(ws.train("split", "--set train.checkpoint_every=20 --set train.seed=99 --resume auto"));
  CHECK(reseeded.exit_code != 0);
  CHECK(reseeded.output.find("step_20.h5: /data/cursor does not fit this run (") != std::string::npos);
  // Moments of another shape are refused, naming the file and the tensor (not loaded in part).
  fs::copy(ws.dir / "split", ws.dir / "reshaped", fs::copy_options::recursive);
  const std::string reshaped = (ws.dir / "reshaped/checkpoints/step_20.h5").string();
  CheckpointState state = load_checkpoint(reshaped);
  state.optim_m[0].value = state.optim_m[0].value.view({1, -1});
  save_checkpoint(reshaped, state);
  const auto bad_moments = run(ws.train("reshaped", "--set train.checkpoint_every=20 --resume auto"));
  CHECK(bad_moments.exit_code != 0);
  CHECK(bad_moments.output.find(reshaped + ": /optim/m tensor 0 is ") != std::string::npos);
  const auto second = run(ws.train("split", "--set train.checkpoint_every=20 --resume auto"));
  REQUIRE_MESSAGE(second.exit_code == 0, second.output);
  CHECK(second.output.find("resumed from") != std::string::npos);
  const auto a = ws.loss_rows("straight"), b = ws.loss_rows("split");
  REQUIRE(a.size() == 40);
  REQUIRE(b.size() == 40);
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == b[i]);
}

TEST_CASE("an MoE run with aux-loss-free balancing resumes bit-exact through the CLI (router biases in the checkpoint)") {
  Workspace ws("moe_resume");
  const std::string moe = "--set model.moe.experts=4 --set model.moe.top_k=2 --set model.moe.expert_hidden=16 "
                          "--set model.moe.bias_update_rate=0.05 --set train.checkpoint_every=20 ";
  REQUIRE(run(ws.train("straight", moe)).exit_code == 0);
  REQUIRE(run(ws.train("split", moe + "--stop-at 20")).exit_code == 0);
  const auto second = run(ws.train("split", moe + "--resume auto"));
  REQUIRE_MESSAGE(second.exit_code == 0, second.output);
  const auto a = ws.loss_rows("straight"), b = ws.loss_rows("split");
  REQUIRE(a.size() == 40);
  REQUIRE(b.size() == 40);
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == b[i]);
  // The biases moved (else the check above would not need them restored).
  const auto biases = load_checkpoint((ws.dir / "split/checkpoints/step_20.h5").string(), false).buffers;
  REQUIRE_FALSE(biases.empty());
  const std::vector<float> bias = biases[0].value.to_vector<float>();
  CHECK(std::any_of(bias.begin(), bias.end(), [](float x) { return x != 0.0f; }));
}

TEST_CASE("a retrieval mix changes the curve and resumes bit-exact, and train.eval_retrieval scores as hylo eval does") {
  Workspace ws("retrieval_mix");
  const std::string mixed = "--set data.retrieval_mix=0.3 --set train.eval_retrieval=2 ";
  REQUIRE(run(ws.train("plain")).exit_code == 0);
  const auto straight = run(ws.train("straight", mixed));
  REQUIRE_MESSAGE(straight.exit_code == 0, straight.output);
  CHECK(straight.output.find("source spans over 30% of the training tokens") != std::string::npos);
  CHECK(straight.output.find("| retrieval ") != std::string::npos);
  REQUIRE(run(ws.train("split", mixed + "--set train.checkpoint_every=20 --stop-at 20")).exit_code == 0);
  const auto second = run(ws.train("split", mixed + "--set train.checkpoint_every=20 --resume auto"));
  REQUIRE_MESSAGE(second.exit_code == 0, second.output);
  const auto plain = ws.loss_rows("plain"), a = ws.loss_rows("straight"), b = ws.loss_rows("split");
  REQUIRE(a.size() == 40);
  CHECK(a == b);
  CHECK(a != plain);  // the spans change what is learned

  // The evaluations at steps 20 and 40 score retrieval; the last equals hylo eval's on the checkpoint.
  std::vector<nlohmann::json> eval_rows;
  for (const nlohmann::json& row : ws.metrics_rows("straight"))
    if (row.contains("val_loss")) eval_rows.push_back(row);
  REQUIRE(eval_rows.size() == 2);
  for (const auto& row : eval_rows) {
    for (const char* key : {"retrieval_acc", "retrieval_tok_acc"}) CHECK_MESSAGE(row[key].is_number(), key << " in " << row);
    CHECK(row["retrieval_logprob"].get<double>() < 0);
  }
  const auto eval = run(ws.hylo + " eval " + (ws.dir / "straight").string() + " --tasks retrieval --n 2 --json " +
                        (ws.dir / "eval.json").string());
  REQUIRE_MESSAGE(eval.exit_code == 0, eval.output);
  const nlohmann::json overall =
      nlohmann::json::parse(read_file(ws.dir / "eval.json").value_or("{}"))["retrieval"]["overall"];
  CHECK(overall["mean_logprob"].get<double>() ==
        doctest::Approx(eval_rows.back()["retrieval_logprob"].get<double>()).epsilon(1e-12));
  CHECK(overall["token_accuracy"].get<double>() == doctest::Approx(eval_rows.back()["retrieval_tok_acc"].get<double>()));
}

TEST_CASE("resuming with a checkpoint that does not fit the model fails and leaves the run directory as it was") {
  Workspace ws("misfit");
  REQUIRE(run(ws.train("run", "--set train.checkpoint_every=20 --stop-at 20")).exit_code == 0);
  const fs::path dir = ws.dir / "run";
  const std::string config_before = read_file(dir / "config.yaml").value();
  const std::string metrics_before = read_file(dir / "metrics.jsonl").value();
  const auto misfit = run(ws.train("run", "--set train.checkpoint_every=20 --set model.ffn_hidden=40 --resume auto"));
  CHECK(misfit.exit_code != 0);
  CHECK(misfit.output.find("step_20.h5") != std::string::npos);
  CHECK(std::count(misfit.output.begin(), misfit.output.end(), '\n') == 1);
  CHECK(read_file(dir / "config.yaml").value() == config_before);
  CHECK_FALSE(fs::exists(dir / "config.1.yaml"));
  CHECK(read_file(dir / "metrics.jsonl").value() == metrics_before);
}

TEST_CASE("a crash while checkpointing leaves the previous checkpoint valid and the run resumable") {
  Workspace ws("crash");
  REQUIRE(run(ws.train("straight")).exit_code == 0);
  REQUIRE(run(ws.train("crashed", "--set train.checkpoint_every=10 --set train.keep_last=0 --stop-at 30")).exit_code == 0);
  // What a writer killed mid-write leaves behind: a partial temp file, and (worse) a newest
  // checkpoint whose bytes were cut short.
  const fs::path ckpt = ws.dir / "crashed/checkpoints";
  fs::copy_file(ckpt / "step_30.h5", ckpt / "step_40.h5.tmp");
  fs::resize_file(ckpt / "step_30.h5", fs::file_size(ckpt / "step_30.h5") / 2);
  const auto resumed = run(ws.train("crashed", "--set train.checkpoint_every=10 --set train.keep_last=0 --resume auto"));
  REQUIRE_MESSAGE(resumed.exit_code == 0, resumed.output);
  CHECK(resumed.output.find("step_20.h5 at step 20") != std::string::npos);
  const auto a = ws.loss_rows("straight"), b = ws.loss_rows("crashed");
  REQUIRE(a.size() == 40);
  REQUIRE(b.size() == 40);
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == b[i]);
}

TEST_CASE("resuming from an older checkpoint sets the later ones aside, so that they outrank nothing") {
  Workspace ws("older");
  const std::string every_10 = "--set train.checkpoint_every=10 --set train.keep_last=0";
  REQUIRE(run(ws.train("r", every_10)).exit_code == 0);  // step_10 .. step_40
  const fs::path ckpt = ws.dir / "r/checkpoints";
  const std::string from_20 = every_10 + " --set train.lr=0.001 --resume " + (ckpt / "step_20.h5").string();
  const auto branched = run(ws.train("r", from_20 + " --stop-at 30"));
  REQUIRE_MESSAGE(branched.exit_code == 0, branched.output);
  CHECK(branched.output.find("moved the later checkpoints step_30.h5, step_40.h5 to " + (ws.dir / "r").string() +
                             "/checkpoints/superseded/: this run continues from step 20") != std::string::npos);
  CHECK(fs::exists(ckpt / "superseded/step_40.h5"));
  CHECK(fs::exists(ckpt / "step_30.h5"));  // the new run's
  CHECK_FALSE(fs::exists(ckpt / "step_40.h5"));
  // Its continuation resumes from its own newest checkpoint, not the abandoned run's step 40.
  const auto continued = run(ws.train("r", every_10 + " --set train.lr=0.001 --resume auto"));
  REQUIRE_MESSAGE(continued.exit_code == 0, continued.output);
  CHECK(continued.output.find((ckpt / "step_30.h5").string() + " at step 30") != std::string::npos);
  CHECK(ws.loss_rows("r").size() == 40);
}

TEST_CASE("bad input gives a one-line error naming the file, key or value") {
  Workspace ws("bad");
  const std::string cfg = (ws.dir / "tiny.yaml").string();
  struct Case {
    std::string args, expected;
  };
  std::ofstream(ws.dir / "broken.yaml") << "model:\n  d_model: [1, 2\n";
  const std::string truncated = (ws.dir / "truncated.bin").string();
  fs::copy_file(ws.dir / "train.bin", truncated);
  fs::resize_file(truncated, fs::file_size(truncated) - 100);
  data::write_shard((ws.dir / "big_vocab.bin").string(), std::vector<int32_t>(2000, 1), 60000, 1, "");
  std::ofstream(ws.dir / "not_a_checkpoint.h5") << "garbage";
  const std::vector<Case> cases{
      {"train " + (ws.dir / "broken.yaml").string(), "broken.yaml:"},
      {"train " + cfg + " --set train.lerning_rate=1", "did you mean 'train.lr'"},
      {"train " + cfg + " --set train.steps=abc", "train.steps"},
      {"train " + cfg + " --set model.n_heads=3", "n_heads"},
      {"train " + cfg + " --set model.local.bridge=9", "bridge"},
      {"train " + cfg + " --set data.train=" + (ws.dir / "missing.bin").string(), "missing.bin"},
      {"train " + cfg + " --set data.train=" + truncated, "truncated.bin"},
      {"train " + cfg + " --set data.train=" + ws.dir.string(), "not a regular file"},
      {"train " + cfg + " --set data.train=" + (ws.dir / "big_vocab.bin").string(), "vocab"},
      {"train " + cfg + " --set data.val=" + truncated, "truncated.bin"},  // before the first step, not at eval
      {"train " + cfg + " --set data.val=" + (ws.dir / "missing.bin").string(), "missing.bin"},
      {"train " + cfg + " --set data.val=", "data.val is empty"},
      {"eval " + (ws.dir / "not_a_checkpoint.h5").string(), "not_a_checkpoint.h5"},
      {"train " + (ws.dir / "nope.yaml").string(), "nope.yaml"},
      // a flag conflict is named before any file is read (here the config, which does not exist)
      {"train " + (ws.dir / "nope.yaml").string() + " --resume auto --overwrite", "--resume and --overwrite exclude"},
      {"frobnicate", "unknown command"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.args);
    const bool is_train = c.args.starts_with("train");
    const auto r = run(ws.hylo + " " + c.args + (is_train ? " --run-dir " + (ws.dir / "bad_run").string() : ""));
    CAPTURE(r.output);
    CHECK(r.exit_code != 0);
    CHECK(r.output.find(c.expected) != std::string::npos);
    CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
    CHECK(r.output.starts_with("hylo: error: "));
  }
  // A run directory holding a different config is refused unless resuming or overwriting.
  REQUIRE(run(ws.train("taken", "--set train.steps=2")).exit_code == 0);
  const auto clash = run(ws.train("taken", "--set train.steps=3"));
  CHECK(clash.exit_code != 0);
  CHECK(clash.output.find("different config") != std::string::npos);
  CHECK(run(ws.train("taken", "--set train.steps=3 --overwrite")).exit_code == 0);
}

TEST_CASE("learning-rate schedules: linear warmup, then cosine or WSD down to the floor") {
  LrSchedule cosine{1.0, 0.1, 10, 110, "cosine", 0.2};
  CHECK(cosine.at(0) == doctest::Approx(0.1));
  CHECK(cosine.at(9) == doctest::Approx(1.0));
  CHECK(cosine.at(60) == doctest::Approx(0.55));  // half way: the mean of peak and floor
  CHECK(cosine.at(110) == doctest::Approx(0.1));
  LrSchedule wsd{1.0, 0.1, 10, 110, "wsd", 0.2};
  CHECK(wsd.at(50) == doctest::Approx(1.0));   // stable phase
  CHECK(wsd.at(90) == doctest::Approx(1.0));   // decay starts at 80% of the post-warmup steps
  CHECK(wsd.at(100) == doctest::Approx(0.55));
  CHECK(wsd.at(110) == doctest::Approx(0.1));
}

TEST_CASE("gradient accumulation: 2 micro-batches of 2 follow the curve of one batch of 4") {
  Workspace ws("accum");
  REQUIRE(run(ws.train("whole", "--set train.steps=10")).exit_code == 0);
  REQUIRE(run(ws.train("micro", "--set train.steps=10 --set train.micro_batch_size=2")).exit_code == 0);
  const auto parse = [&](const std::string& name) {
    std::vector<double> losses;
    for (const std::string& row : ws.loss_rows(name)) losses.push_back(std::stod(row.substr(row.rfind(':') + 1)));
    return losses;
  };
  const auto a = parse("whole"), b = parse("micro");
  REQUIRE(a.size() == 10);
  REQUIRE(b.size() == 10);
  for (size_t i = 0; i < a.size(); ++i) CHECK(b[i] == doctest::Approx(a[i]).epsilon(1e-4));
}

TEST_CASE("non-finite loss: policy skip drops the update and logs it, policy abort exits naming the step") {
  Workspace ws("nan");
  // An absurd learning rate blows the weights up after the first update.
  const std::string blow_up = "--set train.steps=6 --set train.lr=1e30 --set train.warmup_steps=0 --set train.grad_clip=0";
  const auto skipped = run(ws.train("skip", blow_up + " --set train.nan_policy=skip"));
  REQUIRE_MESSAGE(skipped.exit_code == 0, skipped.output);
  CHECK(skipped.output.find("non-finite: update skipped") != std::string::npos);
  int64_t skips = 0;  // of the 6 steps, in the first run's metrics (the same run as "straight")
  for (const nlohmann::json& row : ws.metrics_rows("skip")) {
    skips += row.contains("skipped");
    if (row.contains("skipped")) CHECK(row["skipped"] == 1);
  }
  // Resume counts AdamW's updates, not steps: the skipped ones did not move its bias correction.
  const std::string every_3 = " --set train.nan_policy=skip --set train.checkpoint_every=3 --set train.keep_last=0";
  REQUIRE(run(ws.train("straight", blow_up + every_3)).exit_code == 0);
  REQUIRE(run(ws.train("resumed", blow_up + every_3 + " --stop-at 3")).exit_code == 0);
  const auto resumed = run(ws.train("resumed", blow_up + every_3 + " --resume auto"));
  REQUIRE_MESSAGE(resumed.exit_code == 0, resumed.output);
  auto updates = [&](const char* run_name) {
    return load_checkpoint((ws.dir / run_name / "checkpoints/step_6.h5").string(), /*moments=*/false).updates;
  };
  REQUIRE((skips > 0 && skips < 6));
  CHECK(updates("straight") == 6 - skips);
  CHECK(updates("resumed") == 6 - skips);

  const auto aborted = run(ws.train("abort", blow_up + " --set train.nan_policy=abort"));
  CHECK(aborted.exit_code != 0);
  CHECK(aborted.output.find("non-finite") != std::string::npos);
  CHECK(aborted.output.find("aborting without saving") != std::string::npos);
  CHECK(fs::is_empty(ws.dir / "abort/checkpoints"));
}

TEST_CASE("train.recompute=true follows the identical loss curve") {
  Workspace ws("recompute");
  REQUIRE(run(ws.train("plain", "--set train.steps=8")).exit_code == 0);
  const auto r = run(ws.train("recomputed", "--set train.steps=8 --set train.recompute=true"));
  REQUIRE_MESSAGE(r.exit_code == 0, r.output);
  CHECK(ws.loss_rows("plain") == ws.loss_rows("recomputed"));
}

TEST_CASE("hylo bench train --json replaces an older file with the bench layout and refuses a bad or inapplicable --expert-gemm") {
  Workspace w("bench_json");
  const std::string json = (w.dir / "bench.json").string();
  std::ofstream(json) << "an older result\n";
  const std::string bench = w.hylo + " bench train " + (w.dir / "tiny.yaml").string() + " --steps 1 --warmup 0";
  const CommandResult ok = run(bench + " --json " + json);
  REQUIRE_MESSAGE(ok.exit_code == 0, ok.output);
  const nlohmann::json written = nlohmann::json::parse(read_file(json).value());  // the older text is gone
  CHECK(written["bench"] == "train");
  CHECK(written["device"] == "cpu");
  CHECK(written["commit"] == git_revision());
  CHECK(written["settings"]["expert_gemm"] == "default");
  CHECK(written["settings"]["steps"] == 1);
  REQUIRE(written["rows"].size() == 1);
  CHECK(written["rows"][0]["tokens_per_s"].get<double>() > 0);
  CHECK(written["rows"][0]["final_loss"].is_number());
  CHECK_FALSE(fs::exists(json + ".tmp"));

  const CommandResult bad = run(bench + " --expert-gemm fastest");
  CHECK(bad.exit_code != 0);
  CHECK(bad.output.find("bench train: --expert-gemm must be grouped or loop, got 'fastest'") != std::string::npos);
  // On the CPU the flag would change nothing, so it is refused rather than recorded as applied.
  const CommandResult cpu = run(bench + " --expert-gemm loop --set device=cpu");
  CHECK(cpu.exit_code != 0);
  CHECK(cpu.output.find("bench train: --expert-gemm chooses the CUDA MoE path; " + (w.dir / "tiny.yaml").string() +
                        " runs on cpu") != std::string::npos);
}

TEST_CASE("train, bench train, eval and params name a flag whose value is not a number, or a flag where a path goes") {
  Workspace w("bad_numbers");
  const CommandResult stop = run(w.train("never", "--stop-at soon"));
  CHECK(stop.exit_code != 0);
  CHECK(stop.output.find("train: --stop-at needs a number, got 'soon'") != std::string::npos);
  CHECK_FALSE(fs::exists(w.dir / "never" / "metrics.jsonl"));
  // A step below 1 used to mean "no stop" and ran the whole schedule.
  const CommandResult negative = run(w.train("never", "--stop-at -5"));
  CHECK(negative.exit_code != 0);
  CHECK(negative.output.find("train: --stop-at needs a positive integer, got '-5'") != std::string::npos);
  CHECK_FALSE(fs::exists(w.dir / "never" / "metrics.jsonl"));
  const auto refused = [](const std::string& command, const std::string& message) {
    const CommandResult r = run(command);
    CAPTURE(command);
    CHECK(r.exit_code != 0);
    CHECK(r.output.find(message) != std::string::npos);
  };
  const std::string bench = w.hylo + " bench train " + (w.dir / "tiny.yaml").string();
  refused(bench + " --steps ten", "bench train: --steps needs a number, got 'ten'");
  refused(bench + " --steps 0", "bench train: --steps needs a positive integer, got '0'");
  refused(bench + " --warmup 1.5", "bench train: --warmup needs a number, got '1.5'");
  refused(w.hylo + " bench train --steps 1", "bench train: CONFIG is required");
  refused(w.hylo + " eval --tasks val", "eval: RUN_DIR_OR_CHECKPOINT is required");
  refused(w.hylo + " params", "params: CONFIG is required");
  const std::string params = w.hylo + " params " + std::string(HYLO_SOURCE_DIR) + "/configs/moe-8e-pbb.yaml";
  refused(params + " --ranks many", "params: --ranks needs a number, got 'many'");
  refused(params + " --ranks 0", "params: --ranks needs a positive integer, got '0'");
  refused(params + " --ranks 3 --set train.expert_parallel=2",
          "params: --ranks 3 is not a multiple of train.expert_parallel=2");
  const CommandResult per_rank = run(params + " --ranks 4 --set train.expert_parallel=2 --set train.zero1=true");
  CHECK(per_rank.exit_code == 0);
  CHECK(per_rank.output.find("per rank (4 ranks with train.expert_parallel=2 under ZeRO-1): ") != std::string::npos);
}

TEST_CASE("bench attention, decode and moe name a bad flag or value before they need a GPU") {
  const std::string hylo = std::string(HYLO_BINARY_DIR) + "/hylo";
  for (const auto& [command, message] : {
           std::pair{" bench decode --batch 16,x", "bench decode: --batch needs a number, got 'x'"},
           std::pair{" bench decode --window 0", "bench decode: --window needs a positive integer, got '0'"},
           std::pair{" bench decode --Hkv 3", "bench decode: --H 16 is not a multiple of --Hkv 3"},
           std::pair{" bench decode --block 64 --bridge 128", "bench decode: --bridge 128 exceeds --block 64"},
           std::pair{" bench decode --batches 16", "bench decode: unknown flag '--batches'"},
           std::pair{" bench attention --kind dense", "bench attention: --kind must be pbb, swa or full, got 'dense'"},
           std::pair{" bench attention --T", "bench attention: --T: 1 required INT missing"},
           std::pair{" bench moe --shapes 8e,16e", "bench moe: --shapes must be 8e, 64e or 2b, got '16e'"},
       }) {
    const CommandResult r = run(hylo + command);
    CAPTURE(command);
    CHECK(r.exit_code != 0);
    CHECK(r.output.find(message) != std::string::npos);
  }
}

TEST_CASE("train --device cuda on a machine without a usable GPU names the setting and writes nothing") {
  Workspace ws("no_gpu");
  // Head dim 64 (the workspace's tiny has 16), so that only the device can be missing.
  const auto r = run(ws.train("gpu_run", "--device cuda --set model.d_model=128 --set train.steps=2"));
  if (r.exit_code == 0) {
    MESSAGE("a usable GPU is present: the run trained, nothing to check here");
    return;
  }
  CAPTURE(r.output);
  CHECK(r.output.starts_with("hylo: error: " + (ws.dir / "tiny.yaml").string() + ": device: cuda requested but "));
  CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
  CHECK_FALSE(fs::exists(ws.dir / "gpu_run"));
}

TEST_CASE("train --device cuda with a head dim the CUDA kernels lack names the keys and writes nothing") {
  Workspace ws("bad_head_dim");
  const auto r = run(ws.train("gpu_run", "--device cuda --set train.steps=2"));  // the workspace's tiny
  CAPTURE(r.output);
  CHECK(r.exit_code != 0);
  CHECK(std::count(r.output.begin(), r.output.end(), '\n') == 1);
  CHECK_FALSE(fs::exists(ws.dir / "gpu_run"));
#if HYLO_WITH_CUDA  // a build without CUDA refuses the device itself first
  CHECK(r.output.find("model: head dim model.d_model/model.n_heads = 32/2 = 16 has no CUDA attention kernel") !=
        std::string::npos);
#endif
}

TEST_CASE("a run says what it did: no mfu without a peak, tokens/memory/elapsed per line, a closing summary, "
          "one TensorBoard file per launch") {
  Workspace ws("report");
  auto event_files = [&] {
    int n = 0;
    for (const auto& e : fs::directory_iterator(ws.dir / "r")) n += e.path().filename().string().starts_with("events.out.tfevents.");
    return n;
  };
  const auto first = run(ws.train("r", "--set train.checkpoint_every=20 --stop-at 30"));
  REQUIRE_MESSAGE(first.exit_code == 0, first.output);
  const std::vector<nlohmann::json> rows = ws.metrics_rows("r");
  REQUIRE(rows.size() == 31);  // 30 steps + the evaluation at 20
  for (const nlohmann::json& row : rows) CHECK_FALSE(row.contains("mfu"));  // the CPU has no peak to divide by
  CHECK(first.output.find("step     10/40 | loss ") != std::string::npos);
  for (const char* part : {"| mfu - |", " | 960 tokens | peak rss ", " GiB | elapsed ", "s | eta "})
    CHECK_MESSAGE(first.output.find(part) != std::string::npos, part);
  const std::string summary = "summary: steps 1-30 of 40 in ";
  CHECK(first.output.find(summary) != std::string::npos);
  for (const std::string& part :
       {std::string(", 2.88K tokens seen, median "),
        fmt::format(" tokens/s; final train loss {:.4f}, val loss {:.4f} (step 20); last checkpoint {}",
                    rows.back()["loss"].get<double>(), rows[20]["val_loss"].get<double>(),
                    (ws.dir / "r/checkpoints/step_20.h5").string())})
    CHECK_MESSAGE(first.output.find(part) != std::string::npos, part);
  const std::string log = read_file(ws.dir / "r/log.txt").value_or("");
  CHECK(log.substr(log.rfind('\n', log.size() - 2) + 1).starts_with(summary));  // the last line
  CHECK(event_files() == 1);

  const auto resumed = run(ws.train("r", "--set train.checkpoint_every=20 --resume auto"));
  REQUIRE_MESSAGE(resumed.exit_code == 0, resumed.output);
  CHECK(resumed.output.find("summary: steps 21-40 of 40 in ") != std::string::npos);
  CHECK(resumed.output.find("last checkpoint " + (ws.dir / "r/checkpoints/step_40.h5").string()) != std::string::npos);
  CHECK(event_files() == 2);  // TensorBoard reads both; the second starts at step 21
  REQUIRE(run(ws.train("r", "--set train.steps=5 --overwrite")).exit_code == 0);
  CHECK(event_files() == 1);
}
