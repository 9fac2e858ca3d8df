"""The thread-level program every renderer prints: statements over expression trees.

Expressions are frozen, hashable trees. Target-specific pieces are named, not written: a `Call`
names a neutral operation (`fma`, `min_i32`, `byte_perm`, `lane`, a helper such as `q4_bf16`)
that each dialect spells through a table; conversions are `Convert`, memory reads `Load`.
Statements for SIMD-group work are nodes of their own - matrix multiply-accumulate (`Mma`),
asynchronous copies and their waits, shared / threadgroup storage, barriers, and the neural
accelerators' MetalPerformancePrimitives operations (`NaxOp`, `CoopTensor`, `TensorView`,
`CoopLoad`, `NaxRun`, `SlotLoop`, the `Slot` expression) - so no lowering writes target text, and
a renderer of another kind (LLVM IR) can walk the same tree.

Grouping is explicit: `Paren` is a pair of parentheses in the source (as clang's ParenExpr),
and the printer never adds one - it refuses a tree whose printed form would parse otherwise
(`AmbiguousExpr`), so what is printed is what the tree says. Building with the operators
(`a + b`, `a * 4`) re-associates chains of one precedence to the left, as C parses them, where
the value stays the same; where it would not (`a - (b + c)`), the right operand must be a `Paren`
(`GroupingError`).

Two layout hints keep the printed text stable: `Line` (statements on one line) and the
`inline` / `braces` flags of `If`. They change no token's meaning.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field as _field

# -- expressions -------------------------------------------------------------------------------

# C precedence of binary operators (higher binds tighter); all left-associative
BINARY_PRECEDENCE = {
    "*": 13,
    "/": 13,
    "%": 13,
    "+": 12,
    "-": 12,
    "<<": 11,
    ">>": 11,
    "<": 10,
    "<=": 10,
    ">": 10,
    ">=": 10,
    "==": 9,
    "!=": 9,
    "&": 8,
    "^": 7,
    "|": 6,
    "&&": 5,
    "||": 4,
}
UNARY = 15  # - ! ~ * casts
POSTFIX = 16  # [] . calls; atoms
SELECT = 3


class Expr:
    """Base of expression nodes: operators build trees (`e + 1`, `e * k`, `e >> 5`)."""

    __slots__ = ()

    def __add__(self, o):
        return binary("+", self, o)

    def __radd__(self, o):
        return binary("+", o, self)

    def __sub__(self, o):
        return binary("-", self, o)

    def __rsub__(self, o):
        return binary("-", o, self)

    def __mul__(self, o):
        return binary("*", self, o)

    def __rmul__(self, o):
        return binary("*", o, self)

    def __truediv__(self, o):
        return binary("/", self, o)

    def __mod__(self, o):
        return binary("%", self, o)

    def __lshift__(self, o):
        return binary("<<", self, o)

    def __rshift__(self, o):
        return binary(">>", self, o)

    def __and__(self, o):
        return binary("&", self, o)

    def __or__(self, o):
        return binary("|", self, o)

    def __xor__(self, o):
        return binary("^", self, o)

    def __neg__(self):
        return Un("-", self)

    def __invert__(self):
        return Un("~", self)

    # comparisons and logic are methods: == must stay structural equality
    def lt(self, o):
        return binary("<", self, o)

    def le(self, o):
        return binary("<=", self, o)

    def gt(self, o):
        return binary(">", self, o)

    def ge(self, o):
        return binary(">=", self, o)

    def eq(self, o):
        return binary("==", self, o)

    def ne(self, o):
        return binary("!=", self, o)

    def and_(self, o):
        return binary("&&", self, o)

    def or_(self, o):
        return binary("||", self, o)

    def not_(self):
        return Un("!", self)

    def at(self, *indices):
        """self[i][j]...: array indexing."""
        e = self
        for i in indices:
            e = Index(e, as_expr(i))
        return e

    def dot(self, name: str):
        """self.name: a vector component (x, y, z, w) or a field."""
        return Field(self, name)

    def paren(self):
        return Paren(self)


@dataclass(frozen=True, eq=True)
class Var(Expr):
    name: str


@dataclass(frozen=True, eq=True)
class Const(Expr):
    """A literal: `dtype` i32 (plain), u32 (suffix u), f32 (suffix f), bool, null; `hex` digits
    print an integer in hexadecimal (0 decimal)."""

    value: object
    dtype: str = "i32"
    hex: int = 0


@dataclass(frozen=True, eq=True)
class Bin(Expr):
    op: str
    a: Expr
    b: Expr


@dataclass(frozen=True, eq=True)
class Un(Expr):
    op: str  # "-", "!", "~"
    a: Expr


@dataclass(frozen=True, eq=True)
class Select(Expr):
    cond: Expr
    a: Expr
    b: Expr


@dataclass(frozen=True, eq=True)
class Call(Expr):
    """A neutral operation or helper, spelled by the dialect's table (`calls`)."""

    name: str
    args: tuple = ()


