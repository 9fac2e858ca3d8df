"""The C-like renderer core: statements, declarations and the `@call` tables.

A dialect subclass overrides only small tables and the signature, in the
manner of tinygrad's renderers: type names, the spelling of each `@call`, and
how a kernel receives its buffers and thread indices."""

from __future__ import annotations

import re

from .ast import Assign, Barrier, Comment, Decl, If, KernelDef, Loop, Raw

# Preamble helpers in neutral notation; dialects map the @calls inside them.
HELPERS = {
    # Abramowitz & Stegun 7.1.26 with the sign restored: |error| <= 1.5e-7.
    "erf": """inline float metile_erf(float x) {
  float s = x < 0.0f ? -1.0f : 1.0f;
  float a = x < 0.0f ? -x : x;
  float t = 1.0f / (1.0f + 0.3275911f * a);
  float y = 1.0f - (((((1.061405429f * t - 1.453152027f) * t) + 1.421413741f) * t - 0.284496736f) * t + 0.254829592f) * t * @exp(-a * a);
  return s * y;
}""",
    "sigmoid": """inline float metile_sigmoid(float x) { return 1.0f / (1.0f + @exp(-x)); }""",
    "silu": """inline float metile_silu(float x) { return x / (1.0f + @exp(-x)); }""",
    "gelu": """inline float metile_gelu(float x) { return 0.5f * x * (1.0f + metile_erf(x * 0.70710678118654752f)); }""",
    "gelu_approx": """inline float metile_gelu_approx(float x) {
  return 0.5f * x * (1.0f + @tanh(0.79788456080286536f * (x + 0.044715f * x * x * x)));
}""",
}
HELPER_DEPENDS = {"gelu": ["erf"]}


