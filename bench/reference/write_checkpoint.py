#!/usr/bin/env python3
"""Writes a random-weight Qwen3-TTS 12 Hz CustomVoice checkpoint at the published 0.6B or 1.7B size.

The folder every system of the comparison loads (mstar in process, mstar's server, the reference wrapper):
the official Hugging Face layout (config.json, generation_config.json, safetensors weights, text tokenizer
files, speech_tokenizer/), written with the reference package's own classes, so the official loader reads
it as it reads a released checkpoint.

    python3 bench/reference/write_checkpoint.py --size 0.6b --out /tmp/ck06 --frames 48

- Talker and code predictor: the published config.json values (qwen_tts_reference.talker_config), bf16.
- Speech tokenizer: the released 12 Hz decoder (qwen_tts_reference.decoder_config), float32 as released;
  its encoder only serves voice cloning, so it is the smallest the official loader accepts
  (tools/make_fixtures.py's).
- Text tokenizer: the tiny fixture's byte-level BPE (tests/fixtures/qwen3tts/tiny06), its special ids in the
  config; the text embedding keeps its 151936 rows, as released.
- Weights: tools/make_fixtures.py's draws (norms near one, quiet codec output), so activations stay sane.
- Frames: random weights never end a request at a sensible time, so generation_config.json fixes the count:
  "min_new_tokens": F + 1 masks the end token until F + 1 code-0 ids and "max_new_tokens": F + 1 stops after
  F frames; every system then makes exactly F frames a request.

Speakers "ryan" and "vivian", languages english and chinese (talker_config's). The model is built on
--device (cuda where present) and drawn from the same host generator on any device, so a seed gives the
same weights everywhere; on 2 busy CPU cores here 0.6B takes 55 s and 1.7B 115 s.
"""
import argparse
import json
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
TINY = ROOT / "tests/fixtures/qwen3tts/tiny06"
TOKENIZER_FILES = ["vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json",
                   "added_tokens.json"]
TEXT_SPECIAL_IDS = ["im_start_token_id", "im_end_token_id", "tts_pad_token_id", "tts_bos_token_id",
                    "tts_eos_token_id"]

sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tools"))
from qwen_tts_reference import decoder_config, stub_audio_io, talker_config  # noqa: E402

stub_audio_io()  # before make_fixtures imports the reference's wrapper
import torch  # noqa: E402
import make_fixtures as fixtures  # noqa: E402  (checks the pinned versions on import)
from qwen_tts.core.models.configuration_qwen3_tts import Qwen3TTSConfig  # noqa: E402
from qwen_tts.core.models.modeling_qwen3_tts import Qwen3TTSForConditionalGeneration  # noqa: E402
from qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2 import Qwen3TTSTokenizerV2Config  # noqa: E402


def copy_text_tokenizer(folder: Path):
    for name in TOKENIZER_FILES:
        shutil.copy(TINY / name, folder / name)
    tiny = json.loads((TINY / "config.json").read_text())
    return {key: tiny[key] for key in TEXT_SPECIAL_IDS}


def model_config(size, text_ids):
    return Qwen3TTSConfig(
        talker_config=talker_config(size), speaker_encoder_config={"enc_dim": 1024, "sample_rate": 24000},
        tokenizer_type="qwen3_tts_tokenizer_12hz", tts_model_size={"0.6b": "0b6", "1.7b": "1b7"}[size],
        tts_model_type="custom_voice", architectures=["Qwen3TTSForConditionalGeneration"], **text_ids)


def speech_tokenizer_config():
    # The smallest encoder the loader accepts is make_fixtures' tiny one, at the released codebook size.
    tiny, _ = fixtures.codec_config("tiny06", 2048)
    decoder = decoder_config()
    samples_per_frame = 1
    for r in decoder["upsample_rates"] + decoder["upsampling_ratios"]:
        samples_per_frame *= r
    return Qwen3TTSTokenizerV2Config(
        encoder_config=tiny.encoder_config.to_dict(), decoder_config=decoder, encoder_valid_num_quantizers=16,
        input_sample_rate=24000, output_sample_rate=24000, decode_upsample_rate=samples_per_frame,
        encode_downsample_rate=1920, architectures=["Qwen3TTSTokenizerV2Model"]), samples_per_frame


def write_model(folder: Path, size, device, seed):
    text_ids = copy_text_tokenizer(folder)
    config = model_config(size, text_ids)
    torch.manual_seed(seed)
    with torch.device(device):
        model = Qwen3TTSForConditionalGeneration(config).eval()
    fixtures.randomise(model, seed)
    model = model.to(torch.bfloat16)
    model.save_pretrained(str(folder), safe_serialization=True, max_shard_size="4GB")
    fixtures.write_main_config(folder, config, "bfloat16")
    return sum(p.numel() for p in model.parameters())


def write_generation_config(folder: Path, frames):
    fixtures.write_generation_config(folder)
    path = folder / "generation_config.json"
    gen = json.loads(path.read_text())
    gen.update(max_new_tokens=frames + 1, min_new_tokens=frames + 1)
    path.write_text(json.dumps(gen, indent=2) + "\n")


def write_speech_tokenizer(folder: Path, seed):
    config, samples_per_frame = speech_tokenizer_config()
    # make_fixtures writes the folder from its codec_config(case, codebook); hand it the released one.
    tiny_config = fixtures.codec_config
    fixtures.codec_config = lambda case, codebook: (config, samples_per_frame)
    try:
        return fixtures.write_speech_tokenizer(folder, None, 2048, seed)
    finally:
        fixtures.codec_config = tiny_config


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", default="0.6b", choices=["0.6b", "1.7b"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--frames", type=int, required=True, help="frames every request makes")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--seed", type=int, default=60)
    a = ap.parse_args()
    if a.frames < 1:
        sys.exit(f"write_checkpoint.py: --frames {a.frames}: give at least 1")
    folder = Path(a.out)
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    t0 = time.perf_counter()
    params = write_model(folder, a.size, a.device, a.seed)
    write_generation_config(folder, a.frames)
    t1 = time.perf_counter()
    samples_per_frame = write_speech_tokenizer(folder / "speech_tokenizer", a.seed + 1)
    t2 = time.perf_counter()
    total = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    print(f"write_checkpoint.py: {a.size} ({params / 1e6:.0f} M parameters, bf16) in {folder}, {total / 1e9:.2f} GB; "
          f"model {t1 - t0:.1f} s, speech tokenizer {t2 - t1:.1f} s ({samples_per_frame} samples a frame) on "
          f"{a.device}; {a.frames} frames a request", flush=True)


if __name__ == "__main__":
    main()
