"""Tables from a pasted TorchRec snippet, read with `ast` and never run: EmbeddingBagConfig(...) calls with
literal arguments, names bound to literals, range()/enumerate() comprehensions, str() and f-strings. Every
number, string and list, the nesting and the total work are bounded, so no snippet can hang or fill memory.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Callable
from typing import Any

import engine

CONFIG_CALLS = ("EmbeddingBagConfig", "EmbeddingConfig")
TABLE_KEYS = tuple(f.name for f in engine.TABLE_FIELD_DECLS if f.snippet)  # EmbeddingBagConfig keywords read
POLICY_KEY = "virtual_table_eviction_policy"  # a call of a TorchRec class, read by Reader.policy
MAX_TABLES = 10_000
MAX_CHARS = 1_000_000  # a snippet; 5,000 tables written out one call each fit
MAX_TOKENS = 200_000  # counted before parsing: ast.parse holds ~500 bytes per token
MAX_NODES = 400_000
MAX_STEPS = 1_000_000  # values computed, loop iterations, tables built: ~1 s of reading
MAX_DEPTH = 64  # nesting of one expression
MAX_INT = 2**63  # |int| below this: an int64, as the engine stores it
MAX_STR_CHARS = 10_000
MAX_LIST_ITEMS = 100_000
_TOKEN = re.compile(r"\w+|[^\w\s]")
_FORMAT_SPEC = re.compile(r"^(.?[<>=^])?[+\- ]?z?#?0?\d{0,3}[,_]?(\.\d{1,3})?[bcdeEfFgGnosxX%]?$")
_COMPS = (ast.ListComp, ast.GeneratorExp, ast.SetComp, ast.DictComp)
_OPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b}


class SnippetError(ValueError):
    """A snippet that cannot be read; the message is one line: "line N: what"."""


class _Unsupported(Exception):
    """An expression that is not a bounded literal; a module-level name bound to one stays unbound."""

    def __init__(self, node: ast.AST, what: str):
        super().__init__(f"line {getattr(node, 'lineno', '?')}: {what}")


def _call_name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def checked(node: ast.AST, v: Any) -> Any:
    """`v` if it is a bounded literal value (int64, finite float, short str and list), else _Unsupported."""
    if isinstance(v, bool):
        return v
    if isinstance(v, int):
        if not -MAX_INT < v < MAX_INT:
            raise _Unsupported(node, "a whole number of more than 63 bits (|n| must be below 2**63)")
    elif isinstance(v, float):
        if not math.isfinite(v):
            raise _Unsupported(node, "a number that is not finite (inf or nan)")
    elif isinstance(v, str):
        if len(v) > MAX_STR_CHARS:
            raise _Unsupported(node, f"a string of {len(v):,} characters (at most {MAX_STR_CHARS:,})")
    elif isinstance(v, list):
        if len(v) > MAX_LIST_ITEMS:
            raise _Unsupported(node, f"a list of {len(v):,} items (at most {MAX_LIST_ITEMS:,})")
    else:
        raise _Unsupported(node, f"a {type(v).__name__} value (only numbers, strings and lists are read)")
    return v


def _power(node: ast.AST, base: Any, exp: Any) -> Any:
    """base ** exp, refused before computing when the result could not be a bounded number."""
    if isinstance(base, int) and isinstance(exp, int) and exp >= 0:
        if abs(base) > 1 and exp * math.log2(abs(base)) >= 63:
            raise _Unsupported(node, "a power of more than 63 bits (|n| must be below 2**63)")
        return base**exp
    try:
        return math.pow(base, exp)
    except (OverflowError, ValueError, ZeroDivisionError):
        raise _Unsupported(node, "a power that is not a finite real number") from None


def _format(node: ast.FormattedValue, v: Any) -> str:
    if isinstance(v, list):
        raise _Unsupported(node, "a list inside an f-string (only numbers and strings are formatted)")
    if node.conversion != -1:
        v = {ord("s"): str, ord("r"): repr, ord("a"): ascii}[node.conversion](v)
    spec = ""
    if node.format_spec is not None:
        parts = node.format_spec.values if isinstance(node.format_spec, ast.JoinedStr) else []
        if len(parts) != 1 or not isinstance(parts[0], ast.Constant) or not _FORMAT_SPEC.match(parts[0].value):
            raise _Unsupported(node, "an f-string format other than a short literal one such as :03d")
        spec = parts[0].value
    try:
        return format(v, spec)
    except (ValueError, TypeError):
        raise _Unsupported(node, f"format {spec!r} does not apply to a {type(v).__name__}") from None


class Reader:
    """Reads one snippet; counts every step so that the whole reading is bounded."""

    def __init__(self) -> None:
        self.steps = 0
        self.unbound: dict[str, str] = {}  # module-level names whose value could not be read, and why

    def tick(self, node: ast.AST, n: int = 1) -> None:
        self.steps += n
        if self.steps > MAX_STEPS:
            raise SnippetError(f"line {getattr(node, 'lineno', '?')}: the snippet takes more than {MAX_STEPS:,} "
                               "steps to read; write the tables out, or import JSON or CSV")

    def value(self, node: ast.AST, env: dict, depth: int = 0) -> Any:
        """The value of a literal expression; anything that would need running code raises _Unsupported."""
        self.tick(node)
        if depth > MAX_DEPTH:
            raise _Unsupported(node, f"an expression nested more than {MAX_DEPTH} deep")
        return checked(node, self._value(node, env, depth + 1))

    def _value(self, node: ast.AST, env: dict, d: int) -> Any:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str, bool)):
            return node.value
        if isinstance(node, (ast.List, ast.Tuple)):
            checked(node, node.elts)
            return [self.value(e, env, d) for e in node.elts]
        if isinstance(node, ast.Name):
            if node.id not in env:
                why = f" ({self.unbound[node.id]})" if node.id in self.unbound else ""
                raise _Unsupported(node, f"{node.id!r} is not bound to a literal in the snippet{why}")
            return env[node.id]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            v = self.value(node.operand, env, d)
            if _number(v):
                return -v
        if isinstance(node, ast.BinOp):
            return self._binop(node, env, d)
        if isinstance(node, ast.JoinedStr):
            return "".join(_format(v, self.value(v.value, env, d)) if isinstance(v, ast.FormattedValue)
                           else str(self.value(v, env, d)) for v in node.values)
        if isinstance(node, ast.Call) and _call_name(node.func) == "str" and len(node.args) == 1 and not node.keywords:
            v = self.value(node.args[0], env, d)
            if not isinstance(v, list):
                return str(v)
        if isinstance(node, ast.Subscript):
            seq, idx = self.value(node.value, env, d), self.value(node.slice, env, d)
            if isinstance(seq, list) and isinstance(idx, int) and -len(seq) <= idx < len(seq):
                return seq[idx]
            raise _Unsupported(node, "index out of range or not a list")
        if isinstance(node, ast.Attribute) and _call_name(node.value) in ("PoolingType", "DataType"):
            return node.attr.lower()
        raise _Unsupported(node, f"cannot read {_what(node)}: only literals are read (numbers, strings, lists, "
                                 "dicts, names bound to them, str(...), PoolingType/DataType members); nothing is run")

    def _binop(self, node: ast.BinOp, env: dict, d: int) -> Any:
        left, right = self.value(node.left, env, d), self.value(node.right, env, d)
        if _number(left) and _number(right):
            if isinstance(node.op, ast.Pow):
                return _power(node, left, right)
            if isinstance(node.op, ast.FloorDiv):
                if right == 0:
                    raise _Unsupported(node, "a division by zero")
                return left // right
            if type(node.op) in _OPS:
                return _OPS[type(node.op)](left, right)
        if isinstance(node.op, ast.Add) and type(left) is type(right) and isinstance(left, (str, list)):
            cap = MAX_STR_CHARS if isinstance(left, str) else MAX_LIST_ITEMS
            if len(left) + len(right) > cap:
                raise _Unsupported(node, f"a string or list of more than {cap:,} items")
            return left + right
        raise _Unsupported(node, "only + of strings or lists and + - * // ** of numbers are understood")

    def iterable(self, node: ast.AST, env: dict) -> list:
        if isinstance(node, ast.Call) and _call_name(node.func) in ("range", "enumerate") and not node.keywords:
            args = [self.value(a, env) for a in node.args]
            if _call_name(node.func) == "enumerate" and len(args) == 1 and isinstance(args[0], list):
                return [[i, v] for i, v in enumerate(args[0])]
            if _call_name(node.func) == "range" and 1 <= len(args) <= 3 and all(type(a) is int for a in args):
                if len(args) == 3 and args[2] == 0:
                    raise _Unsupported(node, "range() with a step of 0")
                r = range(*args)
                try:
                    n = len(r)
                except OverflowError:
                    n = MAX_INT
                if n > MAX_TABLES:
                    raise _Unsupported(node, f"range of {n:,} values (at most {MAX_TABLES:,} tables)")
                return list(r)
        value = self.value(node, env)
        if not isinstance(value, list):
            raise _Unsupported(node, "a loop must go over range(...), enumerate(...) or a list")
        return value

    def bind(self, target: ast.AST, value: Any, env: dict) -> None:
        self.tick(target)
        if isinstance(target, ast.Name):
            env[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, list) and len(value) == len(target.elts):
            for t, v in zip(target.elts, value):
                self.bind(t, v, env)
        else:
            raise _Unsupported(target, "cannot unpack the loop variable")

    def envs(self, comp: ast.AST, outer: list[dict]) -> list[dict]:
        """One environment per iteration of a comprehension's for-clauses (no if-clauses), for each outer one."""
        out = outer
        for g in comp.generators:
            if g.ifs or g.is_async:
                raise _Unsupported(g.iter, "comprehensions with if-clauses are not understood")
            nxt = []
            for e in out:
                for v in self.iterable(g.iter, e):
                    self.tick(g.iter)
                    e2 = dict(e)
                    self.bind(g.target, v, e2)
                    nxt.append(e2)
                    if len(nxt) > MAX_TABLES:
                        raise _Unsupported(g.iter, f"more than {MAX_TABLES:,} tables")
            out = nxt
        return out

    def table(self, call: ast.Call, env: dict, ignored: set[str]) -> dict:
        if call.args:
            raise _Unsupported(call, "EmbeddingBagConfig arguments must be given by keyword")
        table: dict[str, Any] = {}
        for kw in call.keywords:
            if kw.arg == POLICY_KEY:
                table[kw.arg] = self.policy(kw.value, env)
            elif kw.arg in TABLE_KEYS:
                table[kw.arg] = self.value(kw.value, env)
            elif kw.arg is not None:
                ignored.add(kw.arg[:40])
        if "name" not in table:
            raise _Unsupported(call, "EmbeddingBagConfig without name=")
        return table

    def policy(self, node: ast.AST, env: dict) -> dict:
        """TorchRec's eviction policy call (NoEvictionPolicy(), CountBasedEvictionPolicy(eviction_threshold=2), ...)
        as the field's block {"type": ..., field: value}; its fields are checked where the config is read."""
        kind = engine.EVICTION_POLICY_TYPES.get(_call_name(node.func)) if isinstance(node, ast.Call) else None
        if kind is None:
            raise _Unsupported(node, f"{POLICY_KEY} must call one of TorchRec's policy classes ("
                               f"{', '.join(engine.EVICTION_POLICY_TYPES)})")
        if node.args:
            raise _Unsupported(node, f"{_call_name(node.func)} arguments must be given by keyword")
        self.tick(node)
        return {"type": kind, **{kw.arg: self.value(kw.value, env) for kw in node.keywords if kw.arg is not None}}

    def module_env(self, tree: ast.Module) -> dict:
        env: dict = {}
        for stmt in tree.body:
            target = stmt.targets[0] if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else (
                stmt.target if isinstance(stmt, ast.AnnAssign) and stmt.value is not None else None)
            if not isinstance(target, ast.Name):
                continue
            try:
                env[target.id] = self.value(stmt.value, env)
                self.unbound.pop(target.id, None)
            except _Unsupported as e:
                env.pop(target.id, None)
                self.unbound[target.id] = str(e)
        return env


