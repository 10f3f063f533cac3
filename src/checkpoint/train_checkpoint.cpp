#include "checkpoint/train_checkpoint.h"

#include <set>

#include "checkpoint/buffers.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/model_checkpoint.h"
#include "core/revision.h"
#include "data/shard.h"
#include "parallel/expert_parallel.h"

namespace hylo {

namespace {

// The value of a checkpoint's /meta key, or "" when it has none.
std::string meta_value(const CheckpointState& s, const std::string& key) {
  for (const auto& [k, v] : s.meta)
    if (k == key) return v;
  return "";
}

// Replicas that drifted apart would make the checkpoint, which is rank 0's, silently speak for
// the others: compare before saving.
void check_replicas_agree(const TrainState& state) {
  const ParallelLayout& layout = state.layout;
  if (layout.world_size() == 1) return;
  // CRCs of what ranks hold alike: the parameters as the forward reads them (masters on the CPU,
  // bf16 copies on CUDA) and the buffers, everywhere; the expert shards, on the ranks of the same
  // experts (r % P, P = 1 without expert parallelism).
  uint32_t crc[2] = {0, 0};  // replicated, expert shards
  auto add = [&crc](const Tensor& t, bool expert) {
    const Tensor host = t.to(Device::cpu);
    crc[expert] = data::crc32(host.raw(), host.nbytes(), crc[expert]);
  };
  for (const Parameter& p : state.model.parameters()) add(p.var.value(), p.expert_shard);
  for (const NamedTensor& buffer : buffer_tensors(state.model)) add(buffer.value, false);
  if (Fp8State* fp8 = state.model.fp8()) add(fp8->amax_history(), false);
  const uint64_t mine[2] = {crc[0], crc[1]};
  const std::vector<uint64_t> crcs = layout.world().all_gather(mine);
  const size_t P = size_t(layout.ep());
  for (size_t r = 1; r < crcs.size() / 2; ++r) {
    HYLO_CHECK(crcs[2 * r] == crcs[0], "data parallel: at step {} the weights or buffers of rank {} differ from rank 0's",
               state.step, r);
    HYLO_CHECK(crcs[2 * r + 1] == crcs[2 * (r % P) + 1],
               "expert parallel: at step {} the experts of rank {} differ from those of rank {}", state.step, r, r % P);
  }
}

// Under expert parallelism: keep this rank's rows of every expert shard, its master and moments.
void take_expert_rows(CheckpointState& s, const TrainState& state) {
  const dist::Communicator* group = state.layout.expert_group();
  if (!group) return;
  std::set<std::string> sharded;
  for (const Parameter& p : state.model.parameters())
    if (p.expert_shard) sharded.insert(p.name);
  for (std::vector<NamedTensor>* tensors : {&s.model, &s.optim_m, &s.optim_v})
    for (NamedTensor& t : *tensors)
      if (sharded.count(t.name)) t.value = expert_rows(t.value, group->rank(), group->size());
}

// Every rank saved its own data cursor, rank-major. The same ranks continue their streams
// exactly; another world size starts the new ranks' streams at the batch the step reached (DP
// weights and moments do not depend on the world size; the data order does).
std::string restore_data_stream(const CheckpointState& s, const std::string& path, TrainState& state) {
  const std::string saved_world = meta_value(s, "world_size");
  const size_t ranks = saved_world.empty() ? 1 : std::strtoul(saved_world.c_str(), nullptr, 10);
  HYLO_CHECK(ranks > 0 && s.data_cursor.size() % ranks == 0,
             "{}: /meta/world_size '{}' does not divide the {} values of /data/cursor", path, saved_world,
             s.data_cursor.size());
  const size_t fields = s.data_cursor.size() / ranks;
  const ParallelLayout& layout = state.layout;
  if (s.data_cursor.empty()) {  // weights without a data position, as `hylo import` writes them
    state.loader.skip_to(uint64_t(s.step) * uint64_t(state.accumulation));
    return " (no data cursor, as hylo import writes: the data stream starts at this step's batch)";
  }
  if (ranks != size_t(layout.world_size())) {
    state.loader.skip_to(uint64_t(s.step) * uint64_t(state.accumulation));
    return fmt::format(" (saved by {} data-parallel ranks, resumed on {}: the data order changes)", ranks,
                       layout.world_size());
  }
  const auto mine = s.data_cursor.begin() + std::ptrdiff_t(fields * size_t(layout.rank()));
  try {
    state.loader.restore({mine, mine + std::ptrdiff_t(fields)});
  } catch (const Error& e) {  // the loader names the shard; the mismatch is the checkpoint's and the config's
    HYLO_FAIL("{}: /data/cursor does not fit this run ({}); resuming needs the saved train.seed, "
              "train.seq_len and batch split", path, e.what());
  }
  return "";
}

// /fp8: the FP8 scaling state of a train.precision: fp8 run, so that its resume scales every tensor
// as the uninterrupted run does.
constexpr const char* kFp8History = "amax_history";    // (roles, train.fp8_amax_history) f32
constexpr const char* kFp8Steps = "steps_recorded";    // (1) i64: steps in the histories

std::vector<NamedTensor> fp8_tensors(Transformer& model) {
  Fp8State* fp8 = model.fp8();
  if (!fp8) return {};
  return {{kFp8History, fp8->amax_history()},
          {kFp8Steps, Tensor::from_vector(std::vector<int64_t>{fp8->steps_recorded()}, {1})}};
}

// A run resumes in the precision it was saved in: a bf16 checkpoint has no amax histories to give
// an FP8 run, and an FP8 one's would silently vanish into a bf16 run. Either is one line.
void restore_fp8(const CheckpointState& s, const std::string& path, Transformer& model) {
  Fp8State* fp8 = model.fp8();
  if (!fp8) {
    HYLO_CHECK(s.fp8.empty(), "{}: saved by a train.precision=fp8 run (it holds /fp8), this run is bf16; resume "
               "with train.precision=fp8", path);
    return;
  }
  HYLO_CHECK(!s.fp8.empty(), "{}: saved by a train.precision=bf16 run (no /fp8 amax histories), this run is fp8; "
             "resume with train.precision=bf16", path);
  const Tensor* history = nullptr;
  const Tensor* steps = nullptr;
  for (const NamedTensor& t : s.fp8) {
    if (t.name == kFp8History) history = &t.value;
    if (t.name == kFp8Steps) steps = &t.value;
  }
  HYLO_CHECK(history && steps && steps->numel() == 1 && steps->dtype() == DType::i64,
             "{}: /fp8 lacks /fp8/{} or /fp8/{} (i64, 1 value)", path, kFp8History, kFp8Steps);
  fp8->restore(*history, steps->to_vector<int64_t>()[0], path);
}

}  // namespace

void save_training_checkpoint(const std::string& run_dir, const TrainState& state) {
  check_replicas_agree(state);
  const ParallelLayout& layout = state.layout;
  std::vector<uint64_t> cursors = layout.world().all_gather(state.loader.cursor());  // rank-major
  const ParamList& params = state.model.parameters();
  OptimizerState optimizer = optimizer_state_on_rank0(state.optimizer, params, state.zero, layout);
  if (!layout.leader()) return;
  CheckpointState s;
  s.step = state.step;
  s.updates = state.optimizer.steps_taken();
  for (size_t i = 0; i < params.size(); ++i) {
    s.model.push_back({params[i].name, optimizer.masters[i]});
    s.optim_m.push_back({params[i].name, optimizer.m[i]});
    s.optim_v.push_back({params[i].name, optimizer.v[i]});
  }
  s.buffers = buffer_tensors(state.model);
  s.fp8 = fp8_tensors(state.model);
  s.rng = {state.config.train.seed, uint64_t(state.step)};
  s.data_cursor = std::move(cursors);
  s.config_yaml = to_yaml(state.config);
  s.meta = {{"version", "1"},
            {"git_revision", git_revision()},
            {"world_size", std::to_string(layout.world_size())},
            {"layout", layout.str()},
            {"device", std::string(device_name(state.device))}};
  save_checkpoint(checkpoint_path(run_dir, state.step), s);
  prune_checkpoints(run_dir, state.config.train.keep_last);
}

std::string restore_training_checkpoint(const std::string& path, TrainState& state) {
  CheckpointState s = load_checkpoint(path);
  take_expert_rows(s, state);
  const ParamList& params = state.model.parameters();
  state.optimizer.load_masters(checkpoint_tensors(s.model, params, path, "/model"));
  state.optimizer.load_moments(checkpoint_tensors(s.optim_m, params, path, "/optim/m"),
                               checkpoint_tensors(s.optim_v, params, path, "/optim/v"));
  state.optimizer.set_steps_taken(s.updates);
  const std::string note = restore_data_stream(s, path, state);
  restore_buffers(state.model, s, path);
  restore_fp8(s, path, state.model);
  state.step = s.step;
  return note;
}

}  // namespace hylo
