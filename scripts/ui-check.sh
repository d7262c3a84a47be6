#!/usr/bin/env bash
# The management web UI in a real browser: Debian's chromium and chromium-driver
# (installed if missing), headless, driven by selenium (pinned in
# compat-tests/ui/requirements.txt, installed into compat-tests/.cache/ui-venv).
# compat-tests/ui/test_ui.py starts its own StableMQ (target/release/stablemq, or
# STABLEMQ_BIN) on free loopback ports with a temporary data dir, logs in, visits
# every page, checks what a person would see, and a 3-node cluster's Cluster page
# before and after kill -9 of the master. It stops every process it started by pid.
# Screenshots go to target/ui-screenshots/ (or UI_SCREENSHOTS). Exits 0 when every
# test passed; the last line counts them ("ui: N passed, N failed").
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
# shellcheck source=scripts/lib/common.sh
. "$ROOT/scripts/lib/common.sh"
export STABLEMQ_BIN=${STABLEMQ_BIN:-$ROOT/target/release/stablemq}
[[ -x $STABLEMQ_BIN ]] || { echo "ui-check: $STABLEMQ_BIN is not built (cargo build --release --bin stablemq)" >&2; exit 1; }

if [[ ! -x /usr/bin/chromium || ! -x /usr/bin/chromedriver ]]; then
    echo "==> installing Debian's chromium and chromium-driver" >&2
    apt_install chromium chromium-driver
fi

VENV=$ROOT/compat-tests/.cache/ui-venv
REQ=$ROOT/compat-tests/ui/requirements.txt
if [[ ! -x $VENV/bin/python ]]; then
    python3 -m venv "$VENV"
fi
STAMP=$VENV/.requirements.sha256
WANT=$(sha256sum "$REQ" | cut -d' ' -f1)
if [[ ! -f $STAMP || $(cat "$STAMP") != "$WANT" ]]; then
    echo "==> installing $REQ into $VENV" >&2
    PIP_DISABLE_PIP_VERSION_CHECK=1 "$VENV/bin/python" -m pip install --quiet -r "$REQ"
    echo "$WANT" >"$STAMP"
fi

export UI_SCREENSHOTS=${UI_SCREENSHOTS:-$ROOT/target/ui-screenshots}
# Selenium must not look for drivers or browsers on the network.
export SE_OFFLINE=true SE_AVOID_STATS=true
exec "$VENV/bin/python" "$ROOT/compat-tests/ui/test_ui.py" "$@"
