// A fresh folder per test case, hylo_<tag>_<pid> under the system's temporary directory, emptied
// when made and removed at the end.
#pragma once
#include <unistd.h>

#include <filesystem>
#include <string>

namespace hylo::test {

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag)
      : path(std::filesystem::temp_directory_path() / ("hylo_" + tag + "_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

}  // namespace hylo::test
