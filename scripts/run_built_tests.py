#!/usr/bin/env python3
"""Runs the tests of a meson build directory without meson, from its meson-info/intro-tests.json, as `meson test`
would judge them: exit 0 passes, 77 skips, anything else (a timeout included) fails. For a build made on the build
machine and carried to the GPU machine (scripts/carry_build.sh, bench/gpu_session.sh's stage `carried`), where
building again would take minutes of the call and meson's own runner may be another version.

    python3 scripts/run_built_tests.py BUILD_DIR LOG_DIR [--suites gpu,host,parity | all] [--jobs N]

Tests run in parallel (N at once, default half the cores) but those meson marks not parallel, which run alone
afterwards; each test's output goes to LOG_DIR/<name>.log. A test whose interpreter (cmd[0]) was a python3 of the
build machine that this machine lacks gets this python3. Prints the failures and the slow tests, then one line
"N passed, N failed, N skipped", and exits 1 when a test failed or none ran."""
import argparse
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build")
    ap.add_argument("logs")
    ap.add_argument("--suites", default="gpu,host,parity",
                    help="meson suites to run, comma separated (a test runs when one of its suites is listed), or all")
    ap.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    a = ap.parse_args()
    try:
        with open(os.path.join(a.build, "meson-info", "intro-tests.json"), encoding="utf-8") as f:
            every = json.load(f)
    except (OSError, ValueError) as e:
        print(f"run_built_tests: cannot read {a.build}/meson-info/intro-tests.json ({e}): is it a meson build "
              f"directory, unpacked whole?", file=sys.stderr)
        print("0 passed, 1 failed, 0 skipped")
        return 1
    wanted = {s.strip() for s in a.suites.split(",") if s.strip()}
    if wanted == {"all"}:
        wanted = {s.split(":")[-1] for t in every for s in t["suite"]}
    tests = [t for t in every if any(s.split(":")[-1] in wanted for s in t["suite"])]
    os.makedirs(a.logs, exist_ok=True)
    python = shutil.which("python3") or sys.executable

    def run(t):
        cmd = list(t["cmd"])
        if not os.path.exists(cmd[0]) and os.path.basename(cmd[0]).startswith("python"):
            cmd[0] = python
        env = dict(os.environ, **t["env"])
        env.setdefault("MESON_TEST_ITERATION", "1")
        start = time.monotonic()
        with open(os.path.join(a.logs, t["name"].replace("/", "_") + ".log"), "w", encoding="utf-8") as log:
            try:
                rc = subprocess.run(cmd, cwd=t["workdir"] or a.build, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    timeout=t["timeout"] or None).returncode
            except subprocess.TimeoutExpired:
                rc = f"timeout after {t['timeout']} s"
            except OSError as e:
                rc = f"not started ({e})"
        return t["name"], rc, time.monotonic() - start

    with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
        results = list(pool.map(run, [t for t in tests if t["is_parallel"]]))
    results += [run(t) for t in tests if not t["is_parallel"]]
    passed = sum(rc == 0 for _, rc, _ in results)
    skipped = sum(rc == 77 for _, rc, _ in results)
    failed = len(results) - passed - skipped
    for name, rc, seconds in sorted(results, key=lambda r: -r[2]):
        if rc not in (0, 77):
            print(f"  FAIL {name}: exit {rc} ({seconds:.0f} s; {a.logs}/{name.replace('/', '_')}.log)")
        elif seconds >= 30:
            print(f"  {'ok' if rc == 0 else 'skip'} {name} ({seconds:.0f} s)")
    print(f"{passed} passed, {failed} failed, {skipped} skipped (suites {','.join(sorted(wanted))})")
    return 1 if failed or not results else 0


if __name__ == "__main__":
    sys.exit(main())
