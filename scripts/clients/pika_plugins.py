#!/usr/bin/python3
"""Exercise railmq's built-in plugin features with Python pika (1.2).

Usage: /usr/bin/python3 scripts/clients/pika_plugins.py amqp://guest:guest@127.0.0.1:5690/

Delayed messages (rabbitmq-delayed-message-exchange), deduplication
(rabbitmq-message-deduplication), consistent hashing
(rabbitmq_consistent_hash_exchange) and railmq's own retry with backoff.
The expectations follow the plugins' READMEs and sources and railmq's docs/features.md
("Built in"); plain RabbitMQ, without the plugins, fails them. Prints one
line per check, `ok NAME` or `FAIL NAME: detail`, then `N checks, M failed`,
and exits 1 if any check failed.
"""

import collections
import decimal
import sys
import time

import pika
from pika.exceptions import ChannelClosedByBroker, NackError, UnroutableError

URL = sys.argv[1] if len(sys.argv) > 1 else "amqp://guest:guest@127.0.0.1:5672/"
COUNT = 0
FAILS = []


def check(name, ok, detail=""):
    global COUNT
    COUNT += 1
    if ok:
        print("ok " + name, flush=True)
    else:
        FAILS.append(name)
        print("FAIL %s: %s" % (name, str(detail).replace("\n", " ")), flush=True)


def connect():
    c = pika.BlockingConnection(pika.URLParameters(URL))
    return c, c.channel()


def get_wait(ch, q, timeout):
    """basic.get (auto-ack) until a message or timeout: (method, props, body, when)."""
    end = time.time() + timeout
    while time.time() < end:
        m, p, b = ch.basic_get(q, auto_ack=True)
        if m:
            return m, p, b, time.time()
        time.sleep(0.005)
    return None, None, None, None


def delayed():
    c, ch = connect()
    ch.exchange_declare("pp-delayed", "x-delayed-message", durable=True, arguments={"x-delayed-type": "direct"})
    ch.queue_declare("pp-delayed-q", durable=True)
    ch.queue_purge("pp-delayed-q")
    ch.queue_bind("pp-delayed-q", "pp-delayed", "job")
    ch.confirm_delivery()
    t0 = time.time()
    ch.basic_publish("pp-delayed", "job", b"later", pika.BasicProperties(delivery_mode=2, headers={"x-delay": 1500}))
    ch.basic_publish("pp-delayed", "job", b"now", pika.BasicProperties(headers={"x-delay": 0}))
    ch.basic_publish("pp-delayed", "job", b"str", pika.BasicProperties(headers={"x-delay": "700"}))
    _, _, b, _ = get_wait(ch, "pp-delayed-q", 1)
    check("delayed_x_delay_0_routes_at_once", b == b"now", b)
    _, p, b, t = get_wait(ch, "pp-delayed-q", 3)
    check("delayed_string_x_delay_held", b == b"str" and 0.69 <= t - t0 < 2.0, (b, round(t - t0, 3) if t else None))
    check("delayed_x_delay_negated", p is not None and (p.headers or {}).get("x-delay") == -700, p.headers if p else None)
    _, p, b, t = get_wait(ch, "pp-delayed-q", 3)
    check("delayed_1500_held", b == b"later" and 1.49 <= t - t0 < 3.0, (b, round(t - t0, 3) if t else None))
    check("delayed_persistent_kept", p is not None and p.delivery_mode == 2, p.delivery_mode if p else None)
    try:
        ch.basic_publish("pp-delayed", "job", b"mand", pika.BasicProperties(headers={"x-delay": 300}), mandatory=True)
        check("delayed_mandatory_returned_at_publish", False, "not returned")
    except UnroutableError:
        check("delayed_mandatory_returned_at_publish", True)
    _, _, b, _ = get_wait(ch, "pp-delayed-q", 3)
    check("delayed_mandatory_still_routed_when_due", b == b"mand", b)
    try:
        ch2 = c.channel()
        ch2.exchange_declare("pp-delayed-bad", "x-delayed-message", arguments={"x-delayed-type": "x-delayed-message"})
        check("delayed_type_delayed_refused_406", False, "declared")
    except ChannelClosedByBroker as e:
        check("delayed_type_delayed_refused_406", e.reply_code == 406, (e.reply_code, e.reply_text))
    ch.exchange_delete("pp-delayed")
    ch.queue_delete("pp-delayed-q")
    c.close()


