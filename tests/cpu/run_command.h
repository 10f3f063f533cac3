// Runs a shell command for CLI tests and returns its exit code with stdout and stderr together.
#pragma once
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace hylo::test {

struct CommandResult {
  int exit_code;
  std::string output;
};

inline CommandResult run_command(const std::string& command) {
  std::array<char, 4096> buffer;
  std::string output;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  REQUIRE(pipe);
  while (size_t n = fread(buffer.data(), 1, buffer.size(), pipe)) output.append(buffer.data(), n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128, output};
}

}  // namespace hylo::test
