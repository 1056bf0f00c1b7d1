"""Shared pytest fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def mediapipe_models() -> dict[str, Path]:
    """``{name: path}`` of the 14 MediaPipe 0.10.14 models, fetched once into the user cache.

    Set ``LITEGPU_MEDIAPIPE_WHEEL`` to a local mediapipe wheel to skip the download.
    Skips (with the reason) when the models cannot be fetched, e.g. offline.
    """
    from litegpu.models import ModelFetchError, fetch_mediapipe

    try:
        return fetch_mediapipe()
    except ModelFetchError as e:
        pytest.skip(f"MediaPipe models unavailable: {e}")
