#!/usr/bin/env python3
"""The C++ blocks of README.md and docs/ as tests (docs/testing.md, "Doc tests").

Every ```cpp block is one of
  a program      it has `int main(`: compiled and run; when the page shows what it prints (a
                 ```text block right after a line that is exactly "prints"), the output must be
                 that text.
  a fragment     marked `<!-- doc-test: fragment HARNESS -->` on the line before the block: compiled
                 inside tests/docs/harness/HARNESS.cpp, in place of its line `// FRAGMENT`.
  a copy         marked `<!-- doc-test: same-as PATH -->`: its lines appear, in order and together,
                 in that file of the repository (a test compiles that file: the compile-fail labs).
A ```text block marked `<!-- doc-test: diagnostic E123 -->` must be part of that ID's text in
include/shardalg/base/diagnostics.hpp (spaces and line breaks aside).
A ```text block marked `<!-- doc-test: output EXAMPLE -->` is an output: examples/EXAMPLE.cpp run
with no arguments prints it, byte for byte, on stdout. The block stands for its lines each ended by
a newline: the program's stdout ends with one, and a blank line before the closing fence is an
empty line the program prints. One marked block per example (the test is named after it).

  doc_blocks.py --root DIR --out DIR   write the programs, their expected outputs, the files of
                                       fragments (SHARDS) and outputs/EXAMPLE.expected per marked output;
                                       print the count of each kind
  doc_blocks.py --root DIR --check     check the copies, the diagnostics and that each marked
                                       output names an example; exit 1 on a mismatch
A block that is none of these fails both.
"""
import argparse
import glob
import os
import re
import sys

MARK = re.compile(r'<!--\s*doc-test:\s*(.*?)\s*-->')
# The translation unit of each harness's fragments (fragments_K.cpp; 0 unless listed): those that
# build a model apart, so that no TU passes 1 GB of compiler memory (all in one took 1.34 GB).
SHARD_OF = {'gpt': 1, 'data_parallel_gpt': 1, 'pipeline_gpt': 2, 'pipeline': 3, 'moe': 3, 'conv': 3}
SHARDS = 4


def pages(root):
    out = [os.path.join(root, 'README.md')]
    out += sorted(glob.glob(os.path.join(root, 'docs', '**', '*.md'), recursive=True))
    return out


def blocks(path):
    """(lang, first line number, marker or None, lines, previous non-empty line) of each fence."""
    lines = open(path, encoding='utf-8').read().split('\n')
    i = 0
    while i < len(lines):
        m = re.match(r'^```(\w[\w+]*)\s*$', lines[i].strip())
        if m:
            j = i + 1
            while j < len(lines) and not lines[j].strip().startswith('```'):
                j += 1
            k = i - 1
            while k >= 0 and not lines[k].strip():
                k -= 1
            prev = lines[k].strip() if k >= 0 else ''
            mm = MARK.search(prev)
            yield m.group(1), i + 1, (mm.group(1) if mm else None), lines[i + 1:j], prev
            i = j
        i += 1


def slug(root, path, line):
    rel = os.path.relpath(path, root).replace(os.sep, '_').replace('.md', '')
    return re.sub(r'[^A-Za-z0-9_]', '_', f'{rel}_{line}')


def catalogue(root):
    """ID → the concatenated text of each of its static_assert messages."""
    text = open(os.path.join(root, 'include', 'shardalg', 'base', 'diagnostics.hpp'), encoding='utf-8').read()
    out = {}
    for m in re.finditer(r'static_assert\((.*?)\);', text, re.S):
        lits = re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(1))
        msg = ''.join(lits)
        idm = re.match(r'\[shardalg\.(E\d+)\]', msg)
        if idm:
            out.setdefault(idm.group(1), []).append(msg)
    return out


def squash(s):
    return ' '.join(s.split())


def collect(root):
    """The classified blocks and the problems found."""
    progs, frags, copies, diags, outputs, problems = [], [], [], [], [], []
    for path in pages(root):
        listed = list(blocks(path))
        for n, (lang, line, mark, body, prev) in enumerate(listed):
            where = f'{os.path.relpath(path, root)}:{line}'
            if lang == 'text' and mark and mark.startswith('diagnostic'):
                diags.append((where, mark.split()[1], '\n'.join(body)))
                continue
            if mark and mark.split()[0] == 'output':
                parts = mark.split()
                if lang != 'text' or len(parts) != 2:
                    problems.append(f'{where}: "{mark}" must be one example\'s name on a ```text block')
                else:
                    outputs.append((where, parts[1], '\n'.join(body) + '\n'))
                continue
            if lang not in ('cpp', 'c++'):
                continue
            if mark and mark.startswith('fragment'):
                parts = mark.split()
                if len(parts) != 2 or not os.path.isfile(os.path.join(root, 'tests', 'docs', 'harness', parts[1] + '.cpp')):
                    problems.append(f'{where}: "{mark}" names no harness in tests/docs/harness/')
                    continue
                frags.append((where, slug(root, path, line), parts[1], body))
            elif mark and mark.startswith('same-as'):
                copies.append((where, mark.split(None, 1)[1], body))
            elif any('int main(' in l for l in body):
                expected = None
                if n + 1 < len(listed):
                    lang2, line2, mark2, body2, prev2 = listed[n + 1]
                    if lang2 == 'text' and prev2 == 'prints':
                        expected = '\n'.join(body2) + '\n'
                progs.append((where, slug(root, path, line), body, expected))
            else:
                problems.append(f'{where}: a C++ block that is neither a program (no main) nor marked '
                                f'(<!-- doc-test: fragment HARNESS --> or <!-- doc-test: same-as PATH -->)')
    return progs, frags, copies, diags, outputs, problems


