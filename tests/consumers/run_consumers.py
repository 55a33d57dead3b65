#!/usr/bin/env python3
"""Builds a program outside mstar against mstar, found one of four ways, runs it and checks its output.

Modes:
  subproject  a consumer meson project with mstar copied in as subprojects/mstar (dependency('mstar'))
  wrap        a consumer meson project with subprojects/mstar.wrap (wrap-git with [provide]) and nothing else
  pkgconfig   `meson install` of mstar into a temporary prefix; every installed header must compile
              on its own against that prefix alone; the consumer builds with `pkg-config --cflags mstar`
  cmake       the same install; the consumer builds with CMake's find_package(mstar CONFIG REQUIRED)
              and links mstar::mstar

Everything happens in a temporary directory, removed afterwards (kept with --keep).

Usage: run_consumers.py MODE --source-root DIR --meson MESON --cxx CXX... [--cmake CMAKE]
                        [--pkg-config PKGCONFIG] [--nvcc NVCC...] [--version V] [--keep]
"""

import argparse
import concurrent.futures
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
EXPECTED_OUTPUT = """model consumer_tts: valid
talker_decode: chain []
codec_chunk: side [codec_state]
"""

# Users build with warnings as errors: mstar's headers must not make them fail.
WARNINGS = ["-Wall", "-Wextra", "-Wpedantic", "-Werror"]


class Failure(Exception):
    pass


def run(cmd, cwd=None, env=None, timeout=280):
    """Runs cmd, echoing it; returns its output; raises Failure with the output when it fails."""
    print("$ " + " ".join(shlex.quote(str(c)) for c in cmd), flush=True)
    start = time.monotonic()
    try:
        proc = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise Failure(f"timed out after {timeout} s: {' '.join(map(str, cmd))}")
    out = proc.stdout.decode("utf-8", "replace")
    print(f"  ({time.monotonic() - start:.1f} s, exit status {proc.returncode})", flush=True)
    if proc.returncode != 0:
        print(out[-20000:])
        raise Failure(f"exit status {proc.returncode}: {' '.join(map(str, cmd))}")
    return out


def clean_env():
    """The environment for the nested builds, without variables that would point them elsewhere."""
    env = dict(os.environ)
    for var in ["PKG_CONFIG_PATH", "PKG_CONFIG_LIBDIR", "CMAKE_PREFIX_PATH", "DESTDIR", "MESON_BUILD_ROOT",
                "MESON_SOURCE_ROOT", "MESON_SUBDIR", "CXXFLAGS", "CPPFLAGS", "LDFLAGS"]:
        env.pop(var, None)
    env["LC_ALL"] = "C"
    return env


def check_output(binary, env):
    out = run([binary], env=env)
    if out != EXPECTED_OUTPUT:
        raise Failure(f"the consumer printed:\n{out}\nexpected:\n{EXPECTED_OUTPUT}")
    print("the consumer printed the expected lanes and side-lane keys:\n" + out)


def copy_source_tree(src, dst):
    """Copies the mstar source tree, leaving out .git and any build directory inside it."""

    def ignore(directory, names):
        skip = {n for n in names if n in (".git", "__pycache__")}
        for n in names:
            p = os.path.join(directory, n)
            if os.path.isdir(p) and not os.path.islink(p) and any(
                    os.path.exists(os.path.join(p, marker)) for marker in ("meson-private", "CMakeCache.txt")):
                skip.add(n)
        return skip

    shutil.copytree(src, dst, symlinks=True, ignore=ignore)


def mode_subproject(args, tmp, env):
    proj = os.path.join(tmp, "consumer")
    os.makedirs(os.path.join(proj, "subprojects"))
    shutil.copy(os.path.join(HERE, "meson_subproject", "meson.build"), proj)
    shutil.copy(os.path.join(HERE, "consumer.cpp"), proj)
    copy_source_tree(args.source_root, os.path.join(proj, "subprojects", "mstar"))
    build = os.path.join(tmp, "build")
    # buildtype=plain (no optimization) halves the build time; the consumer's output does not depend on it.
    check_configure_quiet(run(args.meson + ["setup", build, proj, "-Dbuildtype=plain"], env=env))
    # The whole build, as a consumer's plain `meson compile` does: mstar's own targets must build as a
    # subproject too.
    run(args.meson + ["compile", "-C", build], env=env)
    check_output(os.path.join(build, "consumer"), env)
    # A plain dependency('mstar') builds mstar's library only: none of its examples, kernels, tools,
    # tests or benchmarks (a consumer's build must not pay for them).
    targets = json.loads(run(args.meson + ["introspect", "--targets", build], env=env))
    names = sorted(t["name"] for t in targets if t.get("subproject") == "mstar")
    if names != ["mstar_config"]:
        raise Failure(f"the mstar subproject builds {names}; expected only ['mstar_config']")
    print("the mstar subproject builds its library only: " + ", ".join(names))


