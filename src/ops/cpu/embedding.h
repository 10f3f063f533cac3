// CPU reference token embedding (the oracle for kernels/embedding).
// Legend: N tokens, V vocabulary rows, D model width. Row-major.
//
//   forward : out_ND[n] = table_VD[ids_N[n]]
//   backward: dtable_VD[ids_N[n]] += dout_ND[n] for every n, in increasing n
//             (ACCUMULATES into dtable: it is a parameter gradient, and a tied LM head adds to it
//             too). ids outside [0, V) throw.
#pragma once
#include <cstdint>

namespace hylo::cpu {

template <class T>
void embedding_forward(int N, int V, int D, const int32_t* ids_N, const T* table_VD, T* out_ND);

template <class T>
void embedding_backward(int N, int V, int D, const int32_t* ids_N, const T* dout_ND, T* dtable_VD);

}  // namespace hylo::cpu