def _parse(text: str) -> ast.Module:
    if len(text) > MAX_CHARS:
        raise SnippetError(f"the snippet has {len(text):,} characters; at most {MAX_CHARS:,} are read (write "
                           "the tables with a loop, or import JSON or CSV)")
    tokens = sum(1 for _ in _TOKEN.finditer(text))
    if tokens > MAX_TOKENS:
        raise SnippetError(f"the snippet has {tokens:,} tokens; at most {MAX_TOKENS:,} are read (write the "
                           "tables with a loop, or import JSON or CSV)")
    try:
        return ast.parse(text)
    except SyntaxError as e:
        where = f"line {e.lineno}: " if e.lineno else ""
        raise SnippetError(f"{where}not valid Python ({e.msg})") from None
    except (ValueError, OverflowError) as e:
        raise SnippetError(f"not valid Python ({e})") from None
    except (RecursionError, MemoryError):
        raise SnippetError("the snippet nests expressions too deeply to read") from None


def _config_calls(tree: ast.Module) -> list[tuple[ast.Call, tuple]]:
    """Every EmbeddingBagConfig(...) call with its enclosing comprehensions, outermost first (iterative walk)."""
    calls, stack, count = [], [(tree, ())], 0
    while stack:
        node, chain = stack.pop()
        count += 1
        if count > MAX_NODES:
            raise SnippetError(f"the snippet has more than {MAX_NODES:,} syntax nodes; write the tables with a loop")
        if isinstance(node, ast.Call) and _call_name(node.func) in CONFIG_CALLS:
            calls.append((node, chain))
        inner = chain + (node,) if isinstance(node, _COMPS) else chain
        stack.extend((child, inner) for child in ast.iter_child_nodes(node))
    return calls


