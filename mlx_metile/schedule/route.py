"""`Route`: what runs a call - the stock composition, or a backend's kernel with its Schedule and
compiler - as the tuner decides it and as decisions are stored and shipped (JSON)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from .schedule import Schedule

NATIVE = "native"


@dataclass(frozen=True)
class Route:
    """What runs a call: `backend` is the dispatch backend it was decided on ("cpu", "cuda",
    "metal", "emulator"); `native` runs the stock MLX composition there; `schedule` (None: what
    choose's rules give) and `compiler` (CUDA: "nvcc" or "nvrtc"; None: the settings') pick the
    kernel; `build` (Metal and the emulator; None: the MSL source) names how it is built and
    loaded - an AIR metallib ("air", "air:<form>") or a patched binary archive ("archive"), see
    backends/metal_builds.py. `name` is the candidate's name in the tournament that chose it."""

    backend: str
    name: str = NATIVE
    native: bool = False
    schedule: Schedule | None = None
    compiler: str | None = None
    build: str | None = None

    def as_dict(self) -> dict:
        """The route as JSON values (the store's and the decisions file's form)."""
        d = asdict(self)
        d["schedule"] = None if self.schedule is None else self.schedule.knobs()
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Route:
        """The route of `as_dict`'s form; ValueError naming what does not fit."""
        schedule = d.get("schedule")
        if schedule is not None:
            known = {f.name for f in fields(Schedule)}
            unknown = sorted(set(schedule) - known)
            if unknown:
                raise ValueError(f"route {d.get('name')!r}: schedule fields {unknown} are not Schedule's")
            schedule = Schedule(**schedule)
        return cls(d["backend"], d["name"], bool(d["native"]), schedule, d.get("compiler"), d.get("build"))

    def describe(self) -> str:
        if self.native:
            return f"{self.name}: stock MLX on {self.backend}"
        parts = [f"{self.name}: {self.backend}"]
        if self.compiler:
            parts.append(self.compiler)
        if self.build:
            parts.append(f"build {self.build}")
        if self.schedule is not None:
            parts.append(self.schedule.describe())
        return ", ".join(parts)
