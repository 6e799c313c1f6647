"""The start-up check of the group (app/access.py ``check_group``): a coordinator failing over
is waited for, a denial is named at once, any other error is raised."""

from __future__ import annotations

import pytest
from aiokafka.errors import (
    GroupAuthorizationFailedError,
    NodeNotReadyError,
    UnknownError,
)

from app.access import AccessDenied, check_group
from app.settings import Settings


class Admin:
    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.calls = 0

    async def list_consumer_group_offsets(self, group: str) -> dict[object, object]:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return {}


SETTINGS = Settings.from_env({"DEDUPE_APP_ID": "dedupe-t"})


async def test_a_coordinator_that_does_not_answer_yet_is_waited_for() -> None:
    admin = Admin(NodeNotReadyError("node 1"), NodeNotReadyError("node 1"))
    await check_group(admin, SETTINGS)  # type: ignore[arg-type]
    assert admin.calls == 3


async def test_waiting_ends_after_the_patience() -> None:
    admin = Admin(*(NodeNotReadyError("node 1") for _ in range(10)))
    with pytest.raises(NodeNotReadyError):
        await check_group(admin, SETTINGS, patience=0.0)  # type: ignore[arg-type]
    assert admin.calls == 1


async def test_a_denial_is_named_at_once() -> None:
    admin = Admin(GroupAuthorizationFailedError())
    with pytest.raises(AccessDenied, match="Read on group 'dedupe-t'"):
        await check_group(admin, SETTINGS)  # type: ignore[arg-type]


async def test_an_error_that_will_not_pass_is_raised() -> None:
    admin = Admin(UnknownError())
    with pytest.raises(UnknownError):
        await check_group(admin, SETTINGS)  # type: ignore[arg-type]
    assert admin.calls == 1
