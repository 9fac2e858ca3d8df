"""The thread-level AST and its printers (mlx_metile/codegen): grouping is the tree's (Paren),
never the printer's; constants, casts, loads and pointer types; statements and layout hints;
the CUDA-only statements and the MSL dialect's refusal of them."""

from __future__ import annotations

import pytest

from mlx_metile.codegen import CUDARenderer, MSLRenderer
from mlx_metile.codegen.ast import (
    FALSE,
    NULL,
    TRUE,
    ZERO_INIT,
    ArrayPtrType,
    Assign,
    AsyncCommit,
    AsyncCopy,
    AsyncWait,
    Barrier,
    Bin,
    Block,
    Cast,
    Comment,
    Const,
    Convert,
    Decl,
    Decls,
    GroupingError,
    If,
    Increment,
    IntPoly,
    Line,
    Load,
    Loop,
    Mma,
    Paren,
    PtrCast,
    PtrType,
    Select,
    SharedBytes,
    Un,
    Var,
    View,
    Zero,
    binary,
    call,
    chain,
    select,
)
from mlx_metile.codegen.cstyle import AmbiguousExpr, RenderError

CUDA, MSL = CUDARenderer(), MSLRenderer()
a, b, c = Var("a"), Var("b"), Var("c")


def cuda(e) -> str:
    return CUDA.expr(e)


def lines(body, renderer=CUDA) -> str:
    return "\n".join(renderer.stmts(body, 0))


# -- grouping ------------------------------------------------------------------------------------


def test_paren_prints_its_parentheses_and_nothing_else_adds_any():
    assert cuda(a + b * 2) == "a + b * 2"
    assert cuda(Paren(a + b) * 2) == "(a + b) * 2"
    assert cuda(a - Paren(b - c)) == "a - (b - c)"
    assert cuda(Paren(a)) == "(a)"  # redundant, and printed: the tree says so
    assert cuda(Paren(a.lt(b)).and_(b.lt(c))) == "(a < b) && b < c"
    assert cuda(-Paren(a + b)) == "-(a + b)"
    assert cuda(select(a.lt(b), Paren(a + 1), b)) == "a < b ? (a + 1) : b"
    assert cuda(Bin("<<", a, Bin("+", b, c))) == "a << b + c"  # + binds tighter: no Paren needed


@pytest.mark.parametrize(
    "tree",
    [
        Bin("*", Bin("+", a, b), Const(2)),  # (a + b) * 2 without its parentheses
        Bin("-", a, Bin("-", b, c)),  # a - (b - c): same precedence on the right
        Bin("+", a, Bin("<<", b, c)),  # (<< binds looser than +: `a << b + c` needs none)
        Un("-", Bin("+", a, b)),
        Cast("size", Bin("+", a, b)),
        Bin("&&", Bin("||", a, b), c),
        Select(Select(a, b, c), a, b),  # a nested condition
        Load("bits32", a).at(0),  # *p[0] would read p[0]
        Bin("*", Load("f32", a), b).dot("x"),
    ],
    ids=lambda t: type(t).__name__,
)
def test_a_tree_needing_parentheses_without_a_paren_is_refused(tree):
    with pytest.raises(AmbiguousExpr, match="needs parentheses"):
        cuda(tree)
    with pytest.raises(AmbiguousExpr):
        MSL.expr(tree)


