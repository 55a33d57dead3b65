// small_gemv, the CUDA Talker's weight product of a few rows, against cuBLAS's GEMM of the same bf16 inputs as
// the Talker calls it (bf16 in, float32 accumulation and out): each epilogue at every row count it takes
// (1..8, so each rounded-up kernel also runs with masked rows) on the shapes of the released models' decode
// products. The two sum the same bf16 x bf16 products in different orders, so they agree to float32
// rounding: max|gemv - cublas| <= 1e-3 * max|cublas| per product. The swiglu epilogue is compared with
// swiglu of cuBLAS's product computed on the host, allowing its own bf16 rounding of each output.
#include "gpu_test.hpp"
#include "talker_cuda_kernels.hpp"

#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace {

using qwen3_tts::cuda::bf16;
using qwen3_tts::cuda::gemv_epilogue;
using qwen3_tts::cuda::small_gemv;

constexpr float tol = 1e-3f;

float bf16_value(std::uint16_t b) {
  const std::uint32_t u = std::uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Deterministic bf16 bit patterns uniform in [-scale, scale).
std::vector<std::uint16_t> random_bf16(std::size_t n, std::uint64_t seed, float scale) {
  std::vector<std::uint16_t> v(n);
  std::uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  for (auto& b : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const float f = (float(std::uint32_t(s >> 40)) / float(1u << 24) * 2.0f - 1.0f) * scale;
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    b = std::uint16_t(u >> 16);
  }
  return v;
}

std::vector<float> random_f32(std::size_t n, std::uint64_t seed) {
  const auto bits = random_bf16(n, seed, 1.0f);
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = bf16_value(bits[i]) * 3.0f;
  return v;
}

template <class T>
struct device_array {
  T* p = nullptr;
  explicit device_array(std::size_t n) { MSTAR_CUDA_REQUIRE(cudaMalloc(&p, n * sizeof(T))); }
  device_array(const device_array&) = delete;
  device_array& operator=(const device_array&) = delete;
  ~device_array() { cudaFree(p); }
  template <class H>
  void upload(const std::vector<H>& h) {
    static_assert(sizeof(H) == sizeof(T));
    MSTAR_CUDA_REQUIRE(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  template <class H>
  std::vector<H> download(std::size_t n) const {
    static_assert(sizeof(H) == sizeof(T));
    std::vector<H> h(n);
    MSTAR_CUDA_REQUIRE(cudaDeviceSynchronize());
    MSTAR_CUDA_REQUIRE(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
};

struct blas_handle {
  cublasHandle_t h = nullptr;
  blas_handle() { REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS); }
  ~blas_handle() { cublasDestroy(h); }
};

// One product's inputs on the device: w [out][in], x [8][ldx] (every row count reads a prefix of it).
struct product {
  int out, in, ldx;
  device_array<bf16> w, x;
  product(int out_, int in_, int ldx_, std::uint64_t seed)
      : out(out_), in(in_), ldx(ldx_), w(std::size_t(out_) * in_), x(std::size_t(8) * ldx_) {
    w.upload(random_bf16(std::size_t(out) * in, seed, 1.0f / std::sqrt(float(in))));
    x.upload(random_bf16(std::size_t(8) * ldx, seed + 1, 1.0f));
  }
  // cuBLAS's y [rows][out], as talker_cuda's gemm computes it.
  std::vector<float> reference(const blas_handle& blas, int rows) const {
    device_array<float> y(std::size_t(rows) * out);
    const float one = 1.0f, zero = 0.0f;
    REQUIRE(cublasGemmEx(blas.h, CUBLAS_OP_T, CUBLAS_OP_N, out, rows, in, &one, w.p, CUDA_R_16BF, in, x.p, CUDA_R_16BF,
                         ldx, &zero, y.p, CUDA_R_32F, out, CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
    return y.download<float>(std::size_t(rows) * out);
  }
};

constexpr float sentinel = -12345.0f;

// An [8][ld] output of which rows [0, rows) and columns [0, width) hold the product: error is the largest
// of error_at(r, c, i) (i = r * ld + c) and big the largest |wanted value| there; clobbered counts the
// entries outside that changed(i) says were written.
struct comparison {
  float error = 0, big = 0;
  int clobbered = 0;
  void check() const {
    CHECK(big > 0.0f);
    CHECK(error <= tol * big);
    CHECK(clobbered == 0);
  }
};
template <class ErrorAt, class Changed>
comparison compare(int rows, int width, int ld, ErrorAt error_at, Changed changed) {
  comparison c;
  for (int r = 0; r < 8; ++r)
    for (int o = 0; o < ld; ++o) {
      const std::size_t i = std::size_t(r) * ld + o;
      if (r >= rows || o >= width) {
        c.clobbered += changed(i);
        continue;
      }
      const auto [error, wanted] = error_at(r, o, i);
      c.error = std::max(c.error, error);
      c.big = std::max(c.big, std::fabs(wanted));
    }
  return c;
}

// Runs the store or residual epilogue at every row count into y of ldy = out + 3 (columns past out, and
// rows past `rows`, hold a sentinel that must survive) and compares each with cuBLAS's product (plus the
// residual's starting values).
void check_store_or_residual(gemv_epilogue e, int out, int in, int ldx) {
  const blas_handle blas;
  const product p(out, in, ldx, std::uint64_t(out) * 7919u + std::uint64_t(in));
  const int ldy = out + 3;
  const std::size_t n = std::size_t(8) * ldy;
  const bool residual = e == gemv_epilogue::residual;
  const std::vector<float> start = residual ? random_f32(n, std::uint64_t(in) + 99) : std::vector<float>(n, sentinel);
  device_array<float> y(n);
  for (int rows = 1; rows <= 8; ++rows) {
    y.upload(start);
    small_gemv(e, p.w.p, out, in, p.x.p, ldx, y.p, nullptr, ldy, rows, nullptr);
    const auto got = y.download<float>(n);
    const auto ref = p.reference(blas, rows);
    const comparison c = compare(
        rows, out, ldy,
        [&](int r, int o, std::size_t i) {
          const float product = ref[std::size_t(r) * out + o];
          return std::pair{std::fabs(got[i] - (product + (residual ? start[i] : 0.0f))), product};
        },
        [&](std::size_t i) { return got[i] != start[i]; });
    INFO("out ", out, ", in ", in, ", ldx ", ldx, ", rows ", rows, ": max|gemv - cublas| ", c.error, ", max|cublas| ",
         c.big);
    c.check();
  }
}

struct shape {
  int out, in, ldx;
};
// The decode step's products at the released sizes (0.6B: qkv 4096 x 1024, o 1024 x 2048, down 1024 x 3072,
// codec head 3072 x 1024; 1.7B: o 2048 x 2048 and down 2048 x 6144), the predictor head's input of stride
// 2 x hidden (its first pass), and one whose out and in/8 are multiples of nothing the kernel tiles by.
const std::vector<shape> shapes = {{4096, 1024, 1024}, {1024, 2048, 2048}, {1024, 3072, 3072},
                                   {3072, 1024, 1024}, {2048, 1024, 1024}, {2048, 2048, 2048},
                                   {2048, 6144, 6144}, {2048, 1024, 2048}, {1001, 1000, 1000}};

float silu(float g) { return g / (1.0f + std::exp(-g)); }

} // namespace

TEST_CASE("small_gemv's store epilogue writes cuBLAS's products at 1 to 8 rows, and nothing past its rows and outputs" *
          doctest::skip(!mstar::test::has_gpu())) {
  for (const shape& s : shapes)
    check_store_or_residual(gemv_epilogue::store, s.out, s.in, s.ldx);
}

TEST_CASE("small_gemv's residual epilogue adds cuBLAS's products to a nonzero float32 residual at 1 to 8 rows" *
          doctest::skip(!mstar::test::has_gpu())) {
  for (const shape& s : shapes)
    check_store_or_residual(gemv_epilogue::residual, s.out, s.in, s.ldx);
}

TEST_CASE("small_gemv's swiglu epilogue writes swiglu of cuBLAS's gate and up products at 1 to 8 rows" *
          doctest::skip(!mstar::test::has_gpu())) {
  const blas_handle blas;
  // The 0.6B's gate_up (inter 3072 of hidden 1024), the 1.7B's (6144 of 2048), and an inter of no round size.
  for (const auto& [inter, in] : {std::pair{3072, 1024}, std::pair{6144, 2048}, std::pair{1000, 1000}}) {
    const product p(2 * inter, in, in, std::uint64_t(inter) + 5);
    const std::size_t n = std::size_t(8) * inter;
    device_array<bf16> act(n);
    const std::vector<std::uint16_t> start(n, 0x7fc0); // NaN: must survive past `rows`
    for (int rows = 1; rows <= 8; ++rows) {
      act.upload(start);
      small_gemv(gemv_epilogue::swiglu, p.w.p, 2 * inter, in, p.x.p, in, nullptr, act.p, inter, rows, nullptr);
      const auto got = act.download<std::uint16_t>(n);
      const auto ref = p.reference(blas, rows);
      const comparison c = compare(
          rows, inter, inter,
          [&](int r, int o, std::size_t i) {
            const float* gate_up = ref.data() + std::size_t(r) * 2 * inter;
            const float want = silu(gate_up[o]) * gate_up[inter + o];
            // The kernel rounds its value to bf16: up to half a bf16 step, 2^-8 of the value.
            return std::pair{std::fabs(bf16_value(got[i]) - want) - std::ldexp(std::fabs(want), -8), want};
          },
          [&](std::size_t i) { return got[i] != start[i]; });
      INFO("inter ", inter, ", in ", in, ", rows ", rows, ": max error beyond bf16 rounding ", c.error,
           ", max|swiglu| ", c.big);
      c.check();
    }
  }
}

TEST_CASE("small_gemv with the norm prologue gives rms_norm then small_gemv's bits, store and swiglu, 1 to 8 rows" *
          doctest::skip(!mstar::test::has_gpu())) {
  // The prologue takes rms_norm's sums in rms_norm's order, so the two paths agree bit for bit, not to a tolerance.
  // The 0.6B's qkv (4096 x 1024) and gate_up (2 x 3072 x 1024), the 1.7B's gate_up (2 x 6144 x 2048), and a
  // shape of no round size.
  const std::vector<std::tuple<int, int, gemv_epilogue>> cases = {{4096, 1024, gemv_epilogue::store},
                                                                  {2 * 3072, 1024, gemv_epilogue::swiglu},
                                                                  {2 * 6144, 2048, gemv_epilogue::swiglu},
                                                                  {1001, 1000, gemv_epilogue::store}};
  for (const auto& [out, in, e] : cases) {
    const product p(out, in, in, std::uint64_t(out) + std::uint64_t(in) * 3u);
    const int ld = in + 8; // the residual rows' leading dimension, wider than in
    device_array<float> x32(std::size_t(8) * ld);
    device_array<float> norm_w(static_cast<std::size_t>(in));
    x32.upload(random_f32(std::size_t(8) * ld, std::uint64_t(in) + 7));
    norm_w.upload(random_f32(std::size_t(in), std::uint64_t(in) + 11));
    const bool swiglu = e == gemv_epilogue::swiglu;
    const int width = swiglu ? out / 2 : out;
    device_array<bf16> xn(std::size_t(8) * in);
    device_array<float> y_two(std::size_t(8) * width), y_one(std::size_t(8) * width);
    device_array<bf16> act_two(std::size_t(8) * width), act_one(std::size_t(8) * width);
    for (int rows = 1; rows <= 8; ++rows) {
      // rms_norm reads rows of `in` contiguous values: copy the strided residual rows into a packed buffer first.
      device_array<float> packed(std::size_t(rows) * in);
      MSTAR_CUDA_REQUIRE(cudaMemcpy2D(packed.p, std::size_t(in) * 4, x32.p, std::size_t(ld) * 4, std::size_t(in) * 4,
                                      std::size_t(rows), cudaMemcpyDeviceToDevice));
      qwen3_tts::cuda::rms_norm(packed.p, nullptr, norm_w.p, xn.p, nullptr, rows, in, 1e-6f, nullptr);
      small_gemv(e, p.w.p, out, in, xn.p, in, swiglu ? nullptr : y_two.p, swiglu ? act_two.p : nullptr, width, rows,
                 nullptr);
      small_gemv(e, p.w.p, out, in, nullptr, in, swiglu ? nullptr : y_one.p, swiglu ? act_one.p : nullptr, width, rows,
                 nullptr, qwen3_tts::cuda::gemv_norm{x32.p, ld, norm_w.p, 1e-6f});
      const std::size_t n = std::size_t(rows) * width;
      INFO("out ", out, ", in ", in, ", rows ", rows);
      if (swiglu)
        CHECK(act_one.download<std::uint16_t>(n) == act_two.download<std::uint16_t>(n));
      else
        CHECK(y_one.download<std::uint32_t>(n) == y_two.download<std::uint32_t>(n));
    }
  }
}

TEST_CASE("small_gemv refuses a shape it cannot read, naming the launcher and the value") {
  // Every refusal comes before any device work, so this runs without a GPU too.
  auto message = [](int rows, int out, int in, int ldx, gemv_epilogue e) -> std::string {
    alignas(16) static const std::uint16_t none[8] = {};
    const auto* p = reinterpret_cast<const bf16*>(none);
    float y = 0;
    try {
      small_gemv(e, p, out, in, p, ldx, &y, nullptr, out, rows, nullptr);
    } catch (const std::invalid_argument& err) {
      return err.what();
    }
    return "(no refusal)";
  };
  const std::string nine = message(9, 8, 8, 8, gemv_epilogue::store);
  CHECK(nine.find("small_gemv") != std::string::npos);
  CHECK(nine.find("not 9") != std::string::npos);
  const std::string none = message(0, 8, 8, 8, gemv_epilogue::store);
  CHECK(none.find("not 0") != std::string::npos);
  const std::string odd_in = message(1, 8, 1020, 1020, gemv_epilogue::store);
  CHECK(odd_in.find("small_gemv") != std::string::npos);
  CHECK(odd_in.find("1020") != std::string::npos);
  const std::string odd_ldx = message(1, 8, 1024, 1028, gemv_epilogue::store);
  CHECK(odd_ldx.find("1028") != std::string::npos);
  const std::string odd_out = message(1, 7, 8, 8, gemv_epilogue::swiglu);
  CHECK(odd_out.find("not 7") != std::string::npos);
  {
    // The norm prologue: rows wider than its shared memory holds, and a residual epilogue into the rows it reads.
    alignas(16) static const std::uint16_t none[8] = {};
    const auto* w = reinterpret_cast<const bf16*>(none);
    float y[8] = {};
    const float weight[8] = {};
    auto refusal = [&](int in, gemv_epilogue e, float* out_rows) -> std::string {
      try {
        small_gemv(e, w, 8, in, nullptr, in, out_rows, nullptr, 8, 1, nullptr,
                   qwen3_tts::cuda::gemv_norm{y, in, weight, 1e-6f});
      } catch (const std::invalid_argument& err) {
        return err.what();
      }
      return "(no refusal)";
    };
    const int wide = qwen3_tts::cuda::max_gemv_norm_in + 8;
    CHECK(refusal(wide, gemv_epilogue::store, y).find(std::to_string(wide)) != std::string::npos);
    CHECK(refusal(8, gemv_epilogue::residual, y).find("normalises") != std::string::npos);
  }
  CHECK_FALSE(qwen3_tts::cuda::small_gemv_fits(1, 1020, 1020));
  CHECK(qwen3_tts::cuda::small_gemv_fits(8, 6144, 6144));
}
