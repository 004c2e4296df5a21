"""Where things live: the shard that holds a stream, a shard's direct port, and
address lists.
"""

from __future__ import annotations

from typing import List, Tuple, Union

from .wire import _U64


def stream_shard(name: Union[str, bytes], shard_count: int) -> int:
    """The shard that holds a stream: FNV-1a-64 of the name's bytes modulo the node's
    shard count (``stream_shard`` in client/src/codec/request.rs)."""
    if shard_count <= 0:
        raise ValueError("a node has at least one shard")
    raw = name.encode("utf-8") if isinstance(name, str) else name
    h = 0xCBF29CE484222325
    for b in raw:
        h ^= b
        h = (h * 0x100000001B3) % _U64
    return h % shard_count


def split_addrs(addrs: Union[str, List[str], Tuple[str, ...]]) -> List[str]:
    """``"A,B"`` (or a list) -> ``["A", "B"]``."""
    items = addrs.split(",") if isinstance(addrs, str) else list(addrs)
    return [a.strip() for a in items if a.strip()]


def shard_addr(addr: str, shard: int) -> str:
    """The direct address of ``shard`` (client port + 1 + shard) of a node's ``host:port``."""
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"address {addr!r} has no port")
    p = int(port) + 1 + shard
    if p > 0xFFFF:
        raise ValueError("port overflow")
    return f"{host}:{p}"


def host_port(addr: str) -> Tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"address {addr!r} has no port")
    return host.strip("[]"), int(port)
