"""A reader for the VNN-LIB subset that verification benchmarks use, into a ``Property``.

Accepted (SMT-LIB syntax, ``;`` comments): ``(declare-const X_i Real)`` / ``(declare-const Y_i
Real)`` for the flat network inputs and outputs, and ``(assert F)`` where ``F`` is ``(and F ...)``,
``(or F ...)``, ``(<= T T)`` or ``(>= T T)`` over linear terms ``T``: a number, a declared name,
``(+ T ...)``, ``(- T ...)`` and ``(* T ...)`` with at most one non-constant factor. Every
comparison must involve only inputs (a bound on one ``X_i``) or only outputs (a linear constraint
on the ``Y_j``). The asserts are conjoined and brought to disjunctive normal form; each disjunct's
input bounds make its box and its output constraints one conjunction; disjuncts with the same box
share a ``Region``. Anything else raises ``VnnlibError`` quoting the offending line.

Files from outside are hostile: the text (after gzip) is capped at ``MAX_BYTES``, nesting at
``MAX_DEPTH``, the disjunctive normal form at ``MAX_DISJUNCTS``, numbers at ``MAX_NUMBER_CHARS``
characters with exponents within ``MAX_EXPONENT``; every input needs a finite lower and upper
bound in every disjunct.
"""

from __future__ import annotations

import gzip
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from ..bounds.properties import Conjunction, Constraint, Property, Region
from ..core.errors import TorchLeanError
from ..core.safe_files import non_regular_kind

__all__ = ["MAX_BYTES", "MAX_DISJUNCTS", "VnnlibError", "parse", "read", "read_text"]

MAX_BYTES = 256 * 2**20
MAX_DEPTH = 64
MAX_DISJUNCTS = 100_000
MAX_NUMBER_CHARS = 400
MAX_EXPONENT = 400
MAX_VARIABLES = 10_000_000

_TOKEN = re.compile(r"[()]|[^\s()]+")
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE]([+-]?\d+))?")
_NAME = re.compile(r"([XY])_(0|[1-9]\d*)")
_DECLARE = re.compile(r"\s*\(\s*declare-const\s+([^\s()]+)\s+Real\s*\)\s*")
_ONE = Fraction(1)
_BOUND = re.compile(r"\s*\(\s*assert\s*\(\s*(<=|>=)\s+(X_\d+)\s+([+-]?(?:\d+\.?\d*|\.\d+)"
                    r"(?:[eE][+-]?\d+)?)\s*\)\s*\)\s*")


class VnnlibError(TorchLeanError):
    """A VNN-LIB file that cannot be read or lies outside the supported subset."""


@dataclass
class _Atom:
    text: str
    line: int


@dataclass
class _List:
    items: list[Any]
    line: int


@dataclass
class _Bound:
    """A line ``(assert (op X_i value))``, recognised whole."""

    op: str
    name: str
    value: str
    line: int


# A linear term: coefficients by variable ("X", i) / ("Y", j), and a constant.
_Linear = tuple[dict[tuple[str, int], Fraction], Fraction]
# A comparison ``terms + const <= 0`` with the line it came from.
_Leq = tuple[dict[tuple[str, int], Fraction], Fraction, int]