def mode_wrap(args, tmp, env):
    """A consumer with subprojects/mstar.wrap (wrap-git, with [provide]): meson clones mstar itself."""
    repo = os.path.join(tmp, "mstar-repo")
    copy_source_tree(args.source_root, repo)
    git = ["git", "-C", repo, "-c", "user.name=consumer-test", "-c", "user.email=consumer@test",
           "-c", "init.defaultBranch=main"]
    run(git + ["init", "-q"], env=env)
    run(git + ["add", "-A"], env=env)
    run(git + ["commit", "-q", "-m", "the tree under test"], env=env)
    revision = run(["git", "-C", repo, "rev-parse", "HEAD"], env=env).strip()
    proj = os.path.join(tmp, "consumer")
    os.makedirs(os.path.join(proj, "subprojects"))
    for name in ("meson.build",):
        shutil.copy(os.path.join(HERE, "meson_wrap", name), proj)
    for name in ("consumer.cpp", "consumer_config.cpp"):
        shutil.copy(os.path.join(HERE, name), proj)
    with open(os.path.join(HERE, "meson_wrap", "mstar.wrap"), encoding="utf-8") as f:
        wrap = f.read().replace("@URL@", repo).replace("@REVISION@", revision)
    with open(os.path.join(proj, "subprojects", "mstar.wrap"), "w", encoding="utf-8") as f:
        f.write(wrap)
    build = os.path.join(tmp, "build")
    check_configure_quiet(run(args.meson + ["setup", build, proj, "-Dbuildtype=plain"], env=env))
    run(args.meson + ["compile", "-C", build], env=env)
    check_output(os.path.join(build, "consumer"), env)
    check_config_consumer(os.path.join(build, "consumer_config"), env)
    print("the wrap route gives dependency('mstar') and dependency('mstar_config')")


def install(args, tmp, env):
    """`meson setup` + `meson install` of mstar into tmp/prefix; returns the prefix."""
    prefix = os.path.join(tmp, "prefix")
    build = os.path.join(tmp, "mstar-build")
    # The README's install command: no tests, no example (so no CUDA), the validator still built.
    out = run(args.meson + ["setup", build, args.source_root, f"--prefix={prefix}", "-Dtests=false",
                            "-Dexamples=false", "-Dgpu=disabled", "-Dbuildtype=plain"], env=env)
    check_configure_quiet(out)
    run(args.meson + ["install", "-C", build], env=env)
    # mstar-validate is installed without the example, and judges a config from the source tree.
    validator = os.path.join(prefix, "bin", "mstar-validate")
    if not os.path.isfile(validator):
        raise Failure(f"meson install with -Dexamples=false installed no {validator}")
    run([validator, os.path.join(args.source_root, "configs", "qwen3tts.yaml")], env=env)
    return prefix


def check_configure_quiet(out):
    """A configure of mstar prints no deprecation or warning of its own (a subproject user sees them)."""
    noisy = [line for line in out.splitlines() if line.startswith(("DEPRECATION", "WARNING"))]
    if noisy:
        raise Failure("configuring mstar printed:\n  " + "\n  ".join(noisy))


def find_one(root, name):
    hits = []
    for d, _, files in os.walk(root):
        if name in files:
            hits.append(os.path.join(d, name))
    if len(hits) != 1:
        raise Failure(f"expected one {name} under {root}, found {hits or 'none'}")
    return hits[0]


