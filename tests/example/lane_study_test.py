#!/usr/bin/env python3
"""lane_study.py's views over synthetic data.

clocks: each run's SM clock and power come from the samples inside its start and end (gpu_clocks.csv in
UTC, as study_h200.sh writes it), lines nvidia-smi could not fill are skipped, and a run with no sample
shows '-'. prefill: a lane-off run's prefill GPU time is its busy time less its decode and codec steps."""
import datetime
import json
import os
import subprocess
import sys
import tempfile

script = sys.argv[1]
with tempfile.TemporaryDirectory() as d:
    t0 = 1_796_400_000.0
    arm = {"c": 4, "lane": "on", "codec_batching": "all", "steady_audio_per_s": 100.0,
           "device": {"decode_alone_p50_ms": 2.5}}
    runs = [dict(arm, repeat=0, started_unix_s=t0, ended_unix_s=t0 + 2),
            dict(arm, repeat=1, started_unix_s=t0 + 3, ended_unix_s=t0 + 5),
            dict(arm, repeat=2, started_unix_s=t0 + 100, ended_unix_s=t0 + 101)]  # no sample inside
    with open(os.path.join(d, "study_c4.json"), "w") as f:
        json.dump({"arms": runs, "identity": {}}, f)
    with open(os.path.join(d, "gpu_clocks.csv"), "w") as f:
        for i in range(60):  # every 0.1 s from t0 - 0.5: 1800 MHz and 300 W in run 0, 1980 and 500 after
            t = t0 - 0.5 + 0.1 * i
            ts = datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
            mhz, watts = (1800, 300.0) if t < t0 + 2.5 else (1980, 500.0)
            f.write(f"{ts}, {mhz}, 3201, {watts}, 40\n")
        f.write("2026/12/04 10:00:00.000, [N/A], 3201, [N/A], 40\nnvidia-smi: cut sho")
    # A zone far from UTC: a parse of the UTC timestamps as local time would miss every run.
    env = dict(os.environ, TZ="EST5")
    out = subprocess.run([sys.executable, script, "clocks", d], capture_output=True, text=True, env=env)
    print(out.stdout, out.stderr)
    assert out.returncode == 0, "lane_study.py clocks failed"
    row = next(l for l in out.stdout.splitlines() if l.startswith("| 4 | all | on |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[5] == "1800 / 1980 / -", cells
    assert cells[6] == "300 / 500 / -", cells
    assert cells[3] == "100 / 100 / 100", cells
print("lane_study.py clocks: ok")

with tempfile.TemporaryDirectory() as d:
    # busy 0.5 x 1 s = 500 ms; decode 100 x 2 ms, codec 50 x 1 ms: 250 ms of prefill in 10 steps (50 %).
    base = {"c": 4, "codec_batching": "all", "repeat": 0, "wall_s": 1.0,
            "requests": {"completed": 36, "cancelled": 0, "failed": 0},
            "steps": {"prefill": 10, "decode": 100, "codec": 50},
            "device": {"busy": 0.5, "decode_alone_p50_ms": 2.0, "codec_p50_ms": 1.0}}
    path = os.path.join(d, "study_c4.json")
    with open(path, "w") as f:
        json.dump({"arms": [dict(base, lane="off"), dict(base, lane="on")], "identity": {}}, f)
    out = subprocess.run([sys.executable, script, "prefill", path], capture_output=True, text=True)
    print(out.stdout, out.stderr)
    assert out.returncode == 0, "lane_study.py prefill failed"
    rows = {l.split("|")[3].strip(): [c.strip() for c in l.strip("|").split("|")]
            for l in out.stdout.splitlines() if l.startswith("| 4 |")}
    assert rows["off"][4:] == ["10", "4.00", "25.00", "50%"], rows["off"]
    assert rows["on"][6:] == ["-", "-"], rows["on"]  # overlapping steps: no estimate
print("lane_study.py prefill: ok")

# docs: the targets table of a real study replaces the text between the lane-table markers, and
# nothing else; markers missing is refused with the fix; a second run gives the same file.
study = os.path.join(os.path.dirname(os.path.abspath(script)), "..", "..", "docs", "data",
                     "lane_study_h200_2026-12-04_2fae93c_prefill_graphs.tar.gz")
with tempfile.TemporaryDirectory() as d:
    bench = os.path.join(d, "benchmarks.md")
    before, after = "# Benchmarks\n\ntext before\n", "\ntext after\n"
    with open(bench, "w") as f:
        f.write(before + "<!-- lane-table:begin -->\nan old table\n<!-- lane-table:end -->" + after)
    run = lambda: subprocess.run([sys.executable, script, "docs", study, "--benchmarks", bench, "--no-plot"],
                                 capture_output=True, text=True)
    out = run()
    print(out.stdout, out.stderr)
    assert out.returncode == 0, "lane_study.py docs failed"
    text = open(bench).read()
    assert text.startswith(before + "<!-- lane-table:begin -->\n"), text[:200]
    assert text.endswith("<!-- lane-table:end -->" + after), text[-200:]
    assert "an old table" not in text
    assert "| 128 | all | 0.999 (met) |" in text and "geometric mean over the 10 cells: 1.003" in text, text
    assert run().returncode == 0 and open(bench).read() == text, "a second run changed the file"
    with open(bench, "w") as f:
        f.write("no markers here\n")
    out = run()
    assert out.returncode != 0 and "lane-table" in out.stderr + out.stdout, (out.returncode, out.stderr)
    assert open(bench).read() == "no markers here\n", "a refused run changed the file"
    # A marker inside a line (a code span) is not a marker line; refused, unchanged.
    with open(bench, "w") as f:
        f.write("see `<!-- lane-table:begin -->` and `<!-- lane-table:end -->`\n")
    assert run().returncode != 0, "markers inside a line were taken"
    # CRLF files keep their line ends, outside the block and in it.
    with open(bench, "w", newline="") as f:
        f.write("a\r\n<!-- lane-table:begin -->\r\nold\r\n<!-- lane-table:end -->\r\nb\r\n")
    assert run().returncode == 0
    raw = open(bench, "rb").read()
    assert raw.startswith(b"a\r\n<!-- lane-table:begin -->\r\nWritten by") and raw.endswith(b"<!-- lane-table:end -->\r\nb\r\n")
    assert b"\n" not in raw.replace(b"\r\n", b""), "a bare LF in a CRLF file"
    # An unknown option or a missing value is refused before anything is written.
    before_bytes = raw
    for bad in (["--pgn", "x.png"], ["--benchmarks"]):
        out = subprocess.run([sys.executable, script, "docs", study, "--benchmarks", bench, "--no-plot"] + bad,
                             capture_output=True, text=True)
        assert out.returncode != 0 and "lane_study.py docs" in out.stderr, (bad, out.stderr)
        assert open(bench, "rb").read() == before_bytes, bad
print("lane_study.py docs: ok")
