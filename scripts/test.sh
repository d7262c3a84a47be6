#!/usr/bin/env bash
# Run every test of the workspace, the way CI does (.ci/run calls this script).
#
# 1. Build everything once in the release profile: the broker binary and all test
#    binaries, so that `cargo test --release` below reuses them. Then the guard
#    rails: `cargo fmt --all --check` and `cargo clippy --workspace --all-targets
#    -- -D warnings` (the workspace's `[lints]` in Cargo.toml, clippy.toml). A
#    formatting or lint failure fails the run; the tests still run, so one run
#    shows everything.
# 2. Create .venv (if missing) with the pinned Python clients the end-to-end tests
#    run (compat-tests/python/requirements.txt), and install Debian's RabbitMQ Java
#    client and JDK if missing (the client-recovery test compiles a Java program).
# 3. Run all tests with STABLEMQ_BIN and STABLEMQ_PYTHON pointing at those, and
#    print a summary. Exits non-zero if anything failed.
#
# Needs only cargo/rustc (with rustfmt and clippy) and python3 (3.11) with pip;
# everything else is fetched from crates.io and PyPI (and, as root, Debian's archive).
#
# `scripts/test.sh --guards-only` runs only the guard rails (no build, no tests)
# and fails as the whole run would.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
START=$SECONDS
GUARDS_ONLY=0
if [[ ${1:-} == --guards-only ]]; then
    GUARDS_ONLY=1
fi

log() { printf '==> %s\n' "$*"; }

# Checks that fail the run when they fail, listed in the summary: the guard
# rails after the build, the operations checks at the end.
failed_checks=()
run_check() {
    local name=$1 t0=$SECONDS
    shift
    log "check: $name ($*)"
    if "$@"; then
        log "check $name passed ($((SECONDS - t0)) s)"
    else
        log "check $name FAILED ($((SECONDS - t0)) s)"
        failed_checks+=("$name")
    fi
}

# Formatting and lints: clippy with every warning an error, over every target
# (tests, examples): the developers' guide's `cargo clippy --workspace
# --all-targets -- -D warnings`, in the release profile so that it reuses the
# build scripts and proc macros the build above compiled (no code of the
# workspace differs between the profiles: nothing is `cfg(debug_assertions)`).
run_guards() {
    run_check fmt cargo fmt --all --check
    run_check clippy cargo clippy --release --workspace --all-targets -- -D warnings
}

