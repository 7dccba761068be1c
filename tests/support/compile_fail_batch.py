#!/usr/bin/env python3
"""Compile-fail cases checked in batches: one compiler run for many cases.

A batch is one generated translation unit holding several compile-fail cases, each in a
namespace of its own under SHARDALG_EXPECT_FAIL (tests/CMakeLists.txt writes it). The compiler
goes on after a failed static_assert, so one run reports every case's error. Each error is
attributed to the case whose file its diagnostic names:

  gcc:   the instantiation context comes before the error
         ("E101_x.cpp:15:18:   required from here", then "...: error: ...");
  clang: it comes after the error ("E101_x.cpp:15:12: note: in instantiation of ... requested here").

An error whose own lines name no case (a second error in the same instantiation) belongs to the
case of the error before it. A case that compiles, or whose error is the same instantiation as an
earlier case's in the batch (the compiler reports it once), has no error of its own and fails its
check: batches never hold two cases with the same ID (tests/CMakeLists.txt), so that is a defect,
never a pass.

Usage: compile_fail_batch.py --out DIR --style gcc|clang --tu batch.cpp -- <compiler and flags>
runs the compiler on the batch and writes DIR/<namespace>.diag for each case: each error
attributed to it with its context lines (or a line saying that none was). Each case's CTest test prints its
file and matches it as the compiler's output was matched before batching (PASS_REGULAR_EXPRESSION:
the case's ID; FAIL_REGULAR_EXPRESSION where a case forbids a diagnostic). Exits 0 when the
compiler ran and reported errors (the cases decide), 1 when it crashed or reported none.
"""
import argparse
import os
import re
import subprocess
import sys

CASE = re.compile(r'^namespace (?P<ns>\w+) \{\n#include "(?P<path>[^"]+)"$', re.M)
ERROR = re.compile(r':\d+:\d+: (?:fatal )?error: ')
# GCC opens an error's context with one of these (the include chain, the function or template
# being instantiated, the chain of "required from" up to the user's line).
GCC_CONTEXT = re.compile(r'^In file included from |: In (?:instantiation|function|member function|'
                         r'static member function|constructor|destructor|lambda|substitution)|'
                         r'\s(?:required|recursively required) (?:from|by) ')


def cases_of(tu):
    """{case file: its namespace in the batch}."""
    with open(tu, encoding="utf-8") as f:
        return {m.group("path"): m.group("ns") for m in CASE.finditer(f.read())}


def blocks(lines, style):
    """Split the compiler's output into one block per error: its line and its context lines."""
    starts = [i for i, line in enumerate(lines) if ERROR.search(line)]
    out = []
    for n, i in enumerate(starts):
        if style == "gcc":  # context before: from the first context line after the previous error
            lo = starts[n - 1] + 1 if n else 0
            while lo < i and not GCC_CONTEXT.search(lines[lo]):
                lo += 1  # the previous error's own notes and source lines
            out.append((i, lines[lo:i + 1]))
        else:  # clang: notes after, up to the next error
            hi = starts[n + 1] if n + 1 < len(starts) else len(lines)
            out.append((i, lines[i:hi]))
    return out


def attribute(lines, style, cases):
    """Each case's errors: [{"error": the error line, "lines": its block}]."""
    result = {c: [] for c in cases}
    current = None
    for i, block in blocks(lines, style):
        named = [c for line in block for c in cases if c + ":" in line]
        if named:
            current = named[-1]  # the outermost context names the case's own line
        if current is not None:
            result[current].append({"error": lines[i], "lines": block})
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--style", choices=["gcc", "clang"], required=True)
    parser.add_argument("--tu", required=True)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    cases = cases_of(args.tu)
    os.makedirs(args.out, exist_ok=True)
    for ns in cases.values():
        path = os.path.join(args.out, ns + ".diag")
        if os.path.exists(path):
            os.remove(path)
    cmd = command + [args.tu]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace")
    log = os.path.join(args.out, "compiler.log")
    with open(log, "w", encoding="utf-8") as f:
        f.write(" ".join(cmd) + "\n" + proc.stdout)
    lines = proc.stdout.splitlines()
    errors = sum(1 for line in lines if ERROR.search(line))
    result = attribute(lines, args.style, list(cases))
    print(f"{os.path.basename(args.tu)}: {len(cases)} cases, {errors} errors, compiler exit "
          f"{proc.returncode}; its output: {log}")
    for case, ns in cases.items():
        found = result[case]
        with open(os.path.join(args.out, ns + ".diag"), "w", encoding="utf-8") as f:
            if not found:
                f.write(f"{case}: no error attributed to this case (it compiled, or its error was "
                        f"reported for another case of the batch); the batch's output: {log}\n")
            for e in found:
                f.write("\n".join(e["lines"]) + "\n")
        print(f"  {os.path.basename(case)}: {len(found)} error(s)")
    crashed = proc.returncode < 0 or "internal compiler error" in proc.stdout
    if crashed or errors == 0:
        print(f"the compiler {'crashed' if crashed else 'reported no error'}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
