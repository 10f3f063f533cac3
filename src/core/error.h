// HYLO_CHECK: the one error family. Throws hylo::Error whose message is one line a user can act
// on; the call site (file:line) is kept separately for debugging so that user-facing errors stay
// short (SPEC §8).
#pragma once
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace hylo {

class Error : public std::runtime_error {
 public:
  Error(std::string message, const char* file, int line)
      : std::runtime_error(std::move(message)), where_(fmt::format("{}:{}", file, line)) {}
  const std::string& where() const { return where_; }

 private:
  std::string where_;
};

}  // namespace hylo

// HYLO_CHECK(cond, "fmt {}", args...): throws hylo::Error when cond is false.
#define HYLO_CHECK(cond, ...)                                                \
  do {                                                                       \
    if (!(cond)) [[unlikely]]                                                \
      throw ::hylo::Error(::fmt::format(__VA_ARGS__), __FILE__, __LINE__);   \
  } while (0)

#define HYLO_FAIL(...) throw ::hylo::Error(::fmt::format(__VA_ARGS__), __FILE__, __LINE__)
