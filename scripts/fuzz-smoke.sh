#!/usr/bin/env bash
# The test command's fuzz smoke (issue 24): afl on the AMQP frame decoder,
# the decoder every client's bytes reach first and the cheapest target to
# instrument from cold, for FUZZ_SMOKE_SECONDS (default 20). Fails on a crash
# or a hang. The other five targets' corpora and every crash input found so
# far are replayed by `cargo test` (protocol/, cluster/ and tests/
# fuzz_corpus.rs); `scripts/fuzz.sh SECONDS` runs all six under afl.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exec bash scripts/fuzz.sh "${FUZZ_SMOKE_SECONDS:-20}" frames
