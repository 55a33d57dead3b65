// small_gemv, the CUDA Talker's weight product of a few rows, against cuBLAS's GEMM of the same bf16 inputs as
// the Talker calls it (bf16 in, float32 accumulation and out): each epilogue at every row count each of its two
// kernels takes (1..8 on the CUDA cores, so each rounded-up kernel also runs with masked rows; 1..64 on the tensor
// cores, one, two, four and eight n-tiles) on the shapes of the released models' decode products. The two sum the same
// bf16 x bf16 products in different orders, so they agree to float32 rounding: max|gemv - cublas| <= 1e-3 * max|cublas|
// per product. The swiglu epilogue is compared with swiglu of cuBLAS's product computed on the host, allowing its own
// bf16 rounding of each output.
#include "device_array.hpp"
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

using mstar::test::bf16_value;
using mstar::test::device_array;
using mstar::test::random_bf16;
using mstar::test::random_f32;
using qwen3_tts::cuda::bf16;
using qwen3_tts::cuda::gemv_epilogue;
using qwen3_tts::cuda::gemv_path;
using qwen3_tts::cuda::small_gemv;

constexpr int most_rows = qwen3_tts::cuda::max_mma_gemv_rows; // rows of every input and output buffer
int rows_of(gemv_path path) {
  return path == gemv_path::tensor_cores ? qwen3_tts::cuda::max_mma_gemv_rows : qwen3_tts::cuda::max_gemv_rows;
}
const char* name_of(gemv_path path) { return path == gemv_path::tensor_cores ? "tensor cores" : "CUDA cores"; }
constexpr gemv_path both_paths[] = {gemv_path::cuda_cores, gemv_path::tensor_cores};

constexpr float tol = 1e-3f;

struct blas_handle {
  cublasHandle_t h = nullptr;
  blas_handle() { REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS); }
  ~blas_handle() { cublasDestroy(h); }
};

