// FP8 numbers (OCP 8-bit floating point) as train.precision: fp8 uses them: the two formats, the
// scale that maps a tensor's amax onto a format's range, and a software encoder/decoder that
// rounds exactly as CUDA's __nv_cvt_float_to_fp8(v, __NV_SATFINITE, fmt) does (round to nearest
// even, saturating to the largest finite value, subnormals kept). The software codec is the CPU
// backend's FP8 and the oracle of the GPU cast kernel (kernels/fp8/).
//
//   e4m3: 4 exponent bits (bias 7), 3 mantissa bits, no infinities, S.1111.111 is NaN;
//         max 448, min normal 2^-6, min subnormal 2^-9.
//   e5m2: 5 exponent bits (bias 15), 2 mantissa bits, IEEE-like (infinities, NaNs);
//         max 57344, min normal 2^-14, min subnormal 2^-16.
//
// Free of fmt and C++17, so .cu files include it too.
#pragma once
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define HYLO_FP8_HOST_DEVICE __host__ __device__
#else
#define HYLO_FP8_HOST_DEVICE
#endif

namespace hylo {

enum class Fp8Format : uint8_t { e4m3, e5m2 };

HYLO_FP8_HOST_DEVICE constexpr float fp8_max(Fp8Format f) { return f == Fp8Format::e4m3 ? 448.0f : 57344.0f; }

// The scale that maps amax onto fp8_max / 2^margin (TransformerEngine's recipe). A tensor with
// no usable amax (zero, non-finite, or so small that the scale would overflow) is scaled by 1.
// The same fp32 operations on host and device, so the CPU emulation and the GPU agree bit for bit.
HYLO_FP8_HOST_DEVICE inline float fp8_scale_for_amax(float amax, Fp8Format f, int margin) {
  if (!(amax > 0.0f) || !(amax <= 3.0e38f)) return 1.0f;  // zero, NaN or infinity
  const float scale = fp8_max(f) / amax / float(1 << margin);
  return scale <= 3.0e38f ? scale : 1.0f;
}

namespace fp8_detail {
struct Layout {
  int mantissa_bits, bias;
};
inline Layout layout(Fp8Format f) { return f == Fp8Format::e4m3 ? Layout{3, 7} : Layout{2, 15}; }
}  // namespace fp8_detail

// Software encoder: v rounded to nearest even into `f`, saturated to +-fp8_max(f) (infinities
// too); NaN becomes 0x7f (both formats' canonical NaN as CUDA writes it).
inline uint8_t fp8_encode(float v, Fp8Format f) {
  const fp8_detail::Layout l = fp8_detail::layout(f);
  if (std::isnan(v)) return 0x7f;
  const uint8_t sign = std::signbit(v) ? 0x80 : 0x00;
  const double a = std::fabs(double(v));
  const int min_normal_exp = 1 - l.bias;
  // The spacing of representable values around a: fixed below the smallest normal (subnormals).
  int exp = min_normal_exp;
  if (a >= std::ldexp(1.0, min_normal_exp)) {
    std::frexp(a, &exp);  // a in [2^(exp-1), 2^exp)
    exp -= 1;
  }
  const double step = std::ldexp(1.0, exp - l.mantissa_bits);
  double q = std::nearbyint(a / step) * step;  // exact division by a power of two; ties to even
  if (q >= double(fp8_max(f))) q = double(fp8_max(f));
  if (q == 0.0) return sign;
  int q_exp = 0;
  const double q_frac = std::frexp(q, &q_exp);  // q = q_frac * 2^q_exp, q_frac in [0.5, 1)
  if (q_exp - 1 < min_normal_exp)  // subnormal: exponent field 0, mantissa = q / smallest step
    return uint8_t(sign | uint8_t(q / std::ldexp(1.0, min_normal_exp - l.mantissa_bits)));
  const int exponent_field = q_exp - 1 + l.bias;
  const int mantissa = int((q_frac * 2.0 - 1.0) * double(1 << l.mantissa_bits));
  return uint8_t(sign | (exponent_field << l.mantissa_bits) | mantissa);
}

inline float fp8_decode(uint8_t byte, Fp8Format f) {
  const fp8_detail::Layout l = fp8_detail::layout(f);
  const int exponent_bits = 7 - l.mantissa_bits;
  const int exponent_field = (byte >> l.mantissa_bits) & ((1 << exponent_bits) - 1);
  const int mantissa = byte & ((1 << l.mantissa_bits) - 1);
  const float sign = (byte & 0x80) ? -1.0f : 1.0f;
  const int all_ones = (1 << exponent_bits) - 1;
  if (f == Fp8Format::e4m3 && exponent_field == all_ones && mantissa == 7) return NAN;
  if (f == Fp8Format::e5m2 && exponent_field == all_ones) return mantissa == 0 ? sign * INFINITY : NAN;
  if (exponent_field == 0) return sign * float(std::ldexp(double(mantissa), 1 - l.bias - l.mantissa_bits));
  return sign * float(std::ldexp(1.0 + double(mantissa) / double(1 << l.mantissa_bits), exponent_field - l.bias));
}

}  // namespace hylo