@dataclass(frozen=True, eq=True)
class Index(Expr):
    base: Expr
    index: Expr


@dataclass(frozen=True, eq=True)
class Field(Expr):
    base: Expr
    name: str


@dataclass(frozen=True, eq=True)
class Convert(Expr):
    """A value converted between dtypes (rounding to nearest even where it narrows)."""

    to: str
    src: str
    a: Expr


@dataclass(frozen=True, eq=True)
class Cast(Expr):
    """A C cast of a value to a scalar type (`size`, `f32`, `u32`, `u16`, ...)."""

    dtype: str
    a: Expr


@dataclass(frozen=True, eq=True)
class PtrType:
    """A pointer: to `elem` (a scalar / vector type, or a PtrType), `const_elem` for read-only
    data, `const` for a pointer that does not change."""

    elem: str
    const_elem: bool = False
    const: bool = False


@dataclass(frozen=True, eq=True)
class ArrayPtrType:
    """A pointer to arrays of `elem` with `dims` (a view of raw shared memory as an array)."""

    elem: str
    dims: tuple[int, ...]


@dataclass(frozen=True, eq=True)
class PtrCast(Expr):
    """A pointer reinterpreted as another pointer type."""

    ptype: PtrType | ArrayPtrType
    a: Expr


@dataclass(frozen=True, eq=True)
class Load(Expr):
    """The value of type `vtype` stored at address `addr` (any pointer)."""

    vtype: str
    addr: Expr


@dataclass(frozen=True, eq=True)
class Zero(Expr):
    """The zero value of a type (vectors included)."""

    vtype: str


@dataclass(frozen=True, eq=True)
class Paren(Expr):
    a: Expr


@dataclass(frozen=True, eq=True)
class IntPoly(Expr):
    """An integer polynomial over symbols: ((monomial, coefficient), ...), a monomial a tuple of
    symbol names (() the constant term). Printed `(a + 2*b - 3)`; one term without parentheses."""

    terms: tuple


@dataclass(frozen=True, eq=True)
class Slot(Expr):
    """Slot `index` of the cooperative tensor `tensor` (a thread's element of a fragment; which
    element it is, the operation that made the tensor lays out: docs/NAX.md)."""

    tensor: str
    index: Expr


NULL = Const(None, "null")
TRUE = Const(True, "bool")
FALSE = Const(False, "bool")


def as_expr(v) -> Expr:
    if isinstance(v, Expr):
        return v
    if isinstance(v, bool):
        return TRUE if v else FALSE
    if isinstance(v, int):
        return Const(v)
    if isinstance(v, float):
        return Const(v, "f32")
    if isinstance(v, str):
        return Var(v)
    raise TypeError(f"not an expression: {v!r}")


def precedence(e: Expr) -> int:
    if isinstance(e, Bin):
        return BINARY_PRECEDENCE[e.op]
    if isinstance(e, Select):
        return SELECT
    if isinstance(e, (Un, Cast, Load)):
        return UNARY
    if isinstance(e, Const) and isinstance(e.value, (int, float)) and not isinstance(e.value, bool) and e.value < 0:
        return UNARY
    if isinstance(e, IntPoly):
        if len(e.terms) != 1:
            return POSTFIX  # printed in parentheses
        ((mono, coef),) = e.terms
        if mono == ():
            return UNARY if coef < 0 else POSTFIX
        return POSTFIX if coef == 1 else BINARY_PRECEDENCE["*"]
    return POSTFIX