def retry():
    c, ch = connect()
    ch.queue_delete("pp-retry")
    ch.queue_delete("pp-retry-parked")
    ch.queue_declare("pp-retry-parked", durable=True)
    ch.queue_declare("pp-retry", durable=True, arguments={
        "x-retry-delay": 400, "x-retry-backoff": 2, "x-retry-delay-max": 1000,
        "x-delivery-limit": 3, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "pp-retry-parked"})
    ch.confirm_delivery()
    ch.basic_publish("", "pp-retry", b"job", pika.BasicProperties(delivery_mode=2))
    got = []

    def on_msg(chan, method, props, body):
        got.append((time.time(), method.redelivered, (props.headers or {}).get("x-delivery-count")))
        chan.basic_nack(method.delivery_tag, requeue=True)

    tag = ch.basic_consume("pp-retry", on_msg)
    end = time.time() + 8
    while time.time() < end and len(got) < 4:
        c.process_data_events(time_limit=0.05)
    ch.basic_cancel(tag)
    check("retry_first_and_three_retries", len(got) == 4, len(got))
    gaps = [round(got[i][0] - got[i - 1][0], 3) for i in range(1, len(got))]
    want = [0.4, 0.8, 1.0]  # backoff 2, capped at 1 s
    check("retry_held_with_backoff_and_cap", len(gaps) == 3 and all(w - 0.02 <= g < w + 0.6 for g, w in zip(gaps, want)), gaps)
    check("retry_redeliveries_flagged", all(r for _, r, _ in got[1:]), [r for _, r, _ in got])
    check("retry_x_delivery_count", [n for _, _, n in got[1:]] == [1, 2, 3], [n for _, _, n in got])
    _, p, b, _ = get_wait(ch, "pp-retry-parked", 3)
    check("retry_past_limit_dead_lettered", b == b"job", b)
    death = ((p.headers or {}).get("x-death") or [{}])[0] if p is not None else {}
    check("retry_x_death_reason_delivery_limit", death.get("reason") == "delivery_limit", death.get("reason"))
    ch.queue_declare("pp-retry-h", arguments={"x-retry-delay": 800})
    ch.basic_publish("", "pp-retry-h", b"h")
    m, _, _ = ch.basic_get("pp-retry-h", auto_ack=False)
    ch.basic_nack(m.delivery_tag, requeue=True)
    ok = ch.queue_declare("pp-retry-h", passive=True)
    check("retry_held_not_counted_by_declare_ok", ok.method.message_count == 0, ok.method.message_count)
    m, _, b, _ = get_wait(ch, "pp-retry-h", 4)
    check("retry_held_comes_back", b == b"h" and m is not None and m.redelivered, (b, m.redelivered if m else None))
    # pika sends no floats: a fractional backoff and a jitter go as decimals
    ch.queue_delete("pp-retry-dec")
    ch.queue_declare("pp-retry-dec", arguments={"x-retry-delay": 200, "x-retry-backoff": decimal.Decimal("1.5"),
                                                "x-retry-jitter": decimal.Decimal("0.0")})
    check("retry_decimal_arguments_taken", True)
    for q in ("pp-retry", "pp-retry-parked", "pp-retry-h", "pp-retry-dec"):
        ch.queue_delete(q)
    c.close()


