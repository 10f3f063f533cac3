// What a cluster does to a run directory (SPEC §7-8): damaged checkpoint bytes anywhere in the
// file (never a crash, skipped by --resume auto), checkpoints written before the whole-file
// checksum, a disk that fills during a checkpoint, a second process on a live run directory,
// temporary files of killed writers.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "checkpoint/checkpoint.h"
#include "checkpoint/file_sum.h"
#include "checkpoint/model_checkpoint.h"
#include "checkpoint/run_dir.h"
#include "checkpoint/run_lock.h"
#include "checkpoint/run_state.h"
#include "core/error.h"
#include "core/file.h"
#include "core/rng.h"
#include "parallel/launch_guard.h"
#include "train/stop_signal.h"
#include "error_of.h"

namespace fs = std::filesystem;
using namespace hylo;
using hylo::test::error_of;

namespace {

struct Scratch {
  fs::path path;
  explicit Scratch(const std::string& name)
      : path(fs::temp_directory_path() / fmt::format("hylo_test_{}_{}", name, ::getpid())) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string str() const { return path.string(); }
};

// A small state with every kind of dataset the trainer writes.
CheckpointState small_state(int64_t step, int64_t elements = 64) {
  CheckpointState s;
  s.step = s.updates = step;
  for (const char* name : {"embed.weight", "blocks.0.attn.wq", "final_norm.weight"}) {
    Tensor t = Tensor::empty({elements}, DType::f32);
    for (int64_t i = 0; i < elements; ++i) t.data<float>()[i] = float(step) + 0.01f * float(i);
    s.model.push_back({name, t});
    s.optim_m.push_back({name, t});
    s.optim_v.push_back({name, t});
  }
  s.buffers = {{"counts", Tensor::from_vector<int64_t>({1, 2, 3}, {3})}};
  s.rng = {7, uint64_t(step)};
  s.data_cursor = {1, 2, 3};
  s.config_yaml = "train:\n  steps: 40\n";
  s.meta = {{"version", "1"}, {"world_size", "1"}};
  return s;
}

std::string bytes_of(const std::string& path) { return read_file(path).value(); }

void put_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// A file as hylo wrote it before the whole-file checksum: the same HDF5 without the user block
// (libhdf5 finds the superblock at offset 0 and rebases its addresses).
std::string legacy_copy(const std::string& path) { return bytes_of(path).substr(kUserBlock); }

}  // namespace

TEST_CASE("checkpoint: the whole-file checksum is in the user block, and any changed byte is caught before libhdf5") {
  Scratch dir("sum");
  const std::string path = checkpoint_path(dir.str(), 10);
  save_checkpoint(path, small_state(10));
  const std::string bytes = bytes_of(path);
  CHECK(bytes.starts_with(fmt::format("hylo-checkpoint-sum 1 size={} crc32=", bytes.size())));
  CHECK(bytes.substr(kUserBlock, 4) == "\x89HDF");
  CHECK(check_file_sum(path) == FileSum::verified);
  CHECK(load_checkpoint(path).step == 10);

  // A flipped data byte: the whole-file checksum names the file (the dataset is never parsed).
  std::string flipped = bytes;
  flipped[bytes.size() - 40] ^= 0x10;
  put_bytes(path, flipped);
  CHECK(error_of([&] { load_checkpoint(path); }).starts_with(path + ": truncated or corrupt HDF5 file (whole-file "
                                                              "checksum mismatch: crc32 "));
  // A damaged checksum line, a cut file, a longer file.
  std::string line = bytes;
  line[25] = 'x';
  put_bytes(path, line);
  CHECK(error_of([&] { verify_checkpoint(path); }) == path + ": truncated or corrupt HDF5 file (damaged checksum line)");
  line = bytes;
  line[0] = 'H';
  put_bytes(path, line);
  CHECK(error_of([&] { verify_checkpoint(path); }) == path + ": truncated or corrupt HDF5 file (damaged checksum line)");
  put_bytes(path, bytes.substr(0, bytes.size() - 7));
  CHECK(error_of([&] { verify_checkpoint(path); }) ==
        fmt::format("{}: truncated or corrupt HDF5 file ({} bytes where {} were written: cut short)", path,
                    bytes.size() - 7, bytes.size()));
  put_bytes(path, bytes + "x");
  CHECK(error_of([&] { verify_checkpoint(path); }).find("bytes where") != std::string::npos);
}