def test_same_precedence_chains_reassociate_to_the_left_only_where_the_value_stays():
    # a + (b - c) is (a + b) - c for every value: built from parts it prints as C reads `a + b - c`
    assert a + (b - c) == Bin("-", Bin("+", a, b), c)
    assert binary("*", a, Bin("*", b, c)) == Bin("*", Bin("*", a, b), c)
    assert binary("+", a, Bin("*", b, c)) == Bin("+", a, Bin("*", b, c))  # tighter: kept on the right
    assert binary("-", a, Paren(b - c)) == Bin("-", a, Paren(Bin("-", b, c)))  # a Paren is a boundary
    assert chain("+", [a, b, c, 1]) == Bin("+", Bin("+", Bin("+", a, b), c), Const(1))
    assert cuda(a + (b - c)) == "a + b - c" and cuda(chain("|", [a, b, c])) == "a | b | c"
    # where re-association would change the value (integer division, subtraction of a sum), the
    # right operand must be grouped: refused rather than printed as another expression
    for op, right in (("-", Bin("-", b, c)), ("-", Bin("+", b, c)), ("*", Bin("/", b, c)), ("/", Bin("*", b, c))):
        with pytest.raises(GroupingError, match="group the right operand with Paren"):
            binary(op, a, right)
    assert cuda(binary("-", a, Paren(Bin("+", b, c)))) == "a - (b + c)"


# -- expressions -----------------------------------------------------------------------------


def test_constants():
    assert [cuda(Const(v)) for v in (0, 7, -3)] == ["0", "7", "-3"]
    assert cuda(Const(255, hex=4)) == "0x00FF" and cuda(Const(0xBA55ED50, "u32", hex=8)) == "0xBA55ED50u"
    assert cuda(Const(7, "u32")) == "7u"
    assert [cuda(Const(v, "f32")) for v in (1.0, 0.5, 1e-06, -2.0)] == ["1.0f", "0.5f", "1e-06f", "-2.0f"]
    assert (cuda(TRUE), cuda(FALSE), cuda(NULL), MSL.expr(NULL)) == ("true", "false", "nullptr", "nullptr")
    assert cuda(a - Const(-3)) == "a - -3"  # a negative literal is a unary minus: no Paren needed
    with pytest.raises(RenderError, match="non-finite constant"):
        cuda(Const(float("inf"), "f32"))
    with pytest.raises(RenderError, match="unknown constant"):
        cuda(Const(1, "f64"))


def test_casts_loads_and_pointer_types():
    assert cuda(Cast("size", a) * 4) == "(size_t)a * 4"
    assert cuda(Cast("u32", Paren(a + b))) == "(unsigned int)(a + b)"
    assert MSL.expr(Cast("u32", a)) == "(uint)a"
    assert cuda(PtrCast(PtrType("u32", const_elem=True), a + 16)) == "reinterpret_cast<const unsigned int*>(a + 16)"
    assert cuda(PtrCast(ArrayPtrType("bf16", (4, 8)), a)) == "reinterpret_cast<__nv_bfloat16 (*)[4][8]>(a)"
    assert CUDA.type_name(PtrType("u8", const=True)) == "unsigned char* const"
    assert CUDA.type_name(PtrType(PtrType("f32"), const_elem=True)) == "const float**"
    assert cuda(Load("bits32x4", a + 4)) == "*reinterpret_cast<const uint4*>(a + 4)"
    assert cuda(Load("f32", a) * 2) == "*reinterpret_cast<const float*>(a) * 2"
    assert cuda(Paren(Load("bits32x4", a)).dot("x")) == "(*reinterpret_cast<const uint4*>(a)).x"
    with pytest.raises(RenderError, match="has no type 'f64'"):
        cuda(Cast("f64", a))


def test_conversions_per_dialect():
    assert cuda(Convert("f32", "bf16", a)) == "__bfloat162float(a)"
    assert cuda(Convert("bf16", "f32", a)) == "__float2bfloat16(a)"
    assert cuda(Convert("f16", "bf16", a)) == "__float2half(__bfloat162float(a))"  # through f32
    assert cuda(Convert("f32", "f32", a)) == "a"
    assert MSL.expr(Convert("f32", "bf16", a)) == "float(a)" and MSL.expr(Convert("bf16", "f32", a)) == "bfloat(a)"