def dedup():
    c, ch = connect()
    for q in ("pp-dedup-xq", "pp-dedup-q"):
        ch.queue_delete(q)
    ch.exchange_delete("pp-dedup-x")
    ch.exchange_declare("pp-dedup-x", "x-message-deduplication", durable=True, arguments={"x-cache-size": 100, "x-cache-ttl": 60000})
    ch.queue_declare("pp-dedup-xq", durable=True)
    ch.queue_bind("pp-dedup-xq", "pp-dedup-x", "any")
    ch.confirm_delivery()
    for _ in range(3):
        ch.basic_publish("pp-dedup-x", "", b"o42", pika.BasicProperties(delivery_mode=2, headers={"x-deduplication-header": "order-42"}))
    ch.basic_publish("pp-dedup-x", "", b"o43", pika.BasicProperties(delivery_mode=2, headers={"x-deduplication-header": "order-43"}))
    ch.basic_publish("pp-dedup-x", "", b"no-id", pika.BasicProperties(delivery_mode=2))
    ch.basic_publish("pp-dedup-x", "", b"no-id", pika.BasicProperties(delivery_mode=2))
    n = ch.queue_declare("pp-dedup-xq", passive=True).method.message_count
    check("dedup_exchange_routes_each_id_once", n == 4, n)
    try:
        ch.basic_publish("pp-dedup-x", "", b"o42", pika.BasicProperties(headers={"x-deduplication-header": "order-42"}), mandatory=True)
        check("dedup_exchange_mandatory_duplicate_returned", False, "not returned")
    except UnroutableError:
        check("dedup_exchange_mandatory_duplicate_returned", True)
    try:
        ch2 = c.channel()
        ch2.exchange_declare("pp-dedup-bad", "x-message-deduplication", arguments={})
        check("dedup_exchange_cache_size_required_406", False, "declared")
    except ChannelClosedByBroker as e:
        check("dedup_exchange_cache_size_required_406", e.reply_code == 406 and "x-cache-size" in e.reply_text, (e.reply_code, e.reply_text))
    ch.queue_declare("pp-dedup-q", durable=True, arguments={"x-message-deduplication": True})
    ch.basic_publish("", "pp-dedup-q", b"a", pika.BasicProperties(delivery_mode=2, headers={"x-deduplication-header": "a"}))
    try:
        ch.basic_publish("", "pp-dedup-q", b"a2", pika.BasicProperties(delivery_mode=2, headers={"x-deduplication-header": "a"}))
        check("dedup_queue_duplicate_nacked", False, "acked")
    except NackError:
        check("dedup_queue_duplicate_nacked", True)
    m, _, _ = ch.basic_get("pp-dedup-q", auto_ack=False)
    try:
        ch.basic_publish("", "pp-dedup-q", b"a3", pika.BasicProperties(headers={"x-deduplication-header": "a"}))
        check("dedup_queue_nacked_while_unacked", False, "acked")
    except NackError:
        check("dedup_queue_nacked_while_unacked", True)
    ch.basic_ack(m.delivery_tag)
    try:
        ch.basic_publish("", "pp-dedup-q", b"a4", pika.BasicProperties(headers={"x-deduplication-header": "a"}))
        check("dedup_queue_taken_again_once_acked", True)
    except NackError:
        check("dedup_queue_taken_again_once_acked", False, "nacked")
    for q in ("pp-dedup-q", "pp-dedup-xq"):
        ch.queue_delete(q)
    ch.exchange_delete("pp-dedup-x")
    c.close()


def chash():
    c, ch = connect()
    ch.exchange_delete("pp-chash")
    ch.exchange_declare("pp-chash", "x-consistent-hash")
    qs = ["pp-chash-%d" % i for i in range(4)]
    for i, q in enumerate(qs):
        ch.queue_delete(q)
        ch.queue_declare(q)
        ch.queue_bind(q, "pp-chash", "2" if i == 0 else "1")  # weights
    n = 5000
    for i in range(n):
        ch.basic_publish("pp-chash", "key-%d" % i, b"x")
    for _ in range(20):
        ch.basic_publish("pp-chash", "customer-42", b"c42")
    counts, c42 = collections.Counter(), collections.Counter()
    for q in qs:
        while True:
            m, _, b = ch.basic_get(q, auto_ack=True)
            if not m:
                break
            counts[q] += 1
            if b == b"c42":
                c42[q] += 1
    check("chash_each_message_to_one_queue", sum(counts.values()) == n + 20, dict(counts))
    check("chash_spread_over_all_queues", len(counts) == 4 and min(counts.values()) > 500, dict(counts))
    check("chash_weight_2_about_twice", counts[qs[0]] > 1.5 * (n / 5), dict(counts))
    check("chash_one_key_one_queue", len(c42) == 1 and sum(c42.values()) == 20, dict(c42))
    try:
        ch2 = c.channel()
        ch2.queue_bind(qs[1], "pp-chash", "abc")
        check("chash_non_integer_weight_406", False, "bound")
    except ChannelClosedByBroker as e:
        check("chash_non_integer_weight_406", e.reply_code == 406 and
              e.reply_text == 'PRECONDITION_FAILED - The binding key must be an integer: <<"abc">>', (e.reply_code, e.reply_text))
    for q in qs:
        ch.queue_delete(q)
    ch.exchange_delete("pp-chash")
    c.close()


def main():
    for part in (delayed, retry, dedup, chash):
        try:
            part()
        except Exception as e:  # pylint: disable=broad-except
            check(part.__name__ + "_ran_to_the_end", False, repr(e))
    print("%d checks, %d failed" % (COUNT, len(FAILS)), flush=True)
    sys.exit(1 if FAILS else 0)


if __name__ == "__main__":
    main()
