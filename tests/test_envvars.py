"""The fast environment reader sees changes made through os.environ at once."""

from __future__ import annotations

import os

from mlx_metile.envvars import getenv


def test_getenv_follows_os_environ(monkeypatch):
    name = "MLX_METILE_TEST_SETTING"
    monkeypatch.delenv(name, raising=False)
    assert getenv(name, "fallback") == "fallback"
    monkeypatch.setenv(name, "7")
    assert getenv(name, "fallback") == "7" == os.environ[name]
    os.environ[name] = "ü8"  # non-ASCII values round-trip
    assert getenv(name) == "ü8"
    monkeypatch.delenv(name)
    assert getenv(name) == ""
