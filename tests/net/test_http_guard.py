"""vfl.net.http_guard without a server: the Content-Length decision made before reading, and the token bucket."""

from __future__ import annotations

import email.message

import pytest

from vfl.net.http_guard import HTTPRefusal, RateLimiter, body_length


def _headers(**values: str | list[str]) -> email.message.Message:
    msg = email.message.Message()
    for key, value in values.items():
        for v in value if isinstance(value, list) else [value]:
            msg[key.replace("_", "-")] = v
    return msg


@pytest.mark.parametrize("headers,status", [
    ({}, 411), ({"Transfer_Encoding": "chunked"}, 411), ({"Content_Length": "-1"}, 400),
    ({"Content_Length": "+5"}, 400), ({"Content_Length": "1e3"}, 400), ({"Content_Length": ""}, 400),
    ({"Content_Length": ["5", "6"]}, 400), ({"Content_Length": "101"}, 413),
    ({"Content_Length": "9" * 40}, 413),
])
def test_a_body_length_is_refused_before_reading(headers, status):
    with pytest.raises(HTTPRefusal) as info:
        body_length(_headers(**headers), 100)
    assert info.value.status == status


def test_a_body_length_within_the_cap_is_read():
    assert body_length(_headers(Content_Length=" 100 "), 100) == 100
    assert body_length(_headers(Content_Length="0"), 100) == 0


def test_the_token_bucket_allows_a_burst_then_the_rate():
    limiter = RateLimiter(rate=0.5, burst=3)
    assert [limiter.allow("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    wait = limiter.allow("a")
    assert 0 < wait <= 2.0                                  # one token at 0.5/s
    assert limiter.allow("b") == 0.0                        # another client has its own bucket
    assert RateLimiter(rate=0, burst=1).allow("a") == 0.0   # off
    small = RateLimiter(rate=1, burst=1, max_clients=2)
    for c in "abc":
        small.allow(c)
    assert len(small._buckets) == 2


def test_an_ipv6_client_is_limited_by_its_64_network_not_per_address():
    """review1: a client holding an IPv6 /64 used to get a fresh token bucket per address (2^64 of them)."""
    from vfl.net.http_guard import client_key

    a = client_key(("2001:db8:1:2::1", 5000, 0, 0))
    assert a == client_key(("2001:db8:1:2:ffff:ffff:ffff:fffe", 5001, 0, 0)) == "2001:db8:1:2::/64"
    assert a != client_key(("2001:db8:1:3::1", 5000, 0, 0))
    assert client_key(("::ffff:192.0.2.7", 1, 0, 0)) == client_key(("192.0.2.7", 1)) == "192.0.2.7"
    assert client_key(("127.0.0.1", 1)) != client_key(("127.0.0.2", 1))
    limiter = RateLimiter(rate=0.001, burst=2)
    hosts = [f"2001:db8:1:2::{i:x}" for i in range(1, 6)]
    waits = [limiter.allow(client_key((h, 1, 0, 0))) for h in hosts]
    assert waits[:2] == [0.0, 0.0] and all(w > 0 for w in waits[2:]), waits
