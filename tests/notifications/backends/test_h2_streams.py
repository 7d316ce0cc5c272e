"""The lean client's h2 connection counts and checks as h2 does.

Two h2 state machines (the client's `_H2Connection` and a plain h2 server) talk through memory. The
count of open streams: streams are left in every state a client's stream can be in; then the count and
its pruning are compared with h2's own `_open_streams`, on a twin connection driven the same way. The
answers' header checks: what the client looks up instead of checking again, it refuses exactly as
h2 does.
"""

import h2.config
import h2.connection
import h2.errors
import h2.exceptions
import h2.settings
import h2.stream
import pytest

from notifications.backends.h2transport import _H2Connection

REQUEST = [(b":method", b"POST"), (b":scheme", b"https"), (b":authority", b"x"), (b":path", b"/")]
ANSWER = [(b":status", b"200")]


def _pass(source, target):
    """Hand what `source` framed to `target`; return the events it raised."""
    data = source.data_to_send()
    return target.receive_data(data) if data else []


def _scenario(kind):
    client = kind(config=h2.config.H2Configuration(client_side=True, header_encoding=None))
    server = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=False, header_encoding=None))
    client.initiate_connection()
    server.initiate_connection()
    server.update_settings({h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 1000})
    for _ in range(3):
        _pass(client, server)
        _pass(server, client)

    def open_stream(end_stream):
        stream_id = client.get_next_available_stream_id()
        client.send_headers(stream_id, REQUEST, end_stream=end_stream)
        _pass(client, server)
        return stream_id

    states = {}
    states["open"] = open_stream(False)
    states["half-closed (local)"] = open_stream(True)
    answered_early = open_stream(False)  # the server answers before the request's body ended
    server.send_headers(answered_early, ANSWER, end_stream=True)
    _pass(server, client)
    states["half-closed (remote)"] = answered_early
    done = open_stream(True)
    server.send_headers(done, ANSWER, end_stream=True)
    _pass(server, client)
    states["closed (answered)"] = done
    reset = open_stream(True)
    client.reset_stream(reset)
    states["closed (reset by us)"] = reset
    refused = open_stream(True)
    server.reset_stream(refused, error_code=h2.errors.ErrorCodes.REFUSED_STREAM)
    _pass(server, client)
    states["closed (reset by the peer)"] = refused
    for _ in range(5):
        open_stream(True)  # more in flight, as a window keeps them
    return client, states


def test_open_stream_count__is_h2s_for_every_state_a_stream_can_be_in():
    ours, states = _scenario(_H2Connection)
    theirs, same_states = _scenario(h2.connection.H2Connection)
    assert states == same_states
    assert {i: s.state_machine.state for i, s in ours.streams.items()} == {
        i: s.state_machine.state for i, s in theirs.streams.items()
    }
    counts = [ours._open_streams(1), ours._open_streams(0)]
    h2s = h2.connection.H2Connection._open_streams
    expected = [h2s(theirs, 1), h2s(theirs, 0)]
    assert counts == expected == [8, 0]  # open, both half-closed and the five in flight; none from the server
    assert sorted(ours.streams) == sorted(theirs.streams)  # the same closed streams pruned
    assert ours._closed_streams == theirs._closed_streams
    assert set(ours._closed_streams) >= {states["closed (answered)"], states["closed (reset by us)"]}


def _pair(kind):
    """A client (`kind`) and a server that frames whatever headers it is given, past the handshake."""
    client = kind(config=h2.config.H2Configuration(client_side=True, header_encoding=None))
    server = h2.connection.H2Connection(
        config=h2.config.H2Configuration(
            client_side=False, header_encoding=None, validate_outbound_headers=False, normalize_outbound_headers=False
        )
    )
    client.initiate_connection()
    server.initiate_connection()
    for _ in range(3):
        _pass(client, server)
        _pass(server, client)
    return client, server


def _answered(client, server, *blocks):
    """Open a stream, have the server answer it with each header block in turn (the last ends it), and
    return the header lists the client's events carried; h2's refusal is raised."""
    stream_id = client.get_next_available_stream_id()
    client.send_headers(stream_id, REQUEST, end_stream=True)
    _pass(client, server)
    seen = []
    for i, block in enumerate(blocks):
        server.send_headers(stream_id, block, end_stream=i == len(blocks) - 1)
        seen += [[tuple(h) for h in e.headers] for e in _pass(server, client) if hasattr(e, "headers") and e.headers]
    return seen


