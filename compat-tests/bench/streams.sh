#!/usr/bin/env bash
# Stream protocol, side by side: StableMQ and RabbitMQ 3.10 with its
# rabbitmq_stream plugin, each measured with rstream in turn: publish with
# confirms (1 producer; 16 B and 1 KB), then fan-out reads from `first` with 1
# and 10 consumers, with the ratios and each broker's CPU per message.
#
# Usage: compat-tests/bench/streams.sh [N] [compare.sh options...]
#        (N messages per row, default 200000)
#
# A wrapper: this is compare.sh's scenario ST1 (one run, a Markdown table).
# `compare.sh --streams` runs it together with ST2, the same rows over AMQP
# 0-9-1 stream queues. Needs what compare.sh needs for ST1: the release build
# (or STABLEMQ_BIN), .venv with rstream (scripts/test.sh makes both; or
# STREAM_PYTHON), and what scripts/rabbitmq-node.sh installs.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
N=200000
if [[ $# -gt 0 && $1 =~ ^[0-9]+$ ]]; then
    N=$1
    shift
fi
exec "$HERE/compare.sh" --scenarios ST1 --messages "$N" --runs 1 --markdown "$@"
