"""`make run`: both services on the embedded default (Milvus Lite under ./data, the built-in
embedder and local model), in the foreground. Ctrl-C (or SIGTERM) drains and stops both; if
one exits on its own, the other is stopped too and the exit code is passed on.

One environment feeds both services, so what only one of them should take is derived here
(docs/api.md#settings): each its own metrics port (METRICS_PORT for retrieval, METRICS_PORT + 1
for the orchestrator, unless RETRIEVAL_METRICS_PORT / ORCHESTRATOR_METRICS_PORT say
otherwise), and the orchestrator's RETRIEVAL_ADDR (and its TLS to retrieval) from
RETRIEVAL_PORT and the TLS settings. Once both listen, one "ready" block says where."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SERVICES = ("retrieval_service", "orchestrator_service")
DEFAULT_PORTS = {"retrieval_service": 50051, "orchestrator_service": 50052}
PORT_SETTINGS = {"retrieval_service": "RETRIEVAL_PORT", "orchestrator_service": "ORCHESTRATOR_PORT"}
METRICS_SETTINGS = {
    "retrieval_service": "RETRIEVAL_METRICS_PORT",
    "orchestrator_service": "ORCHESTRATOR_METRICS_PORT",
}
READY_TIMEOUT_SECONDS = 600.0  # the first start builds the store and seeds the samples


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _port(env: Mapping[str, str], name: str, default: int) -> int:
    value = env.get(name, "").strip()
    try:
        return int(value) if value else default
    except ValueError:
        return default  # the service itself reports the bad value, naming it


def environments(base: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """Each service's environment from the one `make run` was given."""
    env = dict(base)
    # `make run` seeds an empty knowledge base with the bundled samples.
    env.setdefault("SAMPLES_DIR", str(ROOT / "samples"))
    env.setdefault("PYTHONUNBUFFERED", "1")
    # Fixed ports, so the orchestrator can be pointed at retrieval and the ready block is true.
    for name, setting in PORT_SETTINGS.items():
        if _port(env, setting, DEFAULT_PORTS[name]) == 0:
            env[setting] = str(_free_port())
    retrieval_port = _port(env, "RETRIEVAL_PORT", DEFAULT_PORTS["retrieval_service"])
    out = {name: dict(env) for name in SERVICES}
    shared = env.get("METRICS_PORT", "").strip()
    if shared:
        port = _port(env, "METRICS_PORT", 0)
        offsets = {"retrieval_service": 0, "orchestrator_service": 1}
        for name, setting in METRICS_SETTINGS.items():
            if not env.get(setting):
                out[name][setting] = str(port + offsets[name] if port else _free_port())
    orchestrator = out["orchestrator_service"]
    if not env.get("RETRIEVAL_ADDR"):
        orchestrator["RETRIEVAL_ADDR"] = f"localhost:{retrieval_port}"
    # On a laptop the history is what `eval report` and feedback read (docs/api.md#run-history).
    orchestrator.setdefault("RUN_HISTORY", "true")
    if env.get("TLS_CERT_FILE") and not env.get("RETRIEVAL_TLS_CA_FILE"):
        # Retrieval speaks TLS: the orchestrator trusts the CA that `make certs` made (the
        # one of TLS_CLIENT_CA_FILE under mTLS) and, under mTLS, presents the same
        # certificate (`make certs` gives it clientAuth too).
        ca = env.get("TLS_CLIENT_CA_FILE") or str(Path(env["TLS_CERT_FILE"]).parent / "ca.pem")
        orchestrator["RETRIEVAL_TLS_CA_FILE"] = ca
        if env.get("TLS_CLIENT_CA_FILE") and not env.get("RETRIEVAL_TLS_CERT_FILE"):
            orchestrator["RETRIEVAL_TLS_CERT_FILE"] = env["TLS_CERT_FILE"]
            orchestrator["RETRIEVAL_TLS_KEY_FILE"] = env.get("TLS_KEY_FILE", "")
    return out