class _Reader:
    def __init__(self, text: str, label: str) -> None:
        self.label = label
        self.lines = text.splitlines()
        self.declared: dict[str, set[int]] = {"X": set(), "Y": set()}
        self.numbers: dict[str, Fraction] = {}

    def fail(self, line: int, what: str) -> VnnlibError:
        shown = self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""
        if len(shown) > 160:
            shown = shown[:157] + "..."
        return VnnlibError(f"vnnlib: {self.label}, line {line}: {what}: {shown!r}")

    # -- s-expressions --------------------------------------------------------------------------

    def tokens(self, line: int, code: str) -> Iterator[_Atom]:
        for tok in _TOKEN.findall(code):
            yield _Atom(tok, line)

    def sexprs(self) -> Iterator[_List | _Bound]:
        """The top-level s-expressions in order; a whole line ``(assert (<= X_i c))`` (or
        ``>=``) outside any open expression comes as a ``_Bound`` instead (most lines of an
        image property: no token lists, no formula walk)."""
        stack: list[_List] = []
        for line, raw in enumerate(self.lines, start=1):
            code = raw.split(";", 1)[0]
            if not stack:
                m = _BOUND.fullmatch(code)
                if m is not None:
                    yield _Bound(m.group(1), m.group(2), m.group(3), line)
                    continue
                m = _DECLARE.fullmatch(code)
                if m is not None:
                    self.declare_name(m.group(1), line)
                    continue
            yield from self._sexprs_of_line(stack, line, code)
        if stack:
            raise self.fail(stack[-1].line, "unclosed '(' (the file ends inside it)")

    def _sexprs_of_line(self, stack: list[_List], line: int, code: str) -> Iterator[_List]:
        for tok in self.tokens(line, code):
            if tok.text == "(":
                if len(stack) >= MAX_DEPTH:
                    raise self.fail(tok.line, f"nesting deeper than {MAX_DEPTH} levels")
                stack.append(_List([], tok.line))
            elif tok.text == ")":
                if not stack:
                    raise self.fail(tok.line, "unbalanced ')'")
                done = stack.pop()
                if stack:
                    stack[-1].items.append(done)
                else:
                    yield done
            elif not stack:
                raise self.fail(tok.line, f"expected '(' at the top level, found {tok.text!r}")
            else:
                stack[-1].items.append(tok)

    # -- terms ----------------------------------------------------------------------------------

    def number(self, tok: _Atom) -> Fraction | None:
        m = _NUMBER.fullmatch(tok.text)
        if m is None:
            return None
        if len(tok.text) > MAX_NUMBER_CHARS or (m.group(1) and abs(int(m.group(1)))
                                                 > MAX_EXPONENT):
            raise self.fail(tok.line, f"number {tok.text[:40]!r} is too long or its exponent "
                            f"exceeds {MAX_EXPONENT}")
        value = self.numbers.get(tok.text)
        if value is None:  # image bounds repeat (0.0, 1.0): parse each text once
            value = self.numbers[tok.text] = Fraction(tok.text)
        return value

    def variable(self, tok: _Atom) -> tuple[str, int]:
        m = _NAME.fullmatch(tok.text)
        if m is None or int(m.group(2)) not in self.declared[m.group(1)]:
            raise self.fail(tok.line, f"undeclared name {tok.text!r} (declare X_i and Y_j with "
                            "declare-const first)")
        return m.group(1), int(m.group(2))

    def term(self, node: Any) -> _Linear:
        if isinstance(node, _Atom):
            value = self.number(node)
            if value is not None:
                return {}, value
            return {self.variable(node): Fraction(1)}, Fraction(0)
        if not node.items or not isinstance(node.items[0], _Atom):
            raise self.fail(node.line, "expected a term such as (+ ...), (- ...) or (* ...)")
        head, args = node.items[0].text, [self.term(a) for a in node.items[1:]]
        if head in ("+", "-") and args:
            if head == "-" and len(args) == 1:
                args = [({}, Fraction(0)), args[0]]
            coef: dict[tuple[str, int], Fraction] = dict(args[0][0])
            const = args[0][1]
            sign = 1 if head == "+" else -1
            for terms, c in args[1:]:
                for v, a in terms.items():
                    coef[v] = coef.get(v, Fraction(0)) + sign * a
                const += sign * c
            return coef, const
        if head == "*" and len(args) >= 2:
            factor, linear = Fraction(1), None
            for terms, c in args:
                if terms:
                    if linear is not None:
                        raise self.fail(node.line, "a product of two variables is not linear")
                    linear = (terms, c)
                else:
                    factor *= c
            if linear is None:
                return {}, factor
            return {v: factor * a for v, a in linear[0].items()}, factor * linear[1]
        raise self.fail(node.line, f"unsupported term {head!r} (only numbers, X_i, Y_j, "
                        "+, - and * by constants)")

    # -- formulas, as disjunctive normal forms (lists of lists of comparisons) -------------------

    def formula(self, node: Any) -> list[list[_Leq]]:
        if not isinstance(node, _List) or not node.items or not isinstance(node.items[0], _Atom):
            line = node.line
            raise self.fail(line, "expected a formula: (and ...), (or ...), (<= a b) or (>= a b)")
        head, args = node.items[0].text, node.items[1:]
        if head in ("<=", ">="):
            if len(args) != 2:
                raise self.fail(node.line, f"{head} takes two terms, found {len(args)}")
            (ca, ka), (cb, kb) = self.term(args[0]), self.term(args[1])
            if head == ">=":
                (ca, ka), (cb, kb) = (cb, kb), (ca, ka)
            coef = dict(ca)
            for v, a in cb.items():
                coef[v] = coef.get(v, Fraction(0)) - a
            return [[({v: a for v, a in coef.items() if a != 0}, ka - kb, node.line)]]
        if head == "and":
            result: list[list[_Leq]] = [[]]
            for arg in args:
                result = self.product(result, self.formula(arg), node.line)
            return result
        if head == "or":
            alternatives: list[list[_Leq]] = []
            for arg in args:
                alternatives.extend(self.formula(arg))
                if len(alternatives) > MAX_DISJUNCTS:
                    raise self.fail(node.line, f"more than {MAX_DISJUNCTS} disjuncts")
            return alternatives
        raise self.fail(node.line, f"unsupported formula {head!r} (only and, or, <=, >=)")

    def product(self, a: list[list[_Leq]], b: list[list[_Leq]], line: int) -> list[list[_Leq]]:
        if len(a) * len(b) > MAX_DISJUNCTS:
            raise self.fail(line, f"the disjunctive normal form exceeds {MAX_DISJUNCTS} "
                            "disjuncts")
        if len(b) == 1:  # a conjunct: extend in place (every list here is this call's own)
            for x in a:
                x.extend(b[0])
            return a
        return [x + y for x in a for y in b]

    # -- the whole file -------------------------------------------------------------------------

    def declare(self, node: _List) -> None:
        items = node.items
        if (len(items) != 3 or not all(isinstance(t, _Atom) for t in items)
                or items[2].text != "Real"):
            raise self.fail(node.line, "expected (declare-const X_i Real) or "
                            "(declare-const Y_j Real)")
        self.declare_name(items[1].text, node.line)

    def declare_name(self, name: str, line: int) -> None:
        m = _NAME.fullmatch(name)
        if m is None:
            raise self.fail(line, f"variable names must be X_i (inputs) or Y_j (outputs), "
                            f"found {name!r}")
        kind, index = m.group(1), int(m.group(2))
        if index in self.declared[kind]:
            raise self.fail(line, f"{name} declared twice")
        if index >= MAX_VARIABLES:
            raise self.fail(line, f"index above the limit of {MAX_VARIABLES} variables")
        self.declared[kind].add(index)

    def read(self) -> Property:
        common: list[_Leq] = []
        alternatives: list[list[_Leq]] = [[]]
        for node in self.sexprs():
            if isinstance(node, _Bound):  # (assert (<= X_i c)): the comparison directly
                name = _Atom(node.name, node.line)
                value = self.number(_Atom(node.value, node.line))
                if value is None:
                    raise self.fail(node.line, f"expected a number, found {node.value!r}")
                var = self.variable(name)
                # X_i <= c is X_i - c <= 0; X_i >= c is -X_i + c <= 0
                if node.op == "<=":
                    common.append(({var: _ONE}, -value, node.line))
                else:
                    common.append(({var: -_ONE}, value, node.line))
                continue
            head = node.items[0].text if node.items and isinstance(node.items[0], _Atom) else ""
            if head == "declare-const":
                self.declare(node)
            elif head == "assert":
                if len(node.items) != 2:
                    raise self.fail(node.line, "assert takes one formula")
                dnf = self.formula(node.items[1])
                if len(dnf) == 1:
                    common.extend(dnf[0])  # most asserts: no copy of every disjunct
                else:
                    alternatives = self.product(alternatives, dnf, node.line)
            else:
                raise self.fail(node.line, f"unsupported command {head or '(...)'!r} (only "
                                "declare-const and assert)")
        for kind, what in (("X", "inputs"), ("Y", "outputs")):
            got = self.declared[kind]
            if not got or got != set(range(len(got))):
                missing = min(set(range(max(got, default=-1) + 2)) - got)
                raise VnnlibError(f"vnnlib: {self.label}: the {what} must be declared as "
                                  f"{kind}_0 ... {kind}_n-1 without gaps; {kind}_{missing} is "
                                  "missing")
        return self.build(common, alternatives)

    def apply(self, atoms: list[_Leq], lower: list[Fraction | None],
              upper: list[Fraction | None], outputs: list[Constraint]) -> tuple[bool, bool]:
        """Fold comparisons into a box and output constraints; (feasible, touched the box)."""
        feasible, touched = True, False
        for coef, const, line in atoms:
            kinds = {v[0] for v in coef}
            if not kinds:  # a comparison of constants
                feasible = feasible and const <= 0
            elif kinds == {"X"}:
                if len(coef) != 1:
                    raise self.fail(line, "input constraints must bound one X_i (boxes only)")
                ((_, i), a), = coef.items()
                value = -const if a == 1 else const if a == -1 else -const / a
                touched = True
                if a > 0:
                    old = upper[i]
                    upper[i] = value if old is None else min(old, value)
                else:
                    old = lower[i]
                    lower[i] = value if old is None else max(old, value)
            elif kinds == {"Y"}:
                terms = tuple(sorted((v[1], a) for v, a in coef.items()))
                outputs.append(Constraint(terms, -const))
            else:
                raise self.fail(line, "a constraint mixing inputs X_i and outputs Y_j")
        return feasible, touched

    def build(self, common: list[_Leq], alternatives: list[list[_Leq]]) -> Property:
        n_in, n_out = len(self.declared["X"]), len(self.declared["Y"])
        base_lo: list[Fraction | None] = [None] * n_in
        base_hi: list[Fraction | None] = [None] * n_in
        base_out: list[Constraint] = []
        base_ok, _ = self.apply(common, base_lo, base_hi, base_out)
        regions: dict[Any, tuple[list[Any], list[Any], list[Conjunction]]] = {}
        for alternative in alternatives if base_ok else []:
            lower, upper, outputs = list(base_lo), list(base_hi), list(base_out)
            feasible, touched = self.apply(alternative, lower, upper, outputs)
            if not feasible:
                continue
            for i in range(n_in):
                if lower[i] is None or upper[i] is None:
                    side = "lower" if lower[i] is None else "upper"
                    raise VnnlibError(f"vnnlib: {self.label}: X_{i} has no {side} bound in "
                                      "one of the disjuncts (every input needs a finite box)")
            # Disjuncts that only add output constraints share the common box: no hashing of
            # every bound for them (an MNIST property has 784 inputs and 9 such disjuncts).
            key = (tuple(lower), tuple(upper)) if touched else None
            regions.setdefault(key, (lower, upper, []))[2].append(Conjunction(tuple(outputs)))
        exact = all(Fraction(float(a)) == a for r in regions.values() for conj in r[2]
                    for con in conj.constraints for _, a in con.terms)
        return Property(n_in, n_out, tuple(Region(tuple(lo), tuple(hi), tuple(conjs))
                                           for lo, hi, conjs in regions.values()),
                        exact_coefficients=exact, label=self.label)