TEST_CASE("checkpoint: 200 random byte flips anywhere (user block, superblock, metadata, data) never crash the "
          "reader, and --resume auto's choice skips every damaged file") {
  Scratch dir("flips");
  save_checkpoint(checkpoint_path(dir.str(), 5), small_state(5));
  const std::string newest = checkpoint_path(dir.str(), 10);
  save_checkpoint(newest, small_state(10));
  const std::string pristine = bytes_of(newest);
  Rng rng{2024, 0, 0};
  int rejected = 0;
  for (int i = 0; i < 200; ++i) {
    // A quarter in the first 2 KiB (the checksum line, the superblock, the root group's header).
    const size_t at = i % 4 == 0 ? size_t(rng.below(2048)) : size_t(rng.below(pristine.size()));
    std::string bytes = pristine;
    bytes[at] = char(bytes[at] ^ (1 + rng.below(255)));
    put_bytes(newest, bytes);
    CAPTURE(at);
    const std::string error = error_of([&] { load_checkpoint(newest); });
    CHECK(error.starts_with(newest + ": "));  // every change is caught, in one line naming the file
    CHECK(error.find('\n') == std::string::npos);
    rejected += !error.empty();
    CHECK(latest_valid_checkpoint(dir.str()) == checkpoint_path(dir.str(), 5));
  }
  CHECK(rejected == 200);
}

TEST_CASE("checkpoint: a file from before the whole-file checksum still loads - damaged, it fails in a child process, "
          "not in the reader's") {
  Scratch dir("legacy");
  const std::string path = checkpoint_path(dir.str(), 10);
  save_checkpoint(path, small_state(10));
  const std::string old = legacy_copy(path);
  put_bytes(path, old);
  CHECK(check_file_sum(path) == FileSum::legacy);
  CHECK(load_checkpoint(path).step == 10);
  CHECK_NOTHROW(verify_checkpoint(path));
  CHECK(latest_valid_checkpoint(dir.str()) == path);

  // Its per-dataset checksums still name the dataset.
  CheckpointState s = load_checkpoint(path);
  Rng rng{99, 0, 0};
  int failed = 0;
  for (int i = 0; i < 150; ++i) {
    const size_t at = i % 3 == 0 ? size_t(rng.below(1024)) : size_t(rng.below(old.size()));
    std::string bytes = old;
    bytes[at] = char(bytes[at] ^ (1 + rng.below(255)));
    put_bytes(path, bytes);
    CAPTURE(at);
    const std::string error = error_of([&] { load_checkpoint(path); });  // reaching the next line: no crash
    CHECK(error.find('\n') == std::string::npos);
    failed += !error.empty();
  }
  MESSAGE(failed << " of 150 flips in an old-format checkpoint were caught by its dataset checksums or structure");
  CHECK(failed > 100);
}

TEST_CASE("checkpoint: a full disk during the write is one clear error, earlier checkpoints stay intact, no temporary "
          "file is left and the process exits cleanly") {
  Scratch dir("full");
  save_checkpoint(checkpoint_path(dir.str(), 1), small_state(1));
  const std::string before = bytes_of(checkpoint_path(dir.str(), 1));
  // RLIMIT_FSIZE makes writes past the limit fail with EFBIG, as ENOSPC would; SIGXFSZ ignored so
  // that the write returns the error instead of killing the writer.
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{256 << 10, 256 << 10};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    const std::string error = error_of([&] { save_checkpoint(checkpoint_path(dir.str(), 2), small_state(2, 1 << 17)); });
    const bool clear = error.starts_with(checkpoint_path(dir.str(), 2) + ": ") &&
                       (error.find("disk full") != std::string::npos || error.find("too large") != std::string::npos);
    if (!clear) std::fprintf(stderr, "unexpected error: '%s'\n", error.c_str());
    std::exit(clear ? 0 : 1);  // exit(), not _exit(): atexit handlers (libhdf5's) run, as at a real exit
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK_FALSE(WIFSIGNALED(status));
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  CHECK(bytes_of(checkpoint_path(dir.str(), 1)) == before);
  for (const auto& entry : fs::directory_iterator(dir.path / "checkpoints"))
    CHECK(entry.path().filename().string() == "step_1.h5");
  CHECK(latest_valid_checkpoint(dir.str()) == checkpoint_path(dir.str(), 1));
}

