"""The decision table: `choose` over the grid of tests/schedule/decisions.py equals the snapshot
decisions.json, every field of every Schedule. A deliberate change of a rule or a tuned table
regenerates the snapshot in the same commit (the failure message gives the command)."""

from __future__ import annotations

from tests.schedule import decisions


def test_choose_matches_the_snapshot():
    want = decisions.load()
    got = decisions.encode(decisions.table())
    changed = decisions.differences(want, got)
    assert not changed, (
        f"choose() differs from {decisions.SNAPSHOT.name} in {len(changed)} entries:\n"
        + "\n".join(changed)
        + f"\nwhere the change is meant, regenerate the snapshot: {decisions.REGENERATE}"
    )
    assert got == want  # (the same ids for the same values: nothing else differs either)


def test_the_snapshot_covers_every_kind_and_target():
    """The grid reaches each schedule kind and each staged variant, so the table pins them all."""
    table = decisions.table()
    chosen = {(c.target, s.kind, s.staged, bool(s.xshare)) for c, ss in table.items() for s in ss}
    for target in ("sm_90", "sm_80"):
        for variant in (("mma", False, False), ("mma", True, False), ("mma", True, True), ("tiled", False, False)):
            assert (target, *variant) in chosen, (target, variant)
    for target in ("msl", "compute_75"):
        assert {k for t, k, *_ in chosen if t == target} == {"simd_splitk", "tiled"}, target


def test_differences_name_the_fields_that_changed():
    """The failure message the snapshot test prints: case, row count and each changed field."""
    want = decisions.encode(decisions.table())
    key = next(k for k in want["decisions"] if k.startswith("sm_90 ") and "q4g64" in k)
    ids = want["decisions"][key].split()
    old = dict(zip(want["fields"], want["schedules"][ids[0]]))
    moved = dict(old, stages=old["stages"] + 1)
    values = [moved[f] for f in want["fields"]]
    sid = decisions.schedule_id(values)
    got = {**want, "schedules": {**want["schedules"], sid: values}}
    got["decisions"] = {**want["decisions"], key: " ".join([sid, *ids[1:]])}
    assert decisions.differences(want, got) == [f"{key} rows 1: stages {old['stages']!r} -> {moved['stages']!r}"]
