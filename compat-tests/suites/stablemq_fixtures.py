"""pytest plugin for running third-party client test suites against a broker we start.

Loaded with ``-p stablemq_fixtures`` (this directory is on PYTHONPATH) by
``scripts/suites.sh``. It does three things:

1. Broker fixtures from the environment (and amqpstorm's default ports). aio-pika's and aiormq's suites get their
   broker from Docker (``rabbitmq_container`` -> ``amqp_direct_url`` -> ``amqp_url``).
   This plugin supplies ``rabbitmq_container`` and ``amqp_direct_url`` built from
   ``AMQP_URL`` (e.g. ``amqp://guest:guest@127.0.0.1:5672/``) and ``AMQPS_PORT``
   (the broker's TLS port, their container's "5671/tcp") instead, and a
   ``docker`` fixture that fails saying Docker is not used here. aiormq's conftest
   does not define those fixtures, so ours are used as they are. aio-pika's conftest
   does define them (and its ``pytest_configure`` refuses to run without Docker);
   a conftest fixture would win over a plugin fixture, so when that conftest module
   is registered we replace its Docker check and its fixture functions in the module
   itself, before pytest's fixture manager reads them. aiormq's conftest also has
   ``cert_path(name)``, the certificates its broker image was made with (in the
   sdist's ``tests/certs``); it is replaced the same way by one that names the run's
   certificates (``STABLEMQ_TLS_DIR``, which scripts/suites.sh made for this broker
   under the same file names).

2. Shards and deselection. ``STABLEMQ_SHARD`` "K/N" keeps every Nth test (from the
   Kth), so that one suite can run as N pytest processes side by side, each against
   a broker of its own. ``STABLEMQ_DESELECT_FILE`` names ``deselected.txt`` and
   ``STABLEMQ_SUITE`` the suite being run; every entry of that suite is removed from
   the run (reported as deselected, as with ``-k``). An entry matches a test id
   exactly, or every test under it (a file or class id followed by ``::``, a test
   without its ``[params]``), or as
   a pattern when it contains ``*`` (the only wildcard).

3. A machine-readable result. ``STABLEMQ_RESULT_FILE`` receives a JSON object with
   the counts (passed, failed, skipped, deselected; and of those run, how many are
   the suite's TLS tests, ``tls_run``, and how many of them passed, ``tls_passed``:
   the tests whose keywords contain a word of ``STABLEMQ_TLS_KEYWORDS``), the failed
   test ids with their error message, and the deselected ids with their reasons.
"""

from __future__ import annotations

import functools
import json
import os
import re
import time
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

import pytest

# --------------------------------------------------------------------------- #
# 1. Broker fixtures                                                          #
# --------------------------------------------------------------------------- #


@dataclass
class BrokerEndpoint:
    """Stands in for aio-pika's ``tests.docker_client.ContainerInfo``."""

    id: str
    ports: dict[str, int] = field(default_factory=dict)
    host: str = "127.0.0.1"


def _amqp_url_parts() -> tuple[str, int, str, str]:
    url = os.environ.get("AMQP_URL")
    if not url:
        raise pytest.UsageError(
            "stablemq_fixtures: AMQP_URL is not set (scripts/suites.sh sets it)"
        )
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    port = parts.port or 5672
    user = unquote(parts.username or "guest")
    password = unquote(parts.password or "guest")
    return host, port, user, password


@pytest.fixture(scope="session")
def rabbitmq_container() -> BrokerEndpoint:
    host, port, _, _ = _amqp_url_parts()
    # The broker's AMQPS listener (its certificates: STABLEMQ_TLS_DIR, see cert_path).
    if not os.environ.get("AMQPS_PORT"):
        raise pytest.UsageError(
            "stablemq_fixtures: AMQPS_PORT is not set (scripts/suites.sh sets it)"
        )
    tls_port = int(os.environ["AMQPS_PORT"])
    return BrokerEndpoint(
        id="stablemq-suites", ports={"5672/tcp": port, "5671/tcp": tls_port}, host=host
    )


@pytest.fixture(scope="session")
def amqp_direct_url():
    from yarl import URL

    host, port, user, password = _amqp_url_parts()
    # Same shape as the suites' own fixture: path "//" is the vhost "/".
    return URL.build(
        scheme="amqp", user=user, password=password, host=host, port=port, path="//"
    )


@pytest.fixture(scope="session")
def docker():
    pytest.fail(
        "this test starts its own RabbitMQ container through Docker; Docker is not "
        "used by scripts/suites.sh (list the test in compat-tests/suites/deselected.txt)"
    )


