#include "train/stop_signal.h"

#include <signal.h>

#include <array>

#include "core/error.h"

namespace hylo {
namespace {

constexpr std::array<int, 3> kStopSignals = {SIGTERM, SIGINT, SIGUSR1};

// Only async-signal-safe work in the handler: a write to a sig_atomic_t, and for a second signal
// signal() + raise() (both on POSIX's list).
volatile sig_atomic_t g_received = 0;
bool g_installed = false;
std::array<struct sigaction, kStopSignals.size()> g_previous;

void on_stop_signal(int signal) {
  if (g_received != 0) {
    ::signal(signal, SIG_DFL);
    ::raise(signal);
    return;
  }
  g_received = signal;
}

}  // namespace

StopSignals::StopSignals() {
  HYLO_CHECK(!g_installed, "stop signals: installed twice in one process");
  g_received = 0;
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // reads and writes under way carry on; the flag waits for the step's end
  for (size_t i = 0; i < kStopSignals.size(); ++i)
    HYLO_CHECK(::sigaction(kStopSignals[i], &action, &g_previous[i]) == 0, "stop signals: cannot install a handler for {}",
               signal_name(kStopSignals[i]));
  g_installed = true;
}

StopSignals::~StopSignals() {
  for (size_t i = 0; i < kStopSignals.size(); ++i) ::sigaction(kStopSignals[i], &g_previous[i], nullptr);
  g_installed = false;
}

int StopSignals::received() const { return g_received; }

const char* signal_name(int signal) {
  switch (signal) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGUSR1: return "SIGUSR1";
    case SIGUSR2: return "SIGUSR2";
    case SIGHUP: return "SIGHUP";
  }
  return "a signal";
}

}  // namespace hylo
