"""Client configuration: ``base_url``/``baseUrl``, ``token``, ``namespace``.

See docs/clients.md#configuration.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

from syncd.ids import NAMESPACE_RE

ENV_BASE_URL = "SYNCD_BASE_URL"
ENV_TOKEN = "SYNCD_TOKEN"
ENV_NAMESPACE = "SYNCD_NAMESPACE"


@dataclass(frozen=True, slots=True)
class ClientConfig:
    base_url: str
    token: str
    namespace: str

    def __post_init__(self) -> None:
        parts = urlsplit(self.base_url) if isinstance(self.base_url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"base_url must be an http:// or https:// URL, not {self.base_url!r}")
        if parts.query or parts.fragment:
            raise ValueError("base_url must not have a query or fragment")
        if not isinstance(self.namespace, str) or NAMESPACE_RE.fullmatch(self.namespace) is None:
            raise ValueError(
                f"namespace must match [A-Za-z0-9][A-Za-z0-9._-]{{0,127}}, not {self.namespace!r}"
            )
        object.__setattr__(self, "base_url", self.base_url.rstrip("/"))

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any]) -> ClientConfig:
        """From ``{"base_url" | "baseUrl", "token", "namespace"}`` (the JS client spells it ``baseUrl``)."""
        base_url = config.get("base_url", config.get("baseUrl"))
        missing = [
            name
            for name, value in (
                ("base_url", base_url),
                ("token", config.get("token")),
                ("namespace", config.get("namespace")),
            )
            if value is None
        ]
        if missing:
            raise ValueError(f"client config lacks {', '.join(missing)}")
        return cls(str(base_url), config["token"], config["namespace"])

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ClientConfig:
        env = os.environ if env is None else env
        return cls.from_mapping(
            {
                "base_url": env.get(ENV_BASE_URL),
                "token": env.get(ENV_TOKEN),
                "namespace": env.get(ENV_NAMESPACE),
            }
        )

    def crdt_url(self, crdt_id: str, suffix: str = "") -> str:
        segment = quote(crdt_id, safe="")
        if segment in (".", ".."):
            # Valid ids, but dot segments: a URL would drop them (RFC 3986 5.2.4).
            segment = segment.replace(".", "%2E")
        return f"{self.namespace_url}/crdts/{segment}{suffix}"

    @property
    def namespace_url(self) -> str:
        return f"{self.base_url}/v1/namespaces/{self.namespace}"

    @property
    def ws_url(self) -> str:
        scheme, rest = self.base_url.split("://", 1)
        return f"{'wss' if scheme == 'https' else 'ws'}://{rest}/v1/namespaces/{self.namespace}/ws"
