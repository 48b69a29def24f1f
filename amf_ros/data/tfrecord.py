"""TFRecord files of ``tf.train.Example`` protos, written and read without TensorFlow.

Why: RLDS export must work on a machine without TensorFlow (it is a 1+ GB dependency), and the files must
be byte-compatible with ``tf.data.TFRecordDataset`` + ``tf.io.parse_single_example`` (what TFDS and Octo's
loader use). The formats are small and stable:

* TFRecord record: ``uint64 length | uint32 masked_crc32c(length) | data | uint32 masked_crc32c(data)``
  (little endian; mask = ``((crc >> 15) | (crc << 17)) + 0xa282ead8``).
* ``Example { Features features = 1 }``, ``Features { map<string, Feature> feature = 1 }``,
  ``Feature { oneof { BytesList bytes_list = 1; FloatList float_list = 2; Int64List int64_list = 3 } }``,
  lists hold ``repeated value = 1`` (floats and int64s packed).
"""

from __future__ import annotations

import struct
from typing import BinaryIO, Iterator, Mapping, Sequence

import numpy as np

Feature = tuple[str, object]  # ("bytes", list[bytes]) | ("float", float32 array) | ("int64", int64 array)


# -- crc32c (Castagnoli) -------------------------------------------------------------------------------------
def _make_table() -> list[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _make_table()


def _crc32c_py(data: bytes) -> int:
    crc = 0xFFFFFFFF
    table = _TABLE
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


try:  # a C implementation when installed (pure Python does ~5 MB/s)
    import google_crc32c as _gcrc

    def crc32c(data: bytes) -> int:
        """CRC-32C of ``data``."""
        return int(_gcrc.value(bytes(data)))
except ImportError:  # pragma: no cover - depends on the environment
    crc32c = _crc32c_py


def masked_crc(data: bytes) -> int:
    """TFRecord's masked CRC-32C."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


# -- protobuf wire format ------------------------------------------------------------------------------------
def _varint(value: int) -> bytes:
    value &= 0xFFFFFFFFFFFFFFFF  # negative int64 -> 10-byte two's complement, as protobuf does
    out = bytearray()
    while True:
        bits = value & 0x7F
        value >>= 7
        if value:
            out.append(bits | 0x80)
        else:
            out.append(bits)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return _varint((number << 3) | 2) + _varint(len(payload)) + payload


def _encode_feature(kind: str, values: object) -> bytes:
    if kind == "bytes":
        inner = b"".join(_field(1, bytes(v)) for v in values)  # type: ignore[union-attr]
        return _field(1, inner)
    if kind == "float":
        arr = np.asarray(values, dtype="<f4").reshape(-1)
        return _field(2, _field(1, arr.tobytes()) if arr.size else b"")
    if kind == "int64":
        arr = np.asarray(values, dtype=np.int64).reshape(-1)
        return _field(3, _field(1, b"".join(_varint(int(v)) for v in arr)) if arr.size else b"")
    raise ValueError(f"feature kind must be 'bytes', 'float' or 'int64', got {kind=}")


def encode_example(features: Mapping[str, Feature]) -> bytes:
    """Serialise ``{key: (kind, values)}`` as a ``tf.train.Example`` (keys sorted for reproducible bytes)."""
    entries = b"".join(_field(1, _field(1, key.encode("utf-8")) + _field(2, _encode_feature(*features[key])))
                       for key in sorted(features))
    return _field(1, entries)


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def _fields(buf: bytes) -> Iterator[tuple[int, int, object]]:
    """(field number, wire type, value) of a message; length-delimited values are bytes."""
    pos = 0
    while pos < len(buf):
        tag, pos = _read_varint(buf, pos)
        number, wire = tag >> 3, tag & 7
        if wire == 2:
            n, pos = _read_varint(buf, pos)
            yield number, wire, buf[pos:pos + n]
            pos += n
        elif wire == 0:
            v, pos = _read_varint(buf, pos)
            yield number, wire, v
        elif wire == 5:
            yield number, wire, buf[pos:pos + 4]
            pos += 4
        elif wire == 1:
            yield number, wire, buf[pos:pos + 8]
            pos += 8
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")


def decode_example(data: bytes) -> dict[str, Feature]:
    """Inverse of :func:`encode_example` (also reads Examples written by TensorFlow)."""
    out: dict[str, Feature] = {}
    for number, _, features in _fields(data):
        if number != 1:
            continue
        for _, _, entry in _fields(features):  # type: ignore[arg-type]
            key, value = "", b""
            for n, _, v in _fields(entry):  # type: ignore[arg-type]
                if n == 1:
                    key = bytes(v).decode("utf-8")  # type: ignore[arg-type]
                elif n == 2:
                    value = v  # type: ignore[assignment]
            for kind_no, _, lst in _fields(value):
                if kind_no == 1:
                    out[key] = ("bytes", [bytes(v) for _, _, v in _fields(lst)])  # type: ignore[arg-type]
                elif kind_no == 2:
                    vals: list[float] = []
                    for _, _, v in _fields(lst):  # type: ignore[arg-type]
                        vals.extend(np.frombuffer(v, "<f4").tolist())  # type: ignore[arg-type]
                    out[key] = ("float", np.asarray(vals, dtype=np.float32))
                elif kind_no == 3:
                    ints: list[int] = []
                    for _, w, v in _fields(lst):  # type: ignore[arg-type]
                        if w == 2:
                            pos = 0
                            while pos < len(v):  # type: ignore[arg-type]
                                x, pos = _read_varint(v, pos)  # type: ignore[arg-type]
                                ints.append(x - (1 << 64) if x >= 1 << 63 else x)
                        else:
                            ints.append(int(v))  # type: ignore[arg-type]
                    out[key] = ("int64", np.asarray(ints, dtype=np.int64))
            if key not in out:
                out[key] = ("bytes", [])
    return out


# -- TFRecord framing ----------------------------------------------------------------------------------------
def write_record(fh: BinaryIO, data: bytes) -> int:
    """Append one record; returns the bytes written."""
    header = struct.pack("<Q", len(data))
    fh.write(header + struct.pack("<I", masked_crc(header)) + data + struct.pack("<I", masked_crc(data)))
    return len(data) + 16


def tfrecord_bytes(records: Sequence[bytes]) -> bytes:
    """A whole TFRecord file in memory."""
    import io

    buf = io.BytesIO()
    for r in records:
        write_record(buf, r)
    return buf.getvalue()


def read_records(path: str, verify: bool = True) -> Iterator[bytes]:
    """Records of a TFRecord file; with ``verify`` a CRC mismatch raises ValueError."""
    with open(path, "rb") as fh:
        index = 0
        while True:
            header = fh.read(12)
            if not header:
                return
            if len(header) < 12:
                raise ValueError(f"{path}: truncated record header at record {index}")
            (length,), (hcrc,) = struct.unpack("<Q", header[:8]), struct.unpack("<I", header[8:])
            if verify and masked_crc(header[:8]) != hcrc:
                raise ValueError(f"{path}: bad length CRC at record {index}")
            data = fh.read(length)
            footer = fh.read(4)
            if len(data) < length or len(footer) < 4:
                raise ValueError(f"{path}: truncated record {index}")
            if verify and masked_crc(data) != struct.unpack("<I", footer)[0]:
                raise ValueError(f"{path}: bad data CRC at record {index}")
            yield data
            index += 1
