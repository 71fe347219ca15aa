#!/usr/bin/python3
"""Exercise an AMQP 0-9-1 broker with Python pika (1.2) the way applications do.

Usage: /usr/bin/python3 scripts/clients/pika_check.py amqp://guest:guest@127.0.0.1:5690/

Prints one line per check, `ok NAME` or `FAIL NAME: detail`, and exits 1 if
any check failed. Every expectation here was taken from RabbitMQ 3.10.8.
Lines starting with `info` are observations, not checks.
"""

import contextlib
import datetime
import decimal
import logging
import re
import socket
import struct
import sys
import time
import traceback
import uuid

import pika
import pika.spec
from pika.exceptions import (ChannelClosedByBroker, ConnectionClosedByBroker,
                             ProbableAuthenticationError, UnroutableError)

URL = sys.argv[1] if len(sys.argv) > 1 else "amqp://guest:guest@127.0.0.1:5672/"
RUN = uuid.uuid4().hex[:8]
FAILS = []
DUMP = bool(len(sys.argv) > 2 and sys.argv[2] == "--dump")


# --------------------------------------------------------------------------
# pika log capture: anything pika logs at WARNING or above during a check
# that expects a clean run is reported.


class Capture(logging.Handler):
    def __init__(self):
        super().__init__(level=logging.WARNING)
        self.records = []

    def emit(self, record):
        self.records.append("%s %s: %s" % (record.levelname, record.name, record.getMessage()))


CAPTURE = Capture()
logging.getLogger("pika").addHandler(CAPTURE)
logging.getLogger("pika").setLevel(logging.DEBUG)
logging.getLogger("pika").propagate = False


# --------------------------------------------------------------------------
# raw content-header capture, to compare header field tables by wire type.

_orig_props_decode = pika.spec.BasicProperties.decode


def _props_decode(self, encoded, offset=0):
    self._raw = bytes(encoded[offset:])
    return _orig_props_decode(self, encoded, offset)


pika.spec.BasicProperties.decode = _props_decode


# the fixed-size field values: tag -> struct format (RabbitMQ's names for
# the types, so "I" is the signed and "i" the unsigned 32-bit integer)
_FIXED_SIZE = {"b": ">b", "B": ">B", "s": ">h", "u": ">H", "I": ">i", "i": ">I",
               "l": ">q", "L": ">Q", "f": ">f", "d": ">d"}


def _typed_value(buf, off):
    """Decode one field value the way RabbitMQ names the types (tag, value)."""
    tag = chr(buf[off])
    off += 1
    if tag == "t":
        return ("t", bool(buf[off])), off + 1
    if tag in _FIXED_SIZE:
        fmt = _FIXED_SIZE[tag]
        return (tag, struct.unpack_from(fmt, buf, off)[0]), off + struct.calcsize(fmt)
    if tag == "D":
        return ("D", (buf[off], struct.unpack_from(">i", buf, off + 1)[0])), off + 5
    if tag in "Sx":
        n = struct.unpack_from(">I", buf, off)[0]
        return (tag, bytes(buf[off + 4:off + 4 + n])), off + 4 + n
    if tag == "T":
        return ("T", "<timestamp>"), off + 8
    if tag == "V":
        return ("V", None), off
    if tag == "A":
        n = struct.unpack_from(">I", buf, off)[0]
        end = off + 4 + n
        off += 4
        out = []
        while off < end:
            v, off = _typed_value(buf, off)
            out.append(v)
        return ("A", out), off
    if tag == "F":
        return _typed_table(buf, off)
    raise ValueError("unknown field type %r" % tag)


def _typed_table(buf, off):
    n = struct.unpack_from(">I", buf, off)[0]
    end = off + 4 + n
    off += 4
    out = {}
    while off < end:
        klen = buf[off]
        key = bytes(buf[off + 1:off + 1 + klen]).decode()
        off += 1 + klen
        v, off = _typed_value(buf, off)
        out[key] = v
    return ("F", out), off


def typed_headers(props):
    """The headers table of a received message as {key: (tag, value)}, or None."""
    raw = getattr(props, "_raw", None)
    if raw is None:
        return "<no raw>"
    flags = struct.unpack_from(">H", raw, 0)[0]
    off = 2
    if flags & 0x8000:
        off += 1 + raw[off]
    if flags & 0x4000:
        off += 1 + raw[off]
    if not flags & 0x2000:
        return None
    return _typed_table(raw, off)[0][1]


# --------------------------------------------------------------------------
# helpers


def check(name):
    """Register the decorated function as the check NAME. Whatever it
    declared with declare_queue / declare_exchange is deleted after it, also
    when it failed."""
    def deco(fn):
        def run():
            CAPTURE.records.clear()
            try:
                try:
                    fn()
                except BaseException:
                    delete_declared(quiet=True)
                    raise
                delete_declared()
            except AssertionError as e:
                FAILS.append(name)
                print("FAIL %s: %s" % (name, e), flush=True)
            except Exception as e:  # pylint: disable=broad-except
                FAILS.append(name)
                tb = traceback.format_exc().strip().splitlines()
                where = [l.strip() for l in tb if "pika_check.py" in l]
                # the check's own line rather than a helper's
                where = [l for l in where if l.endswith(", in _")] or where
                print("FAIL %s: unexpected %s: %s (%s)" % (name, type(e).__name__, e,
                                                          where[-1] if where else ""), flush=True)
            else:
                print("ok %s" % name, flush=True)
        CHECKS.append(run)
        return run
    return deco


CHECKS = []


def eq(got, want, what=""):
    if got != want:
        raise AssertionError("%s: got %r, want %r" % (what or "value", got, want))


def connect(**kw):
    params = pika.URLParameters(URL)
    for k, v in kw.items():
        setattr(params, k, v)
    return pika.BlockingConnection(params)


def negotiated(**kw):
    """The connection parameters as pika and the broker settled them for
    connect(**kw) (the connection is closed again)."""
    c = connect(**kw)
    params = c._impl.params  # pylint: disable=protected-access
    c.close()
    return params


@contextlib.contextmanager
def session(**kw):
    """`with session() as (c, ch):` a connection (connect's keywords) and a
    channel on it, for one check. The connection is closed at the end of the
    block unless it is closed already (by the check or by the broker)."""
    c = connect(**kw)
    try:
        yield c, c.channel()
    except BaseException:
        try:
            if c.is_open:
                c.close()
        except Exception:  # pylint: disable=broad-except
            pass  # the check's own error is the one to report
        raise
    if c.is_open:
        c.close()


def name(s):
    return "pika.%s.%s" % (RUN, s)


# (kind, name) of what the running check declared through the two helpers
# below; check() deletes them after the check, on a connection of its own.
DECLARED = []


def declare_queue(ch, suffix, **kw):
    """Declare the queue name(suffix) (queue_declare's keywords), to be
    deleted after the check. Returns its name."""
    q = name(suffix)
    DECLARED.append(("queue", q))
    ch.queue_declare(q, **kw)
    return q


def declare_exchange(ch, suffix, exchange_type, **kw):
    """Declare the exchange name(suffix), to be deleted after the check."""
    x = name(suffix)
    DECLARED.append(("exchange", x))
    ch.exchange_declare(x, exchange_type, **kw)
    return x


def delete_declared(quiet=False):
    """Delete what the check declared (deleting what is gone already is fine);
    quiet: the check failed already, so errors here are not reported."""
    todo = DECLARED[:]
    del DECLARED[:]
    if not todo:
        return
    try:
        with session() as (_c, ch):
            for kind, n in todo:
                if kind == "queue":
                    ch.queue_delete(n)
                else:
                    ch.exchange_delete(n)
    except Exception:  # pylint: disable=broad-except
        if not quiet:
            raise


def temp_queue(ch, arguments=None):
    """A server-named exclusive queue (it goes with its connection)."""
    return ch.queue_declare("", exclusive=True, arguments=arguments).method.queue


def bound_queue(ch, exchange, routing_key=None, arguments=None):
    """A temp_queue bound to exchange."""
    q = temp_queue(ch)
    ch.queue_bind(q, exchange, routing_key, arguments=arguments)
    return q


def publish(ch, q, *bodies, props=None):
    """Publish each body to queue q through the default exchange."""
    for b in bodies:
        ch.basic_publish("", q, b, props)


def message_count(ch, q):
    return ch.queue_declare(q, passive=True).method.message_count


def not_found(kind, n):
    return "NOT_FOUND - no %s '%s' in vhost '/'" % (kind, n)


def _expect_close(what, exc_type, fn, code, text):
    """fn() must raise exc_type: the broker's `what` (channel.close or
    connection.close) with code and text."""
    try:
        fn()
    except exc_type as e:
        eq((e.reply_code, e.reply_text), (code, text), what)
        return
    raise AssertionError("no %s, want %d %s" % (what, code, text))


def expect_channel_close(fn, code, text):
    _expect_close("channel.close", ChannelClosedByBroker, fn, code, text)


def expect_async_close(c, ch, fn, code, text):
    """fn sends something asynchronous (publish, ack) that the broker answers
    with channel.close; pika only sees it when it next reads."""
    fn()
    wait_for(c, lambda: not ch.is_open)
    reason = ch._closing_reason  # pylint: disable=protected-access
    if not isinstance(reason, ChannelClosedByBroker):
        raise AssertionError("no channel.close (%r), want %d %s" % (reason, code, text))
    eq((reason.reply_code, reason.reply_text), (code, text), "channel.close")


def expect_connection_close(fn, code, text):
    _expect_close("connection.close", ConnectionClosedByBroker, fn, code, text)


def expect_connection_close_on_raw(c, ch, method, content, code, text):
    """Send method (and content) on ch as a frame of its own, past pika's own
    checks; the broker must close the connection with code and text (pika
    sees that at its next synchronous call)."""
    def send():
        ch._impl._send_method(method, content)  # pylint: disable=protected-access
        pump(c, 1.0)
        temp_queue(ch)
    expect_connection_close(send, code, text)


def get_wait(ch, queue, timeout=3.0, auto_ack=True):
    deadline = time.time() + timeout
    while True:
        m, p, b = ch.basic_get(queue, auto_ack=auto_ack)
        if m is not None or time.time() > deadline:
            return m, p, b
        ch.connection.sleep(0.05)


