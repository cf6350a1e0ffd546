"""CurveZMQ keys for the learner's sockets: encryption plus an allow-list of actor public keys.

Make keys (one pair for the learner, one per actor or per trusted machine)::

    python -m protocol.security keygen KEYDIR learner
    python -m protocol.security keygen KEYDIR actor1

Each call writes ``KEYDIR/NAME.key`` (public, shareable) and ``KEYDIR/NAME.key_secret`` (secret,
mode 0600). Then

* the learner loads ``ServerKeys.load("KEYDIR/learner.key_secret", ALLOWED_DIR)`` where ALLOWED_DIR
  holds a copy of every admitted actor's ``NAME.key``; only those actors get in;
* an actor runs ``python -m actor --learner tcp://HOST:PORT --server-key learner.key
  --key actor1.key_secret``.

A CURVE server alone admits any client that knows the server's public key; the allow-list is
enforced by a ZAP handler (``ServerKeys.start_authenticator(ctx)``) on the same zmq.Context as the
server sockets. ``apply_server`` also sets ZAP_ENFORCE_DOMAIN, so a server whose authenticator was
never started refuses every client instead of admitting them all. Stop the authenticator
(``ServerKeys.stop()``) before ``ctx.term()``, or term() waits for its sockets forever.

Imports pyzmq only.
"""
from __future__ import annotations

import argparse
import datetime
import ipaddress
import logging
import os
import stat
import sys
from pathlib import Path

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator
from zmq.utils import z85

from protocol.files import atomic_write

log = logging.getLogger(__name__)

ZAP_DOMAIN = "ppo-cluster"
PUBLIC_SUFFIX = ".key"
SECRET_SUFFIX = ".key_secret"
KEYGEN_COMMAND = "python -m protocol.security keygen KEYDIR NAME"


# ---------------------------------------------------------------- key files

def _cert_text(kind: str, public_key: bytes, secret_key: bytes | None) -> str:
    lines = [
        f"#   ****  Generated on {datetime.datetime.now():%Y-%m-%d %H:%M:%S} by ppo-cluster  ****",
        f"#   ZeroMQ CURVE {kind} Certificate",
        "#   Read by zmq.auth.load_certificate. "
        + ("DO NOT share this file." if secret_key else "Safe to share."),
        "",
        "metadata",
        "curve",
        f'    public-key = "{public_key.decode("ascii")}"',
    ]
    if secret_key is not None:
        lines.append(f'    secret-key = "{secret_key.decode("ascii")}"')
    return "\n".join(lines) + "\n"


def generate_keypair(directory: str | os.PathLike, name: str, overwrite: bool = False) -> tuple[Path, Path]:
    """Write DIRECTORY/NAME.key (public, 0644) and DIRECTORY/NAME.key_secret (secret, 0600).

    Returns (public_path, secret_path). Refuses to replace existing files unless overwrite=True.
    """
    if not name or name != Path(name).name or name.startswith(".") or name.endswith(PUBLIC_SUFFIX):
        raise ValueError(f"key name must be a plain file name without suffix, got {name!r}")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    public_path, secret_path = directory / f"{name}{PUBLIC_SUFFIX}", directory / f"{name}{SECRET_SUFFIX}"
    if not overwrite:
        for p in (public_path, secret_path):
            if p.exists():
                raise FileExistsError(f"{p} already exists; refusing to replace a key "
                                      "(--force or overwrite=True replaces it)")
    public_key, secret_key = zmq.curve_keypair()
    atomic_write(secret_path, _cert_text("Secret", public_key, secret_key), 0o600)
    atomic_write(public_path, _cert_text("Public", public_key, None), 0o644)
    return public_path, secret_path


def _check_z85_key(key: bytes | None, what: str, path: Path) -> bytes:
    if not key:
        raise ValueError(f"key file {path} has no {what}")
    try:
        ok = len(key) == 40 and len(z85.decode(key)) == 32
    except Exception:  # noqa: BLE001 - z85.decode raises assorted errors on garbage
        ok = False
    if not ok:
        raise ValueError(f"key file {path}: {what} is not a 40-character Z85 CURVE key")
    return key


