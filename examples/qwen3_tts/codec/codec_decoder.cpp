// The host float32 codec decoder (see codec_decoder.hpp). Activations are time-major, [frames][channels].
#include "codec_decoder.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace qwen3_tts {
namespace {

constexpr std::size_t align4(std::size_t n) { return (n + 3) & ~std::size_t(3); }

// Float32 operands, double partial sums (eight, combined in a fixed order: vectorizable, and the same
// bits for the same inputs wherever the call happens). The fixtures' random-weight decoders swing to
// +-30 before the clamp, where the reference's own float32 rounding is already ~1e-4 from exact; summing
// in double keeps this side's part of the difference small.
inline double dot_sum(const float* a, const float* b, int n) {
  double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l)
      s[l] += double(a[i + l]) * double(b[i + l]);
  for (int l = 0; i < n; ++i, ++l)
    s[l] += double(a[i]) * double(b[i]);
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}
inline float dot(const float* a, const float* b, int n) { return float(dot_sum(a, b, n)); }

using buffer = std::vector<float>;

constexpr int floor_div(int a, int b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
constexpr float inv_sqrt2 = 0.70710678118654752440f;

void linear(const codec_linear& l, const float* x, int n, float* y) {
  for (int t = 0; t < n; ++t)
    for (int o = 0; o < l.out; ++o) {
      const float v = dot(l.weight.data() + std::size_t(o) * l.in, x + std::size_t(t) * l.in, l.in);
      y[std::size_t(t) * l.out + o] = l.bias.empty() ? v : v + l.bias[o];
    }
}

void snake_beta(const codec_snake_beta& s, int channels, const float* x, int n, float* y) {
  for (int t = 0; t < n; ++t)
    for (int c = 0; c < channels; ++c) {
      const std::size_t i = std::size_t(t) * channels + c;
      const float v = std::sin(x[i] * s.exp_alpha[c]);
      y[i] = x[i] + s.inv_exp_beta[c] * (v * v);
    }
}

// Walks the state buffer's segments in the order make_codec_state_layout lists them.
struct state_cursor {
  std::span<float> state;
  const codec_state_layout& layout;
  std::size_t next = 1; // segment 0 is the frame counter

  float* take(std::size_t size) {
    if (size == 0) // the layout lists no empty segments
      return nullptr;
    const auto& seg = layout.segments.at(next++);
    if (seg.size != size)
      throw std::logic_error("codec state layout: segment " + seg.name + " holds " + std::to_string(seg.size) +
                             " floats, the decoder needs " + std::to_string(size));
    return state.data() + seg.offset;
  }
};

// [context | x] as one time-major block, and the context for the next window from its tail.
struct extended {
  buffer data;
  int context = 0;

  const float* begin(float* ctx, const float* x, int n, int channels) {
    data.resize(std::size_t(context + n) * channels);
    std::copy_n(ctx, std::size_t(context) * channels, data.data());
    std::copy_n(x, std::size_t(n) * channels, data.data() + std::size_t(context) * channels);
    return data.data();
  }
  void carry(float* ctx, int n, int channels) const {
    std::copy_n(data.data() + std::size_t(n) * channels, std::size_t(context) * channels, ctx);
  }
};

// A causal convolution (stride 1): left context from the state, no padding on the right.
void causal_conv(const codec_conv& c, state_cursor& st, const float* x, int n, float* y) {
  extended e{{}, c.context()};
  float* ctx = e.context > 0 ? st.take(std::size_t(e.context) * c.in) : nullptr;
  const float* xe = e.begin(ctx, x, n, c.in);
  if (c.groups == 1) {
    // Frames in tiles, so that one weight row serves a tile while it is in cache; each output's sum
    // still runs over the taps in order, so the bits do not depend on the tiling or the window.
    constexpr int tile = 16;
    for (int t0 = 0; t0 < n; t0 += tile) {
      const int tn = std::min(tile, n - t0);
      for (int o = 0; o < c.out; ++o) {
        double acc[tile];
        std::fill_n(acc, tn, double(c.bias[o]));
        for (int k = 0; k < c.kernel; ++k) {
          const float* w = c.taps.data() + (std::size_t(k) * c.out + o) * c.in;
          for (int t = 0; t < tn; ++t)
            acc[t] += dot_sum(w, xe + std::size_t(t0 + t + k * c.dilation) * c.in, c.in);
        }
        for (int t = 0; t < tn; ++t)
          y[std::size_t(t0 + t) * c.out + o] = float(acc[t]);
      }
    }
  } else { // depthwise: one input channel per output channel
    for (int t = 0; t < n; ++t)
      for (int o = 0; o < c.out; ++o) {
        float acc = c.bias[o];
        for (int k = 0; k < c.kernel; ++k)
          acc += c.weight[std::size_t(o) * c.kernel + k] * xe[std::size_t(t + k * c.dilation) * c.in + o];
        y[std::size_t(t) * c.out + o] = acc;
      }
  }
  if (e.context > 0)
    e.carry(ctx, n, c.in);
}

// A transposed convolution trimmed on the right (the reference's causal form): this window's n input
// frames give n * stride outputs, which also receive the tails of the `context` frames before them.
void trans_conv(const codec_trans_conv& tc, state_cursor& st, const float* x, int n, float* y) {
  extended e{{}, tc.context()};
  float* ctx = e.context > 0 ? st.take(std::size_t(e.context) * tc.in) : nullptr;
  const float* xe = e.begin(ctx, x, n, tc.in);
  const int s = tc.stride;
  for (int m = 0; m < n * s; ++m) {
    // Extended frame f reaches output m through tap m - (f - context) * s, when that tap exists.
    const int f_hi = std::min(e.context + n - 1, e.context + m / s);
    const int f_lo = std::max(0, e.context - floor_div(tc.kernel - 1 - m, s));
    for (int o = 0; o < tc.out; ++o) {
      double acc = tc.bias[o];
      for (int f = f_lo; f <= f_hi; ++f) {
        const int j = m - (f - e.context) * s;
        acc += dot_sum(tc.taps.data() + (std::size_t(j) * tc.out + o) * tc.in, xe + std::size_t(f) * tc.in, tc.in);
      }
      y[std::size_t(m) * tc.out + o] = float(acc);
    }
  }
  if (e.context > 0)
    e.carry(ctx, n, tc.in);
}

void rms_norm(const std::vector<float>& w, double eps, const float* x, int n, int dim, float* y) {
  for (int t = 0; t < n; ++t) {
    const float* r = x + std::size_t(t) * dim;
    float ss = 0;
    for (int c = 0; c < dim; ++c)
      ss += r[c] * r[c];
    const float scale = 1.0f / std::sqrt(ss / float(dim) + float(eps));
    for (int c = 0; c < dim; ++c)
      y[std::size_t(t) * dim + c] = w[c] * (r[c] * scale);
  }
}

void layer_norm(const codec_convnext& nx, int dim, const float* x, int n, float* y) {
  for (int t = 0; t < n; ++t) {
    const float* r = x + std::size_t(t) * dim;
    float mean = 0;
    for (int c = 0; c < dim; ++c)
      mean += r[c];
    mean /= float(dim);
    float var = 0;
    for (int c = 0; c < dim; ++c)
      var += (r[c] - mean) * (r[c] - mean);
    var /= float(dim);
    const float inv = 1.0f / std::sqrt(var + 1e-6f);
    for (int c = 0; c < dim; ++c)
      y[std::size_t(t) * dim + c] = (r[c] - mean) * inv * nx.norm_weight[c] + nx.norm_bias[c];
  }
}

// Half-rotation (NeoX) rotary embedding of one head at position pos.
void rope(float* v, int head_dim, const std::vector<float>& inv_freq, float pos) {
  const int half = head_dim / 2;
  for (int i = 0; i < half; ++i) {
    const float angle = inv_freq[i] * pos;
    const float c = std::cos(angle), s = std::sin(angle);
    const float a = v[i], b = v[i + half];
    v[i] = a * c - b * s;
    v[i + half] = b * c + a * s;
  }
}


// Split RVQ decode (the semantic codebook, then the acoustic ones: each half summed, then projected),
// then the causal pre-convolution.
buffer pre_conv_of(const codec_config& c, const codec_weights& w, std::span<const std::int32_t> frames, int n,
                   state_cursor& st) {
  const int half = c.codebook_dim / 2;
  buffer x(std::size_t(n) * c.codebook_dim), sum(half), rest(c.codebook_dim);
  const auto project = [&](const codec_rvq& q, const std::int32_t* codes, float* y) {
    std::fill(sum.begin(), sum.end(), 0.0f);
    for (std::size_t l = 0; l < q.layers.size(); ++l) {
      const float* e = q.layers[l].embedding.data() + std::size_t(codes[l]) * half;
      for (int d = 0; d < half; ++d)
        sum[d] += e[d];
    }
    for (int o = 0; o < c.codebook_dim; ++o)
      y[o] = dot(q.output_proj.data() + std::size_t(o) * half, sum.data(), half);
  };
  for (int t = 0; t < n; ++t) {
    const std::int32_t* codes = frames.data() + std::size_t(t) * c.num_quantizers;
    float* out = x.data() + std::size_t(t) * c.codebook_dim;
    project(w.rvq_first, codes, out);
    project(w.rvq_rest, codes + codec_config::num_semantic_quantizers, rest.data());
    for (int o = 0; o < c.codebook_dim; ++o)
      out[o] += rest[o];
  }
  buffer h(std::size_t(n) * c.latent_dim);
  causal_conv(w.pre_conv, st, x.data(), n, h.data());
  return h;
}

// Softmax attention of this window's queries over `keys` / `values`: the `fill` carried frames, then
// this window's n, in position order; query t sees the window's last sliding_window frames up to itself.
void attend(const codec_config& c, int fill, int n, const buffer& q, const buffer& keys, const buffer& values,
            buffer& att) {
  const int hd = c.head_dim, heads = c.num_attention_heads, keep = c.sliding_window - 1;
  const int qw = heads * hd, kvw = c.num_key_value_heads * hd, group = heads / c.num_key_value_heads;
  const float scaling = 1.0f / std::sqrt(float(hd));
  buffer scores(fill + n);
  for (int t = 0; t < n; ++t) {
    const int last = fill + t, first = std::max(0, last - keep);
    for (int hh = 0; hh < heads; ++hh) {
      const float* qv = q.data() + std::size_t(t) * qw + std::size_t(hh) * hd;
      const std::size_t kv_off = std::size_t(hh / group) * hd;
      float mx = -std::numeric_limits<float>::infinity();
      for (int j = first; j <= last; ++j) {
        scores[j] = dot(qv, keys.data() + std::size_t(j) * kvw + kv_off, hd) * scaling;
        mx = std::max(mx, scores[j]);
      }
      float total = 0;
      for (int j = first; j <= last; ++j)
        total += scores[j] = std::exp(scores[j] - mx);
      float* out = att.data() + std::size_t(t) * qw + std::size_t(hh) * hd;
      std::fill_n(out, hd, 0.0f);
      for (int j = first; j <= last; ++j) {
        const float p = scores[j] / total;
        const float* vv = values.data() + std::size_t(j) * kvw + kv_off;
        for (int d = 0; d < hd; ++d)
          out[d] += p * vv[d];
      }
    }
  }
}

// The pre-transformer over this window's n frames at positions p0.., with each layer's carried keys and
// values (the last sliding_window - 1 frames, newest at the end of the segment).
buffer pre_transformer(const codec_config& c, const codec_pre_transformer& tr, const std::vector<float>& inv_freq,
                       int p0, const buffer& h, int n, state_cursor& st) {
  const int hid = c.hidden_size, hd = c.head_dim;
  const int qw = c.num_attention_heads * hd, kvw = c.num_key_value_heads * hd, keep = c.sliding_window - 1;
  const int fill = std::min(p0, keep), total_kv = fill + n, kept = std::min(total_kv, keep);
  buffer a(std::size_t(n) * hid), xn(a.size()), o(a.size()), q(std::size_t(n) * qw), att(q.size()),
      kv(std::size_t(n) * kvw), g(std::size_t(n) * c.intermediate_size), u(g.size()),
      keys(std::size_t(total_kv) * kvw), values(keys.size());
  linear(tr.input_proj, h.data(), n, a.data());
  for (const auto& layer : tr.layers) {
    float* kc = st.take(std::size_t(keep) * kvw);
    float* vc = st.take(std::size_t(keep) * kvw);
    rms_norm(layer.input_layernorm, c.rms_norm_eps, a.data(), n, hid, xn.data());
    linear(layer.q_proj, xn.data(), n, q.data());
    // keys and values in position order: the carried ones (positions p0 - fill ..), then this window's
    std::copy_n(kc + std::size_t(keep - fill) * kvw, std::size_t(fill) * kvw, keys.data());
    std::copy_n(vc + std::size_t(keep - fill) * kvw, std::size_t(fill) * kvw, values.data());
    linear(layer.k_proj, xn.data(), n, keys.data() + std::size_t(fill) * kvw);
    linear(layer.v_proj, xn.data(), n, values.data() + std::size_t(fill) * kvw);
    for (int t = 0; t < n; ++t) {
      for (int hh = 0; hh < c.num_attention_heads; ++hh)
        rope(q.data() + std::size_t(t) * qw + std::size_t(hh) * hd, hd, inv_freq, float(p0 + t));
      for (int hh = 0; hh < c.num_key_value_heads; ++hh)
        rope(keys.data() + std::size_t(fill + t) * kvw + std::size_t(hh) * hd, hd, inv_freq, float(p0 + t));
    }
    attend(c, fill, n, q, keys, values, att);
    // the carried window moves on: the last `keep` of (carried, new)
    std::copy_n(keys.data() + std::size_t(total_kv - kept) * kvw, std::size_t(kept) * kvw,
                kc + std::size_t(keep - kept) * kvw);
    std::copy_n(values.data() + std::size_t(total_kv - kept) * kvw, std::size_t(kept) * kvw,
                vc + std::size_t(keep - kept) * kvw);

    linear(layer.o_proj, att.data(), n, o.data());
    for (std::size_t i = 0; i < a.size(); ++i)
      a[i] += layer.self_attn_layer_scale[i % hid] * o[i];
    rms_norm(layer.post_attention_layernorm, c.rms_norm_eps, a.data(), n, hid, xn.data());
    linear(layer.gate_proj, xn.data(), n, g.data());
    linear(layer.up_proj, xn.data(), n, u.data());
    for (std::size_t i = 0; i < g.size(); ++i)
      g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
    linear(layer.down_proj, g.data(), n, o.data());
    for (std::size_t i = 0; i < a.size(); ++i)
      a[i] += layer.mlp_layer_scale[i % hid] * o[i];
  }
  rms_norm(tr.norm, c.rms_norm_eps, a.data(), n, hid, xn.data());
  buffer out(std::size_t(n) * c.latent_dim);
  linear(tr.output_proj, xn.data(), n, out.data());
  return out;
}

// A transposed convolution (kernel == stride), then a ConvNeXt block; `len` frames in, len * stride out.
buffer upsample_stage(const codec_upsample_stage& stage, int d, const buffer& h, int& len, state_cursor& st) {
  const int f = stage.trans_conv.stride;
  buffer up(std::size_t(len) * f * d);
  trans_conv(stage.trans_conv, st, h.data(), len, up.data());
  len *= f;
  const auto& nx = stage.convnext;
  buffer dw(up.size()), nrm(up.size()), mid(up.size() * 4), back(up.size());
  causal_conv(nx.dwconv, st, up.data(), len, dw.data());
  layer_norm(nx, d, dw.data(), len, nrm.data());
  linear(nx.pwconv1, nrm.data(), len, mid.data());
  for (auto& m : mid)
    m = 0.5f * m * (1.0f + std::erf(m * inv_sqrt2));
  linear(nx.pwconv2, mid.data(), len, back.data());
  for (std::size_t i = 0; i < up.size(); ++i)
    up[i] += nx.gamma[i % d] * back[i];
  return up;
}

// SnakeBeta, the upsampling transposed convolution, three residual units; `len` samples in, len * rate out.
buffer decoder_block(const codec_decoder_block& blk, const buffer& y, int& len, state_cursor& st) {
  const int in = blk.trans_conv.in, out = blk.trans_conv.out, r = blk.trans_conv.stride;
  buffer act(y.size());
  snake_beta(blk.snake, in, y.data(), len, act.data());
  buffer z(std::size_t(len) * r * out);
  trans_conv(blk.trans_conv, st, act.data(), len, z.data());
  len *= r;
  buffer a1(z.size()), c1(z.size()), c2(z.size());
  for (const auto& unit : blk.units) {
    snake_beta(unit.act1, out, z.data(), len, a1.data());
    causal_conv(unit.conv1, st, a1.data(), len, c1.data());
    snake_beta(unit.act2, out, c1.data(), len, a1.data());
    causal_conv(unit.conv2, st, a1.data(), len, c2.data());
    for (std::size_t i = 0; i < z.size(); ++i)
      z[i] = c2[i] + z[i];
  }
  return z;
}

} // namespace