TEST_CASE("checkpoint: on a really full disk (a 1 MiB tmpfs) the space is claimed before libhdf5 writes, one clear "
          "error, the earlier checkpoint intact") {
  Scratch dir("tmpfs");
  const std::string mnt = dir.str() + "/mnt";
  fs::create_directories(mnt);
  if (std::system(fmt::format("mount -t tmpfs -o size=1m tmpfs {} 2>/dev/null", mnt).c_str()) != 0) {
    MESSAGE("skipped: mount -t tmpfs is not allowed here (the RLIMIT_FSIZE case above still runs)");
    return;
  }
  struct Unmount {
    std::string at;
    ~Unmount() { (void)std::system(fmt::format("umount {}", at).c_str()); }
  } unmount{mnt};
  save_checkpoint(checkpoint_path(mnt, 1), small_state(1));
  const std::string before = bytes_of(checkpoint_path(mnt, 1));
  const std::string error = error_of([&] { save_checkpoint(checkpoint_path(mnt, 2), small_state(2, 1 << 16)); });
  CHECK(error.starts_with(checkpoint_path(mnt, 2) + ": cannot reserve "));
  CHECK(error.ends_with("No space left on device (disk full?)"));
  CHECK(bytes_of(checkpoint_path(mnt, 1)) == before);
  for (const auto& entry : fs::directory_iterator(fs::path(mnt) / "checkpoints"))
    CHECK(entry.path().filename().string() == "step_1.h5");
}

TEST_CASE("run_dir: the lock refuses a second holder naming the first's pid and host, and is free again once released") {
  Scratch scratch("lock");
  const std::string dir = scratch.str() + "/runs/x";
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  {
    RunDirLock first(dir);
    first.keep();
    CHECK(run_dir_holder(dir) == fmt::format("pid {} on host {}", ::getpid(), host));
    // flock() locks belong to an open file description: a second one in the same process conflicts.
    CHECK(error_of([&] { RunDirLock second(dir); }) ==
          fmt::format("run directory {} is in use by pid {} on host {} (its lock: {}/.lock)", dir, ::getpid(), host, dir));
  }
  CHECK_FALSE(run_dir_holder(dir).has_value());
  CHECK_NOTHROW(RunDirLock{dir});
  CHECK(fs::is_directory(dir));  // it existed before that lock

  // A lock that created its directory and was not kept (the launch failed) takes it away again.
  const std::string fresh = scratch.str() + "/runs/never_started";
  { RunDirLock lock(fresh); }
  CHECK_FALSE(fs::exists(fresh));
  std::ofstream(scratch.str() + "/file") << "x";
  CHECK(error_of([&] { RunDirLock lock(scratch.str() + "/file"); }) == scratch.str() + "/file: exists and is not a directory");
}

TEST_CASE("run_dir: taking the lock deletes the temporary files of killed writers, and nothing else") {
  Scratch scratch("lock_tmp");
  const std::string dir = scratch.str();
  fs::create_directories(dir + "/checkpoints/superseded");
  save_checkpoint(checkpoint_path(dir, 10), small_state(10));
  const std::vector<std::string> dead = {"checkpoints/step_20.h5.4242-0badcafe.tmp", "checkpoints/step_30.h5.tmp",
                                         "checkpoints/superseded/step_40.h5.tmp", "config.yaml.77-1234abcd.tmp"};
  for (const std::string& name : dead) std::ofstream(dir + "/" + name) << "partial";
  std::ofstream(dir + "/metrics.jsonl") << "{\"step\":1}\n";
  std::ofstream(dir + "/checkpoints/superseded/step_50.h5") << "set aside";
  RunDirLock lock(dir);
  std::vector<std::string> removed = lock.removed();
  std::sort(removed.begin(), removed.end());
  std::vector<std::string> expected = dead;
  std::sort(expected.begin(), expected.end());
  CHECK(removed == expected);
  for (const std::string& name : dead) CHECK_FALSE(fs::exists(dir + "/" + name));
  CHECK(fs::exists(dir + "/metrics.jsonl"));
  CHECK(fs::exists(dir + "/checkpoints/superseded/step_50.h5"));
  CHECK(load_checkpoint(checkpoint_path(dir, 10)).step == 10);
}

TEST_CASE("file: temporary names are unique per writer and end in .tmp") {
  const std::string a = unique_temp_path("runs/x/config.yaml"), b = unique_temp_path("runs/x/config.yaml");
  CHECK(a != b);
  CHECK(a.starts_with(fmt::format("runs/x/config.yaml.{}-", ::getpid())));
  CHECK(a.ends_with(".tmp"));
}

