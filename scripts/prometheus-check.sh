#!/usr/bin/env bash
# Prometheus acceptance test (issue 6): a real Prometheus (Debian's package,
# installed here if missing) scrapes a freshly started StableMQ under light
# load; then every PromQL expression of grafana/dashboards/*.json and of the
# RabbitMQ-Overview dashboard (10991) panels we claim to support
# (grafana/rabbitmq-overview/10991-expressions.tsv) is evaluated through
# Prometheus's HTTP API, and each must return at least one series.
#
# Everything runs on 127.0.0.1 on free ports with its own directories; every
# process started here is killed by pid when the script ends, also on failure.
# Usage: scripts/prometheus-check.sh   (run as root on a fresh machine: it
# installs the prometheus package with apt-get). Takes about 15 s (the load
# runs up to 90 s but is killed as soon as the checks are done).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
# shellcheck source=scripts/lib/common.sh
. "$ROOT/scripts/lib/common.sh"
BIN=${STABLEMQ_BIN:-$ROOT/target/release/stablemq}

if [ ! -x "$BIN" ]; then
    cargo build --release --bin stablemq
fi
if ! command -v prometheus >/dev/null 2>&1; then
    echo "== installing Debian's prometheus package"
    apt_install prometheus || exit 1
fi
PROMETHEUS=$(command -v prometheus)

WORK=$(mktemp -d /tmp/stablemq-promcheck.XXXXXX)
PIDS=()
cleanup() {
    local rc=$?
    stop_pids "${PIDS[@]}"
    if [ "$rc" -ne 0 ]; then
        for log in "$WORK"/*.log; do
            [ -f "$log" ] || continue
            echo "== last lines of $log"
            tail -n 20 "$log"
        done
    fi
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Four distinct free ports (scripts/lib/common.sh: off the ephemeral range).
read -r AMQP METRICS MGMT PROM < <(free_ports 4)

echo "== StableMQ on amqp $AMQP, metrics $METRICS"
"$BIN" serve --bind 127.0.0.1 --stream-port 0 --amqp-port "$AMQP" --prometheus-port "$METRICS" \
    --management-port "$MGMT" --data-dir "$WORK/data" --log-level warn \
    >"$WORK/stablemq.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do
    python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$METRICS/metrics', timeout=1)" \
        2>/dev/null && break
    sleep 0.1
done

# Light, bounded load: persistent messages with confirms (so the log, the
# fsyncs and the quorum ack timer all move), a manual-ack consumer, and a
# second queue with an auto-ack consumer.
URI="amqp://guest:guest@127.0.0.1:$AMQP"
"$BIN" perf --uri "$URI" -x 1 -y 1 -r 200 -z 90 -c 50 -q 100 --persistent --quiet \
    -u promcheck-confirmed >"$WORK/perf-1.log" 2>&1 &
PIDS+=($!)
"$BIN" perf --uri "$URI" -x 1 -y 1 -r 50 -z 90 -a --quiet \
    -u promcheck-auto-ack >"$WORK/perf-2.log" 2>&1 &
PIDS+=($!)

cat >"$WORK/prometheus.yml" <<YAML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  # One endpoint per node: /metrics/per-object carries everything /metrics
  # does plus per-queue series (the "Deepest queues" panel needs them).
  - job_name: stablemq
    metrics_path: /metrics/per-object
    static_configs:
      - targets: ["127.0.0.1:$METRICS"]
YAML
echo "== Prometheus $("$PROMETHEUS" --version 2>&1 | head -n1 | awk '{print $3}') on $PROM"
"$PROMETHEUS" --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/tsdb" \
    --web.listen-address="127.0.0.1:$PROM" --log.level=warn >"$WORK/prometheus.log" 2>&1 &
PIDS+=($!)

python3 scripts/prometheus-check.py \
    --prometheus "http://127.0.0.1:$PROM" --metrics "http://127.0.0.1:$METRICS" \
    --overview grafana/rabbitmq-overview/10991-expressions.tsv \
    grafana/dashboards/*.json
