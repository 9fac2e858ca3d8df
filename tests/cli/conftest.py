from __future__ import annotations

import pytest

from .models import save_tiny_model


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("model") / "tiny-llama-int4")


@pytest.fixture(scope="session")
def tiny_draft(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("draft") / "tiny-draft", seed=1, layers=1)
