// The message of the hylo::Error that fn throws, or "" when it throws none: what the tests of the
// one-line errors for bad input (SPEC §8) compare.
#pragma once
#include <functional>
#include <string>

#include "core/error.h"

namespace hylo::test {

inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace hylo::test
