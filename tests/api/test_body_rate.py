"""The shared read-rate budget of large request bodies (``loom.api.body_rate``), without a server: a bucket of
one second's bytes, a debt each caller waits off in turn, and bodies' first 256 KiB free."""

from __future__ import annotations

import pytest

from loom.api.body_rate import FREE_BYTES, BodyRate


def test_a_full_bucket_lets_one_second_of_bytes_through_and_then_callers_queue_behind_the_debt() -> None:
    rate = BodyRate(1000)
    assert rate.take(1000) == 0.0  # the bucket held one second
    first = rate.take(500)
    second = rate.take(500)
    assert first == pytest.approx(0.5, abs=0.01) and second == pytest.approx(1.0, abs=0.01)


def test_a_rate_of_zero_or_less_is_refused() -> None:
    with pytest.raises(ValueError, match="bytes_per_s"):
        BodyRate(0)


async def test_only_the_bytes_past_the_first_256_kib_of_a_body_are_paid_for() -> None:
    rate = BodyRate(1000)  # 1,000 bytes a second, the bucket full: 1,000 bytes
    chunks = [{"type": "http.request", "body": b"x" * (FREE_BYTES // 2), "more_body": True}] * 2 + [
        {"type": "http.request", "body": b"x" * 1000, "more_body": False}]
    pending = list(chunks)

    async def receive():  # noqa: ANN202
        return pending.pop(0)

    metered = rate.meter(receive)
    for _ in chunks:  # had the free 256 KiB been paid for, this would wait for minutes
        await metered()
    assert rate.take(500) == pytest.approx(0.5, abs=0.01)  # the bucket held exactly the 1,000 bytes paid
