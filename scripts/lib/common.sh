# Helpers shared by the project's shell scripts. Sourced, never run:
#   . "$ROOT/scripts/lib/common.sh"
# One copy of each, so that how a package gets installed (without starting the
# service it ships) or how a free port is picked cannot drift between scripts.

# Install Debian packages. The service a package ships (rabbitmq-server,
# prometheus) is kept from starting: it would listen on all interfaces, outside
# the tests' control. Tries without `apt-get update` first (fast when the lists
# are fresh), then with it. Needs root.
apt_install() { # package...
    local policy=/usr/sbin/policy-rc.d added="" rc=0
    if [[ $(id -u) -ne 0 ]]; then
        printf 'installing %s needs root (apt-get install %s)\n' "$*" "$*" >&2
        return 1
    fi
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy"
        chmod +x "$policy"
        added=1
    fi
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null 2>&1; then
        { apt-get update -qq >/dev/null &&
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null; } || rc=$?
    fi
    [[ -z $added ]] || rm -f "$policy"
    return $rc
}

RABBITMQ_SERVER=/usr/lib/rabbitmq/bin/rabbitmq-server
RABBITMQCTL=/usr/lib/rabbitmq/bin/rabbitmqctl

# Debian's RabbitMQ 3.10, installed if missing. Its server script is what the
# scripts run (never the system service).
ensure_rabbitmq() {
    [[ -x $RABBITMQ_SERVER ]] && return 0
    printf "==> installing Debian's rabbitmq-server\n" >&2
    apt_install rabbitmq-server || return 1
    [[ -x $RABBITMQ_SERVER ]] || { printf 'apt-get installed rabbitmq-server but %s is missing\n' "$RABBITMQ_SERVER" >&2; return 1; }
}

# That many distinct free loopback ports on one line, from 20000-31999 (the
# range the Rust test harness picks from, away from the kernel's ephemeral range).
free_ports() { # count
    python3 - "$1" <<'PY'
import random, socket, sys
want, got = int(sys.argv[1]), []
for port in random.sample(range(20000, 32000), 12000):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        continue
    finally:
        s.close()
    got.append(str(port))
    if len(got) == want:
        break
print(" ".join(got))
PY
}

# SIGTERM to each pid, then reap them: for a script's EXIT trap, so every
# process it started stops with it.
stop_pids() { # pid...
    local pid
    for pid in "$@"; do kill "$pid" 2>/dev/null || true; done
    for pid in "$@"; do wait "$pid" 2>/dev/null || true; done
}
