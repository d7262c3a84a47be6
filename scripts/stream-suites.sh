#!/usr/bin/env bash
# Run the RabbitMQ stream protocol clients' own test suites against a freshly
# started broker (issue 22), as scripts/suites.sh does for the AMQP clients.
#
#   scripts/stream-suites.sh [--against-rabbitmq] [SUITE...]
#
# SUITE is js (rabbitmq-stream-js-client's mocha tests) or rstream (rstream's
# pytest tests); default: both. Each suite gets a broker of its own: a fresh
# StableMQ (target/release/stablemq, or STABLEMQ_BIN) on free 127.0.0.1 ports
# with a fresh data dir, or with --against-rabbitmq a fresh RabbitMQ 3.10
# (scripts/rabbitmq-node.sh start --stream, with the rabbitmq_stream_management
# plugin the js tests query). It is stopped by pid afterwards, also on failure.
#
# Where the tests come from (never committed here):
#   js       the npm package rabbitmq-stream-js-client, at the version
#            compat-tests/js/stream/package-lock.json pins, fetched with
#            `npm pack` (it ships its test/ and src/); what its tests import
#            (mocha, tsx, chai, amqplib, got, ...) is installed with `npm ci`
#            from compat-tests/js/stream-suite/package-lock.json.
#   rstream  rstream's sdist on PyPI has no tests, so they come from a source
#            tree of rstream given in STREAM_SUITES_RSTREAM_SRC (a checkout of
#            its repository: its tests/ directory is copied); the client run is
#            the pinned rstream 1.1.1 sdist from PyPI, with those tests beside
#            it. Without STREAM_SUITES_RSTREAM_SRC the suite is reported as
#            not run (exit status unaffected). Its Python dependencies are
#            installed into compat-tests/.cache/stream-venv from
#            compat-tests/suites/stream-requirements.txt.
#
# How they are pointed at the broker (their own CI runs a docker RabbitMQ on
# localhost's default ports): js by its environment variables
# (RABBIT_MQ_TEST_NODES, RABBIT_MQ_MANAGEMENT_PORT, RABBITMQ_USER, ...) and
# compat-tests/js/stream-suite/hooks.js (its AMQP helper dials port 5672:
# amqplib's connect is pointed at the broker's port instead); rstream by its
# conftest's --rmq-host/--rmq-port and compat-tests/suites/stream_fixtures.py
# (the tests that name port 5552 or the management port 15672).
#
# RabbitMQ 3.10 has no exchange command versions (0x1b) and closes the
# connection on it; the js client sends it on every connection and dies on
# that close, so against RabbitMQ the js suite runs with it patched out
# (hooks.js, STABLEMQ_JS_NO_COMMAND_VERSIONS=1; without it only its 25 unit
# tests pass there). Against StableMQ it runs as published.
#
# Tests listed in compat-tests/suites/deselected.txt (suites "stream-js" and
# "rstream") are not run, each with its reason there. Prints per-suite
# counts, writes compat-tests/.cache/stream-suites-summary.json
# (-rabbitmq.json for the baseline), keeps logs under
# compat-tests/.cache/logs/, and exits non-zero if a test that is not
# deselected failed.
#
# Environment: STABLEMQ_BIN, STREAM_SUITES_RSTREAM_SRC, STREAM_SUITES_TEST_TIMEOUT
# (seconds per test, default 60), STREAM_SUITES_GREP (a mocha --grep for the
# js suite, while debugging), STREAM_SUITES_K (a pytest -k for rstream).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
# shellcheck source=scripts/lib/common.sh
. "$ROOT/scripts/lib/common.sh"
START=$SECONDS

SUITES_DIR="$ROOT/compat-tests/suites"
JS_DIR="$ROOT/compat-tests/js/stream-suite"
CACHE="$ROOT/compat-tests/.cache"
DESELECT="$SUITES_DIR/deselected.txt"
CTL="$SUITES_DIR/suitectl.py"
TEST_TIMEOUT="${STREAM_SUITES_TEST_TIMEOUT:-60}"
RSTREAM_VERSION=1.1.1
JS_VERSION=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["packages"]["node_modules/rabbitmq-stream-js-client"]["version"])' \
    "$ROOT/compat-tests/js/stream/package-lock.json")
