#include "core/error.h"
#include "bench/bench.h"

namespace hylo {

void check_mask_options(const MaskBenchOptions& o, const std::string& command) {
  HYLO_CHECK(o.H % o.kv_heads() == 0, "{}: --H {} is not a multiple of --Hkv {}", command, o.H, o.kv_heads());
  HYLO_CHECK(o.bridge <= o.block, "{}: --bridge {} exceeds --block {}", command, o.bridge, o.block);
}

}  // namespace hylo
