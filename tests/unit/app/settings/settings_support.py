"""What the settings tests share: the worker's own fields and the variable of each."""

from __future__ import annotations

import dataclasses

from app.settings import Settings
from envsettings.kafka_security import SECURITY_FIELDS

# The worker's own fields; the Kafka security section is tested in
# tests/unit/envsettings/test_kafka_security.py.
FIELD_NAMES = [f.name for f in dataclasses.fields(Settings) if f.name not in SECURITY_FIELDS]
ENV_OF = {name: setting.env for name, _, setting in Settings.documented()}