// One product's inputs on the device: w [out][in], x [most_rows][ldx] (every row count reads a prefix of it).
struct product {
  int out, in, ldx;
  device_array<bf16> w, x;
  product(int out_, int in_, int ldx_, std::uint64_t seed)
      : out(out_), in(in_), ldx(ldx_), w(std::size_t(out_) * in_), x(std::size_t(most_rows) * ldx_) {
    w.upload(random_bf16(std::size_t(out) * in, seed, 1.0f / std::sqrt(float(in))));
    x.upload(random_bf16(std::size_t(most_rows) * ldx, seed + 1, 1.0f));
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

// A gemv_split's workspace for products of up to `tiles` tiles of 16 outputs, each shared among `splits` blocks
// (splits 1: no split, no workspace). tickets_clear() says whether every ticket is back to 0 after the launches.
struct split_workspace {
  int tiles, splits;
  device_array<float> partial;
  device_array<unsigned> tickets;
  split_workspace(int tiles_, int splits_)
      : tiles(tiles_), splits(splits_), partial(qwen3_tts::cuda::gemv_split_floats(tiles_, splits_)),
        tickets(std::size_t(tiles_)) {
    MSTAR_CUDA_REQUIRE(cudaMemset(tickets.p, 0, std::size_t(tiles) * sizeof(unsigned)));
  }
  qwen3_tts::cuda::gemv_split split() const {
    if (splits == 1) return {};
    return {partial.p, tickets.p, tiles, splits};
  }
  bool tickets_clear() const {
    const auto t = tickets.download<unsigned>(std::size_t(tiles));
    return std::all_of(t.begin(), t.end(), [](unsigned v) { return v == 0; });
  }
};
// The blocks a tile is shared among in each test of the tensor cores (1: none); the CUDA cores take 1 only.
std::vector<int> splits_of(gemv_path path) {
  if (path == gemv_path::cuda_cores) return {1};
  return {1, 2, qwen3_tts::cuda::max_gemv_splits};
}

// A [most_rows][ld] output of which rows [0, rows) and columns [0, width) hold the product: error is the largest
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
  for (int r = 0; r < most_rows; ++r)
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
void check_store_or_residual(gemv_epilogue e, int out, int in, int ldx, gemv_path path, int splits) {
  const blas_handle blas;
  const split_workspace ws(qwen3_tts::cuda::gemv_tiles(gemv_epilogue::store, out), splits);
  const product p(out, in, ldx, std::uint64_t(out) * 7919u + std::uint64_t(in));
  const int ldy = out + 3;
  const std::size_t n = std::size_t(most_rows) * ldy;
  const bool residual = e == gemv_epilogue::residual;
  const std::vector<float> start = residual ? random_f32(n, std::uint64_t(in) + 99) : std::vector<float>(n, sentinel);
  device_array<float> y(n);
  for (int rows = 1; rows <= rows_of(path); ++rows) {
    y.upload(start);
    small_gemv(e, p.w.p, out, in, p.x.p, ldx, y.p, nullptr, ldy, rows, nullptr, {}, path, ws.split());
    const auto got = y.download<float>(n);
    const auto ref = p.reference(blas, rows);
    const comparison c = compare(
        rows, out, ldy,
        [&](int r, int o, std::size_t i) {
          const float product = ref[std::size_t(r) * out + o];
          return std::pair{std::fabs(got[i] - (product + (residual ? start[i] : 0.0f))), product};
        },
        [&](std::size_t i) { return got[i] != start[i]; });
    INFO(name_of(path), ", split ", splits, ", out ", out, ", in ", in, ", ldx ", ldx, ", rows ", rows,
         ": max|gemv - cublas| ", c.error, ", max|cublas| ", c.big);
    c.check();
    CHECK(ws.tickets_clear());
  }
}

struct shape {
  int out, in, ldx;
};
// The decode step's products at the released sizes (0.6B: qkv 4096 x 1024, o 1024 x 2048, down 1024 x 3072,
// codec head 3072 x 1024; 1.7B: o 2048 x 2048 and down 2048 x 6144), the predictor head's input of stride
// 2 x hidden (its first pass), and one whose out and in/8 are multiples of nothing the kernel tiles by (for the
// tensor cores, whose inputs come in chunks of 32: out of no round size, in 1056 = 33 chunks).
const std::vector<shape> shapes = {{4096, 1024, 1024}, {1024, 2048, 2048}, {1024, 3072, 3072}, {3072, 1024, 1024},
                                   {2048, 1024, 1024}, {2048, 2048, 2048}, {2048, 6144, 6144}, {2048, 1024, 2048},
                                   {1001, 1000, 1000}, {1001, 1056, 1064}};
bool takes(gemv_path path, const shape& s) { return qwen3_tts::cuda::small_gemv_fits(1, s.in, s.ldx, path); }

float silu(float g) { return g / (1.0f + std::exp(-g)); }

} // namespace

TEST_CASE("small_gemv's store epilogue writes cuBLAS's products at every row count of each kernel, and nothing past "
          "its rows and outputs" *
          doctest::skip(!mstar::test::has_gpu())) {
  for (const gemv_path path : both_paths)
    for (const int splits : splits_of(path))
      for (const shape& s : shapes)
        if (takes(path, s)) check_store_or_residual(gemv_epilogue::store, s.out, s.in, s.ldx, path, splits);
}

TEST_CASE("small_gemv's residual epilogue adds cuBLAS's products to a nonzero float32 residual at every row count of "
          "each kernel" *
          doctest::skip(!mstar::test::has_gpu())) {
  for (const gemv_path path : both_paths)
    for (const int splits : splits_of(path))
      for (const shape& s : shapes)
        if (takes(path, s)) check_store_or_residual(gemv_epilogue::residual, s.out, s.in, s.ldx, path, splits);
}

TEST_CASE("small_gemv's swiglu epilogue writes swiglu of cuBLAS's gate and up products at every row count of each "
          "kernel" *
          doctest::skip(!mstar::test::has_gpu())) {
  const blas_handle blas;
  // The 0.6B's gate_up (inter 3072 of hidden 1024), the 1.7B's (6144 of 2048), and inters of no round size, the
  // last with input and output rows wider than the product (ldx > in, ldy > inter: the columns past inter hold the
  // sentinel too).
  for (const gemv_path path : both_paths)
    for (const int splits : splits_of(path))
      for (const auto& [inter, in, ldx, ldy] :
           {std::tuple{3072, 1024, 1024, 3072}, std::tuple{6144, 2048, 2048, 6144}, std::tuple{1000, 1000, 1000, 1000},
            std::tuple{1000, 1056, 1064, 1003}}) {
        if (!qwen3_tts::cuda::small_gemv_fits(1, in, ldx, path)) continue;
        const split_workspace ws(qwen3_tts::cuda::gemv_tiles(gemv_epilogue::swiglu, 2 * inter), splits);
        const product p(2 * inter, in, ldx, std::uint64_t(inter) + 5);
        const std::size_t n = std::size_t(most_rows) * ldy;
        device_array<bf16> act(n);
        const std::vector<std::uint16_t> start(n, 0x7fc0); // NaN: must survive past `rows`
        for (int rows = 1; rows <= rows_of(path); ++rows) {
          act.upload(start);
          small_gemv(gemv_epilogue::swiglu, p.w.p, 2 * inter, in, p.x.p, ldx, nullptr, act.p, ldy, rows, nullptr, {},
                     path, ws.split());
          const auto got = act.download<std::uint16_t>(n);
          const auto ref = p.reference(blas, rows);
          const comparison c = compare(
              rows, inter, ldy,
              [&](int r, int o, std::size_t i) {
                const float* gate_up = ref.data() + std::size_t(r) * 2 * inter;
                const float want = silu(gate_up[o]) * gate_up[inter + o];
                // The kernel rounds its value to bf16: up to half a bf16 step, 2^-8 of the value.
                return std::pair{std::fabs(bf16_value(got[i]) - want) - std::ldexp(std::fabs(want), -8), want};
              },
              [&](std::size_t i) { return got[i] != start[i]; });
          INFO(name_of(path), ", split ", splits, ", inter ", inter, ", in ", in, ", ldx ", ldx, ", ldy ", ldy,
               ", rows ", rows, ": max error beyond bf16 rounding ", c.error, ", max|swiglu| ", c.big);
          c.check();
          CHECK(ws.tickets_clear());
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
                                                                  {1001, 1000, gemv_epilogue::store},
                                                                  {1001, 1056, gemv_epilogue::store}};
  const gemv_path path = gemv_path::cuda_cores; // the norm prologue is the CUDA-core kernel's alone
  for (const auto& [out, in, e] : cases) {
    const product p(out, in, in, std::uint64_t(out) + std::uint64_t(in) * 3u);
    const int ld = in + 8; // the residual rows' leading dimension, wider than in
    device_array<float> x32(std::size_t(most_rows) * ld);
    device_array<float> norm_w(static_cast<std::size_t>(in));
    x32.upload(random_f32(std::size_t(most_rows) * ld, std::uint64_t(in) + 7));
    norm_w.upload(random_f32(std::size_t(in), std::uint64_t(in) + 11));
    const bool swiglu = e == gemv_epilogue::swiglu;
    const int width = swiglu ? out / 2 : out;
    device_array<bf16> xn(std::size_t(most_rows) * in);
    device_array<float> y_two(std::size_t(most_rows) * width), y_one(std::size_t(most_rows) * width);
    device_array<bf16> act_two(std::size_t(most_rows) * width), act_one(std::size_t(most_rows) * width);
    for (int rows = 1; rows <= rows_of(path); ++rows) {
      // rms_norm reads rows of `in` contiguous values: copy the strided residual rows into a packed buffer first.
      device_array<float> packed(std::size_t(rows) * in);
      MSTAR_CUDA_REQUIRE(cudaMemcpy2D(packed.p, std::size_t(in) * 4, x32.p, std::size_t(ld) * 4, std::size_t(in) * 4,
                                      std::size_t(rows), cudaMemcpyDeviceToDevice));
      qwen3_tts::cuda::rms_norm(packed.p, nullptr, norm_w.p, xn.p, nullptr, rows, in, 1e-6f, nullptr);
      small_gemv(e, p.w.p, out, in, xn.p, in, swiglu ? nullptr : y_two.p, swiglu ? act_two.p : nullptr, width, rows,
                 nullptr, {}, path);
      small_gemv(e, p.w.p, out, in, nullptr, in, swiglu ? nullptr : y_one.p, swiglu ? act_one.p : nullptr, width, rows,
                 nullptr, qwen3_tts::cuda::gemv_norm{x32.p, ld, norm_w.p, 1e-6f}, path);
      const std::size_t n = std::size_t(rows) * width;
      INFO(name_of(path), ", out ", out, ", in ", in, ", rows ", rows);
      if (swiglu)
        CHECK(act_one.download<std::uint16_t>(n) == act_two.download<std::uint16_t>(n));
      else
        CHECK(y_one.download<std::uint32_t>(n) == y_two.download<std::uint32_t>(n));
    }
  }
}

TEST_CASE("small_gemv's residual epilogue with the norm after gives small_gemv then rms_norm's bits, 1 to 64 rows, "
          "each split" *
          doctest::skip(!mstar::test::has_gpu())) {
  // The last block takes rms_norm's sums in rms_norm's order, so the two paths agree bit for bit. The 0.6B's o
  // projection (1024 x 2048), the 1.7B's down projection (2048 x 6144) and a shape of no round size; y strided
  // (ldy = out + 3, so a swapped read and write stride shows), the normed rows past `rows` left as they were, the
  // split's tickets and the norm's ticket back to 0.
  for (const auto& [out, in] : {std::pair{1024, 2048}, std::pair{2048, 6144}, std::pair{1001, 1056}})
    for (const int splits : splits_of(gemv_path::tensor_cores)) {
      const product p(out, in, in, std::uint64_t(out) * 5u + std::uint64_t(in));
      const split_workspace ws(qwen3_tts::cuda::gemv_tiles(gemv_epilogue::residual, out), splits);
      const int ldy = out + 3;
      const std::size_t n = std::size_t(most_rows) * ldy, packed_n = std::size_t(most_rows) * out;
      const std::vector<float> start = random_f32(n, std::uint64_t(out) + 3);
      const std::vector<std::uint16_t> untouched(packed_n, std::uint16_t(0x7fc1)); // a bf16 NaN no product writes
      device_array<float> norm_w(static_cast<std::size_t>(out)), y_two(n), y_one(n), packed(packed_n);
      norm_w.upload(random_f32(std::size_t(out), std::uint64_t(out) + 13));
      device_array<bf16> xn_two(packed_n), xn_one(packed_n);
      device_array<unsigned> ticket(1);
      MSTAR_CUDA_REQUIRE(cudaMemset(ticket.p, 0, sizeof(unsigned)));
      for (int rows = 1; rows <= most_rows; ++rows) {
        y_two.upload(start);
        y_one.upload(start);
        xn_one.upload(untouched);
        small_gemv(gemv_epilogue::residual, p.w.p, out, in, p.x.p, in, y_two.p, nullptr, ldy, rows, nullptr, {},
                   gemv_path::tensor_cores, ws.split());
        // rms_norm reads rows of `out` contiguous values: pack the strided rows first.
        MSTAR_CUDA_REQUIRE(cudaMemcpy2D(packed.p, std::size_t(out) * 4, y_two.p, std::size_t(ldy) * 4,
                                        std::size_t(out) * 4, std::size_t(rows), cudaMemcpyDeviceToDevice));
        qwen3_tts::cuda::rms_norm(packed.p, nullptr, norm_w.p, xn_two.p, nullptr, rows, out, 1e-6f, nullptr);
        small_gemv(gemv_epilogue::residual, p.w.p, out, in, p.x.p, in, y_one.p, nullptr, ldy, rows, nullptr, {},
                   gemv_path::tensor_cores, ws.split(),
                   qwen3_tts::cuda::gemv_norm_after{norm_w.p, xn_one.p, 1e-6f, ticket.p});
        const std::size_t m = std::size_t(rows) * out;
        INFO("out ", out, ", in ", in, ", split ", splits, ", rows ", rows);
        CHECK(y_one.download<std::uint32_t>(n) == y_two.download<std::uint32_t>(n));
        const auto xn = xn_one.download<std::uint16_t>(packed_n);
        CHECK(std::vector<std::uint16_t>(xn.begin(), xn.begin() + std::ptrdiff_t(m)) ==
              xn_two.download<std::uint16_t>(m));
        CHECK(std::all_of(xn.begin() + std::ptrdiff_t(m), xn.end(), [](std::uint16_t v) { return v == 0x7fc1; }));
        CHECK(ticket.download<unsigned>(1)[0] == 0u);
        CHECK(ws.tickets_clear());
      }
    }
}

TEST_CASE("small_gemv on the tensor cores gives a row the same bits whatever rows share its call" *
          doctest::skip(!mstar::test::has_gpu())) {
  // A request's codes must not depend on its batch: each row's sums follow the weights and its own inputs only.
  // Row r of a most_rows-row call (eight n-tiles) against the same input row alone (a 1-row call reading from row r)
  // and in a call of r + 1 rows, store and swiglu, on the 0.6B's qkv and gate_up, and store with each tile shared among
  // two blocks (split-K: the bits then follow the split count, not the rows).
  for (const auto& [out, in, e, splits] :
       {std::tuple{4096, 1024, gemv_epilogue::store, 1}, std::tuple{2 * 3072, 1024, gemv_epilogue::swiglu, 1},
        std::tuple{1024, 3072, gemv_epilogue::store, 2}}) {
    const split_workspace ws(qwen3_tts::cuda::gemv_tiles(e, out), splits);
    const product p(out, in, in, std::uint64_t(out) * 3u + 1u);
    const bool swiglu = e == gemv_epilogue::swiglu;
    const int width = swiglu ? out / 2 : out;
    device_array<float> y(std::size_t(most_rows) * width), y_some(std::size_t(most_rows) * width);
    device_array<bf16> act(std::size_t(most_rows) * width), act_some(std::size_t(most_rows) * width);
    auto run = [&](const bf16* x, int rows, float* y32, bf16* a) {
      small_gemv(e, p.w.p, out, in, x, in, swiglu ? nullptr : y32, swiglu ? a : nullptr, width, rows, nullptr, {},
                 gemv_path::tensor_cores, ws.split());
    };
    auto row_bits = [&](const float* y32, const bf16* a, int r) {
      std::vector<std::uint16_t> bits(std::size_t(width) * (swiglu ? 1 : 2));
      MSTAR_CUDA_REQUIRE(cudaDeviceSynchronize());
      if (swiglu)
        MSTAR_CUDA_REQUIRE(
            cudaMemcpy(bits.data(), a + std::size_t(r) * width, std::size_t(width) * 2, cudaMemcpyDeviceToHost));
      else
        MSTAR_CUDA_REQUIRE(
            cudaMemcpy(bits.data(), y32 + std::size_t(r) * width, std::size_t(width) * 4, cudaMemcpyDeviceToHost));
      return bits;
    };
    run(p.x.p, most_rows, y.p, act.p);
    for (int r = 0; r < most_rows; ++r) {
      run(p.x.p + std::size_t(r) * in, 1, y_some.p, act_some.p);
      INFO("out ", out, ", split ", splits, ", row ", r, " alone");
      CHECK(row_bits(y_some.p, act_some.p, 0) == row_bits(y.p, act.p, r));
      run(p.x.p, r + 1, y_some.p, act_some.p);
      INFO("out ", out, ", split ", splits, ", row ", r, " of ", r + 1);
      CHECK(row_bits(y_some.p, act_some.p, r) == row_bits(y.p, act.p, r));
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
  // The tensor cores: max_mma_gemv_rows rows, inputs in chunks of 32.
  auto mma_message = [](int rows, int in) -> std::string {
    alignas(16) static const std::uint16_t none[8] = {};
    const auto* p = reinterpret_cast<const bf16*>(none);
    float y = 0;
    try {
      small_gemv(gemv_epilogue::store, p, 8, in, p, in, &y, nullptr, 8, rows, nullptr, {}, gemv_path::tensor_cores);
    } catch (const std::invalid_argument& err) {
      return err.what();
    }
    return "(no refusal)";
  };
  const int too_many = qwen3_tts::cuda::max_mma_gemv_rows + 1;
  const std::string over = mma_message(too_many, 1024);
  CHECK(over.find("not " + std::to_string(too_many)) != std::string::npos);
  CHECK(over.find("tensor cores") != std::string::npos);
  CHECK(mma_message(1, 1000).find("not 1000") != std::string::npos);
  CHECK(nine.find("CUDA cores") != std::string::npos);
  CHECK(qwen3_tts::cuda::small_gemv_fits(qwen3_tts::cuda::max_mma_gemv_rows, 1024, 1024, gemv_path::tensor_cores));
  CHECK_FALSE(qwen3_tts::cuda::small_gemv_fits(9, 1024, 1024));
  CHECK_FALSE(qwen3_tts::cuda::small_gemv_fits(1, 1000, 1000, gemv_path::tensor_cores));
  CHECK(qwen3_tts::cuda::gemv_norm_fits(2048));
  CHECK_FALSE(qwen3_tts::cuda::gemv_norm_fits(1024, gemv_path::tensor_cores));
  {
    // The tensor cores take no norm prologue: the refusal says so.
    alignas(16) static const std::uint16_t none[8] = {};
    const auto* w = reinterpret_cast<const bf16*>(none);
    float y[32] = {};
    const float weight[32] = {};
    std::string why = "(no refusal)";
    try {
      small_gemv(gemv_epilogue::store, w, 8, 32, nullptr, 32, y, nullptr, 8, 2, nullptr,
                 qwen3_tts::cuda::gemv_norm{y, 32, weight, 1e-6f}, gemv_path::tensor_cores);
    } catch (const std::invalid_argument& err) {
      why = err.what();
    }
    CHECK(why.find("CUDA cores only") != std::string::npos);
  }
  {
    // A split among blocks: its count, the tensor cores only, its workspace and the workspace's room.
    alignas(16) static const std::uint16_t none[8] = {};
    const auto* w = reinterpret_cast<const bf16*>(none);
    float y[64] = {};
    unsigned tickets[4] = {};
    auto refusal = [&](int out, gemv_path path, qwen3_tts::cuda::gemv_split split) -> std::string {
      try {
        small_gemv(gemv_epilogue::store, w, out, 32, w, 32, y, nullptr, out, 2, nullptr, {}, path, split);
      } catch (const std::invalid_argument& err) {
        return err.what();
      }
      return "(no refusal)";
    };
    const int over = qwen3_tts::cuda::max_gemv_splits + 1;
    CHECK(refusal(16, gemv_path::tensor_cores, {y, tickets, 4, over}).find("not " + std::to_string(over)) !=
          std::string::npos);
    CHECK(refusal(16, gemv_path::tensor_cores, {y, tickets, 4, 0}).find("not 0") != std::string::npos);
    CHECK(refusal(16, gemv_path::cuda_cores, {y, tickets, 4, 2}).find("tensor cores only") != std::string::npos);
    CHECK(refusal(16, gemv_path::tensor_cores, {nullptr, tickets, 4, 2}).find("partial and tickets") !=
          std::string::npos);
    CHECK(refusal(16, gemv_path::tensor_cores, {y, nullptr, 4, 2}).find("partial and tickets") != std::string::npos);
    const std::string room = refusal(64 + 16, gemv_path::tensor_cores, {y, tickets, 4, 2});
    CHECK(room.find("room for 4 tiles") != std::string::npos);
    CHECK(room.find("not 5") != std::string::npos);
  }
  {
    // The norm after: the residual epilogue on the tensor cores only, its weight and ticket, no output over an input.
    alignas(16) static std::uint16_t rows16[64] = {};
    const auto* w = reinterpret_cast<const bf16*>(rows16);
    float y[64] = {};
    const float weight[16] = {};
    unsigned ticket = 0;
    auto refusal = [&](gemv_epilogue e, gemv_path path, qwen3_tts::cuda::gemv_norm_after after) -> std::string {
      try {
        small_gemv(e, w, 16, 32, w, 32, y, reinterpret_cast<bf16*>(rows16), 16, 2, nullptr, {}, path, {}, after);
      } catch (const std::invalid_argument& err) {
        return err.what();
      }
      return "(no refusal)";
    };
    auto* xn = reinterpret_cast<bf16*>(rows16 + 32);
    const std::string only = "residual epilogue on the tensor cores only";
    CHECK(refusal(gemv_epilogue::store, gemv_path::tensor_cores, {weight, xn, 1e-6f, &ticket}).find(only) !=
          std::string::npos);
    CHECK(refusal(gemv_epilogue::residual, gemv_path::cuda_cores, {weight, xn, 1e-6f, &ticket}).find(only) !=
          std::string::npos);
    CHECK(refusal(gemv_epilogue::residual, gemv_path::tensor_cores, {nullptr, xn, 1e-6f, &ticket})
              .find("weight and ticket") != std::string::npos);
    CHECK(refusal(gemv_epilogue::residual, gemv_path::tensor_cores, {weight, xn, 1e-6f, nullptr})
              .find("weight and ticket") != std::string::npos);
    CHECK(refusal(gemv_epilogue::residual, gemv_path::tensor_cores,
                  {weight, reinterpret_cast<bf16*>(rows16), 1e-6f, &ticket})
              .find("over its input") != std::string::npos);
    // Rows longer than the last block holds in its registers: refused before any launch, not normalised in part.
    std::string wide = "(no refusal)";
    const int out = qwen3_tts::cuda::max_gemv_norm_after_out + 16;
    try {
      small_gemv(gemv_epilogue::residual, w, out, 32, w, 32, y, nullptr, out, 2, nullptr, {}, gemv_path::tensor_cores,
                 {}, {weight, xn, 1e-6f, &ticket});
    } catch (const std::invalid_argument& err) {
      wide = err.what();
    }
    CHECK(wide.find("at most 2048 outputs, not 2064") != std::string::npos);
  }
}