def check_installed_headers(args, prefix, env, tmp):
    """Every header of include/mstar is installed, names only installed mstar headers, and compiles
    alone against the install prefix (no source tree on the include path)."""
    inc = os.path.join(prefix, "include")
    src_inc = os.path.join(args.source_root, "include")
    source_headers = sorted(
        os.path.relpath(os.path.join(d, f), src_inc)
        for d, _, files in os.walk(os.path.join(src_inc, "mstar")) for f in files)
    installed = sorted(
        os.path.relpath(os.path.join(d, f), inc) for d, _, files in os.walk(os.path.join(inc, "mstar")) for f in files)
    missing = sorted(set(source_headers) - set(installed))
    if missing:
        raise Failure("headers of include/mstar that meson install left out: " + ", ".join(missing))
    if "mstar/mstar.hpp" not in installed:
        raise Failure("the umbrella header mstar/mstar.hpp is not installed")

    problems = []
    include_re = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)
    for rel in installed:
        with open(os.path.join(inc, rel), encoding="utf-8") as f:
            text = f.read()
        for kind, target in include_re.findall(text):
            if target.startswith("mstar/"):
                if not os.path.isfile(os.path.join(inc, target)):
                    problems.append(f"{rel} includes {target}, which is not installed")
            elif kind == '"':
                # A quoted include that is not mstar/...: it must sit beside the header.
                if not os.path.isfile(os.path.join(inc, os.path.dirname(rel), target)):
                    problems.append(f"{rel} includes \"{target}\", which is not installed beside it")
    if problems:
        raise Failure("installed headers reference files that are not installed:\n  " + "\n  ".join(problems))

    tu_dir = os.path.join(tmp, "header-check")
    os.makedirs(tu_dir)
    cuda_inc = cuda_include_flags(args, env, tu_dir)
    jobs = []
    for rel in installed:
        if rel.endswith(".hpp"):
            compiler = args.cxx + ["-std=c++20", "-fsyntax-only", "-x", "c++"] + WARNINGS
            with open(os.path.join(inc, rel), encoding="utf-8") as f:
                needs_cuda = "<cuda_runtime.h>" in f.read()
            if needs_cuda:
                # A CUDA header compiled by the host compiler (the one TU with the backend's bodies):
                # it gets the toolkit's include path, as README.md tells its users to give it.
                if cuda_inc is None:
                    print(f"skipped {rel}: it includes <cuda_runtime.h>, and there is no CUDA toolkit here")
                    continue
                compiler = compiler + cuda_inc
        elif rel.endswith(".cuh"):
            if not args.nvcc:
                print(f"skipped {rel}: no nvcc")
                continue
            compiler = args.nvcc + ["-std=c++20", "-x", "cu", "-c", "-o", os.devnull]
        else:
            continue
        tu = os.path.join(tu_dir, re.sub(r"\W", "_", rel) + ".cpp")
        with open(tu, "w", encoding="utf-8") as f:
            f.write(f"#include <{rel}>\n")
        jobs.append((rel, compiler + [f"-I{inc}", tu]))

    def compile_one(job):
        rel, cmd = job
        proc = subprocess.run(cmd, cwd=tu_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=240)
        return rel, cmd, proc.returncode, proc.stdout.decode("utf-8", "replace")

    # Two at a time: the check is many small compiles, and the machine may be running other tests.
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(compile_one, jobs))
    failed = [(rel, cmd, out) for rel, cmd, rc, out in results if rc != 0]
    for rel, cmd, out in failed:
        print("$ " + " ".join(shlex.quote(c) for c in cmd) + "\n" + out[-8000:])
    if failed:
        raise Failure("installed headers that do not compile on their own against the install prefix: " +
                      ", ".join(rel for rel, _, _ in failed))
    print(f"{len(results)} installed headers compile on their own against {inc} alone: " +
          ", ".join(rel for rel, _, _, _ in results))


