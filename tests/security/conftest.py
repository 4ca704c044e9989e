"""Shared by the red-team suite: one scripted model and one fake HOME per module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bridge.scripted_model import ScriptedModelServer
from tests.security.harness import FakeHome, plant_home


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModelServer]:
    """The scripted model of this module's bridge (its requests are this module's only)."""
    with ScriptedModelServer(delay_scale=0.0) as server:
        yield server


@pytest.fixture(scope="module")
def home(model: ScriptedModelServer) -> Iterator[FakeHome]:
    """A fake HOME outside /tmp with every planted secret, removed after the module."""
    planted = plant_home(model)
    yield planted
    planted.remove()
