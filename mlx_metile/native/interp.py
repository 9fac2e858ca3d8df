"""An interpreter of the decoded G13 subset for one thread, bit-exact under a `floats.Model`.

The register file is 256 16-bit halves (r0l, r0h, r1l, ...), uniforms 512 read-only halves.
32-bit float operations round once to binary32 (flushed where the model says so); one with a
16-bit destination then rounds that binary32 result to binary16, twice rounded as applegpu's
hardware tests found. 16-bit operations round once to binary16, never flushed. Saturation clamps
the rounded result to [0, 1], NaN and -0 to +0. Hints ($ cache, ^ discard) change no value.
A `mov` between a 16- and a 32-bit register is refused: its behaviour is not public.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import floats
from .errors import InterpretError
from .floats import F16, F32, Model, Value
from .g13 import REGISTER_HALVES, UNIFORM_HALVES, Decoded, Dst, Instruction, Src


@dataclass
class State:
    regs: list[int] = field(default_factory=lambda: [0] * REGISTER_HALVES)
    uniforms: list[int] = field(default_factory=lambda: [0] * UNIFORM_HALVES)

    def copy(self) -> State:
        return State(list(self.regs), list(self.uniforms))

    def bits(self, s: Src) -> int:
        """The raw bits of a register or uniform source (16 or 32 of them)."""
        file = self.regs if s.kind == "reg" else self.uniforms
        if s.value + (s.size // 16) > len(file):
            raise InterpretError(f"{s.text}: outside the {len(file)} halves")
        if s.size == 32:
            return file[s.value] | (file[s.value + 1] << 16)
        return file[s.value]

    def write(self, d: Dst, bits: int) -> None:
        if d.reg + (d.size // 16) > len(self.regs):
            raise InterpretError(f"{d.text}: outside the {len(self.regs)} halves")
        self.regs[d.reg] = bits & 0xFFFF
        if d.size == 32:
            self.regs[d.reg + 1] = (bits >> 16) & 0xFFFF

    def reg32(self, n: int) -> int:
        return self.regs[2 * n] | (self.regs[2 * n + 1] << 16)

    def set_reg32(self, n: int, bits: int) -> None:
        self.regs[2 * n], self.regs[2 * n + 1] = bits & 0xFFFF, (bits >> 16) & 0xFFFF


def _value(s: Src, state: State, model: Model) -> Value:
    if s.kind == "fimm":
        v = floats.minifloat(s.value)
    elif s.kind in ("reg", "uniform"):
        bits = state.bits(s)
        v = floats.decode(F32, bits, ftz=model.ftz32) if s.size == 32 else floats.decode(F16, bits)
    else:
        raise InterpretError(f"{s.text}: an integer immediate is no float operand")
    return floats.modify(v, s.abs, s.neg)


def _arith(ins: Instruction, state: State, model: Model) -> int:
    a, b, *rest = (_value(s, state, model) for s in ins.srcs)
    base = ins.op[1:]  # fma / add / mul
    if base == "fma":
        exact = floats.fma(a, b, rest[0], model)
    elif base == "add":
        exact = floats.fma(a, floats.ONE, b, model)
    else:
        exact = floats.fma(a, b, floats.PLUS_ZERO if model.fmul_plus_zero else None, model)
    fmt = F32 if ins.form.arith == "f32" else F16
    bits = floats.round_to(fmt, exact, model, ftz=model.ftz32 and fmt is F32)
    if ins.sat:
        bits = floats.round_to(fmt, floats.saturate(floats.decode(fmt, bits)), model)
    if fmt is F32 and ins.dest.size == 16:
        bits = floats.round_to(F16, floats.decode(F32, bits), model)
    return bits


def execute(ins: Decoded, state: State, model: Model) -> None:
    """Run one instruction on `state` in place."""
    if ins.opaque:
        raise InterpretError(f"{ins.text}: opaque instructions are not interpreted")
    assert isinstance(ins, Instruction)
    if ins.form.arith:
        state.write(ins.dest, _arith(ins, state, model))
    elif ins.op == "mov":
        (s,) = ins.srcs
        if s.kind == "imm":
            state.write(ins.dest, s.value)
        elif s.size != ins.dest.size:
            raise InterpretError(f"{ins.text}: a move between sizes is not modelled")
        else:
            state.write(ins.dest, state.bits(s))
    elif ins.op.startswith("ldimm"):
        state.write(ins.dest, ins.imm or 0)
    else:  # pragma: no cover - every form of g13.FORMS is handled above
        raise InterpretError(f"{ins.text}: no semantics")


def run(program: list[Decoded], state: State, model: Model) -> State:
    """A copy of `state` after running `program` in order."""
    out = state.copy()
    for ins in program:
        execute(ins, out, model)
    return out
