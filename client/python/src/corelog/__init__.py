"""corelog: Python client for the corelog durable, replicated event log.

* :class:`corelog.Client` — blocking API (:mod:`corelog.sync`);
* :class:`corelog.aio.Client` — asyncio API (:mod:`corelog.aio`);
* :mod:`corelog.codec` — the wire protocol and record format, sans-IO;
* :mod:`corelog.errors` — one exception class per protocol error code, under
  :class:`CorelogError`.
"""

from . import aio, codec, errors
from .codec import ErrorCode, Expect, ProducerSeq, Record, Role, StreamPos, stream_shard
from .errors import *  # noqa: F401,F403 - the exception classes are part of the top-level API
from .errors import __all__ as _errors_all
from .sync import Client, Consumer, Producer, Subscription, Tail
from .types import Appended, ClientConfig, Event, GroupEvent, Position, ServerInfo, StreamAppended, StreamRead

__version__ = "0.1.0"

__all__ = [
    "aio", "codec", "errors", "Client", "Producer", "Subscription", "Tail", "Consumer", "ClientConfig", "Position",
    "StreamAppended", "Appended", "StreamRead", "ServerInfo", "Event", "GroupEvent", "Record", "StreamPos", "ProducerSeq",
    "Expect", "ErrorCode", "Role", "stream_shard", *_errors_all,
]
