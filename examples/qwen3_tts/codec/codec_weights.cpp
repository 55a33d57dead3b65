// Loads the codec decoder's weights (see codec_weights.hpp).
#include "codec_weights.hpp"

#include <algorithm>
#include <cmath>

namespace qwen3_tts {
namespace {

using shape = std::vector<std::int64_t>;

// [a][b][kernel] -> [kernel][a][b], or [kernel][b][a] when `swap`: each tap's output rows contiguous.
std::vector<float> kernel_major(const std::vector<float>& w, int a, int b, int kernel, bool swap) {
  std::vector<float> taps(w.size());
  for (int i = 0; i < a; ++i)
    for (int j = 0; j < b; ++j)
      for (int k = 0; k < kernel; ++k) {
        const std::size_t to = swap ? (std::size_t(k) * b + j) * a + i : (std::size_t(k) * a + i) * b + j;
        taps[to] = w[(std::size_t(i) * b + j) * kernel + k];
      }
  return taps;
}

struct loader {
  const codec_tensor_source& source;
  std::string prefix;

  std::vector<float> get(const std::string& name, shape s) const { return source(prefix + name, s); }

  codec_linear linear(const std::string& name, int in, int out, bool bias) const {
    codec_linear l;
    l.in = in;
    l.out = out;
    l.weight = get(name + ".weight", {out, in});
    if (bias)
      l.bias = get(name + ".bias", {out});
    return l;
  }

  codec_conv conv(const std::string& name, int in, int out, int kernel, int dilation = 1, int groups = 1) const {
    codec_conv c;
    c.in = in;
    c.out = out;
    c.kernel = kernel;
    c.dilation = dilation;
    c.groups = groups;
    const int per_group = in / groups;
    c.weight = get(name + ".conv.weight", {out, per_group, kernel});
    c.bias = get(name + ".conv.bias", {out});
    c.taps = kernel_major(c.weight, out, per_group, kernel, false);
    return c;
  }

  codec_trans_conv trans_conv(const std::string& name, int in, int out, int kernel, int stride) const {
    codec_trans_conv t;
    t.in = in;
    t.out = out;
    t.kernel = kernel;
    t.stride = stride;
    t.weight = get(name + ".conv.weight", {in, out, kernel});
    t.bias = get(name + ".conv.bias", {out});
    t.taps = kernel_major(t.weight, in, out, kernel, true);
    return t;
  }

  codec_snake_beta snake(const std::string& name, int dim) const {
    codec_snake_beta s;
    s.alpha = get(name + ".alpha", {dim});
    s.beta = get(name + ".beta", {dim});
    s.exp_alpha.resize(dim);
    s.inv_exp_beta.resize(dim);
    for (int c = 0; c < dim; ++c) {
      s.exp_alpha[c] = std::exp(s.alpha[c]);
      s.inv_exp_beta[c] = 1.0f / (std::exp(s.beta[c]) + 1e-9f);
    }
    return s;
  }

