#!/usr/bin/env python3
"""The reference implementation's speed at the real Qwen3-TTS 12 Hz sizes, random weights.

The baseline every mstar figure on the real model is compared with (docs/benchmarks.md): the official
`qwen-tts` package (pinned 0.1.1, transformers 4.57.3, bf16, PyTorch SDPA attention) doing the work
mstar does: a Talker decode step (the Talker plus the code predictor's 15 codes, as the reference's
`talker.forward` runs it inside `generate`), whole requests through `model.generate` at a fixed frame
count, and the 12 Hz decoder on the codes. Random weights never emit the end token at a sensible time,
so the end token is replaced by a suppressed id and every request makes exactly --frames frames.

    python3 bench/reference/qwen_tts_reference.py --size 0.6b --json out.json

Sizes: the published config.json values of Qwen3-TTS-12Hz-0.6B / -1.7B (Talker, code predictor) and
of the 12 Hz speech tokenizer's decoder. Prints a table; --json writes every figure.
"""
import argparse
import json
import statistics
import sys
import time
import importlib.machinery
import types


class _StandIn(types.ModuleType):
    """A module the measured code never uses: any attribute is a function that refuses to run."""

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)

        def refuse(*args, **kwargs):
            raise RuntimeError("%s.%s: a stand-in (bench/reference/qwen_tts_reference.py)" % (self.__name__, attr))

        return refuse


def stub_audio_io():
    # qwen_tts imports, at module level, packages for reference-audio loading (voice cloning:
    # librosa, soundfile) and for the 25 Hz tokenizer (sox, onnxruntime, torchaudio, einops), none of
    # which the 12 Hz paths this benchmark measures call. Where the GPU machine lacks them, stand-ins
    # keep the import working; each carries a module spec, since transformers asks
    # importlib.util.find_spec about some of them and find_spec refuses a module whose __spec__ is None.
    for name in ("librosa", "soundfile", "sox", "onnxruntime", "torchaudio", "einops"):
        if name in sys.modules:
            continue
        try:
            __import__(name)
            continue
        except ImportError:
            pass
        parts = {"librosa": ["librosa.filters"], "torchaudio": ["torchaudio.compliance", "torchaudio.compliance.kaldi"]}
        for full in [name] + parts.get(name, []):
            mod = _StandIn(full)
            mod.__spec__ = importlib.machinery.ModuleSpec(full, None)
            sys.modules[full] = mod
            if "." in full:
                parent, child = full.rsplit(".", 1)
                setattr(sys.modules[parent], child, mod)


def talker_config(size):
    hidden, inter = {"0.6b": (1024, 3072), "1.7b": (2048, 6144)}[size]
    return {
        "hidden_size": hidden, "intermediate_size": inter, "num_hidden_layers": 28,
        "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
        "hidden_act": "silu", "vocab_size": 3072, "text_vocab_size": 151936, "text_hidden_size": 2048,
        "num_code_groups": 16, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
        "rope_scaling": {"mrope_section": [24, 20, 20], "interleaved": True, "rope_type": "default",
                         "type": "default"},
        "max_position_embeddings": 32768,
        "codec_bos_id": 2149, "codec_eos_token_id": 2150, "codec_pad_id": 2148, "codec_think_id": 2154,
        "codec_nothink_id": 2155, "codec_think_bos_id": 2156, "codec_think_eos_id": 2157,
        "codec_language_id": {"chinese": 2055, "english": 2050},
        "spk_id": {"ryan": 3061, "vivian": 3065}, "spk_is_dialect": {"ryan": False, "vivian": False},
        "code_predictor_config": {
            "vocab_size": 2048, "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 5,
            "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "num_code_groups": 16,
            "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "max_position_embeddings": 65536,
        },
    }


def decoder_config():
    # The released speech_tokenizer/config.json's decoder (the class defaults differ: hidden 1024,
    # intermediate 3072, and no codebook_dim).
    return dict(
        codebook_size=2048, codebook_dim=512, hidden_size=512, head_dim=64, latent_dim=1024,
        intermediate_size=1024, num_attention_heads=16, num_key_value_heads=16, num_hidden_layers=8,
        sliding_window=72, rms_norm_eps=1e-5, rope_theta=10000, layer_scale_initial_scale=0.01,
        num_quantizers=16, num_semantic_quantizers=1, semantic_codebook_size=4096,
        upsample_rates=[8, 5, 4, 3], upsampling_ratios=[2, 2], decoder_dim=1536, max_position_embeddings=8000)


