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


def divmod_const(p: Poly, d: int, bounds: dict[str, int] | None = None) -> tuple[Poly, Poly] | None:
    """(p // d, p % d) when exactly expressible, else None.

    Symbols are non-negative integers; `bounds` gives exclusive upper bounds
    of some (loop counters). p splits into terms whose coefficients are
    multiples of d and the rest; when the rest is provably in [0, d), the
    quotient is the first part over d and the remainder is the rest. (The
    lowering writes a K-loop counter as BK*kb and K as group*K_d, so this is
    exact for packed-word and group offsets.)"""
    if d <= 0:
        return None
    bounds = bounds or {}
    if p.is_const:
        v = p.const_value
        return Poly.const(v // d), Poly.const(v % d)
    quotient: dict[Monomial, int] = {}
    rest: dict[Monomial, int] = {}
    for m, c in p.terms:
        if c < 0:
            return None
        if m != () and c % d == 0:
            quotient[m] = c // d
        else:
            rest[m] = c
    c0 = rest.pop((), 0)
    quotient[()] = c0 // d
    rest[()] = c0 % d
    high = 0  # the largest value the rest can take
    for m, c in rest.items():
        if m == ():
            high += c
            continue
        top = c
        for sym in m:
            if sym not in bounds:
                return None
            top *= bounds[sym] - 1
        high += top
    if high >= d:
        return None
    return Poly.make(quotient), Poly.make(rest)


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
