"""CURVE keys for tests: a key tree like the demo's, ``ROOT/keys/{routers,agents,backends}``,
the ``security`` sections that use it, and keys minted outside the allowlists."""

from __future__ import annotations

import shutil
from pathlib import Path

from fleetwatch import security


class Keys:
    """The routers' shared key is made at once (``router_secret``, ``router`` its
    certificate); ``agents/`` and ``backends/`` are the allowlists, maybe empty."""

    def __init__(self, root: Path):
        self.dir = Path(root) / "keys"
        self.agents_dir, self.backends_dir = self.dir / "agents", self.dir / "backends"
        for d in (self.agents_dir, self.backends_dir):
            d.mkdir(parents=True, exist_ok=True)
        self.router_public, self.router_secret = self.make(
            "routers", "fleet", {"role": "router", "name": "fleet"})
        self.router = security.read_certificate(self.router_secret)

    def make(self, sub: str, name: str, metadata: dict) -> tuple[str, str]:
        """A key pair in ``sub`` (``agents`` or ``backends``: allowed): its two paths."""
        return security.write_certificates(str(self.dir / sub), name, metadata)

    def agent(self, uuid: str, sub: str = "agents") -> str:
        """A key bound to ``uuid`` (in the allowlist unless ``sub`` says otherwise): its
        secret file."""
        return self.make(sub, uuid, {"role": "agent", "uuid": uuid, "name": uuid})[1]

    def backend(self, name: str, sub: str = "backends") -> str:
        return self.make(sub, name, {"role": "backend", "name": name})[1]

    def mint(self, role: str, name: str, uuid: str = "", allow: bool = True
             ) -> tuple[security.Certificate, str]:
        """A key made outside the allowlists (``minted/``), its public file copied into
        the allowlist of ``role`` if ``allow``: its certificate and public file."""
        meta = {"role": role, "name": name, **({"uuid": uuid} if uuid else {})}
        public, secret = self.make("minted", name, meta)
        if allow:
            self.allow(public)
        return security.read_certificate(secret), public

    def allow(self, public: str) -> Path:
        """Copy the public file ``public`` into the allowlist of its role."""
        cert = security.read_certificate(public)
        role_dir = self.agents_dir if cert.metadata.get("role") == "agent" else self.backends_dir
        return Path(shutil.copy(public, role_dir))

    def router_security(self) -> dict:
        """A router's ``security`` section."""
        return {"curve": True, "server_key": self.router_secret,
                "agent_keys": str(self.agents_dir), "backend_keys": str(self.backends_dir)}

    def client(self, secret: str) -> dict:
        """An agent's, sink's or scheduler's ``security`` section with the key ``secret``."""
        return {"curve": True, "key": secret, "router_key": self.router_public}