def drain(ch, q):
    """The bodies basic.get takes from q (no-ack) until it is empty."""
    out = []
    while True:
        m, _, b = ch.basic_get(q, auto_ack=True)
        if m is None:
            return out
        out.append(b)


def pump(c, secs):
    """Run pika's I/O loop for secs (one process_data_events call can return
    before every pending delivery has been dispatched)."""
    deadline = time.time() + secs
    while True:
        left = deadline - time.time()
        if left <= 0:
            c.process_data_events(0)
            return
        c.process_data_events(min(0.05, left))


def wait_for(c, cond, timeout=2.0, step=0.1):
    """Run pika's I/O loop until cond() or timeout."""
    deadline = time.time() + timeout
    while not cond() and time.time() < deadline:
        pump(c, step)


def dl_headers(props):
    """typed_headers without x-last-death-*, which RabbitMQ 3.10 does not
    write (checked on its own by dlx_x_last_death_headers)."""
    h = typed_headers(props)
    if isinstance(h, dict):
        h = {k: v for k, v in h.items() if not k.startswith("x-last-death-")}
    return h


def death_headers(reason, queue, exchange, routing_keys, death_extra=None):
    """The typed headers (as dl_headers gives them) of a message dead-lettered
    once, from queue, as RabbitMQ 3.10 writes them; death_extra: more fields
    of the x-death table."""
    death = {"count": ("l", 1), "reason": ("S", reason.encode()), "queue": ("S", queue.encode()),
             "time": ("T", "<timestamp>"), "exchange": ("S", exchange.encode()),
             "routing-keys": ("A", [("S", k.encode()) for k in routing_keys])}
    death.update(death_extra or {})
    return {"x-death": ("A", [("F", death)]),
            "x-first-death-exchange": ("S", exchange.encode()),
            "x-first-death-queue": ("S", queue.encode()),
            "x-first-death-reason": ("S", reason.encode())}


def no_pika_warnings(what):
    if CAPTURE.records:
        raise AssertionError("%s: pika logged %s" % (what, CAPTURE.records))


# --------------------------------------------------------------------------
# connections


@check("connect_close_clean")
def _():
    with session() as (c, ch):
        ch.queue_declare("", exclusive=True)
        ch.close()
    assert c.is_closed, "connection not closed"
    no_pika_warnings("clean close")


@check("close_200_connections")
def _():
    errs = []
    for i in range(200):
        try:
            c = connect()
            c.channel()
            c.close()
        except Exception as e:  # pylint: disable=broad-except
            errs.append("%d: %s %s" % (i, type(e).__name__, e))
    assert not errs, "%d errors, first: %s" % (len(errs), errs[:3])
    no_pika_warnings("200 clean closes")


@check("close_with_open_channels")
def _():
    c = connect()
    chans = [c.channel() for _ in range(5)]
    q = temp_queue(chans[0])
    chans[1].basic_consume(q, lambda *a: None)
    c.close()
    assert all(ch.is_closed for ch in chans), "channels left open"
    no_pika_warnings("close with channels")


@check("server_properties")
def _():
    c = connect()
    impl = c._impl  # pylint: disable=protected-access
    caps = impl.server_properties.get("capabilities", {})
    want = {
        "publisher_confirms": True, "exchange_exchange_bindings": True,
        "basic.nack": True, "consumer_cancel_notify": True,
        "connection.blocked": True, "consumer_priorities": True,
        "authentication_failure_close": True, "per_consumer_qos": True,
        "direct_reply_to": True,
    }
    eq(caps, want, "capabilities")
    for k in ("product", "version", "platform", "copyright", "information"):
        assert k in impl.server_properties, "server property %s missing" % k
    c.close()


@check("tune_negotiated")
def _():
    p = negotiated()
    # pika takes the server's channel_max 2047 and frame_max 131072
    eq((p.channel_max, p.frame_max), (2047, 131072), "channel_max, frame_max")


@check("auth_failure")
def _():
    bad = URL.replace("guest:guest@", "guest:wrong@")
    try:
        pika.BlockingConnection(pika.URLParameters(bad))
    except ProbableAuthenticationError as e:
        # pika reports the server's connection.close (403) as the error text
        txt = str(e)
        assert "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN" in txt, txt
        return
    except Exception as e:  # pylint: disable=broad-except
        raise AssertionError("got %s %s" % (type(e).__name__, e))
    raise AssertionError("connection with a wrong password opened")


@check("vhost_missing")
def _():
    bad = URL.rstrip("/") + "/nope"
    try:
        pika.BlockingConnection(pika.URLParameters(bad))
    except Exception as e:  # pylint: disable=broad-except
        txt = repr(e)
        assert "530" in txt and "NOT_ALLOWED - vhost nope not found" in txt, txt
        return
    raise AssertionError("connection to a missing vhost opened")


@check("heartbeat_negotiated_and_idle")
def _():
    c = connect(heartbeat=2)
    impl = c._impl  # pylint: disable=protected-access
    eq(impl.params.heartbeat, 2, "negotiated heartbeat")
    c.sleep(7)  # pika answers heartbeats while sleeping
    assert c.is_open, "connection dropped while idle"
    ch = c.channel()
    ch.queue_declare("", exclusive=True)
    hb = impl._heartbeat_checker  # pylint: disable=protected-access
    received = hb._heartbeat_frames_received  # pylint: disable=protected-access
    c.close()
    no_pika_warnings("heartbeat idle")
    print("info heartbeat frames received in 7 s at heartbeat=2: %d" % received, flush=True)
    HB[0] = received


HB = [None]


@check("heartbeat_server_sends_at_half_interval")
def _():
    # RabbitMQ sends a heartbeat every timeout/2 = 1 s when idle.
    assert HB[0] is not None and HB[0] >= 5, \
        "server sent %s heartbeat frames in 7 s at heartbeat=2 (RabbitMQ: 6-7)" % HB[0]


@check("connection_blocked_capability")
def _():
    with session() as (c, ch):
        impl = c._impl  # pylint: disable=protected-access
        eq(impl.server_capabilities.get("connection.blocked"), True, "server capability")
        eq(impl.params.client_properties, None, "client properties override")
        events = []
        c.add_on_connection_blocked_callback(lambda *a: events.append("blocked"))
        c.add_on_connection_unblocked_callback(lambda *a: events.append("unblocked"))
        publish(ch, temp_queue(ch), b"x")
        pump(c, 0.3)
        eq(events, [], "blocked events without an alarm")


# --------------------------------------------------------------------------
# exchanges and queues


@check("exchange_declare_types")
def _():
    with session() as (_c, ch):
        for t in ("direct", "fanout", "topic", "headers"):
            for durable in (False, True):
                n = name("ex.%s.%s" % (t, durable))
                ch.exchange_declare(n, exchange_type=t, durable=durable)
                ch.exchange_declare(n, exchange_type=t, durable=durable)  # idempotent
                ch.exchange_declare(n, passive=True)
                ch.exchange_delete(n)
        n = name("ex.ad")
        ch.exchange_declare(n, "fanout", auto_delete=True)
        ch.exchange_declare(n, "fanout", auto_delete=True)
        ch.exchange_delete(n)
        ch.exchange_declare("amq.direct", "direct", passive=True)
        ch.exchange_declare("amq.topic", "topic", durable=True)  # redeclare amq.* with same args is fine


@check("exchange_passive_missing_404")
def _():
    with session() as (c, ch):
        n = name("nope")
        expect_channel_close(lambda: ch.exchange_declare(n, passive=True), 404, not_found("exchange", n))
        assert c.is_open


@check("exchange_reserved_name_403")
def _():
    with session() as (_c, ch):
        expect_channel_close(lambda: ch.exchange_declare("amq.pika" + RUN, "direct"), 403,
                             "ACCESS_REFUSED - exchange name 'amq.pika%s' contains reserved prefix 'amq.*'" % RUN)


@check("exchange_unknown_type_503")
def _():
    with session() as (_c, ch):
        expect_connection_close(lambda: ch.exchange_declare(name("badtype"), "nosuchtype"), 503,
                                "COMMAND_INVALID - unknown exchange type 'nosuchtype'")


@check("exchange_delete_if_unused")
def _():
    with session() as (c, ch):
        x = declare_exchange(ch, "ex.inuse", "direct")
        bound_queue(ch, x, "k")
        expect_channel_close(lambda: ch.exchange_delete(x, if_unused=True), 406,
                             "PRECONDITION_FAILED - exchange '%s' in vhost '/' in use" % x)
        ch = c.channel()
        ch.exchange_delete(x)
        ch.exchange_delete(name("ex.never"))  # deleting a missing exchange is ok


@check("queue_declare_kinds")
def _():
    with session() as (c, ch):
        qd = name("q.durable")
        r = ch.queue_declare(qd, durable=True).method
        eq((r.queue, r.message_count, r.consumer_count), (qd, 0, 0), "declare-ok durable")
        r = ch.queue_declare(qd, durable=True).method
        eq(r.queue, qd, "redeclare")
        r = ch.queue_declare(qd, passive=True).method
        eq(r.queue, qd, "passive")
        qe = name("q.excl")
        eq(ch.queue_declare(qe, exclusive=True).method.queue, qe, "exclusive")
        qa = name("q.ad")
        eq(ch.queue_declare(qa, auto_delete=True).method.queue, qa, "auto-delete")
        sn = temp_queue(ch)
        assert re.match(r"^amq\.gen-[A-Za-z0-9_-]{22}$", sn), "server-named %r" % sn
        # auto-delete goes when its last consumer goes
        tag = ch.basic_consume(qa, lambda *a: None)
        ch.basic_cancel(tag)
        expect_channel_close(lambda: ch.queue_declare(qa, passive=True), 404, not_found("queue", qa))
        ch = c.channel()
        eq(ch.queue_delete(qd).method.message_count, 0, "delete-ok count")


