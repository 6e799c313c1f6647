"""The app id ownership rule of ``app/admin/topics.py``: which committed topics are another
pipeline's, and what the refusal says. The real-broker test is
``tests/integration/test_pipelines.py``."""

from __future__ import annotations

import pytest
from aiokafka.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    GroupAuthorizationFailedError,
)
from aiokafka.structs import OffsetAndMetadata, TopicPartition

from app.admin.topics import TopicMismatch, app_id_in_use_message, committed_topics, foreign_topics
from app.settings import Settings

SETTINGS = Settings(app_id="dedupe", input_topic="clicks")


@pytest.mark.parametrize(
    ("committed", "foreign"),
    [
        pytest.param(set(), [], id="new-group"),
        pytest.param({"clicks"}, [], id="own-input"),
        pytest.param({"clicks", "dedupe-clicks-repartition"}, [], id="own-input-and-repartition"),
        pytest.param({"dedupe-clicks-repartition"}, [], id="own-repartition-only"),
        pytest.param(
            {"events", "dedupe-events-repartition"},
            ["dedupe-events-repartition", "events"],
            id="another-pipeline",
        ),
        pytest.param({"clicks", "events"}, ["events"], id="own-and-another-input"),
    ],
)
def test_foreign_topics(committed: set[str], foreign: list[str]) -> None:
    assert foreign_topics(SETTINGS, committed) == foreign


def test_an_explicit_repartition_topic_is_the_pipelines_own() -> None:
    settings = Settings(app_id="dedupe", input_topic="clicks", repartition_topic="rekey")
    assert foreign_topics(settings, {"clicks", "rekey"}) == []
    assert foreign_topics(settings, {"clicks", "dedupe-clicks-repartition"}) == [
        "dedupe-clicks-repartition"
    ]


def test_the_refusal_names_both_topics_and_the_setting_to_change() -> None:
    message = app_id_in_use_message(SETTINGS, "dedupe-seen_ids-changelog", ["events"])
    assert "DEDUPE_APP_ID='dedupe'" in message
    assert "committed offsets for 'events'" in message
    assert "DEDUPE_INPUT_TOPIC='clicks'" in message
    assert "'dedupe-seen_ids-changelog'" in message
    assert "DEDUPE_APP_ID=dedupe-clicks" in message


class FakeAdmin:
    """Answers list_consumer_group_offsets with the given errors first, then ``offsets``."""

    def __init__(self, errors: list[Exception], offsets: dict[TopicPartition, int]) -> None:
        self.errors = errors
        self.offsets = offsets
        self.calls = 0

    async def list_consumer_group_offsets(
        self, group: str
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return {tp: OffsetAndMetadata(offset, "") for tp, offset in self.offsets.items()}


async def test_a_coordinator_not_ready_yet_is_waited_for() -> None:
    admin = FakeAdmin(
        [CoordinatorNotAvailableError(), CoordinatorLoadInProgressError()],
        {TopicPartition("events", 0): 5, TopicPartition("events", 1): 0},
    )
    assert await committed_topics(admin, "dedupe") == {"events"}  # type: ignore[arg-type]
    assert admin.calls == 3


async def test_a_group_the_worker_may_not_read_stops_it_with_the_group_named() -> None:
    admin = FakeAdmin([GroupAuthorizationFailedError()], {})
    with pytest.raises(TopicMismatch, match="consumer group 'dedupe' \\(DEDUPE_APP_ID\\)"):
        await committed_topics(admin, "dedupe")  # type: ignore[arg-type]
    assert admin.calls == 1


class BrokerGone:
    """An admin client whose every question meets ``error`` (a broker dying mid-answer)."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    async def describe_topics(self, topics: list[str]) -> list[dict[str, object]]:
        raise self.error

    async def describe_configs(self, resources: list[object]) -> list[object]:
        raise self.error


async def test_a_broker_dying_during_the_safety_check_is_left_for_the_retry() -> None:
    """A worker joining while a broker is killed met ``Connection ... closed`` here; wrapped as
    a TopicMismatch it stopped the worker (cluster tier C3). Retriable errors must reach
    ``recovery.retry.retrying`` as they are."""
    from aiokafka.errors import KafkaConnectionError

    from app.admin.topics import _check_safety, topic_specs

    specs = topic_specs(SETTINGS, "dedupe-seen-changelog", [])
    with pytest.raises(KafkaConnectionError):
        await _check_safety(BrokerGone(KafkaConnectionError("closed")), SETTINGS, specs, 3)  # type: ignore[arg-type]


async def test_an_error_no_retry_mends_stops_the_start_with_the_check_named() -> None:
    from aiokafka.errors import UnknownError

    from app.admin.topics import _check_safety, topic_specs

    specs = topic_specs(SETTINGS, "dedupe-seen-changelog", [])
    with pytest.raises(TopicMismatch, match="cannot check the topics' replication"):
        await _check_safety(BrokerGone(UnknownError()), SETTINGS, specs, 3)  # type: ignore[arg-type]
