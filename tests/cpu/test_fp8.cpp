// train.precision: fp8 on the CPU, the exact emulation every GPU result is held to: the software
// e4m3/e5m2 codec, delayed scaling's bookkeeping, the FP8 linear against fp64, a tiny training run
// close to the fp32 one that resumes bit-exact with its amax histories, and the config's errors.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "error_of.h"
#include "run_command.h"
#include "training_workspace.h"
#include "checkpoint/checkpoint.h"
#include "config/config.h"
#include "core/fp8.h"
#include "ops/fp8_linear.h"

using namespace hylo;
namespace fs = std::filesystem;

namespace {

constexpr Fp8Format e4m3 = Fp8Format::e4m3, e5m2 = Fp8Format::e5m2;

Tensor random_matrix(int64_t rows, int64_t cols, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(size_t(rows * cols));
  for (float& x : v) x = normal(rng);
  return Tensor::from_vector(v, {rows, cols});
}

// ||got - want|| / ||want|| (Frobenius), want in fp64.
double relative_error(const Tensor& got, const std::vector<double>& want) {
  const std::vector<float> g = got.to_vector<float>();
  REQUIRE(g.size() == want.size());
  double diff = 0, norm = 0;
  for (size_t i = 0; i < g.size(); ++i) diff += (g[i] - want[i]) * (g[i] - want[i]), norm += want[i] * want[i];
  return std::sqrt(diff / norm);
}

// C (M, N) = A (M, K) @ B (K, N) in fp64 with op = transpose when asked (row-major).
std::vector<double> matmul64(const Tensor& A, bool ta, const Tensor& B, bool tb) {
  const std::vector<float> a = A.to_vector<float>(), b = B.to_vector<float>();
  const int64_t M = ta ? A.size(1) : A.size(0), K = ta ? A.size(0) : A.size(1), N = tb ? B.size(0) : B.size(1);
  std::vector<double> c(size_t(M * N));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k)
        s += double(a[size_t(ta ? k * M + m : m * K + k)]) * double(b[size_t(tb ? n * K + k : k * N + n)]);
      c[size_t(m * N + n)] = s;
    }
  return c;
}

float scale_inv(const Fp8Operand& op) { return op.scale_inv.to_vector<float>()[0]; }

Tensor filled(float amax) { return Tensor::from_vector(std::vector<float>{amax, -amax / 2, 0.0f, amax / 4}, {2, 2}); }

}  // namespace

TEST_CASE("fp8 codec: known values, saturation, subnormals, ties to even, all e4m3 codes round-trip") {
  CHECK(fp8_decode(0x7e, e4m3) == 448.0f);  // S.1111.110: e4m3's largest (S.1111.111 is NaN)
  CHECK(fp8_decode(0x7b, e5m2) == 57344.0f);
  CHECK(fp8_encode(448.0f, e4m3) == 0x7e);
  CHECK(fp8_encode(57344.0f, e5m2) == 0x7b);
  // Saturation (__NV_SATFINITE): beyond the largest finite value, infinities too.
  CHECK(fp8_encode(1.0e6f, e4m3) == 0x7e);
  CHECK(fp8_encode(-1.0e6f, e4m3) == 0xfe);
  CHECK(fp8_encode(INFINITY, e4m3) == 0x7e);
  CHECK(fp8_encode(70000.0f, e5m2) == 0x7b);
  CHECK(fp8_encode(-INFINITY, e5m2) == 0xfb);
  // Smallest subnormals, and half of them rounding to even (zero).
  CHECK(fp8_decode(0x01, e4m3) == std::ldexp(1.0f, -9));
  CHECK(fp8_decode(0x01, e5m2) == std::ldexp(1.0f, -16));
  CHECK(fp8_encode(std::ldexp(1.0f, -9), e4m3) == 0x01);
  CHECK(fp8_encode(std::ldexp(1.0f, -16), e5m2) == 0x01);
  CHECK(fp8_encode(std::ldexp(1.0f, -10), e4m3) == 0x00);        // tie between 0 and 2^-9: even is 0
  CHECK(fp8_encode(std::ldexp(1.5f, -9), e4m3) == 0x02);         // tie between 1 and 2 steps: even is 2
  CHECK(fp8_encode(std::ldexp(1.01f, -10), e4m3) == 0x01);       // just above the tie
  // Ties to even between normals: 1 + 1/16 lies halfway between 1 (mantissa 0) and 1.125 (1).
  CHECK(fp8_encode(1.0625f, e4m3) == 0x38);
  CHECK(fp8_encode(1.1875f, e4m3) == 0x3a);  // halfway between 1.125 (1) and 1.25 (2): 2
  CHECK(fp8_encode(1.125f, e5m2) == 0x3c);   // halfway between 1 (0) and 1.25 (1) in e5m2: 1.0
  CHECK(fp8_encode(1.3f, e4m3) == 0x3a);     // 1.25 is nearest
  // Zero, negative zero, negatives.
  CHECK(fp8_encode(0.0f, e4m3) == 0x00);
  CHECK(fp8_encode(-0.0f, e4m3) == 0x80);
  CHECK(fp8_encode(-1.0f, e4m3) == 0xb8);
  CHECK(fp8_decode(0xb8, e4m3) == -1.0f);
  CHECK(fp8_encode(-2.0f, e5m2) == 0xc0);
  CHECK(std::isnan(fp8_decode(0x7f, e4m3)));
  CHECK(std::isinf(fp8_decode(0x7c, e5m2)));
  CHECK(fp8_encode(NAN, e4m3) == 0x7f);
  // Every e4m3 and e5m2 code decodes to a value that encodes back to it (NaNs and infinities aside).
  int checked = 0;
  for (int b = 0; b < 256; ++b) {
    const float v = fp8_decode(uint8_t(b), e4m3);
    if (std::isnan(v)) continue;
    INFO("e4m3 code ", b, " = ", v);
    CHECK(fp8_encode(v, e4m3) == b);
    ++checked;
  }
  CHECK(checked == 254);
  for (int b = 0; b < 256; ++b) {
    const float v = fp8_decode(uint8_t(b), e5m2);
    if (!std::isfinite(v)) continue;
    INFO("e5m2 code ", b, " = ", v);
    CHECK(fp8_encode(v, e5m2) == b);
  }
}

