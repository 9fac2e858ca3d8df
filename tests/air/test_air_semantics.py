"""C's evaluation rules in the AIR dialect, on a hand-built kernel run by both the AIR executor and
the emulated MSL of the same AST: a `?:` and an `&&` whose operand reads memory evaluate it only
when chosen (threads past the buffer's end would fault otherwise), a loop with an unroll count,
a compound assignment."""

from __future__ import annotations

import numpy as np
import pytest

from mlx_metile.air import Library
from mlx_metile.air.llvm14 import assemble
from mlx_metile.codegen import AIRRenderer, MSLRenderer
from mlx_metile.codegen.ast import (
    Assign,
    Call,
    Const,
    Decl,
    If,
    Index,
    KernelDef,
    KernelParam,
    Loop,
    Paren,
    Select,
    Var,
)
from mlx_metile.emu import Kernel

from ..conftest import requires_emulator

pytestmark = requires_emulator
N, THREADS = 40, 64


def kernel() -> KernelDef:
    i, x = Var("i"), Var("x")
    zero = Const(0.0, "f32")
    body = [
        Decl("int", "i", Call("tid"), const=True),
        Decl("bool", "ok", Paren(i.lt(Var("n"))), const=True),
        Decl("f32", "a", Paren(Select(Var("ok"), Index(x, i), zero)), const=True),  # x[i] only where ok
        Decl("bool", "pos", Paren(Var("ok").and_(Paren(Index(x, i).gt(zero)))), const=True),  # x[i] only if ok
        Decl("f32", "s", zero),
        Loop(
            "j",
            Const(0),
            Var("j").lt(4),
            Const(1),
            [Assign(Var("s"), Paren(Select(Var("pos"), Var("a"), Paren(-Var("a")))), "+=")],
            unroll=2,
        ),
        If(Var("ok"), [Assign(Index(Var("y"), i), Var("s"))]),
    ]
    params = [
        KernelParam("x", "buffer", "f32"),
        KernelParam("y", "buffer", "f32", True),
        KernelParam("n", "scalar", "i32"),
    ]
    return KernelDef("guarded_abs", params, body, [], THREADS)


@pytest.fixture(scope="module")
def x():
    return np.random.default_rng(3).standard_normal(N).astype(np.float32)


def test_guarded_loads_are_not_evaluated(x):
    k = kernel()
    text = AIRRenderer().render(k)
    assert '!{!"llvm.loop.unroll.count", i32 2}' in text
    fn = Library.of_modules([assemble(text)]).function(k.name)
    msl = Kernel(MSLRenderer().render(k), k.name)
    outs = []
    for run in (fn, msl):
        y = np.zeros(N, np.float32)
        run.dispatch_threadgroups((1, 1, 1), (THREADS, 1, 1), [x, y, N])  # threads 40..63 must not read x
        outs.append(y)
    assert np.array_equal(outs[0], outs[1])
    want = np.zeros(N, np.float32)
    for _ in range(4):  # four float32 additions, in order, as C rounds them
        want = want + np.abs(x)
    assert np.array_equal(outs[0], want)
