#!/usr/bin/env python3
"""Compile-fail harness: compiles one snippet and checks that it fails for the expected reason.

A case is a small .cpp whose leading comment lines carry directives:

  // expect-rule: lane_kv_cache           the rule that must fire; its sentence is read from its
                                          row of the rule table, include/mstar/model/rules.def, so the
                                          case cannot drift from it
  // also-rule: duplicate_node            another rule that may fire with it (inherent to the shape)
  // expect-node: CodecChunk "codec_chunk"    the offending types, as the diagnostic names them:
  // expect-resource: qwen3_tts::KvCache "kv_cache"   nvcc prints the alias, g++ spells the type out
  // expect-group: Codec "Codec"              with its name; alternatives are separated by |
  // expect-worker: Gpu0 "gpu0"
  // expect: <literal sentence>           a static_assert message that is not a rule (misuse checks)
  // expect-text: a | b                   one of the alternatives appears in the diagnostics
  // cascade-ok: <why>                    errors may follow the expected first one
  // expect-compiles                      a control case: it must compile

The case fails when the snippet compiles, when an expected sentence is missing, when the expected
rule's instantiation does not name the expected types, or when an error other than the expected
static_asserts appears (the snippet failed for some other reason).

Usage:
  run_case.py --rules RULES_DEF [-I DIR ...] CASE -- COMPILER ARGS...
  run_case.py --coverage --rules RULES_DEF --cases DIR --registered NAME... [--not-expressible RULE...]
"""

import argparse
import os
import re
import subprocess
import sys

DIRECTIVE = re.compile(r"^//\s*(expect[\w-]*|also-rule|cascade-ok)\s*:?\s*(.*)$")
KNOWN = {"expect-rule", "also-rule", "expect-node", "expect-resource", "expect-group", "expect-worker", "expect-text",
         "expect", "cascade-ok", "expect-compiles"}
ROLES = {"expect-node": "Node", "expect-resource": "Resource", "expect-group": "Group", "expect-worker": "Worker"}


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def normalize(text):
    return " ".join(text.split())


def c_string_literals(text):
    """Concatenates the C string literals in text, decoding the simple escapes."""
    out = []
    for lit in re.findall(r'"((?:[^"\\]|\\.)*)"', text):
        out.append(re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), lit))
    return "".join(out)


def read_rules(rules_def):
    """Returns (rule ids in table order, {rule id: sentence}) from the rule table, rules.def."""
    with open(rules_def, encoding="utf-8") as f:
        src = "\n".join(line for line in f.read().splitlines() if not line.lstrip().startswith("//"))
    ids, sentences = [], {}
    for kind, rid, literals in re.findall(r'MSTAR_RULE\(\s*(\w+)\s*,\s*(\w+)\s*,((?:\s*"(?:[^"\\]|\\.)*")+)\s*\)', src):
        if rid in sentences:
            fail(f"{rules_def}: rule {rid} has two rows")
        ids.append(rid)
        sentences[rid] = normalize(c_string_literals(literals))
    if not ids:
        fail(f"{rules_def}: no MSTAR_RULE(kind, id, sentence) rows")
    return ids, sentences


def parse_case(path):
    d = {"rule": None, "also": [], "roles": {}, "expect": [], "text": [], "cascade": False, "compiles": False}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line.startswith("//"):
                if line:
                    break
                continue
            m = DIRECTIVE.match(line)
            if not m:
                continue
            key, value = m.group(1), m.group(2).strip()
            if key not in KNOWN:
                fail(f"{path}: unknown directive '{key}' (known: {', '.join(sorted(KNOWN))})")
            if key == "expect-rule":
                d["rule"] = value
            elif key == "also-rule":
                d["also"].append(value)
            elif key in ROLES:
                alts = []
                for alt in value.split("|"):
                    am = re.fullmatch(r'\s*(\S+)\s+"([^"]+)"\s*', alt)
                    if not am:
                        fail(f"{path}: {key} wants 'Alias \"name\"', got '{alt.strip()}'")
                    alts.append((am.group(1), am.group(2)))
                d["roles"][ROLES[key]] = alts
            elif key == "expect":
                d["expect"].append(normalize(value))
            elif key == "expect-text":
                d["text"].append([a.strip() for a in value.split("|") if a.strip()])
            elif key == "cascade-ok":
                d["cascade"] = True
            elif key == "expect-compiles":
                d["compiles"] = True
    if not d["compiles"] and not d["rule"] and not d["expect"]:
        fail(f"{path}: no expect-rule, expect or expect-compiles directive in its leading comment")
    return d


