#include "bench/bench_mask_flags.h"

#include <utility>

#include "cli/flags.h"
#include "core/error.h"

namespace hylo {

bool MaskBenchFlags::take(const std::string& command, const std::string& flag, const std::string& value) {
  if (flag == "--json") {
    json = value;
    return true;
  }
  const std::pair<const char*, int*> ints[] = {{"--block", &block}, {"--bridge", &bridge}, {"--window", &window},
                                               {"--H", &H},         {"--Hkv", &Hkv},       {"--iters", &iters},
                                               {"--warmup", &warmup}};
  for (const auto& [name, field] : ints)
    if (flag == name) {
      *field = parse_positive_int(command, flag, value);
      return true;
    }
  return false;
}

void MaskBenchFlags::check(const std::string& command) {
  if (Hkv < 0) Hkv = H;
  HYLO_CHECK(H % Hkv == 0, "{}: --H {} is not a multiple of --Hkv {}", command, H, Hkv);
  HYLO_CHECK(bridge <= block, "{}: --bridge {} exceeds --block {}", command, bridge, block);
}

}  // namespace hylo
