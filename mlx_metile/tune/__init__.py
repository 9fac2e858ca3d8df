"""The tuner: candidates (every route a backend has, and the stock composition), an accuracy gate,
a timing protocol honest on noisy machines, a persistent store of decisions and of the candidates
rejected, with the reasons. Its decisions go where `choose` and the dispatch read them
(schedule.tuned). docs/TUNING.md says how each part works and why."""

from .. import dispatch
from ..schedule import tuned
from .autotune import Tuning, autotune
from .candidates import KINDS, Candidate, register
from .export import export_decisions
from .protocol import Clock, Protocol, WallClock
from .store import Store, StoreError
from .tournament import Decision, Record, install_routes, tournament


def forget() -> None:
    """Drop every installed decision: calls run what choose's rules give again."""
    tuned.forget()
    dispatch.forget_plans()


__all__ = [
    "KINDS",
    "Candidate",
    "Clock",
    "Decision",
    "Protocol",
    "Record",
    "Store",
    "StoreError",
    "Tuning",
    "WallClock",
    "autotune",
    "export_decisions",
    "forget",
    "install_routes",
    "register",
    "tournament",
]
