// The flags that `hylo bench attention` and `hylo bench decode` share: the masks' sizes (pbb block
// and bridge, swa window), the heads, the timing and the JSON path.
#pragma once
#include <string>

namespace hylo {

struct MaskBenchFlags {
  int block = 512, bridge = 128, window = 512;
  int H = 16, Hkv = -1;  // Hkv -1: same as H (MHA)
  int iters, warmup;     // each command has its own defaults
  std::string json;

  MaskBenchFlags(int default_iters, int default_warmup) : iters(default_iters), warmup(default_warmup) {}
  // Sets the field `flag` names from `value` (a positive integer; the path for --json). False when
  // `flag` is none of these.
  bool take(const std::string& command, const std::string& flag, const std::string& value);
  // After the last flag: Hkv defaults to H; H must be a multiple of Hkv and the bridge at most the block.
  void check(const std::string& command);
};

}  // namespace hylo