class CStyleRenderer:
    target = "c"
    types = {
        "f32": "float",
        "f16": "half",
        "bf16": "bfloat",
        "i32": "int",
        "u32": "uint",
        "bool": "bool",
        "int": "int",
        "vu32": "metile_vec_u32",
        "vbf16": "metile_vec_bf16",
        "vf16": "metile_vec_f16",
        "vf32": "metile_vec_f32",
    }
    # 16-byte vectors: (element dtype, count)
    vectors = {"u32": 4, "bf16": 8, "f16": 8, "f32": 4}
    # neutral call -> dialect spelling (a format string over the arguments' text)
    calls: dict[str, str] = {
        "fma": "fma({0}, {1}, {2})",
        "u2f_small": "float({0})",  # an unsigned value < 2**23
        "exp": "exp({0})",
        "tanh": "tanh({0})",
        "erf": "metile_erf({0})",
        "sigmoid": "metile_sigmoid({0})",
        "silu": "metile_silu({0})",
        "gelu": "metile_gelu({0})",
        "gelu_approx": "metile_gelu_approx({0})",
        "max": "max({0}, {1})",
        "min": "min({0}, {1})",
        "vload_u32": "metile_vload_u32({0}, {1}, {2})",
        "vload_bf16": "metile_vload_bf16({0}, {1}, {2})",
        "vload_f16": "metile_vload_f16({0}, {1}, {2})",
        "vload_f32": "metile_vload_f32({0}, {1}, {2})",
        "vget_u32": "{0}.v[{1}]",
        "vget_bf16": "{0}.v[{1}]",
        "vget_f16": "{0}.v[{1}]",
        "vget_f32": "{0}.v[{1}]",
    }
    unroll_pragma = "#pragma unroll"
    shared_space = "threadgroup"
    barrier = "threadgroup_barrier(mem_flags::mem_threadgroup)"
    indent_unit = "  "

    # -- conversions: @cvt_<to>_<from>(x) ------------------------------------
    def convert(self, to: str, src: str, x: str) -> str:
        return f"{self.types[to]}({x})"

    # -- expression text -----------------------------------------------------
    def expr(self, text: str) -> str:
        """Replace every @call(...) innermost-first by its dialect spelling."""
        pattern = re.compile(r"@(\w+)\(([^()@]*(?:\([^()@]*\)[^()@]*)*)\)")
        while "@" in text:
            new = pattern.sub(self._call, text)
            if new == text:
                raise ValueError(f"unrenderable call in: {text}")
            text = new
        return text

    def _call(self, m: re.Match) -> str:
        name, args = m.group(1), _split_args(m.group(2))
        if name.startswith("cvt_"):
            _, to, src = name.split("_")
            return self.convert(to, src, args[0])
        if name in self.calls:
            return self.calls[name].format(*args)
        raise ValueError(f"{self.target} renderer has no spelling for @{name}")

    # -- statements ----------------------------------------------------------
    def stmts(self, body, depth: int) -> list[str]:
        pad = self.indent_unit * depth
        out: list[str] = []
        for s in body:
            if isinstance(s, Comment):
                out.append(f"{pad}// {s.text}")
            elif isinstance(s, Decl):
                t = self.types[s.dtype]
                dims = "".join(f"[{d}]" for d in s.dims)
                init = f" = {self.expr(s.init)}" if s.init is not None else ""
                space = f"{self.shared_space} " if s.shared else ""
                out.append(f"{pad}{space}{'const ' if s.const else ''}{t} {s.name}{dims}{init};")
            elif isinstance(s, Assign):
                out.append(f"{pad}{self.expr(s.target)} = {self.expr(s.value)};")
            elif isinstance(s, Loop):
                if s.unroll and self.unroll_pragma:
                    out.append(f"{pad}{self.unroll_pragma}")
                out.append(
                    f"{pad}for (int {s.var} = {self.expr(s.start)}; {self.expr(s.cond)}; {s.var} += {s.step}) {{"
                )
                out += self.stmts(s.body, depth + 1)
                out.append(f"{pad}}}")
            elif isinstance(s, Raw):
                out += [f"{pad}{line}" for line in s.lines]
            elif isinstance(s, Barrier):
                out.append(f"{pad}{self.barrier};")
            elif isinstance(s, If):
                out.append(f"{pad}if ({self.expr(s.cond)}) {{")
                out += self.stmts(s.body, depth + 1)
                out.append(f"{pad}}}")
            else:
                raise TypeError(f"unknown statement {s!r}")
        return out

    def helpers(self, names: list[str]) -> list[str]:
        order: list[str] = []
        for n in names:
            for dep in HELPER_DEPENDS.get(n, []) + [n]:
                if dep not in order:
                    order.append(dep)
        return [self.expr(HELPERS[n]) for n in order]

    # -- dialect hooks -------------------------------------------------------
    def vector_helpers(self) -> list[str]:
        """A 16-byte struct per element type and a masked load of it (zeros where masked)."""
        out = []
        for dt, n in self.vectors.items():
            t = self.types[dt]
            out.append(f"struct {self.align16} metile_vec_{dt} {{ {t} v[{n}]; }};")
            out.append(
                f"{self.fn_prefix}metile_vec_{dt} metile_vload_{dt}({self.ptr(t)} p, int offset, bool ok) {{\n"
                f"  metile_vec_{dt} r = {{}};\n"
                f"  if (ok) r = *({self.ptr('metile_vec_' + dt)})(p + offset);\n"
                f"  return r;\n}}"
            )
        return out

    align16 = "alignas(16)"
    fn_prefix = "inline "

    def ptr(self, t: str) -> str:
        return f"const {t}*"

    def prelude(self) -> list[str]:
        return []

    def signature(self, k: KernelDef) -> str:
        raise NotImplementedError

    def thread_setup(self, k: KernelDef) -> list[str]:
        return []

    def render(self, k: KernelDef) -> str:
        lines = [f"// {self.target} kernel generated by mlx-metile"] + [f"// {n}" for n in k.notes]
        lines += self.prelude()
        lines += self.vector_helpers()
        lines += self.helpers(k.helpers)
        lines.append(self.signature(k) + " {")
        lines += self.thread_setup(k)
        lines += self.stmts(k.body, 1)
        lines.append("}")
        return "\n".join(lines) + "\n"


def _split_args(text: str) -> list[str]:
    args, depth, cur = [], 0, []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            args.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if cur or args:
        args.append("".join(cur).strip())
    return args
