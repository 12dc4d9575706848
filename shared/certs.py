"""`make certs` (`python -m shared.certs [FOLDER]`): a local CA and the certificates a first try
of TLS and mTLS needs, as PEM files in ./data/certs (README "TLS"):

- `ca.pem` / `ca.key`: the CA (TLS_CLIENT_CA_FILE, RETRIEVAL_TLS_CA_FILE, `--tls-ca`);
- `server.pem` / `server.key`: both services' certificate (TLS_CERT_FILE, TLS_KEY_FILE), for
  `localhost`, `127.0.0.1` and `::1`, usable as a client certificate too, so that under `make
  run` the orchestrator presents it to retrieval under mTLS;
- `client.pem` / `client.key`: a client certificate for the CLIs, grpcurl and buf curl.

For a first try only: the keys are unencrypted and valid for a year. Files already there are
kept (delete the folder to make new ones). Needs `cryptography` (installed by `make setup`)."""

from __future__ import annotations

import datetime
import ipaddress
import sys
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DEFAULT_FOLDER = Path("data/certs")
VALID_DAYS = 365
FILES = ("ca.pem", "ca.key", "server.pem", "server.key", "client.pem", "client.key")


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write(path: Path, data: bytes, *, private: bool = False) -> None:
    path.write_bytes(data)
    if private:
        path.chmod(0o600)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def make_certs(folder: Path) -> list[Path]:
    """Write the CA, server and client certificates into `folder`; the paths written."""
    folder.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=VALID_DAYS)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("supermew local CA")
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    _write(folder / "ca.pem", ca.public_bytes(serialization.Encoding.PEM))
    _write(folder / "ca.key", _key_pem(ca_key), private=True)

    def issue(
        stem: str, usages: list[x509.ObjectIdentifier], names: list[x509.GeneralName]
    ) -> None:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(f"supermew {stem}"))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        _write(folder / f"{stem}.pem", cert.public_bytes(serialization.Encoding.PEM))
        _write(folder / f"{stem}.key", _key_pem(key), private=True)

    local: list[x509.GeneralName] = [
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(ipaddress.ip_address("::1")),
    ]
    both = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    issue("server", both, local)
    issue("client", [ExtendedKeyUsageOID.CLIENT_AUTH], [x509.DNSName("supermew-client")])
    return [folder / name for name in FILES]


def main(argv: list[str]) -> int:
    folder = Path(argv[0]) if argv else DEFAULT_FOLDER
    if all((folder / name).exists() for name in FILES):
        print(f"{folder}: certificates already there (delete the folder to make new ones)")
        return 0
    make_certs(folder)
    print(f"wrote {', '.join(FILES)} to {folder}/ (a local CA; for a first try only)")
    print(
        f"  TLS_CERT_FILE={folder}/server.pem TLS_KEY_FILE={folder}/server.key "
        f"TLS_CLIENT_CA_FILE={folder}/ca.pem make run"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
