"""Shared fixtures: paths of the hand-made instances in tests/data, and DESIGN §3.1's."""

from pathlib import Path

import pytest

from nest_cp.io.readers import load_instance
from nest_cp.model.instance import Instance

DATA = Path(__file__).parent / "data"


@pytest.fixture
def data_dir() -> Path:
    return DATA


@pytest.fixture(scope="session")
def worked() -> Instance:
    """DESIGN §3.1's worked example (4 devices, two layers)."""
    return load_instance(DATA / "worked_example.json")
