"""The wire format on its own: framing, bytes, config checking, error mapping."""

from __future__ import annotations

import io
import json

import pytest

from sandkit import ErrorCode, SandboxError
from sandkit.agent import protocol as p
from sandkit.runtime.limits import MIB, Limits
from sandkit.runtime.pathmap import WORKSPACE, Mount, PathMapping


def reader_over(data: bytes, max_frame: int = 100, chunk: int = 7) -> p.FrameReader:
    stream = io.BytesIO(data)
    return p.FrameReader(stream.read, max_frame, chunk=chunk)


def frames(reader: p.FrameReader) -> list[object]:
    out: list[object] = []
    while (item := reader.next()) is not None:
        out.append(("oversized", item.head[:12]) if isinstance(item, p.Oversized) else item)
    return out


def test_frames_split_on_newlines_across_chunk_boundaries() -> None:
    data = b'{"a":1}\n{"bb":22}\n\n{"c":3}\n'
    assert frames(reader_over(data, chunk=3)) == [b'{"a":1}', b'{"bb":22}', b"", b'{"c":3}']


def test_an_unterminated_last_frame_is_dropped_at_end_of_stream() -> None:
    assert frames(reader_over(b'{"a":1}\n{"b":')) == [b'{"a":1}']


def test_an_oversized_frame_is_skipped_and_the_stream_goes_on() -> None:
    big = b'{"jsonrpc":"2.0","id":9,' + b"x" * 1000 + b"}\n"
    result = frames(reader_over(big + b'{"ok":1}\n', max_frame=100, chunk=64))
    assert result == [("oversized", big[:12]), b'{"ok":1}']


def test_an_oversized_frame_within_one_chunk_is_reported_too() -> None:
    big = b"y" * 300 + b"\n"
    result = frames(reader_over(big + b"z\n", max_frame=100, chunk=10_000))
    assert result == [("oversized", b"y" * 12), b"z"]


def test_reader_never_buffers_much_more_than_the_limit() -> None:
    chunks = iter([b"q" * 50] * 1000 + [b"\nafter\n"])
    reader = p.FrameReader(lambda _n: next(chunks, b""), max_frame=120)
    first = reader.next()
    assert isinstance(first, p.Oversized)
    assert len(reader._buf) <= 200  # skipping, not accumulating 50 kB
    assert reader.next() == b"after"


@pytest.mark.parametrize(
    "head, expected",
    [
        (b'{"jsonrpc":"2.0","id":17,"method":"x"', 17),
        (b'{"jsonrpc":"2.0","id":"abc","method"', "abc"),
        (b'{"jsonrpc":"2.0", "id" : -3 ,', -3),
        (b'{"method":"x"}', None),
        (b"garbage", None),
    ],
)
def test_find_id_recovers_the_id_from_a_frame_head(head: bytes, expected: object) -> None:
    assert p.find_id(head) == expected


def test_bytes_travel_tagged_at_their_two_places_only() -> None:
    data = bytes(range(256)) * 3
    wire = p.encode_params("write_bytes", {"path": "x", "data": data})
    assert wire["data"] == {"$b64": p.encode_bytes(data)["$b64"]}
    assert json.loads(json.dumps(wire))["data"] == wire["data"]
    assert p.decode_params("write_bytes", wire)["data"] == data
    assert p.decode_result("read_bytes", p.encode_result("read_bytes", data)) == data
    # A dict that looks tagged elsewhere (env of execute) is left alone.
    env = {"$b64": "aGk="}
    assert p.decode_params("execute", {"env": env})["env"] == env
    assert p.decode_result("read_file", {"$b64": "aGk="}) == {"$b64": "aGk="}


def test_untagged_bytes_params_pass_through_for_the_runtime_to_judge() -> None:
    assert p.decode_params("write_bytes", {"data": "text"})["data"] == "text"


@pytest.mark.parametrize("value", [{"$b64": "***"}, {"$b64": 5}, {"$b64": "abc"}])
def test_bad_base64_is_invalid_argument(value: object) -> None:
    with pytest.raises(SandboxError) as info:
        p.decode_params("write_bytes", {"data": value})
    assert info.value.code is ErrorCode.INVALID_ARGUMENT


def mapping() -> PathMapping:
    return PathMapping([Mount(WORKSPACE, "/srv/ws")], WORKSPACE)


def test_config_round_trips_into_a_context() -> None:
    limits = Limits(read_max_lines=7)
    config = p.agent_config(mapping(), limits, True, ["s3cr3t"], ["AWS_SECRET"], "/opt/rg")
    context = p.context_from_config(json.loads(json.dumps(config)))
    assert context.limits == limits
    assert context.mapping.to_dict() == mapping().to_dict()
    assert (context.execute_enabled, context.secrets, context.scrubbed_env, context.rg_path) == (
        True,
        ("s3cr3t",),
        ("AWS_SECRET",),
        "/opt/rg",
    )


@pytest.mark.parametrize(
    "change",
    [
        {"mapping": None},
        {"mapping": {"mounts": "x"}},
        {"mapping": {"mounts": [{"virtual": "/", "real": "/"}]}},
        {"limits": []},
        {"execute_enabled": "yes"},
        {"secrets": "abc"},
        {"secrets": [1]},
        {"rg_path": 3},
        {"surprise": 1},
    ],
)
def test_bad_configs_are_invalid_argument(change: dict[str, object]) -> None:
    config = {**p.agent_config(mapping()), **change}
    with pytest.raises(SandboxError) as info:
        p.context_from_config(config)
    assert info.value.code is ErrorCode.INVALID_ARGUMENT


def test_error_from_wire_prefers_the_sandbox_code() -> None:
    wire = p.error_response(3, p.SANDBOX_ERROR, SandboxError(ErrorCode.READ_ONLY, "ro"))
    error = p.error_from_wire(wire["error"])
    assert (error.code, error.message) == (ErrorCode.READ_ONLY, "ro")
    assert p.error_from_wire({"code": p.METHOD_NOT_FOUND, "message": "m"}).code is (
        ErrorCode.INVALID_ARGUMENT
    )
    assert p.error_from_wire({"code": 1, "data": {"code": "NEW_CODE"}}).code is ErrorCode.INTERNAL
    assert p.error_from_wire("nonsense").code is ErrorCode.INTERNAL


def test_frame_limit_fits_a_maximal_transfer() -> None:
    limits = Limits(transfer_max_bytes=8 * MIB)
    data = b"\xff" * limits.transfer_max_bytes
    frame = p.frame(p.request(1, "write_bytes", p.encode_params("write_bytes", {"data": data})))
    assert len(frame) <= p.max_frame_bytes(limits)
    worst_text = "\x01" * limits.write_max_bytes
    frame = p.frame(p.request(1, "write_file", {"path": "a", "content": worst_text}))
    assert len(frame) <= p.max_frame_bytes(limits)


def test_frames_are_single_ascii_lines() -> None:
    data = p.frame(p.result_response(1, {"text": "a\nb\u2028c\u00e9\ud800"}))
    assert data.endswith(b"\n") and data.count(b"\n") == 1
    assert data.isascii()
    assert json.loads(data)["result"]["text"] == "a\nb\u2028c\u00e9\ud800"