_OVERRIDES = {
    "rabbitmq_container": rabbitmq_container,
    "amqp_direct_url": amqp_direct_url,
    "docker": docker,
}


def _no_docker_check(*_args, **_kwargs):
    return None


def cert_path(*args):
    """aiormq's conftest ``cert_path``, for the run's certificates."""
    tls_dir = os.environ.get("STABLEMQ_TLS_DIR")
    if not tls_dir:
        raise pytest.UsageError(
            "stablemq_fixtures: STABLEMQ_TLS_DIR is not set (scripts/suites.sh sets it)"
        )
    return os.path.join(tls_dir, *args)


@pytest.hookimpl(tryfirst=True)
def pytest_plugin_registered(plugin, manager):
    """Neutralise a conftest's Docker dependence before pytest reads its fixtures."""
    mod_file = getattr(plugin, "__file__", "") or ""
    if os.path.basename(mod_file) != "conftest.py":
        return
    if hasattr(plugin, "check_docker_available"):
        # aio-pika's pytest_configure calls this module global and raises a
        # UsageError when Docker is missing.
        plugin.check_docker_available = _no_docker_check
    for name, fixture in _OVERRIDES.items():
        if name in vars(plugin):
            setattr(plugin, name, fixture)
    if callable(vars(plugin).get("cert_path")):
        # aiormq: its amqp_url fixture calls this module global, and its test
        # modules import it from the conftest after this hook has run.
        plugin.cert_path = cert_path


def _point_amqpstorm_at_broker() -> None:
    """Make the broker's ports amqpstorm's default ports.

    amqpstorm's functional tests connect with ``Connection(AMQP_HOST, user,
    password)``, that is on the default port 5672, which they take from the
    signature's default; only the host is configurable. Our brokers listen on a free
    port instead, so that default becomes that port (the URI tests already carry it).
    Its SSL tests connect with ``Connection(AMQP_SSL_HOST, ..., port=5671,
    ssl=True)``: that port becomes the broker's AMQPS port (``AMQPS_PORT``).
    """
    if not os.environ.get("STABLEMQ_SUITE", "").startswith("amqpstorm"):
        return
    from amqpstorm.connection import Connection

    _, port, _, _ = _amqp_url_parts()
    if Connection.__init__.__defaults__ != (5672,):
        raise pytest.UsageError(
            "stablemq_fixtures: amqpstorm's Connection() no longer has the single "
            f"default port=5672 ({Connection.__init__.__defaults__!r}); update the plugin"
        )
    Connection.__init__.__defaults__ = (port,)
    tls_port = os.environ.get("AMQPS_PORT")
    if not tls_port:
        return
    plain_init = Connection.__init__

    @functools.wraps(plain_init)
    def init(self, hostname, username, password, port=port, **kwargs):
        if port == 5671 and kwargs.get("ssl"):
            port = int(tls_port)
        plain_init(self, hostname, username, password, port, **kwargs)

    Connection.__init__ = init


def pytest_configure(config):
    _point_amqpstorm_at_broker()


# --------------------------------------------------------------------------- #
# 2. Deselection                                                              #
# --------------------------------------------------------------------------- #


def load_deselections(path: str, suite: str) -> list[tuple[str, str]]:
    """Entries of ``suite`` in the deselection file: (test id pattern, reason)."""
    entries = []
    with open(path, encoding="utf-8") as fh:
        for raw in fh:
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            cols = [c.strip() for c in line.split("|", 2)]
            if len(cols) != 3 or not all(cols):
                raise pytest.UsageError(
                    f"{path}: malformed line (want 'suite | test id | reason'): {line}"
                )
            if cols[0] == suite:
                entries.append((cols[1], cols[2]))
    return entries


def _matches(nodeid: str, pattern: str) -> bool:
    if "*" in pattern:
        # Only "*" is a wildcard: test ids contain brackets ("[connect]").
        regex = ".*".join(re.escape(part) for part in pattern.split("*"))
        if re.fullmatch(regex, nodeid):
            return True
    # A test id without parameters covers all its parametrisations ("[...]"), and a
    # file or class id every test under it.
    return nodeid == pattern or nodeid.startswith((pattern + "::", pattern + "["))


class _State:
    def __init__(self):
        self.start = time.monotonic()
        self.outcomes: dict[str, str] = {}
        self.errors: dict[str, str] = {}
        self.deselected: dict[str, str] = {}
        self.unused: list[str] = []
        self.tls: set[str] = set()


