"""Review of issue 29 (review1): hostile HTTP clients against a real `vfl score --http` process."""

from __future__ import annotations

import json
import time

import pytest

from tests.net.test_scoring_attacks import _post, _raw, http_service  # noqa: F401  (fixture)

pytestmark = [pytest.mark.network, pytest.mark.timeout(600)]


def test_an_id_that_is_not_utf8_encodable_is_refused_and_the_service_lives_on(http_service):  # noqa: F811
    """A JSON string with a lone surrogate (``"\\udcff"``) is a Python str that cannot be UTF-8 encoded into the
    query frame. One such request must be answered 400 and leave the service answering; it used to end the
    service thread (UnicodeEncodeError is not a VFLError) with the hub's round left open."""
    port, hub, held = http_service()
    body = b'{"ids": ["\\udcff"]}'
    status, _, reply = _raw(port, _post(body, str(len(body))), timeout=30)
    assert status == 400, (status, reply)
    good = json.dumps({"ids": [held]}).encode()
    deadline = time.monotonic() + 30
    while True:
        try:
            status = _raw(port, _post(good, str(len(good))), timeout=10)[0]
        except OSError:
            status = 0
        if status == 200:
            break
        assert time.monotonic() < deadline and hub.poll() is None, f"the service stopped answering ({status})"
        time.sleep(0.5)
