"""Fuzz the protocol decoder: headers, message parts, shared-memory descriptors.

Every input either decodes (and then obeys the caps it was checked against) or
raises the protocol's own :class:`ProtocolError`, whose error reply always
encodes; nothing else ever escapes (no RecursionError, OverflowError,
KeyError...). A bounded number of examples runs in the default suite; ``-m slow``
runs many more.
"""

from __future__ import annotations

import json
import math
import os
import uuid

import numpy as np
import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from painted_skin import wire as P

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# ---- strategies -------------------------------------------------------------------------------

hostile_int = st.one_of(st.integers(-3, 10), st.integers(-2**70, 2**70),
                        st.sampled_from([2**63, 2**64, -2**63 - 1, 10**39, 10**40]))
scalar = st.one_of(st.none(), st.booleans(), hostile_int, st.floats(allow_nan=False),
                   st.text(max_size=12))
json_value = st.recursive(scalar, lambda v: st.lists(v, max_size=3)
                          | st.dictionaries(st.text(max_size=6), v, max_size=3), max_leaves=12)
shm_field = st.one_of(
    json_value,
    st.fixed_dictionaries({}, optional={
        "segment": st.one_of(st.text(max_size=50),
                             st.builds(lambda pid, h: f"ps-{pid}-{h}",
                                       st.integers(0, 10**11), st.text("0123456789abcdef",
                                                                       min_size=30,
                                                                       max_size=33)),
                             st.sampled_from(["../../etc/passwd", "/dev/shm/x", "ps-1-"])),
        "offset": hostile_int}))
descriptor = st.one_of(json_value, st.fixed_dictionaries({}, optional={
    "name": st.one_of(st.sampled_from(["depth", "mask", "ref0", "", "x" * 200]), json_value),
    "dtype": st.one_of(st.sampled_from(sorted(P.DTYPES) + ["float64", "object", "<f4", "V8"]),
                       json_value),
    "shape": st.one_of(st.lists(hostile_int, max_size=6), json_value),
    "shm": shm_field}))
header = st.fixed_dictionaries({}, optional={
    "v": st.one_of(st.just(1), json_value), "type": st.sampled_from(sorted(P.ALL_TYPES) + ["x"]),
    "id": json_value, "session": json_value, "frame": hostile_int,
    "arrays": st.one_of(st.lists(descriptor, max_size=5), json_value), "slot": json_value})


def nested(depth: int, inner: bytes = b"1") -> bytes:
    return b"[" * depth + inner + b"]" * depth


raw_header = st.one_of(
    st.binary(max_size=300),
    header.map(lambda h: json.dumps(h).encode()),
    st.builds(lambda d, k: (b'{"v":1,"type":"ping","x":' + nested(d) + b"}") if k
              else (b'{"v":1,"type":"frame","frame":' + b"9" * d + b"}"),
              st.integers(0, 6000), st.booleans()),
    st.builds(lambda lit: b'{"v":1,"type":"open","width":' + lit + b"}",
              st.sampled_from([b"NaN", b"Infinity", b"-Infinity", b"1e999", b"-1e400",
                               b"1" * 4301, b"0.5", b"true"])),
)
message = st.tuples(raw_header, st.lists(st.binary(max_size=256), max_size=6))


# ---- the property -----------------------------------------------------------------------------


def decodes_or_protocol_error(head: bytes, parts: list[bytes], allow_shm: bool) -> None:
    frames = [head, *parts]
    try:
        msg = P.decode(frames, expect=P.CLIENT_TYPES, allow_shm=allow_shm)
    except P.ProtocolError as e:
        assert e.code in {P.E_BAD_MESSAGE, P.E_VERSION, P.E_TOO_BIG, P.E_UNKNOWN_TYPE,
                          P.E_BAD_ARRAY}, e.code
        reply = P.decode(P.error_frames(e, session="s"))  # the answer always encodes
        assert reply.header["code"] == e.code
        return
    assert msg.type in P.CLIENT_TYPES and isinstance(msg.header, dict)
    total = 0
    for a in msg.arrays.values():
        assert a.dtype.name in P.DTYPES and a.ndim <= P.MAX_NDIM
        total += a.nbytes
    for r in msg.shm:
        assert allow_shm and P.SHM_NAME_RE.fullmatch(r.segment)
        assert 0 <= r.offset <= P.MAX_SEGMENT_BYTES
        assert r.nbytes == math.prod(r.shape) * np.dtype(r.dtype).itemsize
        total += r.nbytes
    assert total <= P.MAX_MESSAGE_BYTES


@FAST
@given(message, st.booleans())
def test_decode_fuzz(msg, allow_shm):
    decodes_or_protocol_error(*msg, allow_shm)


@pytest.mark.slow
@SLOW
@given(message, st.booleans())
def test_decode_fuzz_long(msg, allow_shm):
    decodes_or_protocol_error(*msg, allow_shm)