TEST_CASE("fp8 delayed scaling: the first step scales by each tensor's own amax, then by the history's maximum") {
  Fp8Recipe recipe;
  recipe.history = 2;
  Fp8State state(recipe, 1, Device::cpu);
  CHECK(state.steps_recorded() == 0);
  // Step 1: no history, so the tensor's own amax: scale 448 / 2.
  CHECK(scale_inv(state.quantize(filled(2.0f), 0, Fp8Role::x, false, true)) == 1.0f / (448.0f / 2.0f));
  // The gradient role is e5m2: 57344 / amax.
  CHECK(scale_inv(state.quantize(filled(8.0f), 0, Fp8Role::dy, false, true)) == 1.0f / (57344.0f / 8.0f));
  state.roll();
  CHECK(state.steps_recorded() == 1);
  // Step 2: scaled by the history (amax 2), not by this tensor's amax 4; the 4 is recorded.
  CHECK(scale_inv(state.quantize(filled(4.0f), 0, Fp8Role::x, false, true)) == 1.0f / 224.0f);
  // A cast that does not record (evaluation) leaves the step's amax alone.
  state.quantize(filled(100.0f), 0, Fp8Role::x, false, false);
  state.roll();
  // History {4, 2}: the maximum, 4.
  CHECK(scale_inv(state.quantize(filled(1.0f), 0, Fp8Role::x, false, true)) == 1.0f / 112.0f);
  state.roll();  // {1, 4}: still 4
  CHECK(scale_inv(state.quantize(filled(1.0f), 0, Fp8Role::x, false, true)) == 1.0f / 112.0f);
  state.roll();  // {1, 1}: the 4 has rolled out of the 2-step history
  CHECK(scale_inv(state.quantize(filled(1.0f), 0, Fp8Role::x, false, true)) == 1.0f / 448.0f);
  // A skipped step's amaxes are forgotten.
  state.discard_step();
  state.roll();  // {1 (recorded above, then discarded: 0), 1}
  const std::vector<float> history = state.amax_history().to_vector<float>();
  CHECK(history[0] == 0.0f);  // x role, newest
  CHECK(history[1] == 1.0f);
  CHECK(history[4] == 0.0f);  // dy role (index 2), newest; {0, 0} since step 1's 8 has rolled out
  CHECK(history[5] == 0.0f);
  // The dy role's history is empty again: scale 1.
  CHECK(scale_inv(state.quantize(filled(1.0f), 0, Fp8Role::dy, false, false)) == 1.0f);

  // Restoring a history recomputes the scales from it.
  Fp8State restored(recipe, 1, Device::cpu);
  restored.restore(Tensor::from_vector(std::vector<float>{0, 0.5f, 0, 0, 0, 0}, {3, 2}), 7, "ckpt");
  CHECK(restored.steps_recorded() == 7);
  CHECK(scale_inv(restored.quantize(filled(3.0f), 0, Fp8Role::x, false, true)) == 1.0f / 896.0f);
  CHECK(test::error_of([&] { restored.restore(Tensor::zeros({3, 4}, DType::f32), 1, "ckpt.h5"); })
            .starts_with("ckpt.h5: the FP8 amax history is f32 (3, 4), this run's FP8 linears need f32 (3, 2)"));

  // Current scaling: every cast by its own amax, history or not.
  recipe.current_scaling = true;
  Fp8State current(recipe, 1, Device::cpu);
  current.quantize(filled(2.0f), 0, Fp8Role::x, false, true);
  current.roll();
  CHECK(scale_inv(current.quantize(filled(4.0f), 0, Fp8Role::x, false, true)) == 1.0f / 112.0f);
}

