#!/usr/bin/env python3
"""faster-qwen3-tts under load: one request at a time (CUDA graphs), text to audio, streaming or not.

The second peer of the comparison with mstar (docs/benchmarks.md), on the same checkpoint folder
(bench/reference/write_checkpoint.py) as mstar and the reference. It runs offline on the GPU machine's
transformers 5 and torch, with five carried wheels in a PYTHONPATH of their own (qwen-tts-hf installs a
`qwen_tts` module that would shadow the pinned reference's):

    # here, with pip's registry (the wheels are pure Python but psutil's and soxr's, abi3; accelerate is
    # qwen-tts-hf's pin, psutil accelerate's dependency, soxr what transformers 5's AutoProcessor imports):
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d .whl/faster faster-qwen3-tts==0.5.4 qwen-tts-hf==0.1.1.post1 accelerate==1.12.0 psutil==7.2.2 \
        soxr==0.5.0.post1
    # on the GPU machine (carry .whl):
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-faster .whl/faster/*.whl
    PYTHONPATH=/tmp/site-faster python3 bench/reference/faster_load.py --model DIR -n 16 --frames 48 \
        --text "..." --voice ryan --language english --chunks 0,1,12 --json out.json

Its engine holds one request (static CUDA-graph buffers), so c is 1. --chunks: 0 is
`generate_custom_voice` (first audio at the request's end), k > 0 is `generate_custom_voice_streaming`
with k frames a chunk (first audio when the first chunk arrives, gaps between chunks). Each chunk size
has one warm-up request first (left out); the first request also captures the CUDA graphs.

Every request makes exactly --frames frames, as mstar does on the same folder: the package's own
min_new_tokens masks the end token until --frames code-0 ids, and max_new_tokens stops it there.
"""
import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from qwen_tts_reference import stub_audio_io, sync  # noqa: E402
from reference_load import quantile, table  # noqa: E402


def patch_mimi_rope():
    # qwen-tts-hf registers a "default" RoPE initializer that reads config.rope_theta; transformers 5.17's
    # MimiConfig (the speech tokenizer's encoder) keeps the value in rope_parameters only, so loading any
    # checkpoint fails with "'MimiConfig' object has no attribute 'rope_theta'". The wrapper hands it over.
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    registered = ROPE_INIT_FUNCTIONS.get("default")
    if registered is None or registered.__module__ != "qwen_tts._transformers_compat":
        return

    def default_rope(config, device=None, seq_len=None, layer_type=None):
        if "rope_theta" not in vars(config) and isinstance(getattr(config, "rope_parameters", None), dict):
            config.rope_theta = config.rope_parameters["rope_theta"]
        return registered(config, device, seq_len, layer_type)

    ROPE_INIT_FUNCTIONS["default"] = default_rope


def one_request(model, args, chunk):
    """Wall, first audio, gaps between audio arrivals (s) and samples of one request."""
    gen = dict(text=args.text, speaker=args.voice, language=args.language, max_new_tokens=args.frames,
               min_new_tokens=args.frames)
    sync()
    t0 = time.perf_counter()
    if chunk == 0:
        wavs, rate = model.generate_custom_voice(**gen)
        sync()
        wall = time.perf_counter() - t0
        return wall, wall, [], sum(len(w) for w in wavs), rate
    first, last, gaps, samples, rate = None, t0, [], 0, 24000
    for audio, rate, _ in model.generate_custom_voice_streaming(chunk_size=chunk, **gen):
        now = time.perf_counter()
        if first is None:
            first = now - t0
        else:
            gaps.append(now - last)
        last = now
        samples += len(audio)
    sync()
    return time.perf_counter() - t0, first, gaps, samples, rate


def measure(model, args, chunk, samples_per_frame):
    one_request(model, args, chunk)  # warm-up (and, the first time, the CUDA graphs' capture)
    firsts, gaps, frames_made = [], [], []
    samples = 0
    t0 = time.perf_counter()
    for _ in range(args.requests):
        _, first, request_gaps, request_samples, rate = one_request(model, args, chunk)
        firsts.append(first)
        gaps += request_gaps
        samples += request_samples
        frames_made.append(round(request_samples / samples_per_frame, 2))
    wall = time.perf_counter() - t0
    made = sorted(set(frames_made))
    name = "faster-qwen3-tts" + (f" (chunk {chunk})" if chunk else "")
    return {"system": name, "c": 1, "n": args.requests, "ok": args.requests, "failed": 0,
            "audio_s_per_s": samples / rate / wall, "first_audio_p50_ms": 1e3 * quantile(firsts, 0.5),
            "first_audio_p95_ms": 1e3 * quantile(firsts, 0.95),
            "gap_p95_ms": 1e3 * quantile(gaps, 0.95) if chunk else None,
            "ms_per_frame_step": 1e3 * wall / (args.requests * args.frames), "chunk_frames": chunk,
            "frames_each": made[0] if len(made) == 1 else made, "audio_s": samples / rate, "wall_s": wall}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="checkpoint folder (bench/reference/write_checkpoint.py)")
    ap.add_argument("-n", "--requests", type=int, default=16, help="requests per chunk size")
    ap.add_argument("--text", default="Hello there, this is a test of the speech server.")
    ap.add_argument("--voice", default="ryan")
    ap.add_argument("--language", default="english")
    ap.add_argument("--frames", type=int, required=True, help="frames every request makes")
    ap.add_argument("--chunks", default="0,1,12", help="0: not streaming; k: streaming, k frames a chunk")
    ap.add_argument("--max-seq-len", type=int, default=1024, help="the Talker's static KV cache length")
    ap.add_argument("--json")
    a = ap.parse_args()
    stub_audio_io()
    import torch
    import transformers
    from importlib.metadata import version
    if not torch.cuda.is_available():
        sys.exit("faster_load.py: faster-qwen3-tts needs a CUDA device (its decode steps are CUDA graphs)")
    import qwen_tts  # noqa: F401  (qwen-tts-hf: registers its RoPE initializer, patched next)
    patch_mimi_rope()
    from faster_qwen3_tts import FasterQwen3TTS
    info = {"torch": torch.__version__, "transformers": transformers.__version__,
            "faster_qwen3_tts": version("faster-qwen3-tts"), "qwen_tts_hf": version("qwen-tts-hf"),
            "device": torch.cuda.get_device_name(), "model": a.model, "frames": a.frames, "text": a.text,
            "voice": a.voice, "language": a.language}
    print(json.dumps(info), flush=True)
    t0 = time.perf_counter()
    model = FasterQwen3TTS.from_pretrained(a.model, device="cuda", dtype=torch.bfloat16, attn_implementation="sdpa",
                                           max_seq_len=a.max_seq_len)
    info["load_s"] = time.perf_counter() - t0
    samples_per_frame = model.model.model.speech_tokenizer.get_decode_upsample_rate()
    rows = []
    for chunk in [int(x) for x in a.chunks.split(",")]:
        row = measure(model, a, chunk, samples_per_frame)
        rows.append(row)
        print(f"{row['system']}: {row['frames_each']} frames a request, {row['audio_s']:.2f} s of audio in "
              f"{row['wall_s']:.2f} s, {row['ms_per_frame_step']:.1f} ms per frame", flush=True)
        if row["frames_each"] != a.frames:
            print(f"faster_load.py: {row['system']}: requests made {row['frames_each']} frames, not {a.frames}",
                  flush=True)
    print(table(rows), flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps({"info": info, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