@check("queue_declare_ok_counts")
def _():
    with session() as (c, ch):
        q = temp_queue(ch)
        publish(ch, q, b"m0", b"m1", b"m2")
        ch2 = c.channel()
        ch2.basic_consume(q, lambda *a: None, auto_ack=False)
        ch2.basic_qos(prefetch_count=0)
        pump(c, 0.3)
        r = ch.queue_declare(q, passive=True).method
        # all three are delivered (unacked) to the consumer: ready count 0
        eq((r.message_count, r.consumer_count), (0, 1), "passive declare-ok counts with consumer")
        ch2.close()
        pump(c, 0.2)
        r = ch.queue_declare(q, passive=True).method
        eq((r.message_count, r.consumer_count), (3, 0), "passive declare-ok counts after requeue")


@check("queue_passive_missing_404")
def _():
    with session() as (c, ch):
        n = name("missing")
        expect_channel_close(lambda: ch.queue_declare(n, passive=True), 404, not_found("queue", n))
        assert c.is_open, "connection closed"
        temp_queue(c.channel())


@check("queue_reserved_name_403")
def _():
    with session() as (_c, ch):
        expect_channel_close(lambda: ch.queue_declare("amq.pika" + RUN), 403,
                             "ACCESS_REFUSED - queue name 'amq.pika%s' contains reserved prefix 'amq.*'" % RUN)


@check("queue_delete_if_unused_if_empty")
def _():
    with session() as (c, ch):
        q = declare_queue(ch, "q.del")
        publish(ch, q, b"x")
        pump(c, 0.1)
        expect_channel_close(lambda: ch.queue_delete(q, if_empty=True), 406,
                             "PRECONDITION_FAILED - queue '%s' in vhost '/' not empty" % q)
        ch = c.channel()
        ch.basic_consume(q, lambda *a: None, auto_ack=True)
        ch2 = c.channel()
        expect_channel_close(lambda: ch2.queue_delete(q, if_unused=True), 406,
                             "PRECONDITION_FAILED - queue '%s' in vhost '/' in use" % q)
        ch.close()
        ch = c.channel()
        ch.queue_delete(q)
        ch.queue_delete(q)  # deleting a missing queue is ok in 3.10


@check("queue_purge_and_delete_counts")
def _():
    with session() as (_c, ch):
        ch.confirm_delivery()
        q = declare_queue(ch, "q.purge")
        publish(ch, q, *[b"x"] * 5)
        eq(ch.queue_purge(q).method.message_count, 5, "purge-ok")
        publish(ch, q, *[b"x"] * 4)
        eq(ch.queue_delete(q).method.message_count, 4, "delete-ok")


@check("queue_invalid_arg_406")
def _():
    with session() as (c, ch):
        q = name("q.badarg")
        for arg, value, detail in (("x-max-length", "ten", "\"expected integer, got longstr\""),
                                   ("x-message-ttl", -1, "{value_negative,-1}")):
            expect_channel_close(lambda: ch.queue_declare(q, arguments={arg: value}), 406,
                                 "PRECONDITION_FAILED - invalid arg '%s' for queue '%s' in vhost '/': %s"
                                 % (arg, q, detail))
            ch = c.channel()


# --------------------------------------------------------------------------
# bindings and routing


@check("bindings_routing")
def _():
    with session() as (_c, ch):
        ch.confirm_delivery()
        d = declare_exchange(ch, "b.direct", "direct")
        f = declare_exchange(ch, "b.fanout", "fanout")
        t = declare_exchange(ch, "b.topic", "topic")
        h = declare_exchange(ch, "b.headers", "headers")
        e2e = declare_exchange(ch, "b.e2e", "fanout")
        qs = [bound_queue(ch, d, "red"), bound_queue(ch, f), bound_queue(ch, t, "*.a.#"),
              bound_queue(ch, h, arguments={"x-match": "all", "k": "v", "n": 1}),
              bound_queue(ch, h, arguments={"x-match": "any", "k": "v", "n": 1})]
        ch.exchange_bind(f, e2e)  # e2e -> f -> qs[1]

        ch.basic_publish(d, "red", b"d1")
        ch.basic_publish(d, "blue", b"d2")
        ch.basic_publish(f, "whatever", b"f1")
        ch.basic_publish(e2e, "", b"e1")
        for rk in ("x.a", "x.a.b.c", "a.x", "x.y.a"):
            ch.basic_publish(t, rk, rk.encode())
        ch.basic_publish(h, "", b"h-all", pika.BasicProperties(headers={"k": "v", "n": 1}))
        ch.basic_publish(h, "", b"h-any", pika.BasicProperties(headers={"k": "v"}))
        eq(drain(ch, qs[0]), [b"d1"], "direct")
        eq(drain(ch, qs[1]), [b"f1", b"e1"], "fanout + exchange-to-exchange")
        eq(drain(ch, qs[2]), [b"x.a", b"x.a.b.c"], "topic *.a.#")
        eq(drain(ch, qs[3]), [b"h-all"], "headers all")
        eq(drain(ch, qs[4]), [b"h-all", b"h-any"], "headers any")
        ch.queue_unbind(qs[0], d, "red")
        ch.exchange_unbind(f, e2e)
        ch.basic_publish(d, "red", b"d3")
        ch.basic_publish(e2e, "", b"e2")
        eq(drain(ch, qs[0]), [], "after unbind")
        eq(drain(ch, qs[1]), [], "after exchange unbind")


@check("auto_delete_exchange_goes_with_last_binding")
def _():
    with session() as (_c, ch):
        x = name("ex.autodel")
        ch.exchange_declare(x, "direct", auto_delete=True)
        q = bound_queue(ch, x, "a")
        ch.queue_bind(q, x, "b")
        ch.queue_unbind(q, x, "a")
        ch.exchange_declare(x, passive=True)
        ch.queue_unbind(q, x, "b")
        expect_channel_close(lambda: ch.exchange_declare(x, passive=True), 404, not_found("exchange", x))


@check("bind_missing_404")
def _():
    with session() as (c, ch):
        q = temp_queue(ch)
        x, nq = name("nox"), name("noq")
        for bind, text in ((lambda: ch.queue_bind(q, x, "k"), not_found("exchange", x)),
                           (lambda: ch.queue_bind(nq, "amq.direct", "k"), not_found("queue", nq))):
            expect_channel_close(bind, 404, text)
            ch = c.channel()
        # unbinding something never bound is fine
        ch.queue_unbind(q, "amq.direct", "never")


@check("publish_missing_exchange_404")
def _():
    with session() as (c, ch):
        x = name("nox")
        expect_async_close(c, ch, lambda: ch.basic_publish(x, "k", b"x"), 404, not_found("exchange", x))
        assert c.is_open


# --------------------------------------------------------------------------
# publishing


@check("publish_confirms")
def _():
    with session() as (_c, ch):
        ch.confirm_delivery()
        q = declare_queue(ch, "q.confirm", durable=True)
        publish(ch, q, *[b"p%d" % i for i in range(50)], props=pika.BasicProperties(delivery_mode=2))
        # non-mandatory unroutable is confirmed without error
        ch.basic_publish("amq.direct", "nobody-" + RUN, b"lost")
        eq(message_count(ch, q), 50, "messages in queue")
    no_pika_warnings("confirms")


@check("publish_confirms_mandatory_unroutable")
def _():
    with session() as (_c, ch):
        ch.confirm_delivery()
        try:
            ch.basic_publish("amq.direct", "nobody-" + RUN, b"lost", mandatory=True)
        except UnroutableError as e:
            eq(len(e.messages), 1, "returned messages")
            m = e.messages[0]
            eq((m.method.reply_code, m.method.reply_text, m.method.exchange, m.method.routing_key, m.body),
               (312, "NO_ROUTE", "amq.direct", "nobody-" + RUN, b"lost"), "basic.return")
        else:
            raise AssertionError("no UnroutableError")


@check("mandatory_return_no_confirms")
def _():
    with session() as (c, ch):
        got = []
        ch.add_on_return_callback(lambda _ch, m, p, b: got.append((m, p, b)))
        ch.basic_publish("", "nobody-" + RUN, b"r1",
                         pika.BasicProperties(headers={"a": 1}, content_type="text/plain"), mandatory=True)
        pump(c, 0.5)
        eq(len(got), 1, "returns")
        m, p, b = got[0]
        eq((m.reply_code, m.reply_text, m.exchange, m.routing_key, b),
           (312, "NO_ROUTE", "", "nobody-" + RUN, b"r1"), "basic.return")
        eq((p.content_type, p.headers), ("text/plain", {"a": 1}), "returned properties")


@check("properties_roundtrip_exact")
def _():
    with session() as (_c, ch):
        q = temp_queue(ch)
        props = pika.BasicProperties(
            content_type="application/json", content_encoding="gzip",
            headers={"s": "str", "i": 42, "neg": -7, "big": 2 ** 40, "b": True, "f": False,
                     "l": [1, "two", [3]], "t": {"n": {"x": 1}}, "by": b"\xff\x00",
                     "dec": decimal.Decimal("1.25"), "ts": datetime.datetime(2020, 1, 2, 3, 4, 5),
                     "none": None},
            delivery_mode=2, priority=5, correlation_id="corr", reply_to="rt", expiration="60000",
            message_id="mid", timestamp=1600000000, type="typ", user_id="guest", app_id="app",
            cluster_id="cl")
        publish(ch, q, b"body", props=props)
        m, p, b = get_wait(ch, q)
        sent = b"".join(props.encode())
        eq(p._raw, sent, "content header property bytes")  # pylint: disable=protected-access
        eq(b, b"body", "body")


@check("publish_user_id_mismatch_406")
def _():
    with session() as (c, ch):
        q = temp_queue(ch)
        pub = lambda: publish(ch, q, b"x", props=pika.BasicProperties(user_id="someoneelse"))
        expect_async_close(c, ch, pub, 406, "PRECONDITION_FAILED - user_id property set to 'someoneelse' but "
                                       "authenticated user was 'guest'")


@check("large_and_empty_bodies")
def _():
    with session() as (_c, ch):
        q = temp_queue(ch)
        big = bytes(range(256)) * 4096 + b"tail"  # 1 MiB + 4: many body frames
        publish(ch, q, big, b"")
        m, _, b = get_wait(ch, q)
        eq((len(b), b == big), (len(big), True), "large body")
        m, p, b = get_wait(ch, q)
        eq(b, b"", "empty body")