def matching_close(text, i):
    """Index just past the bracket that closes the one at text[i] (<>, [], {}, ())."""
    pairs = {"<": ">", "[": "]", "{": "}", "(": ")"}
    stack = []
    quote = None
    j = i
    while j < len(text):
        c = text[j]
        if quote:
            if c == "\\":
                j += 1
            elif c == quote:
                quote = None
        elif c in "\"'":
            quote = c
        elif c in pairs:
            stack.append(pairs[c])
        elif stack and c == stack[-1]:
            stack.pop()
            if not stack:
                return j + 1
        j += 1
    return len(text)


def split_top(text):
    """Splits on commas at bracket depth 0."""
    parts, depth, start, quote = [], 0, 0, None
    i = 0
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = None
        elif c in "\"'":
            quote = c
        elif c in "<[{(":
            depth += 1
        elif c in ">]})":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
        i += 1
    parts.append(text[start:].strip())
    return parts


def rule_instantiations(diag):
    """The (Rule, Node, Resource, Group, Worker) arguments of every model_rule_broken instantiation."""
    found = []
    marker = "mstar::detail::model_rule_broken<"
    at = diag.find(marker)
    while at >= 0:
        open_at = at + len(marker) - 1
        close = matching_close(diag, open_at)
        args = split_top(diag[open_at + 1:close - 1])
        rest = diag[close:].lstrip()
        if args == ["Rule", "Node", "Resource", "Group", "Worker"] and rest.startswith("[with "):
            # nvcc: model_rule_broken<Rule, Node, ...> [with Rule=..., Node=..., ...]
            start = diag.index("[with ", close)
            end = matching_close(diag, start)
            named = {}
            for part in split_top(diag[start + len("[with "):end - 1]):
                name, _, value = part.partition("=")
                named[name.strip()] = value.strip()
            found.append(named)
        elif len(args) == 5:
            # g++: model_rule_broken<mstar::rule::X, Node, Resource, Group, Worker>
            found.append(dict(zip(["Rule", "Node", "Resource", "Group", "Worker"], args)))
        at = diag.find(marker, close)
    return found


def names_type(arg, alias, name):
    """nvcc names the type by its alias; g++ spells it out, its first argument the name."""
    if arg == alias:
        return True
    return re.match(r'^mstar::\w+<mstar::fixed_string<\d+>\{"' + re.escape(name) + r'"\}', arg) is not None


def error_messages(diag_lines):
    """(static_assert message or None, line) for every error line of g++ or nvcc."""
    out = []
    for line in diag_lines:
        if not re.search(r"\berror\b:", line):
            continue
        m = re.search(r"error: static assertion failed: (.*)$", line)  # g++
        if m:
            out.append((normalize(m.group(1)), line))
            continue
        m = re.search(r'error: static assertion failed with "(.*)"\s*$', line)  # nvcc
        if m:
            out.append((normalize(m.group(1)), line))
            continue
        out.append((None, line))
    return out


