"""Suite-wide settings.

- Trace normalisation rejects unknown raw keys throughout the tests, so a misspelt trace key
  written by a node fails a test instead of silently vanishing (production drops such keys,
  docs/trace.md#normalisation).
- Tiers: a test marked `integration` (real servers, Milvus Lite, HTTP fakes on loopback) or
  `slow` (subprocesses, long runs) may use the network and start processes; every other test
  is a unit test, and this file makes that a rule rather than a habit: a unit test that opens
  a network socket or starts a process fails. `make test-unit` runs the unit tier alone."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from shared.normalize import strict_keys

TIER_MARKERS = ("integration", "slow")
#: Folders whose every test is an integration test: they start real servers and processes.
INTEGRATION_FOLDERS = ("integration", "deploy")
# Unix socket pairs stay allowed: every asyncio event loop makes one to wake itself.
_NETWORK_FAMILIES = (socket.AF_INET, socket.AF_INET6)


class UnitTierViolation(AssertionError):
    """A unit test reached for the network or a process; mark it `integration` or `slow`."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.parent.name in INTEGRATION_FOLDERS:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(autouse=True, scope="session")
def _strict_trace_keys() -> Iterator[None]:
    with strict_keys():
        yield


@pytest.fixture(autouse=True)
def _unit_tier_guard(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if any(request.node.get_closest_marker(name) for name in TIER_MARKERS):
        return
    test = request.node.nodeid

    def refuse(what: str) -> UnitTierViolation:
        return UnitTierViolation(f"{test}: a unit test may not {what}; mark it integration/slow")

    def guarded(method: Any, what: str) -> Any:
        def call(sock: socket.socket, *args: Any, **kwargs: Any) -> Any:
            if sock.family in _NETWORK_FAMILIES:
                raise refuse(what)
            return method(sock, *args, **kwargs)

        return call

    monkeypatch.setattr(socket.socket, "connect", guarded(socket.socket.connect, "connect"))
    monkeypatch.setattr(socket.socket, "connect_ex", guarded(socket.socket.connect_ex, "connect"))
    monkeypatch.setattr(socket.socket, "bind", guarded(socket.socket.bind, "listen on a port"))

    def no_process(*args: Any, **kwargs: Any) -> Any:
        raise refuse("start a process")

    monkeypatch.setattr(subprocess.Popen, "__init__", no_process)
