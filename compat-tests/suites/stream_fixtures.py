"""pytest plugin for rstream's own tests (scripts/stream-suites.sh).

Loaded with ``-p stream_fixtures`` next to ``-p stablemq_fixtures`` (which
deselects and writes the result file). rstream's tests reach the broker three
ways, all set up for their CI's docker RabbitMQ on localhost:

- the stream port, from its conftest's ``--rmq-host``/``--rmq-port`` options
  (the script passes the broker's);
- the stream port 5552, written into a few tests (a consumer with its own
  connection name, a producer whose connection is closed under it): a
  connection rstream opens to port 5552 goes to ``STABLEMQ_STREAM_PORT``
  instead (the broker's own, a free port). Any other port is left alone;
- the management HTTP API, through ``tests/http_requests.py``, whose helpers
  take the port as a default argument (15672): those defaults become
  ``STABLEMQ_MANAGEMENT_PORT`` once the module is imported (and so for the
  helper of ``tests/util.py`` that takes it the same way); a call that names
  a port keeps it.

Nothing else is changed: the client is the pinned rstream from PyPI, the
tests are run as their authors wrote them.
"""

from __future__ import annotations

import os
import sys

import pytest

_DEFAULT_STREAM_PORT = 5552
_DEFAULT_HTTP_PORT = 15672


def _point_stream_connections() -> None:
    port = os.environ.get("STABLEMQ_STREAM_PORT")
    if not port:
        return
    from rstream import connection

    original = connection.Connection.open

    async def open_(self):
        if self.port == _DEFAULT_STREAM_PORT:
            self.port = int(port)
        return await original(self)

    connection.Connection.open = open_


def _point_http_helpers() -> None:
    port = os.environ.get("STABLEMQ_MANAGEMENT_PORT")
    if not port:
        return
    # tests/util.py has a helper of its own that takes the port the same way.
    for name in ("tests.http_requests", "tests.util"):
        module = sys.modules.get(name)
        for value in vars(module).values() if module else ():
            defaults = getattr(value, "__defaults__", None)
            if callable(value) and defaults and _DEFAULT_HTTP_PORT in defaults:
                value.__defaults__ = tuple(int(port) if d == _DEFAULT_HTTP_PORT else d for d in defaults)


def pytest_configure(config):
    _point_stream_connections()


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session):
    # The test modules (and so tests.http_requests) are imported by now.
    _point_http_helpers()