def cuda_include_flags(args, env, tmp):
    """The flags that put cuda_runtime.h on the host compiler's path: the toolkit's include folder beside
    nvcc when nvcc was given, none when the compiler finds the header alone; None when neither."""
    if args.nvcc:
        nvcc = os.path.realpath(shutil.which(args.nvcc[-1]) or args.nvcc[-1])
        return ["-isystem", os.path.join(os.path.dirname(os.path.dirname(nvcc)), "include")]
    probe = os.path.join(tmp, "cuda_probe.cpp")
    with open(probe, "w", encoding="utf-8") as f:
        f.write("#include <cuda_runtime.h>\n")
    proc = subprocess.run(args.cxx + ["-E", probe, "-o", os.devnull], env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
    return [] if proc.returncode == 0 else None


def mode_pkgconfig(args, tmp, env):
    if not args.pkg_config:
        raise Failure("pkg-config was not found")
    prefix = install(args, tmp, env)
    check_installed_headers(args, prefix, env, tmp)
    pc = find_one(prefix, "mstar.pc")
    penv = dict(env, PKG_CONFIG_PATH=os.path.dirname(pc))
    got_prefix = run(args.pkg_config + ["--variable=prefix", "mstar"], env=penv).strip()
    if os.path.realpath(got_prefix) != os.path.realpath(prefix):
        raise Failure(f"pkg-config found mstar with prefix {got_prefix}, not the temporary prefix {prefix}")
    if args.version:
        version = run(args.pkg_config + ["--modversion", "mstar"], env=penv).strip()
        if version != args.version:
            raise Failure(f"mstar.pc says version {version}, the project is {args.version}")
    cflags = shlex.split(run(args.pkg_config + ["--cflags", "mstar"], env=penv))
    if f"-I{os.path.join(prefix, 'include')}" not in cflags:
        raise Failure(f"pkg-config --cflags mstar gives {cflags}, without -I{prefix}/include")
    libs = shlex.split(run(args.pkg_config + ["--libs", "mstar"], env=penv))
    binary = os.path.join(tmp, "consumer")
    run(args.cxx + cflags + WARNINGS + [os.path.join(HERE, "consumer.cpp"), "-o", binary] + libs, env=env)
    check_output(binary, env)
    if args.nvcc:
        # What README.md tells CUDA users: --cflags as they are, plus the cuda_cflags variable.
        cuda_flags = shlex.split(run(args.pkg_config + ["--variable=cuda_cflags", "mstar"], env=penv))
        run(args.nvcc + cflags + cuda_flags + [f"-arch=sm_{args.cuda_arch}", "-c",
                                               os.path.join(HERE, "consumer_cuda.cu"),
                                               "-o", os.path.join(tmp, "consumer_cuda.o")], env=env)
        print("consumer_cuda.cu compiled with nvcc and the pkg-config flags")


def mode_cmake(args, tmp, env):
    if not args.cmake:
        raise Failure("cmake was not found")
    prefix = install(args, tmp, env)
    proj = os.path.join(tmp, "consumer")
    os.makedirs(proj)
    shutil.copy(os.path.join(HERE, "cmake", "CMakeLists.txt"), proj)
    shutil.copy(os.path.join(HERE, "consumer.cpp"), proj)
    shutil.copy(os.path.join(HERE, "consumer_config.cpp"), proj)
    shutil.copy(os.path.join(HERE, "consumer_cuda.cu"), proj)
    build = os.path.join(tmp, "consumer-build")
    cmd = args.cmake + ["-S", proj, "-B", build, f"-DCMAKE_PREFIX_PATH={prefix}", "-DCMAKE_BUILD_TYPE=Release"]
    if args.nvcc:
        nvcc = shutil.which(args.nvcc[-1]) or args.nvcc[-1]
        cmd += ["-DMSTAR_CONSUMER_CUDA=ON", f"-DCMAKE_CUDA_COMPILER={nvcc}", f"-DCMAKE_CUDA_ARCHITECTURES={args.cuda_arch}"]
    # The C++ compiler this build uses (the last word of a launcher command such as `ccache c++`).
    cmd.append(f"-DCMAKE_CXX_COMPILER={shutil.which(args.cxx[-1]) or args.cxx[-1]}")
    out = run(cmd, env=env)
    cache = os.path.join(build, "CMakeCache.txt")
    with open(cache, encoding="utf-8") as f:
        m = re.search(r"^mstar_DIR:PATH=(.*)$", f.read(), re.M)
    if not m or not os.path.realpath(m.group(1)).startswith(os.path.realpath(prefix) + os.sep):
        raise Failure(f"CMake found mstar at {m.group(1) if m else '(nowhere)'}, not under {prefix}\n{out}")
    run(args.cmake + ["--build", build, "--verbose"], env=env)
    if args.nvcc:
        print("consumer_cuda.cu (mstar::mstar) compiled with nvcc")
    else:
        print("skipped consumer_cuda.cu: no nvcc")
    check_output(os.path.join(build, "consumer"), env)
    # The YAML loader through mstar::config (a static library linking yaml-cpp and fmt).
    check_config_consumer(os.path.join(build, "consumer_config"), env)


def check_config_consumer(binary, env):
    out = run([binary], env=env)
    want = "valid.yaml: valid\nrefused.yaml: refused, 1 error(s)\n"
    if out != want:
        raise Failure(f"consumer_config printed:\n{out}\nexpected:\n{want}")
    print("consumer_config (mstar::config) printed:\n" + out)


def main():
    argv = sys.argv[1:]
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["subproject", "wrap", "pkgconfig", "cmake"])
    p.add_argument("--source-root", required=True)
    p.add_argument("--meson", nargs="+", required=True)
    p.add_argument("--cxx", nargs="+", required=True)
    p.add_argument("--cmake", nargs="+")
    p.add_argument("--pkg-config", nargs="+")
    p.add_argument("--nvcc", nargs="+")
    p.add_argument("--cuda-arch", default="90")
    p.add_argument("--version")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = p.parse_args(argv)
    args.source_root = os.path.abspath(args.source_root)

    tmp = tempfile.mkdtemp(prefix=f"mstar-consumer-{args.mode}-")
    env = clean_env()
    start = time.monotonic()
    # Work from the temporary directory: `cmake --system-information`, which meson runs while it
    # configures mstar, writes into the working directory, and two modes running at once from the
    # same directory (meson test's) race there.
    cwd = os.getcwd()
    os.chdir(tmp)
    try:
        {"subproject": mode_subproject, "wrap": mode_wrap, "pkgconfig": mode_pkgconfig,
         "cmake": mode_cmake}[args.mode](args, tmp, env)
    except Failure as e:
        print(f"FAIL ({args.mode}): {e}")
        if args.keep:
            print(f"(kept the temporary directory {tmp})")
        sys.exit(1)
    finally:
        os.chdir(cwd)
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"PASS ({args.mode}) in {time.monotonic() - start:.1f} s")


if __name__ == "__main__":
    main()