GOOD = [(b":status", b"200"), (b"content-type", b"application/json"), (b"vary", b"Origin")]
MALFORMED = {
    "upper-case name": [(b":status", b"200"), (b"Content-Type", b"application/json")],
    "connection header": [(b":status", b"200"), (b"connection", b"close")],
    "te header": [(b":status", b"200"), (b"te", b"gzip")],
    "request pseudo-header": [(b":status", b"200"), (b":path", b"/")],
    "pseudo-header after a field": [(b"vary", b"Origin"), (b":status", b"200")],
    "empty name": [(b":status", b"200"), (b"", b"x")],
    "NUL in a value": [(b":status", b"200"), (b"vary", b"Or\x00igin")],
    "no status": [(b"content-type", b"application/json")],
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_a_malformed_answer_is_refused_after_good_ones_with_the_same_fields(name):
    # The client looks up header lists h2 already checked: answers that repeat must not open a way past
    # h2's checks for one that differs, and it must refuse exactly what h2 itself refuses.
    for kind in (_H2Connection, h2.connection.H2Connection):
        client, server = _pair(kind)
        for _ in range(3):
            assert _answered(client, server, GOOD) == [GOOD]
        with pytest.raises(h2.exceptions.ProtocolError):
            _answered(client, server, MALFORMED[name])


def test_fields_checked_as_an_answer_are_checked_again_as_trailers():
    # The same list under other flags (trailers may not carry pseudo-headers) is checked again.
    for kind in (_H2Connection, h2.connection.H2Connection):
        client, server = _pair(kind)
        with_status = [(b":status", b"200"), (b"grpc-status", b"0")]
        assert _answered(client, server, with_status) == [with_status]
        with pytest.raises(h2.exceptions.ProtocolError):
            _answered(client, server, with_status, with_status)


_SENDING = (h2.stream.StreamState.OPEN, h2.stream.StreamState.HALF_CLOSED_REMOTE)


def _walk(kind, seed):
    """Open, answer, reset and end streams in a seeded random order; the open count after every step."""
    import random

    rng = random.Random(seed)
    client, server = _pair(kind)
    server.update_settings({h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: 1000})
    _pass(server, client)
    _pass(client, server)
    ids: list[int] = []
    counts = []
    for _ in range(400):
        step = rng.choice(
            ["open", "open", "open", "answer", "answer", "reset by us", "reset by the peer", "end", "trailers"]
        )
        live = [i for i in ids if client.streams.get(i) is not None]
        target = rng.choice(live) if live else None
        try:
            if step == "open" or target is None:
                stream_id = client.get_next_available_stream_id()
                client.send_headers(stream_id, REQUEST, end_stream=rng.random() < 0.5)
                ids.append(stream_id)
            elif step == "answer":
                server.send_headers(target, ANSWER, end_stream=True)
            elif step == "reset by us":
                client.reset_stream(target)
            elif step == "trailers":  # HEADERS on a stream already open: ends it if the peer has ended its side
                theirs = server.streams.get(target)
                if client.streams[target].state_machine.state in _SENDING and theirs is not None and theirs.open:
                    client.send_headers(target, [(b"x-checksum", b"1")], end_stream=True)
            elif step == "reset by the peer":
                server.reset_stream(target, error_code=h2.errors.ErrorCodes.REFUSED_STREAM)
            else:
                client.send_data(target, b"x", end_stream=True)
        except h2.exceptions.StreamClosedError:
            pass  # the step does not apply to that stream's state; both connections refuse it alike
        except h2.exceptions.ProtocolError:
            pass
        counts.append((client.open_outbound_streams, len(client.streams)))  # before either side reads a byte
        _pass(client, server)
        _pass(server, client)
        counts.append((client.open_outbound_streams, client.open_outbound_streams, len(client.streams)))
    return counts


@pytest.mark.parametrize("seed", range(5))
def test_the_count_is_h2s_after_every_step(seed):
    # After every call that can change a stream's state, in any order, the client's count (and its
    # pruning) must be what h2's own walk gives.
    assert _walk(_H2Connection, seed) == _walk(h2.connection.H2Connection, seed)


def test_header_lists_that_do_not_come_back_do_not_stop_the_look_ups():
    # A provider's date moves on every second: each second's answers are a new list. Once the memo
    # is full of lists that no longer come back, the new ones must still be looked up.
    client, server = _pair(_H2Connection)
    for second in range(200):
        fields = [(b":status", b"200"), (b"date", b"second %d" % second)]
        for _ in range(2):
            assert _answered(client, server, fields) == [fields]
    assert any(dict(key[0]).get(b"date") == b"second 199" for key in client.checked_headers)
    assert len(client.checked_headers) <= 64


def _counts_frame_by_frame(kind):
    """Two answers that end two streams, read in one `receive_data`; the open count asked after each frame."""
    client, server = _pair(kind)
    for _ in range(3):
        client.send_headers(client.get_next_available_stream_id(), REQUEST, end_stream=True)
    _pass(client, server)
    assert client.open_outbound_streams == 3  # counted (and, on ours, kept) before the read
    seen = []
    receive_frame = client._receive_frame

    def counting(frame):
        frames_and_events = receive_frame(frame)
        seen.append(client.open_outbound_streams)
        return frames_and_events

    client._receive_frame = counting
    server.send_headers(1, ANSWER, end_stream=True)
    server.send_headers(3, ANSWER, end_stream=True)
    client.receive_data(server.data_to_send())
    return seen, client.open_outbound_streams


def test_a_count_asked_in_the_middle_of_a_read_is_not_kept_for_the_rest_of_it():
    # States change frame by frame inside `receive_data`: a count taken after the first answer must not
    # stand for the count after the second.
    assert _counts_frame_by_frame(_H2Connection) == _counts_frame_by_frame(h2.connection.H2Connection)
    assert _counts_frame_by_frame(_H2Connection) == ([2, 1], 1)