ALL_SUITES=(js rstream)
# The suite's name in deselected.txt and the summary.
declare -A NAME=([js]=stream-js [rstream]=rstream)

log() { printf '==> %s\n' "$*"; }
die() { printf 'error: %s\n' "$*" >&2; exit 2; }
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'; }

BROKER=stablemq
SUITES=()
for arg in "$@"; do
    case $arg in
        --against-rabbitmq) BROKER=rabbitmq ;;
        -h|--help) usage; exit 0 ;;
        js|rstream) SUITES+=("$arg") ;;
        *) die "unknown argument $arg (see --help)" ;;
    esac
done
[[ ${#SUITES[@]} -gt 0 ]] || SUITES=("${ALL_SUITES[@]}")

mkdir -p "$CACHE"/{sdists,src,logs,run}
RESULTS="$CACHE/results/stream-$BROKER"
rm -rf "$RESULTS"
mkdir -p "$RESULTS"
SUMMARY="$CACHE/stream-suites-summary.json"
[[ $BROKER == stablemq ]] || SUMMARY="$CACHE/stream-suites-summary-rabbitmq.json"

# --- brokers: every process is stopped by its pid ------------------------------
BROKER_PID="" RUN_DIR="" AMQP_PORT="" STREAM_PORT="" MGMT_PORT=""

stop_broker() {
    if [[ $BROKER == rabbitmq && -n $RUN_DIR ]]; then
        "$ROOT/scripts/rabbitmq-node.sh" stop --dir "$RUN_DIR/rmq" >/dev/null 2>&1 || true
    elif [[ -n $BROKER_PID ]] && kill -0 "$BROKER_PID" 2>/dev/null; then
        kill -TERM "$BROKER_PID" 2>/dev/null || true
        for _ in $(seq 100); do kill -0 "$BROKER_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$BROKER_PID" 2>/dev/null || true
        wait "$BROKER_PID" 2>/dev/null || true
    fi
    [[ -z $RUN_DIR ]] || rm -rf "$RUN_DIR"
    BROKER_PID="" RUN_DIR=""
}
trap stop_broker EXIT
trap 'stop_broker; exit 130' INT
trap 'stop_broker; exit 143' TERM

wait_port() { # port, seconds, pid: until something accepts connections there
    local i
    for ((i = 0; i < $2 * 10; i++)); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        kill -0 "$3" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

start_stablemq() { # suite
    local bin="${STABLEMQ_BIN:-$ROOT/target/release/stablemq}" prom blog="$CACHE/logs/stablemq-stream-$1.broker.log"
    RUN_DIR=$(mktemp -d "$CACHE/run/stablemq-stream-$1.XXXXXX")
    read -r AMQP_PORT STREAM_PORT MGMT_PORT prom < <(free_ports 4)
    "$bin" serve --bind 127.0.0.1 --amqp-port "$AMQP_PORT" --stream-port "$STREAM_PORT" \
        --management-port "$MGMT_PORT" --prometheus-port "$prom" --data-dir "$RUN_DIR/data" >"$blog" 2>&1 &
    BROKER_PID=$!
    wait_port "$STREAM_PORT" 60 "$BROKER_PID" && wait_port "$MGMT_PORT" 60 "$BROKER_PID" ||
        { tail -n 20 "$blog" >&2; return 1; }
}

start_rabbitmq() { # suite
    local out
    RUN_DIR=$(mktemp -d "$CACHE/run/rabbitmq-stream-$1.XXXXXX")
    out=$(RABBITMQ_EXTRA_PLUGINS=rabbitmq_stream_management "$ROOT/scripts/rabbitmq-node.sh" start \
        --dir "$RUN_DIR/rmq" --stream) || return 1
    eval "$out"
    AMQP_PORT=$RABBITMQ_AMQP_PORT STREAM_PORT=$RABBITMQ_STREAM_PORT MGMT_PORT=$RABBITMQ_MANAGEMENT_PORT
}

start_broker() {
    if [[ $BROKER == rabbitmq ]]; then start_rabbitmq "$1"; else start_stablemq "$1"; fi
}

# --- the js client's suite --------------------------------------------------------
fetch_js() { # prints the unpacked package's directory
    local dir="$CACHE/src/rabbitmq-stream-js-client-$JS_VERSION" tgz
    if [[ ! -f $dir/.unpacked ]]; then
        log "fetching rabbitmq-stream-js-client $JS_VERSION with npm pack" >&2
        rm -rf "$dir" && mkdir -p "$dir"
        tgz=$(cd "$CACHE/sdists" && npm pack --silent "rabbitmq-stream-js-client@$JS_VERSION" | tail -n 1)
        tar xzf "$CACHE/sdists/$tgz" -C "$dir" --strip-components=1
        [[ -d $dir/test && -d $dir/src ]] || die "the npm package has no test/ or src/"
        touch "$dir/.unpacked"
    fi
    if [[ ! -f $JS_DIR/node_modules/.package-lock.json ]] ||
        ! cmp -s "$JS_DIR/package-lock.json" "$JS_DIR/node_modules/.stamp" 2>/dev/null; then
        log "npm ci in ${JS_DIR#"$ROOT"/}" >&2
        (cd "$JS_DIR" && npm ci --no-audit --no-fund --loglevel=error >&2)
        cp "$JS_DIR/package-lock.json" "$JS_DIR/node_modules/.stamp"
    fi
    ln -sfn "$JS_DIR/node_modules" "$dir/node_modules"
    echo "$dir"
}

run_js() {
    local dir=$1 grep status=0 no_versions=0 report="$RESULTS/js.mocha.json"
    [[ $BROKER == stablemq ]] || no_versions=1
    grep=$(python3 "$CTL" mocha-grep stream-js "$DESELECT")
    local args=(--require "$JS_DIR/hooks.js" --reporter json --reporter-option "output=$report")
    if [[ -n ${STREAM_SUITES_GREP:-} ]]; then
        args+=(--grep "$STREAM_SUITES_GREP")
    elif [[ -n $grep ]]; then
        args+=(--grep "$grep" --invert)
    fi
    (
        cd "$dir"
        RABBITMQ_USER=guest RABBITMQ_PASSWORD=guest \
            RABBIT_MQ_TEST_NODES="127.0.0.1:$STREAM_PORT" RABBIT_MQ_TEST_ADDRESS_BALANCER="127.0.0.1:$STREAM_PORT" \
            RABBIT_MQ_MANAGEMENT_PORT="$MGMT_PORT" RABBIT_MQ_AMQP_PORT="$AMQP_PORT" \
            STABLEMQ_JS_NO_COMMAND_VERSIONS=$no_versions \
            timeout 900 node_modules/.bin/mocha "${args[@]}" test
    ) >"$CACHE/logs/$BROKER-stream-js.log" 2>&1 || status=$?
    python3 "$CTL" mocha-result stream-js "$report" "$DESELECT" "$RESULTS/stream-js.json" "$status"
}

# --- rstream's suite ------------------------------------------------------------------
SVENV="$CACHE/stream-venv"
setup_stream_venv() {
    local req="$SUITES_DIR/stream-requirements.txt" stamp="$SVENV/.requirements.sha256" want
    [[ -x $SVENV/bin/python ]] || python3 -m venv "$SVENV"
    want=$(sha256sum "$req" | cut -d' ' -f1)
    if [[ ! -f $stamp || $(cat "$stamp") != "$want" ]]; then
        log "installing ${req#"$ROOT"/} into ${SVENV#"$ROOT"/}"
        PIP_DISABLE_PIP_VERSION_CHECK=1 "$SVENV/bin/pip" install --quiet --no-deps -r "$req"
        PIP_DISABLE_PIP_VERSION_CHECK=1 "$SVENV/bin/pip" check
        echo "$want" >"$stamp"
    fi
}

fetch_rstream() { # prints the directory with the sdist's client and the source tree's tests
    local dir="$CACHE/src/rstream-$RSTREAM_VERSION-suite" tarball
    tarball="$CACHE/sdists/rstream-$RSTREAM_VERSION.tar.gz"
    if [[ ! -f $tarball ]]; then
        log "downloading the rstream $RSTREAM_VERSION sdist" >&2
        PIP_DISABLE_PIP_VERSION_CHECK=1 "$SVENV/bin/pip" download --quiet --no-binary :all: --no-deps \
            -d "$CACHE/sdists" "rstream==$RSTREAM_VERSION" >&2
    fi
    rm -rf "$dir" && mkdir -p "$dir"
    tar xzf "$tarball" -C "$dir" --strip-components=1
    cp -r "$STREAM_SUITES_RSTREAM_SRC/tests" "$dir/tests"
    echo "$dir"
}

run_rstream() {
    local dir=$1 status=0 kargs=()
    [[ -z ${STREAM_SUITES_K:-} ]] || kargs=(-k "$STREAM_SUITES_K")
    (
        cd "$dir"
        PYTHONPATH="$SUITES_DIR" STABLEMQ_SUITE=rstream STABLEMQ_DESELECT_FILE="$DESELECT" \
            STABLEMQ_RESULT_FILE="$RESULTS/rstream.json" STABLEMQ_SHARD="" STABLEMQ_TLS_KEYWORDS="" \
            STABLEMQ_STREAM_PORT="$STREAM_PORT" STABLEMQ_MANAGEMENT_PORT="$MGMT_PORT" \
            timeout 1200 "$SVENV/bin/python" -m pytest -p stablemq_fixtures -p stream_fixtures \
            -p no:cacheprovider -q -rfE --disable-warnings --timeout "$TEST_TIMEOUT" \
            --rmq-host 127.0.0.1 --rmq-port "$STREAM_PORT" ${kargs[@]+"${kargs[@]}"} tests
    ) >"$CACHE/logs/$BROKER-rstream.log" 2>&1 || status=$?
    tail -n 3 "$CACHE/logs/$BROKER-rstream.log"
}

# --- main ----------------------------------------------------------------------------
if [[ $BROKER == rabbitmq ]]; then
    ensure_rabbitmq || die "RabbitMQ is not installed and could not be installed"
elif [[ -z ${STABLEMQ_BIN:-} && ! -x $ROOT/target/release/stablemq ]]; then
    log "building target/release/stablemq"
    cargo build --release --bin stablemq
fi
command -v node >/dev/null && command -v npm >/dev/null || apt_install nodejs npm || die "node and npm are needed"

RUN=()
for suite in "${SUITES[@]}"; do
    t0=$SECONDS
    if [[ $suite == rstream ]]; then
        if [[ -z ${STREAM_SUITES_RSTREAM_SRC:-} ]]; then
            log "rstream: not run (its sdist has no tests; set STREAM_SUITES_RSTREAM_SRC to a checkout of rstream)"
            continue
        fi
        [[ -d $STREAM_SUITES_RSTREAM_SRC/tests ]] || die "$STREAM_SUITES_RSTREAM_SRC has no tests/"
        setup_stream_venv
        dir=$(fetch_rstream)
    else
        dir=$(fetch_js)
    fi
    log "${NAME[$suite]} against $BROKER"
    if ! start_broker "$suite"; then
        echo "{\"suite\": \"${NAME[$suite]}\", \"passed\": 0, \"failed\": 1, \"skipped\": 0, \"deselected\": 0, \"failures\": [{\"id\": \"<broker>\", \"error\": \"the broker did not start\"}]}" \
            >"$RESULTS/${NAME[$suite]}.json"
    elif [[ $suite == js ]]; then
        run_js "$dir"
    else
        run_rstream "$dir"
    fi
    died=false
    [[ $BROKER == rabbitmq || -z $BROKER_PID ]] || kill -0 "$BROKER_PID" 2>/dev/null || died=true
    stop_broker
    ver=$JS_VERSION
    [[ $suite == js ]] || ver=$RSTREAM_VERSION
    printf '{"version": "%s", "wall_seconds": %d, "broker_died": %s}\n' "$ver" "$((SECONDS - t0))" "$died" \
        >"$RESULTS/${NAME[$suite]}.meta.json"
    RUN+=("${NAME[$suite]}")
done

[[ ${#RUN[@]} -gt 0 ]] || { log "no suite ran"; exit 0; }
python3 "$CTL" summarize "$RESULTS" "$BROKER" "$SUMMARY" "$((SECONDS - START))" "${RUN[@]}"