def test_calls_index_fields_polynomials_and_zeros():
    assert cuda(call("fma", a, b, c)) == "fmaf(a, b, c)" and MSL.expr(call("fma", a, b, c)) == "metal::fma(a, b, c)"
    assert cuda(call("lane")) == "(int)(threadIdx.x & 31)" and MSL.expr(call("lane")) == "metile_lane"
    with pytest.raises(RenderError, match="cuda renderer has no spelling for nope"):
        cuda(call("nope", a))
    assert cuda(a.at(1, b)) == "a[1][b]" and cuda(a.dot("x")) == "a.x"
    assert cuda(IntPoly(((("a",), 2), ((), -3)))) == "(2*a - 3)" and cuda(IntPoly(((("a",), 1),))) == "a"
    assert cuda(IntPoly(((("a",), 2),)) * b) == "2*a * b"
    assert cuda(Zero("bits32x4")) == "make_uint4(0u, 0u, 0u, 0u)" and MSL.expr(Zero("f32")) == "0.0f"
    with pytest.raises(RenderError, match="msl renderer has no zero of 'bits32x4'"):
        MSL.expr(Zero("bits32x4"))


# -- statements ------------------------------------------------------------------------------


def test_declarations_assignments_and_loops():
    body = [
        Decl("f32", "acc", Const(0.0, "f32")),
        Decl("f32", "t", ZERO_INIT, dims=(4,)),
        Decl("f32", "tile", dims=(16, 8), shared=True),
        Decl(PtrType("u8", const_elem=True, const=True), "slot", a + 64),
        Decl("int", "n", b, const=True),
        Decls("int", [("i", Const(0)), ("j", None)]),
        Assign(Var("acc"), a * b, "+="),
        Increment(Var("i")),
        Loop(
            "k", Const(0), Var("k").lt(Var("K")), Const(32), [Assign(Var("acc"), call("fma", a, b, Var("acc")))], True
        ),
        Loop("q", Const(0), Var("q").lt(4), None, [Comment("body")], unroll=4),
        Block([Barrier(), Barrier("simdgroup")]),
    ]
    assert lines(body) == "\n".join(
        [
            "float acc = 0.0f;",
            "float t[4] = {};",
            "__shared__ float tile[16][8];",
            "const unsigned char* const slot = a + 64;",
            "const int n = b;",
            "int i = 0, j;",
            "acc += a * b;",
            "++i;",
            "#pragma unroll",
            "for (int k = 0; k < K; k += 32) {",
            "  acc = fmaf(a, b, acc);",
            "}",
            "#pragma unroll 4",
            "for (int q = 0; q < 4; ++q) {",
            "  // body",
            "}",
            "{",
            "  __syncthreads();",
            "  __syncwarp();",
            "}",
        ]
    )
    msl = lines([body[2], body[-1]], MSL)
    assert msl == "\n".join(
        [
            "threadgroup float tile[16][8];",
            "{",
            "  threadgroup_barrier(mem_flags::mem_threadgroup);",
            "  simdgroup_barrier(mem_flags::mem_none);",
            "}",
        ]
    )


def test_a_const_declaration_of_a_pointer_to_const_is_valid_c():
    assert "const const" not in CUDA.line(Decl(PtrType("bf16", const_elem=True), "p", a, const=True))


def test_if_layouts():
    assign_ab, assign_ba = Assign(a, b), Assign(b, a)
    assert lines([If(a.lt(b), [assign_ab], inline=True)]) == "if (a < b) { a = b; }"
    assert lines([If(a.lt(b), [assign_ab], braces=False)]) == "if (a < b) a = b;"
    chained = If(a.lt(b), [assign_ab], [If(a.gt(b), [assign_ba], [If(c, [Assign(c, a)], inline=True)], inline=True)])
    chained.inline = True
    assert lines([chained]) == "if (a < b) { a = b; }\nelse if (a > b) { b = a; }\nelse if (c) { c = a; }"
    assert lines([If(a.lt(b), [assign_ab], [assign_ba], comment="why")]) == "\n".join(
        ["if (a < b) {  // why", "  a = b;", "} else {", "  b = a;", "}"]
    )
    assert lines([Block([If(a, [assign_ab])])]) == "{\n  if (a) {\n    a = b;\n  }\n}"
    with pytest.raises(RenderError, match="an if without braces takes one statement"):
        lines([If(a, [assign_ab, assign_ba], braces=False)])
    with pytest.raises(RenderError, match="an inline if chains only inline ifs"):
        lines([If(a, [assign_ab], [assign_ba], inline=True)])


