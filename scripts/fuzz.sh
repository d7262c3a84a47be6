#!/usr/bin/env bash
# Coverage-guided fuzzing of every decoder that reads bytes from outside
# (issue 24): `scripts/fuzz.sh SECONDS [TARGET...]` runs each target for
# SECONDS with afl (cargo-afl, stable toolchain), one after the other, and
# prints per target the executions, the corpus paths, crashes and hangs.
# Exits non-zero when any target crashed or hung; the inputs are then in
# fuzz/out/TARGET/default/{crashes,hangs}/ (turn each into a regression
# input under fuzz/regressions/TARGET/, which the crate's corpus replay test
# feeds to the same check, and fix it).
#
# Targets (fuzz/Cargo.toml; seeds in fuzz/corpus/TARGET):
#   frames       AMQP frame decoder (stablemq-protocol)
#   wire         node-to-node frame decoder (stablemq-cluster)
#   segment_log  event-log segment recovery, torn and corrupt files (stablemq-cluster)
#   connection   connection state machine fed a client's bytes (broker)
#   definitions  definitions JSON import into events (broker)
#   management   management API request bodies (broker)
# Default: all six. The broker's three build the whole broker crate with
# afl's instrumentation (slow from cold); the test command's smoke runs the
# first three only, and replays all six corpora in `cargo test`.
#
# Installs cargo-afl from crates.io (which builds its AFL++) if missing.
# Runs `nice`d; output (afl's queue, crashes, hangs) in fuzz/out/ (ignored
# by git); a second run resumes the first's queue.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
SECONDS_EACH=${1:?usage: scripts/fuzz.sh SECONDS [TARGET...]}
shift
ALL=(frames wire segment_log connection definitions management)
TARGETS=("$@")
[[ ${#TARGETS[@]} -eq 0 ]] && TARGETS=("${ALL[@]}")
AFL_VERSION=0.18.2

log() { printf '==> fuzz: %s\n' "$*"; }

if ! cargo afl --version 2>/dev/null | grep -q "$AFL_VERSION"; then
    log "installing cargo-afl $AFL_VERSION"
    cargo install --locked cargo-afl --version "$AFL_VERSION"
fi

# The fewest crates to instrument for the targets asked for.
features=(--no-default-features)
for t in "${TARGETS[@]}"; do
    case $t in
        frames) ;;
        wire | segment_log) [[ ${features[*]} == *broker* ]] || features=(--features cluster) ;;
        connection | definitions | management) features=(--features broker) ;;
        *) echo "unknown target $t (one of: ${ALL[*]})" >&2; exit 2 ;;
    esac
done
bins=()
for t in "${TARGETS[@]}"; do bins+=(--bin "$t"); done
log "building ${TARGETS[*]} with afl instrumentation"
t0=$SECONDS
(cd fuzz && nice cargo afl build --release "${features[@]}" "${bins[@]}")
log "built in $((SECONDS - t0)) s"

# A shared machine: no CPU pinning, no cpufreq check; a core_pattern that
# pipes to a handler is fine, crashes are still caught by afl's fork server;
# a seed that crashes stops afl (and fails the run).
export AFL_NO_UI=1 AFL_SKIP_CPUFREQ=1 AFL_NO_AFFINITY=1 AFL_AUTORESUME=1
export AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/fuzz/target}
failed=()
summary=()
for t in "${TARGETS[@]}"; do
    out=$ROOT/fuzz/out/$t
    mkdir -p "$out"
    log "$t for $SECONDS_EACH s"
    # -t: per-input time limit (ms) before afl calls it a hang, generous for
    # a loaded 2-core machine; -V: stop after the time.
    if ! nice cargo afl fuzz -V "$SECONDS_EACH" -t 5000 -i "$ROOT/fuzz/corpus/$t" -o "$out" \
        "$TARGET_DIR/release/$t" >"$out/afl.log" 2>&1; then
        tail -n 30 "$out/afl.log" >&2
        failed+=("$t (afl failed to run)")
        continue
    fi
    stats=$out/default/fuzzer_stats
    get() { awk -F' *: *' -v k="$1" '$1 == k { print $2 }' "$stats"; }
    crashes=$(get saved_crashes) hangs=$(get saved_hangs)
    line=$(printf '%-12s %10s %8s %7s %6s %8s' "$t" "$(get execs_done)" "$(get corpus_count)" "$crashes" "$hangs" "$(get run_time)")
    summary+=("$line")
    echo "$line"
    if [[ ${crashes:-0} != 0 || ${hangs:-0} != 0 ]]; then
        failed+=("$t")
        ls "$out/default/crashes" "$out/default/hangs" 2>/dev/null | grep -v README || true
    fi
done
echo
printf '%-12s %10s %8s %7s %6s %8s\n' target execs paths crashes hangs seconds
printf '%s\n' "${summary[@]}"
if [[ ${#failed[@]} -ne 0 ]]; then
    echo "fuzz: crashes or hangs in: ${failed[*]}" >&2
    exit 1
fi
