#include "train/trainer.h"

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <span>

#include "checkpoint/checkpoint.h"
#include "checkpoint/run_dir.h"
#include "checkpoint/run_lock.h"
#include "checkpoint/run_state.h"
#include "checkpoint/train_checkpoint.h"
#include "data/loader.h"
#include "data/shard.h"
#include "eval/evaluate.h"
#include "eval/retrieval.h"
#include "nn/flops.h"
#include "optim/schedule.h"
#include "parallel/launch_guard.h"
#include "parallel/layout.h"
#include "train/progress.h"
#include "train/tensorboard.h"
#include "train/step.h"
#include "train/stop_signal.h"
#include "train/watchdog.h"

#if HYLO_WITH_CUDA
#include "core/cuda/allocator.h"
#endif

namespace hylo {

namespace fs = std::filesystem;

namespace {

class Trainer {
 public:
  explicit Trainer(const TrainOptions& options);
  int run();
  // Rank 0 records the run's end in run_state.json ("failed" and the error), for sweep status.
  void record_failure(const std::string& error) const;

 private:
  // The first stop signal any rank received (0: none), agreed at a step boundary with one
  // collective, so that every rank checkpoints the same step and stops together.
  int agreed_stop_signal(const StopSignals& signals) const;
  // What a checkpoint saves and restores, at `step` steps done.
  TrainState state(int64_t step) {
    return {step_->model(), step_->optimizer(), step_->zero(), *loader_, *layout_, config_, device_,
            split_.accumulation, step};
  }
  void report_memory();
  void beat(const std::string& doing) {
    if (watchdog_) watchdog_->beat(doing);
  }
  void say(const std::string& line) const;  // rank 0's log and console; other ranks stay quiet
  std::string mixture_line(const TrainConfig& t) const;  // data.mix: the run's realized shares, the weights'
  bool leader() const { return layout_->leader(); }