TEST_CASE("fp8 shared input: linears declared to read one input cast it once, under the first one's x role") {
  Fp8State state(Fp8Recipe{}, 4, Device::cpu);
  state.share_input(0, 3);  // as q, k, v; linear 3 (o) reads its own input
  const Tensor x = filled(2.0f), other = filled(4.0f);
  const Fp8Operand q = state.input(x, 0, true), k = state.input(x, 1, true), v = state.input(x, 2, true);
  CHECK(k.codes.raw() == q.codes.raw());  // the same cast, not an equal one
  CHECK(v.codes.raw() == q.codes.raw());
  CHECK(state.input(other, 1, true).codes.raw() != q.codes.raw());  // another tensor: cast again
  CHECK(state.input(x, 3, true).codes.raw() != q.codes.raw());      // not in the group
  CHECK(state.input(x, 1, false).codes.raw() != q.codes.raw());     // evaluation casts apart
  state.roll();
  const std::vector<float> history = state.amax_history().to_vector<float>();
  const int H = Fp8Recipe{}.history;
  CHECK(history[size_t(0 * H)] == 4.0f);  // q's x role: both tensors the group cast (2, then 4 for k)
  CHECK(history[size_t(3 * H)] == 0.0f);  // k's x role: never recorded
  CHECK(history[size_t(6 * H)] == 0.0f);  // v's
  CHECK(history[size_t(9 * H)] == 2.0f);  // o's own
  // After the roll the group casts afresh (the scales moved).
  CHECK(state.input(x, 0, true).codes.raw() != q.codes.raw());
  CHECK(test::error_of([&] { state.share_input(2, 3); }) == "fp8: linears 2 .. 4 of 4");
}

TEST_CASE("fp8 linear on the CPU: forward and both gradients within e4m3/e5m2 precision of fp64, and quantized") {
  const int N = 48, in = 64, out = 40;
  for (const bool hybrid : {true, false}) {
    CAPTURE(hybrid);
    Fp8Recipe recipe;
    recipe.grad_format = hybrid ? e5m2 : e4m3;
    Fp8State state(recipe, 1, Device::cpu);
    const Tensor X = random_matrix(N, in, 1), W = random_matrix(out, in, 2, 0.05f), dY = random_matrix(N, out, 3, 1e-3f);
    Var x(X.clone(), true, "x"), w(W.clone(), true, "w");
    Var y = fp8_linear(x, w, state, 0);
    y.backward(dY);
    const double y_error = relative_error(y.value(), matmul64(X, false, W, true));
    const double dx_error = relative_error(x.grad(), matmul64(dY, false, W, false));
    const double dw_error = relative_error(w.grad(), matmul64(dY, true, X, false));
    MESSAGE("relative errors: y " << y_error << ", dx " << dx_error << ", dw " << dw_error);
    // Per element e4m3 rounds within 2^-4 relative (e5m2 2^-3); errors of independent products average.
    CHECK(y_error < 0.06);
    CHECK(dx_error < (hybrid ? 0.1 : 0.06));
    CHECK(dw_error < (hybrid ? 0.1 : 0.06));
    // ...and the quantization is there to see: fp32 gets within 1e-6.
    CHECK(y_error > 1e-3);
    CHECK(dx_error > 1e-3);
    CHECK(dw_error > 1e-3);
  }
}

