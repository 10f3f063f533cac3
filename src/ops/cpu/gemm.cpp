#include "ops/cpu/gemm.h"

#include <Eigen/Core>

#include "core/error.h"

namespace hylo::cpu {

template <class T>
void gemm(bool trans_a, bool trans_b, int M, int N, int K, T alpha, const T* A, const T* B, T beta, T* C) {
  HYLO_CHECK(M >= 0 && N >= 0 && K >= 0, "gemm: negative shape M={} N={} K={}", M, N, K);
  using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using CMap = Eigen::Map<const Mat>;
  Eigen::Map<Mat> c(C, M, N);
  if (M == 0 || N == 0) return;
  CMap a(A, trans_a ? K : M, trans_a ? M : K);
  CMap b(B, trans_b ? N : K, trans_b ? K : N);
  // Four branches because A and A.transpose() are different Eigen expression types.
  auto run = [&](const auto& opa, const auto& opb) {
    if (beta == T(0)) {
      c.noalias() = alpha * (opa * opb);
    } else {
      c *= beta;
      c.noalias() += alpha * (opa * opb);
    }
  };
  if (!trans_a && !trans_b) run(a, b);
  else if (!trans_a && trans_b) run(a, b.transpose());
  else if (trans_a && !trans_b) run(a.transpose(), b);
  else run(a.transpose(), b.transpose());
}

template void gemm<float>(bool, bool, int, int, int, float, const float*, const float*, float, float*);
template void gemm<double>(bool, bool, int, int, int, double, const double*, const double*, double, double*);

}  // namespace hylo::cpu
