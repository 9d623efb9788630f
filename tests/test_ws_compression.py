"""`pheby.protocol.ws_compression` without sockets: what the server sends, what a client's decoder reads."""

from websockets.extensions.permessage_deflate import PerMessageDeflate
from websockets.frames import Frame, Opcode

from pheby.protocol.ws_compression import MIN_COMPRESSED_BYTES, SERVER_MAX_WINDOW_BITS, ReleasablePerMessageDeflate


def pair() -> tuple[ReleasablePerMessageDeflate, PerMessageDeflate]:
    server = ReleasablePerMessageDeflate(False, False, 10, SERVER_MAX_WINDOW_BITS, {"memLevel": 4})
    client = PerMessageDeflate(False, False, SERVER_MAX_WINDOW_BITS, 10)
    return server, client


def cumulative_texts(count: int) -> list[bytes]:
    words = [f"word{i} " for i in range(count)]
    return [("".join(words[: i + 1])).encode() for i in range(0, count, 20)]


def test_cumulative_frames_cost_little_more_than_their_new_text_and_decode_exactly() -> None:
    server, client = pair()
    texts = cumulative_texts(2000)
    wire = 0
    for text in texts:
        encoded = server.encode(Frame(Opcode.TEXT, text))
        wire += len(encoded.data)
        assert client.decode(encoded).data == text
    assert wire < 3 * len(texts[-1])  # context takeover: each frame mostly refers to the one before
    assert sum(len(t) for t in texts) > 40 * len(texts[-1])


def test_small_frames_go_uncompressed_and_make_no_compressor() -> None:
    server, client = pair()
    small = Frame(Opcode.TEXT, b'{"type":"ready"}')
    encoded = server.encode(small)
    assert encoded == small
    assert not encoded.rsv1
    assert not server.holds_encoder()
    assert client.decode(encoded).data == small.data
    assert len(small.data) < MIN_COMPRESSED_BYTES


def test_small_frames_are_compressed_once_a_compressor_is_held() -> None:
    """A streaming connection's packed append deltas (~35 bytes) find their words in the window."""
    server, client = pair()
    words = " ".join(f"word{i % 50}" for i in range(400)).encode()
    history = server.encode(Frame(Opcode.TEXT, words))
    assert history.rsv1  # the history: a compressor is made
    assert client.decode(history).data == words
    sent = raw = 0
    for index in range(100):
        small = f'["d",7,{index * 18},"{" word" + str(index % 50)} word{(index + 7) % 50}"]'.encode()
        assert len(small) < MIN_COMPRESSED_BYTES
        encoded = server.encode(Frame(Opcode.TEXT, small))
        assert encoded.rsv1
        assert client.decode(encoded).data == small
        sent, raw = sent + len(encoded.data), raw + len(small)
    assert sent < 0.7 * raw


def test_control_frames_make_no_compressor() -> None:
    """The keepalive ping every 30 s (and pong, close) is never compressed: it must not make a compressor,
    which nothing would release (about 22 KiB per idle connection)."""
    server, _ = pair()
    for control in (Frame(Opcode.PING, b"keepalive"), Frame(Opcode.PONG, b""), Frame(Opcode.CLOSE, b"\x03\xe8")):
        assert server.encode(control) == control
        assert not server.holds_encoder()


def test_a_released_compressor_starts_afresh_and_the_client_still_decodes() -> None:
    server, client = pair()
    for index, text in enumerate(cumulative_texts(400)):
        encoded = server.encode(Frame(Opcode.TEXT, text))
        assert encoded.rsv1 == (len(text) >= MIN_COMPRESSED_BYTES)
        assert client.decode(encoded).data == text
        if index % 3 == 2:
            server.release_encoder()
            assert not server.holds_encoder()
