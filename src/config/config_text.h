// Text helpers that config.cpp (YAML in and out) and config_validate.cpp (its checks) share.
#pragma once
#include <string>

#include "config/config.h"

namespace hylo {

// The shortest YAML float that reads back to the same bits (".nan", ".inf", 1.0e-05).
std::string yaml_double(double v);
// "PATH: ", the prefix of a config's errors, or "" for a config not read from a file.
std::string config_error_prefix(const Config& c);

}  // namespace hylo