# (op, right operand's op) pairs where a op (b rop c) == (a op b) rop c for every value
REASSOCIATES = {("+", "+"), ("+", "-"), ("*", "*"), ("&", "&"), ("|", "|"), ("^", "^"), ("&&", "&&"), ("||", "||")}


class GroupingError(ValueError):
    """A right operand of the same precedence whose re-association would change the value."""


def binary(op: str, a, b) -> Expr:
    """a op b, a chain of one precedence re-associated to the left as C parses it (a + (b - c)
    is (a + b) - c, the same value); where that would change the value (a - (b + c), a * (b / c))
    the right operand must be grouped explicitly with Paren."""
    a, b = as_expr(a), as_expr(b)
    p = BINARY_PRECEDENCE[op]
    if isinstance(b, Bin) and BINARY_PRECEDENCE[b.op] == p:
        if (op, b.op) not in REASSOCIATES:
            raise GroupingError(f"a {op} (b {b.op} c): group the right operand with Paren")
        return binary(b.op, binary(op, a, b.a), b.b)
    return Bin(op, a, b)


def call(name: str, *args) -> Call:
    return Call(name, tuple(as_expr(a) for a in args))


def select(cond, a, b) -> Select:
    return Select(as_expr(cond), as_expr(a), as_expr(b))


def chain(op: str, items) -> Expr:
    """items[0] op items[1] op ... (left to right)."""
    items = [as_expr(i) for i in items]
    out = items[0]
    for i in items[1:]:
        out = binary(op, out, i)
    return out


# -- statements --------------------------------------------------------------------------------


@dataclass(frozen=True)
class KernelParam:
    name: str
    kind: str  # "buffer" | "scalar"
    dtype: str  # IR dtype of the elements (scalars: i32)
    output: bool = False


@dataclass
class Decl:
    """`dtype name[dims] = init;` - dtype a type name or PtrType; `shared` storage of the
    threadgroup / block; `const` a value that does not change; init `ZERO_INIT` for `= {}`."""

    dtype: object
    name: str
    init: Expr | None = None
    dims: tuple[int, ...] = ()
    const: bool = False
    shared: bool = False


ZERO_INIT = Const(None, "zero_init")  # `= {}`: every element zero


@dataclass
class Decls:
    """Several variables of one type in one declaration: `const T a = x, b = y;`."""

    dtype: object
    items: list  # [(name, init or None)]
    const: bool = False


@dataclass
class View:
    """`name`: raw shared memory at `base` viewed as arrays of `elem` with `dims` (a constant pointer)."""

    name: str
    elem: str
    dims: tuple[int, ...]
    base: Expr


@dataclass
class SharedBytes:
    """The block's shared memory `name` of `size` bytes aligned to `align` (None: sized at launch)."""

    name: str
    size: int | None
    align: int = 16


@dataclass
class Assign:
    target: Expr
    value: Expr
    op: str = "="  # "=", "+=", "*="


@dataclass
class Increment:
    target: Expr


@dataclass
class Loop:
    """for (int var = start; cond; var += step) - step None: ++var; unroll True (full) or a count."""

    var: str
    start: Expr
    cond: Expr
    step: Expr | None
    body: list = _field(default_factory=list)
    unroll: bool | int = False


@dataclass
class If:
    cond: Expr
    body: list = _field(default_factory=list)
    orelse: list = _field(default_factory=list)  # an If alone here (of the same layout) prints as `else if`
    braces: bool = True  # False: one statement, no braces
    inline: bool = False  # the whole statement on one line
    comment: str | None = None  # a trailing comment on its first line


@dataclass
class Block:
    body: list = _field(default_factory=list)


@dataclass
class Line:
    """Statements printed on one line (a layout hint), with an optional trailing comment."""

    stmts: list
    comment: str | None = None


@dataclass
class Comment:
    text: str