def _read_cert(path: str | os.PathLike, need_secret: bool) -> tuple[bytes, bytes | None]:
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"key file {path} does not exist or is not a file "
                         f"(make keys with: {KEYGEN_COMMAND})")
    try:
        public_key, secret_key = zmq.auth.load_certificate(path)
    except (OSError, ValueError, IndexError, UnicodeError) as exc:
        raise ValueError(f"key file {path} is not a readable CURVE certificate: {exc}") from None
    public_key = _check_z85_key(public_key, "public-key", path)
    if not need_secret:
        return public_key, None
    if secret_key is None:
        raise ValueError(f"key file {path} has no secret-key: pass the {SECRET_SUFFIX} file, not the "
                         f"{PUBLIC_SUFFIX} one")
    secret_key = _check_z85_key(secret_key, "secret-key", path)
    if zmq.curve_public(secret_key) != public_key:
        raise ValueError(f"key file {path}: public-key does not belong to its secret-key")
    if path.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning("secret key file %s is readable by other users; chmod 600 it", path)
    return public_key, secret_key


# ---------------------------------------------------------------- server (learner) side

class ServerKeys:
    """The learner's key pair plus the directory of admitted actors' public keys.

    Pass as ``curve=`` to protocol.transport's bind_* functions, and call start_authenticator(ctx)
    on the Context those sockets belong to (once per Context).
    """

    def __init__(self, public_key: bytes, secret_key: bytes, allowed_clients_dir: Path,
                 allowed_clients: frozenset[bytes], zap_domain: str = ZAP_DOMAIN):
        self.public_key = public_key
        self._secret_key = secret_key
        self.allowed_clients_dir = allowed_clients_dir
        self.allowed_clients = allowed_clients  # z85 public keys found at load time
        self.zap_domain = zap_domain
        self._authenticators: list[tuple[zmq.Context, ThreadAuthenticator]] = []

    @classmethod
    def load(cls, secret_key_file: str | os.PathLike, allowed_clients_dir: str | os.PathLike) -> "ServerKeys":
        public_key, secret_key = _read_cert(secret_key_file, need_secret=True)
        allowed_dir = Path(allowed_clients_dir)
        if not allowed_dir.is_dir():
            raise ValueError(f"allowed-clients directory {allowed_dir} does not exist or is not a directory")
        allowed = frozenset(_read_cert(p, need_secret=False)[0]
                            for p in sorted(allowed_dir.glob(f"*{PUBLIC_SUFFIX}")))
        if not allowed:
            raise ValueError(f"allowed-clients directory {allowed_dir} holds no *{PUBLIC_SUFFIX} public "
                             f"keys, so no actor could connect; copy each actor's NAME{PUBLIC_SUFFIX} there")
        return cls(public_key, secret_key, allowed_dir, allowed)

    def __repr__(self) -> str:  # never print the secret key
        return (f"ServerKeys(public_key={self.public_key.decode()!r}, allowed_clients_dir="
                f"{str(self.allowed_clients_dir)!r}, {len(self.allowed_clients)} allowed)")

    def apply_server(self, sock: zmq.Socket) -> None:
        """Make `sock` a CURVE server (call before bind)."""
        sock.setsockopt(zmq.CURVE_SERVER, 1)
        sock.setsockopt(zmq.CURVE_SECRETKEY, self._secret_key)
        sock.setsockopt(zmq.CURVE_PUBLICKEY, self.public_key)
        sock.setsockopt_string(zmq.ZAP_DOMAIN, self.zap_domain)
        try:  # no ZAP handler -> refuse the client (libzmq's default is to admit it)
            sock.setsockopt(zmq.ZAP_ENFORCE_DOMAIN, 1)
        except (AttributeError, zmq.ZMQError):
            log.warning("this libzmq lacks ZAP_ENFORCE_DOMAIN: start the authenticator before binding, "
                        "or any client knowing the server key gets in")

    def start_authenticator(self, ctx: zmq.Context) -> ThreadAuthenticator:
        """Run the ZAP handler admitting only allowed_clients_dir's keys on `ctx` (idempotent per ctx)."""
        for c, auth in self._authenticators:
            if c is ctx:
                return auth
        auth = ThreadAuthenticator(ctx, log=logging.getLogger(f"{__name__}.zap"))
        try:
            auth.start()
        except zmq.ZMQError as exc:
            auth.stop()
            raise RuntimeError(f"cannot start the ZAP authenticator on this context ({exc}); "
                               "only one may run per zmq.Context") from exc
        # pyzmq matches the socket's ZAP domain exactly ('*' only stands for an empty domain),
        # so configure the domain apply_server sets.
        auth.configure_curve(domain=self.zap_domain, location=str(self.allowed_clients_dir))
        self._authenticators.append((ctx, auth))
        log.info("CURVE: admitting %d client key(s) from %s",
                 len(self.allowed_clients), self.allowed_clients_dir)
        return auth

    def stop(self) -> None:
        """Stop every authenticator started here (do it before ctx.term())."""
        while self._authenticators:
            _, auth = self._authenticators.pop()
            auth.stop()

    def __enter__(self) -> "ServerKeys":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


