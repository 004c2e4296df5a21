"""Consumer-group frames (protocol version 4, ``client/src/codec/group.rs``): a member
joins a group on a shard connection, which then carries the group's pushes
(:class:`GroupAssigned`, :class:`GroupRecords`, :class:`GroupCommitted`) one way and the
member's :class:`GroupCommit` and :class:`GroupHeartbeat` the other.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Dict, Tuple, Type, Union

from .wire import CodecError, MAX_GROUP_K, MAX_GROUP_NAME, MAX_GROUP_PREFIX, MAX_MEMBER_ID, Op
from .frames import _Body, _Fixed, _frame

#: What a join's text fields are, in wire order: (field, length prefix, bound).
_JOIN_TEXT = (("group", "<B", MAX_GROUP_NAME), ("member", "<B", MAX_MEMBER_ID), ("prefix", "<H", MAX_GROUP_PREFIX))


@dataclass(frozen=True)
class GroupJoin:
    """Join ``group`` as ``member`` for the events of every stream whose name starts with
    ``prefix`` (``""``: every stream), in ``k`` buckets per shard (fixed by the group's
    first join; 0: the group's own, or the server's default). Answered by pushes with
    this frame's ``req_id``."""

    group: str
    member: str
    prefix: str = ""
    k: int = 0

    def encode(self, req_id: int = 0) -> bytes:
        body = b""
        for name, size, bound in _JOIN_TEXT:
            raw = getattr(self, name).encode("utf-8")
            if len(raw) > bound:
                raise ValueError(f"{name} of {len(raw)} bytes above maximum {bound}")
            body += struct.pack(size, len(raw)) + raw
        return _frame(Op.GROUP_JOIN, req_id, body + bytes([self.k]))


@dataclass(frozen=True)
class GroupCommit(_Fixed, op=Op.GROUP_COMMIT, layout="<QQ"):
    """Everything delivered to this member below log offset ``next`` of the connection's
    shard is processed. Answered by :class:`GroupCommitted` (or ``StaleGeneration``)."""

    gen: int
    next: int


@dataclass(frozen=True)
class GroupHeartbeat(_Fixed, op=Op.GROUP_HEARTBEAT, layout="<Q"):
    """Keeps the member's session; never answered."""

    gen: int


@dataclass(frozen=True)
class GroupAssigned:
    """A generation opened: the member's buckets as ``(bucket, next)``, where each one's
    delivery starts (:data:`NO_COMMIT`: nothing committed yet). Every
    :class:`GroupRecords` after it belongs to this generation until the next one."""

    gen: int
    shard_count: int
    k: int
    buckets: Tuple[Tuple[int, int], ...] = ()

    def encode(self, req_id: int = 0) -> bytes:
        if len(self.buckets) > MAX_GROUP_K:
            raise ValueError(f"{len(self.buckets)} buckets assigned (at most {MAX_GROUP_K})")
        body = struct.pack("<QHBH", self.gen, self.shard_count, self.k, len(self.buckets))
        body += b"".join(struct.pack("<HQ", bucket, nxt) for bucket, nxt in self.buckets)
        return _frame(Op.GROUP_ASSIGNED, req_id, body)


@dataclass(frozen=True)
class GroupRecords:
    """``count`` records of the member's buckets in offset order (the record encoding, as
    in ``Records``); ``next_offset`` follows the last record read: commit it once they are
    processed."""

    gen: int
    next_offset: int
    count: int
    records: bytes

    def encode(self, req_id: int = 0) -> bytes:
        head = struct.pack("<QQI", self.gen, self.next_offset, self.count)
        return _frame(Op.GROUP_RECORDS, req_id, head + self.records)


@dataclass(frozen=True)
class GroupCommitted(_Fixed, op=Op.GROUP_COMMITTED, layout="<QQQ"):
    """A commit is durable on both nodes, as the record at ``offset`` of the shard."""

    gen: int
    next: int
    offset: int


GroupRequest = Union[GroupJoin, GroupCommit, GroupHeartbeat]
GroupResponse = Union[GroupAssigned, GroupRecords, GroupCommitted]

GROUP_REQUEST_OPS = frozenset((Op.GROUP_JOIN, Op.GROUP_COMMIT, Op.GROUP_HEARTBEAT))
GROUP_RESPONSE_OPS = frozenset((Op.GROUP_ASSIGNED, Op.GROUP_RECORDS, Op.GROUP_COMMITTED))

_FIXED: Dict[int, Type[Union[GroupCommit, GroupHeartbeat, GroupCommitted]]] = {
    cls._OP: cls for cls in (GroupCommit, GroupHeartbeat, GroupCommitted)
}


def parse_group_request(b: _Body) -> GroupRequest:
    """A member's request (op in :data:`GROUP_REQUEST_OPS`), trailing bytes left to the caller."""
    if b.op != Op.GROUP_JOIN:
        return _FIXED[b.op]._parse(b)  # type: ignore[return-value]
    text = []
    for name, size, bound in _JOIN_TEXT:
        (n,) = struct.unpack(size, b.take(struct.calcsize(size)))
        if n > bound:
            raise CodecError(f"bad body for opcode 0x{b.op:02x}: {name} too long")
        try:
            text.append(b.take(n).decode("utf-8"))
        except UnicodeDecodeError:
            raise CodecError(f"bad body for opcode 0x{b.op:02x}: {name} not UTF-8") from None
    return GroupJoin(text[0], text[1], text[2], b.u8())


def parse_group_response(b: _Body) -> GroupResponse:
    """A group push (op in :data:`GROUP_RESPONSE_OPS`), trailing bytes left to the caller."""
    if b.op == Op.GROUP_ASSIGNED:
        gen, shard_count, k, n = b.u64(), b.u16(), b.u8(), b.u16()
        if n > MAX_GROUP_K:
            raise CodecError(f"bad body for opcode 0x{b.op:02x}: more buckets than a group has per shard")
        return GroupAssigned(gen, shard_count, k, tuple((b.u16(), b.u64()) for _ in range(n)))
    if b.op == Op.GROUP_RECORDS:
        return GroupRecords(b.u64(), b.u64(), b.u32(), b.rest())
    return _FIXED[b.op]._parse(b)  # type: ignore[return-value]
