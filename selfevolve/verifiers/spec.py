"""Validation of the verifier specs the Challenger writes.

A Challenger question only joins the question pool (and only earns the difficulty term of its
reward) when its verifier spec is valid. ``validate_spec`` decides, and gives a short reason the
Challenger's reward and the logs can use.

Math (``MathSpec``)
    * the reference answer is non-empty and parses as a whole
      (``selfevolve.verifiers.math.validate_math_answers``: an answer that math-verify reads only
      partly, such as a leading number, is rejected);
    * when the question is a pure integer-arithmetic expression ("Compute 23 + 45 * 2.",
      "What is 7 - 12?"), it is evaluated exactly by a small AST evaluator (no ``eval``; integers,
      ``+ - * / // % **`` and parentheses, with size limits) and a reference answer with another value
      is rejected.

Code (``CodeSpec``) -- the validity checks Absolute Zero Reasoner applies to generated programs
(Zhao et al., 2025, "Absolute Zero: Reinforced Self-play Reasoning with Zero Data", section 3.3 and
its code executor): the program parses, imports no banned module, and is deterministic on a repeat
run; plus, for our specs, that its own tests pass:
    * a reference solution exists and parses (``ast.parse``); the entry point, if named, is defined;
    * no banned module is imported by the solution, the setup or the tests (``import x``,
      ``from x import y``, ``__import__("x")``, ``importlib.import_module("x")``, and the same inside
      literal strings given to ``exec``/``eval``/``compile``); any use of ``__import__`` is rejected;
    * it has at least one test or io case, and they pass on the reference solution in the sandbox;
    * it is deterministic: the job runs twice and must give the same per-test results, and the
      values the tests compare (every operand of every ``assert``, recorded by an instrumented copy
      of the tests) must hash the same both times (object addresses are masked).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Iterable, Sequence

from selfevolve.records import CodeSpec, MathSpec, Question
from selfevolve.verifiers.sandbox import CodeJob, SandboxPool, SandboxResult, run_tests_batch

__all__ = [
    "SpecCheck",
    "validate_spec",
    "validate_specs_batch",
    "banned_import",
    "arithmetic_expression",
    "evaluate_arithmetic",
    "parse_number",
]


@dataclass(frozen=True)
class SpecCheck:
    """Outcome of spec validation: ``valid`` and a short ``reason`` ("ok" when valid)."""

    valid: bool
    reason: str

    def __bool__(self) -> bool:  # ``if validate_spec(...)`` reads naturally
        return self.valid


OK = SpecCheck(True, "ok")

# ----------------------------------------------------------------------------------------------
# math: exact arithmetic without eval
# ----------------------------------------------------------------------------------------------

_LEAD = re.compile(
    r"^\s*(?:please\s+)?(?:(?:compute|calculate|evaluate|simplify|work\s+out|find|what\s+is|what's|solve)"
    r"(?:\s+the\s+value\s+of)?\s*:?\s*)?", re.I)
_EXPR_CHARS = re.compile(r"^[\d\s+\-*/×÷·^()−–]+$")
_MAX_NODES = 200
_MAX_DIGITS = 200


class ArithmeticError_(ValueError):
    """The expression cannot be evaluated (division by zero, too large)."""


def arithmetic_expression(text: str) -> str | None:
    """The integer-arithmetic expression a question consists of, or None.

    Accepts an optional lead-in ("Compute", "What is", "Calculate", "Evaluate", "Find the value of"
    ...), then only integers, ``+ - * / × ÷ ^ **`` and parentheses, then optional ``=``, ``?``,
    ``.`` or ``!``. "Compute 23 + 45 * 2." gives ``"23 + 45 * 2"``; "What is 7 - 12?" gives
    ``"7 - 12"``; anything with words or decimals in it gives None. Never raises.
    """
    if not isinstance(text, str) or len(text) > 1000:
        return None
    body = _LEAD.sub("", text.strip(), count=1).strip()
    body = re.sub(r"[\s.?!]*$", "", body)
    body = re.sub(r"\s*=\s*\??\s*$", "", body)
    if not body or not _EXPR_CHARS.match(body) or not re.search(r"\d", body):
        return None
    if not re.search(r"\d\s*[-+*/×÷·^−–]+\s*[-(\d]", body) and not re.fullmatch(r"\s*[-−–]?\s*\d+\s*", body):
        return None
    return body.strip()


def _normalise_expr(expr: str) -> str:
    return (expr.replace("×", "*").replace("·", "*").replace("÷", "/").replace("−", "-").replace("–", "-")
            .replace("^", "**"))


def evaluate_arithmetic(expr: str) -> Fraction:
    """Exact value of an integer-arithmetic expression, by walking its AST (no ``eval``).

    Allowed: integer literals (at most 200 digits), ``+ - * / // % **`` (``^`` and ``×``/``÷`` are
    read as ``**``/``*``/``/``), unary ``+``/``-`` and parentheses; at most 200 AST nodes; powers
    need an integer exponent with ``|exp| <= 10_000`` and a result under ~10^4000. Raises
    ``ValueError`` (``ArithmeticError_``) for anything else, for division by zero, or when too large.
    """
    src = _normalise_expr(expr)
    try:
        tree = ast.parse(src, mode="eval")
    except SyntaxError as exc:
        raise ArithmeticError_(f"not an arithmetic expression: {exc.msg}") from None
    if sum(1 for _ in ast.walk(tree)) > _MAX_NODES:
        raise ArithmeticError_("expression too long")

    def ev(node: ast.AST) -> Fraction:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and type(node.value) is int:
            if len(str(abs(node.value))) > _MAX_DIGITS:
                raise ArithmeticError_("number too large")
            return Fraction(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
            v = ev(node.operand)
            return v if isinstance(node.op, ast.UAdd) else -v
        if isinstance(node, ast.BinOp):
            a, b = ev(node.left), ev(node.right)
            op = node.op
            if isinstance(op, ast.Add):
                return a + b
            if isinstance(op, ast.Sub):
                return a - b
            if isinstance(op, ast.Mult):
                return a * b
            if isinstance(op, (ast.Div, ast.FloorDiv, ast.Mod)):
                if b == 0:
                    raise ArithmeticError_("division by zero")
                if isinstance(op, ast.Div):
                    return a / b
                if a.denominator != 1 or b.denominator != 1:
                    raise ArithmeticError_("// and % need integers")
                return Fraction(int(a) // int(b)) if isinstance(op, ast.FloorDiv) else Fraction(int(a) % int(b))
            if isinstance(op, ast.Pow):
                if b.denominator != 1 or abs(b) > 10_000:
                    raise ArithmeticError_("exponent must be an integer of at most 10000")
                if a == 0 and b < 0:
                    raise ArithmeticError_("division by zero")
                size = max(abs(a.numerator), a.denominator).bit_length() * abs(int(b))
                if size > 13_300:  # ~10^4000
                    raise ArithmeticError_("result too large")
                return a ** int(b)
        raise ArithmeticError_(f"unsupported syntax {type(node).__name__}")

    return ev(tree)


_BOXED = re.compile(r"\\boxed\s*\{(.*)\}\s*$", re.S)
_FRAC = re.compile(r"^\s*(-?)\s*\\[dt]?frac\s*\{\s*(-?\d+)\s*\}\s*\{\s*(-?\d+)\s*\}\s*$")


def parse_number(answer: str) -> Fraction | None:
    """A reference answer read as an exact number, or None.

    Understands integers (``1,234`` thousands separators too), decimals, ``a/b``, ``-``,
    ``\\frac{a}{b}``/``\\dfrac``, ``\\boxed{...}``, surrounding ``$`` and a trailing ``.``. Never raises.
    """
    if not isinstance(answer, str):
        return None
    s = answer.strip().strip("$").strip()
    m = _BOXED.search(s)
    if m:
        s = m.group(1).strip()
    s = s.replace("−", "-").replace("\\!", "").replace("{,}", "").replace("\\,", "")
    s = s.rstrip(".") if re.fullmatch(r"-?[\d,]+\.", s) else s
    m = _FRAC.match(s)
    if m:
        sign, p, q = m.groups()
        if int(q) == 0:
            return None
        v = Fraction(int(p), int(q))
        return -v if sign else v
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+", s):
        s = s.replace(",", "")
    if re.fullmatch(r"\s*-?\s*\d+\s*/\s*-?\d+\s*", s):
        p, q = s.replace(" ", "").split("/")
        return Fraction(int(p), int(q)) if int(q) != 0 else None
    if re.fullmatch(r"-?\s*(\d+(\.\d*)?|\.\d+)", s) and len(s) <= 400:
        return Fraction(s.replace(" ", ""))
    return None


def _fmt(v: Fraction) -> str:
    return str(v.numerator) if v.denominator == 1 else f"{v.numerator}/{v.denominator}"


def _answer_checks(answers: Sequence[str], timeout_s: float, workers: int) -> list[tuple[bool, str]]:
    """Does each answer parse as a whole? (The math verifier's own worker pool, so time limits hold.)"""
    from selfevolve.verifiers.math import validate_math_answers  # lazy: starts math-verify workers on use

    return list(validate_math_answers(list(answers), timeout_s=timeout_s, workers=workers))


def _check_math_static(q: Question) -> SpecCheck | None:
    spec = q.spec
    assert isinstance(spec, MathSpec)
    answer = spec.answer.strip() if isinstance(spec.answer, str) else ""
    if not answer:
        return SpecCheck(False, "reference answer is empty")
    expr = arithmetic_expression(q.text)
    if expr is not None:
        try:
            value = evaluate_arithmetic(expr)
        except ValueError as exc:
            return SpecCheck(False, f"the question's expression cannot be evaluated: {exc}")
        got = parse_number(answer)
        if got is None:
            return SpecCheck(False, f"reference answer {answer[:60]} is not a number, the expression's value is {_fmt(value)}")
        if got != value:
            return SpecCheck(False, f"reference answer {answer[:60]} disagrees with the expression's value {_fmt(value)}")
    return None


# ----------------------------------------------------------------------------------------------
# code: static checks
# ----------------------------------------------------------------------------------------------

def _module_hit(name: str, banned: set[str]) -> str | None:
    parts = name.split(".")
    for i in range(1, len(parts) + 1):
        prefix = ".".join(parts[:i])
        if prefix in banned:
            return prefix
    return None


def banned_import(source: str, banned_modules: Iterable[str], _depth: int = 0) -> str | None:
    """Why ``source`` uses a banned module, or None. ``source`` must parse (else SyntaxError).

    Finds ``import m``/``import m.sub``/``from m import x`` (and submodules of banned packages),
    ``__import__(...)`` in any form, ``importlib.import_module("m")`` / ``import_module("m")`` with a
    literal name, and literal strings given to ``exec``/``eval``/``compile`` (checked recursively).
    Returns e.g. ``"imports banned module 'os' (line 1)"``.
    """
    banned = {m.strip() for m in banned_modules if m and m.strip()}
    tree = ast.parse(source)
    for node in ast.walk(tree):
        line = getattr(node, "lineno", "?")
        if isinstance(node, ast.Import):
            for alias in node.names:
                hit = _module_hit(alias.name, banned)
                if hit:
                    return f"imports banned module '{hit}' (line {line})"
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                hit = _module_hit(node.module, banned)
                if hit:
                    return f"imports banned module '{hit}' (line {line})"
                for alias in node.names:  # from importlib import import_module etc. is caught above
                    hit = _module_hit(f"{node.module}.{alias.name}", banned)
                    if hit:
                        return f"imports banned module '{hit}' (line {line})"
        elif isinstance(node, ast.Name) and node.id == "__import__":
            return f"uses __import__ (line {line})"
        elif isinstance(node, ast.Attribute) and node.attr == "__import__":
            return f"uses __import__ (line {line})"
        elif isinstance(node, ast.Constant) and node.value == "__import__":
            return f"uses __import__ (line {line})"
        elif isinstance(node, ast.Call):
            fn = node.func
            fname = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else None
            first = node.args[0] if node.args else None
            literal = first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else None
            if fname == "import_module" and literal is not None:
                hit = _module_hit(literal, banned)
                if hit:
                    return f"imports banned module '{hit}' (line {line})"
            if fname in ("exec", "eval", "compile") and literal is not None and _depth < 3:
                try:
                    inner = banned_import(literal, banned, _depth + 1)
                except (SyntaxError, ValueError):
                    inner = None
                if inner:
                    return f"{inner.split(' (line')[0]} inside {fname}() (line {line})"
    return None


def _defines(tree: ast.Module, name: str) -> bool:
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return True
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if any((a.asname or a.name.split(".")[0]) == name for a in node.names):
                return True
    return False


def _check_code_static(q: Question, banned: list[str]) -> SpecCheck | None:
    spec = q.spec
    assert isinstance(spec, CodeSpec)
    program = spec.reference_solution or ""
    if not program.strip():
        return SpecCheck(False, "no reference solution")
    if not spec.tests and not spec.io_cases:
        return SpecCheck(False, "no tests or io cases")
    try:
        tree = ast.parse(program)
    except SyntaxError as exc:
        return SpecCheck(False, f"reference solution does not parse: {exc.msg} (line {exc.lineno})")
    except (ValueError, RecursionError, MemoryError) as exc:
        return SpecCheck(False, f"reference solution does not parse: {type(exc).__name__}")
    if spec.entry_point and not _defines(tree, spec.entry_point):
        return SpecCheck(False, f"reference solution does not define entry point '{spec.entry_point}'")
    parts = [("reference solution", program), ("setup", spec.setup)] + [(f"test {i}", t) for i, t in enumerate(spec.tests)]
    for what, src in parts:
        if not src.strip():
            continue
        try:
            why = banned_import(src, banned)
        except SyntaxError as exc:
            return SpecCheck(False, f"{what} does not parse: {exc.msg} (line {exc.lineno})")
        except (ValueError, RecursionError, MemoryError) as exc:
            return SpecCheck(False, f"{what} does not parse: {type(exc).__name__}")
        if why:
            return SpecCheck(False, f"{what} {why}")
    return None


# ----------------------------------------------------------------------------------------------
# code: determinism probe (records the values the tests compare)
# ----------------------------------------------------------------------------------------------

_PROBE_SETUP = """
import hashlib as __se_hashlib, re as __se_re
__se_probe_hash = __se_hashlib.sha256()
__se_probe_n = [0]
def __se_probe(*values):
    for v in values:
        try:
            r = repr(v)
        except Exception as e:
            r = "<repr failed: %s>" % type(e).__name__
        r = __se_re.sub(r"0x[0-9a-fA-F]+", "0x?", r)
        __se_probe_hash.update(r.encode("utf-8", "backslashreplace") + b"\\x00")
        __se_probe_n[0] += 1
"""
_PROBE_REPORT = 'print("\\n__selfevolve_probe__ %d %s" % (__se_probe_n[0], __se_probe_hash.hexdigest()))'
_PROBE_RE = re.compile(r"__selfevolve_probe__ (\d+) ([0-9a-f]{64})")


class _AssertToProbe(ast.NodeTransformer):
    """``assert a == b, msg`` becomes ``__se_probe(a, b)`` (each operand evaluated once, errors
    recorded by name, nothing raised): the values the test compares, in order."""

    def visit_Assert(self, node: ast.Assert) -> ast.AST:
        test = node.test
        exprs = [test.left, *test.comparators] if isinstance(test, ast.Compare) else [test]
        calls = []
        for e in exprs:
            call = ast.Expr(ast.Call(func=ast.Name("__se_probe", ast.Load()), args=[e], keywords=[]))
            handler = ast.ExceptHandler(
                type=ast.Name("Exception", ast.Load()), name="__se_e",
                body=[ast.Expr(ast.Call(func=ast.Name("__se_probe", ast.Load()),
                                        args=[ast.Call(func=ast.Name("type", ast.Load()),
                                                       args=[ast.Name("__se_e", ast.Load())], keywords=[])],
                                        keywords=[]))])
            calls.append(ast.Try(body=[call], handlers=[handler], orelse=[], finalbody=[]))
        return [ast.copy_location(c, node) for c in calls]


def _probe_tests(tests: Sequence[str]) -> list[str] | None:
    out = []
    for src in tests:
        try:
            tree = ast.parse(src)
        except SyntaxError:
            return None
        tree = ast.fix_missing_locations(_AssertToProbe().visit(tree))
        out.append(ast.unparse(tree))
    return out


def _code_jobs(q: Question, timeout_s: float, memory_mb: int) -> tuple[CodeJob, int]:
    """The validation job (run twice): the spec's tests, then the probe of their values."""
    spec = q.spec
    assert isinstance(spec, CodeSpec)
    tests = list(spec.tests)
    setup = spec.setup
    if tests:  # io-only specs are compared on their whole output already
        tests = tests + (_probe_tests(tests) or []) + [_PROBE_REPORT]
        setup = (setup + "\n" if setup.strip() else "") + _PROBE_SETUP
    job = CodeJob(program=spec.reference_solution or "", tests=tests, setup=setup,
                  io_cases=list(spec.io_cases), timeout_s=timeout_s, memory_mb=memory_mb)
    return job, len(spec.tests)


def _judge_code(first: SandboxResult, second: SandboxResult, n_tests: int) -> SpecCheck:
    if first.status == "timeout":
        return SpecCheck(False, "reference solution timed out")
    if first.status == "memory":
        return SpecCheck(False, "reference solution ran out of memory")
    if first.status == "error" and not any(t.passed for t in first.tests):
        return SpecCheck(False, f"reference solution fails to run: {first.detail[:200]}")
    own = [t for t in first.tests if t.kind == "io"] + [t for t in first.tests if t.kind == "assert"][:n_tests]
    failed = [t for t in own if not t.passed]
    if failed:
        return SpecCheck(False, f"reference solution fails its tests: {len(own) - len(failed)}/{len(own)} passed; "
                                f"first failure: {(failed[0].error or 'failed')[:160]}")
    def sig(r: SandboxResult) -> list:
        return [(t.kind, t.index, t.passed, _mask(t.error), _mask(t.output)) for t in r.tests]

    if first.status != second.status or sig(first) != sig(second):
        return SpecCheck(False, "nondeterministic: test results differ between two runs")
    out1, out2 = _mask(first.stdout_tail), _mask(second.stdout_tail)
    if out1 != out2:
        p1, p2 = _PROBE_RE.findall(out1), _PROBE_RE.findall(out2)
        if p1 and p2 and p1[-1] != p2[-1]:
            return SpecCheck(False, "nondeterministic: the values the tests compare differ between two runs")
        return SpecCheck(False, "nondeterministic: output differs between two runs")
    return OK


def _mask(text: str | None) -> str | None:
    return None if text is None else re.sub(r"0x[0-9a-fA-F]+", "0x?", text)


# ----------------------------------------------------------------------------------------------
# public API
# ----------------------------------------------------------------------------------------------

def validate_specs_batch(questions: Sequence[Question], banned_modules: Iterable[str], timeout_s: float = 5.0,
                         memory_mb: int = 512, workers: int = 0, pool: SandboxPool | None = None) -> list[SpecCheck]:
    """Validate many questions' verifier specs; one ``SpecCheck`` per question, in input order.

    ``banned_modules``: module names a code spec may not import (``VerifierParams.banned_modules``).
    ``timeout_s`` (seconds) and ``memory_mb`` (MiB) bound each sandbox run and each answer parse.
    Code specs run twice in the sandbox batch (``run_tests_batch`` with ``workers``; 0 = one per
    core). Checks and reasons: see the module docstring. Never raises for a bad spec; raises
    ``selfevolve.verifiers.sandbox.SandboxError`` if the sandbox cannot start at all.
    """
    banned = list(banned_modules)
    out: list[SpecCheck | None] = [None] * len(questions)
    math_idx: list[int] = []
    code_idx: list[int] = []
    for i, q in enumerate(questions):
        if isinstance(q.spec, MathSpec):
            out[i] = _check_math_static(q)
            if out[i] is None:
                math_idx.append(i)
        elif isinstance(q.spec, CodeSpec):
            out[i] = _check_code_static(q, banned)
            if out[i] is None:
                code_idx.append(i)
        else:  # pragma: no cover - the record type forbids it
            out[i] = SpecCheck(False, "unknown verifier spec")
    if math_idx:
        answers = [questions[i].spec.answer.strip() for i in math_idx]  # type: ignore[union-attr]
        for i, (ok, why) in zip(math_idx, _answer_checks(answers, timeout_s, workers)):
            out[i] = OK if ok else SpecCheck(False, why if why.startswith("reference answer") else f"reference answer does not parse: {why}")
    if code_idx:
        jobs, n_tests = [], []
        for i in code_idx:
            job, n = _code_jobs(questions[i], timeout_s, memory_mb)
            jobs += [job, job]
            n_tests.append(n)
        results = run_tests_batch(jobs, workers=workers, pool=pool)
        for k, i in enumerate(code_idx):
            out[i] = _judge_code(results[2 * k], results[2 * k + 1], n_tests[k])
    return [c if c is not None else OK for c in out]


def validate_spec(question: Question, banned_modules: Iterable[str], timeout_s: float = 5.0,
                  memory_mb: int = 512, pool: SandboxPool | None = None) -> SpecCheck:
    """Is ``question``'s verifier spec valid? Returns ``SpecCheck(valid, reason)``.

    Math: non-empty reference answer that parses, and equal to the exact value of the question when
    the question is a pure integer-arithmetic expression (reason e.g. "reference answer 68
    disagrees with the expression's value 113"). Code: parses, defines its entry point, imports no
    module of ``banned_modules``, has tests that pass on the reference solution, deterministic on a
    repeat run (AZR's validity checks). ``timeout_s``: seconds per sandbox run / answer parse.
    Never raises for a bad spec.
    """
    return validate_specs_batch([question], banned_modules, timeout_s=timeout_s, memory_mb=memory_mb, pool=pool)[0]