  codec_rvq rvq(const std::string& name, int layers, const codec_config& c) const {
    const int dim = c.codebook_dim / 2;
    codec_rvq q;
    for (int l = 0; l < layers; ++l) {
      const std::string cb = name + ".vq.layers." + std::to_string(l) + "._codebook.";
      auto usage = get(cb + "cluster_usage", {c.codebook_size});
      auto sum = get(cb + "embedding_sum", {c.codebook_size, dim});
      for (int e = 0; e < c.codebook_size; ++e) {
        const float u = std::max(usage[e], 1e-5f);
        for (int d = 0; d < dim; ++d)
          sum[std::size_t(e) * dim + d] /= u;
      }
      q.layers.push_back({std::move(sum)});
    }
    q.output_proj = get(name + ".output_proj.weight", {c.codebook_dim, dim, 1});
    return q;
  }
};

} // namespace

codec_weights load_codec_weights(const codec_config& c, const codec_tensor_source& source, const std::string& prefix) {
  const loader ld{source, prefix};
  codec_weights w;
  w.rvq_first = ld.rvq("quantizer.rvq_first", codec_config::num_semantic_quantizers, c);
  w.rvq_rest = ld.rvq("quantizer.rvq_rest", c.num_quantizers - codec_config::num_semantic_quantizers, c);
  w.pre_conv = ld.conv("pre_conv", c.codebook_dim, c.latent_dim, 3);

  auto& t = w.pre_transformer;
  t.input_proj = ld.linear("pre_transformer.input_proj", c.latent_dim, c.hidden_size, true);
  t.output_proj = ld.linear("pre_transformer.output_proj", c.hidden_size, c.latent_dim, true);
  t.norm = ld.get("pre_transformer.norm.weight", {c.hidden_size});
  const int q_width = c.num_attention_heads * c.head_dim;
  const int kv_width = c.num_key_value_heads * c.head_dim;
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "pre_transformer.layers." + std::to_string(l) + ".";
    codec_transformer_layer layer;
    layer.q_proj = ld.linear(p + "self_attn.q_proj", c.hidden_size, q_width, c.attention_bias);
    layer.k_proj = ld.linear(p + "self_attn.k_proj", c.hidden_size, kv_width, c.attention_bias);
    layer.v_proj = ld.linear(p + "self_attn.v_proj", c.hidden_size, kv_width, c.attention_bias);
    layer.o_proj = ld.linear(p + "self_attn.o_proj", q_width, c.hidden_size, c.attention_bias);
    layer.gate_proj = ld.linear(p + "mlp.gate_proj", c.hidden_size, c.intermediate_size, false);
    layer.up_proj = ld.linear(p + "mlp.up_proj", c.hidden_size, c.intermediate_size, false);
    layer.down_proj = ld.linear(p + "mlp.down_proj", c.intermediate_size, c.hidden_size, false);
    layer.input_layernorm = ld.get(p + "input_layernorm.weight", {c.hidden_size});
    layer.post_attention_layernorm = ld.get(p + "post_attention_layernorm.weight", {c.hidden_size});
    layer.self_attn_layer_scale = ld.get(p + "self_attn_layer_scale.scale", {c.hidden_size});
    layer.mlp_layer_scale = ld.get(p + "mlp_layer_scale.scale", {c.hidden_size});
    t.layers.push_back(std::move(layer));
  }

  for (std::size_t s = 0; s < c.upsampling_ratios.size(); ++s) {
    const std::string p = "upsample." + std::to_string(s) + ".";
    const int f = c.upsampling_ratios[s], d = c.latent_dim;
    codec_upsample_stage st;
    st.trans_conv = ld.trans_conv(p + "0", d, d, f, f);
    auto& nx = st.convnext;
    nx.dwconv = ld.conv(p + "1.dwconv", d, d, 7, 1, d);
    nx.norm_weight = ld.get(p + "1.norm.weight", {d});
    nx.norm_bias = ld.get(p + "1.norm.bias", {d});
    nx.pwconv1 = ld.linear(p + "1.pwconv1", d, 4 * d, true);
    nx.pwconv2 = ld.linear(p + "1.pwconv2", 4 * d, d, true);
    nx.gamma = ld.get(p + "1.gamma", {d});
    w.upsample.push_back(std::move(st));
  }

  w.decoder_in = ld.conv("decoder.0", c.latent_dim, c.decoder_dim, 7);
  const std::size_t n_blocks = c.upsample_rates.size();
  for (std::size_t b = 0; b < n_blocks; ++b) {
    const std::string p = "decoder." + std::to_string(b + 1) + ".block.";
    const int in = c.block_in_dim(b), out = c.block_out_dim(b), rate = c.upsample_rates[b];
    codec_decoder_block blk;
    blk.snake = ld.snake(p + "0", in);
    blk.trans_conv = ld.trans_conv(p + "1", in, out, 2 * rate, rate);
    for (int u = 0; u < 3; ++u) {
      const std::string q = p + std::to_string(u + 2) + ".";
      codec_residual_unit unit;
      unit.act1 = ld.snake(q + "act1", out);
      unit.conv1 = ld.conv(q + "conv1", out, out, 7, codec_unit_dilations[u]);
      unit.act2 = ld.snake(q + "act2", out);
      unit.conv2 = ld.conv(q + "conv2", out, out, 1);
      blk.units.push_back(std::move(unit));
    }
    w.blocks.push_back(std::move(blk));
  }
  const int out_dim = c.block_out_dim(n_blocks - 1);
  w.final_snake = ld.snake("decoder." + std::to_string(n_blocks + 1), out_dim);
  w.decoder_out = ld.conv("decoder." + std::to_string(n_blocks + 2), out_dim, 1, 7);
  return w;
}

} // namespace qwen3_tts
