// The small hybrid most model tests start from: 2 layers (pattern LG: one PBB layer, one full),
// width 32, 2 heads, PBB blocks of 8 with a bridge of 2. Each test changes what it is about.
#pragma once
#include "nn/model_config.h"

namespace hylo::test {

inline ModelConfig small_hybrid(int vocab_size) {
  ModelConfig c;
  c.vocab_size = vocab_size;
  c.d_model = 32;
  c.n_layers = 2;
  c.n_heads = 2;
  c.pattern = "LG";
  c.local = {"pbb", 0, 8, 2};
  return c;
}

}  // namespace hylo::test