@check("priority_queue")
def _():
    with session() as (_c, ch):
        ch.confirm_delivery()
        q = temp_queue(ch, {"x-max-priority": 5})
        for pr in (1, 9, 0, 3, 5, None):
            publish(ch, q, str(pr).encode(), props=pika.BasicProperties(priority=pr))
        eq([b.decode() for b in drain(ch, q)], ["9", "5", "3", "1", "0", "None"], "priority order")


@check("direct_reply_to")
def _():
    with session() as (c, ch):
        srv = c.channel()
        q = temp_queue(srv)
        replies = []
        ch.basic_consume("amq.rabbitmq.reply-to", lambda _c, m, p, b: replies.append(b), auto_ack=True)
        publish(ch, q, b"ping", props=pika.BasicProperties(reply_to="amq.rabbitmq.reply-to"))
        m, p, b = get_wait(srv, q)
        assert p.reply_to.startswith("amq.rabbitmq.reply-to."), "reply_to %r" % p.reply_to
        srv.basic_publish("", p.reply_to, b"pong")
        wait_for(c, lambda: replies)
        eq(replies, [b"pong"], "replies")


# --------------------------------------------------------------------------
# consuming


@check("consume_manual_ack")
def _():
    with session() as (c, ch):
        q = temp_queue(ch)
        publish(ch, q, b"c0", b"c1", b"c2")
        got = []
        tag = ch.basic_consume(q, lambda _c, m, p, b: got.append((m, b)), consumer_tag="ctag-" + RUN)
        eq(tag, "ctag-" + RUN, "consumer tag")
        wait_for(c, lambda: len(got) >= 3)
        eq([(m.delivery_tag, m.redelivered, m.consumer_tag, m.exchange, m.routing_key, b) for m, b in got],
           [(i + 1, False, "ctag-" + RUN, "", q, b"c%d" % i) for i in range(3)], "deliveries")
        for m, _ in got:
            ch.basic_ack(m.delivery_tag)
        ch.basic_cancel(tag)
        eq(message_count(ch, q), 0, "left after ack")


@check("consume_server_generated_tag")
def _():
    with session() as (c, ch):
        q = temp_queue(ch)
        # ask the server for a tag: pika lets us send an empty one through the impl
        res = []
        ch._impl.basic_consume(q, lambda *a: None, consumer_tag="",  # pylint: disable=protected-access
                               callback=lambda f: res.append(f.method.consumer_tag))
        wait_for(c, lambda: res)
        assert res and re.match(r"^ctag1\.[0-9a-f]{32}$", res[0]), "consumer tag %r" % res


def _consume_one(c, ch, q, timeout=2.0):
    got = []
    tag = ch.basic_consume(q, lambda _c, m, p, b: got.append((m, p, b)))
    wait_for(c, lambda: got, timeout, step=0.05)
    ch.basic_cancel(tag)
    return got


@check("nack_requeue_redelivered_headers")
def _():
    with session() as (c, ch):
        q = temp_queue(ch)
        publish(ch, q, b"n1", props=pika.BasicProperties(headers={"app": "h"}))
        publish(ch, q, b"n2")
        ch.basic_qos(prefetch_count=1)
        for round_ in range(3):
            got = _consume_one(c, ch, q)
            assert got, "round %d: nothing delivered" % round_
            m, p, b = got[0]
            eq((b, m.redelivered), (b"n1", round_ > 0), "round %d body, redelivered" % round_)
            eq(p.headers, {"app": "h"}, "round %d headers" % round_)
            ch.basic_nack(m.delivery_tag, requeue=True)
        m, p, b = ch.basic_get(q, auto_ack=True)
        eq((b, m.redelivered), (b"n1", True), "get after nack")
        eq(p.headers, {"app": "h"}, "headers after nacks")


@check("reject_requeue_no_headers_added")
def _():
    with session() as (_c, ch):
        q = temp_queue(ch)
        publish(ch, q, b"r1")  # no headers at all
        m, p, b = ch.basic_get(q)
        eq(typed_headers(p), None, "first delivery headers")
        ch.basic_reject(m.delivery_tag, requeue=True)
        m, p, b = ch.basic_get(q)
        eq((m.redelivered, typed_headers(p)), (True, None), "redelivered, headers after reject")
        ch.basic_ack(m.delivery_tag)


@check("nack_multiple")
def _():
    with session() as (_c, ch):
        q = temp_queue(ch)
        publish(ch, q, b"0", b"1", b"2", b"3")
        tags = [ch.basic_get(q)[0].delivery_tag for _ in range(4)]
        eq(tags, [1, 2, 3, 4], "tags")
        ch.basic_nack(3, multiple=True, requeue=True)
        out = []
        for _ in range(3):
            m, _, b = ch.basic_get(q)
            out.append((b, m.redelivered))
        eq(out, [(b"0", True), (b"1", True), (b"2", True)], "requeued in original order")
        eq(ch.basic_get(q)[0], None, "no more ready")


@check("basic_get")
def _():
    with session() as (_c, ch):
        q = temp_queue(ch)
        eq(ch.basic_get(q), (None, None, None), "get-empty")
        publish(ch, q, b"g0", b"g1", b"g2", props=pika.BasicProperties(content_type="text/plain"))
        m, p, b = get_wait(ch, q, auto_ack=False)
        eq((m.delivery_tag, m.redelivered, m.exchange, m.routing_key, m.message_count, b, p.content_type),
           (1, False, "", q, 2, b"g0", "text/plain"), "get-ok")
        ch.basic_ack(m.delivery_tag)
        m, p, b = ch.basic_get(q, auto_ack=True)
        eq((m.delivery_tag, m.message_count), (2, 1), "get-ok no-ack")
        nq = name("noq")
        expect_channel_close(lambda: ch.basic_get(nq), 404, not_found("queue", nq))


@check("qos_prefetch")
def _():
    with session() as (c, ch):
        q = temp_queue(ch)
        publish(ch, q, b"0", b"1", b"2", b"3", b"4", b"5")
        ch.basic_qos(prefetch_count=2)
        got = []
        ch.basic_consume(q, lambda _c, m, p, b: got.append(m.delivery_tag))
        pump(c, 0.5)
        eq(len(got), 2, "in flight with prefetch 2")
        ch.basic_ack(got[-1], multiple=True)
        pump(c, 0.5)
        eq(len(got), 4, "after acking both")


@check("qos_global_per_channel")
def _():
    with session() as (c, ch):
        q1, q2 = temp_queue(ch), temp_queue(ch)
        for _ in range(5):
            publish(ch, q1, b"a")
            publish(ch, q2, b"b")
        ch.basic_qos(prefetch_count=3, global_qos=True)
        got = []
        ch.basic_consume(q1, lambda _c, m, p, b: got.append(b))
        ch.basic_consume(q2, lambda _c, m, p, b: got.append(b))
        pump(c, 0.5)
        eq(len(got), 3, "in flight with global prefetch 3 over two consumers")


@check("consumer_cancel_notify_on_queue_delete")
def _():
    with session() as (c, ch):
        q = name("q.cancel")
        ch.queue_declare(q)
        cancels = []
        ch.add_on_cancel_callback(lambda f: cancels.append(f.method))
        tag = ch.basic_consume(q, lambda *a: None)
        other = c.channel()
        other.queue_delete(q)
        wait_for(c, lambda: cancels)
        eq([(m.consumer_tag, m.nowait) for m in cancels], [(tag, True)], "basic.cancel from server")
        eq(ch.consumer_tags, [], "consumer tags left")
        assert ch.is_open, "channel closed"
        temp_queue(ch)


@check("basic_cancel_requeues_on_close")
def _():
    with session() as (c, ch):
        q = declare_queue(ch, "q.cancel2")
        publish(ch, q, b"x")
        got = _consume_one(c, ch, q)  # cancels after the delivery, unacked
        eq(len(got), 1, "delivered")
        ch.close()
        m, _, b = get_wait(c.channel(), q)
        eq((b, m and m.redelivered), (b"x", True), "requeued after channel close")


@check("duplicate_consumer_tag_530")
def _():
    with session() as (c, ch):
        q = temp_queue(ch)
        ch.basic_consume(q, lambda *a: None, consumer_tag="dup")

        # pika refuses a duplicate tag locally, so send the basic.consume frame itself
        expect_connection_close_on_raw(c, ch, pika.spec.Basic.Consume(queue=q, consumer_tag="dup"), None,
                                       530, "NOT_ALLOWED - attempt to reuse consumer tag 'dup'")


@check("exclusive_consumer_403")
def _():
    with session() as (c, ch):
        q = temp_queue(ch)
        ch.basic_consume(q, lambda *a: None, exclusive=True)
        ch2 = c.channel()
        expect_channel_close(lambda: ch2.basic_consume(q, lambda *a: None), 403,
                             "ACCESS_REFUSED - queue '%s' in vhost '/' in exclusive use" % q)


@check("exclusive_queue_other_connection_405")
def _():
    q = name("q.locked")
    text = ("RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '%s' in vhost '/'. "
            "It could be originally declared on another connection or the exclusive property value "
            "does not match that of the original declaration." % q)
    with session() as (_c1, ch1):
        ch1.queue_declare(q, exclusive=True)
        with session() as (c2, ch2):
            for op in (lambda ch: ch.queue_declare(q, exclusive=True),
                       lambda ch: ch.queue_declare(q),
                       lambda ch: ch.queue_declare(q, passive=True),
                       lambda ch: ch.basic_consume(q, lambda *a: None),
                       lambda ch: ch.basic_get(q),
                       lambda ch: ch.queue_delete(q),
                       lambda ch: ch.queue_purge(q)):
                expect_channel_close(lambda: op(ch2), 405, text)
                ch2 = c2.channel()
            publish(ch2, q, b"publishing is allowed")
            temp_queue(ch2)
            eq(message_count(ch1, q), 1, "published by the other connection")
    # the exclusive queue went with its connection
    with session() as (_c3, ch3):
        expect_channel_close(lambda: ch3.queue_declare(q, passive=True), 404, not_found("queue", q))


