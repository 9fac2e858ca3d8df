"""The store: decisions found again under an unchanged key and never under a changed one;
damaged or foreign stores set aside and rebuilt; two processes writing at once."""

import sqlite3
import subprocess
import sys
import textwrap
import warnings

import mlx.core as mx
import pytest

from mlx_metile import settings
from mlx_metile.tune import Protocol, Store, candidates, identity, tournament

from . import planted
from .conftest import K
from .planted import PlantedClock

MS = 1e-3


class Counting:
    """A right candidate that counts its calls (a tournament that ran calls it)."""

    def __init__(self):
        self.calls = 0

    def __call__(self, x, weights, biases=None, epilogue=None, residual=None):
        self.calls += 1
        return planted.right(x, weights, biases, epilogue, residual)


def decide(weight, store, quick, extra_fn=None, protocol=None, times=None):
    fn = extra_fn or Counting()
    clock = PlantedClock(times or {"native": MS, "cpu": 0.4 * MS, "mine": 2 * MS})
    d = tournament(
        mx.zeros((1, K), mx.bfloat16), [weight], rows=4, extra=[("mine", fn)], clock=clock,
        protocol=protocol or quick, store=store,
    )  # fmt: skip
    return d, fn


def test_a_decision_is_found_again_with_its_records_and_rejections(weight, store, quick):
    first, fn = decide(weight, store, quick)
    assert first.chosen == "cpu" and not first.from_store and fn.calls > 0
    again, fn2 = decide(weight, store, quick, extra_fn=fn)
    assert again.from_store and again.key == first.key and fn2.calls == fn.calls  # (nothing ran)
    assert again.chosen == "cpu" and again.route == first.route
    assert again.rejected == first.rejected and again.rejected["mine"].startswith("slower")
    assert again.records["cpu"].ratio == pytest.approx(first.records["cpu"].ratio)
    assert again.records["mine"] == first.records["mine"]
    entry = store.get(first.key)
    assert entry["route"] == {"backend": "cpu", "name": "cpu", "native": False, "schedule": None, "compiler": None,
                              "build": None}  # fmt: skip
    assert entry["context"]["bucket"] == 4 and entry["context"]["versions"]["tuner"] == identity.TUNER_VERSION
    assert [e["key"] for e in store.all()] == [first.key]


def _changes(monkeypatch, env, quick):
    """Each change of the key's parts, applied by a function (undone by the fixtures)."""

    def margin():
        kind = candidates.KINDS["cpu"]
        monkeypatch.setitem(candidates.KINDS, "cpu", candidates.Kind("cpu", 0.07, kind.admit))

    def mlx_version():
        real = identity.versions()
        monkeypatch.setattr(identity, "versions", lambda: {**real, "mlx": "0.99.0"})

    def tuner():
        monkeypatch.setattr(identity, "TUNER_VERSION", identity.TUNER_VERSION + 1)

    def a_setting():
        env.set("MLX_METILE_CUDA_MMA_STAGES", "3")

    def sources():
        monkeypatch.setattr(identity, "sources_hash", lambda: "another lowering")

    def device():
        real = identity.device_identity("cpu")
        monkeypatch.setattr(identity, "device_identity", lambda backend: {**real, "os_build": "another build"})

    return {"margin": margin, "mlx": mlx_version, "tuner": tuner, "setting": a_setting, "sources": sources,
            "device": device}  # fmt: skip


@pytest.mark.parametrize("change", ["margin", "mlx", "tuner", "setting", "sources", "device"])
def test_a_changed_key_invalidates_a_decision(weight, store, quick, monkeypatch, env, change):
    first, fn = decide(weight, store, quick)
    _changes(monkeypatch, env, quick)[change]()
    again, _ = decide(weight, store, quick, extra_fn=fn)
    assert not again.from_store and again.key != first.key


def test_a_changed_protocol_candidate_or_bucket_is_another_key(weight, store, quick):
    first, fn = decide(weight, store, quick)
    other, _ = decide(weight, store, quick, extra_fn=fn, protocol=Protocol(min_rounds=3, max_rounds=7))
    assert not other.from_store

    def edited(x, weights, biases=None, epilogue=None, residual=None):  # another function: another candidate
        return planted.right(x, weights, biases, epilogue, residual)

    third, _ = decide(weight, store, quick, extra_fn=edited)
    assert not third.from_store and len({first.key, other.key, third.key}) == 3
    assert len(store.all()) == 3