  Config config_;
  Device device_;
  // Several ranks only (a job of one has no other rank to wait for): from MPI's start-up on, a
  // rank that stops leaves the others waiting in a collective, at start-up as in a step.
  std::unique_ptr<Watchdog> watchdog_;
  std::unique_ptr<dist::Communicator> comm_;
  std::unique_ptr<ParallelLayout> layout_;
  std::string run_dir_;
  std::unique_ptr<RunDirLock> lock_;  // rank 0 only, held for the life of the run
  BatchSplit split_;
  std::unique_ptr<data::DataLoader> loader_;
  std::unique_ptr<TrainStep> step_;  // the model, the optimizer and what sums their gradients
  std::unique_ptr<MetricsLog> metrics_;  // rank 0 only
  std::unique_ptr<EventFile> events_;    // rank 0 only: TensorBoard's copy of the scalars
  std::unique_ptr<RetrievalTask> retrieval_;  // train.eval_retrieval's set, built once; null without
  LrSchedule schedule_;
  int vocab_valid_ = 0;
  int64_t start_step_ = 0, stop_at_ = 0;
  std::string resumed_from_;  // the checkpoint this launch continues from; "" for a fresh run
};

Trainer::Trainer(const TrainOptions& options) {
  run_dir_ = options.run_dir.empty() ? "runs/" + fs::path(options.config_path).stem().string() : options.run_dir;
  HYLO_CHECK(options.resume.empty() || !options.overwrite, "{}: --resume and --overwrite exclude each other", run_dir_);
  const RunDirMode mode = options.overwrite        ? RunDirMode::overwrite
                          : options.resume.empty() ? RunDirMode::fresh
                                                   : RunDirMode::resume;
  config_ = load_config(options.config_path, options.overrides);
  device_ = training_device(config_);
  stop_at_ = options.stop_at;
  const TrainConfig& t = config_.train;
  if (const dist::LaunchPlace place = dist::launch_place(); place.world_size > 1)
    watchdog_ = std::make_unique<Watchdog>(t.hang_timeout_s, place.rank);
  beat("MPI's start-up");
  comm_ = dist::connect(device_);  // before anything is placed on a GPU: it picks the rank's

  beat("the start-up: the parallel layout");
  layout_ = std::make_unique<ParallelLayout>(*comm_, t.expert_parallel, options.config_path);
  split_ = split_batch(t, layout_->dp(), options.config_path);
  beat("the start-up: checking the data");
  loader_ = std::make_unique<data::DataLoader>(train_datasets(config_.data), split_.micro_batch, t.seq_len,
                                               layout_->rank(), layout_->dp(), t.seed, /*prefetch=*/true,
                                               config_.data.retrieval_mix,
                                               config_.data.mix.empty() ? "data.train" : "data.mix");
  data::check_vocab(*loader_, config_.model.vocab_size);
  vocab_valid_ = int(loader_->vocab_size());
  // The val files are first read at the first evaluation: check them now (header, size, CRC, ids,
  // vocab, one sequence's worth), so that a bad one fails the launch and not a run hours in.
  if (t.eval_every > 0)
    data::check_vocab(data::DataLoader({val_dataset(config_.data)}, t.micro_batch(), t.seq_len, 0, 1, 0x5eed,
                                       /*prefetch=*/false, 0, "data.val"),
                      config_.model.vocab_size);
  if (t.eval_retrieval > 0) {
    RetrievalOptions options;
    options.per_distance = t.eval_retrieval;
    retrieval_ = std::make_unique<RetrievalTask>(config_, options);
  }

  beat("the start-up: building the model");
  step_ = std::make_unique<TrainStep>(config_, device_, *layout_, split_, vocab_valid_);
  schedule_ = LrSchedule{t.lr, t.min_lr_ratio, t.warmup_steps, t.steps, t.schedule, t.decay_fraction};
  // A checkpoint that does not fit this model fails here, still in memory only.
  std::string resume_from = options.resume;
  if (resume_from == "auto") resume_from = latest_valid_checkpoint(run_dir_).value_or("");
  std::string resume_note;
  if (!resume_from.empty()) {
    beat("the start-up: loading " + resume_from);
    TrainState resumed = state(0);
    resume_note = restore_training_checkpoint(resume_from, resumed);
    start_step_ = resumed.step;
  }
  // Each rank chose and read its checkpoint itself; a file system that lists or reads differently
  // on one node would otherwise send the ranks on from different steps.
  beat("the start-up: agreeing on the step to start from");
  const uint64_t start = uint64_t(start_step_);
  const std::vector<uint64_t> starts = layout_->world().all_gather(std::span(&start, 1));
  HYLO_CHECK(std::all_of(starts.begin(), starts.end(), [&](uint64_t s) { return s == start; }),
             "{}: the ranks resume from different steps ({}, rank-major); is the run directory shared and "
             "complete on every node?", run_dir_, fmt::join(starts, ", "));
  // Only once everything above has been checked does the run directory get written: a launch
  // that fails on bad input leaves the disk as it found it. Rank 0 writes it alone.
  std::vector<std::string> superseded;
  if (leader()) {
    lock_ = std::make_unique<RunDirLock>(run_dir_);  // a second process on a live run stops here
    prepare_run_dir(run_dir_, to_yaml(config_), mode);
    lock_->keep();
    write_run_state(run_dir_, {"running", start_step_, ""});
    MetricsLog::truncate_after(run_dir_, start_step_);  // the log reads as if the run never stopped
    superseded = set_aside_checkpoints_after(run_dir_, start_step_);  // ... and so do the checkpoints
    metrics_ = std::make_unique<MetricsLog>(run_dir_);
    events_ = std::make_unique<EventFile>(run_dir_, start_step_ + 1);  // a resumed run adds a file
  }
  resumed_from_ = resume_from;
  if (!resume_from.empty()) say(fmt::format("resumed from {} at step {}{}", resume_from, start_step_, resume_note));
  if (lock_ && !lock_->removed().empty())
    say(fmt::format("deleted the temporary files of writers that died: {}", fmt::join(lock_->removed(), ", ")));
  if (!superseded.empty())
    say(fmt::format("moved the later checkpoints {} to {}/checkpoints/superseded/: this run continues from step {}",
                    fmt::join(superseded, ", "), run_dir_, start_step_));
}

std::string Trainer::mixture_line(const TrainConfig& t) const {
  // What the whole run will read on this rank (rank 0 speaks), next to what the weights ask: the
  // loader's choice of dataset is a function of the row's index, so this is known before step 1.
  const uint64_t batches = uint64_t(t.steps) * uint64_t(split_.accumulation);
  const std::vector<uint64_t> rows = loader_->rows_per_dataset(batches);
  const uint64_t total = batches * uint64_t(split_.micro_batch);
  double weights = 0;
  for (const MixEntry& entry : config_.data.mix) weights += entry.weight;
  std::vector<std::string> parts;
  for (size_t d = 0; d < rows.size(); ++d) {
    const MixEntry& entry = config_.data.mix[d];
    parts.push_back(fmt::format("{} {:.2f}% (weight {:g}: {:.2f}%; {} file{})", entry.path,
                                100.0 * double(rows[d]) / double(total), entry.weight,
                                100.0 * entry.weight / weights, loader_->dataset(d).shards().size(),
                                loader_->dataset(d).shards().size() == 1 ? "" : "s"));
  }
  return fmt::format("data.mix over the run's {} sequences on this rank: {}", total, fmt::join(parts, ", "));
}

void Trainer::say(const std::string& line) const {
  if (leader()) log_line(metrics_.get(), line);
}

void Trainer::record_failure(const std::string& error) const {
  if (leader() && lock_) write_run_state(run_dir_, {"failed", 0, error});
}

int Trainer::agreed_stop_signal(const StopSignals& signals) const {
  const uint64_t mine = uint64_t(signals.received());
  if (layout_->world_size() == 1) return int(mine);
  for (uint64_t signal : layout_->world().all_gather(std::span(&mine, 1)))
    if (signal != 0) return int(signal);
  return 0;
}

int Trainer::run() {
  const TrainConfig& t = config_.train;
  const StopSignals signals;  // from here a scheduler's signal stops the run at a step boundary
  const double tokens_per_step = double(t.batch_size) * t.seq_len;
  const double flops_per_token = train_flops_per_token(config_.model, t.seq_len);
  const double peak = peak_flops(device_ == Device::cuda) * layout_->world_size();
  Progress progress(t.steps, start_step_);
  RunSummary summary;
  summary.first_step = summary.last_step = start_step_;
  summary.total_steps = t.steps;
  summary.tokens = int64_t(double(start_step_) * tokens_per_step);
  summary.checkpoint = resumed_from_;
  const std::string ranks =
      layout_->world_size() == 1
          ? ""
          : fmt::format(", {} data-parallel ranks{}{}", layout_->dp(), t.zero1 ? " with ZeRO-1" : "",
                        layout_->expert_parallel() ? fmt::format(", experts over groups of {}", layout_->ep()) : "");
  const double mix = config_.data.retrieval_mix;
  const std::string spans =
      mix > 0 ? fmt::format(", source spans over {:.3g}% of the training tokens", 100 * mix) : "";
  say(fmt::format("training {} params on {} for {} steps ({} tokens/step{}{}) in {}",
                  count_parameters(config_.model).back().stored, device_name(device_), t.steps,
                  int64_t(tokens_per_step), ranks, spans, run_dir_));
  if (config_.data.mix.size() > 1) say(mixture_line(t));
  for (int64_t step = start_step_; step < t.steps; ++step) {
    auto t0 = std::chrono::steady_clock::now();
    beat(fmt::format("step {}", step + 1));
    const double lr = schedule_.at(step);
    const StepResult result = step_->run(step + 1, lr, [&] {
      return make_step_batch(loader_->next(), split_.micro_batch, t.seq_len, device_);
    });
    const double loss = result.loss, norm = result.grad_norm;
    const bool finite = result.finite;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double tokens_per_s = tokens_per_step / seconds;
    const std::optional<double> mfu =
        peak > 0 ? std::optional(tokens_per_s * flops_per_token / peak) : std::nullopt;  // no CPU peak
    const int64_t done = step + 1, tokens = int64_t(double(done) * tokens_per_step);
    nlohmann::ordered_json row = {{"step", done}, {"loss", loss},     {"lr", lr},
                                  {"grad_norm", norm}, {"tokens", tokens}, {"tokens_per_s", tokens_per_s}};
    std::vector<std::pair<std::string, double>> scalars = {
        {"train/loss", loss}, {"train/lr", lr}, {"train/grad_norm", norm}, {"train/tokens_per_s", tokens_per_s}};
    if (mfu) row["mfu"] = *mfu, scalars.emplace_back("train/mfu", *mfu);
    if (!finite) row["skipped"] = 1;
    Transformer& model = step_->model();
    for (const MoeLayerStats& m : model.moe_stats()) {  // last micro-batch of the step
      const std::string p = fmt::format("moe.{}.", m.layer);
      row[p + "aux_loss"] = m.aux_loss, row[p + "load_min"] = m.min_load(), row[p + "load_max"] = m.max_load();
      row[p + "load_cv"] = m.load_cv(), row[p + "dropped"] = m.dropped;
      for (const std::string& suffix : kMoeMetricsSuffixes)
        scalars.emplace_back(fmt::format("moe/{}/{}", m.layer, suffix), row[p + suffix].get<double>());
    }
    const bool log_step = done % t.log_every == 0 || done == t.steps || !finite;
    if (leader()) {
      metrics_->write(row);
      events_->scalars(done, scalars);
      if (log_step) events_->flush();
    }
    summary.last_step = done, summary.tokens = tokens, summary.train_loss = loss;
    summary.tokens_per_s.push_back(tokens_per_s);
    if (log_step)
      say(progress.line({done, loss, lr, norm, tokens_per_s, seconds, mfu, tokens}, device_) +
          (finite ? "" : " | non-finite: update skipped"));
    if (t.eval_every > 0 && (done % t.eval_every == 0 || done == t.steps)) {
      beat(fmt::format("the evaluation at step {}", done));
      double loss_sum = val_loss_sum(model, config_, device_, layout_->rank(), layout_->dp());  // a share each
      layout_->world().sum(std::span<double>(&loss_sum, 1));
      const EvalResult e = val_loss_result(loss_sum, config_);
      nlohmann::ordered_json eval_row = {{"step", done}, {"val_loss", e.loss}, {"val_ppl", e.perplexity}};
      std::vector<std::pair<std::string, double>> eval_scalars = {{"val/loss", e.loss}, {"val/ppl", e.perplexity}};
      std::string retrieval;
      if (retrieval_) {
        // Every rank scores the same set (a few hundred sequences): expert-parallel forwards need
        // all ranks, and the result needs no sum.
        const RetrievalBucket r = retrieval_->score(model, device_).overall;
        eval_row["retrieval_acc"] = r.accuracy(), eval_row["retrieval_tok_acc"] = r.token_accuracy();
        eval_row["retrieval_logprob"] = r.mean_logprob();
        eval_scalars.insert(eval_scalars.end(), {{"retrieval/acc", r.accuracy()},
                                                 {"retrieval/tok_acc", r.token_accuracy()},
                                                 {"retrieval/logprob", r.mean_logprob()}});
        retrieval = fmt::format(" | retrieval {:.3f} (tokens {:.3f})", r.accuracy(), r.token_accuracy());
      }
      if (leader()) {
        metrics_->write(eval_row);
        events_->scalars(done, eval_scalars);
        events_->flush();
      }
      summary.val_loss = e.loss, summary.val_step = done;
      say(fmt::format("step {:>6} | val_loss {:.4f} | val_ppl {:.2f}{}", done, e.loss, e.perplexity, retrieval));
    }
    if ((t.checkpoint_every > 0 && done % t.checkpoint_every == 0) || done == t.steps) {
      beat(fmt::format("the checkpoint at step {}", done));
      save_training_checkpoint(run_dir_, state(done));
      summary.checkpoint = checkpoint_path(run_dir_, done);
    }
    if (const int signal = agreed_stop_signal(signals)) {
      if (summary.checkpoint != checkpoint_path(run_dir_, done)) {
        beat(fmt::format("the checkpoint at step {} (on {})", done, signal_name(signal)));
        save_training_checkpoint(run_dir_, state(done));
        summary.checkpoint = checkpoint_path(run_dir_, done);
      }
      if (leader()) write_run_state(run_dir_, {"preempted", done, signal_name(signal)});
      say(fmt::format("stopping after step {} on {}: {}; exit {} (resume with --resume auto)", done,
                      signal_name(signal), summary.checkpoint, kExitPreempted));
      summary.seconds = progress.elapsed_seconds();
      say(summary_paragraph(summary));
      return kExitPreempted;
    }
    if (done == stop_at_) {
      say(fmt::format("stopping at step {} (--stop-at)", done));
      if (leader()) write_run_state(run_dir_, {"preempted", done, "--stop-at"});
      break;
    }
  }
  report_memory();
  summary.seconds = progress.elapsed_seconds();
  if (leader() && summary.last_step == t.steps) write_run_state(run_dir_, {"finished", t.steps, ""});
  say(summary_paragraph(summary));
  return 0;
}

void Trainer::report_memory() {
#if HYLO_WITH_CUDA
  if (device_ != Device::cuda) return;
  const cuda::AllocatorStats stats = cuda::allocator_stats();
  std::string by_category;
  for (const auto& [what, bytes] : stats.peak_by_category)
    if (bytes >= (1u << 20)) by_category += fmt::format(", {} {:.2f}", what, double(bytes) / (1ull << 30));
  say(fmt::format("peak device memory {:.2f} GiB (by category at their own peaks, GiB{})",
                                       double(stats.peak_bytes) / (1ull << 30), by_category));
#endif
}

}  // namespace

int run_train(const TrainOptions& options) {
  Trainer trainer(options);
  try {
    return trainer.run();
  } catch (const std::exception& e) {
    trainer.record_failure(e.what());
    throw;
  }
}

}  // namespace hylo
