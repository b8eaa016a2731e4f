"""A bearer-token service for a real registry in tests: Distribution's ``auth: token`` realm, made small.

It issues the JWTs Distribution 2.8 verifies (docs/spec/auth/jwt.md): RS256, the
signing certificate in the ``x5c`` header, chaining to the ``rootcertbundle`` the
registry is configured with (the same self-signed certificate). Users are checked
by HTTP Basic; anonymous callers get ``pull`` only when ``anonymous_pull`` is set.
Every token request is recorded (``requests``) so tests can see what was sent.
"""

from __future__ import annotations

import base64
import datetime
import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509.oid import NameOID

SERVICE = "llama-test-registry"
ISSUER = "llama-test-token-issuer"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class TokenServer:
    """Runs on 127.0.0.1; ``realm`` is its URL, ``cert_path`` the registry's ``rootcertbundle``."""

    def __init__(self, root: Path, users: dict[str, str], *, anonymous_pull: bool = False) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.users = users
        self.anonymous_pull = anonymous_pull
        self.requests: list[tuple[str, str | None]] = []
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "llama token test")])
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        self.cert_path = root / "token-cert.pem"
        self.cert_path.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))
        owner = self

        class Handler(BaseHTTPRequestHandler):
            served: ClassVar[TokenServer] = owner

            def do_GET(self) -> None:
                self.served.requests.append((self.path, self.headers.get("Authorization")))
                status, body = self.served.answer(self.path, self.headers.get("Authorization"))
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def realm(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/token"

    def registry_auth(self) -> str:
        """The ``auth:`` block of the registry's config."""
        return (
            f"auth:\n  token:\n    realm: {self.realm}\n    service: {SERVICE}\n"
            f"    issuer: {ISSUER}\n    rootcertbundle: {self.cert_path}\n"
        )

    def answer(self, path: str, authorization: str | None) -> tuple[int, bytes]:
        query = parse_qs(urlsplit(path).query)
        user = self._user(authorization)
        if user is None and (authorization is not None or not self.anonymous_pull):
            return 401, b'{"errors":[{"code":"UNAUTHORIZED"}]}'
        access = []
        for scope in query.get("scope", []):
            kind, _, rest = scope.partition(":")
            name, _, actions = rest.rpartition(":")
            wanted = actions.split(",")
            granted = wanted if user is not None else [a for a in wanted if a == "pull"]
            access.append({"type": kind, "name": name, "actions": granted})
        return 200, json.dumps({"token": self._jwt(user or "", access)}).encode()

    def _user(self, authorization: str | None) -> str | None:
        if not authorization or not authorization.startswith("Basic "):
            return None
        user, _, password = base64.b64decode(authorization[6:]).decode().partition(":")
        return user if self.users.get(user) == password else None

    def _jwt(self, subject: str, access: list[dict[str, Any]]) -> str:
        der = self.cert.public_bytes(serialization.Encoding.DER)
        header = {"typ": "JWT", "alg": "RS256", "x5c": [base64.b64encode(der).decode()]}
        now = int(time.time())
        claims = {
            "iss": ISSUER, "sub": subject, "aud": SERVICE, "exp": now + 300, "nbf": now - 10, "iat": now,
            "jti": uuid.uuid4().hex, "access": access,
        }  # fmt: skip
        signing = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
        signature = self.key.sign(signing.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing}.{_b64(signature)}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
