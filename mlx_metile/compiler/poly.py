"""Integer index expressions as polynomials over symbols, with known divisibility.

Lowering renders every tile element's offset as a `Poly`; because the K-loop
counter is written `BK*kb` and unrolled positions are constants,
`(256*kb + 8*lane + 3) // 8` simplifies to `32*kb + lane` and the shift
`(256*kb + 8*lane + 3) % 8` to the constant 3. Equal offsets then render to
equal text, so a packed word is loaded once, not once per value it holds.
"""

from __future__ import annotations

from dataclasses import dataclass

Monomial = tuple[str, ...]  # sorted symbol names; () is the constant term


@dataclass(frozen=True)
class Poly:
    terms: tuple[tuple[Monomial, int], ...]  # sorted, no zero coefficients

    @staticmethod
    def make(d: dict[Monomial, int]) -> Poly:
        return Poly(tuple(sorted((m, c) for m, c in d.items() if c != 0)))

    @staticmethod
    def const(c: int) -> Poly:
        return Poly.make({(): int(c)})

    @staticmethod
    def sym(name: str) -> Poly:
        return Poly.make({(name,): 1})

    def as_dict(self) -> dict[Monomial, int]:
        return dict(self.terms)

    @property
    def is_const(self) -> bool:
        return all(m == () for m, _ in self.terms)

    @property
    def const_value(self) -> int:
        return self.as_dict().get((), 0)

    def __add__(self, o: Poly | int) -> Poly:
        o = o if isinstance(o, Poly) else Poly.const(o)
        d = self.as_dict()
        for m, c in o.terms:
            d[m] = d.get(m, 0) + c
        return Poly.make(d)

    def __neg__(self) -> Poly:
        return Poly.make({m: -c for m, c in self.terms})

    def __sub__(self, o: Poly | int) -> Poly:
        o = o if isinstance(o, Poly) else Poly.const(o)
        return self + (-o)

    def __mul__(self, o: Poly | int) -> Poly:
        o = o if isinstance(o, Poly) else Poly.const(o)
        d: dict[Monomial, int] = {}
        for m1, c1 in self.terms:
            for m2, c2 in o.terms:
                m = tuple(sorted(m1 + m2))
                d[m] = d.get(m, 0) + c1 * c2
        return Poly.make(d)


def divmod_const(p: Poly, d: int) -> tuple[Poly, Poly] | None:
    """(p // d, p % d) when exactly expressible, else None.

    Symbols are non-negative integers; divisibility lives in coefficients
    (the lowering writes a K-loop counter as BK*kb, K as group*Kg), so p // d
    is exact when every non-constant coefficient is a multiple of d and no
    coefficient is negative."""
    if d <= 0:
        return None
    if p.is_const:
        v = p.const_value
        return Poly.const(v // d), Poly.const(v % d)
    quotient: dict[Monomial, int] = {}
    for m, c in p.terms:
        if c < 0:
            return None
        if m != ():
            if c % d:
                return None
            quotient[m] = c // d
    c0 = p.const_value
    quotient[()] = c0 // d
    return Poly.make(quotient), Poly.const(c0 % d)


def render(p: Poly) -> str:
    if not p.terms:
        return "0"
    parts = []
    for m, c in p.terms:
        if m == ():
            parts.append(str(c))
        else:
            factor = "*".join(m)
            parts.append(factor if c == 1 else f"{c}*{factor}")
    text = " + ".join(parts).replace("+ -", "- ")
    return text if len(p.terms) == 1 else f"({text})"