_state = _State()


def _is_tls_test(item, words: list[str]) -> bool:
    """Whether one of ``words`` is in the test's keywords (its name, its parents'
    names, its parameter ids, its markers), case-insensitively, as ``-k WORD``
    matches."""
    return any(w in name.lower() for name in item.keywords for w in words)


def _shard() -> tuple[int, int]:
    """``STABLEMQ_SHARD`` "K/N": this run is shard K (from 1) of N; "" is 1/1."""
    spec = os.environ.get("STABLEMQ_SHARD", "")
    if not spec:
        return 1, 1
    k, n = (int(x) for x in spec.split("/"))
    if not 1 <= k <= n:
        raise pytest.UsageError(f"stablemq_fixtures: bad STABLEMQ_SHARD {spec!r}")
    return k, n


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    # Shards first, deselection second, so that the shards' deselected counts add
    # up to the suite's. Every Nth test rather than whole files: the long files (a
    # third of aio-pika's tests are in test_amqp_robust.py) spread over all shards.
    # Tests left to other shards are not reported as deselected: they run there.
    k, n = _shard()
    if n > 1:
        items[:] = [item for i, item in enumerate(items) if i % n == k - 1]
    path = os.environ.get("STABLEMQ_DESELECT_FILE")
    suite = os.environ.get("STABLEMQ_SUITE")
    if path and suite:
        _deselect(config, items, load_deselections(path, suite))
    # The suite's TLS tests among those that run (STABLEMQ_TLS_KEYWORDS: the words
    # that mark them, e.g. "amqps ssl"), for the summary's TLS column.
    words = os.environ.get("STABLEMQ_TLS_KEYWORDS", "").lower().split()
    if words:
        _state.tls = {item.nodeid for item in items if _is_tls_test(item, words)}


def _deselect(config, items, entries: list[tuple[str, str]]) -> None:
    """Remove the tests that match a deselection entry from ``items``."""
    used = set()
    keep, drop = [], []
    for item in items:
        reason = None
        for pattern, why in entries:
            if _matches(item.nodeid, pattern):
                reason = why
                used.add(pattern)
                break
        if reason is None:
            keep.append(item)
        else:
            drop.append(item)
            _state.deselected[item.nodeid] = reason
    _state.unused = [p for p, _ in entries if p not in used]
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


# --------------------------------------------------------------------------- #
# 3. Result file                                                              #
# --------------------------------------------------------------------------- #


def _message(report) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return str(crash.message)
    text = str(report.longrepr or "")
    return text.strip().splitlines()[-1] if text.strip() else ""


def pytest_runtest_logreport(report):
    nodeid = report.nodeid
    prev = _state.outcomes.get(nodeid)
    if report.failed:
        if prev != "failed":
            phase = "" if report.when == "call" else f"[{report.when}] "
            _state.errors[nodeid] = phase + _message(report)[:2000]
        _state.outcomes[nodeid] = "failed"
    elif report.skipped:
        if prev is None:
            # xfail counts as skipped, like pytest's own "xfailed" line.
            _state.outcomes[nodeid] = "skipped"
    elif report.when == "call" and prev is None:
        _state.outcomes[nodeid] = "passed"
    elif report.when == "teardown" and prev is None:
        _state.outcomes[nodeid] = "passed"


def pytest_sessionfinish(session, exitstatus):
    out = os.environ.get("STABLEMQ_RESULT_FILE")
    if not out:
        return
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    for outcome in _state.outcomes.values():
        counts[outcome] += 1
    result = {
        "suite": os.environ.get("STABLEMQ_SUITE", ""),
        **counts,
        "deselected": len(_state.deselected),
        # Of the tests above, the suite's TLS tests (run over AMQPS).
        "tls_run": sum(1 for nid in _state.tls if nid in _state.outcomes),
        "tls_passed": sum(1 for nid in _state.tls if _state.outcomes.get(nid) == "passed"),
        "pytest_exit_status": int(exitstatus),
        "seconds": round(time.monotonic() - _state.start, 1),
        "failures": [
            {"id": nid, "error": _state.errors.get(nid, "")}
            for nid, o in _state.outcomes.items()
            if o == "failed"
        ],
        "deselected_tests": [
            {"id": nid, "reason": why} for nid, why in _state.deselected.items()
        ],
        "unused_deselections": _state.unused,
    }
    with open(out, "w", encoding="utf-8") as fh:
        json.dump(result, fh, indent=2)
        fh.write("\n")
