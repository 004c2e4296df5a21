"""The asyncio client.

.. code-block:: python

    import asyncio, corelog.aio

    async def main():
        async with corelog.aio.Client("127.0.0.1:19400,127.0.0.1:19500", certs="D/certs") as c:
            pos = await c.append(b"Hello World")
            print(await c.read(pos.shard, pos.offset))

    asyncio.run(main())

Behaviour mirrors the Rust client (``client/src/client/``, docs/protocol.md §6):

* one connection carries many requests at once (pipelined; answers matched by
  ``req_id``); :meth:`Client.append_many` or ``asyncio.gather`` of :meth:`Client.append`
  keep many in flight;
* several nodes (``"A,B"``): connecting tries them in order; an append follows
  leadership for up to ``failover_timeout`` (back-off 20 ms doubling to 100 ms, or a
  refusal's retry hint) where nothing was written, by the rules of docs/protocol.md §6.3
  (``_leadership``): ``NotLeader`` to the named leader (even one not in the list) unless
  that name is from an older epoch than one seen or went silent, the same node again when
  no leader holds a live lease, else ``Unavailable``, ``Fenced``, no node reachable, the
  connection closed before the request was handed over: the next node. An append whose
  connection broke after it was sent, that got no answer in ``request_timeout``, whose
  connection was abandoned (silent for a whole lease, or its node no longer leading with
  a live lease: :class:`~corelog.errors.Abandoned`), or that was answered
  ``OutcomeUnknown`` / ``ReplicationTimeout`` is **not** re-sent (it could be stored
  twice): the error's ``outcome`` is ``"unknown"``. The idempotent :class:`Producer`
  re-sends those safely;
* reads, tails and stream requests go to the shard's direct port (client port + 1 +
  shard); a stream lives on shard ``FNV-1a-64(name) % shard_count`` (``shard_count``
  from the node's ``HelloOk``).

The implementation is split over private modules, all re-exported here (import from
``corelog.aio``): ``_connection`` (:class:`Connection`, answer parsing), ``_client``
(:class:`Client`: connecting, leader following, reads, trims, streams), ``_producer``
(:class:`Producer`), ``_push`` (:class:`Tail`, :class:`Subscription`) and ``_group``
(:class:`Consumer`, a consumer group's member).
"""

from __future__ import annotations

from ._client import Client, connect
from ._connection import WINDOW, Connection
from ._group import Consumer
from ._producer import Producer
from ._push import Subscription, Tail

# Private helpers, importable from here as before the split (tests and tools use some).
from ._connection import (  # noqa: F401 - re-exported
    _BACKOFF_MAX as _BACKOFF_MAX, _BACKOFF_START as _BACKOFF_START, _HIGH_WATER as _HIGH_WATER, Addrs as Addrs,
    _check_name as _check_name, _check_payload as _check_payload, _close_writer as _close_writer,
    _open_stream as _open_stream, _read_frame as _read_frame, _records as _records, _response as _response,
    _why as _why,
)
from ._producer import _retried as _retried  # noqa: F401 - re-exported

__all__ = ["Client", "Producer", "Tail", "Subscription", "Consumer", "Connection", "WINDOW", "connect"]

# The public classes and function present themselves as corelog.aio's, where they are documented.
for _o in (Client, Producer, Tail, Subscription, Consumer, Connection, connect):
    _o.__module__ = __name__
del _o

