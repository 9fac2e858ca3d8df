"""native.patching: the archive a tournament's archive candidate is made of - a synthetic archive
around Mesa's golden G13 encodings (no Apple archive exists here), its function rewritten, each
rewrite verified by interpretation, the code patched in place and everything else kept."""

from __future__ import annotations

import pytest

from mlx_metile.native import archive, g13, rewrite
from mlx_metile.native.archive import Archive
from mlx_metile.native.errors import RewriteError
from mlx_metile.native.patching import patch_archive

from .test_archive import MAIN, PROLOG, small
from .test_rewrite import GOLDEN, STOP


def test_the_patched_archive_holds_the_verified_rewrite_and_nothing_else_changed():
    data = small()
    p = patch_archive(data, 13)
    assert p.accepted and any(a.startswith("fma-identity") for a in p.accepted) and p.rewrite_version == 1
    out = Archive.parse(p.data)
    region = out.region()
    assert len(p.data) == len(data) and out.code("_agc.prolog") == PROLOG
    changed = [k for k in range(len(data)) if data[k] != p.data[k]]
    assert changed and all(region.offset <= k < region.offset + region.size for k in changed)
    original, patched = g13.decode(MAIN), g13.decode(out.code())
    assert patched != original and rewrite.verify(original, patched).ok  # identical bits, every model
    assert "mov r6, r4" in [i.text for i in patched]


def test_nothing_to_rewrite_is_no_candidate():
    plain = g13.decode(GOLDEN)[:1]  # one fmul: no identity, nothing to reorder
    data = archive.build([archive.compute_object([("_agc.main", g13.encode(plain) + STOP)])], gpu_align=4)
    with pytest.raises(RewriteError, match="no rewrite of '_agc.main' was accepted"):
        patch_archive(data, 13)


@pytest.mark.parametrize("generation", [14, 15, 17])
def test_a_gpu_whose_code_is_not_decoded_is_refused(generation):
    with pytest.raises(RewriteError, match=f"no machine-code codec for GPU generation {generation}"):
        patch_archive(small(), generation)
