"""The fast environment reader sees changes made through os.environ at once."""

from __future__ import annotations

import os

from mlx_metile.envvars import getenv, raw_settings


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


def test_raw_settings_change_when_os_environ_does(monkeypatch):
    """raw_settings keys caches: equal while the settings are, different after a change."""
    a, b = "MLX_METILE_TEST_A", "MLX_METILE_TEST_B"
    monkeypatch.delenv(a, raising=False)
    monkeypatch.setenv(b, "1")
    current = raw_settings(a, b)
    before = current()
    assert before == current() and before[0] is None
    monkeypatch.setenv(a, "2")
    assert current() != before
    monkeypatch.delenv(a)
    assert current() == before