TEST_CASE("launch guard: several srun tasks without MPI are refused with the srun and mpirun lines to use") {
  auto env_of = [](std::map<std::string, std::string> vars) {
    return [vars = std::move(vars)](const char* name) -> const char* {
      auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    };
  };
  const std::string command = "build/hylo train configs/tiny.yaml --resume auto";
  CHECK(dist::unconnected_launch(env_of({{"SLURM_STEP_NUM_TASKS", "2"}, {"SLURM_NTASKS", "2"}}), command) ==
        "srun started 2 tasks without MPI (no PMIX_RANK, PMI_RANK or OMPI_COMM_WORLD_RANK: srun --mpi=none?), so each "
        "would train alone into the same run directory; launch with `srun --mpi=pmix -n 2 build/hylo train "
        "configs/tiny.yaml --resume auto` (`srun --mpi=list` shows the plugins) or, inside the allocation, `mpirun -np 2 "
        "build/hylo train configs/tiny.yaml --resume auto`");
  // One task, the batch script itself (SLURM_NTASKS without a step), or a launcher that connects the ranks: fine.
  CHECK(dist::unconnected_launch(env_of({{"SLURM_STEP_NUM_TASKS", "1"}}), command).empty());
  CHECK(dist::unconnected_launch(env_of({{"SLURM_NTASKS", "4"}, {"SLURM_PROCID", "0"}}), command).empty());
  for (const char* launcher : {"PMIX_RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK"})
    CHECK(dist::unconnected_launch(env_of({{"SLURM_STEP_NUM_TASKS", "2"}, {launcher, "1"}}), command).empty());
  CHECK(dist::unconnected_launch(env_of({}), command).empty());

  // The watchdog's view before MPI starts: the launcher's rank and size, a job of one without one.
  using Place = dist::LaunchPlace;
  auto place = [&](std::map<std::string, std::string> vars) {
    const Place p = dist::launch_place(env_of(std::move(vars)));
    return std::pair(p.rank, p.world_size);
  };
  CHECK(place({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}}) == std::pair(1, 2));
  CHECK(place({{"PMI_RANK", "3"}, {"PMI_SIZE", "4"}}) == std::pair(3, 4));
  CHECK(place({{"PMIX_RANK", "1"}, {"SLURM_PROCID", "1"}, {"SLURM_STEP_NUM_TASKS", "2"}}) == std::pair(1, 2));
  CHECK(place({{"SLURM_PROCID", "1"}, {"SLURM_STEP_NUM_TASKS", "2"}}) == std::pair(0, 1));  // no MPI: alone
  CHECK(place({}) == std::pair(0, 1));
}

TEST_CASE("checkpoint: a tensor missing from (or extra in) a checkpoint is named") {
  ParamList params;
  for (const char* name : {"embed.weight", "blocks.0.attn.wq", "final_norm.weight"})
    make_parameter(params, name, {4}, 0.02, true, 1);
  std::vector<NamedTensor> saved;
  for (const Parameter& p : params) saved.push_back({p.name, p.var.value()});
  CHECK(checkpoint_tensors(saved, params, "c.h5", "/model").size() == 3);
  std::vector<NamedTensor> short_of_one = {saved[0], saved[2]};
  CHECK(error_of([&] { checkpoint_tensors(short_of_one, params, "c.h5", "/model"); }) ==
        "c.h5: /model/blocks.0.attn.wq is missing (the checkpoint holds 2 tensors there, the model has 3 parameters)");
  std::vector<NamedTensor> one_extra = saved;
  one_extra.push_back({"blocks.1.attn.wq", saved[1].value});
  CHECK(error_of([&] { checkpoint_tensors(one_extra, params, "c.h5", "/optim/m"); }) ==
        "c.h5: /optim/m/blocks.1.attn.wq is not a parameter of this model (the checkpoint holds 4 tensors there, the "
        "model has 3 parameters)");
}

TEST_CASE("run_dir: relaunching a run without --resume is refused with nothing deleted, even with the same config") {
  Scratch scratch("relaunch");
  const std::string run = scratch.str() + "/runs/x";
  prepare_run_dir(run, "a: 1\n", RunDirMode::fresh);
  CHECK_NOTHROW(prepare_run_dir(run, "a: 1\n", RunDirMode::fresh));  // nothing ran yet: fine
  std::ofstream(run + "/metrics.jsonl") << "{\"step\":1}\n{\"step\":2}\n";
  CHECK(error_of([&] { prepare_run_dir(run, "a: 1\n", RunDirMode::fresh); }) ==
        run + " already holds a run (2 metrics rows): use --resume auto to continue it or --overwrite to start over");
  save_checkpoint(checkpoint_path(run, 20), small_state(20));
  save_checkpoint(checkpoint_path(run, 10), small_state(10));
  CHECK(error_of([&] { prepare_run_dir(run, "a: 1\n", RunDirMode::fresh); }) ==
        run + " already holds a run (2 metrics rows, checkpoints up to step_20.h5): use --resume auto to continue it "
              "or --overwrite to start over");
  CHECK(read_file(run + "/metrics.jsonl").value() == "{\"step\":1}\n{\"step\":2}\n");
  CHECK(fs::exists(checkpoint_path(run, 20)));
  CHECK_NOTHROW(prepare_run_dir(run, "a: 1\n", RunDirMode::resume));
  CHECK(fs::exists(checkpoint_path(run, 20)));
}