# ---------------------------------------------------------------- client (actor) side

class ClientKeys:
    """An actor's key pair plus the learner's public key; pass as ``curve=`` to connect_*."""

    def __init__(self, public_key: bytes, secret_key: bytes, server_public_key: bytes):
        self.public_key = public_key
        self._secret_key = secret_key
        self.server_public_key = server_public_key

    @classmethod
    def load(cls, secret_key_file: str | os.PathLike,
             server_public_key_file: str | os.PathLike) -> "ClientKeys":
        public_key, secret_key = _read_cert(secret_key_file, need_secret=True)
        server_public_key, _ = _read_cert(server_public_key_file, need_secret=False)
        return cls(public_key, secret_key, server_public_key)

    def __repr__(self) -> str:
        return (f"ClientKeys(public_key={self.public_key.decode()!r}, "
                f"server_public_key={self.server_public_key.decode()!r})")

    def apply_client(self, sock: zmq.Socket) -> None:
        """Make `sock` a CURVE client of the server (call before connect)."""
        sock.setsockopt(zmq.CURVE_SERVERKEY, self.server_public_key)
        sock.setsockopt(zmq.CURVE_PUBLICKEY, self.public_key)
        sock.setsockopt(zmq.CURVE_SECRETKEY, self._secret_key)


# ---------------------------------------------------------------- binding policy

def is_loopback(address: str) -> bool:
    """True for addresses only this machine can reach: ipc://, inproc://, tcp:// on 127/8, ::1, localhost."""
    if address.startswith(("ipc://", "inproc://")):
        return True
    if not address.startswith("tcp://"):
        return False
    rest = address[len("tcp://"):]
    if ";" in rest:  # source;destination form: judge conservatively
        return False
    host = rest.rsplit(":", 1)[0] if ":" in rest else rest
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if host.lower() == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:  # '*', interface names, other host names
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


# ---------------------------------------------------------------- CLI

def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m protocol.security", description="CurveZMQ key tools")
    sub = p.add_subparsers(dest="command", required=True)
    kg = sub.add_parser("keygen", help="write DIR/NAME.key (public) and DIR/NAME.key_secret (secret)")
    kg.add_argument("dir", help="directory for the key files (created if missing)")
    kg.add_argument("name", help="key name, e.g. learner or actor1")
    kg.add_argument("--force", action="store_true", help="replace existing key files")
    args = p.parse_args(argv)
    try:
        public_path, secret_path = generate_keypair(args.dir, args.name, overwrite=args.force)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"public key: {public_path}\nsecret key: {secret_path}  (mode 0600; keep it private)\n")
    print("Use it as\n"
          f"  the learner's key:  ServerKeys.load('{secret_path}', ALLOWED_DIR); give actors {public_path}\n"
          f"  an actor's key:     copy {public_path} into the learner's ALLOWED_DIR, then run\n"
          f"                      python -m actor --learner tcp://HOST:PORT --server-key LEARNER.key "
          f"--key {secret_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