def test_line_puts_statements_on_one_line_with_a_comment():
    fallback = If(Var("ok").not_(), [Assign(Var("src"), a)], braces=False)
    assert lines([Line([fallback], comment="a valid address")]) == "if (!ok) src = a;  // a valid address"
    assert lines([Line([Assign(a, b), Increment(c)])]) == "a = b; ++c;"
    with pytest.raises(RenderError, match="Loop does not print on one line"):
        lines([Line([Loop("k", Const(0), TRUE, None)])])


# -- the CUDA dialect's warp-level statements ------------------------------------------------------

CUDA_ONLY = [
    (Mma("bf16", Var("acc"), (a, b, c, a), (b, c)), "metile_mma_bf16(acc, a, b, c, a, b, c);"),
    (Mma("f16", Var("acc").at(2), (a, b, c, a), (b, c)), "metile_mma_f16(acc[2], a, b, c, a, b, c);"),
    (AsyncCopy(Var("dst"), Var("src") + 16, 16, a.lt(b)), "metile_cp16(dst, src + 16, a < b);"),
    (AsyncCopy(Var("dst"), Var("src"), 8, TRUE), "metile_cp_small<8>(dst, src, true);"),
    (AsyncCopy(Var("dst"), Var("src"), 4, FALSE), "metile_cp_small<4>(dst, src, false);"),
    (AsyncCommit(), "metile_cp_commit();"),
    (AsyncWait(2), "metile_cp_wait<2>();"),
    (SharedBytes("ring", 4096), "__shared__ __align__(16) unsigned char ring[4096];"),
    (SharedBytes("dyn", None, 128), "extern __shared__ __align__(128) unsigned char dyn[];"),
    (
        View("xs", "bf16", (4, 8), Var("ring") + 64),
        "__nv_bfloat16 (*const xs)[4][8] = reinterpret_cast<__nv_bfloat16 (*)[4][8]>(ring + 64);",
    ),
]


@pytest.mark.parametrize("stmt,text", CUDA_ONLY, ids=[type(s).__name__ for s, _ in CUDA_ONLY])
def test_cuda_prints_its_warp_level_statements(stmt, text):
    assert CUDA.line(stmt) == text


@pytest.mark.parametrize(
    "stmt,message",
    [
        (Mma("f32", Var("acc"), (a, b, c, a), (b, c)), "takes bf16 / f16 operands"),
        (Mma("bf16", Var("acc"), (a, b, c), (b, c)), "4 A and 2 B registers"),
        (AsyncCopy(Var("dst"), Var("src"), 2, TRUE), "cp.async copies 4, 8 or 16 bytes, not 2"),
    ],
)
def test_cuda_refuses_malformed_warp_statements(stmt, message):
    with pytest.raises(ValueError, match=message):
        CUDA.line(stmt)


@pytest.mark.parametrize("stmt,_", CUDA_ONLY, ids=[type(s).__name__ for s, _ in CUDA_ONLY])
def test_msl_refuses_the_cuda_only_statements(stmt, _):
    expected = {
        Mma: "msl has no m16n8k16 matrix multiply-accumulate",
        AsyncCopy: "msl has no asynchronous copies",
        AsyncCommit: "msl has no asynchronous copies",
        AsyncWait: "msl has no asynchronous copies",
        SharedBytes: "msl renderer has no raw shared memory",
        View: "msl renderer has no shared-memory views",
    }[type(stmt)]
    with pytest.raises(RenderError, match=expected):
        MSL.line(stmt)
    with pytest.raises(RenderError, match=expected):  # inside a block too
        MSL.stmts([Block([stmt])], 1)
