"""Secured NATS and Redis servers for the bus-security tests, with certificates made here.

- :func:`make_pki`: a CA, a server certificate for 127.0.0.1/localhost and a client
  certificate, all signed by the CA (the ``cryptography`` package).
- :func:`nkey`: a fresh NATS nkey pair; :func:`operator_setup`: an operator, an account and
  a user as JWTs plus the user's ``.creds`` file (NATS decentralised auth).
- :func:`start_secure_nats` / :func:`start_secure_redis`: real servers on free ports (the
  binaries shared/embedded.py finds) that require the given authentication and TLS.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import ipaddress
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import nkeys
import orjson
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from shared import embedded


@dataclass(frozen=True)
class Pki:
    ca: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str
    other_ca: str  # a CA that signed nothing here (verification must fail with it)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(key, path: Path) -> str:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)
    return str(path)


def _write_cert(cert: x509.Certificate, path: Path) -> str:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return str(path)


def _ca(name: str):
    key = _key()
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return key, cert


def _leaf(ca_key, ca_cert, name: str, *, server: bool):
    key = _key()
    now = datetime.datetime.now(datetime.UTC)
    b = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
    )
    if server:
        b = b.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    return key, b.sign(ca_key, hashes.SHA256())


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = _ca("headroom test CA")
    s_key, s_cert = _leaf(ca_key, ca_cert, "localhost", server=True)
    c_key, c_cert = _leaf(ca_key, ca_cert, "headroom-service", server=False)
    _, other = _ca("an unrelated CA")
    return Pki(
        ca=_write_cert(ca_cert, directory / "ca.pem"),
        server_cert=_write_cert(s_cert, directory / "server.pem"),
        server_key=_write_key(s_key, directory / "server.key"),
        client_cert=_write_cert(c_cert, directory / "client.pem"),
        client_key=_write_key(c_key, directory / "client.key"),
        other_ca=_write_cert(other, directory / "other-ca.pem"),
    )


# --- NATS nkeys and JWTs --------------------------------------------------------------------
def nkey(prefix: int = nkeys.PREFIX_BYTE_USER) -> tuple[str, str]:
    """(seed, public key) of a new nkey pair."""
    seed = nkeys.encode_seed(os.urandom(32), prefix)
    kp = nkeys.from_seed(bytearray(seed))
    return seed.decode(), kp.public_key.decode()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _jwt(issuer_seed: str, claims: dict) -> str:
    claims = {**claims, "iat": int(time.time())}
    claims["jti"] = base64.b32encode(hashlib.sha256(orjson.dumps(claims)).digest()).decode()
    head = _b64(orjson.dumps({"typ": "JWT", "alg": "ed25519-nkey"}))
    body = _b64(orjson.dumps(claims))
    sig = nkeys.from_seed(bytearray(issuer_seed.encode())).sign(f"{head}.{body}".encode())
    return f"{head}.{body}.{_b64(sig)}"


@dataclass(frozen=True)
class Operator:
    operator_jwt: str
    account_public: str
    account_jwt: str
    system_public: str
    system_jwt: str
    creds_file: str

    def server_config(self) -> str:
        """The nats-server config lines of this operator (memory resolver)."""
        return (
            f'operator: "{self.operator_jwt}"\nsystem_account: {self.system_public}\n'
            "resolver: MEMORY\nresolver_preload: {\n"
            f'  {self.account_public}: "{self.account_jwt}"\n'
            f'  {self.system_public}: "{self.system_jwt}"\n}}'
        )


def operator_setup(directory: Path) -> Operator:
    """An operator, one account (JetStream allowed) and one user; the user's .creds file."""
    op_seed, op_pub = nkey(nkeys.PREFIX_BYTE_OPERATOR)
    acc_seed, acc_pub = nkey(nkeys.PREFIX_BYTE_ACCOUNT)
    _, sys_pub = nkey(nkeys.PREFIX_BYTE_ACCOUNT)  # JetStream needs a system account
    user_seed, user_pub = nkey(nkeys.PREFIX_BYTE_USER)
    unlimited = {"subs": -1, "data": -1, "payload": -1}
    op = _jwt(op_seed, {"iss": op_pub, "sub": op_pub, "name": "headroom-test-operator",
                        "nats": {"type": "operator", "version": 2,
                                 "system_account": sys_pub}})  # fmt: skip
    system = _jwt(op_seed, {"iss": op_pub, "sub": sys_pub, "name": "SYS",
                            "nats": {"type": "account", "version": 2}})  # fmt: skip
    acc = _jwt(op_seed, {"iss": op_pub, "sub": acc_pub, "name": "headroom", "nats": {
        "type": "account", "version": 2,
        "limits": {**unlimited, "imports": -1, "exports": -1, "wildcards": True, "conn": -1,
                   "leaf": -1, "mem_storage": -1, "disk_storage": -1, "streams": -1,
                   "consumer": -1},
    }})  # fmt: skip
    user = _jwt(acc_seed, {"iss": acc_pub, "sub": user_pub, "name": "headroom-service",
                           "nats": {"type": "user", "version": 2, "pub": {}, "sub": {},
                                    **unlimited}})  # fmt: skip
    creds = directory / "service.creds"
    creds.write_text(
        "-----BEGIN NATS USER JWT-----\n" + user + "\n------END NATS USER JWT------\n\n"
        "-----BEGIN USER NKEY SEED-----\n" + user_seed + "\n------END USER NKEY SEED------\n"
    )
    creds.chmod(0o600)
    return Operator(op, acc_pub, acc, sys_pub, system, str(creds))