def parse(text: str, label: str = "<vnnlib>") -> Property:
    """A ``Property`` from VNN-LIB text (``label`` names it in errors)."""
    if not isinstance(text, str):
        raise VnnlibError(f"vnnlib: {label}: expected text, found {type(text).__name__}")
    if len(text) > MAX_BYTES:
        raise VnnlibError(f"vnnlib: {label}: {len(text)} characters, above the limit of "
                          f"{MAX_BYTES}")
    return _Reader(text, label).read()


def read_bytes(path: Any, max_bytes: int, error: type[TorchLeanError], what: str) -> bytes:
    """The bytes of a regular file, gunzipped when it is gzip (the gzip magic), at most
    ``max_bytes`` after decompression; anything else raises ``error`` naming ``what``. A FIFO or
    device is refused before it is opened (reading one could block or never end)."""
    label = os.fspath(path)
    kind = non_regular_kind(label)
    if kind is not None:
        raise error(f"{what}: {label} is {kind}; only regular files are read")
    try:
        with open(label, "rb") as raw:
            magic = raw.read(2)
            raw.seek(0)
            if magic == b"\x1f\x8b":
                with gzip.GzipFile(fileobj=raw) as unzipped:
                    data = unzipped.read(max_bytes + 1)
            else:
                data = raw.read(max_bytes + 1)
    except (OSError, EOFError) as exc:
        raise error(f"{what}: cannot read {label}: {exc}") from None
    if len(data) > max_bytes:
        raise error(f"{what}: {label} is larger than the limit of {max_bytes} bytes "
                    "(after decompression)")
    return data


def read_text(path: Any, max_bytes: int = MAX_BYTES) -> str:
    """The text of a file, gunzipped when it is gzip (``.gz`` or the gzip magic), at most
    ``max_bytes`` bytes after decompression."""
    label = os.fspath(path)
    data = read_bytes(label, max_bytes, VnnlibError, "vnnlib")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise VnnlibError(f"vnnlib: {label} is not UTF-8 text (byte {exc.start})") from None


def read(path: Any) -> Property:
    """The ``Property`` in a ``.vnnlib`` or ``.vnnlib.gz`` file."""
    label = os.fspath(path)
    return parse(read_text(path), os.path.basename(label))
