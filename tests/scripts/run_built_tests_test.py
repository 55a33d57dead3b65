#!/usr/bin/env python3
"""scripts/run_built_tests.py, which runs a carried build's tests on the GPU machine without meson, judged on a
made-up build directory: exit 0 passes, 77 skips, anything else and a timeout fail; the suites chosen are the
only ones run (all: every suite); a test's environment and working directory are meson's; a python3 of another machine becomes
this one's; the tests meson marks not parallel run after the others; the summary line counts them all and the
exit status says whether any failed.

Usage: run_built_tests_test.py SOURCE_ROOT
"""

import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(sys.argv[1])
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


def test(name, script, suite="gpu", timeout=30, env=None, workdir=None, parallel=True, cmd0="/bin/sh"):
    return {"name": name, "cmd": [cmd0, "-c", script],
            "env": env or {}, "workdir": workdir, "timeout": timeout, "suite": [f"mstar:{suite}"],
            "is_parallel": parallel, "priority": 0, "protocol": "exitcode", "depends": [], "extra_paths": []}


def run(build, logs, *args):
    p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "run_built_tests.py"), build, logs, *args],
                       capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout + p.stderr


with tempfile.TemporaryDirectory() as tmp:
    build, logs = os.path.join(tmp, "build"), os.path.join(tmp, "logs")
    os.makedirs(os.path.join(build, "meson-info"))
    order = os.path.join(tmp, "order")
    tests = [
        test("passes", "exit 0"),
        test("skips", "exit 77"),
        test("fails", "exit 3"),
        test("hangs", "sleep 30", timeout=1),
        test("env and cwd", f'[ "$MSTAR_X" = 42 ] && [ "$(pwd)" = "{tmp}" ]', env={"MSTAR_X": "42"}, workdir=tmp),
        test("cwd defaults to the build", f'[ "$(pwd)" = "{build}" ]'),
        test("python of another machine", "import sys; sys.exit(0)", cmd0="/nowhere/.pyenv/shims/python3"),
        test("left out", "exit 1", suite="compile_fail"),
        test("alone", f'[ -e "{order}" ]', parallel=False),
        test("touches", f'sleep 0.2; touch "{order}"'),
    ]
    with open(os.path.join(build, "meson-info", "intro-tests.json"), "w", encoding="utf-8") as f:
        json.dump(tests, f)

    rc, out = run(build, logs, "--suites", "gpu", "--jobs", "4")
    check(rc == 1, f"a failed test makes the exit status 1, got {rc}: {out}")
    check("6 passed, 2 failed, 1 skipped" in out, f"counts 6 passed, 2 failed, 1 skipped: {out}")
    check("FAIL fails: exit 3" in out, f"names the failed test and its exit: {out}")
    check("FAIL hangs: exit timeout after 1 s" in out, f"names the test that timed out: {out}")
    check("left out" not in out and not os.path.exists(os.path.join(logs, "left out.log")),
          f"runs no test of a suite not asked for: {out}")
    check(os.path.exists(os.path.join(logs, "passes.log")), "writes each test's output to LOG_DIR/<name>.log")

    rc, out = run(build, logs, "--suites", "all", "--jobs", "4")
    check(rc == 1 and "6 passed, 3 failed, 1 skipped (suites compile_fail,gpu)" in out,
          f"--suites all runs every suite's tests: {out}")

    with open(os.path.join(build, "meson-info", "intro-tests.json"), "w", encoding="utf-8") as f:
        json.dump([t for t in tests if t["name"] in ("passes", "skips")], f)
    rc, out = run(build, logs)
    check(rc == 0 and "1 passed, 0 failed, 1 skipped" in out, f"passes and skips only: exit 0, got {rc}: {out}")

    rc, out = run(build, logs, "--suites", "soak")
    check(rc == 1 and "0 passed, 0 failed, 0 skipped" in out, f"no test run is a failure, got {rc}: {out}")

    rc, out = run(os.path.join(tmp, "nothing"), logs)
    check(rc == 1 and "is it a meson build directory" in out, f"a folder without meson-info is refused: {out}")

for f in failures:
    print("FAIL:", f)
print(f"run_built_tests: {len(failures)} failure(s)")
sys.exit(1 if failures else 0)
