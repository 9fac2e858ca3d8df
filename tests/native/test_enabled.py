"""MLX_METILE_PATCHED_ARCHIVES: the native route is off unless the setting turns it on."""

from __future__ import annotations

from mlx_metile import native


def test_off_by_default_and_read_through_settings(env):
    env.unset("MLX_METILE_PATCHED_ARCHIVES")
    assert native.enabled() is False
    env.set("MLX_METILE_PATCHED_ARCHIVES", "1")
    assert native.enabled() is True
    env.set("MLX_METILE_PATCHED_ARCHIVES", "off")
    assert native.enabled() is False