const codec_state_segment& codec_state_layout::find(std::string_view name) const {
  for (auto& s : segments)
    if (s.name == name)
      return s;
  throw std::out_of_range("codec state layout: no segment named " + std::string(name));
}

codec_state_layout make_codec_state_layout(const codec_config& c) {
  codec_state_layout l;
  auto add = [&](std::string name, std::size_t size) {
    if (size == 0)
      return;
    l.segments.push_back({std::move(name), l.total, size});
    l.total += align4(size);
  };
  add("frames", 1);
  add("pre_conv", std::size_t(2) * c.codebook_dim);
  const std::size_t kv = std::size_t(c.sliding_window - 1) * c.num_key_value_heads * c.head_dim;
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "pre_transformer.layers." + std::to_string(i) + ".self_attn.";
    add(p + "key", kv);
    add(p + "value", kv);
  }
  for (std::size_t s = 0; s < c.upsampling_ratios.size(); ++s)
    add("upsample." + std::to_string(s) + ".1.dwconv", std::size_t(6) * c.latent_dim);
  add("decoder.0", std::size_t(6) * c.latent_dim);
  const std::size_t blocks = c.upsample_rates.size();
  for (std::size_t b = 0; b < blocks; ++b) {
    const std::string p = "decoder." + std::to_string(b + 1) + ".block.";
    // kernel 2 * rate, stride rate: one earlier input frame reaches into the window
    add(p + "1", std::size_t(c.block_in_dim(b)));
    for (int u = 0; u < 3; ++u)
      add(p + std::to_string(u + 2) + ".conv1", std::size_t(6) * codec_unit_dilations[u] * c.block_out_dim(b));
  }
  add("decoder." + std::to_string(blocks + 2), std::size_t(6) * c.block_out_dim(blocks - 1));
  return l;
}