if [[ $GUARDS_ONLY == 1 ]]; then
    run_guards
    if [[ ${#failed_checks[@]} -ne 0 ]]; then
        echo "checks failed: ${failed_checks[*]}"
        exit 1
    fi
    exit 0
fi

# --- 1. Build ---------------------------------------------------------------
log "building the workspace (release, all targets)"
cargo build --release --workspace --all-targets

BIN="$ROOT/target/release/stablemq"
if [[ ! -x "$BIN" ]]; then
    echo "error: $BIN was not built" >&2
    exit 1
fi
run_guards

# The fuzz smoke (scripts/fuzz-smoke.sh) installs cargo-afl and builds its
# instrumented target in a target dir of its own (fuzz/target): minutes of
# CPU that need nothing from the tests. It starts now, at the lowest CPU
# priority, beside the tests (which mostly wait on sockets and timers), and
# its result is collected with the other checks at the end.
FUZZ_SMOKE_LOG="$(mktemp -t stablemq-fuzz.XXXXXX)"
FUZZ_SMOKE_PID=""
if [[ ${CHECKS_IN_TEST_COMMAND:-1} == 1 ]]; then
    log "fuzz smoke: started in the background (log: $FUZZ_SMOKE_LOG)"
    nice -n 19 bash scripts/fuzz-smoke.sh >"$FUZZ_SMOKE_LOG" 2>&1 &
    FUZZ_SMOKE_PID=$!
fi
fuzz_smoke_result() {
    local rc=0
    wait "$FUZZ_SMOKE_PID" || rc=$?
    tail -n 40 "$FUZZ_SMOKE_LOG"
    return "$rc"
}

# --- 2. Python virtualenv ----------------------------------------------------
REQUIREMENTS="$ROOT/compat-tests/python/requirements.txt"
VENV="$ROOT/.venv"
PYTHON_HOST="$(command -v python3.11 || command -v python3 || true)"
if [[ ! -x "$VENV/bin/python" ]]; then
    if [[ -z "$PYTHON_HOST" ]]; then
        echo "error: python3.11 (or python3) is needed for the end-to-end tests" >&2
        exit 1
    fi
    log "creating $VENV with $PYTHON_HOST"
    if ! "$PYTHON_HOST" -m venv "$VENV"; then
        # Some distributions ship Python without ensurepip; virtualenv does not need it.
        rm -rf "$VENV"
        "$PYTHON_HOST" -m pip install --quiet --user virtualenv
        "$PYTHON_HOST" -m virtualenv --quiet "$VENV"
    fi
fi
# Install only when the requirements changed since the last install.
STAMP="$VENV/.requirements.sha256"
WANT="$(sha256sum "$REQUIREMENTS" | cut -d' ' -f1)"
if [[ ! -f "$STAMP" || "$(cat "$STAMP")" != "$WANT" ]]; then
    log "installing $REQUIREMENTS into $VENV"
    PIP_DISABLE_PIP_VERSION_CHECK=1 "$VENV/bin/python" -m pip install --quiet -r "$REQUIREMENTS"
    echo "$WANT" >"$STAMP"
fi

# The RabbitMQ Java client (Debian's), which compat-tests/tests/client_recovery.rs
# compiles and runs with javac/java; installed with apt-get if missing (root, as CI).
JARS=/usr/share/java
if ! command -v javac >/dev/null 2>&1 || [[ ! -f $JARS/amqp-client.jar || ! -f $JARS/slf4j-nop.jar ]]; then
    log "installing Debian's librabbitmq-client-java, libslf4j-java and default-jdk-headless"
    # shellcheck source=scripts/lib/common.sh
    . "$ROOT/scripts/lib/common.sh"
    apt_install librabbitmq-client-java libslf4j-java default-jdk-headless ||
        echo "warning: the Java client could not be installed; the client-recovery test will fail" >&2
fi

# The stream protocol's npm client (compat-tests/tests/stream_protocol/),
# installed from its lock file when the lock changed since the last install.
JS_STREAM="$ROOT/compat-tests/js/stream"
JS_STAMP="$JS_STREAM/node_modules/.lock.sha256"
JS_WANT="$(sha256sum "$JS_STREAM/package-lock.json" | cut -d' ' -f1)"
if [[ ! -f "$JS_STAMP" || "$(cat "$JS_STAMP")" != "$JS_WANT" ]]; then
    if command -v npm >/dev/null 2>&1; then
        log "installing rabbitmq-stream-js-client into $JS_STREAM/node_modules"
        (cd "$JS_STREAM" && npm ci --silent --no-audit --no-fund) && echo "$JS_WANT" >"$JS_STAMP" ||
            echo "warning: npm ci failed; the stream js client test will fail" >&2
    else
        echo "warning: no npm; the stream js client test will fail" >&2
    fi
fi

# --- 3. Test -----------------------------------------------------------------
export STABLEMQ_BIN="$BIN"
export STABLEMQ_PYTHON="$VENV/bin/python"
# Every test starts its own broker; an external one would make the restart tests fail.
unset STABLEMQ_TEST_EXTERNAL_URI

LOG="$(mktemp -t stablemq-test.XXXXXX)"
trap 'rm -f "$LOG" "$FUZZ_SMOKE_LOG"' EXIT

log "running all tests (STABLEMQ_BIN=$STABLEMQ_BIN, STABLEMQ_PYTHON=$STABLEMQ_PYTHON)"
status=0
cargo test --release --workspace --no-fail-fast 2>&1 | tee "$LOG" || status=$?

# --- Third-party client suites -----------------------------------------------------
# Every suite runs on every test run: aio-pika, aiormq, lapin, kombu, py-amqp,
# rabbitpy, and amqpstorm's functional and management tests. They run side by side
# (--jobs, each suite with a broker of its own, aio-pika in two shards): they mostly
# wait on timers and round trips, so side by side they take about as long as
# aio-pika alone, and lapin's test build overlaps them. Longest first.
SUITES_IN_TEST_COMMAND=${SUITES_IN_TEST_COMMAND-"aio-pika lapin aiormq amqpstorm amqpstorm-management kombu rabbitpy py-amqp"}
export SUITES_JOBS=${SUITES_JOBS:-4}
suites_status=0
if [[ -n "$SUITES_IN_TEST_COMMAND" ]]; then
    log "third-party client suites: $SUITES_IN_TEST_COMMAND"
    # Counts are read back from the summary below: never from an older run's file.
    rm -f "$ROOT/compat-tests/.cache/suites-summary.json"
    # shellcheck disable=SC2086
    bash scripts/suites.sh $SUITES_IN_TEST_COMMAND || suites_status=$?
fi

# --- Benchmark smoke run -------------------------------------------------------
# The side-by-side bench (compat-tests/bench/compare.sh) in its quick mode: both
# brokers must start and move messages. It reports ratios; it asserts no speed.
bench_status=0
if [[ ${BENCH_IN_TEST_COMMAND:-1} == 1 ]]; then
    log "benchmark smoke run (StableMQ and RabbitMQ side by side, S1 and S2)"
    bash compat-tests/bench/compare.sh --quick --scenarios S1,S2 || bench_status=$?
fi

# --- Operations checks ---------------------------------------------------------
# Whole-product checks from issue 6, each a script of its own that starts what it
# needs (a real Prometheus, a private RabbitMQ 3.10) and stops it by pid:
# - every PromQL query of grafana/ and of the RabbitMQ-Overview panels returns data;
# - docs/migrating-from-rabbitmq.md followed literally moves 10,000 messages;
# - RabbitMQ's definitions round-trip through StableMQ, passwords included;
# - amqp091-go's (Debian's Go client) integration tests pass against StableMQ;
# - Debian's rabbitmqadmin 3.10 declares, lists, publishes, gets, purges, exports,
#   imports and deletes through StableMQ's management API;
# - the API docs build with no warning (`cargo doc`, private and broken links),
#   and docs/architecture.md names only files and functions that exist;
# - partitions (issue 24): a 3-node cluster in network namespaces under every
#   nemesis once (scripts/jepsen.sh --short, about 40 s, root): 0 lost, 0
#   unexpected, no confirm through a node without a store quorum, one master per
#   epoch, a cut-off master closes its clients within check_quorum_ms + 1 s;
# - afl finds no crash or hang in the AMQP frame decoder in 20 s (issue 24;
#   all six fuzz targets' corpora are replayed by `cargo test` above).
CHECKS=(
    "prometheus:scripts/prometheus-check.sh"
    "migration:scripts/migration-check.sh"
    "definitions:scripts/definitions-roundtrip.sh"
    "amqp091-go:scripts/amqp091-go-check.sh"
    "rabbitmqadmin:scripts/rabbitmqadmin-check.sh"
    "docs:scripts/doc-check.sh"
    "ui:scripts/ui-check.sh"
    "partitions:scripts/partitions-check.sh"
)
if [[ ${CHECKS_IN_TEST_COMMAND:-1} == 1 ]]; then
    for c in "${CHECKS[@]}"; do
        run_check "${c%%:*}" bash "${c#*:}"
    done
    # Started beside the tests (see above); its result counts here.
    run_check fuzz fuzz_smoke_result
fi

# --- Summary -------------------------------------------------------------------
# Sum cargo's "test result:" lines over all test binaries and doc tests.
read -r passed failed ignored suites < <(
    awk '/^test result:/ {
            for (i = 1; i <= NF; i++) {
                if ($(i) ~ /^passed;?$/)  p += $(i-1)
                if ($(i) ~ /^failed;?$/)  f += $(i-1)
                if ($(i) ~ /^ignored;?$/) g += $(i-1)
            }
            s++
        }
        END { printf "%d %d %d %d\n", p, f, g, s }' "$LOG"
)
echo
log "summary ($((SECONDS - START)) s, $suites test suites)"
if [[ $failed -ne 0 ]]; then
    echo "failed tests:"
    grep -E '^test .+ \.\.\. FAILED$' "$LOG" | sed -e 's/^test /  /' -e 's/ \.\.\. FAILED$//' | sort -u || true
fi
if [[ $status -ne 0 && $failed -eq 0 ]]; then
    # A build error or a test binary that crashed: count it as a failure.
    failed=1
    echo "cargo test exited with status $status:"
    grep -E '^error' "$LOG" | tail -n 20 || true
fi
SUMMARY_JSON="$ROOT/compat-tests/.cache/suites-summary.json"
if [[ -n "$SUITES_IN_TEST_COMMAND" && -f "$SUMMARY_JSON" ]]; then
    read -r sp sf ss < <(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d.get("passed",0), d.get("failed",0), d.get("skipped",0))' "$SUMMARY_JSON" || echo "0 0 0")
    passed=$((passed + sp)); failed=$((failed + sf)); ignored=$((ignored + ss))
fi
echo "total: $passed passed, $failed failed, $ignored skipped"
if [[ $suites_status -ne 0 ]]; then
    echo "third-party suites failed (exit $suites_status); see compat-tests/.cache/logs/"
fi
if [[ $bench_status -ne 0 ]]; then
    echo "benchmark smoke run failed (exit $bench_status)"
fi
if [[ ${#failed_checks[@]} -ne 0 ]]; then
    echo "checks failed: ${failed_checks[*]}"
fi
if [[ $status -ne 0 || $failed -ne 0 || $suites_status -ne 0 || $bench_status -ne 0 || ${#failed_checks[@]} -ne 0 ]]; then
    exit 1
fi