# --------------------------------------------------------------------------
# dead-lettering and TTL


def _death_setup(ch, suffix, qargs, dlx_type="fanout"):
    """src.SUFFIX dead-letters to the exchange dlx.SUFFIX, bound to dlq.SUFFIX;
    all three are deleted after the check."""
    dlx = declare_exchange(ch, "dlx." + suffix, dlx_type, auto_delete=False)
    dlq = declare_queue(ch, "dlq." + suffix)
    ch.queue_bind(dlq, dlx, "#" if dlx_type == "topic" else "")
    args = {"x-dead-letter-exchange": dlx}
    args.update(qargs)
    src = declare_queue(ch, "src." + suffix, arguments=args)
    return dlx, dlq, src


def _reject_one(ch, q, requeue=False):
    """Get one message from q and reject it."""
    m, _, _ = get_wait(ch, q, auto_ack=False)
    assert m is not None, "nothing in %s" % q
    ch.basic_reject(m.delivery_tag, requeue=requeue)


@check("dlx_reject_headers_exact")
def _():
    with session() as (_c, ch):
        dlx, dlq, src = _death_setup(ch, "rej", {})
        publish(ch, src, b"dead", props=pika.BasicProperties(headers={"app": "v"}, content_type="text/plain"))
        _reject_one(ch, src)
        m, p, b = get_wait(ch, dlq)
        assert m is not None, "nothing dead-lettered"
        eq((m.exchange, m.routing_key, m.redelivered), (dlx, src, False), "dead-lettered get-ok")
        eq(p.content_type, "text/plain", "content type kept")
        eq(dl_headers(p), dict(death_headers("rejected", src, "", [src]), app=("S", b"v")),
           "dead-lettered headers (typed)")


@check("dlx_x_last_death_headers")
def _():
    with session() as (_c, ch):
        _dlx, dlq, src = _death_setup(ch, "last", {})
        publish(ch, src, b"dead")
        _reject_one(ch, src)
        m, p, b = get_wait(ch, dlq)
        extra = {k: v for k, v in typed_headers(p).items() if k.startswith("x-last-death-")}
    # RabbitMQ 3.10 writes none; 3.13 and later (and railmq) write these.
    if extra:
        eq(extra, {"x-last-death-queue": ("S", src.encode()), "x-last-death-reason": ("S", b"rejected"),
                   "x-last-death-exchange": ("S", b"")}, "x-last-death-* headers (as RabbitMQ 3.13+)")


@check("dlx_header_table_order")
def _():
    # RabbitMQ 3.10 writes the dead-lettered headers table sorted by key and
    # each x-death table as count, reason, queue, time, exchange, routing-keys.
    with session() as (_c, ch):
        _dlx, dlq, src = _death_setup(ch, "ord", {})
        publish(ch, src, *[b"o"] * 5, props=pika.BasicProperties(headers={"zz": 1, "app": "v", "Mid": 2, "b": 3}))
        bad = []
        for _ in range(5):
            _reject_one(ch, src)
            m, p, b = get_wait(ch, dlq)
            h = typed_headers(p)
            keys = [k for k in h if not k.startswith("x-last-death-")]
            want = ["Mid", "app", "b", "x-death", "x-first-death-exchange", "x-first-death-queue",
                    "x-first-death-reason", "zz"]
            if keys != want:
                bad.append("headers %s" % keys)
            fields = list(h["x-death"][1][0][1].keys())
            if fields != ["count", "reason", "queue", "time", "exchange", "routing-keys"]:
                bad.append("x-death %s" % fields)
    assert not bad, "%d of 10 tables in another order, e.g. %s" % (len(bad), bad[:2])


def _cc_bcc_publish(ch):
    x = declare_exchange(ch, "x.cc", "direct")
    qs = [bound_queue(ch, x, rk) for rk in ("orig", "cc1", "bcc1")]
    ch.basic_publish(x, "orig", b"d", pika.BasicProperties(headers={"a": 1, "CC": ["cc1"], "BCC": ["bcc1"]}))
    return [get_wait(ch, q) for q in qs]


@check("cc_bcc_routing")
def _():
    # sender-selected distribution: the CC and BCC headers add routing keys
    with session() as (_c, ch):
        got = _cc_bcc_publish(ch)
    eq([(m.routing_key if m else None) for m, _, _ in got], ["orig", "orig", "orig"],
       "routing key seen by the queues bound to orig, cc1, bcc1 (None: not routed)")


@check("bcc_header_removed")
def _():
    with session() as (c, ch):
        m, p, b = _cc_bcc_publish(ch)[0]
        eq(typed_headers(p), {"a": ("I", 1), "CC": ("A", [("S", b"cc1")])}, "delivered headers (BCC removed)")
        returned = []
        ch.add_on_return_callback(lambda _c, m, p, b: returned.append(typed_headers(p)))
        ch.basic_publish("", "nobody-" + RUN, b"r", pika.BasicProperties(headers={"BCC": ["x"]}), mandatory=True)
        pump(c, 0.5)
    eq(returned, [{}], "returned message headers (BCC removed, empty table left)")


def _cc_dead_letter(ch, dlrk):
    x = declare_exchange(ch, "x.dlcc", "direct")
    dlx = declare_exchange(ch, "dlx.cc", "topic")
    dlq = bound_queue(ch, dlx, "#")
    args = {"x-dead-letter-exchange": dlx}
    if dlrk:
        args["x-dead-letter-routing-key"] = dlrk
    src = temp_queue(ch, args)
    ch.queue_bind(src, x, "orig")
    ch.queue_bind(src, x, "cc1")
    ch.basic_publish(x, "orig", b"d", pika.BasicProperties(headers={"CC": ["cc1"], "BCC": ["cc1"]}))
    m, p, b = get_wait(ch, src, auto_ack=False)
    assert m is not None, "nothing in source queue"
    ch.basic_nack(m.delivery_tag, requeue=False)
    m, p, b = get_wait(ch, dlq)
    assert m is not None, "nothing dead-lettered"
    return x, src, m, dl_headers(p)


@check("dlx_cc_routing_keys")
def _():
    with session() as (_c, ch):
        x, src, m, h = _cc_dead_letter(ch, None)
        eq(m.routing_key, "orig", "dead-lettered routing key")
        eq(h, dict(death_headers("rejected", src, x, ["orig", "cc1"]), CC=("A", [("S", b"cc1")])),
           "dead-lettered headers (typed)")
        eq(list(h.keys()), ["CC", "x-death", "x-first-death-exchange", "x-first-death-queue",
                            "x-first-death-reason"], "header order")


@check("dlx_routes_by_cc")
def _():
    # with no x-dead-letter-routing-key the dead-lettered copy is routed by
    # its routing key and its CC keys
    with session() as (_c, ch):
        x = declare_exchange(ch, "x.rcc", "direct")
        dlx = declare_exchange(ch, "dlx.rcc", "direct")
        only_cc = bound_queue(ch, dlx, "cc1")
        src = temp_queue(ch, {"x-dead-letter-exchange": dlx})
        ch.queue_bind(src, x, "orig")
        ch.basic_publish(x, "orig", b"d", pika.BasicProperties(headers={"CC": ["cc1"]}))
        _reject_one(ch, src)
        m, p, b = get_wait(ch, only_cc)
    assert m is not None, "dead-lettered copy not routed by its CC key"
    eq(m.routing_key, "orig", "routing key")


@check("dlx_routing_key_drops_cc")
def _():
    with session() as (_c, ch):
        x, src, m, h = _cc_dead_letter(ch, "dead-rk")
        eq(m.routing_key, "dead-rk", "dead-lettered routing key")
        eq(h, death_headers("rejected", src, x, ["orig", "cc1"]), "dead-lettered headers (typed)")


