#!/bin/sh
# The compiler launcher of SHARDALG_BENCH_SYNTAX_ONLY (bench/CMakeLists.txt): runs the compile line
# it is given with -fsyntax-only (the compiler parses the file and instantiates every template it
# uses, and writes no code), then creates the line's -o file, empty, so that the build tool has its
# output and a second build does not compile the file again.
out=""
prev=""
for arg in "$@"; do
  [ "$prev" = "-o" ] && out=$arg
  prev=$arg
done
"$@" -fsyntax-only || exit $?
[ -n "$out" ] && : > "$out"
