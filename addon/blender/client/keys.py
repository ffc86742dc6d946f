"""CurveZMQ keys of the backend client: what a client needs to reach a backend that
is not on this machine (the backend refuses unencrypted remote clients).

No bpy import; pyzmq's ``zmq.auth`` is imported only when keys are loaded.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass
class CurveKeys:
    """CurveZMQ keys (Z85 bytes): the client's pair and the server's public key."""

    public: bytes
    secret: bytes
    server_public: bytes

    @classmethod
    def from_files(cls, client_secret_file: str | Path, server_public_file: str | Path
                   ) -> CurveKeys:
        """Load zmq.auth certificates (``*.key_secret`` holds both client keys)."""
        import zmq.auth

        public, secret = zmq.auth.load_certificate(str(client_secret_file))
        server_public, _ = zmq.auth.load_certificate(str(server_public_file))
        if secret is None:
            raise ValueError(f"{client_secret_file} holds no secret key")
        return cls(public, secret, server_public)

    @classmethod
    def from_dir(cls, directory: str | Path) -> CurveKeys:
        """A ``painted-skin keys DIR`` folder: DIR/client.key_secret + DIR/server.key."""
        d = Path(directory)
        return cls.from_files(d / "client.key_secret", d / "server.key")


def load_keys(keys: CurveKeys | str | Path | None) -> CurveKeys | None:
    """``keys`` as given, or loaded from a ``painted-skin keys`` folder."""
    return CurveKeys.from_dir(keys) if isinstance(keys, str | Path) else keys