def test_retune_decides_again(weight, store, quick):
    first, fn = decide(weight, store, quick)
    clock = PlantedClock({"native": MS, "cpu": 3 * MS, "mine": 2 * MS})
    d = tournament(mx.zeros((1, K), mx.bfloat16), [weight], rows=4, extra=[("mine", fn)], clock=clock,
                   protocol=quick, store=store, retune=True)  # fmt: skip
    assert not d.from_store and d.chosen == "native" and store.get(first.key)["chosen"] == "native"


def _warns_set_aside(path, what):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert Store(path).get("0" * 64) is None
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(messages) == 1 and what in messages[0] and "set aside as" in messages[0], messages
    aside = [p for p in path.parent.iterdir() if ".set-aside-" in p.name]
    assert len(aside) == 1
    return aside[0]


def test_a_corrupt_store_is_set_aside_and_rebuilt(weight, store, quick):
    store.path.write_bytes(b"this is not a database" * 100)
    aside = _warns_set_aside(store.path, "not a store of decisions")
    assert aside.read_bytes().startswith(b"this is not")
    d, _ = decide(weight, store, quick)
    assert not d.from_store and decide(weight, store, quick)[0].from_store


def test_a_store_of_another_version_is_set_aside(store):
    con = sqlite3.connect(store.path)
    con.execute("CREATE TABLE decisions (key TEXT)")
    con.execute("PRAGMA user_version = 99")
    con.commit()
    con.close()
    _warns_set_aside(store.path, "written by store version 99, not 1")
    assert sqlite3.connect(store.path).execute("PRAGMA user_version").fetchone()[0] == 1


def test_a_database_of_another_program_is_set_aside(store):
    con = sqlite3.connect(store.path)
    con.execute("CREATE TABLE photos (id INTEGER)")
    con.commit()
    con.close()
    _warns_set_aside(store.path, "holds tables of another program")


def test_an_unreadable_decision_is_tuned_again(weight, store, quick):
    first, fn = decide(weight, store, quick)
    con = sqlite3.connect(store.path)
    con.execute("UPDATE decisions SET records = '{broken' WHERE key = ?", (first.key,))
    con.commit()
    con.close()
    with pytest.warns(RuntimeWarning, match="is unreadable"):
        again, _ = decide(weight, store, quick, extra_fn=fn)
    assert not again.from_store and decide(weight, store, quick, extra_fn=fn)[0].from_store


def test_the_store_is_in_wal_mode_under_the_cache_root(env, tmp_path):
    env.set("MLX_METILE_CACHE", str(tmp_path / "cache"))
    s = Store()
    assert s.path == tmp_path / "cache" / "tune" / "decisions.sqlite3"
    assert s.get("x") is None
    assert sqlite3.connect(s.path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    env.set("MLX_METILE_TUNE_STORE", str(tmp_path / "mine.db"))
    assert Store().path == tmp_path / "mine.db"
    with pytest.raises(ValueError, match="MLX_METILE_TUNE_STORE: .* is a directory"):
        settings.parse({"MLX_METILE_TUNE_STORE": str(tmp_path)})


WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from mlx_metile.tune.store import Store
    path, me, go = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    while not go.exists():
        time.sleep(0.005)
    store = Store(path)
    for i in range(40):
        entry = {"context": {"i": i, "writer": me}, "site": "s", "bucket": 1, "chosen": "native",
                 "route": None, "records": {}, "rejected": {"cpu": f"slower ({me})"}}
        store.put(f"{me}-{i}", entry)
        store.put(f"shared-{i}", entry)
    print("ok")
    """
)


def test_two_processes_writing_at_once_both_succeed(tmp_path):
    path, go = tmp_path / "decisions.sqlite3", tmp_path / "go"
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(path), me, str(go)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
        for me in ("a", "b")
    ]  # fmt: skip
    go.touch()  # both start together: the store is created by whichever opens it first
    results = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], results
    assert all(out.strip() == "ok" and not err for out, err in results), results
    keys = {e["key"] for e in Store(path).all()}
    assert keys == {f"{me}-{i}" for me in ("a", "b") for i in range(40)} | {f"shared-{i}" for i in range(40)}
    assert Store(path).get("shared-3")["rejected"]["cpu"] in ("slower (a)", "slower (b)")
