"""Prometheus remote write 1.0 on the wire: the WriteRequest, snappy, the headers.

The messages are Prometheus' own (prompb/types.proto, prompb/remote.proto), the fields remote
write 1.0 needs::

    message Label      { string name = 1; string value = 2; }
    message Sample     { double value = 1; int64 timestamp = 2; }   // ms since the epoch
    message TimeSeries { repeated Label labels = 1; repeated Sample samples = 2; }
    message WriteRequest { repeated TimeSeries timeseries = 1; }

built at import from a ``FileDescriptorProto`` in a pool of their own (Google's protobuf
runtime, no protoc, no generated code; the OpenTelemetry messages in the default pool are
not touched). A sample is queued as its TimeSeries, encoded, so the queue holds bytes.
Protobuf encodes a message as the concatenation of its fields, and a repeated message field
as one (tag, length, bytes) item after another, so a TimeSeries is its labels' items
(:func:`head`, encoded once per series by the runtime and kept by the caller) followed by
its one Sample's item (:func:`series`), and a WriteRequest the items of its TimeSeries
(:func:`write_request`): nothing is decoded or built again to send. ``WriteRequest.
FromString`` reads the result back as the same request (tests/unit/
test_remote_write_queue.py). Labels are sorted by name, as receivers require.

The body is compressed with snappy's *block* format (``cramjam.snappy.compress_raw``: the
framed format is refused, ``snappy: corrupt input``) and sent with :data:`HEADERS`.
"""

from __future__ import annotations

import cramjam
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

#: what every request says of itself (remote write 1.0)
HEADERS = {"Content-Type": "application/x-protobuf", "Content-Encoding": "snappy",
           "X-Prometheus-Remote-Write-Version": "0.1.0"}

_F = descriptor_pb2.FieldDescriptorProto
#: message -> its fields: (name, number, type, label, message type or None)
_MESSAGES = {
    "Label": [("name", 1, _F.TYPE_STRING, _F.LABEL_OPTIONAL, None),
              ("value", 2, _F.TYPE_STRING, _F.LABEL_OPTIONAL, None)],
    "Sample": [("value", 1, _F.TYPE_DOUBLE, _F.LABEL_OPTIONAL, None),
               ("timestamp", 2, _F.TYPE_INT64, _F.LABEL_OPTIONAL, None)],
    "TimeSeries": [("labels", 1, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, ".prometheus.Label"),
                   ("samples", 2, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, ".prometheus.Sample")],
    "WriteRequest": [("timeseries", 1, _F.TYPE_MESSAGE, _F.LABEL_REPEATED,
                      ".prometheus.TimeSeries")],
}


def _classes() -> dict[str, type]:
    fdp = descriptor_pb2.FileDescriptorProto(name="fleetwatch/prompb_remote.proto",
                                             package="prometheus", syntax="proto3")
    for name, fields in _MESSAGES.items():
        msg = fdp.message_type.add(name=name)
        for field, number, type_, label, type_name in fields:
            f = msg.field.add(name=field, number=number, type=type_, label=label)
            if type_name:
                f.type_name = type_name
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(
        f"prometheus.{name}")) for name in _MESSAGES}


_CLASSES = _classes()
Label, Sample = _CLASSES["Label"], _CLASSES["Sample"]
TimeSeries, WriteRequest = _CLASSES["TimeSeries"], _CLASSES["WriteRequest"]


def head(labels: tuple[tuple[str, str], ...]) -> bytes:
    """A TimeSeries' labels, encoded (``labels`` sorted by name, ``__name__`` among them)."""
    return TimeSeries(labels=[Label(name=n, value=v) for n, v in labels]).SerializeToString()


def series(head_: bytes, value: float, ts_ms: int) -> bytes:
    """The TimeSeries of one sample of the series whose labels :func:`head` encoded."""
    sample = Sample(value=value, timestamp=ts_ms).SerializeToString()
    return head_ + b"\x12" + _varint(len(sample)) + sample


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(0x80 | (n & 0x7F))
        n >>= 7
    out.append(n)
    return bytes(out)


def write_request(encoded: list[bytes]) -> bytes:
    """The WriteRequest of these encoded TimeSeries (:func:`series`), encoded."""
    return b"".join(b"\x0a" + _varint(len(ts)) + ts for ts in encoded)


def compress(body: bytes) -> bytes:
    """``body`` in snappy's block format, as remote write wants it."""
    return bytes(cramjam.snappy.compress_raw(body))


def decompress(body: bytes) -> bytes:
    return bytes(cramjam.snappy.decompress_raw(body))