@check("dlx_cycle_count_increments")
def _():
    # src rejects to dlx -> dlq; dlq's own DLX is the default exchange back to src.
    with session() as (_c, ch):
        dlx = declare_exchange(ch, "dlx.cyc", "fanout")
        src = name("src.cyc")
        dlq = declare_queue(ch, "dlq.cyc", arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": src})
        ch.queue_bind(dlq, dlx)
        declare_queue(ch, "src.cyc", arguments={"x-dead-letter-exchange": dlx})
        publish(ch, src, b"cyc")
        for q in (src, dlq, src):
            _reject_one(ch, q)
        m, p, b = get_wait(ch, dlq)
        assert m is not None, "nothing in dlq at the end"
        h = dl_headers(p)
        deaths = [(d[1]["queue"][1].decode(), d[1]["reason"][1], d[1]["count"], d[1]["exchange"][1],
                   d[1]["routing-keys"]) for d in h["x-death"][1]]
        eq(deaths, [(src, b"rejected", ("l", 2), b"", ("A", [("S", src.encode())])),
                    (dlq, b"rejected", ("l", 1), dlx.encode(), ("A", [("S", src.encode())]))], "x-death entries")
        eq((h["x-first-death-queue"], h["x-first-death-reason"], h["x-first-death-exchange"]),
           (("S", src.encode()), ("S", b"rejected"), ("S", b"")), "x-first-death-* (the first death, not the last)")
        eq(len(h), 4, "header count")


@check("ttl_queue")
def _():
    with session() as (c, ch):
        q = temp_queue(ch, {"x-message-ttl": 200})
        publish(ch, q, b"t")
        c.sleep(0.5)
        eq(ch.basic_get(q)[0], None, "expired message still there")
        eq(message_count(ch, q), 0, "count")


@check("ttl_message_expiration")
def _():
    with session() as (c, ch):
        q = temp_queue(ch)
        publish(ch, q, b"short", props=pika.BasicProperties(expiration="150"))
        publish(ch, q, b"long", props=pika.BasicProperties(expiration="60000"))
        c.sleep(0.5)
        m, p, b = ch.basic_get(q, auto_ack=True)
        eq((b, p and p.expiration), (b"long", "60000"), "survivor")
        eq(ch.basic_get(q)[0], None, "queue empty")
        bad = lambda: publish(ch, q, b"x", props=pika.BasicProperties(expiration="soon"))
        expect_async_close(c, ch, bad, 406, "PRECONDITION_FAILED - invalid expiration 'soon': no_integer")


@check("ttl_expired_dead_letter_headers")
def _():
    with session() as (_c, ch):
        _dlx, dlq, src = _death_setup(ch, "exp", {"x-message-ttl": 100})
        publish(ch, src, b"q-ttl")
        publish(ch, src, b"m-ttl", props=pika.BasicProperties(expiration="50"))
        m1, p1, b1 = get_wait(ch, dlq)
        m2, p2, b2 = get_wait(ch, dlq)
        eq((b1, b2), (b"q-ttl", b"m-ttl"), "dead-lettered bodies")
        eq(dl_headers(p1), death_headers("expired", src, "", [src]), "queue-ttl dead-letter headers")
        eq(dl_headers(p2), death_headers("expired", src, "", [src], {"original-expiration": ("S", b"50")}),
           "message-ttl dead-letter headers")
        eq(p2.expiration, None, "expiration removed from dead-lettered copy")


@check("maxlen_drop_head_dead_letter")
def _():
    with session() as (_c, ch):
        ch.confirm_delivery()
        _dlx, dlq, src = _death_setup(ch, "ml", {"x-max-length": 1})
        publish(ch, src, b"first", b"second")
        m, p, b = get_wait(ch, dlq)
        eq(b, b"first", "dropped head")
        h = dl_headers(p)
        eq((h["x-death"][1][0][1]["reason"], h["x-first-death-reason"]), (("S", b"maxlen"), ("S", b"maxlen")),
           "reason")
        eq(ch.basic_get(src, auto_ack=True)[2], b"second", "kept")


@check("queue_expires")
def _():
    with session() as (c, ch):
        q = name("q.expires")
        ch.queue_declare(q, arguments={"x-expires": 300})
        c.sleep(1.0)
        expect_channel_close(lambda: ch.queue_declare(q, passive=True), 404, not_found("queue", q))


# --------------------------------------------------------------------------
# channel errors


def inequivalent(arg, kind, n, detail):
    return ("PRECONDITION_FAILED - inequivalent arg '%s' for %s '%s' in vhost '/': %s"
            % (arg, kind, n, detail))


@check("inequivalent_queue_durable_406")
def _():
    with session() as (c, ch):
        q = declare_queue(ch, "q.ineq", durable=True)
        expect_channel_close(lambda: ch.queue_declare(q, durable=False), 406,
                             inequivalent("durable", "queue", q, "received 'false' but current is 'true'"))
        assert c.is_open, "connection closed"
        assert ch.is_closed, "channel still open"


@check("inequivalent_queue_args_406")
def _():
    with session() as (c, ch):
        q = name("q.ineqargs")
        ch.queue_declare(q, exclusive=True, arguments={"x-message-ttl": 1000})
        for args, detail in (({"x-message-ttl": 2000}, "received '2000' but current is '1000'"),
                             (None, "received none but current is the value '1000' of type 'signedint'")):
            expect_channel_close(lambda: ch.queue_declare(q, exclusive=True, arguments=args), 406,
                                 inequivalent("x-message-ttl", "queue", q, detail))
            ch = c.channel()


@check("redeclare_server_named_queue_403")
def _():
    with session() as (_c, ch):
        q = temp_queue(ch)
        ch.queue_declare(q, passive=True)
        expect_channel_close(lambda: ch.queue_declare(q, exclusive=True), 403,
                             "ACCESS_REFUSED - queue name '%s' contains reserved prefix 'amq.*'" % q)


@check("inequivalent_exchange_type_406")
def _():
    with session() as (c, ch):
        x = declare_exchange(ch, "ex.ineq", "direct", auto_delete=True)
        for redeclare, arg, detail in (
                (lambda: ch.exchange_declare(x, "fanout", auto_delete=True),
                 "type", "received 'fanout' but current is 'direct'"),
                (lambda: ch.exchange_declare(x, "direct", durable=True, auto_delete=True),
                 "durable", "received 'true' but current is 'false'")):
            expect_channel_close(redeclare, 406, inequivalent(arg, "exchange", x, detail))
            ch = c.channel()


@check("unknown_delivery_tag_406")
def _():
    with session() as (c, ch):
        expect_async_close(c, ch, lambda: ch.basic_ack(42), 406, "PRECONDITION_FAILED - unknown delivery tag 42")
        assert c.is_open
        ch = c.channel()
        q = temp_queue(ch)
        publish(ch, q, b"x")
        m, _, _ = get_wait(ch, q, auto_ack=False)
        ch.basic_ack(m.delivery_tag)
        expect_async_close(c, ch, lambda: ch.basic_ack(m.delivery_tag), 406,
                           "PRECONDITION_FAILED - unknown delivery tag 1")


@check("channel_flow")
def _():
    with session() as (_c, ch):
        eq(ch.flow(True), True, "flow-ok active")
        expect_connection_close(lambda: ch.flow(False), 540, "NOT_IMPLEMENTED - active=false")


# --------------------------------------------------------------------------
# more of what applications do


@check("heartbeat_disabled_and_default")
def _():
    eq(negotiated(heartbeat=0).heartbeat, 0, "heartbeat=0 negotiated")
    eq(negotiated().heartbeat, 60, "default: the server's 60")


@check("publish_immediate_540")
def _():
    with session() as (c, ch):
        q = temp_queue(ch)
        expect_connection_close_on_raw(c, ch, pika.spec.Basic.Publish(exchange="", routing_key=q, immediate=True),
                                       (pika.BasicProperties(), b"x"), 540, "NOT_IMPLEMENTED - immediate=true")


@check("qos_prefetch_size_540")
def _():
    with session() as (_c, ch):
        expect_connection_close(lambda: ch.basic_qos(prefetch_size=1000), 540,
                                "NOT_IMPLEMENTED - prefetch_size!=0 (1000)")


@check("default_exchange_operations_403")
def _():
    with session() as (c, ch):
        q = temp_queue(ch)
        for op, text in (
                (lambda: ch.queue_bind(q, "", "k"), "operation not permitted on the default exchange"),
                (lambda: ch.exchange_delete("amq.direct"),
                 "deletion of system exchange 'amq.direct' in vhost '/' not allowed"),
                (lambda: ch.exchange_declare("", passive=True), "operation not permitted on the default exchange")):
            expect_channel_close(op, 403, "ACCESS_REFUSED - " + text)
            ch = c.channel()


@check("internal_exchange_publish_403")
def _():
    with session() as (c, ch):
        x = declare_exchange(ch, "ex.internal", "fanout", internal=True)
        expect_async_close(c, ch, lambda: ch.basic_publish(x, "", b"x"), 403,
                           "ACCESS_REFUSED - cannot publish to internal exchange '%s' in vhost '/'" % x)


@check("alternate_exchange")
def _():
    with session() as (_c, ch):
        ch.confirm_delivery()
        ae = declare_exchange(ch, "ex.ae", "fanout")
        x = declare_exchange(ch, "ex.withae", "direct", arguments={"alternate-exchange": ae})
        q = bound_queue(ch, ae)
        ch.basic_publish(x, "unbound", b"to-ae", mandatory=True)  # routed via the AE: no return
        m, p, b = get_wait(ch, q)
        eq((b, m and m.exchange, m and m.routing_key), (b"to-ae", x, "unbound"), "via alternate exchange")


@check("overflow_reject_publish_nack")
def _():
    with session() as (_c, ch):
        ch.confirm_delivery()
        q = temp_queue(ch, {"x-max-length": 1, "x-overflow": "reject-publish"})
        publish(ch, q, b"1")
        try:
            publish(ch, q, b"2")
        except pika.exceptions.NackError:
            pass
        else:
            raise AssertionError("second publish was not nacked")
        eq(message_count(ch, q), 1, "queue length")


@check("single_active_consumer")
def _():
    with session() as (c, ch):
        q = temp_queue(ch, {"x-single-active-consumer": True})
        got = []
        ch2 = c.channel()
        t1 = ch.basic_consume(q, lambda _c, m, p, b: (got.append(("c1", b)), _c.basic_ack(m.delivery_tag)))
        ch2.basic_consume(q, lambda _c, m, p, b: (got.append(("c2", b)), _c.basic_ack(m.delivery_tag)))
        publish(ch, q, b"0", b"1", b"2")
        pump(c, 0.5)
        ch.basic_cancel(t1)
        publish(ch, q, b"3")
        pump(c, 0.5)
        eq(got, [("c1", b"0"), ("c1", b"1"), ("c1", b"2"), ("c2", b"3")], "deliveries")


@check("consumer_priority")
def _():
    with session() as (c, ch):
        q = temp_queue(ch)
        got = []
        ch.basic_consume(q, lambda _c, m, p, b: got.append("low"), auto_ack=True, arguments={"x-priority": 1})
        ch.basic_consume(q, lambda _c, m, p, b: got.append("high"), auto_ack=True, arguments={"x-priority": 10})
        publish(ch, q, *[b"x"] * 4)
        pump(c, 0.5)
        eq(got, ["high"] * 4, "deliveries")


@check("unacked_requeued_on_connection_close")
def _():
    with session() as (_c, ch):
        q = declare_queue(ch, "q.requeue")
        publish(ch, q, b"0", b"1", b"2")
        with session() as (_c2, ch2):
            for _ in range(2):
                get_wait(ch2, q, auto_ack=False)
        out = []
        for _ in range(3):
            m, _, b = get_wait(ch, q)
            out.append((b, m and m.redelivered))
    eq(out, [(b"0", True), (b"1", True), (b"2", False)], "order and redelivered after requeue")


@check("queue_type_classic")
def _():
    with session() as (_c, ch):
        q = declare_queue(ch, "q.classic", arguments={"x-queue-type": "classic"})
        ch.queue_declare(q, arguments={"x-queue-type": "classic"})
        ch.queue_declare(q)


@check("queue_type_quorum")
def _():
    with session() as (_c, ch):
        qq = declare_queue(ch, "q.quorum", durable=True, arguments={"x-queue-type": "quorum"})
        publish(ch, qq, b"qq")
        m, p, b = get_wait(ch, qq, auto_ack=False)
        eq(b, b"qq", "quorum queue body")
        # A reject counts toward x-delivery-count on RabbitMQ 3.10.8 and
        # 4.3 alike (4.3's nack raises only x-acquired-count).
        ch.basic_reject(m.delivery_tag, requeue=True)
        m, p, b = get_wait(ch, qq)
        eq((m.redelivered, (p.headers or {}).get("x-delivery-count")), (True, 1),
           "quorum redelivery carries x-delivery-count")


@check("queue_type_stream")
def _():
    # A stream (RabbitMQ 3.9+): a prefetch is required, acks are credit,
    # each consumer reads from its own x-stream-offset, and every delivery
    # carries its offset in the x-stream-offset header (a long).
    with session() as (c, ch):
        st = declare_queue(ch, "q.stream", durable=True, arguments={"x-queue-type": "stream"})
        ch.confirm_delivery()
        publish(ch, st, b"s0", b"s1", b"s2")
        ch.basic_qos(prefetch_count=10)
        got = []

        def on(_ch, m, p, b):
            got.append((b, (p.headers or {}).get("x-stream-offset")))
            ch.basic_ack(m.delivery_tag)
        ch.basic_consume(st, on, arguments={"x-stream-offset": "first"})
        wait_for(c, lambda: len(got) >= 3, timeout=5)
        eq(got, [(b"s0", 0), (b"s1", 1), (b"s2", 2)], "stream from first")
        got2 = []
        ch.basic_consume(st, lambda _c, m, p, b: (got2.append(b), ch.basic_ack(m.delivery_tag)),
                         arguments={"x-stream-offset": 2})
        wait_for(c, lambda: len(got2) >= 1, timeout=5)
        eq(got2, [b"s2"], "stream from offset 2")
        # A publisher's own x-stream-offset is replaced by the offset.
        publish(ch, st, b"s3", props=pika.BasicProperties(headers={"x-stream-offset": "mine"}))
        got3 = []
        ch.basic_consume(st, lambda _c, m, p, b: (got3.append((b, p.headers)), ch.basic_ack(m.delivery_tag)),
                         arguments={"x-stream-offset": 3})
        wait_for(c, lambda: len(got3) >= 1, timeout=5)
        eq(got3, [(b"s3", {"x-stream-offset": 3})], "a publisher's x-stream-offset replaced")


@check("queue_declare_nowait")
def _():
    with session() as (c, ch):
        q = name("q.nowait")
        ch._impl.queue_declare(q, exclusive=True, callback=None)  # pylint: disable=protected-access
        ch._impl._send_method(pika.spec.Queue.Declare(queue=q + ".2", exclusive=True, nowait=True))  # pylint: disable=protected-access
        pump(c, 0.3)
        ch.queue_declare(q, passive=True)
        ch.queue_declare(q + ".2", passive=True)


# --------------------------------------------------------------------------
# routing matrices and argument validation (compared with RabbitMQ's answers)

TOPIC_PATTERNS = ["#", "*", "a.#", "#.b", "a.*.b", "a.#.b", "*.*", "#.#", "a.#.#.b", "", "a..b", "*.#",
                  "#.*", "a.*", "*.b", "a.b.#", "#.a.#", "a", "a.b"]
TOPIC_KEYS = ["", "a", "a.b", "a.x.b", "a.x.y.b", "b", "a..b", ".", "a.", ".b", "a.b.c", "x.a.y"]
# key -> patterns that match it, as RabbitMQ 3.10.8 routes them
TOPIC_WANT = {
    "": ["#", "", "#.#"],
    "a": ["#", "*", "a.#", "#.#", "*.#", "#.*", "#.a.#", "a"],
    "a.b": ["#", "a.#", "#.b", "a.#.b", "*.*", "#.#", "a.#.#.b", "*.#", "#.*", "a.*", "*.b", "a.b.#", "#.a.#",
            "a.b"],
    "a.x.b": ["#", "a.#", "#.b", "a.*.b", "a.#.b", "#.#", "a.#.#.b", "*.#", "#.*", "#.a.#"],
    "a.x.y.b": ["#", "a.#", "#.b", "a.#.b", "#.#", "a.#.#.b", "*.#", "#.*", "#.a.#"],
    "b": ["#", "*", "#.b", "#.#", "*.#", "#.*"],
    "a..b": ["#", "a.#", "#.b", "a.*.b", "a.#.b", "#.#", "a.#.#.b", "a..b", "*.#", "#.*", "#.a.#"],
    ".": ["#", "*.*", "#.#", "*.#", "#.*"],
    "a.": ["#", "a.#", "*.*", "#.#", "*.#", "#.*", "a.*", "#.a.#"],
    ".b": ["#", "#.b", "*.*", "#.#", "*.#", "#.*", "*.b"],
    "a.b.c": ["#", "a.#", "#.#", "*.#", "#.*", "a.b.#", "#.a.#"],
    "x.a.y": ["#", "#.#", "*.#", "#.*", "#.a.#"],
}


@check("topic_routing_matrix")
def _():
    with session() as (_c, ch):
        ch.confirm_delivery()
        x = declare_exchange(ch, "ex.topicmx", "topic")
        qs = {p: bound_queue(ch, x, p) for p in TOPIC_PATTERNS}
        bad = []
        for k in TOPIC_KEYS:
            ch.basic_publish(x, k, k.encode())
            got = [p for p in TOPIC_PATTERNS if ch.basic_get(qs[p], auto_ack=True)[0] is not None]
            if DUMP:
                print("dump topic %r: %r" % (k, got))
            if sorted(got) != sorted(TOPIC_WANT[k]):
                bad.append("key %r: extra %s missing %s" % (k, sorted(set(got) - set(TOPIC_WANT[k])),
                                                           sorted(set(TOPIC_WANT[k]) - set(got))))
    assert not bad, "; ".join(bad)


HEADER_BINDINGS = [
    {"x-match": "all", "a": 1},
    {"x-match": "all", "a": "1"},
    {"x-match": "all", "a": 1, "b": "x"},
    {"x-match": "any", "a": 1, "b": "x"},
    {"x-match": "all"},
    {"x-match": "any"},
    {"a": 1},
    {"x-match": "all", "x-k": "v"},
    {"x-match": "all-with-x", "x-k": "v"},
    {"x-match": "any-with-x", "x-k": "v", "a": 2},
    {"x-match": "all", "a": None},
    {"x-match": "all", "t": True},
]
HEADER_MSGS = [
    None, {}, {"a": 1}, {"a": "1"}, {"a": 1, "b": "x"}, {"b": "x"}, {"x-k": "v"}, {"x-k": "v", "a": 2},
    {"a": None}, {"t": True}, {"t": 1}, {"a": 2 ** 40}, {"a": 1, "x-match": "any"},
]
# message index -> binding indexes that match, as RabbitMQ 3.10.8 routes them
# (a void value in an all binding matches any value of that key)
HEADER_WANT = {0: [4, 7], 1: [4, 7], 2: [0, 3, 4, 6, 7, 10], 3: [1, 4, 7, 10], 4: [0, 2, 3, 4, 6, 7, 10],
               5: [3, 4, 7], 6: [4, 7, 8, 9], 7: [4, 7, 8, 9, 10], 8: [4, 7, 10], 9: [4, 7, 11], 10: [4, 7],
               11: [4, 7, 10], 12: [0, 3, 4, 6, 7, 10]}


@check("headers_routing_matrix")
def _():
    with session() as (_c, ch):
        ch.confirm_delivery()
        x = declare_exchange(ch, "ex.headersmx", "headers")
        qs = [bound_queue(ch, x, arguments=args) for args in HEADER_BINDINGS]
        bad = []
        for i, h in enumerate(HEADER_MSGS):
            ch.basic_publish(x, "", b"m", pika.BasicProperties(headers=h))
            got = [j for j, q in enumerate(qs) if ch.basic_get(q, auto_ack=True)[0] is not None]
            if DUMP:
                print("dump headers %d %r: %r" % (i, h, got))
            if got != HEADER_WANT[i]:
                bad.append("headers %r: got bindings %s, want %s" % (h, got, HEADER_WANT[i]))
    assert not bad, "; ".join(bad)


QUEUE_ARG_CASES = [
    ({"x-max-priority": 256}, "PRECONDITION_FAILED - invalid arg 'x-max-priority' for queue '%s' in vhost '/': "
                              "{max_value_exceeded,256}"),
    ({"x-max-priority": -1}, "PRECONDITION_FAILED - invalid arg 'x-max-priority' for queue '%s' in vhost '/': "
                             "{value_negative,-1}"),
    ({"x-expires": 0}, "PRECONDITION_FAILED - invalid arg 'x-expires' for queue '%s' in vhost '/': "
                       "{value_zero,0}"),
    ({"x-expires": "1"}, "PRECONDITION_FAILED - invalid arg 'x-expires' for queue '%s' in vhost '/': "
                         "\"expected integer, got longstr\""),
    ({"x-max-length": -1}, "PRECONDITION_FAILED - invalid arg 'x-max-length' for queue '%s' in vhost '/': "
                           "{value_negative,-1}"),
    ({"x-max-length-bytes": -5}, "PRECONDITION_FAILED - invalid arg 'x-max-length-bytes' for queue '%s' in vhost '/': "
                                 "{value_negative,-5}"),
    ({"x-overflow": "sideways"}, "PRECONDITION_FAILED - invalid arg 'x-overflow' for queue '%s' in vhost '/': "
                                 "invalid_overflow"),
    ({"x-queue-mode": "eager"}, "PRECONDITION_FAILED - invalid arg 'x-queue-mode' for queue '%s' in vhost '/': "
                                "\"unsupported queue mode 'eager'\""),
    ({"x-dead-letter-routing-key": "k"}, "PRECONDITION_FAILED - invalid arg 'x-dead-letter-routing-key' for queue "
                                         "'%s' in vhost '/': routing_key_but_no_dlx_defined"),
    ({"x-dead-letter-exchange": 5}, "PRECONDITION_FAILED - invalid type 'signedint' for arg 'x-dead-letter-exchange' "
                                    "in queue '%s' in vhost '/'"),
    ({"x-single-active-consumer": "yes"}, "PRECONDITION_FAILED - invalid arg 'x-single-active-consumer' for queue "
                                          "'%s' in vhost '/': {unacceptable_type,longstr}"),
    ({"x-message-ttl": 2 ** 40}, "PRECONDITION_FAILED - invalid arg 'x-message-ttl' for queue '%s' in vhost '/': "
                                 "{value_too_large,1099511627776}"),
    ({"x-consumer-timeout": 1000}, None),
]


@check("queue_argument_validation")
def _():
    c = connect()
    bad = []
    for i, (args, text) in enumerate(QUEUE_ARG_CASES):
        ch = c.channel()
        q = name("q.args%d" % i)
        try:
            ch.queue_declare(q, exclusive=True, arguments=args)
            got = None
        except ChannelClosedByBroker as e:
            got = "%d %s" % (e.reply_code, e.reply_text)
        want = None if text is None else "406 " + (text % q)
        if got != want:
            bad.append("%r: got %r, want %r" % (args, got, want))
        if ch.is_open:
            ch.close()
    c.close()
    assert not bad, "; ".join(bad)


@check("ack_nack_all_with_tag_0")
def _():
    with session() as (c, ch):
        q = temp_queue(ch)
        publish(ch, q, b"0", b"1", b"2", b"3")
        for _ in range(4):
            get_wait(ch, q, auto_ack=False)
        ch.basic_nack(0, multiple=True, requeue=True)
        out = [get_wait(ch, q, auto_ack=False)[2] for _ in range(4)]
        eq(out, [b"0", b"1", b"2", b"3"], "all requeued in order")
        ch.basic_ack(0, multiple=True)
        pump(c, 0.2)
        eq(message_count(ch, q), 0, "all acked")
        expect_async_close(c, ch, lambda: ch.basic_ack(99, multiple=True), 406,
                           "PRECONDITION_FAILED - unknown delivery tag 99")


@check("purge_leaves_unacked")
def _():
    with session() as (_c, ch):
        q = temp_queue(ch)
        publish(ch, q, b"0", b"1", b"2")
        m, _, _ = get_wait(ch, q, auto_ack=False)
        eq(ch.queue_purge(q).method.message_count, 2, "purged ready only")
        ch.basic_nack(m.delivery_tag, requeue=True)
        m, _, b = get_wait(ch, q)
        eq((b, m.redelivered), (b"0", True), "unacked one came back")


@check("ack_after_queue_deleted")
def _():
    with session() as (c, ch):
        q = name("q.delack")
        ch.queue_declare(q)
        publish(ch, q, b"x")
        m, _, _ = get_wait(ch, q, auto_ack=False)
        ch.queue_delete(q)
        ch.basic_ack(m.delivery_tag)
        pump(c, 0.3)
        assert ch.is_open, "channel closed: %r" % ch._closing_reason  # pylint: disable=protected-access
        temp_queue(ch)


@check("ttl_zero_delivers_to_waiting_consumer")
def _():
    with session() as (c, ch):
        q = temp_queue(ch, {"x-message-ttl": 0})
        publish(ch, q, b"gone")
        pump(c, 0.2)
        eq(ch.basic_get(q)[0], None, "ttl 0 with no consumer")
        got = []
        ch.basic_consume(q, lambda _c, m, p, b: got.append(b), auto_ack=True)
        publish(ch, q, b"live")
        pump(c, 0.3)
        eq(got, [b"live"], "ttl 0 with a waiting consumer")
        q3 = temp_queue(ch)
        got3 = []
        ch.basic_consume(q3, lambda _c, m, p, b: got3.append((b, p.expiration)), auto_ack=True)
        publish(ch, q3, b"m", props=pika.BasicProperties(expiration="0"))
        pump(c, 0.3)
        eq(got3, [(b"m", "0")], "expiration 0 with a waiting consumer")


@check("ttl_expiry_only_at_head")
def _():
    with session() as (c, ch):
        q2 = temp_queue(ch)
        publish(ch, q2, b"long", props=pika.BasicProperties(expiration="60000"))
        publish(ch, q2, b"short", props=pika.BasicProperties(expiration="100"))
        pump(c, 0.4)
        eq(message_count(ch, q2), 2, "expired message behind a live head still counted")
        eq(ch.basic_get(q2, auto_ack=True)[2], b"long", "head")
        eq(ch.basic_get(q2)[0], None, "the short one expired when it reached the head")


@check("dead_letter_not_on_delete_or_purge")
def _():
    with session() as (c, ch):
        ch.confirm_delivery()
        _dlx, dlq, src = _death_setup(ch, "del", {})
        publish(ch, src, b"p")
        ch.queue_purge(src)
        publish(ch, src, b"d")
        ch.queue_delete(src)
        pump(c, 0.3)
        eq(message_count(ch, dlq), 0, "dead-lettered on purge/delete")


@check("dead_letter_expiry_cycle_dropped")
def _():
    # q1 (ttl) -> dlx1 -> q2 (ttl) -> dlx2 -> q1: expiry only, so the message
    # is dropped when it would enter q1 again
    with session() as (c, ch):
        d1 = declare_exchange(ch, "dlx.cy1", "fanout")
        d2 = declare_exchange(ch, "dlx.cy2", "fanout")
        q1 = declare_queue(ch, "q.cy1", arguments={"x-message-ttl": 50, "x-dead-letter-exchange": d1})
        q2 = declare_queue(ch, "q.cy2", arguments={"x-message-ttl": 50, "x-dead-letter-exchange": d2})
        ch.queue_bind(q2, d1)
        ch.queue_bind(q1, d2)
        tap = bound_queue(ch, d2)
        publish(ch, q1, b"cyc")
        pump(c, 1.0)
        counts = (message_count(ch, q1), message_count(ch, q2))
        m, p, b = ch.basic_get(tap, auto_ack=True)
    eq(counts, (0, 0), "messages left in the cycle")
    assert m is not None, "nothing reached the tap"
    h = dl_headers(p)
    eq([(d[1]["queue"][1], d[1]["reason"][1], d[1]["count"][1]) for d in h["x-death"][1]],
       [(q2.encode(), b"expired", 1), (q1.encode(), b"expired", 1)], "x-death at the tap")


@check("frame_max_small")
def _():
    with session(frame_max=4096) as (c, ch):
        eq(c._impl.params.frame_max, 4096, "negotiated frame_max")  # pylint: disable=protected-access
        q = temp_queue(ch)
        big = b"z" * 100000
        publish(ch, q, big, props=pika.BasicProperties(headers={"h": "v" * 3000}))
        m, p, b = get_wait(ch, q)
        eq((b == big, p.headers["h"] == "v" * 3000), (True, True), "body and headers over 4096-byte frames")
    eq(negotiated(channel_max=10).channel_max, 10, "negotiated channel_max")


# --------------------------------------------------------------------------
# transactions and recover


@check("tx_commit_rollback")
def _():
    with session() as (c, ch):
        q = temp_queue(ch)
        ch.tx_select()
        publish(ch, q, b"rolled back")
        ch.tx_rollback()
        publish(ch, q, b"committed")
        other = c.channel()
        eq(message_count(other, q), 0, "visible before commit")
        ch.tx_commit()
        eq(message_count(other, q), 1, "visible after commit")
        # acks are transactional too
        m, _, b = ch.basic_get(q)
        eq(b, b"committed", "body")
        ch.basic_ack(m.delivery_tag)
        ch.tx_rollback()
        eq(message_count(other, q), 0, "rolled-back ack: still unacked")
        ch.basic_ack(m.delivery_tag)
        ch.tx_commit()
        ch.close()
        eq(message_count(other, q), 0, "committed ack")


@check("tx_errors_406")
def _():
    with session() as (c, ch):
        for first, then, text in ((None, "tx_commit", "channel is not transactional"),
                                  (None, "tx_rollback", "channel is not transactional"),
                                  ("tx_select", "confirm_delivery", "cannot switch from tx to confirm mode"),
                                  ("confirm_delivery", "tx_select", "cannot switch from confirm to tx mode")):
            if first:
                getattr(ch, first)()
            expect_channel_close(getattr(ch, then), 406, "PRECONDITION_FAILED - " + text)
            ch = c.channel()


@check("basic_recover_requeue")
def _():
    with session() as (_c, ch):
        q = temp_queue(ch)
        publish(ch, q, b"rec")
        get_wait(ch, q, auto_ack=False)
        ch.basic_recover(requeue=True)
        m, p, b = ch.basic_get(q)
        eq((b, m and m.redelivered, m and m.delivery_tag), (b"rec", True, 2), "after recover")
        ch.basic_ack(m.delivery_tag)


@check("basic_recover_consumer_requeue")
def _():
    with session() as (c, ch):
        q = temp_queue(ch)
        publish(ch, q, b"rec")
        got = []
        ch.basic_consume(q, lambda _c, m, p, b: got.append((m.delivery_tag, m.redelivered, b)))
        pump(c, 0.3)
        ch.basic_recover(requeue=True)
        pump(c, 0.3)
        eq(got, [(1, False, b"rec"), (2, True, b"rec")], "deliveries around recover(requeue=true)")


@check("basic_recover_no_requeue_540")
def _():
    with session() as (_c, ch):
        expect_connection_close(lambda: ch.basic_recover(requeue=False), 540, "NOT_IMPLEMENTED - requeue=false")


# --------------------------------------------------------------------------

def main():
    for run in CHECKS:
        run()
    # clean up anything durable a failed check left on the broker
    try:
        c = connect()
        for n in ("q.durable", "q.confirm", "q.purge", "q.ineq", "q.del", "q.cancel", "q.cancel2",
                  "q.expires", "q.requeue", "q.quorum", "q.stream", "q.classic"):
            ch = c.channel()
            ch.queue_delete(name(n))
        c.close()
    except Exception:  # pylint: disable=broad-except
        pass
    print("%d checks, %d failed" % (len(CHECKS), len(FAILS)), flush=True)
    sys.exit(1 if FAILS else 0)


if __name__ == "__main__":
    main()