def _listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def ready_block(envs: Mapping[str, Mapping[str, str]]) -> str:
    """Where each service listens, TLS and auth on or off, its metrics, and two commands."""
    lines = ["ready:"]
    tls = False
    for name in SERVICES:
        env = envs[name]
        port = _port(env, PORT_SETTINGS[name], DEFAULT_PORTS[name])
        metrics = env.get(METRICS_SETTINGS[name]) or env.get("METRICS_PORT")
        host = env.get("BIND_HOST", "127.0.0.1")
        tls = bool(env.get("TLS_CERT_FILE"))
        mtls = " (mTLS)" if env.get("TLS_CLIENT_CA_FILE") else ""
        lines.append(
            f"  {name.removesuffix('_service'):<12} localhost:{port}  "
            f"TLS {'on' if tls else 'off'}{mtls}  auth {'on' if _auth_on(env) else 'off'}  "
            + (f"metrics http://{host}:{metrics}/metrics" if metrics else "metrics off")
        )
    orchestrator = envs["orchestrator_service"]
    port = _port(orchestrator, "ORCHESTRATOR_PORT", DEFAULT_PORTS["orchestrator_service"])
    cli = "" if port == DEFAULT_PORTS["orchestrator_service"] else f" --addr localhost:{port}"
    grpcurl = " -plaintext"
    if tls:
        ca = Path(orchestrator.get("RETRIEVAL_TLS_CA_FILE", "ca.pem"))
        cli, grpcurl = f"{cli} --tls-ca {ca}", f" -cacert {ca}"
        if orchestrator.get("TLS_CLIENT_CA_FILE"):
            cert, key = ca.parent / "client.pem", ca.parent / "client.key"
            cli += f" --tls-cert {cert} --tls-key {key}"
            grpcurl += f" -cert {cert} -key {key}"
    lines.append("try:")
    if _auth_on(orchestrator):
        # Every call needs a key: the CLIs send SUPERMEW_API_KEY (else AUTH_TOKEN) as a bearer
        # token; grpcurl is given the header.
        variable = "AUTH_TOKEN" if orchestrator.get("AUTH_TOKEN") else "SUPERMEW_API_KEY"
        if variable == "SUPERMEW_API_KEY":
            lines.append("  export SUPERMEW_API_KEY=<a key of AUTH_KEYS_FILE>")
        grpcurl += f' -H "authorization: Bearer ${variable}"'
    lines += [
        f'  .venv/bin/python -m orchestrator_service ask "What is an event loop?"{cli}',
        f"  .venv/bin/grpcurl{grpcurl} localhost:{port} list",
    ]
    return "\n".join(lines)


def _auth_on(env: Mapping[str, str]) -> bool:
    """Whether calls need a key: AUTH_TOKEN or AUTH_KEYS_FILE set (docs/api.md#api-keys)."""
    return bool(env.get("AUTH_TOKEN") or env.get("AUTH_KEYS_FILE"))


def taken_port(envs: Mapping[str, Mapping[str, str]], host: str) -> str | None:
    """The first service port another process already listens on, as one line naming its
    setting; None when all are free. Checked before starting: otherwise that process would
    answer on the port and make a service that failed to bind look ready."""
    for name in SERVICES:
        port = _port(envs[name], PORT_SETTINGS[name], DEFAULT_PORTS[name])
        if port and _listening(host, port):
            return (
                f"make run: {PORT_SETTINGS[name]}={port} is already in use by another process "
                f"(an earlier `make run`?); stop it or set {PORT_SETTINGS[name]}"
            )
    return None


def main() -> int:
    envs = environments(os.environ)
    bound = os.environ.get("BIND_HOST", "127.0.0.1")
    check_host = "127.0.0.1" if bound in ("0.0.0.0", "", "[::]", "::") else bound.strip("[]")
    if (taken := taken_port(envs, check_host)) is not None:
        print(taken, file=sys.stderr)
        return 2
    procs = [
        subprocess.Popen([sys.executable, "-m", name], cwd=ROOT, env=envs[name])
        for name in SERVICES
    ]
    requested = False

    def stop() -> None:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)

    def on_signal(*_: object) -> None:
        nonlocal requested
        requested = True
        stop()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    ports = [_port(envs[name], PORT_SETTINGS[name], DEFAULT_PORTS[name]) for name in SERVICES]
    host = os.environ.get("BIND_HOST", "127.0.0.1")
    host = "127.0.0.1" if host in ("0.0.0.0", "", "[::]", "::") else host.strip("[]")
    announced = False
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    try:
        while all(proc.poll() is None for proc in procs):
            waiting = not announced and time.monotonic() < deadline
            if waiting and all(_listening(host, port) for port in ports):
                time.sleep(0.5)  # the services' start-up lines come first
                # A port may answer for another process while ours failed to start (it was
                # taken): ready only while every service of this run is alive.
                if all(proc.poll() is None for proc in procs):
                    print(ready_block(envs), file=sys.stderr, flush=True)
                announced = True
            time.sleep(0.2)
        stop()
        codes = [proc.wait() for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    if requested:
        return 0
    failed = [code for code in codes if code != 0]
    return failed[0] if failed else 1  # a service stopped although nobody asked it to


if __name__ == "__main__":
    sys.exit(main())
