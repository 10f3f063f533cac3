// CPU reference fused AdamW step (the oracle for kernels/adamw). Decoupled weight decay, as
// torch.optim.AdamW:
//   g  = grad * grad_scale                     (grad_scale = clip factor, 1 when not clipping)
//   p *= 1 - lr * weight_decay
//   m  = beta1 m + (1 - beta1) g
//   v  = beta2 v + (1 - beta2) g²
//   p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps),  bc_k = 1 - beta_k^step  (step >= 1)
// p, m, v are updated in place; g is read only. The bias corrections are computed in double and
// rounded to T once, exactly as the CUDA kernel receives them.
#pragma once
#include <cstdint>

namespace hylo::cpu {

template <class T>
void adamw_step(int64_t n, T* p, T* m, T* v, const T* grad, float lr, float beta1, float beta2, float eps,
                float weight_decay, int64_t step, float grad_scale);

}  // namespace hylo::cpu
