#!/usr/bin/env bash
# List the production functions longer than N lines (default 100), longest first:
#
#     scripts/long-fns.sh [N]
#
# One line per function: its length, `path:line`, and `Type::name` (the type of
# the enclosing `impl` or `trait`, if any). The length runs from the line of `fn`
# to the line of the closing brace, both included, so a doc comment or an
# attribute above it does not count.
#
# Production code is the library and binary sources of the workspace (src/,
# protocol/src/, cluster/src/, compat-tests/src/ excluded: that is test harness).
# Test code is left out: files named tests.rs or tests_*.rs, files under a tests/
# or tests_*/ directory, modules declared `#[cfg(test)] mod name;` (their file), blocks
# `#[cfg(test)] mod name { ... }`, and `#[test]` functions.
#
# The scan is lexical, not a parser: it skips comments, strings (raw strings
# too) and char literals, and follows brace depth. A closure or a nested `fn`
# counts inside its enclosing function (a nested `fn` is listed on its own too).
# It informs a review; nothing fails on its output.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exec python3 - "${1:-100}" <<'PY'
import os
import re
import sys

LIMIT = int(sys.argv[1])
ROOTS = ["src", "protocol/src", "cluster/src"]


def rust_files():
    for root in ROOTS:
        for d, _, names in os.walk(root):
            for n in names:
                if n.endswith(".rs"):
                    yield os.path.join(d, n)


def is_test_path(path):
    return any(p in ("tests", "tests.rs") or p.startswith("tests_") for p in path.split(os.sep))


RAW = re.compile(r'b?r(#*)"')


def strip(src):
    """The source with comments, strings and char literals blanked (newlines
    kept, so line numbers hold)."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append("\n" * src.count("\n", i, j))
            i = j
        elif (m := RAW.match(src, i)) and (
            i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")
        ):
            end = '"' + m.group(1)
            j = src.find(end, m.end())
            j = n if j < 0 else j + len(end)
            out.append('""' + "\n" * src.count("\n", i, j))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            j += 1
            out.append('""' + "\n" * src.count("\n", i, j))
            i = j
        elif c == "'":
            # A char literal ('x', '\n', '\u{..}') or a lifetime ('a).
            if i + 1 < n and src[i + 1] == "\\":
                j = src.find("'", i + 2)
                i = n if j < 0 else j + 1
                out.append("' '")
            elif i + 2 < n and src[i + 2] == "'":
                out.append("' '")
                i += 3
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def child_test_files(path, text):
    """Files of the modules this file declares as `#[cfg(test)] mod name;`."""
    d, base = os.path.split(path)
    if base not in ("mod.rs", "lib.rs", "main.rs"):
        d = os.path.join(d, base[:-3])
    found = []
    for m in re.finditer(r"#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", text):
        found += [os.path.join(d, m.group(1) + ".rs"), os.path.join(d, m.group(1), "mod.rs")]
    return found


FN = re.compile(r"\bfn\s+(\w+)")
IMPL = re.compile(r"^\s*(?:unsafe\s+)?impl\b(?:\s*<.*?>)?\s+(?:.*?\bfor\s+)?(?:&\s*)?(?:dyn\s+)?([\w:]+)")
TRAIT = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:unsafe\s+)?trait\s+(\w+)")
TEST_MOD = re.compile(r"#\[cfg\(test\)\].*\bmod\s+\w+\s*$", re.S)
TEST_FN = re.compile(r"#\[(?:tokio::)?test\b")


def scan(path, code, results):
    """Append (length, where, name) for every function of `code`."""
    stack = []  # (kind, name, line of `fn`)
    header = []  # the text since the last `;`, `{` or `}`
    line = 1
    for c in code:
        if c == "\n":
            line += 1
            header.append(c)
        elif c == ";":
            header = []
        elif c == "{":
            h = "".join(header)
            bare = re.sub(r"#\[[^\]]*\]", "", h)
            start = line
            if (stack and stack[-1][0] == "test") or TEST_MOD.search(h) or TEST_FN.search(h):
                kind, name = "test", ""
            elif m := FN.search(bare):
                kind, name = "fn", m.group(1)
                start = line - bare[m.start() :].count("\n")
            elif m := IMPL.match(bare):
                kind, name = "impl", m.group(1).split("::")[-1]
            elif m := TRAIT.match(bare):
                kind, name = "impl", m.group(1)
            else:
                kind, name = "block", ""
            stack.append((kind, name, start))
            header = []
        elif c == "}":
            if stack:
                kind, name, start = stack.pop()
                if kind == "fn":
                    owner = next((s[1] for s in reversed(stack) if s[0] == "impl"), None)
                    full = f"{owner}::{name}" if owner else name
                    results.append((line - start + 1, f"{path}:{start}", full))
            header = []
        else:
            header.append(c)


def main():
    files = sorted(rust_files())
    test_files = set()
    texts = {}
    for f in files:
        with open(f, encoding="utf-8") as fh:
            texts[f] = fh.read()
        test_files.update(child_test_files(f, strip(texts[f])))
    results = []
    for f in files:
        if is_test_path(f) or f in test_files:
            continue
        scan(f, strip(texts[f]), results)
    for n, where, name in sorted(results, key=lambda r: (-r[0], r[1])):
        if n > LIMIT:
            print(f"{n:5d}  {where}  {name}")


main()
PY
