#!/usr/bin/env python3
"""The layers of include/mstar, checked from the include lines (docs/architecture.md states them).

Usage: check_layers.py INCLUDE_DIR

Every header sits in the folder of its layer, and a layer includes only its own and lower layers:

    detail -> model -> kernels -> backend -> resources -> engine -> worker -> umbrellas

detail/ holds leaf utilities, in namespace mstar::detail only, and includes no other layer. The umbrellas
(mstar.hpp, worker.hpp) sit at the top of include/mstar, only include, and nothing includes them.
mstar.hpp includes every public header that needs no CUDA header (no <cuda_runtime.h>, not .cuh).

Before judging the tree it judges a planted one (an engine header that includes the worker), so a
checker that stopped finding anything fails too. Exit status 1 names each file, include and both layers.
"""
import os
import re
import sys
import tempfile

LAYERS = ["detail", "model", "kernels", "backend", "resources", "engine", "worker"]
UMBRELLAS = {"mstar.hpp", "worker.hpp"}
TOP = len(LAYERS)  # the umbrellas' rank
NAMESPACE = re.compile(r"^namespace\s+([\w:]+)\s*\{")
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"](mstar/[^>"]+)[>"]')


def layer_of(rel):
    """(rank, name) of a header given as mstar/..., or None when it sits in no layer."""
    parts = rel.split("/")[1:]
    if len(parts) == 1:
        return (TOP, "umbrella") if parts[0] in UMBRELLAS else None
    return (LAYERS.index(parts[0]), parts[0]) if parts[0] in LAYERS else None


def headers(inc):
    for d, _, files in os.walk(os.path.join(inc, "mstar")):
        for f in sorted(files):
            if f.endswith((".hpp", ".cuh", ".h")):
                yield os.path.relpath(os.path.join(d, f), inc).replace(os.sep, "/")


def needs_cuda(inc, rel):
    if rel.endswith(".cuh"):
        return True
    with open(os.path.join(inc, rel), encoding="utf-8") as f:
        return re.search(r'^\s*#\s*include\s*<cuda', f.read(), re.M) is not None


def problems(inc):
    found = []
    all_headers = sorted(headers(inc))
    for rel in all_headers:
        own = layer_of(rel)
        if own is None:
            found.append(f"include/{rel}: in no layer; a header sits in its layer's folder "
                         f"({', '.join(LAYERS)}), or is an umbrella ({', '.join(sorted(UMBRELLAS))})")
            continue
        with open(os.path.join(inc, rel), encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                ns = NAMESPACE.match(line)
                if own[0] == 0 and ns and ns.group(1) != "mstar::detail":
                    found.append(f"include/{rel}:{number}: namespace {ns.group(1)} in detail/, whose headers hold "
                                 f"mstar::detail only; a public name lives in its layer's folder")
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = m.group(1)
                where = f"include/{rel}:{number}: #include <{target}>"
                if not os.path.isfile(os.path.join(inc, target)):
                    found.append(f"{where}: no such header")
                    continue
                other = layer_of(target)
                if other is None:
                    continue  # reported as in no layer above
                if other[0] > own[0]:
                    found.append(f"{where} reaches up: {own[1]} (layer {own[0]}) includes {other[1]} "
                                 f"(layer {other[0]}); move the shared piece down to {own[1]} or below")
    umbrella = "mstar/mstar.hpp"
    if umbrella in all_headers:
        with open(os.path.join(inc, umbrella), encoding="utf-8") as f:
            listed = {m.group(1) for m in map(INCLUDE.match, f) if m}
        for rel in all_headers:
            own = layer_of(rel)
            if own is None or own[0] in (0, TOP) or rel in listed or needs_cuda(inc, rel):
                continue
            found.append(f"include/{umbrella}: does not include <{rel}>, a public header that needs no CUDA "
                         f"header; the umbrella includes every one")
    else:
        found.append(f"include/{umbrella}: missing; the umbrella header includes every CUDA-free public header")
    return found


def planted_tree_is_refused():
    with tempfile.TemporaryDirectory() as tmp:
        for rel, text in {"mstar/engine/step.hpp": '#include "mstar/worker/flow.hpp"\n',
                          "mstar/worker/flow.hpp": '#include "mstar/engine/step.hpp"\n',
                          "mstar/mstar.hpp": '#include "mstar/engine/step.hpp"\n#include "mstar/worker/flow.hpp"\n'
                          }.items():
            os.makedirs(os.path.dirname(os.path.join(tmp, rel)), exist_ok=True)
            with open(os.path.join(tmp, rel), "w", encoding="utf-8") as f:
                f.write(text)
        found = problems(tmp)
        return len(found) == 1 and "engine (layer 5) includes worker (layer 6)" in found[0]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    if not planted_tree_is_refused():
        print("check_layers: a planted upward include (engine -> worker) was not refused: the checker is broken")
        return 1
    inc = sys.argv[1]
    found = problems(inc)
    for p in found:
        print(p)
    if found:
        print(f"check_layers: {len(found)} problem(s); the layers: {' -> '.join(LAYERS)} -> umbrellas")
        return 1
    print(f"check_layers: {sum(1 for _ in headers(inc))} headers, no include reaches a layer above its own")
    return 0


if __name__ == "__main__":
    sys.exit(main())
