#!/usr/bin/env python3
"""The reference implementation under load: batches of c requests through the official wrapper, text to audio.

The reference's row of the comparison with mstar in process and through its server (docs/benchmarks.md):
the official `qwen-tts` wrapper (`Qwen3TTSModel.from_pretrained`, bf16, PyTorch SDPA attention, on CUDA when
present) on a checkpoint folder (bench/reference/write_checkpoint.py), each batch one
`generate_custom_voice` call, its own 12 Hz decoder included. For each c: one warm-up batch (left out),
then n requests as n/c batches back to back (-n takes one count, or one per c, so that small c need
not run as many requests as large c).

    python3 bench/reference/reference_load.py --model DIR -c 1,4,16,64 -n 4,8,32,128 --text "..." --voice ryan \\
        --language english --frames 48 --json out.json

Every request makes exactly --frames frames, as mstar does on the same folder: the end token is made
impossible (a hook on the codec head sets its logit to -inf, and generate's eos_token_id is a suppressed
id, so generation never stops early) and max_new_tokens is frames + 1. The frames each request made are
counted from its audio and reported.

Figures, as `qwen3tts loadgen-http` prints them: audio seconds per second (samples out / rate / wall),
first audio p50/p95 (the wrapper is not streaming: a request's first audio is its batch's end, counted
from the batch's start), gap p95 "-"; and ms per frame step (a batch's wall over its frames).
"""
import argparse
import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from qwen_tts_reference import stub_audio_io, sync  # noqa: E402


def quantile(values, q):
    # loadgen_http.cpp's: the nearest rank, rounded half up.
    if not values:
        return 0.0
    v = sorted(values)
    return v[min(len(v) - 1, int(q * (len(v) - 1) + 0.5))]


def load(model_dir, device, dtype):
    import torch
    from qwen_tts import Qwen3TTSModel
    # Loaded on the host, then moved: transformers 4.57 places weights by device_map only through accelerate,
    # which the GPU machine need not have. The wrapper and its speech tokenizer keep the device they found.
    wrapper = Qwen3TTSModel.from_pretrained(model_dir, dtype=getattr(torch, dtype), attn_implementation="sdpa")
    codec = wrapper.model.speech_tokenizer
    wrapper.model.to(device)
    codec.model.to(device)
    wrapper.device = codec.device = torch.device(device)
    talker = wrapper.model.config.talker_config
    eos = talker.codec_eos_token_id

    def no_end(module, args, logits):
        logits[..., eos] = float("-inf")
        return logits

    wrapper.model.talker.codec_head.register_forward_hook(no_end)
    # generate() suppresses the control ids [vocab - 1024, vocab) but the end token; one of them as
    # eos_token_id is never drawn, so generation runs to max_new_tokens.
    suppressed = next(i for i in range(talker.vocab_size - 1, talker.vocab_size - 1025, -1) if i != eos)
    return wrapper, suppressed


def run_batch(wrapper, texts, voice, language, frames, suppressed):
    sync()
    t = time.perf_counter()
    wavs, rate = wrapper.generate_custom_voice(text=texts, speaker=voice, language=language,
                                               max_new_tokens=frames + 1, eos_token_id=suppressed)
    sync()
    return time.perf_counter() - t, [len(w) for w in wavs], rate


