#!/usr/bin/env bash
# The workspace's API docs build without a warning: no broken or private
# intra-doc link, no stray HTML in a doc comment. `cargo doc` checks what
# `cargo build` and clippy do not, so a doc comment that points at a renamed or
# private item fails here rather than rotting.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --workspace --quiet
