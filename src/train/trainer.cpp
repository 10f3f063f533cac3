#include "train/trainer.h"

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <set>
#include <span>

#include "core/revision.h"
#include "data/loader.h"
#include "data/shard.h"
#include "parallel/communicator.h"
#include "nn/transformer.h"
#include "ops/ops.h"
#include "checkpoint/buffers.h"
#include "checkpoint/checkpoint.h"
#include "eval/evaluate.h"
#include "parallel/expert_parallel.h"
#include "nn/flops.h"
#include "parallel/gradient_sync.h"
#include "checkpoint/model_checkpoint.h"
#include "optim/optimizer.h"
#include "train/progress.h"
#include "train/tensorboard.h"
#include "eval/retrieval.h"
#include "checkpoint/run_dir.h"
#include "optim/schedule.h"
#include "train/step_batch.h"
#include "train/watchdog.h"
#include "parallel/zero.h"

#if HYLO_WITH_CUDA
#include "core/cuda/allocator.h"
#endif

namespace hylo {

namespace fs = std::filesystem;

namespace {

// Names the first parameter whose gradient holds NaN/inf (the slow path, after a bad step).
std::string first_nonfinite_grad(const ParamList& params) {
  for (const Parameter& p : params) {
    if (!p.var.has_grad()) continue;
    for (float g : p.var.grad().to(DType::f32).to_vector<float>())
      if (!std::isfinite(g)) return p.name;
  }
  return "(none: the loss itself)";
}

// The value of a checkpoint's /meta key, or "" when it has none.
std::string meta_value(const CheckpointState& s, const std::string& key) {
  for (const auto& [k, v] : s.meta)
    if (k == key) return v;
  return "";
}

class Trainer {
 public:
  explicit Trainer(const TrainOptions& options);
  int run();

 private:
  double train_step();
  double grad_norm() const;
  void save(int64_t step);
  std::string restore(const std::string& path);  // returns a note for the log ("" or what changed)
  void check_replicas_agree(int64_t step) const;
  void take_expert_rows(CheckpointState& s) const;
  void sum_router_loads();
  void report_memory();
  void say(const std::string& line) const;  // rank 0's log and console; other ranks stay quiet
  bool leader() const { return comm_->rank() == 0; }
  ParallelGroups parallel_groups() const { return {*comm_, expert_replicas_.get(), ep_group_.get()}; }

  Config config_;
  Device device_;
  std::unique_ptr<dist::Communicator> comm_;
  // Expert parallelism (train.expert_parallel = P > 1): ranks r with equal r / P form an expert
  // group, which shares out the experts; ranks with equal r % P hold the same experts and sum
  // their gradients. Both null without it.
  std::unique_ptr<dist::Communicator> ep_group_, expert_replicas_;
  std::string run_dir_;
  std::unique_ptr<Transformer> model_;
  std::unique_ptr<AdamW> optimizer_;
  std::unique_ptr<data::DataLoader> loader_;
  std::unique_ptr<MetricsLog> metrics_;  // rank 0 only
  std::unique_ptr<EventFile> events_;    // rank 0 only: TensorBoard's copy of the scalars
  std::unique_ptr<ZeroLayout> zero_;  // ZeRO-1's sharding of the optimizer state; null without
  std::unique_ptr<GradientSync> gradient_sync_;
  std::unique_ptr<RetrievalTask> retrieval_;  // train.eval_retrieval's set, built once; null without
  LrSchedule schedule_;
  int micro_batch_ = 0, accumulation_ = 1, vocab_valid_ = 0;
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
  comm_ = dist::connect(device_);  // before anything is placed on a GPU: it picks the rank's

