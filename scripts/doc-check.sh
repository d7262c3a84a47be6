#!/usr/bin/env bash
# Two checks that the docs stay true; either failing fails the script.
#
# 1. Paths: every file or module path docs/architecture.md names exists.
#    A path is an inline code span (`...`, outside fenced blocks) made only of
#    letters, digits and `_ - . /`, optionally followed by `::name` segments,
#    that contains a `/` or ends in a file extension (`.rs`, `.sh`, `.md`, ...).
#    Spans with anything else (`<data-dir>/store`, `GET /api/nodes`, `{vhost}`)
#    and spans starting with `/` (URL paths such as `/metrics`) are not paths.
#    - `a/b.rs` (a slash) must exist relative to one of the roots: the repo
#      root, src/, cluster/src/, protocol/src/, compat-tests/. So
#      `src/server/route.rs`, `server/route.rs` and `store/runner.rs`
#      (cluster/src/store/runner.rs) all resolve, and `paging/run.rs` does
#      not: write `broker/paging/run.rs`.
#    - The form says what it is: `a.rs` must be a file, `a/` a directory,
#      and `a/b` (neither) a file, a directory, `a/b.rs` or `a/b/mod.rs`. A
#      module that became a directory (`ctl.rs` -> `ctl/`) is stale until
#      the doc says `ctl/`.
#    - A bare file name (`frame.rs`, no slash) must exist somewhere in the
#      workspace's tracked files: the text around it says which one.
#    - `path::item` (and `path::Type::item`) also needs the item defined in
#      that file (in a directory: in one of its .rs files), by its case:
#      `fn item` for snake_case, `const`/`static ITEM` for UPPER_CASE, and
#      `struct`/`enum`/`trait`/`type Item` for CamelCase; each `Type` before
#      it must be a word of the same file or files.
#    Run only this part with `scripts/doc-check.sh --paths`.
# 2. API docs: the workspace's API docs build without a warning: no broken or
#    private intra-doc link, no stray HTML in a doc comment. `cargo doc` checks
#    what `cargo build` and clippy do not, so a doc comment that points at a
#    renamed or private item fails here rather than rotting.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# DOC_CHECK_DOCS: the docs to check (space-separated), docs/architecture.md unless set.
# shellcheck disable=SC2086
python3 - ${DOC_CHECK_DOCS:-docs/architecture.md} <<'PY'
import os
import re
import sys

ROOTS = ["", "src", "cluster/src", "protocol/src", "compat-tests"]
EXT = re.compile(r"\.(rs|sh|md|toml|py|json|yml|yaml|txt)$")
SPAN = re.compile(r"`([^`\n]+)`")
PATH = re.compile(r"^([A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)*/?)((?:::[A-Za-z_][A-Za-z0-9_]*)*)$")



def under(dirs, name):
    """The files `name` directly under a root, or at any depth under one of `dirs`."""
    found = [p for p in (os.path.join(r, name) if r else name for r in ROOTS) if os.path.isfile(p)]
    for d in dirs:
        found += [os.path.join(w, name) for w, _, names in os.walk(d) if name in names]
    return found


def candidates(path):
    """The existing files or directories `path` may name, by the rules above."""
    found = []
    for root in ROOTS:
        p = os.path.join(root, path) if root else path
        if path.endswith("/"):
            if os.path.isdir(p):
                found.append(p)
        elif EXT.search(path):
            if os.path.isfile(p):
                found.append(p)
        else:
            for q in (p, p + ".rs", os.path.join(p, "mod.rs")):
                if os.path.exists(q):
                    found.append(q)
                    break
    return found


def rust_sources(p):
    if os.path.isfile(p):
        return [p]
    out = []
    for d, _, names in os.walk(p):
        out += [os.path.join(d, n) for n in names if n.endswith(".rs")]
    return out


def definition(item):
    """The pattern that defines `item`, by its case."""
    if item.isupper():
        kinds = "const|static"
    elif item[0].isupper():
        kinds = "struct|enum|trait|type|union"
    else:
        kinds = "fn"
    return r"\b(?:" + kinds + r")\s+" + re.escape(item) + r"\b"


def has_items(places, names):
    *types, item = names
    for place in places:
        text = "".join(open(f, encoding="utf-8").read() for f in rust_sources(place))
        if re.search(definition(item), text) and all(
            re.search(r"\b" + re.escape(t) + r"\b", text) for t in types
        ):
            return True
    return False


errors = []
for doc in sys.argv[1:]:
    fenced = False
    context = []  # directories named earlier in this paragraph
    for lineno, line in enumerate(open(doc, encoding="utf-8"), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        if not line.strip() or line.lstrip().startswith("|"):
            context = []
        for span in SPAN.findall(line):
            m = PATH.match(span)
            if not m:
                continue
            path, items = m.group(1), [s for s in m.group(2).split("::") if s]
            if "/" not in path and not EXT.search(path):
                continue
            where = f"{doc}:{lineno}: `{span}`"
            if "/" not in path:
                places = under(context, path)
                if not places:
                    errors.append(f"{where}: {path} is under no root and under no directory named before it in its paragraph")
                    continue
            else:
                places = candidates(path)
                context += [p if os.path.isdir(p) else os.path.dirname(p) for p in places]
            if not places:
                errors.append(f"{where}: {path} exists under none of: repo root, " + ", ".join(r + "/" for r in ROOTS if r))
            elif items and not has_items(places, items):
                errors.append(f"{where}: no definition of `{items[-1]}`" + (f" beside {'::'.join(items[:-1])}" if items[1:] else "") + f" in {', '.join(places)}")
for e in errors:
    print(e, file=sys.stderr)
if errors:
    print(f"doc-check: {len(errors)} stale path(s) in the docs", file=sys.stderr)
    sys.exit(1)
PY

if [[ ${1:-} == --paths ]]; then
    exit 0
fi
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --workspace --quiet
