#!/usr/bin/env python3
"""mstar-validate as a user and a script run it: exit status 0 (all valid), 1 (a file is not), 2
(usage); the lanes of every config in configs/; --json output that parses; hostile files refused
with exit 1 and a message, never a crash or a hang.

Usage: validate_cli_test.py <mstar-validate binary> <source root>"""
import glob
import json
import os
import random
import subprocess
import sys
import tempfile

BIN, ROOT = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
COLOCATED = ["qwen3tts.yaml", "qwen3tts_1p7b.yaml", "qwen3tts_base.yaml", "qwen3tts_voicedesign.yaml"]
failures = []


def run(*args, timeout=60):
    p = subprocess.run([BIN, *args], capture_output=True, timeout=timeout, cwd=ROOT)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def check(cond, what, detail=""):
    if not cond:
        failures.append(what)
        print(f"FAIL: {what}\n{detail}", file=sys.stderr)


def config(name):
    return os.path.join("configs", name)


# Every config in configs/, human output.
configs = sorted(glob.glob(os.path.join(ROOT, "configs", "*.yaml")))
check(len(configs) >= 5, "configs/ holds the five Qwen3-TTS configs")
rc, out, err = run(*[os.path.relpath(c, ROOT) for c in configs])
check(rc == 0, "every config in configs/ is valid (exit 0)", out + err)
for name in COLOCATED:
    section = out.split(config(name) + ": ")[1].split("\nconfigs/")[0] if config(name) + ": " in out else ""
    check(section.startswith("valid"), f"{name} is reported valid", out)
    codec = [l for l in section.splitlines() if l.split()[:1] == ["codec_chunk"]]
    check(len(codec) == 1 and codec[0].split()[1:] == ["side", "keys", "[codec_state]"],
          f"{name}: codec_chunk on the side lane with keys [codec_state]", section)
    for talker in ("talker_prefill", "talker_decode"):
        check(any(l.split() == [talker, "chain"] for l in section.splitlines()), f"{name}: {talker} on the chain",
              section)
split = out.split(config("qwen3tts_split.yaml") + ": ")[1] if config("qwen3tts_split.yaml") + ": " in out else ""
check(any(l.split() == ["codec_chunk", "chain"] for l in split.splitlines()[:4]),
      "the split config runs codec_chunk on the chain", split)

# --json: one document for scripts.
rc, out, err = run("--json", *[config(n) for n in COLOCATED + ["qwen3tts_split.yaml"]])
check(rc == 0, "--json on the valid configs exits 0", out + err)
try:
    doc = json.loads(out)
    check(doc["valid"] is True, "--json says all valid")
    by_file = {f["file"]: f for f in doc["files"]}
    for name in COLOCATED:
        nodes = {n["name"]: n for n in by_file[config(name)]["nodes"]}
        check(nodes["codec_chunk"]["lane"] == "side" and nodes["codec_chunk"]["side_keys"] == ["codec_state"],
              f"--json: {name} codec_chunk side [codec_state]", json.dumps(nodes))
        check(nodes["codec_chunk"]["group"] == "Codec" and nodes["codec_chunk"]["worker"] == "gpu0",
              f"--json: {name} codec_chunk in group Codec on worker gpu0", json.dumps(nodes))
    nodes = {n["name"]: n for n in by_file[config("qwen3tts_split.yaml")]["nodes"]}
    check(nodes["codec_chunk"]["lane"] == "chain" and nodes["codec_chunk"]["side_keys"] == [],
          "--json: the split config's codec_chunk on the chain")
except (ValueError, KeyError) as e:
    check(False, f"--json output parses and has files/nodes ({e})", out)

# Usage errors: exit 2.
for args, what in (([], "no files"), (["--bogus", config("qwen3tts.yaml")], "an unknown option")):
    rc, out, err = run(*args)
    check(rc == 2, f"{what} is a usage error (exit 2), got {rc}", out + err)
rc, out, err = run("--help")
check(rc == 0 and "--json" in out, "--help prints the usage and exits 0", out + err)

with tempfile.TemporaryDirectory() as tmp:
    def write(name, data):
        path = os.path.join(tmp, name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    # The split config with side_stream added: refused, alone on its worker.
    text = open(os.path.join(ROOT, "configs", "qwen3tts_split.yaml"), encoding="utf-8").read()
    anchor = "      - name: Codec\n"
    check(anchor in text, "the split config has the Codec group anchor")
    side = write("split_side.yaml", text.replace(anchor, anchor + "        side_stream: true\n").encode())
    rc, out, err = run(side)
    check(rc == 1, "the split config with side_stream is refused (exit 1)", out + err)
    check("error [lane_alone_on_worker]" in out and "side lane refused: the node is alone on its worker" in out,
          "the refusal names lane_alone_on_worker and its sentence", out)
    rc, out, err = run("--json", side, config("qwen3tts.yaml"))
    check(rc == 1, "--json with one refused file exits 1", out + err)
    try:
        doc = json.loads(out)
        check(doc["valid"] is False, "--json: not all valid")
        errors = doc["files"][0]["errors"]
        check(len(errors) == 1 and errors[0]["rule"] == "lane_alone_on_worker" and errors[0]["line"] > 0,
              "--json: the refusal's rule and line", json.dumps(errors))
        check(doc["files"][1]["valid"] is True, "--json: the valid file next to it stays valid")
    except (ValueError, KeyError, IndexError) as e:
        check(False, f"--json output for a refusal parses ({e})", out)

    # Hostile files: exit 1 with a message, never a signal or a hang.
    rng = random.Random(20261202)
    hostile = {
        "empty": write("empty.yaml", b""),
        "truncated": write("truncated.yaml", text.encode()[: len(text) // 2]),
        "deep": write("deep.yaml", b"[" * 100000),
        "big": write("big.yaml", b"model: m\n" + b"#" * (10 * 1024 * 1024)),
        "garbage": write("garbage.bin", bytes(rng.randrange(256) for _ in range(4096))),
        "nul": write("nul.yaml", b"model: a\0b\n"),
        "utf16": write("utf16.yaml", "model: m\n".encode("utf-16")),
        "comma": write("comma.yaml", b","),
        "unknown key": write("unknown.yaml", text.replace("streams: 1", "streems: 1", 1).encode()),
        "directory": tmp,
        "missing": os.path.join(tmp, "missing.yaml"),
        "non-UTF-8 name": write("caf\udce9.yaml", b"model: [\n"),  # byte 0xe9: not UTF-8
    }
    for what, path in hostile.items():
        try:
            rc, out, err = run(path, timeout=30)
        except subprocess.TimeoutExpired:
            check(False, f"{what}: mstar-validate finishes")
            continue
        check(rc == 1, f"{what}: exit 1 (got {rc})", out + err)
        check("error [" in out, f"{what}: an error message with its rule", out + err)
        rc, out, err = run("--json", path, timeout=30)
        try:
            doc = json.loads(out)
            check(rc == 1 and doc["valid"] is False and doc["files"][0]["errors"],
                  f"{what}: --json reports the error", out)
        except ValueError as e:
            check(False, f"{what}: --json output parses ({e})", out)

print(f"mstar-validate CLI: {len(failures)} failure(s)")
sys.exit(1 if failures else 0)
