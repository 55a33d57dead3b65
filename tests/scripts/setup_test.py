#!/usr/bin/env python3
"""scripts/setup.sh as a new user meets it (issue 20, item 5): it must look for the tools and headers the
build needs, not for Debian package names, and ask apt only for what is missing, under the names of the
distribution at hand. apt, apt-cache, dpkg-query and sudo are stubs here that log their calls and fail as
they do without network; nothing is installed.

Usage: setup_test.py SOURCE_ROOT
"""

import os
import shutil
import stat
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(sys.argv[1])
failures = []


def stub(directory, name, body):
    path = os.path.join(directory, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write("#!/usr/bin/env bash\n" + body + "\n")
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def run_setup(tmp, args=(), env_extra=None):
    """Runs setup.sh with the stubs first on PATH; returns (exit status, output, the apt calls logged)."""
    log = os.path.join(tmp, "apt.log")
    open(log, "w").close()
    env = dict(os.environ, PATH=os.path.join(tmp, "bin") + os.pathsep + os.environ["PATH"], APT_LOG=log)
    env.pop("CXX", None)
    env.pop("MSTAR_FUZZ", None)
    env["MSTAR_CUTLASS"] = "0"  # setup's CUTLASS step fetches with pip into the source tree: not what this tests
    env.update(env_extra or {})
    proc = subprocess.run(["bash", os.path.join(ROOT, "scripts", "setup.sh"), *args], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    with open(log, encoding="utf-8") as f:
        calls = f.read()
    return proc.returncode, proc.stdout.decode("utf-8", "replace"), calls


def expect(name, condition, detail):
    print(("ok   " if condition else "FAIL ") + name)
    if not condition:
        failures.append(name)
        print("  " + detail.replace("\n", "\n  "))


with tempfile.TemporaryDirectory(prefix="mstar-setup-test-") as tmp:
    bindir = os.path.join(tmp, "bin")
    os.makedirs(bindir)
    # No package is installed as far as dpkg knows, and apt cannot reach its archive.
    stub(bindir, "dpkg-query", "exit 1")
    stub(bindir, "apt-get", 'echo "apt-get $*" >>"$APT_LOG"; exit 100')
    stub(bindir, "apt-cache", 'echo "apt-cache $*" >>"$APT_LOG"; [ "$2" = libclang-rt-18-dev ]')
    stub(bindir, "sudo", '"$@"')
    # The build that runs this test needed every tool and header setup looks for, except two it can leave
    # out (without utf8proc qwen3tts takes token ids only, without cpp-httplib it has no `serve`; the GPU
    # machine's image lacks both): pkg-config answers for those two as if present, and asks the real one
    # for the rest.
    real_pkg_config = shutil.which("pkg-config")
    if real_pkg_config:
        stub(bindir, "pkg-config", 'if [ "$1" = --exists ]; then case "$2" in libutf8proc|cpp-httplib) exit 0 ;; '
             f'esac; fi\nexec "{real_pkg_config}" "$@"')

    # This machine has every tool and header: setup must pass without asking apt for anything, whatever dpkg
    # says about package names.
    rc, out, calls = run_setup(tmp)
    expect("everything present: exit 0, apt never called", rc == 0 and "apt-get" not in calls,
           f"exit status {rc}, apt calls:\n{calls}\noutput:\n{out}")

    # A compiler that finds no nlohmann/json header, on Ubuntu 24.04: only that package is named, with
    # that distribution's name for it, and nothing else (the compiler, cmake, ninja are all there).
    stub(bindir, "fake-cxx", 'if [ "$1" != -dumpversion ] && grep -q nlohmann; then exit 1; fi; exec g++ "$@"')
    os_release = os.path.join(tmp, "os-release")
    with open(os_release, "w", encoding="utf-8") as f:
        f.write('ID=ubuntu\nVERSION_ID="24.04"\n')
    env = {"CXX": "fake-cxx", "MSTAR_OS_RELEASE": os_release}
    rc, out, calls = run_setup(tmp, env_extra=dict(env, MSTAR_SETUP_DRY_RUN="1"))
    expect("a missing header: only its package is named (dry run)",
           rc == 0 and "would install (apt, ubuntu-24.04): nlohmann-json3-dev\n" in out and not calls,
           f"exit status {rc}, apt calls:\n{calls}\noutput:\n{out}")
    rc, out, calls = run_setup(tmp, env_extra=env)
    expect("apt without network: a non-zero exit that says what to do",
           rc != 0 and "apt-get" in calls and "Without network" in out and "nlohmann-json3-dev" in out
           and "ninja-build" not in out, f"exit status {rc}, apt calls:\n{calls}\noutput:\n{out}")

    # clang only for the fuzzer: a clang++ that cannot link a libFuzzer target is fine without --fuzz;
    # with it, the runtime of that clang's version is asked for.
    stub(bindir, "clang++", '[ "$1" = -dumpversion ] && { echo 18.1.3; exit 0; }; exit 1')
    rc, out, calls = run_setup(tmp, env_extra={"MSTAR_SETUP_DRY_RUN": "1"})
    expect("no --fuzz: clang is not asked for", rc == 0 and "clang" not in out and not calls,
           f"exit status {rc}, apt calls:\n{calls}\noutput:\n{out}")
    rc, out, calls = run_setup(tmp, ["--fuzz"], env_extra={"MSTAR_SETUP_DRY_RUN": "1"})
    expect("--fuzz: the libFuzzer runtime of clang 18 is asked for",
           rc == 0 and "would install" in out and "libclang-rt-18-dev" in out,
           f"exit status {rc}, apt calls:\n{calls}\noutput:\n{out}")

print(f"{len(failures)} failed" if failures else "all passed")
sys.exit(1 if failures else 0)
