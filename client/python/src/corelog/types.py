"""Plain result types and the client configuration (shared by the sync and asyncio APIs)."""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass, field
from typing import Any, Dict, List, NamedTuple, Optional

from .codec import Leadership, Record, Role
from .errors import ConfigError

__all__ = ["Position", "StreamAppended", "Appended", "StreamRead", "ServerInfo", "Event", "GroupEvent", "ClientConfig"]


class Position(NamedTuple):
    """Where an event was stored."""

    shard: int
    offset: int


class StreamAppended(NamedTuple):
    """A stream append that was written: ``(shard, offset, version)``."""

    shard: int
    offset: int
    #: The event's version in its stream (0 for the stream's first event).
    version: int

    @property
    def position(self) -> Position:
        return Position(self.shard, self.offset)


class Appended(NamedTuple):
    """A successful idempotent append (:class:`~corelog.aio.Producer`)."""

    shard: int
    offset: int
    sequence: int
    #: The shard had it already (an earlier attempt was written): this is that position.
    duplicate: bool
    #: The event's stream version (``append_to``), else ``None``.
    version: Optional[int]

    @property
    def position(self) -> Position:
        return Position(self.shard, self.offset)


@dataclass(frozen=True)
class StreamRead:
    """Events read from one stream."""

    #: In version order; each carries ``record.stream`` (name, version).
    events: List[Record]
    #: The version to read from next.
    next_version: int
    #: Committed events in the stream when this was read (read on while below).
    end_version: int


@dataclass(frozen=True)
class ServerInfo:
    """What a node said in its ``HelloOk``."""

    shard: int
    shard_count: int
    role: Role
    epoch: int
    version: int
    addr: str
    #: Protocol version 3: the node's view of leadership (lease, newest epoch, state).
    leadership: Optional[Leadership] = None


@dataclass(frozen=True)
class Event:
    """One event of a subscription, with the shard it came from."""

    shard: int
    record: Record


@dataclass(frozen=True)
class GroupEvent:
    """One event delivered to a consumer group's member: the shard it came from, the
    generation of the assignment that delivered it, and the record (always of a stream)."""

    shard: int
    gen: int
    record: Record

    @property
    def offset(self) -> int:
        """Its offset in the shard's log."""
        return self.record.offset

    @property
    def stream(self) -> str:
        """The stream's name."""
        assert self.record.stream is not None
        return self.record.stream.name

    @property
    def version(self) -> int:
        """Its version in the stream (0 for the stream's first event)."""
        assert self.record.stream is not None
        return self.record.stream.version

    @property
    def payload(self) -> bytes:
        return self.record.payload


@dataclass
class ClientConfig:
    """How to reach the nodes: mTLS (the default; ``ca``, ``cert``, ``key`` are PEM files,
    as written by ``corelog certs``) or plaintext (``insecure=True``, only against a server
    started with ``--insecure``). ``certs`` is a shortcut for a ``corelog certs --out``
    directory (``ca.pem``, ``client.pem``, ``client.key``). Times are in seconds. The
    files are loaded here: a missing or unreadable one, or a bad value, raises
    :class:`~corelog.errors.ConfigError` naming it."""

    ca: Optional[str] = None
    cert: Optional[str] = None
    key: Optional[str] = None
    certs: Optional[str] = None
    server_name: str = "localhost"
    insecure: bool = False
    #: How long an append keeps looking for a leader that takes it (nothing written).
    failover_timeout: float = 5.0
    #: How long a request waits for its answer (then: outcome unknown).
    request_timeout: float = 30.0
    #: TCP + TLS + HelloOk, per address.
    connect_timeout: float = 3.0
    _ctx: Optional[ssl.SSLContext] = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.certs is not None:
            if not os.path.isdir(self.certs):
                raise ConfigError(f"certs={self.certs!r} is not a directory (want a 'corelog certs --out' "
                                  "directory with ca.pem, client.pem, client.key)")
            self.ca = self.ca or os.path.join(self.certs, "ca.pem")
            self.cert = self.cert or os.path.join(self.certs, "client.pem")
            self.key = self.key or os.path.join(self.certs, "client.key")
        if not self.insecure and not self.ca:
            raise ConfigError("mTLS needs ca (and cert, key), or certs=DIR; or insecure=True")
        for name in ("failover_timeout", "request_timeout", "connect_timeout"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise ConfigError(f"{name}={v!r}: a number of seconds above 0")
        if not isinstance(self.server_name, str) or not self.server_name:
            raise ConfigError(f"server_name={self.server_name!r}: the name the nodes' certificates carry")
        if not self.insecure:
            self.ssl_context()

    @classmethod
    def of(cls, config: Optional["ClientConfig"] = None, **kwargs: Any) -> "ClientConfig":
        """``config`` as given, or one made of the keyword settings (not both)."""
        if config is not None:
            if kwargs:
                raise TypeError("give either config or keyword settings, not both")
            return config
        return cls(**kwargs)

    def ssl_context(self) -> Optional[ssl.SSLContext]:
        """TLS 1.3 client context trusting ``ca`` and presenting ``cert``/``key``."""
        if self.insecure:
            return None
        if self._ctx is None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.minimum_version = ssl.TLSVersion.TLSv1_3
            for what, path in (("ca", self.ca), ("cert", self.cert), ("key", self.key)):
                if path is not None and not os.path.isfile(path):
                    raise ConfigError(f"{what}={path!r}: no such file")
            try:
                ctx.load_verify_locations(cafile=self.ca)
            except (OSError, ssl.SSLError) as e:
                raise ConfigError(f"ca={self.ca!r}: not a PEM certificate file ({e})") from None
            if self.cert:
                try:
                    ctx.load_cert_chain(self.cert, self.key)
                except (OSError, ssl.SSLError) as e:
                    raise ConfigError(f"cert={self.cert!r}, key={self.key!r}: not a matching PEM certificate "
                                      f"and key ({e})") from None
            ctx.check_hostname = True
            self._ctx = ctx
        return self._ctx


def settings(kwargs: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in kwargs.items() if v is not None}
