#!/usr/bin/env python3
"""tests/mpi/expect_abort.py — meson's twin of expect_abort.cmake: run EXE under MPIEXEC with NP
ranks and pass only when the job ends by itself (within 50 s), with a non-zero exit, and its
output holds exactly one line "shardalg: rank R: ..." equal to EXPECT and no std::terminate report.

    expect_abort.py MPIEXEC NP EXE EXPECT [MODE]      (MODE: EXE's first argument, if any)
"""
import re
import subprocess
import sys

mpiexec, np, exe, expect = sys.argv[1:5]
mode = sys.argv[5:6]
try:
    p = subprocess.run([mpiexec, "-n", np, exe] + mode, capture_output=True, text=True, timeout=50)
except subprocess.TimeoutExpired:
    sys.exit("the job did not end by itself within 50 s")
out = p.stdout + "\n" + p.stderr
print(f"exit: {p.returncode}\n--- stdout\n{p.stdout}--- stderr\n{p.stderr}---")
if p.returncode == 0:
    sys.exit("the job exited 0; expected a non-zero exit")
lines = re.findall(r"shardalg: rank \d+: [^\n]*", out)
if len(lines) != 1:
    sys.exit(f"expected exactly one 'shardalg: rank R: ...' line, got {len(lines)}")
if lines[0] != expect:
    sys.exit(f"the line is\n  {lines[0]}\nexpected\n  {expect}")
if "terminate called" in out:
    sys.exit("an exception escaped to std::terminate")
print(f"ok: ended with exit {p.returncode} and the one line")
