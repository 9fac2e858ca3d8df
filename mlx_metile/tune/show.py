"""What `mlx-metile tune --show` prints: the store's decisions and the candidates each rejected."""

from __future__ import annotations

import time

from .store import Store


def show(store: Store | None = None) -> str:
    store = store or Store()
    if not store.path.exists():
        return f"{store.path}: no decisions yet"
    entries = store.all()
    lines = [f"{store.path}: {len(entries)} decisions"]
    for e in entries:
        ctx = e["context"]
        device = ctx.get("device", {})
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(e["created"]))
        versions = ctx.get("versions", {})
        lines.append(
            f"{e['site']}, rows <= {e['bucket']}: {e['chosen']}  [{device.get('backend', '?')} {device.get('device', '')}"
            f" {device.get('cpu', '')}; mlx {versions.get('mlx', '?')}, mlx-metile {versions.get('mlx_metile', '?')};"
            f" {when}; key {e['key'][:12]}]"
        )
        for name, r in e["records"].items():
            ratio = r.get("ratio")
            shown = "" if not ratio else f", ratio {ratio[0]:.3f}/{ratio[1]:.3f}/{ratio[2]:.3f} of native"
            mark = " (the incumbent)" if r.get("incumbent") else ""
            lines.append(f"    {name}: {r.get('status')}{mark}, gate {r.get('gate')}{shown}")
        for name, why in e["rejected"].items():
            lines.append(f"    rejected {name}: {why}")
    return "\n".join(lines)