def test_well_formed_messages_still_decode():
    """The fuzz's hostile values must not hide that ordinary messages decode."""
    arrays = {"depth": np.ones((4, 5), np.float32), "mask": np.zeros((4, 5), np.uint8)}
    msg = P.decode([bytes(f) for f in P.encode(P.FRAME, arrays, session="s", frame=2**40,
                                               options={"a": [[[1]]]}, seed=2**63)],
                   expect=P.CLIENT_TYPES)
    assert msg.frame == 2**40 and msg.header["seed"] == 2**63
    np.testing.assert_array_equal(msg.arrays["depth"], arrays["depth"])


# ---- shared-memory reads ------------------------------------------------------------------------

shm_only = pytest.mark.skipif(not P.shm_supported(), reason="shared memory: Linux only")


@pytest.fixture(scope="module", params=["memfd", "file"])
def segment(request):
    seg = P.ShmSegment.create(1 << 16, memfd=request.param == "memfd")
    seg.buf[:] = bytes(range(256)) * 256
    reader = P.ShmSegment.attach(seg.name)
    yield seg, reader
    reader.close()
    seg.close()


def read_or_protocol_error(reader: P.ShmSegment, dtype: str, shape: list[int],
                           offset: int) -> None:
    try:
        a = reader.read(dtype, shape, offset)
    except P.ProtocolError as e:
        assert e.code == P.E_BAD_ARRAY
        return
    assert a.shape == tuple(shape)
    if reader.in_place:  # a sealed memfd: a read-only view of the segment
        assert not a.flags.writeable
    else:  # a /dev/shm file: a private copy, never a view
        assert a.flags.owndata
    assert offset + a.nbytes <= reader.size


@shm_only
@FAST
@given(dtype=st.sampled_from(sorted(P.DTYPES)),
       shape=st.lists(st.integers(0, 300), max_size=3),
       offset=st.integers(-10, (1 << 16) + 10))
def test_shm_read_fuzz(segment, dtype, shape, offset):
    read_or_protocol_error(segment[1], dtype, shape, offset)


@shm_only
@FAST
@given(name=st.one_of(st.text(max_size=60),
                      st.builds(lambda h: f"ps-{os.getpid()}-{h}", st.text("0123456789abcdef",
                                                                           min_size=32,
                                                                           max_size=32)),
                      # any descriptor of this process, under a memfd segment's name
                      st.builds(lambda fd, h: f"psfd-{os.getpid()}-{fd}-{h}",
                                st.integers(0, 64), st.text("0123456789abcdef", min_size=32,
                                                            max_size=32))))
def test_shm_attach_fuzz(name):
    try:
        P.ShmSegment.attach(name).close()
    except P.ProtocolError as e:
        assert e.code == P.E_BAD_ARRAY


@shm_only
def test_shm_read_after_shrink_is_an_error():
    seg = P.ShmSegment.create(1 << 16, memfd=False)
    try:
        reader = P.ShmSegment.attach(seg.name)
        os.truncate(os.path.join(P.SHM_DIR, seg.name), 100)
        with pytest.raises(P.ProtocolError, match="shrank"):
            reader.read("uint8", [1000], 4096)
        assert reader.read_u64(4096) is None
        reader.close()
    finally:
        seg.close()


# ---- recv_capped on a real socket ---------------------------------------------------------------


@pytest.fixture(scope="module")
def pair():
    ctx = zmq.Context()
    router, dealer = ctx.socket(zmq.ROUTER), ctx.socket(zmq.DEALER)
    addr = f"inproc://fuzz-{uuid.uuid4().hex}"
    router.bind(addr)
    dealer.connect(addr)
    yield router, dealer
    router.close(0)
    dealer.close(0)
    ctx.term()


def capped(pair, sizes: list[int], max_bytes: int) -> None:
    router, dealer = pair
    dealer.send_multipart([b"h"] + [b"x" * n for n in sizes])
    assert router.poll(2000)
    try:
        frames = P.recv_capped(router, zmq.NOBLOCK, max_bytes)
    except P.TooBig as e:
        assert e.code == P.E_TOO_BIG and len(e.routing) == 1 and len(e.routing[0]) <= 255
        assert len(sizes) + 1 > P.MAX_ARRAYS + 1 or sum(sizes) + 1 > max_bytes
    else:
        assert len(frames) == len(sizes) + 2  # identity + header + parts
    assert not router.getsockopt(zmq.RCVMORE)  # drained: the next message starts clean


@FAST
@given(sizes=st.lists(st.integers(0, 2048), max_size=P.MAX_ARRAYS + 8),
       max_bytes=st.integers(0, 8192))
def test_recv_capped_fuzz(pair, sizes, max_bytes):
    capped(pair, sizes, max_bytes)