@dataclass
class Barrier:
    """Every thread of the scope ("group": the threadgroup / block; "simdgroup": the SIMD group /
    warp) arrives before any continues; their shared-memory writes are visible after it."""

    scope: str = "group"


@dataclass
class Mma:
    """c += a @ b on the tensor cores: m16n8k16, `dtype` (bf16 / f16) operands packed in pairs,
    f32 accumulators: a 4 registers, b 2, c an array of 4 floats."""

    dtype: str
    c: Expr
    a: tuple
    b: tuple


@dataclass
class AsyncCopy:
    """Copy `size` bytes from device memory `src` to shared memory `dst` asynchronously; where
    `pred` is false nothing is read and the destination is zero-filled."""

    dst: Expr
    src: Expr
    size: int
    pred: Expr


@dataclass
class AsyncCommit:
    """Close the group of asynchronous copies issued since the last commit."""


@dataclass
class AsyncWait:
    """Wait until at most `pending` committed groups of copies are still in flight."""

    pending: int


# -- MetalPerformancePrimitives (NAX): docs/NAX.md --------------------------------------------


@dataclass
class NaxOp:
    """`matmul2d<matmul2d_descriptor(m, n, k, transpose_left, transpose_right, relaxed, mode),
    scope> name`: a matrix multiply on the neural accelerators; `accumulate` is the mode
    multiply_accumulate (else multiply); `simdgroups` 0 is the scope execution_simdgroup, N > 0
    execution_simdgroups<N>."""

    name: str
    m: int
    n: int
    k: int
    transpose_left: bool = False
    transpose_right: bool = False
    relaxed: bool = False
    accumulate: bool = True
    simdgroups: int = 0


COOP_ROLES = ("left", "right", "destination")


@dataclass
class CoopTensor:
    """`name`: a cooperative tensor of operation `op` for operand `role` (left, right,
    destination). `left` and `right` are the input operands' element dtypes (a destination names
    the left and right tensors there instead, as MPP types it by theirs); `dtype` is the
    destination's element dtype. A left tensor's elements are of `left`, a right one's of `right`."""

    name: str
    op: str
    role: str
    dtype: str
    left: str
    right: str


@dataclass
class TensorView:
    """`name`: a rank-2 tensor (tensor_inline) over `space` memory ("device" | "threadgroup") of
    `dtype` at `base`, with `extents` and `strides` along dimension 0 (the contiguous one) and 1."""

    name: str
    space: str
    dtype: str
    base: Expr
    extents: tuple
    strides: tuple


@dataclass
class CoopLoad:
    """The slots of cooperative tensor `tensor` from the tensor view `view` (each slot the element
    the operation's layout puts there; elements outside the view read as zero)."""

    tensor: str
    view: str


@dataclass
class NaxRun:
    """`op.run(left, right, destination)`: a collective of the op's scope (every thread calls it)."""

    op: str
    left: str
    right: str
    destination: str


@dataclass
class SlotLoop:
    """for each slot `var` of cooperative tensor `tensor` (0 .. its capacity): `body`."""

    var: str
    tensor: str
    body: list = _field(default_factory=list)


NAX_STATEMENTS = (NaxOp, CoopTensor, TensorView, CoopLoad, NaxRun, SlotLoop)


Stmt = (
    Decl
    | Decls
    | View
    | SharedBytes
    | Assign
    | Increment
    | Loop
    | If
    | Block
    | Line
    | Comment
    | Barrier
    | Mma
    | AsyncCopy
    | AsyncCommit
    | AsyncWait
    | NaxOp
    | CoopTensor
    | TensorView
    | CoopLoad
    | NaxRun
    | SlotLoop
)


@dataclass
class KernelDef:
    name: str
    params: list[KernelParam]
    body: list
    helpers: list[str]  # names of preamble helpers used (e.g. "erf", "silu")
    threads_per_group: int
    notes: list[str] = _field(default_factory=list)  # schedule summary for the header comment
    min_groups: int = 0  # CUDA: blocks per SM to fit (caps registers), 0 for none
    dynamic_shared: int = 0  # CUDA: bytes of dynamic shared memory each block is launched with