TEST_CASE("fp8 training on the CPU: close to fp32 over 20 steps, resumes bit-exact with its amax histories") {
  test::TrainingWorkspace ws("fp8_train");
  const std::string steps = "--set train.steps=20 --set train.eval_every=10 --set train.checkpoint_every=10 ";
  const std::string fp8 = steps + "--set train.precision=fp8 ";
  REQUIRE(test::run_command(ws.train("fp32", steps)).exit_code == 0);
  REQUIRE(test::run_command(ws.train("straight", fp8)).exit_code == 0);
  const auto first = test::run_command(ws.train("split", fp8 + "--stop-at 10"));
  REQUIRE_MESSAGE(first.exit_code == 0, first.output);
  const auto second = test::run_command(ws.train("split", fp8 + "--resume auto"));
  REQUIRE_MESSAGE(second.exit_code == 0, second.output);
  CHECK(second.output.find("resumed from") != std::string::npos);
  const auto straight = ws.loss_rows("straight"), split = ws.loss_rows("split");
  REQUIRE(straight.size() == 20);
  REQUIRE(split.size() == 20);
  for (size_t i = 0; i < straight.size(); ++i) CHECK(straight[i] == split[i]);

  // Finite and close to the fp32 run (not equal to it: FP8 changes the numbers).
  const auto rows = ws.metrics_rows("straight"), reference = ws.metrics_rows("fp32");
  std::vector<double> losses, reference_losses;
  for (const auto& r : rows)
    if (r.contains("loss")) losses.push_back(r["loss"].get<double>());
  for (const auto& r : reference)
    if (r.contains("loss")) reference_losses.push_back(r["loss"].get<double>());
  REQUIRE(losses.size() == reference_losses.size());
  bool differs = false;
  for (size_t i = 0; i < losses.size(); ++i) {
    CAPTURE(i);
    CHECK(std::isfinite(losses[i]));
    CHECK(std::fabs(losses[i] - reference_losses[i]) < 0.05 * reference_losses[i]);
    differs |= losses[i] != reference_losses[i];
  }
  CHECK(differs);
  MESSAGE("final loss fp8 " << losses.back() << ", fp32 " << reference_losses.back());
  CHECK(losses.back() < losses.front() - 0.1);  // it learns

  // The checkpoint holds the histories: 2 dense layers x 6 linears x {x, w, dy}, 16 steps, 10 recorded.
  const CheckpointState saved = load_checkpoint((ws.dir / "split/checkpoints/step_10.h5").string(), false);
  REQUIRE(saved.fp8.size() == 2);
  CHECK(saved.fp8[0].name == "amax_history");
  CHECK(saved.fp8[0].value.shape() == Shape{36, 16});
  CHECK(saved.fp8[1].value.to_vector<int64_t>()[0] == 10);
  const std::vector<float> history = saved.fp8[0].value.to_vector<float>();
  for (int role = 0; role < 36; ++role) {
    CAPTURE(role);
    // k and v (linears 1 and 2 of each layer's six) use q's cast of the normed x: their own x roles
    // are never recorded.
    const int linear = role / 3;
    const bool shared_x = role % 3 == 0 && (linear % 6 == 1 || linear % 6 == 2);
    if (shared_x)
      CHECK(history[size_t(role * 16 + 9)] == 0.0f);
    else
      CHECK(history[size_t(role * 16 + 9)] > 0.0f);  // 10 steps recorded
    CHECK(history[size_t(role * 16 + 10)] == 0.0f);  // not more
  }
  // A bf16 run has no /fp8, and the precisions do not resume each other's checkpoints.
  CHECK(load_checkpoint((ws.dir / "fp32/checkpoints/step_10.h5").string(), false).fp8.empty());
  fs::create_directories(ws.dir / "mixed/checkpoints");
  fs::copy_file(ws.dir / "fp32/checkpoints/step_10.h5", ws.dir / "mixed/checkpoints/step_10.h5");
  const auto mixed = test::run_command(ws.train("mixed", fp8 + "--resume auto"));
  CHECK(mixed.exit_code != 0);
  CHECK(mixed.output.find("step_10.h5: saved by a train.precision=bf16 run (no /fp8 amax histories), this run is "
                          "fp8; resume with train.precision=bf16") != std::string::npos);
  const auto reverse = test::run_command(ws.train("split", steps + "--resume auto"));
  CHECK(reverse.exit_code != 0);
  CHECK(reverse.output.find("saved by a train.precision=fp8 run (it holds /fp8), this run is bf16") !=
        std::string::npos);
}

TEST_CASE("config: train.precision and the fp8 keys take only their values") {
  auto error_for = [](const std::string& override_) {
    return test::error_of([&] { config_from_yaml_text("device: cpu\n", "x.yaml", {override_}); });
  };
  CHECK(error_for("train.precision=fp16").find("train.precision='fp16' is not one of bf16, fp8") != std::string::npos);
  CHECK(error_for("train.fp8_format=e5m2").find("train.fp8_format='e5m2' is not one of hybrid, e4m3") !=
        std::string::npos);
  CHECK(error_for("train.fp8_scaling=jit").find("train.fp8_scaling='jit' is not one of delayed, current") !=
        std::string::npos);
  CHECK(error_for("train.fp8_amax_history=0").find("train.fp8_amax_history=0 must be >= 1") != std::string::npos);
  CHECK(error_for("train.precision=fp8") == "");
  CHECK(Config{}.train.precision == "bf16");
}
