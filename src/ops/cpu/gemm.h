// CPU reference matrix product (the oracle for kernels/gemm and the CPU backend's dense layers).
// All buffers are contiguous row-major; nothing is accumulated unless beta says so.
//
//   C(M,N) = alpha * op(A) * op(B) + beta * C
//   op(A) is (M,K): A is stored (M,K), or (K,M) when trans_a
//   op(B) is (K,N): B is stored (K,N), or (N,K) when trans_b
// beta == 0 overwrites C without reading it (BLAS semantics: NaN garbage in C is ignored).
// The last bits depend on the buffers' addresses modulo the vector width (where Eigen's packets
// start): give it Tensor memory (64-byte aligned) or offsets into it, never a std::vector, so that
// runs which must agree bit for bit do (experiments/results/training/cpu_isa_x86-64-v3_xeon.json).
#pragma once

namespace hylo::cpu {

template <class T>
void gemm(bool trans_a, bool trans_b, int M, int N, int K, T alpha, const T* A, const T* B, T beta, T* C);

}  // namespace hylo::cpu