def run_case(args, compiler_cmd):
    ids, sentences = read_rules(args.rules)
    case = parse_case(args.case)
    for r in ([case["rule"]] if case["rule"] else []) + case["also"]:
        if r not in sentences:
            fail(f"{args.case}: unknown rule '{r}' (rules.def has: {', '.join(ids)})")

    cmd = list(compiler_cmd) + [f"-I{d}" for d in args.include] + [args.case]
    env = dict(os.environ, LC_ALL="C", LANG="C")
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, timeout=240)
    except subprocess.TimeoutExpired:
        fail("the compiler ran past 240 s: " + " ".join(cmd))
    raw = proc.stdout.decode("utf-8", "replace")
    print("$ " + " ".join(cmd))
    print(f"exit status {proc.returncode}")

    def show_and_fail(msg):
        print("---- diagnostics ----")
        print(raw[:20000] + ("\n[... cut ...]" if len(raw) > 20000 else ""))
        fail(msg)

    if case["compiles"]:
        if proc.returncode != 0:
            show_and_fail("the control snippet must compile, and it did not")
        print("PASS: compiles, as expected")
        return

    if proc.returncode == 0:
        show_and_fail("the snippet compiled, but it must be refused")

    diag = normalize(raw)
    wanted = list(case["expect"])
    if case["rule"]:
        wanted.insert(0, sentences[case["rule"]])
    for s in wanted:
        if s not in diag:
            show_and_fail(f"the expected sentence is missing from the diagnostics: \"{s}\"")

    allowed = set(wanted) | {sentences[r] for r in case["also"]}
    errors = error_messages(raw.splitlines())
    if not errors:
        show_and_fail("the compiler failed without an error line")
    first_msg, first_line = errors[0]
    if first_msg not in allowed:
        show_and_fail(f"the first error is not an expected static_assert: {first_line.strip()}")
    if not case["cascade"]:
        for msg, line in errors:
            if msg not in allowed:
                show_and_fail(f"an error other than the expected static_asserts: {line.strip()}")
    elif len(errors) == 1:
        print("NOTE: the snippet gives one error only: its cascade-ok directive can go")
    fired = {m for m, _ in errors}
    for r in case["also"]:
        if sentences[r] not in fired:
            print(f"NOTE: rule {r} did not fire: its also-rule directive can go")

    for alts in case["text"]:
        if not any(normalize(a) in diag for a in alts):
            show_and_fail("none of these appears in the diagnostics: " + " | ".join(alts))

    if case["rule"]:
        inst = [i for i in rule_instantiations(diag) if i.get("Rule") == "mstar::rule::" + case["rule"]]
        if not inst:
            show_and_fail(f"no instantiation of model_rule_broken for rule {case['rule']} names the offending types")

        def matches(i):
            return all(any(names_type(i.get(role, ""), a, n) for a, n in alts) for role, alts in case["roles"].items())

        if not any(matches(i) for i in inst):
            got = "; ".join(", ".join(f"{k}={v[:80]}" for k, v in i.items()) for i in inst)
            want = "; ".join(f"{role}: " + " | ".join(f'{a} "{n}"' for a, n in alts) for role, alts in case["roles"].items())
            show_and_fail(f"the diagnostic does not name the offending types. Wanted {want}. Got {got}")
    print("PASS: refused with " + (f"rule {case['rule']}" if case["rule"] else "the expected sentence"))


def coverage(args):
    """Every rule has a case, or is listed as one that a C++ description cannot break."""
    ids, _ = read_rules(args.rules)
    by_rule = {}
    files = sorted(f for f in os.listdir(args.cases) if f.endswith(".cpp"))
    for f in files:
        case = parse_case(os.path.join(args.cases, f))
        if case["rule"]:
            by_rule.setdefault(case["rule"], []).append(f)
    problems = []
    unregistered = [f for f in files if f[:-4] not in args.registered]
    if unregistered:
        problems.append("case files not registered in tests/compile_fail/meson.build: " + ", ".join(unregistered))
    for r in ids:
        if r in by_rule and r in args.not_expressible:
            problems.append(f"rule {r} has a case ({', '.join(by_rule[r])}) but is listed as not expressible")
        elif r not in by_rule and r not in args.not_expressible:
            problems.append(f"rule {r} has no compile-fail case: add tests/compile_fail/cases/{r}.cpp, or list it "
                            "as not expressible in C++ (with the reason) in tests/compile_fail/meson.build")
    for r in args.not_expressible:
        if r not in ids:
            problems.append(f"rule {r} is listed as not expressible, but rules.def has no such rule")
    for r in by_rule:
        if r not in ids:
            problems.append(f"cases {', '.join(by_rule[r])} expect rule {r}, which rules.def does not have")
    if problems:
        for p in problems:
            print("FAIL: " + p)
        sys.exit(1)
    print(f"PASS: {len(ids)} rules: {len(by_rule)} with a case, {len(args.not_expressible)} not expressible in C++")


def main():
    argv = sys.argv[1:]
    compiler_cmd = []
    if "--" in argv:
        at = argv.index("--")
        argv, compiler_cmd = argv[:at], argv[at + 1:]
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rules", required=True)
    p.add_argument("-I", dest="include", action="append", default=[])
    p.add_argument("--coverage", action="store_true")
    p.add_argument("--cases")
    p.add_argument("--registered", nargs="*", default=[])
    p.add_argument("--not-expressible", nargs="*", default=[])
    p.add_argument("case", nargs="?")
    args = p.parse_args(argv)
    if args.coverage:
        if not args.cases:
            p.error("--coverage needs --cases")
        coverage(args)
    else:
        if not args.case or not compiler_cmd:
            p.error("give a case file and, after --, the compiler command")
        run_case(args, compiler_cmd)


if __name__ == "__main__":
    main()
