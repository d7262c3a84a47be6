#!/usr/bin/env bash
# S2 (1 KB persistent, 1 producer, 1 consumer, confirm window 1000, prefetch 1000,
# multi-ack 100) with stablemq perf over plain AMQP and over AMQPS, against one
# broker, interleaved; prints confirm rate and broker CPU per message.
# Usage: compat-tests/bench/tls-cost.sh [BINARY]   (SECS=10 per run, 3 rounds)
# Certificates are made with openssl in a temp dir; the broker binds loopback
# ports picked from 20000-31999 and is killed by pid at exit.
set -eu
B=$(realpath "${1:-target/release/stablemq}"); D=$(mktemp -d); cd "$D"
AMQP=$((20000 + RANDOM % 6000)); AMQPS=$((AMQP + 6000))
openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj /CN=ca -keyout ca.key -out ca.pem 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj /CN=localhost -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" -keyout s.key -out s.csr 2>/dev/null
openssl x509 -req -in s.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 30 -copy_extensions copy -out s.pem 2>/dev/null
"$B" serve --bind 127.0.0.1 --amqp-port $AMQP --amqps-port $AMQPS --tls-cert-file s.pem --tls-key-file s.key \
  --management-port 0 --prometheus-port 0 --data-dir "$D/data" >"$D/log" 2>&1 &
P=$!; trap 'kill $P; rm -rf "$D"' EXIT; sleep 2
S2="-x 1 -y 1 -s 1024 --persistent -c 1000 -q 1000 --multi-ack-every 100 -z ${SECS:-10} --json --quiet"
for i in 1 2 3; do for mode in plain tls; do
  if [ $mode = plain ]; then U=amqp://guest:guest@127.0.0.1:$AMQP/%2f; else U=amqps://guest:guest@localhost:$AMQPS/%2f; fi
  t0=$(awk '{print $14+$15}' /proc/$P/stat)
  out=$("$B" perf --uri $U --tls-ca-file ca.pem $S2 -u s2-$mode-$i)
  t1=$(awk '{print $14+$15}' /proc/$P/stat)
  echo "$out" | python3 -c "import json,sys; d=json.load(sys.stdin); t=($t1-$t0)/100; print(f'$mode run$i confirm_rate={d[\"confirm_rate\"]:.0f} confirmed={d[\"confirmed\"]} consumed={d[\"consumed\"]} broker_cpu_s={t:.2f} us_per_msg={t*1e6/max(d[\"confirmed\"],1):.1f}')"
done; done
