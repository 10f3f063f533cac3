// Graceful stop (SPEC §7), as a scheduler's preemption or time limit needs it: SIGTERM, SIGINT and
// SIGUSR1 (what `sbatch --signal=B:USR1@N` and `scancel -s USR1` send) only set a flag; the
// trainer looks at it at every step boundary, the ranks agree on it with one sum (a signal may
// reach some ranks only, or in different steps), and the run writes a checkpoint of the step just
// done and exits with kExitPreempted, which a job script turns into `scontrol requeue`. A second
// signal stops the process at once (that signal's default action): the way out when the
// checkpoint itself hangs.
#pragma once

namespace hylo {

// EX_TEMPFAIL (sysexits.h): "try again later". The run checkpointed at a step boundary and stopped
// on a signal; `hylo train ... --resume auto` continues it bit-identically.
inline constexpr int kExitPreempted = 75;

// Installs the handlers for its lifetime (one at a time in a process), restoring the previous ones
// after; signals arriving before it follow their earlier disposition.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The first stop signal received since construction, 0 when none.
  int received() const;
};

// "SIGUSR1", "SIGTERM", ... for a log line.
const char* signal_name(int signal);

}  // namespace hylo