def check(root):
    progs, frags, copies, diags, outputs, problems = collect(root)
    for where, target, body in copies:
        p = os.path.join(root, target)
        if not os.path.isfile(p):
            problems.append(f'{where}: same-as {target}: no such file')
            continue
        text = open(p, encoding='utf-8').read()
        if '\n'.join(body) not in text:
            problems.append(f'{where}: its lines are not in {target} as they stand there')
    cat = catalogue(root)
    for where, ident, body in diags:
        shown = squash(re.sub(r'^.*?static assertion failed:\s*', '', body.replace('\n', ' ')))
        shown = shown.replace('error: ', '')
        if ident not in cat:
            problems.append(f'{where}: diagnostic {ident} is not in the catalogue')
        elif not any(shown in squash(t) for t in cat[ident]):
            problems.append(f'{where}: the text shown is not {ident}\'s text in base/diagnostics.hpp')
    seen = {}
    for where, example, text in outputs:
        if not re.fullmatch(r'[A-Za-z0-9_]+', example) or not os.path.isfile(os.path.join(root, 'examples', example + '.cpp')):
            problems.append(f'{where}: output {example}: no such program examples/{example}.cpp')
        elif example in seen:
            problems.append(f'{where}: output {example} is marked already at {seen[example]}')
        else:
            seen[example] = where
    return progs, frags, copies, diags, outputs, problems


def write(root, out):
    progs, frags, copies, diags, outputs, problems = check(root)
    os.makedirs(os.path.join(out, 'programs'), exist_ok=True)
    names = []
    for where, name, body, expected in progs:
        with open(os.path.join(out, 'programs', name + '.cpp'), 'w', encoding='utf-8') as f:
            f.write(f'// {where} (generated by tests/docs/doc_blocks.py)\n' + '\n'.join(body) + '\n')
        exp = os.path.join(out, 'programs', name + '.expected')
        if expected is not None:
            open(exp, 'w', encoding='utf-8').write(expected)
        elif os.path.exists(exp):
            os.remove(exp)
        names.append(name)
    # the fragments, each in its harness, in a namespace of its own, in SHARDS translation units
    shards = [([], []) for _ in range(SHARDS)]
    for where, name, harness, body in frags:
        h = open(os.path.join(root, 'tests', 'docs', 'harness', harness + '.cpp'), encoding='utf-8').read()
        head, sep, tail = h.partition('// FRAGMENT\n')
        if not sep:
            problems.append(f'tests/docs/harness/{harness}.cpp: no line "// FRAGMENT"')
            continue
        includes, units = shards[SHARD_OF.get(harness, 0)]
        inc = [l for l in head.split('\n') if l.startswith('#include')]
        inc += [l for l in body if l.startswith('#include')]  # a block's own includes go to the top
        rest_head = '\n'.join(l for l in head.split('\n') if not l.startswith('#include'))
        code = [l for l in body if not l.startswith('#include')]
        for l in inc:
            if l not in includes:
                includes.append(l)
        units.append(f'// {where}\nnamespace doc_{name} {{\n{rest_head}\n' + '\n'.join(code) + f'\n{tail}}}  // namespace doc_{name}\n')
    for k, (includes, units) in enumerate(shards):
        with open(os.path.join(out, f'fragments_{k}.cpp'), 'w', encoding='utf-8') as f:
            f.write('// The marked fragments of README.md and docs/, each in its harness (generated).\n')
            f.write('\n'.join(includes) + '\n\n' + '\n'.join(units))
    if os.path.exists(os.path.join(out, 'fragments.cpp')):
        os.remove(os.path.join(out, 'fragments.cpp'))
    # the marked outputs: one expected file per example, written afresh (an unmarked one disappears)
    os.makedirs(os.path.join(out, 'outputs'), exist_ok=True)
    for old in glob.glob(os.path.join(out, 'outputs', '*.expected')):
        os.remove(old)
    examples = []
    for where, example, text in outputs:
        if example in examples or any(p.startswith(f'{where}: ') for p in problems):
            continue
        open(os.path.join(out, 'outputs', example + '.expected'), 'w', encoding='utf-8').write(text)
        examples.append(example)
    with open(os.path.join(out, 'programs.cmake'), 'w', encoding='utf-8') as f:
        f.write('set(SHARDALG_DOC_PROGRAMS ' + ' '.join(names) + ')\n')
        f.write('set(SHARDALG_DOC_OUTPUTS ' + ' '.join(examples) + ')\n')
        f.write('set(SHARDALG_DOC_FRAGMENT_FILES ' + ' '.join(f'fragments_{k}.cpp' for k in range(SHARDS)) + ')\n')
        f.write('set(SHARDALG_DOC_PAGES ' + ' '.join(p.replace(os.sep, '/') for p in pages(root)) + ')\n')
    print(f'doc blocks: {len(progs)} programs, {len(frags)} fragments, {len(copies)} copies, {len(diags)} diagnostics, '
          f'{len(examples)} outputs')
    return problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--root', required=True)
    ap.add_argument('--out')
    ap.add_argument('--check', action='store_true')
    a = ap.parse_args()
    root = os.path.abspath(a.root)
    if a.out:
        problems = write(root, a.out)
    else:
        progs, frags, copies, diags, outputs, problems = check(root)
        print(f'doc blocks: {len(progs)} programs, {len(frags)} fragments, {len(copies)} copies, '
              f'{len(diags)} diagnostics, {len(outputs)} outputs; every C++ block classified')
    for p in problems:
        print(p)
    return 1 if problems and a.check else 0


if __name__ == '__main__':
    sys.exit(main())
