"""TLS for both services: server credentials that pick up renewed certificate files on the next
handshake without a restart (TLS_CERT_FILE, TLS_KEY_FILE, TLS_CLIENT_CA_FILE), and the channel
credentials of the clients (the orchestrator's retrieval channel and both CLIs)."""

from __future__ import annotations

import argparse
import logging
import os
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import grpc

from shared.errors import ConfigurationError

log = logging.getLogger(__name__)

# What identifies one version of a file: a renewal that rewrites in place changes the mtime, a
# Kubernetes Secret update swaps the `..data` symlink (a new inode behind the same path).
_Signature = tuple[tuple[int, int, int], ...]


@dataclass(frozen=True, slots=True)
class ServerTlsFiles:
    cert_file: Path
    key_file: Path
    client_ca_file: Path | None = (
        None  # set = mTLS: a client without a certificate it signed is refused
    )

    @property
    def paths(self) -> tuple[Path, ...]:
        return (
            self.cert_file,
            self.key_file,
            *((self.client_ca_file,) if self.client_ca_file else ()),
        )


def _signature(paths: tuple[Path, ...]) -> _Signature:
    out = []
    for path in paths:
        st = os.stat(path)
        out.append((st.st_mtime_ns, st.st_size, st.st_ino))
    return tuple(out)


def _load_server_config(files: ServerTlsFiles) -> grpc.ServerCertificateConfiguration:
    """Reads the files and checks them the way a handshake would use them (the key matches the
    certificate, the CA file parses), so a half-written renewal is never served."""
    cert, key = files.cert_file.read_bytes(), files.key_file.read_bytes()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(files.cert_file, files.key_file)
    client_ca = None
    if files.client_ca_file is not None:
        client_ca = files.client_ca_file.read_bytes()
        context.load_verify_locations(cadata=client_ca.decode("ascii"))
    return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=client_ca)


class CertificateReloader:
    """The `certificate_configuration_fetcher` of `grpc.dynamic_ssl_server_credentials`. gRPC
    calls it before every new handshake; it answers None (keep the current certificate) unless a
    file's mtime, size or inode changed, and then the newly read files. Files that changed but
    do not load (mid-rotation, a key that does not match) keep the previous certificate."""

    def __init__(self, files: ServerTlsFiles) -> None:
        self._files = files
        try:
            self._signature = _signature(files.paths)
            self.initial = _load_server_config(files)
        except (OSError, ValueError) as exc:
            # The setting names, not the paths or the OpenSSL text: this reaches the operator only.
            raise ConfigurationError(
                "TLS_CERT_FILE, TLS_KEY_FILE or TLS_CLIENT_CA_FILE cannot be loaded "
                f"({type(exc).__name__})"
            ) from exc

    def __call__(self) -> grpc.ServerCertificateConfiguration | None:
        try:
            signature = _signature(self._files.paths)
        except OSError:
            log.warning("TLS files are missing; keeping the current certificate")
            return None
        if signature == self._signature:
            return None
        try:
            config = _load_server_config(self._files)
        except (OSError, ValueError) as exc:
            log.warning(
                "TLS files changed but do not load (%s); keeping the current certificate",
                type(exc).__name__,
            )
            return None
        self._signature = signature
        log.info("TLS certificate reloaded")
        return config


def server_credentials(
    cert_file: str | None, key_file: str | None, client_ca_file: str | None
) -> grpc.ServerCredentials | None:
    """TLS server credentials that reload their files on change, or None (plaintext) when no
    certificate is configured. With a client CA, a client must present a certificate it signed."""
    if not cert_file or not key_file:
        return None
    files = ServerTlsFiles(
        Path(cert_file), Path(key_file), Path(client_ca_file) if client_ca_file else None
    )
    reloader = CertificateReloader(files)
    # gRPC documents None as "keep the current configuration"; the stubs omit it.
    fetcher = cast(Callable[[], grpc.ServerCertificateConfiguration], reloader)
    return grpc.dynamic_ssl_server_credentials(
        reloader.initial,
        fetcher,
        require_client_authentication=files.client_ca_file is not None,
    )


def channel_credentials(
    ca_file: str | None, cert_file: str | None = None, key_file: str | None = None
) -> grpc.ChannelCredentials:
    """Client TLS credentials: the server is verified against `ca_file` (None = the system's
    roots); with `cert_file` and `key_file` the client presents its certificate (mTLS). The
    files are read once, when the channel is built."""
    try:
        root = Path(ca_file).read_bytes() if ca_file else None
        key = Path(key_file).read_bytes() if key_file else None
        chain = Path(cert_file).read_bytes() if cert_file else None
    except OSError as exc:
        raise ConfigurationError(
            f"a client TLS file cannot be read ({type(exc).__name__})"
        ) from exc
    return grpc.ssl_channel_credentials(
        root_certificates=root, private_key=key, certificate_chain=chain
    )


def add_tls_arguments(parser: argparse.ArgumentParser) -> None:
    """The CLIs' client TLS flags (both CLIs take the same ones)."""
    group = parser.add_argument_group("TLS (the server's TLS_CERT_FILE / TLS_CLIENT_CA_FILE)")
    group.add_argument("--tls", action="store_true", help="TLS, server verified by system roots")
    group.add_argument("--tls-ca", metavar="FILE", help="TLS, server verified by this PEM CA")
    group.add_argument("--tls-cert", metavar="FILE", help="client certificate (mTLS)")
    group.add_argument("--tls-key", metavar="FILE", help="the client certificate's private key")


def credentials_from_arguments(args: argparse.Namespace) -> grpc.ChannelCredentials | None:
    """The channel credentials the flags of `add_tls_arguments` ask for; None = plaintext."""
    if bool(args.tls_cert) != bool(args.tls_key):
        raise ValueError("--tls-cert and --tls-key go together")
    if not (args.tls or args.tls_ca or args.tls_cert):
        return None
    return channel_credentials(args.tls_ca, args.tls_cert, args.tls_key)


def mismatch_hint(details: str, *, tls: bool, setting: str = "--tls-ca <ca.pem>") -> str:
    """What to change when a connection failed because one side speaks TLS and the other
    plaintext ("" when `details` does not look like that): a plaintext client to a TLS port
    sees the socket closed; a TLS client to a plaintext port a handshake failure."""
    if not tls and "Socket closed" in details:
        return f" (is the server TLS-only? then call it over TLS: {setting})"
    if tls and "WRONG_VERSION_NUMBER" in details:
        return f" (the server speaks plaintext: call it without TLS, i.e. no {setting})"
    return ""