codec_decoder::codec_decoder(codec_config config, codec_weights weights)
    : config_(std::move(config)), weights_(std::move(weights)), layout_(make_codec_state_layout(config_)) {
  const int half = config_.head_dim / 2;
  inv_freq_.resize(half);
  for (int i = 0; i < half; ++i)
    inv_freq_[i] = 1.0f / std::pow(float(config_.rope_theta), float(2 * i) / float(config_.head_dim));
}

void codec_decoder::check_frames(std::span<const std::int32_t> frames) const {
  const auto q = std::size_t(config_.num_quantizers);
  if (frames.size() % q != 0)
    throw std::invalid_argument("codec decoder: " + std::to_string(frames.size()) + " codes are not whole frames of " +
                                std::to_string(q) + " codebooks");
  for (std::size_t i = 0; i < frames.size(); ++i)
    if (frames[i] < 0 || frames[i] >= config_.codebook_size)
      throw std::invalid_argument("codec decoder: frame " + std::to_string(i / q) + ", codebook " +
                                  std::to_string(i % q) + ": code " + std::to_string(frames[i]) + " is outside [0, " +
                                  std::to_string(config_.codebook_size) +
                                  "); control ids (end of speech, padding) must be filtered out before decoding");
}

void codec_decoder::decode_window(std::span<float> state, std::span<const std::int32_t> frames,
                                  std::span<float> audio) const {
  const codec_config& c = config_;
  const codec_weights& w = weights_;
  check_frames(frames);
  if (state.size() != layout_.total)
    throw std::invalid_argument("codec decoder: the state buffer holds " + std::to_string(state.size()) +
                                " floats, this config's layout needs " + std::to_string(layout_.total));
  const int n = int(frames.size() / std::size_t(c.num_quantizers));
  if (audio.size() != std::size_t(n) * samples_per_frame())
    throw std::invalid_argument("codec decoder: room for " + std::to_string(audio.size()) + " samples, " +
                                std::to_string(n) + " frames give " + std::to_string(n * samples_per_frame()));
  const float counter = state[0];
  if (!(counter >= 0 && counter < float(1 << 24) && counter == std::floor(counter)))
    throw std::invalid_argument("codec decoder: the state's frame counter reads " + std::to_string(counter) +
                                "; this buffer is not a codec state (zero it for a fresh request)");
  if (n == 0)
    return;
  state_cursor st{state, layout_};
  buffer h = pre_conv_of(c, w, frames, n, st);
  h = pre_transformer(c, w.pre_transformer, inv_freq_, int(counter), h, n, st);
  int len = n;
  for (const auto& stage : w.upsample)
    h = upsample_stage(stage, c.latent_dim, h, len, st);
  buffer y(std::size_t(len) * c.decoder_dim);
  causal_conv(w.decoder_in, st, h.data(), len, y.data());
  for (const auto& blk : w.blocks)
    y = decoder_block(blk, y, len, st);
  buffer act(y.size());
  snake_beta(w.final_snake, w.decoder_out.in, y.data(), len, act.data());
  causal_conv(w.decoder_out, st, act.data(), len, audio.data());
  for (auto& s : audio)
    s = std::clamp(s, -1.0f, 1.0f);
  state[0] = counter + float(n);
}