def build(size, device, dtype):
    import torch
    from qwen_tts.core.models.configuration_qwen3_tts import Qwen3TTSConfig
    from qwen_tts.core.models.modeling_qwen3_tts import Qwen3TTSForConditionalGeneration
    from qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2 import (
        Qwen3TTSTokenizerV2DecoderConfig)
    from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Decoder

    cfg = Qwen3TTSConfig(talker_config=talker_config(size), tts_model_size=size.replace(".", "b")[:3],
                         tts_model_type="custom_voice", tokenizer_type="qwen3_tts_tokenizer_12hz",
                         speaker_encoder_config={"enc_dim": 1024, "sample_rate": 24000})
    cfg._attn_implementation = "sdpa"
    cfg.talker_config._attn_implementation = "sdpa"
    cfg.talker_config.code_predictor_config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = Qwen3TTSForConditionalGeneration(cfg).to(device=device, dtype=dtype).eval()
    dcfg = Qwen3TTSTokenizerV2DecoderConfig(**decoder_config())
    dcfg._attn_implementation = "sdpa"
    decoder = Qwen3TTSTokenizerV2Decoder(dcfg).to(device=device, dtype=dtype).eval()
    return model, decoder


def sync():
    import torch
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def prompts(batch, text_tokens, seed):
    import torch
    g = torch.Generator().manual_seed(seed)
    ids = []
    for _ in range(batch):
        text = torch.randint(1000, 150000, (text_tokens,), generator=g).tolist()
        ids.append(torch.tensor([[151644, 77091, 198] + text + [151645, 198, 151644, 77091, 198]]))
    return ids


def generate(model, batch, frames, text_tokens, device, greedy):
    import torch
    ids = [t.to(device) for t in prompts(batch, text_tokens, 1234 + batch)]
    with torch.inference_mode():
        codes, _ = model.generate(
            input_ids=ids, languages=["english"] * batch, speakers=["ryan"] * batch,
            max_new_tokens=frames + 1, do_sample=not greedy, subtalker_dosample=not greedy,
            eos_token_id=3071)  # a suppressed id: generation runs the full frame count
    return codes


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", default="0.6b", choices=["0.6b", "1.7b"])
    ap.add_argument("--frames", type=int, default=32)
    ap.add_argument("--text-tokens", type=int, default=24)
    ap.add_argument("--batches", default="1,8,32,64,128")
    ap.add_argument("--codec-batches", default="1,8,32,64")
    ap.add_argument("--greedy", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args()
    stub_audio_io()
    import torch
    import transformers
    import qwen_tts  # noqa: F401
    from importlib.metadata import version
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    info = {"torch": torch.__version__, "transformers": transformers.__version__,
            "qwen_tts": version("qwen-tts"), "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
            "size": a.size, "frames": a.frames, "dtype": str(dtype)}
    print(json.dumps(info), flush=True)
    t0 = time.perf_counter()
    model, decoder = build(a.size, device, dtype)
    sync()
    info["build_s"] = time.perf_counter() - t0
    generate(model, 1, 4, a.text_tokens, device, a.greedy)  # warm-up
    rows = []
    for b in [int(x) for x in a.batches.split(",")]:
        sync()
        t = time.perf_counter()
        codes = generate(model, b, a.frames, a.text_tokens, device, a.greedy)
        sync()
        dt = time.perf_counter() - t
        made = sum(c.shape[0] for c in codes)
        audio_s = made / 12.5
        rows.append({"batch": b, "frames_each": made / b, "wall_s": dt, "ms_per_frame_step": 1e3 * dt / a.frames,
                     "audio_s_per_s": audio_s / dt})
        print(f"generate batch {b:4d}: {dt:8.2f} s, {1e3 * dt / a.frames:8.1f} ms per step, "
              f"{audio_s / dt:8.2f} audio s/s", flush=True)
    codec_rows = []
    with torch.inference_mode():
        for b in [int(x) for x in a.codec_batches.split(",")]:
            codes = torch.randint(0, 2048, (b, 16, a.frames), device=device)
            decoder.chunked_decode(codes)  # warm-up of this shape
            times = []
            for _ in range(3):
                sync()
                t = time.perf_counter()
                decoder.chunked_decode(codes)
                sync()
                times.append(time.perf_counter() - t)
            dt = statistics.median(times)
            audio_s = b * a.frames / 12.5
            codec_rows.append({"batch": b, "s": dt, "ms_per_audio_s": 1e3 * dt / audio_s})
            print(f"codec batch {b:4d}: {1e3 * dt:8.2f} ms for {audio_s:.1f} audio s, "
                  f"{1e3 * dt / audio_s:7.2f} ms per audio s", flush=True)
    out = {"info": info, "generate": rows, "codec": codec_rows}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
