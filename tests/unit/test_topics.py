"""The app id ownership rule of ``app/topics.py``: which committed topics are another
pipeline's, and what the refusal says. The real-broker test is
``tests/integration/test_pipelines.py``."""

from __future__ import annotations

import pytest

from app.settings import Settings
from app.topics import app_id_in_use_message, foreign_topics

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