# --- servers -------------------------------------------------------------------------------
def start_secure_nats(config_body: str, *, tls: bool = True) -> embedded.EmbeddedServer:
    """nats-server with JetStream and ``config_body`` (authorization, tls, operator blocks)."""
    port = embedded.free_port()
    work = tempfile.TemporaryDirectory(prefix="headroom-nats-sec-")
    conf = Path(work.name) / "nats.conf"
    conf.write_text(
        f"listen: 127.0.0.1:{port}\njetstream {{ store_dir: {work.name}/js }}\n{config_body}\n"
    )
    cmd = [embedded.find_binary("nats-server"), "-c", str(conf)]
    scheme = "tls" if tls else "nats"
    return embedded.start_server("nats", cmd, f"{scheme}://127.0.0.1:{port}", work)


def nats_tls_block(pki: Pki, *, verify_clients: bool = True) -> str:
    return (
        f'tls {{ cert_file: "{pki.server_cert}", key_file: "{pki.server_key}", '
        f'ca_file: "{pki.ca}", verify: {"true" if verify_clients else "false"}, timeout: 5 }}'
    )


def tls_redis_server() -> str:
    """A redis-server binary built with TLS (the bundled one may not be): the first
    candidate that accepts ``--tls-port``. Fails loudly if there is none."""
    candidates = [embedded.find_binary("redis-server"), "/usr/bin/redis-server",
                  "/usr/local/bin/redis-server"]  # fmt: skip
    for binary in dict.fromkeys(candidates):
        if not Path(binary).is_file():
            continue
        out = subprocess.run(
            [binary, "--port", "0", "--tls-port", "0"],  # listens nowhere: exits at once
            capture_output=True, text=True, timeout=10,
        )  # fmt: skip
        if "Bad directive" not in out.stdout + out.stderr:
            return binary
    raise AssertionError(
        "no redis-server with TLS support found (tried "
        f"{', '.join(dict.fromkeys(candidates))}): install Debian's redis-server"
    )


def start_secure_redis(pki: Pki, user: str, password: str) -> embedded.EmbeddedServer:
    """redis-server on TLS only (client certificates required), the default user off, and
    one ACL user ``user`` with ``password`` allowed everything."""
    port = embedded.free_port()
    work = tempfile.TemporaryDirectory(prefix="headroom-redis-sec-")
    cmd = [
        tls_redis_server(), "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1",
        "--tls-cert-file", pki.server_cert, "--tls-key-file", pki.server_key,
        "--tls-ca-cert-file", pki.ca, "--tls-auth-clients", "yes",
        "--save", "", "--appendonly", "no", "--dir", work.name,
        "--user", "default", "off",
        "--user", user, "on", f">{password}", "~*", "&*", "+@all",
    ]  # fmt: skip
    return embedded.start_server("redis", cmd, f"rediss://127.0.0.1:{port}/0", work)