  // train.batch_size is the global batch: each rank runs its share in micro-batches (by default
  // in one).
  const TrainConfig& t = config_.train;
  const int world = comm_->size();
  HYLO_CHECK(t.batch_size % world == 0, "{}: train.batch_size={} is not divisible by {} data-parallel ranks",
             options.config_path, t.batch_size, world);
  micro_batch_ = t.micro_batch_size > 0 ? t.micro_batch_size : t.batch_size / world;
  HYLO_CHECK(t.batch_size % (micro_batch_ * world) == 0,
             "{}: train.batch_size={} is not divisible by train.micro_batch_size={} x {} data-parallel ranks",
             options.config_path, t.batch_size, micro_batch_, world);
  accumulation_ = t.batch_size / (micro_batch_ * world);
  HYLO_CHECK(world % t.expert_parallel == 0, "{}: train.expert_parallel={} does not divide the {} ranks",
             options.config_path, t.expert_parallel, world);
  if (t.expert_parallel > 1) {
    ep_group_ = comm_->split(comm_->rank() / t.expert_parallel, comm_->rank());
    expert_replicas_ = comm_->split(comm_->rank() % t.expert_parallel, comm_->rank());
  }
  loader_ = std::make_unique<data::DataLoader>(train_datasets(config_.data), micro_batch_, t.seq_len, comm_->rank(),
                                               world, t.seed, /*prefetch=*/true, config_.data.retrieval_mix,
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

  model_ = std::make_unique<Transformer>(config_.model, t.seed);
  model_->set_recompute(t.recompute);
  if (ep_group_) model_->shard_experts(*ep_group_);
  ParamList& params = model_->parameters();
  std::vector<std::vector<size_t>> buckets = gradient_buckets(params);
  if (t.zero1) zero_ = std::make_unique<ZeroLayout>(params, buckets, parallel_groups());
  optimizer_ = std::make_unique<AdamW>(params, AdamWOptions{t.beta1, t.beta2, t.eps, t.weight_decay}, device_,
                                       zero_ ? zero_->owned() : std::vector<ElementRange>{});
  if (zero_) zero_->bind_values(params);
  gradient_sync_ =
      std::make_unique<GradientSync>(params, *comm_, std::move(buckets), expert_replicas_.get(), zero_.get());
  schedule_ = LrSchedule{t.lr, t.min_lr_ratio, t.warmup_steps, t.steps, t.schedule, t.decay_fraction};
  // A checkpoint that does not fit this model fails here, still in memory only.
  std::string resume_from = options.resume;
  if (resume_from == "auto") resume_from = latest_valid_checkpoint(run_dir_).value_or("");
  const std::string resume_note = resume_from.empty() ? "" : restore(resume_from);
  // Each rank chose and read its checkpoint itself; a file system that lists or reads differently
  // on one node would otherwise send the ranks on from different steps.
  const uint64_t start = uint64_t(start_step_);
  const std::vector<uint64_t> starts = comm_->all_gather(std::span(&start, 1));
  HYLO_CHECK(std::all_of(starts.begin(), starts.end(), [&](uint64_t s) { return s == start; }),
             "{}: the ranks resume from different steps ({}, rank-major); is the run directory shared and "
             "complete on every node?", run_dir_, fmt::join(starts, ", "));
  // Only once everything above has been checked does the run directory get written: a launch
  // that fails on bad input leaves the disk as it found it. Rank 0 writes it alone.
  std::vector<std::string> superseded;
  if (leader()) {
    prepare_run_dir(run_dir_, to_yaml(config_), mode);
    MetricsLog::truncate_after(run_dir_, start_step_);  // the log reads as if the run never stopped
    superseded = set_aside_checkpoints_after(run_dir_, start_step_);  // ... and so do the checkpoints
    metrics_ = std::make_unique<MetricsLog>(run_dir_);
    events_ = std::make_unique<EventFile>(run_dir_, start_step_ + 1);  // a resumed run adds a file
  }
  resumed_from_ = resume_from;
  if (!resume_from.empty()) say(fmt::format("resumed from {} at step {}{}", resume_from, start_step_, resume_note));
  if (!superseded.empty())
    say(fmt::format("moved the later checkpoints {} to {}/checkpoints/superseded/: this run continues from step {}",
                    fmt::join(superseded, ", "), run_dir_, start_step_));
}

void Trainer::say(const std::string& line) const {
  if (leader()) log_line(metrics_.get(), line);
}

std::string Trainer::restore(const std::string& path) {
  CheckpointState s = load_checkpoint(path);
  take_expert_rows(s);
  const ParamList& params = model_->parameters();
  optimizer_->load_masters(checkpoint_tensors(s.model, params, path, "/model"));
  optimizer_->load_moments(checkpoint_tensors(s.optim_m, params, path, "/optim/m"),
                           checkpoint_tensors(s.optim_v, params, path, "/optim/v"));
  optimizer_->set_steps_taken(s.updates);
  // Every rank saved its own data cursor, rank-major. The same ranks continue their streams
  // exactly; another world size starts the new ranks' streams at the batch the step reached
  // (DP weights and moments do not depend on the world size; the data order does).
  const std::string saved_world = meta_value(s, "world_size");
  const size_t ranks = saved_world.empty() ? 1 : std::strtoul(saved_world.c_str(), nullptr, 10);
  HYLO_CHECK(ranks > 0 && s.data_cursor.size() % ranks == 0,
             "{}: /meta/world_size '{}' does not divide the {} values of /data/cursor", path, saved_world,
             s.data_cursor.size());
  const size_t fields = s.data_cursor.size() / ranks;
  std::string note;
  if (ranks == size_t(comm_->size())) {
    const auto mine = s.data_cursor.begin() + std::ptrdiff_t(fields * size_t(comm_->rank()));
    try {
      loader_->restore({mine, mine + std::ptrdiff_t(fields)});
    } catch (const Error& e) {  // the loader names the shard; the mismatch is the checkpoint's and the config's
      HYLO_FAIL("{}: /data/cursor does not fit this run ({}); resuming needs the saved train.seed, "
                "train.seq_len and batch split", path, e.what());
    }
  } else {
    loader_->skip_to(uint64_t(s.step) * uint64_t(accumulation_));
    note = fmt::format(" (saved by {} data-parallel ranks, resumed on {}: the data order changes)", ranks,
                       comm_->size());
  }
  restore_buffers(*model_, s, path);
  start_step_ = s.step;
  return note;
}

// Under expert parallelism: keep this rank's rows of every expert shard, its master and moments.
void Trainer::take_expert_rows(CheckpointState& s) const {
  if (!ep_group_) return;
  std::set<std::string> sharded;
  for (const Parameter& p : model_->parameters())
    if (p.expert_shard) sharded.insert(p.name);
  for (std::vector<NamedTensor>* group : {&s.model, &s.optim_m, &s.optim_v})
    for (NamedTensor& t : *group)
      if (sharded.count(t.name)) t.value = expert_rows(t.value, ep_group_->rank(), ep_group_->size());
}

void Trainer::save(int64_t step) {
  check_replicas_agree(step);
  std::vector<uint64_t> cursors = comm_->all_gather(loader_->cursor());  // rank-major
  const ParamList& params = model_->parameters();
  OptimizerState state = optimizer_state_on_rank0(*optimizer_, params, zero_.get(), parallel_groups());
  if (!leader()) return;
  CheckpointState s;
  s.step = step;
  s.updates = optimizer_->steps_taken();
  for (size_t i = 0; i < params.size(); ++i) {
    s.model.push_back({params[i].name, state.masters[i]});
    s.optim_m.push_back({params[i].name, state.m[i]});
    s.optim_v.push_back({params[i].name, state.v[i]});
  }
  s.buffers = buffer_tensors(*model_);
  s.rng = {config_.train.seed, uint64_t(step)};
  s.data_cursor = std::move(cursors);
  s.config_yaml = to_yaml(config_);
  const std::string world = std::to_string(comm_->size());
  const std::string layout = "dp=" + world + (ep_group_ ? ",ep=" + std::to_string(ep_group_->size()) : "");
  s.meta = {{"version", "1"}, {"git_revision", git_revision()}, {"world_size", world}, {"layout", layout},
            {"device", std::string(device_name(device_))}};
  save_checkpoint(checkpoint_path(run_dir_, step), s);
  prune_checkpoints(run_dir_, config_.train.keep_last);
}

// Replicas that drifted apart (a collective that did not give every rank the same bits) would
// make the checkpoint, which is rank 0's, silently speak for the others: compare before saving.
void Trainer::check_replicas_agree(int64_t step) const {
  if (comm_->size() == 1) return;
  // CRCs of what ranks hold alike: the parameters as the forward reads them (masters on the CPU,
  // bf16 copies on CUDA) and the buffers, everywhere; the expert shards, on the ranks of the same
  // experts (r % P, P = 1 without expert parallelism).
  uint32_t crc[2] = {0, 0};  // replicated, expert shards
  auto add = [&crc](const Tensor& t, bool expert) {
    const Tensor host = t.to(Device::cpu);
    crc[expert] = data::crc32(host.raw(), host.nbytes(), crc[expert]);
  };
  for (const Parameter& p : model_->parameters()) add(p.var.value(), p.expert_shard);
  for (const NamedTensor& buffer : buffer_tensors(*model_)) add(buffer.value, false);
  const uint64_t mine[2] = {crc[0], crc[1]};
  const std::vector<uint64_t> crcs = comm_->all_gather(mine);
  const size_t P = ep_group_ ? size_t(ep_group_->size()) : 1;
  for (size_t r = 1; r < crcs.size() / 2; ++r) {
    HYLO_CHECK(crcs[2 * r] == crcs[0], "data parallel: at step {} the weights or buffers of rank {} differ from rank 0's",
               step, r);
    HYLO_CHECK(crcs[2 * r + 1] == crcs[2 * (r % P) + 1],
               "expert parallel: at step {} the experts of rank {} differ from those of rank {}", step, r, r % P);
  }
}

// The router's bias follows the load of every rank's tokens, so that it stays replicated.
void Trainer::sum_router_loads() {
  if (comm_->size() == 1) return;
  for (std::span<int64_t> tally : model_->router_load_tallies()) comm_->sum(tally);
}

// Forward + backward over this rank's micro-batches, the gradients summed over the ranks; returns
// the mean loss of the step over all ranks. Each micro-batch's loss is scaled by 1 / (all
// micro-batches of the step), so the sum is the mean gradient.
double Trainer::train_step() {
  double loss_sum = 0;
  const int T = config_.train.seq_len;
  const int micro_batches = accumulation_ * comm_->size();
  for (int micro = 0; micro < accumulation_; ++micro) {
    StepBatch batch = make_step_batch(loader_->next(), micro_batch_, T, device_);
    Var loss = model_->loss(batch.inputs_BT, batch.targets_N, vocab_valid_, config_.train.z_loss);
    loss_sum += double(loss.value().to(DType::f32).to_vector<float>()[0]);
    if (micro == accumulation_ - 1) gradient_sync_->arm();
    scale(loss, 1.0 / micro_batches).backward();
  }
  gradient_sync_->finish();
  comm_->sum(std::span<double>(&loss_sum, 1));
  return loss_sum / micro_batches;
}

// The L2 norm of the whole summed gradient. Under ZeRO-1 each rank holds the sums of the elements
// it owns, and every element (of every expert shard) has one owner: their squares add over all
// ranks. Under expert parallelism alone each rank holds its own experts': their squares add over
// the expert group.
double Trainer::grad_norm() const {
  if (ep_group_ && !zero_) {  // the expert shards' squares add over the expert group
    const double replicated = optimizer_->grad_norm(false), experts = optimizer_->grad_norm(true);
    double squared = experts * experts;
    ep_group_->sum(std::span<double>(&squared, 1));
    return std::sqrt(replicated * replicated + squared);
  }
  const double norm = optimizer_->grad_norm();
  if (!zero_) return norm;
  double squared = norm * norm;
  comm_->sum(std::span<double>(&squared, 1));
  return std::sqrt(squared);
}

int Trainer::run() {
  const TrainConfig& t = config_.train;
  const double tokens_per_step = double(t.batch_size) * t.seq_len;
  const double flops_per_token = train_flops_per_token(config_.model, t.seq_len);
  const double peak = peak_flops(device_ == Device::cuda) * comm_->size();
  Progress progress(t.steps, start_step_);
  RunSummary summary{start_step_, start_step_, t.steps, int64_t(double(start_step_) * tokens_per_step)};
  summary.checkpoint = resumed_from_;
  // A job of one has no other rank to wait for.
  std::unique_ptr<Watchdog> watchdog =
      comm_->size() > 1 ? std::make_unique<Watchdog>(t.hang_timeout_s, comm_->rank()) : nullptr;
  auto beat = [&watchdog](const std::string& doing) {
    if (watchdog) watchdog->beat(doing);
  };
  const std::string ranks =
      comm_->size() == 1 ? ""
                         : fmt::format(", {} data-parallel ranks{}{}", comm_->size(), t.zero1 ? " with ZeRO-1" : "",
                                       ep_group_ ? fmt::format(", experts over groups of {}", ep_group_->size()) : "");
  const double mix = config_.data.retrieval_mix;
  const std::string spans =
      mix > 0 ? fmt::format(", source spans over {:.3g}% of the training tokens", 100 * mix) : "";
  say(fmt::format("training {} params on {} for {} steps ({} tokens/step{}{}) in {}",
                  count_parameters(config_.model).back().stored, device_name(device_), t.steps,
                  int64_t(tokens_per_step), ranks, spans, run_dir_));
  for (int64_t step = start_step_; step < t.steps; ++step) {
    auto t0 = std::chrono::steady_clock::now();
    beat(fmt::format("step {}", step + 1));
    if (zero_)
      zero_->zero_grads(model_->parameters());
    else
      optimizer_->zero_grad();
    const double lr = schedule_.at(step);
    const double loss = train_step();
    const double norm = grad_norm();
    const bool finite = std::isfinite(loss) && std::isfinite(norm);
    if (finite) {
      optimizer_->step(lr, clip_scale(norm, t.grad_clip));
      if (zero_) zero_->share_updated_values();
      sum_router_loads();
      model_->update_router_biases();  // MoE aux-loss-free balancing; no-op for dense / rate 0
    } else if (t.nan_policy == "abort") {
      HYLO_FAIL("step {}: non-finite loss {} / grad norm {} (first bad gradient: {}); aborting without saving",
                step + 1, loss, norm, first_nonfinite_grad(model_->parameters()));
    } else {
      model_->discard_router_load();
    }
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
    for (const MoeLayerStats& m : model_->moe_stats()) {  // last micro-batch of the step
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
      double loss_sum = val_loss_sum(*model_, config_, device_, comm_->rank(), comm_->size());  // a share each
      comm_->sum(std::span<double>(&loss_sum, 1));
      const EvalResult e = val_loss_result(loss_sum, config_);
      nlohmann::ordered_json eval_row = {{"step", done}, {"val_loss", e.loss}, {"val_ppl", e.perplexity}};
      std::vector<std::pair<std::string, double>> eval_scalars = {{"val/loss", e.loss}, {"val/ppl", e.perplexity}};
      std::string retrieval;
      if (retrieval_) {
        // Every rank scores the same set (a few hundred sequences): expert-parallel forwards need
        // all ranks, and the result needs no sum.
        const RetrievalBucket r = retrieval_->score(*model_, device_).overall;
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
      save(done);
      summary.checkpoint = checkpoint_path(run_dir_, done);
    }
    if (done == stop_at_) {
      say(fmt::format("stopping at step {} (--stop-at)", done));
      break;
    }
  }
  report_memory();
  summary.seconds = progress.elapsed_seconds();
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

int run_train(const TrainOptions& options) { return Trainer(options).run(); }

}  // namespace hylo
