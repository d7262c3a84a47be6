#!/usr/bin/env bash
# Run third-party AMQP client test suites against a freshly started broker.
#
#   scripts/suites.sh [--against-rabbitmq] [--jobs=N] [SUITE...]
#
# SUITE is any of: aio-pika aiormq lapin kombu py-amqp rabbitpy amqpstorm
# amqpstorm-management (default: all, in that order; commas work too). Each suite
# gets a broker of its own: a fresh StableMQ (target/release/stablemq; built with
# `cargo build --release` only if it is missing) with a fresh data dir on free
# 127.0.0.1 ports, or with --against-rabbitmq a fresh Debian RabbitMQ 3.10 node
# (baseline comparison; the package is installed with apt-get if missing; with the
# management plugin for the amqpstorm suites). The broker is stopped by pid after
# the suite, also on failure or Ctrl-C.
#
# --jobs=N runs up to N suites at once (each still with its own broker), and
# aio-pika then in two shards with a broker each; see "parallel runs" below.
#
# Everything is pinned and fetched by this script: the suites' sdists from PyPI
# (pip download --no-binary), lapin's crate source from crates.io, and the Python
# test dependencies (compat-tests/suites/requirements.txt) into a virtualenv at
# compat-tests/.cache/venv. Tests listed in compat-tests/suites/deselected.txt are
# not run (each with its reason there).
#
# TLS: the suites that have TLS tests (aio-pika, aiormq, py-amqp, amqpstorm) get a
# broker with an AMQPS listener too, on a free port, with certificates that this
# script makes for the run with the openssl CLI (a CA, a server and a client
# certificate, in the run's temporary directory), configured as the suite's authors
# configure their RabbitMQ (verify_peer; see TLS_SUITES); the suites are told where
# the port and the files are (see run_pytest_suite and stablemq_fixtures.py).
#
# Prints per-suite counts and the total wall time, writes
# compat-tests/.cache/suites-summary.json (with --against-rabbitmq:
# suites-summary-rabbitmq.json), keeps each suite's log under
# compat-tests/.cache/logs/, and exits non-zero if any test that is not deselected
# failed.
#
# Environment: SUITES_TEST_TIMEOUT (seconds a single test may take, default 120),
# STABLEMQ_BIN (broker binary, default target/release/stablemq), SUITES_K (a pytest
# -k expression ANDed with the suite's own, to run fewer tests while debugging, e.g.
# SUITES_K=dead_letter scripts/suites.sh aio-pika), SUITES_PYTEST_ARGS (more pytest
# arguments, e.g. "-x"), SUITES_JOBS (the default of --jobs, 1),
# SUITES_AIO_PIKA_SHARDS (aio-pika's shards with --jobs above 1, default 2).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
# shellcheck source=scripts/lib/common.sh
. "$ROOT/scripts/lib/common.sh"
START=$SECONDS

SUITES_DIR="$ROOT/compat-tests/suites"
CACHE="$ROOT/compat-tests/.cache"
DESELECT="$SUITES_DIR/deselected.txt"
REQUIREMENTS="$SUITES_DIR/requirements.txt"
CTL="$SUITES_DIR/suitectl.py"
TEST_TIMEOUT="${SUITES_TEST_TIMEOUT:-120}"

ALL_SUITES=(aio-pika aiormq lapin kombu py-amqp rabbitpy amqpstorm amqpstorm-management)
# suite -> PyPI distribution and version (lapin: crates.io)
declare -A DIST=([aio-pika]=aio-pika [aiormq]=aiormq [kombu]=kombu [py-amqp]=amqp [rabbitpy]=rabbitpy [lapin]=lapin
    [amqpstorm]=amqpstorm [amqpstorm-management]=amqpstorm)
declare -A VERSION=([aio-pika]=10.2.1 [aiormq]=7.2.4 [kombu]=5.7.0 [py-amqp]=5.4.2 [rabbitpy]=3.0.2 [lapin]=4.12.3
    [amqpstorm]=3.1.4 [amqpstorm-management]=3.1.4)

log() { printf '==> %s\n' "$*"; }
die() { printf 'error: %s\n' "$*" >&2; exit 2; }

usage() {
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'
}

# --- arguments ----------------------------------------------------------------
BROKER=stablemq
SUITES=()
JOBS=${SUITES_JOBS:-1}
for arg in "$@"; do
    case "$arg" in
        --against-rabbitmq) BROKER=rabbitmq ;;
        --jobs=*) JOBS=${arg#--jobs=} ;;
        -h|--help) usage; exit 0 ;;
        -*) die "unknown option $arg (see --help)" ;;
        *)
            IFS=',' read -r -a names <<<"$arg"
            for n in "${names[@]}"; do
                [[ -n "${DIST[$n]:-}" ]] || die "unknown suite '$n' (one of: ${ALL_SUITES[*]})"
                SUITES+=("$n")
            done
            ;;
    esac
