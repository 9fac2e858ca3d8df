"""One archive patched by the rewrite pass: the archive Metal serialised for a pipeline in, the
same archive with its function's code rewritten out - every rewrite verified by interpretation
(rewrite.run), the code patched in place (Archive.patch), the result read back and its code
decoded to exactly the rewritten region. What a tournament's archive candidate is made of."""

from __future__ import annotations

from dataclasses import dataclass

from . import g13, rewrite
from .archive import MAIN, Archive
from .errors import ArchiveError, RewriteError
from .rewrite import REWRITE_VERSION, Policy

# GPU generations whose machine code this room decodes (G13: M1); elsewhere every word is opaque
# and no rewrite can be made.
CODECS = {13: g13}


@dataclass(frozen=True)
class Patched:
    data: bytes  # the patched archive
    function: str
    accepted: tuple[str, ...]  # the rewrites made, each verified
    rejected: tuple[tuple[str, str], ...]  # (rewrite, why it was refused)
    rewrite_version: int = REWRITE_VERSION


def patch_archive(data: bytes, generation: int, policy: Policy | None = None, function: str = MAIN) -> Patched:
    """`data` with `function`'s code rewritten under `policy`. RewriteError where the generation has
    no codec or no rewrite applies (an unchanged archive is no candidate: it would time the pipeline
    Metal built anyway); ArchiveError where the archive cannot be patched (Archive.patch says why)."""
    policy = policy or Policy()
    codec = CODECS.get(generation)
    if codec is None:
        raise RewriteError(f"no machine-code codec for GPU generation {generation} (this room decodes G13 only)")
    archive = Archive.parse(data)
    code = archive.code(function)
    region = codec.decode(code)
    outcome = rewrite.run(region, policy)
    if not outcome.accepted:
        refused = "; ".join(f"{label}: {why}" for label, why in outcome.rejected[:3]) or "no candidate rewrite"
        raise RewriteError(f"no rewrite of {function!r} was accepted ({refused})")
    new = codec.encode(outcome.region)
    out = archive.patch(new, function, expect=code)
    if codec.decode(Archive.parse(out).code(function)) != outcome.region:  # pragma: no cover - patch writes new
        raise ArchiveError(f"the patched {function!r} does not decode to the verified rewrite")
    return Patched(out, function, tuple(outcome.accepted), tuple(outcome.rejected))
