// The small model the scoring tests evaluate: small_hybrid at width 16 with an FFN of 32 and PBB
// blocks of 4 (bridge 2), and init_std 0.5, so that its predictions are peaked and depend on the
// input.
#pragma once
#include "nn/model_config.h"
#include "small_model.h"

namespace hylo::test {

inline ModelConfig peaked_hybrid(int vocab_size) {
  ModelConfig c = small_hybrid(vocab_size);
  c.d_model = 16;
  c.ffn_hidden = 32;
  c.local.block = 4;
  c.init_std = 0.5;
  return c;
}

}  // namespace hylo::test
