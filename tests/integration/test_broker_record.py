"""kombu's record of delivered messages on our Redis transport (worker/process/broker.py QoS): a fetch
message is held in the process only (no unacked hash entry, no round trip at delivery or
ack), and is still put back in its queue when the process gives it back alive; any other
message keeps kombu's record in Redis. Real redis-server, real kombu channel."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from kombu import Connection, Exchange, Queue

from tests.support.round_trips import RoundTrips

UNACKED = "unacked"  # kombu's Redis transport's default key names
UNACKED_INDEX = "unacked_index"


@pytest.fixture
def conn(redis_url: str) -> Iterator[Connection]:
    with Connection(redis_url, transport="crawler_tasks.worker.process.broker:Transport") as c:
        yield c


def _publish(conn: Connection, queue: str, task: str, body: Any) -> None:
    q = Queue(queue, Exchange(queue, type="direct"), routing_key=queue)
    with conn.Producer() as producer:
        producer.publish(
            body,
            exchange=q.exchange,
            routing_key=queue,
            declare=[q],
            headers={"task": task},
            serializer="json",
        )


def _setup(conn: Connection) -> None:
    _publish(conn, "crawl.high", "crawl.fetch_many", [["c1", [["http://a/", 0]]], {}, {}])
    _publish(conn, "parse", "crawl.parse", [["c1", "http://a/", 0], {}, {}])


def test_a_fetch_message_leaves_no_record_in_redis_and_goes_back_when_given_back(
    conn: Connection, client: redis.Redis
) -> None:
    _setup(conn)
    channel = conn.channel()
    fetch = channel.basic_get("crawl.high", no_ack=False)
    parse = channel.basic_get("parse", no_ack=False)
    assert fetch is not None and parse is not None
    # Only the parse message is recorded for redelivery after visibility_timeout.
    assert client.hkeys(UNACKED) == [parse.delivery_tag.encode()]
    assert client.zcard(UNACKED_INDEX) == 1
    assert channel.qos.can_consume() or channel.qos.prefetch_count == 0
    assert len(channel.qos._delivered) == 2  # both counted for prefetch

    channel.close()  # a warm shutdown / a lost connection: everything unacked goes back
    assert client.llen("crawl.high") == 1 and client.llen("parse") == 1
    assert client.hlen(UNACKED) == 0

    channel = conn.channel()
    again = channel.basic_get("crawl.high", no_ack=False)
    assert again is not None and again.payload == fetch.payload
    assert again.delivery_info.get("redelivered") or again.headers.get("redelivered")
    with RoundTrips() as trips:
        again.ack()
    assert client.llen("crawl.high") == 0 and client.hlen(UNACKED) == 0
    # The ack of a fetch message is not a round trip to Redis (counted in this client: the
    # server's command counts also hold any other client's, and scripts' ZREM and HDEL).
    assert trips.count == 0
    channel.close()
    assert client.llen("crawl.high") == 0  # acked: not put back


def test_a_rejected_fetch_message_goes_back_in_its_queue(
    conn: Connection, client: redis.Redis
) -> None:
    _setup(conn)
    _publish(conn, "crawl.high", "crawl.fetch_many", [["c1", [["http://b/", 0]]], {}, {}])
    channel = conn.channel()
    first = channel.basic_get("crawl.high", no_ack=False)
    assert first is not None and client.hlen(UNACKED) == 0
    first.reject(requeue=True)  # behind the waiting one, as kombu requeues a rejected message
    assert client.hlen(UNACKED) == 0 and client.llen("crawl.high") == 2
    other = channel.basic_get("crawl.high", no_ack=False)
    again = channel.basic_get("crawl.high", no_ack=False)
    assert other is not None and again is not None
    assert other.payload != first.payload and again.payload == first.payload
    again.reject(requeue=False)  # dropped: nothing left of it
    other.ack()
    channel.close()
    assert client.llen("crawl.high") == 0 and client.hlen(UNACKED) == 0


def test_a_release_rounds_fetch_messages_go_in_one_round_trip(
    celery_app: Any, client: redis.Redis
) -> None:
    from crawler_tasks.worker.tasks import CeleryPublisher

    publisher = CeleryPublisher()
    for queue in ("crawl.medium", "crawl.low"):  # a queue is declared at its first message
        publisher.fetch("c0", [("http://a/0", 0)], queue)
        client.delete(queue)
    with RoundTrips() as trips, publisher.together():
        for i in range(1, 6):
            publisher.fetch("c1", [(f"http://a/{i}", 1), (f"http://b/{i}", 1)], "crawl.medium")
        publisher.fetch("c1", [("http://c/", 2)], "crawl.low")
        assert trips.count == 0  # nothing sent until the block ends
    assert trips.count == 1  # one round trip for the six
    assert client.llen("crawl.medium") == 5 and client.llen("crawl.low") == 1
    # A block that fails still sends what it held: those URLs were released.
    with pytest.raises(RuntimeError), publisher.together():
        publisher.fetch("c1", [("http://d/", 1)], "crawl.medium")
        raise RuntimeError("a release call failed")
    assert client.llen("crawl.medium") == 6