def measure(wrapper, c, n, text, voice, language, frames, suppressed, samples_per_frame):
    run_batch(wrapper, [text] * c, voice, language, frames, suppressed)  # warm-up of this batch size
    batches = math.ceil(n / c)
    firsts, frames_made, walls = [], [], []
    samples = 0
    t0 = time.perf_counter()
    for b in range(batches):
        size = min(c, n - b * c)
        wall, lengths, rate = run_batch(wrapper, [text] * size, voice, language, frames, suppressed)
        walls.append(wall)
        firsts += [wall] * size
        frames_made += [length / samples_per_frame for length in lengths]
        samples += sum(lengths)
    wall = time.perf_counter() - t0
    made = sorted(set(frames_made))
    return {"system": "reference", "c": c, "n": n, "ok": n, "failed": 0, "audio_s_per_s": samples / rate / wall,
            "first_audio_p50_ms": 1e3 * quantile(firsts, 0.5), "first_audio_p95_ms": 1e3 * quantile(firsts, 0.95),
            "gap_p95_ms": None, "ms_per_frame_step": 1e3 * sum(walls) / (batches * frames),
            "frames_each": made[0] if len(made) == 1 else made, "audio_s": samples / rate, "wall_s": wall}


def table(rows):
    """The rows as `qwen3tts loadgen-http` prints its summary, a system column first ("-": not measured)."""
    def ms(v):
        return "-" if v is None else f"{v:.1f} ms"

    lines = ["| system | c | n | ok | failed | audio s/s | first audio p50 | first audio p95 | gap p95 |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['system']} | {r['c']} | {r['n']} | {r['ok']} | {r['failed']} | {r['audio_s_per_s']:.2f} | "
                     f"{ms(r['first_audio_p50_ms'])} | {ms(r['first_audio_p95_ms'])} | {ms(r['gap_p95_ms'])} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="checkpoint folder (bench/reference/write_checkpoint.py)")
    ap.add_argument("-c", "--concurrency", default="1,4,16,64", help="batch sizes, comma-separated")
    ap.add_argument("-n", "--requests", default="64",
                    help="requests per batch size: one count for every c, or one per c, comma-separated")
    ap.add_argument("--text", default="Hello there, this is a test of the speech server.")
    ap.add_argument("--voice", default="ryan")
    ap.add_argument("--language", default="english")
    ap.add_argument("--frames", type=int, required=True, help="frames every request makes")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--json")
    a = ap.parse_args()
    concurrency = [int(x) for x in a.concurrency.split(",")]
    requests = [int(x) for x in a.requests.split(",")]
    if len(requests) == 1:
        requests *= len(concurrency)
    if len(requests) != len(concurrency) or min(concurrency + requests) < 1:
        sys.exit(f"reference_load.py: -c {a.concurrency} -n {a.requests}: give one request count, or one per c; "
                 f"every value at least 1")
    stub_audio_io()
    import torch
    import transformers
    from importlib.metadata import version
    device = "cuda" if torch.cuda.is_available() else "cpu"
    info = {"torch": torch.__version__, "transformers": transformers.__version__, "qwen_tts": version("qwen-tts"),
            "device": torch.cuda.get_device_name() if device == "cuda" else "cpu", "model": a.model,
            "dtype": a.dtype, "frames": a.frames, "text": a.text, "voice": a.voice, "language": a.language}
    print(json.dumps(info), flush=True)
    t0 = time.perf_counter()
    wrapper, suppressed = load(a.model, device, a.dtype)
    info["load_s"] = time.perf_counter() - t0
    samples_per_frame = wrapper.model.speech_tokenizer.get_decode_upsample_rate()
    rows = []
    for c, n in zip(concurrency, requests):
        row = measure(wrapper, c, n, a.text, a.voice, a.language, a.frames, suppressed, samples_per_frame)
        rows.append(row)
        print(f"c={c}: {row['frames_each']} frames a request, {row['audio_s']:.2f} s of audio in {row['wall_s']:.2f} s, "
              f"{row['ms_per_frame_step']:.1f} ms per frame step", flush=True)
        if row["frames_each"] != a.frames:
            print(f"reference_load.py: c={c}: requests made {row['frames_each']} frames, not {a.frames}", flush=True)
        if a.json:  # after every c, so that a run cut short keeps the rows it made
            Path(a.json).write_text(json.dumps({"info": info, "rows": rows}, indent=1) + "\n")
    print(table(rows), flush=True)


if __name__ == "__main__":
    main()
