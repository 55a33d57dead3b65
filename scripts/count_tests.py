#!/usr/bin/env python3
"""Counts test results from meson's testlog.json; prints 'N skipped', then last 'N passed, N failed'.

A doctest executable counts its test cases (from its summary line); every other meson test counts
as one. Exits 1 when anything failed or no test ran at all."""
import json
import re
import sys

DOCTEST = re.compile(r"test cases:\s*(\d+)\s*\|\s*(\d+) passed\s*\|\s*(\d+) failed\s*\|\s*(\d+) skipped")


def main(path: str) -> int:
    passed = failed = skipped = 0
    try:
        lines = open(path, encoding="utf-8", errors="replace").read().splitlines()
    except OSError as e:
        print(f"count_tests: cannot read {path}: {e}", file=sys.stderr)
        print("0 passed, 1 failed")
        return 1
    for line in lines:
        if not line.strip():
            continue
        t = json.loads(line)
        result = t.get("result", "")
        m = DOCTEST.findall(t.get("stdout", "") or "")
        if m:
            total, p, f, s = map(int, m[-1])
            passed, failed, skipped = passed + p, failed + f, skipped + s
            if result not in ("OK", "EXPECTEDFAIL", "SKIP") and f == 0:
                failed += 1  # crashed or timed out after its summary
        elif result in ("OK", "EXPECTEDFAIL"):
            passed += 1
        elif result == "SKIP":
            skipped += 1
        else:
            failed += 1
    print(f"{skipped} skipped")
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 and passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