done
[[ ${#SUITES[@]} -gt 0 ]] || SUITES=("${ALL_SUITES[@]}")
[[ $JOBS =~ ^[1-9][0-9]*$ ]] || die "--jobs wants a positive number, not '$JOBS'"

mkdir -p "$CACHE"/{sdists,src,logs,run}
RESULTS="$CACHE/results/$BROKER"
rm -rf "$RESULTS"
mkdir -p "$RESULTS"
if [[ $BROKER == rabbitmq ]]; then
    SUMMARY="$CACHE/suites-summary-rabbitmq.json"
else
    SUMMARY="$CACHE/suites-summary.json"
fi

# --- cleanup: every process we start is stopped by its pid ----------------------
BROKER_PID=""
BROKER_BEAM_PIDFILE=""
EPMD_PID=""
RUN_DIR=""

stop_pid() { # pid, seconds to wait after SIGTERM before SIGKILL
    local pid=$1 wait=${2:-10} i
    [[ -n "$pid" ]] || return 0
    kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < wait * 10; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        # reap it if it is our child, so that kill -0 stops answering
        if ! ps -p "$pid" -o stat= 2>/dev/null | grep -qv Z; then break; fi
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

stop_broker() {
    local beam=""
    if [[ -n "$BROKER_BEAM_PIDFILE" && -s "$BROKER_BEAM_PIDFILE" ]]; then
        beam=$(cat "$BROKER_BEAM_PIDFILE")
    fi
    stop_pid "$BROKER_PID" 30
    # RabbitMQ: the start script forwards SIGTERM to the Erlang VM; make sure it is gone.
    if [[ -n "$beam" ]] && kill -0 "$beam" 2>/dev/null; then
        kill -KILL "$beam" 2>/dev/null || true
    fi
    stop_pid "$EPMD_PID" 5
    BROKER_PID="" BROKER_BEAM_PIDFILE="" EPMD_PID=""
    if [[ -n "$RUN_DIR" ]]; then
        rm -rf "$RUN_DIR"
        RUN_DIR=""
    fi
}
trap stop_broker EXIT
trap 'stop_broker; exit 130' INT
trap 'stop_broker; exit 143' TERM

# --- Python virtualenv with the pinned test dependencies -------------------------
VENV="$CACHE/venv"
PY="$VENV/bin/python"
setup_venv() {
    local host
    host="$(command -v python3.11 || command -v python3 || true)"
    [[ -n "$host" ]] || die "python3 (3.11 or newer) is needed"
    "$host" -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
        die "$host is older than Python 3.11 (aio-pika 10 needs 3.11)"
    if [[ ! -x "$PY" ]]; then
        log "creating $VENV with $host"
        if ! "$host" -m venv "$VENV"; then
            # Some distributions ship Python without ensurepip; virtualenv does not need it.
            rm -rf "$VENV"
            "$host" -m pip install --quiet --user virtualenv
            "$host" -m virtualenv --quiet "$VENV"
        fi
    fi
    local stamp="$VENV/.requirements.sha256" want
    want="$(sha256sum "$REQUIREMENTS" | cut -d' ' -f1)"
    if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
        log "installing $REQUIREMENTS into $VENV"
        PIP_DISABLE_PIP_VERSION_CHECK=1 "$PY" -m pip install --quiet --no-deps -r "$REQUIREMENTS"
        PIP_DISABLE_PIP_VERSION_CHECK=1 "$PY" -m pip check
        echo "$want" >"$stamp"
    fi
}

# --- sources ------------------------------------------------------------------------
# Prints the directory of the unpacked sdist of a suite.
fetch_sdist() {
    local suite=$1 dist=${DIST[$1]} ver=${VERSION[$1]} tarball top
    tarball=$(find "$CACHE/sdists" -maxdepth 1 \( -iname "$(echo "$dist" | tr - _)-$ver.tar.gz" -o -iname "$dist-$ver.tar.gz" \) | head -n 1)
    if [[ -z "$tarball" ]]; then
        log "downloading the $dist $ver sdist" >&2
        PIP_DISABLE_PIP_VERSION_CHECK=1 "$PY" -m pip download --quiet --no-binary "$dist" --no-deps \
            -d "$CACHE/sdists" "$dist==$ver" >&2
        tarball=$(find "$CACHE/sdists" -maxdepth 1 \( -iname "$(echo "$dist" | tr - _)-$ver.tar.gz" -o -iname "$dist-$ver.tar.gz" \) | head -n 1)
        [[ -n "$tarball" ]] || die "pip download did not leave a $dist-$ver sdist in $CACHE/sdists"
    fi
    top=$(tar tzf "$tarball" | head -n 1 | cut -d/ -f1)
    if [[ ! -f "$CACHE/src/$top/.unpacked" ]]; then
        rm -rf "${CACHE:?}/src/$top"
        tar xzf "$tarball" -C "$CACHE/src"
        touch "$CACHE/src/$top/.unpacked"
    fi
    echo "$CACHE/src/$top"
}

# Prints the directory of a private copy of lapin's crate source.
fetch_lapin() {
    local ver=${VERSION[lapin]} dest="$CACHE/src/lapin-${VERSION[lapin]}" home="${CARGO_HOME:-$HOME/.cargo}" src crate
    if [[ -f "$dest/.unpacked" ]]; then
        echo "$dest"
        return
    fi
    src=$(ls -d "$home"/registry/src/*/"lapin-$ver" 2>/dev/null | head -n 1 || true)
    crate=$(ls "$home"/registry/cache/*/"lapin-$ver.crate" 2>/dev/null | head -n 1 || true)
    if [[ -z "$src" && -z "$crate" ]]; then
        log "fetching lapin $ver from crates.io" >&2
        local probe="$CACHE/lapin-fetch"
        rm -rf "$probe"
        mkdir -p "$probe/src"
        printf '[package]\nname = "lapin-fetch"\nversion = "0.0.0"\nedition = "2021"\npublish = false\n\n[dependencies]\nlapin = "=%s"\n\n[workspace]\n' "$ver" >"$probe/Cargo.toml"
        : >"$probe/src/lib.rs"
        cargo fetch --manifest-path "$probe/Cargo.toml" >&2
        rm -rf "$probe"
        src=$(ls -d "$home"/registry/src/*/"lapin-$ver" 2>/dev/null | head -n 1 || true)
        crate=$(ls "$home"/registry/cache/*/"lapin-$ver.crate" 2>/dev/null | head -n 1 || true)
    fi
    rm -rf "$dest"
    if [[ -n "$crate" ]]; then
        tar xzf "$crate" -C "$CACHE/src"
    elif [[ -n "$src" ]]; then
        cp -r "$src" "$dest"
    else
        die "could not find lapin $ver in cargo's registry after cargo fetch"
    fi
    # The copy lives inside this repository's workspace: make it a workspace of its own.
    grep -q '^\[workspace\]' "$dest/Cargo.toml" || printf '\n[workspace]\n' >>"$dest/Cargo.toml"
    touch "$dest/.unpacked"
    echo "$dest"
}

# --- brokers ------------------------------------------------------------------------
AMQP_PORT=""
# The management HTTP API's port (StableMQ always serves it; RabbitMQ only for the
# suites that need it, see needs_management).
MGMT_PORT=""
# The AMQPS port and the directory of the run's certificates, for the suites in
# TLS_SUITES (empty for the others).
AMQPS_PORT=""
TLS_DIR=""

# amqpstorm's tests clean up (and its management tests work) over the management
# HTTP API; RabbitMQ then needs its management plugin, which slows its boot.
needs_management() { [[ $1 == amqpstorm* ]]; }

# The suites with TLS tests -> "KEY:PEER", the way their authors' RabbitMQ serves
# TLS (always verify_peer: a client certificate, when sent, must chain to the CA):
#   KEY   the key type of the certificates (amqpstorm's docker/files/generate-certs
#         makes secp384r1 EC keys; the others ship or expect RSA ones)
#   PEER  "required": fail_if_no_peer_cert = true (py-amqp's Dockerfile, amqpstorm's
#         docker/rabbitmq.conf); "optional": false (aiormq's tests/certs/rabbitmq.conf,
#         whose image aio-pika's conftest runs), for the tests that send none
declare -A TLS_SUITES=([aio-pika]=rsa:optional [aiormq]=rsa:optional [py-amqp]=rsa:required
    [amqpstorm]=ec:required)
SUITE_TLS="" # the running suite's entry of TLS_SUITES (run_suite sets it)
# The words that mark a suite's TLS tests (the -k words that left them out before
# StableMQ had AMQPS); the plugin counts the tests whose keywords contain one, for
# the summary's TLS column.
declare -A TLS_KEYWORDS=([aio-pika]="amqps ssl" [aiormq]="amqps ssl" [py-amqp]=tls [amqpstorm]=ssl)

tls_key() { # out file, rsa|ec (PKCS#8 PEM)
    case $2 in
        rsa) openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$1" ;;
        ec) openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:secp384r1 -out "$1" ;;
    esac 2>/dev/null
}

tls_sign() { # dir, name, subject, key type, extensions: <name>.pem signed by the CA
    local dir=$1 name=$2 subj=$3 type=$4 ext=$5 usage=digitalSignature,keyEncipherment
    [[ $type == rsa ]] || usage=digitalSignature
    tls_key "$dir/$name.key" "$type"
    openssl req -new -key "$dir/$name.key" -subj "$subj" -out "$dir/$name.csr" 2>/dev/null
    printf 'basicConstraints = critical, CA:FALSE\nkeyUsage = critical, %s\n%s\nsubjectKeyIdentifier = hash\nauthorityKeyIdentifier = keyid\n' \
        "$usage" "$ext" >"$dir/$name.ext"
    openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" -CAcreateserial \
        -CAserial "$dir/ca.srl" -days 2 -sha256 -extfile "$dir/$name.ext" -out "$dir/$name.pem" 2>/dev/null
    rm -f "$dir/$name.csr" "$dir/$name.ext"
}

# Makes the run's certificates in DIR: ca.pem (a CA of its own), server.pem/.key
# (localhost and 127.0.0.1, serverAuth), client.pem/.key (CN suites-client,
# clientAuth), and the same under the names py-amqp's t/certs uses, including its
# two "broken" files (PEM whose base64 does not decode, as in py-amqp's repository).
make_tls_certs() { # dir, rsa|ec
    local dir=$1 type=$2
    mkdir -p "$dir"
    tls_key "$dir/ca.key" "$type"
    openssl req -x509 -new -key "$dir/ca.key" -subj "/CN=StableMQ suites test CA" -days 2 -sha256 \
        -addext "basicConstraints = critical, CA:TRUE" -addext "keyUsage = critical, keyCertSign, cRLSign" \
        -out "$dir/ca.pem" 2>/dev/null
    tls_sign "$dir" server "/CN=localhost/O=server" "$type" \
        $'extendedKeyUsage = serverAuth\nsubjectAltName = DNS:localhost, IP:127.0.0.1'
    tls_sign "$dir" client "/CN=suites-client/O=client" "$type" 'extendedKeyUsage = clientAuth'
    cp "$dir/ca.pem" "$dir/ca_certificate.pem"
    cp "$dir/client.pem" "$dir/client_certificate.pem"
    cp "$dir/client.key" "$dir/client_key.pem"
    sed '2s/^....../Broken/' "$dir/client.pem" >"$dir/client_certificate_broken.pem"
    sed '2s/^....../Broken/' "$dir/client.key" >"$dir/client_key_broken.pem"
    [[ -s $dir/server.pem && -s $dir/client.pem ]]
}

# For a suite in TLS_SUITES: the certificates and a free AMQPS port.
prepare_tls() { # run dir, free port
    AMQPS_PORT="" TLS_DIR=""
    [[ -n $SUITE_TLS ]] || return 0
    TLS_DIR="$1/tls"
    make_tls_certs "$TLS_DIR" "${SUITE_TLS%%:*}" || { echo "openssl could not make the certificates" >&2; return 1; }
    AMQPS_PORT=$2
}

wait_amqps() { # pid
    [[ -z $AMQPS_PORT ]] ||
        "$PY" "$CTL" wait-amqps "$AMQPS_PORT" 60 "$1" "$TLS_DIR/ca.pem" "$TLS_DIR/client.pem" "$TLS_DIR/client.key"
}

start_stablemq() {
    local suite=$1 bin="${STABLEMQ_BIN:-$ROOT/target/release/stablemq}" prom tls_port tls_args=()
    RUN_DIR=$(mktemp -d "$CACHE/run/stablemq-$suite.XXXXXX")
    read -r AMQP_PORT prom MGMT_PORT tls_port < <("$PY" "$CTL" free-ports 4)
    prepare_tls "$RUN_DIR" "$tls_port" || return 1
    if [[ -n $AMQPS_PORT ]]; then
        tls_args=(--amqps-port "$AMQPS_PORT" --tls-cert-file "$TLS_DIR/server.pem"
            --tls-key-file "$TLS_DIR/server.key" --tls-ca-file "$TLS_DIR/ca.pem" --tls-verify-peer)
        [[ ${SUITE_TLS#*:} != required ]] || tls_args+=(--tls-fail-if-no-peer-cert)
    fi
    "$bin" serve --bind 127.0.0.1 --stream-port 0 --amqp-port "$AMQP_PORT" --prometheus-port "$prom" \
        --management-port "$MGMT_PORT" ${tls_args[@]+"${tls_args[@]}"} \
        --data-dir "$RUN_DIR/data" >"$CACHE/logs/stablemq-$suite.broker.log" 2>&1 &
    BROKER_PID=$!
    { "$PY" "$CTL" wait-amqp "$AMQP_PORT" 60 "$BROKER_PID" && wait_amqps "$BROKER_PID"; } ||
        { tail -n 20 "$CACHE/logs/stablemq-$suite.broker.log" >&2; return 1; }
}

start_rabbitmq() {
    local suite=$1 dist epmd_port tls_port
    RUN_DIR=$(mktemp -d "$CACHE/run/rabbitmq-$suite.XXXXXX")
    read -r AMQP_PORT dist epmd_port MGMT_PORT tls_port < <("$PY" "$CTL" free-ports 5)
    prepare_tls "$RUN_DIR" "$tls_port" || return 1
    mkdir -p "$RUN_DIR"/{home,mnesia,log}
    : >"$RUN_DIR/rabbitmq-env.conf"
    printf 'loopback_users.guest = true\nlog.console = false\nlog.file.level = info\n' >"$RUN_DIR/rabbitmq.conf"
    if [[ -n $AMQPS_PORT ]]; then
        local fail=false
        [[ ${SUITE_TLS#*:} != required ]] || fail=true
        printf '%s\n' "listeners.ssl.suites = 127.0.0.1:$AMQPS_PORT" \
            "ssl_options.cacertfile = $TLS_DIR/ca.pem" "ssl_options.certfile = $TLS_DIR/server.pem" \
            "ssl_options.keyfile = $TLS_DIR/server.key" "ssl_options.verify = verify_peer" \
            "ssl_options.fail_if_no_peer_cert = $fail" >>"$RUN_DIR/rabbitmq.conf"
    fi
    if needs_management "$suite"; then
        echo '[rabbitmq_management].' >"$RUN_DIR/enabled_plugins"
        printf 'management.tcp.ip = 127.0.0.1\nmanagement.tcp.port = %s\n' "$MGMT_PORT" >>"$RUN_DIR/rabbitmq.conf"
    else
        echo '[].' >"$RUN_DIR/enabled_plugins"
        MGMT_PORT=""
    fi
    local rlog="$CACHE/logs/rabbitmq-$suite.broker.log"
    # Our own epmd on loopback, on a port of its own, stopped by pid afterwards.
    epmd -address 127.0.0.1 -port "$epmd_port" >"$RUN_DIR/epmd.log" 2>&1 &
    EPMD_PID=$!
    BROKER_BEAM_PIDFILE="$RUN_DIR/rabbitmq.pid"
    env HOME="$RUN_DIR/home" \
        ERL_EPMD_ADDRESS=127.0.0.1 ERL_EPMD_PORT="$epmd_port" \
        RABBITMQ_NODENAME="suites-$suite-$$@localhost" \
        RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_NODE_PORT="$AMQP_PORT" \
        RABBITMQ_DIST_PORT="$dist" \
        RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}" \
        RABBITMQ_CONF_ENV_FILE="$RUN_DIR/rabbitmq-env.conf" \
        RABBITMQ_CONFIG_FILE="$RUN_DIR/rabbitmq.conf" \
        RABBITMQ_ADVANCED_CONFIG_FILE="$RUN_DIR/advanced.config" \
        RABBITMQ_ENABLED_PLUGINS_FILE="$RUN_DIR/enabled_plugins" \
        RABBITMQ_PLUGINS_EXPAND_DIR="$RUN_DIR/plugins-expand" \
        RABBITMQ_MNESIA_BASE="$RUN_DIR/mnesia" \
        RABBITMQ_LOG_BASE="$RUN_DIR/log" \
        RABBITMQ_PID_FILE="$BROKER_BEAM_PIDFILE" \
        "$RABBITMQ_SERVER" >"$rlog" 2>&1 &
    BROKER_PID=$!
    { "$PY" "$CTL" wait-amqp "$AMQP_PORT" 180 "$BROKER_PID" && wait_amqps "$BROKER_PID"; } ||
        { tail -n 20 "$rlog" "$RUN_DIR"/log/*.log >&2 || true; return 1; }
    if [[ -n $MGMT_PORT ]]; then
        # The management listener comes up after the AMQP one.
        "$PY" "$CTL" wait-http "$MGMT_PORT" 60 "$BROKER_PID" ||
            { tail -n 20 "$rlog" "$RUN_DIR"/log/*.log >&2 || true; return 1; }
    fi
}

start_broker() {
    if [[ $BROKER == rabbitmq ]]; then start_rabbitmq "$1"; else start_stablemq "$1"; fi
}

broker_alive() {
    [[ -n "$BROKER_PID" ]] && kill -0 "$BROKER_PID" 2>/dev/null &&
        ps -p "$BROKER_PID" -o stat= 2>/dev/null | grep -qv Z
}

# --- suites -------------------------------------------------------------------------
# lapin's crate tests are built the way `cargo test` builds them in lapin's own
# repository (the dev profile, with debug assertions), minus debug info, and with
# the one TLS-free feature set the workspace uses too (tokio): lapin has no TLS
# tests (every test dials AMQP_ADDR, amqp:// by default; its only TLS code is
# examples/client-certificate.rs, an example with empty placeholder certificates). Leaving out the release optimisations and the default rustls backend
# (aws-lc-sys) cuts the build from about 5 CPU minutes to 1.5. The same 16 broker
# tests and 18 unit tests run.
LAPIN_CARGO_ARGS=(--locked --tests --no-default-features --features tokio)
LAPIN_ENV=(CARGO_TARGET_DIR="$CACHE/lapin-target" CARGO_PROFILE_DEV_DEBUG=0)

PYTEST_COMMON=(-p stablemq_fixtures -p no:cacheprovider -q -rfE -o log_cli=false
    --disable-warnings --timeout "$TEST_TIMEOUT")

run_pytest_suite() { # suite, source dir, -k expression or "", pytest args...
    local suite=$1 dir=$2 k=$3
    shift 3
    # TAG and SHARD are run_suite's: the result file is per shard.
    if [[ -n "${SUITES_K:-}" ]]; then
        k="${k:+($k) and }(${SUITES_K})"
    fi
    local kargs=()
    [[ -z "$k" ]] || kargs=(-k "$k")
    (
        cd "$dir"
        export PYTHONPATH="$SUITES_DIR" STABLEMQ_SUITE="$suite" STABLEMQ_DESELECT_FILE="$DESELECT" \
            STABLEMQ_RESULT_FILE="$RESULTS/$TAG.json" STABLEMQ_SHARD="$SHARD" \
            STABLEMQ_TLS_KEYWORDS="${TLS_KEYWORDS[$suite]:-}" AMQP_URL="amqp://guest:guest@127.0.0.1:$AMQP_PORT/" \
            RABBITMQ_HOST=127.0.0.1 RABBITMQ_5672_TCP="$AMQP_PORT" \
            RABBITMQ_URL="amqp://guest:guest@127.0.0.1:$AMQP_PORT/%2f" \
            AMQP_HOST=127.0.0.1 AMQP_USERNAME=guest AMQP_PASSWORD=guest \
            AMQP_URI="amqp://guest:guest@127.0.0.1:$AMQP_PORT/%2F" AMQP_HTTP_URL="http://127.0.0.1:${MGMT_PORT:-1}"
        if [[ -n $AMQPS_PORT ]]; then
            # The AMQPS port: aio-pika's and aiormq's "5671/tcp" (our plugin), py-amqp's
            # RABBITMQ_5671_TCP, amqpstorm's AMQP_SSL_URI (its other SSL tests dial
            # 5671, which the plugin points at this port). amqpstorm verifies the
            # server's name against AMQP_SSL_HOST: the certificate names 127.0.0.1.
            # STABLEMQ_TLS_DIR: the run's certificates (the plugin hands them to
            # aiormq's cert_path; py-amqp's t/certs links there, see run_suite).
            export AMQPS_PORT RABBITMQ_5671_TCP="$AMQPS_PORT" STABLEMQ_TLS_DIR="$TLS_DIR" \
                AMQP_SSL_HOST=127.0.0.1 AMQP_SSL_URI="amqps://guest:guest@127.0.0.1:$AMQPS_PORT/%2F" \
                AMQP_CAFILE="$TLS_DIR/ca.pem" AMQP_CERTFILE="$TLS_DIR/client.pem" AMQP_KEYFILE="$TLS_DIR/client.key"
        fi
        # shellcheck disable=SC2086 # SUITES_PYTEST_ARGS is split on purpose
        "$PY" -m pytest "${PYTEST_COMMON[@]}" ${kargs[@]+"${kargs[@]}"} "$@" ${SUITES_PYTEST_ARGS:-}
    )
}

# TAG names a run's files: the suite, or "<suite>-s<K>" for shard K of a suite that
# runs in shards (see SHARDS). SHARD is "K/N" or empty.
TAG=""
SHARD=""

run_suite() { # suite [shard K/N]
    local suite=$1 dir status=0 t0=$SECONDS log
    SHARD=${2:-}
    TAG=$suite${SHARD:+-s${SHARD%/*}}
    log="$CACHE/logs/$BROKER-$TAG.log"
    log "$suite ${VERSION[$suite]}${SHARD:+ (shard $SHARD)} against $BROKER (log: ${log#"$ROOT"/})"
    if [[ $suite == lapin ]]; then
        dir=$(fetch_lapin)
        # Build the test binaries before the broker starts.
        log "building lapin's tests"
        env "${LAPIN_ENV[@]}" cargo test "${LAPIN_CARGO_ARGS[@]}" --no-run \
            --manifest-path "$dir/Cargo.toml" >"$CACHE/logs/lapin-build.log" 2>&1 ||
            { tail -n 30 "$CACHE/logs/lapin-build.log" >&2; die "building lapin's tests failed"; }
    else
        dir=$(fetch_sdist "$suite")
    fi
    SUITE_TLS=${TLS_SUITES[$suite]:-}
    if ! start_broker "$TAG"; then
        echo "{\"suite\": \"$suite\", \"passed\": 0, \"failed\": 1, \"skipped\": 0, \"deselected\": 0, \"failures\": [{\"id\": \"$TAG::<broker>\", \"error\": \"the broker did not start\"}]}" >"$RESULTS/$TAG.json"
        stop_broker
        return
    fi
    case "$suite" in
        aio-pika)
            run_pytest_suite "$suite" "$dir" "" tests 2>&1 | tee "$log" | grep -v '^\s*$' | tail -n 40 || status=$?
            ;;
        aiormq)
            run_pytest_suite "$suite" "$dir" "" tests 2>&1 | tee "$log" | grep -v '^\s*$' | tail -n 40 || status=$?
            ;;
        kombu)
            run_pytest_suite "$suite" "$dir" "" t/integration/test_py_amqp.py 2>&1 | tee "$log" | tail -n 30 || status=$?
            ;;
        py-amqp)
            # Its TLS tests read the certificates from t/certs/ (relative paths; the
            # sdist has none): that is a link to the run's certificates.
            ln -sfn "$TLS_DIR" "$dir/t/certs"
            run_pytest_suite "$suite" "$dir" "" t/integration/test_rmq.py 2>&1 | tee "$log" | tail -n 30 || status=$?
            rm -f "$dir/t/certs"
            ;;
        rabbitpy)
            run_pytest_suite "$suite" "$dir" "" tests/test_integration.py tests/integration 2>&1 | tee "$log" | tail -n 30 || status=$?
            ;;
        amqpstorm)
            # The functional tests, ssl/ with the run's certificates (AMQP_CAFILE and
            # friends). They clean up over the management API, and test_web_based.py
            # publishes and creates a vhost through it.
            run_pytest_suite "$suite" "$dir" "" amqpstorm/tests/functional \
                --ignore=amqpstorm/tests/functional/management 2>&1 | tee "$log" | tail -n 30 || status=$?
            ;;
        amqpstorm-management)
            # The tests of amqpstorm's management API client.
            run_pytest_suite "$suite" "$dir" "" amqpstorm/tests/functional/management 2>&1 |
                tee "$log" | tail -n 40 || status=$?
            ;;
        lapin)
            local skips=() name
            while read -r name; do
                [[ -n $name ]] && skips+=(--skip "${name#*::}")
            done < <("$PY" "$CTL" deselected lapin "$DESELECT")
            set +e
            AMQP_ADDR="amqp://guest:guest@127.0.0.1:$AMQP_PORT/%2f" \
                timeout 900 env "${LAPIN_ENV[@]}" cargo test "${LAPIN_CARGO_ARGS[@]}" --no-fail-fast --manifest-path "$dir/Cargo.toml" \
                -- ${skips[@]+"${skips[@]}"} ${skips[@]+--exact} >"$log" 2>&1
            status=$?
            set -e
            grep -E '^test result:|FAILED|panicked' "$log" | tail -n 30 || true
            "$PY" "$CTL" cargo-result lapin "$log" "$DESELECT" "$RESULTS/$suite.json" "$status"
            ;;
    esac
    local died=false
    broker_alive || died=true
    stop_broker
    # A failed run shows what the broker warned of (a slow commit, say), so a
    # failure seen once in CI can be read without a rerun.
    if [[ $status != 0 && $BROKER == stablemq ]]; then
        grep -E ' (WARN|ERROR) ' "$CACHE/logs/stablemq-$TAG.broker.log" | tail -n 20 >&2 || true
    fi
    printf '{"version": "%s", "wall_seconds": %d, "broker_died": %s}\n' \
        "${VERSION[$suite]}" "$((SECONDS - t0))" "$died" >"$RESULTS/$TAG.meta.json"
    log "$TAG done in $((SECONDS - t0)) s"
}

# --- parallel runs --------------------------------------------------------------------
# With --jobs=N, up to N jobs run at once, each in a subshell with its own broker (its
# own ports and data dir, as in a sequential run). Most suites spend their time
# waiting on sleeps, timeouts and round trips rather than on the CPU (aio-pika alone
# uses about a third of one core), so on 2 cores several suites side by side take
# little longer than the longest alone, and lapin's test build overlaps the Python
# suites. A suite listed in SHARDS runs as that many jobs, each with its own broker
# and every Nth test (the plugin's STABLEMQ_SHARD); the summary adds the shards up.
# Jobs start in the order the suites are given: put the longest first. A job's
# console output is printed when it finishes.
declare -A SHARDS=([aio-pika]=${SUITES_AIO_PIKA_SHARDS:-2})
declare -A JOB_TAG=()

stop_jobs() {
    local pid
    for pid in "${!JOB_TAG[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    for pid in "${!JOB_TAG[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    JOB_TAG=()
}

reap_job() {
    local pid="" tag
    wait -n -p pid "${!JOB_TAG[@]}" || true
    [[ -n $pid && -n ${JOB_TAG[$pid]:-} ]] || return 0
    tag=${JOB_TAG[$pid]}
    unset "JOB_TAG[$pid]"
    cat "$CACHE/logs/$BROKER-$tag.console"
}

start_job() { # suite [shard K/N]
    local tag=$1${2:+-s${2%/*}}
    while [[ ${#JOB_TAG[@]} -ge $JOBS ]]; do reap_job; done
    (
        trap stop_broker EXIT
        trap 'exit 143' TERM
        run_suite "$@"
    ) >"$CACHE/logs/$BROKER-$tag.console" 2>&1 &
    JOB_TAG[$!]=$tag
    log "started $tag (console: compat-tests/.cache/logs/$BROKER-$tag.console)"
}

run_parallel() {
    local suite n k
    trap 'stop_jobs; stop_broker' EXIT
    trap 'stop_jobs; stop_broker; exit 130' INT
    trap 'stop_jobs; stop_broker; exit 143' TERM
    log "running ${#SUITES[@]} suites, up to $JOBS jobs at a time"
    for suite in "${SUITES[@]}"; do
        n=${SHARDS[$suite]:-1}
        if [[ $n -gt 1 ]]; then
            for ((k = 1; k <= n; k++)); do start_job "$suite" "$k/$n"; done
        else
            start_job "$suite"
        fi
    done
    while [[ ${#JOB_TAG[@]} -gt 0 ]]; do reap_job; done
}

# --- main -------------------------------------------------------------------------------
setup_venv
for suite in "${SUITES[@]}"; do
    if [[ -n ${TLS_SUITES[$suite]:-} ]] && ! command -v openssl >/dev/null; then
        # The TLS suites' certificates are made with the openssl CLI.
        apt_install openssl || die "openssl is missing and could not be installed"
        break
    fi
done
if [[ $BROKER == rabbitmq ]]; then
    ensure_rabbitmq || die "RabbitMQ is not installed and could not be installed"
    command -v epmd >/dev/null || die "epmd (Erlang) is missing"
    log "broker: RabbitMQ $(dpkg-query -W -f '${Version}' rabbitmq-server 2>/dev/null || echo '?') (fresh node per suite)"
else
    if [[ -z "${STABLEMQ_BIN:-}" && ! -x "$ROOT/target/release/stablemq" ]]; then
        log "building target/release/stablemq"
        cargo build --release --bin stablemq
    fi
    log "broker: ${STABLEMQ_BIN:-target/release/stablemq} (fresh data dir per suite)"
fi

# Sources first, so that parallel suites never unpack the same sdist at once.
for suite in "${SUITES[@]}"; do
    # (in $(...), as in run_suite: `tar | head` ends tar with SIGPIPE)
    if [[ $suite == lapin ]]; then _src=$(fetch_lapin); else _src=$(fetch_sdist "$suite"); fi
done

if [[ $JOBS -eq 1 ]]; then
    for suite in "${SUITES[@]}"; do
        run_suite "$suite"
    done
else
    run_parallel
fi

"$PY" "$CTL" summarize "$RESULTS" "$BROKER" "$SUMMARY" "$((SECONDS - START))" "${SUITES[@]}"
