#!/usr/bin/env python3
"""The floors of include/shardalg/: every #include of a shardalg header points to the including
header's own floor or one below it, and no two headers include each other through a circle.

The floor order is read from docs/design.md, from the fenced block after the line
`<!-- floors: bottom to top -->`, one floor per line (a folder under include/shardalg/, or
`top` for the headers directly in it). Usage:

  scripts/check_floors.py [--root DIR]        # exit 0: clean; 1: violations, each on a line
  scripts/check_floors.py --self-test         # a copy with one upward include must fail
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]shardalg/([^>"]+)[>"]', re.M)


def floor_order(design_md):
    text = open(design_md, encoding='utf-8').read()
    m = re.search(r'<!-- floors: bottom to top -->\s*```[a-z]*\n(.*?)```', text, re.S)
    if not m:
        sys.exit(f'{design_md}: no "<!-- floors: bottom to top -->" block')
    floors = []
    for line in m.group(1).splitlines():
        name = line.split('#')[0].split()[0] if line.split() else ''
        if name:
            floors.append(name.rstrip('/'))
    return floors


def floor_of(path, floors):
    """The floor of a header path relative to include/shardalg: the longest floor name that is a
    folder prefix of it, or 'top' for a header directly in include/shardalg."""
    best = None
    for f in floors:
        if f == 'top':
            continue
        if path.startswith(f + '/') and (best is None or len(f) > len(best)):
            best = f
    if best is None and '/' not in path:
        best = 'top'
    return best


def check(root):
    inc = os.path.join(root, 'include', 'shardalg')
    floors = floor_order(os.path.join(root, 'docs', 'design.md'))
    rank = {f: i for i, f in enumerate(floors)}
    problems = []
    graph = {}
    for dirpath, _, names in os.walk(inc):
        for n in sorted(names):
            if not n.endswith(('.hpp', '.cuh', '.h')):
                continue
            full = os.path.join(dirpath, n)
            rel = os.path.relpath(full, inc).replace(os.sep, '/')
            src = floor_of(rel, floors)
            if src is None:
                problems.append(f'{rel}: in no floor of docs/design.md')
                continue
            text = open(full, encoding='utf-8').read()
            graph[rel] = []
            for lineno, line in enumerate(text.splitlines(), 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                dep = m.group(1)
                graph[rel].append(dep)
                if not os.path.exists(os.path.join(inc, dep)):
                    problems.append(f'{rel}:{lineno}: includes shardalg/{dep}, which does not exist')
                    continue
                dst = floor_of(dep, floors)
                if dst is None:
                    problems.append(f'{rel}:{lineno}: includes shardalg/{dep}, in no floor')
                elif rank[dst] > rank[src]:
                    problems.append(f'{rel}:{lineno}: includes shardalg/{dep} — floor {dst} is above {src}')
    # circles: depth-first search over the include graph
    state = {}
    stack = []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for d in graph.get(n, []):
            if state.get(d) == 1:
                cyc = stack[stack.index(d):] + [d]
                problems.append('include circle: ' + ' → '.join(cyc))
            elif d not in state and d in graph:
                visit(d)
        stack.pop()
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n)
    return floors, len(graph), problems


def self_test(root):
    """Copy the headers and the floor list, add one include from a floor to the floor above it,
    and require the check to find exactly that line."""
    floors = floor_order(os.path.join(root, 'docs', 'design.md'))
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(os.path.join(root, 'include'), os.path.join(tmp, 'include'))
        os.makedirs(os.path.join(tmp, 'docs'))
        shutil.copy(os.path.join(root, 'docs', 'design.md'), os.path.join(tmp, 'docs'))
        inc = os.path.join(tmp, 'include', 'shardalg')
        low = os.path.join(inc, 'base', 'layout.hpp')
        text = open(low, encoding='utf-8').read()
        text = text.replace('#pragma once', '#pragma once\n#include "shardalg/core/sharded.hpp"', 1)
        open(low, 'w', encoding='utf-8').write(text)
        _, _, problems = check(tmp)
        hits = [p for p in problems if p.startswith('base/layout.hpp:') and 'core/sharded.hpp' in p]
        if not hits:
            print('self-test FAILED: an include of core/ from base/ was not reported')
            return 1
        print(f'self-test: the injected upward include was reported: {hits[0]}')
        return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--root', default=os.path.join(os.path.dirname(__file__), '..'))
    ap.add_argument('--self-test', action='store_true')
    a = ap.parse_args()
    root = os.path.abspath(a.root)
    if a.self_test:
        return self_test(root)
    floors, n, problems = check(root)
    for p in problems:
        print(p)
    if problems:
        print(f'{len(problems)} problem(s) in {n} headers')
        return 1
    print(f'{n} headers on {len(floors)} floors ({" → ".join(floors)}): every include points down or sideways, no circle')
    return 0


if __name__ == '__main__':
    sys.exit(main())