def read(text: str) -> tuple[list[dict], list[str]]:
    """(tables, notes) from EmbeddingBagConfig(...) calls in Python source; SnippetError when unreadable."""
    tree = _parse(text)
    calls = _config_calls(tree)
    reader = Reader()
    env = reader.module_env(tree)
    found: list[tuple[tuple[int, int, int], dict]] = []
    ignored: set[str] = set()
    try:
        for call, chain in calls:
            envs = [env]
            for comp in chain:
                envs = reader.envs(comp, envs)
            for i, e in enumerate(envs):
                found.append(((call.lineno, call.col_offset, i), reader.table(call, e, ignored)))
                if len(found) > MAX_TABLES:
                    raise _Unsupported(call, f"more than {MAX_TABLES:,} tables (at most {MAX_TABLES:,})")
    except _Unsupported as e:
        raise SnippetError(str(e)) from None
    if not found:
        raise SnippetError("no EmbeddingBagConfig(...) calls found in the snippet")
    tables = [t for _, t in sorted(found, key=lambda x: x[0])]
    notes = [f"ignored arguments: {', '.join(sorted(ignored)[:10])}"] if ignored else []
    return tables, notes


def _what(node: ast.AST) -> str:
    """What a node is, in the snippet's own words: 'the call input()', 'the expression -True'."""
    text = ast.unparse(node)
    text = text if len(text) <= 40 else text[:39] + "…"
    return f"the call {text}" if isinstance(node, ast.Call) else f"the expression {text}"