std::vector<float> codec_decoder::decode_window(std::span<float> state, std::span<const std::int32_t> frames) const {
  std::vector<float> audio(frames.size() / std::size_t(config_.num_quantizers) * samples_per_frame());
  decode_window(state, frames, audio);
  return audio;
}

void codec_decoder::decode_step(std::span<const row> rows) const {
  for (const auto& r : rows)
    decode_window(r.state, r.frames, r.audio);
}

std::vector<float> codec_decoder::decode_all(std::span<const std::int32_t> frames) const {
  std::vector<float> state(layout_.total, 0.0f);
  return decode_window(state, frames);
}

std::vector<float> decode_ramp(const codec_decoder& decoder, std::span<const std::int32_t> frames,
                               std::span<const int> ramp) {
  if (ramp.empty())
    throw std::invalid_argument("codec decoder: an empty window ramp; give at least one width, e.g. 1,2,4,8");
  for (int w : ramp)
    if (w < 1)
      throw std::invalid_argument("codec decoder: window width " + std::to_string(w) + " in the ramp; widths are >= 1");
  const std::size_t q = std::size_t(decoder.config().num_quantizers);
  decoder.check_frames(frames);
  std::vector<float> state(decoder.state_layout().total, 0.0f);
  std::vector<float> audio(frames.size() / q * decoder.samples_per_frame());
  std::size_t done = 0, step = 0;
  while (done < frames.size() / q) {
    const std::size_t width = std::min<std::size_t>(ramp[std::min(step++, ramp.size() - 1)], frames.size() / q - done);
    decoder.decode_window(state, frames.subspan(done * q, width * q),
                          std::span(audio).subspan(done * decoder.samples_per_frame(), width * decoder.samples_per_frame()));
    done += width;
  }
  return audio;
}

} // namespace qwen3_tts
