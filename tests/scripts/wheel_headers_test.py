#!/usr/bin/env python3
"""scripts/wheel_headers.sh (what scripts/cutlass.sh and scripts/flashinfer.sh run) on a copy of scripts/ in a
scratch tree, with `python3 -m pip download` stubbed: a pinned copy already there is kept without pip; a wheel's
headers land in third_party/NAME/include with its VERSION; a wheel without the header asked for, or a pip that
cannot download, fails with a message naming the package and leaves the previous headers alone.

Usage: wheel_headers_test.py SOURCE_ROOT
"""

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile

ROOT = os.path.abspath(sys.argv[1])
failures = []


def expect(name, condition, detail=""):
    print(("ok   " if condition else "FAIL ") + name)
    if not condition:
        failures.append(name)
        if detail:
            print("  " + detail.replace("\n", "\n  "))


def make_tree(tmp):
    """A scratch source tree holding the script, and a python3 on PATH whose `-m pip download` copies the wheel
    named by $WHEEL (or fails when it is unset), logging each pip call to $PIP_LOG."""
    tree = os.path.join(tmp, "tree")
    os.makedirs(os.path.join(tree, "scripts"))
    shutil.copy(os.path.join(ROOT, "scripts", "wheel_headers.sh"), os.path.join(tree, "scripts"))
    bindir = os.path.join(tmp, "bin")
    os.makedirs(bindir)
    real = shutil.which("python3")
    path = os.path.join(bindir, "python3")
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"""#!/usr/bin/env bash
if [ "$1 $2 $3" = "-m pip download" ]; then
  echo "pip $*" >> "$PIP_LOG"
  [ -n "${{WHEEL:-}}" ] || {{ echo "ERROR: no network" >&2; exit 1; }}
  while [ $# -gt 0 ]; do [ "$1" = -d ] && dest=$2; shift; done
  cp "$WHEEL" "$dest/"
  exit 0
fi
exec {real} "$@"
""")
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
    return tree, bindir


def make_wheel(tmp, name, files):
    path = os.path.join(tmp, name)
    with zipfile.ZipFile(path, "w") as z:
        for member, text in files.items():
            z.writestr(member, text)
    return path


def run(tree, bindir, tmp, wheel=None, version="1.2.3"):
    log = os.path.join(tmp, "pip.log")
    open(log, "w").close()
    env = dict(os.environ, PATH=bindir + os.pathsep + os.environ["PATH"], PIP_LOG=log)
    env.pop("MSTAR_SETUP_DRY_RUN", None)
    if wheel:
        env["WHEEL"] = wheel
    proc = subprocess.run(["bash", os.path.join(tree, "scripts", "wheel_headers.sh"), "demo", "demo-pkg", version,
                           "demo/data/include", "demo/api.h"], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=60)
    with open(log, encoding="utf-8") as f:
        calls = f.read()
    return proc.returncode, proc.stdout.decode("utf-8", "replace"), calls


with tempfile.TemporaryDirectory(prefix="mstar-wheel-headers-") as tmp:
    tree, bindir = make_tree(tmp)
    include = os.path.join(tree, "third_party", "demo", "include")
    good = make_wheel(tmp, "demo_pkg-1.2.3-py3-none-any.whl", {
        "demo/data/include/demo/api.h": "// api\n",
        "demo/data/include/demo/detail/impl.h": "// impl\n",
        "demo/__init__.py": "",
    })

    rc, out, calls = run(tree, bindir, tmp, good)
    expect("a fetch exits 0", rc == 0, out)
    expect("pip was asked for the pinned version, without its dependencies",
           "demo-pkg==1.2.3" in calls and "--no-deps" in calls, calls)
    expect("the headers under the prefix land in include/",
           os.path.isfile(os.path.join(include, "demo", "api.h"))
           and os.path.isfile(os.path.join(include, "demo", "detail", "impl.h")), out)
    expect("nothing outside the prefix is unpacked", not os.path.exists(os.path.join(include, "__init__.py")) and
           not os.path.exists(os.path.join(include, "demo", "__init__.py")), out)
    with open(os.path.join(tree, "third_party", "demo", "VERSION"), encoding="utf-8") as f:
        expect("VERSION records the pinned version", f.read().strip() == "1.2.3")

    rc, out, calls = run(tree, bindir, tmp)  # no wheel: pip would fail, so it must not be asked
    expect("the pinned version already there: exit 0 without pip", rc == 0 and calls == "", out + calls)

    rc, out, calls = run(tree, bindir, tmp, version="1.2.4")  # another pin, pip without network
    expect("pip cannot download: exit 1", rc == 1, out)
    expect("its message names the package and the way out",
           "demo-pkg==1.2.4" in out and "third_party/demo" in out and "-Ddemo_include=DIR" in out, out)
    expect("the previous headers are left alone", os.path.isfile(os.path.join(include, "demo", "api.h")), out)

    bad = make_wheel(tmp, "demo_pkg-1.2.4-py3-none-any.whl", {"demo/data/include/demo/other.h": "//\n"})
    rc, out, calls = run(tree, bindir, tmp, bad, version="1.2.4")
    expect("a wheel without the header asked for: exit non-zero, naming it",
           rc != 0 and "demo/data/include/demo/api.h" in out, out)
    expect("... and the previous headers and VERSION are left alone",
           os.path.isfile(os.path.join(include, "demo", "api.h"))
           and open(os.path.join(tree, "third_party", "demo", "VERSION"), encoding="utf-8").read().strip() == "1.2.3")

    env = dict(os.environ, PATH=bindir + os.pathsep + os.environ["PATH"], MSTAR_SETUP_DRY_RUN="1",
               PIP_LOG=os.path.join(tmp, "pip.log"))
    open(env["PIP_LOG"], "w").close()
    proc = subprocess.run(["bash", os.path.join(tree, "scripts", "wheel_headers.sh"), "demo", "demo-pkg", "9.9",
                           "demo/data/include", "demo/api.h"], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=60)
    dry = proc.stdout.decode("utf-8", "replace")
    expect("a dry run says what it would fetch and fetches nothing",
           proc.returncode == 0 and "would fetch" in dry and "demo-pkg==9.9" in dry
           and open(env["PIP_LOG"], encoding="utf-8").read() == "", dry)

    # The two callers pass a prefix and a header their pinned wheels hold (checked by the fetches themselves when
    # they run); here, that each hands its arguments to wheel_headers.sh.
    for script, package in (("cutlass.sh", "nvidia-cutlass"), ("flashinfer.sh", "flashinfer-python")):
        with open(os.path.join(ROOT, "scripts", script), encoding="utf-8") as f:
            text = f.read()
        expect(f"{script} fetches {package} through wheel_headers.sh",
               "wheel_headers.sh" in text and package in text, script)

print(f"{len(failures)} failed" if failures else "all passed")
sys.exit(1 if failures else 0)