TEST_CASE("stop signals: the first sets the flag, a second stops at once, and the old handlers come back") {
  static volatile sig_atomic_t earlier_handler_ran = 0;
  struct sigaction mine {}, saved {};
  mine.sa_handler = [](int) { earlier_handler_ran = 1; };
  sigemptyset(&mine.sa_mask);
  ::sigaction(SIGUSR1, &mine, &saved);
  {
    StopSignals stop;
    CHECK(stop.received() == 0);
    ::raise(SIGUSR1);
    CHECK(stop.received() == SIGUSR1);
    CHECK(earlier_handler_ran == 0);
    CHECK(std::string(signal_name(stop.received())) == "SIGUSR1");
  }
  ::raise(SIGUSR1);  // its own handler again
  CHECK(earlier_handler_ran == 1);
  ::sigaction(SIGUSR1, &saved, nullptr);

  // A second signal (any of the three) ends the process by that signal, without waiting for a step.
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    StopSignals stop;
    ::raise(SIGTERM);
    ::raise(SIGINT);
    ::_exit(stop.received() == SIGTERM ? 10 : 11);  // not reached
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGINT);
}

TEST_CASE("run state: pending, running (the lock held), preempted, failed, finished, and killed without a word") {
  Scratch scratch("state");
  const std::string dir = scratch.str() + "/run";
  CHECK(run_report(dir, 40).status == RunStatus::pending);
  fs::create_directories(dir);
  CHECK(run_report(dir, 40).status == RunStatus::pending);
  std::ofstream(dir + "/metrics.jsonl") << "{\"step\":1,\"loss\":2}\n{\"step\":2,\"loss\":2}\n{\"step\":2,\"val_loss\":3}\n";
  {
    RunDirLock lock(dir);
    write_run_state(dir, {"running", 2, ""});
    const RunReport running = run_report(dir, 40);
    CHECK(running.status == RunStatus::running);
    CHECK(running.step == 2);
    CHECK(running.detail.starts_with(fmt::format("pid {} on host ", ::getpid())));
  }
  CHECK(run_report(dir, 40).status == RunStatus::failed);  // "running" and nobody at it: killed
  CHECK(run_report(dir, 40).detail == "stopped without a word (killed, or its node lost) after step 2");
  write_run_state(dir, {"preempted", 2, "SIGUSR1"});
  CHECK(read_run_state(dir)->detail == "SIGUSR1");
  CHECK(run_report(dir, 40).status == RunStatus::preempted);
  write_run_state(dir, {"failed", 2, "step 3: non-finite loss"});
  CHECK(run_report(dir, 40).status == RunStatus::failed);
  CHECK(run_report(dir, 40).detail == "step 3: non-finite loss");
  save_checkpoint(checkpoint_path(dir, 40), small_state(40));
  CHECK(run_report(dir, 40).status == RunStatus::finished);
  CHECK(std::string(run_status_name(RunStatus::preempted)) == "preempted");

  // Copied without its checkpoints (a sweep brought back from a GPU machine): the metrics say
  // whether it trained to the end, with or without the run_state.json of this hylo.
  const std::string copied = scratch.str() + "/copied";
  fs::create_directories(copied);
  std::ofstream(copied + "/metrics.jsonl") << "{\"step\":39,\"loss\":2}\n{\"step\":40,\"loss\":2}\n";
  CHECK(run_report(copied, 40).status == RunStatus::finished);
  CHECK(run_report(copied, 40).detail == "its metrics reach the last step; no final checkpoint here");
  CHECK(run_report(copied, 41).status == RunStatus::failed);  // one step short: stopped
  write_run_state(copied, {"finished", 40, ""});
  CHECK(run_report(copied, 40).status == RunStatus::finished);
  write_run_state(copied, {"failed", 40, "step 40: the checkpoint could not be written"});
  CHECK(run_report(copied, 40).status == RunStatus::failed);
}
