"""mlx_metile.integrations.launch: real mlx.launch ranks (ring, 127.0.0.1) of a rank program that
imports nothing heavy; a failing or hanging rank fails the run with that rank's own output."""

from __future__ import annotations

import os
import time

import pytest

from .launch import RankFailure, launch

TOY = "tests.integrations.toy_rank"


def _gone(pid: int, wait: float = 5.0) -> bool:
    end = time.monotonic() + wait
    while time.monotonic() < end:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def test_every_rank_s_result_in_rank_order(tmp_path):
    assert launch(2, TOY, ["ok"], tmp_path, timeout=60) == [{"rank": 0}, {"rank": 1}]


def test_a_failing_rank_fails_the_run_with_its_output(tmp_path):
    with pytest.raises(RankFailure, match="a rank failed") as failure:
        launch(2, TOY, ["fail"], tmp_path, timeout=60)
    text = str(failure.value)
    assert "--- rank 1 (FAILED) ---\nrank 1: deliberate failure" in text
    if "rank 0 (done)" in text:  # (rank 0 is stopped when rank 1 fails: it may not have finished)
        assert text.index("rank 1 (FAILED)") < text.index("rank 0 (done)")  # the failing rank first


def test_a_hanging_rank_is_killed_after_the_timeout(tmp_path):
    start = time.monotonic()
    with pytest.raises(RankFailure, match="timed out after 5 s") as failure:
        launch(2, TOY, ["hang"], tmp_path, timeout=5)
    assert time.monotonic() - start < 30
    assert "rank 1: sleeping" in str(failure.value)
    assert _gone(int((tmp_path / "rank1.pid").read_text()))
