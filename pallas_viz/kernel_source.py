"""What the user's kernel source says about a line: its enclosing branch (and, for a
`lax.cond` / `lax.switch`, where each branch opens its first scope), its axes, the names
of its `pl.run_scoped` operands.

JAX keeps, for every allocation request, the Python stack from the allocating line
out to the function it traced as a sub-computation: a `pl.when` body, a `lax.cond`
or `lax.switch` branch, a loop or `run_scoped` body, or the kernel body itself.
This module reads the user's source (already in `linecache`, notebook cells too)
to say where threads part around that function (a branch, or a loop whose trip
count depends on the thread), walking out through scope bodies, and which axis a
`collective_axes=` names. Pure Python: no JAX here.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import linecache

from .model import UNNAMED_AXIS, SourceLocation

# Calls whose function argument is a branch: `lax.cond(p, f, g)`, `lax.switch(i, [f, g])`,
# `pl.when(p)(f)` / `@pl.when(p)`.
_BRANCH_CALLS = {"cond": "lax.cond", "switch": "lax.switch"}
_WHEN = "when"
# Loops, by the position and keyword of their body function and of the arguments that
# set their trip count: `lax.fori_loop(lo, hi, body, init)`, `lax.while_loop(cond, body,
# init)` (either written by keyword too: `body_fun=step`); `@pl.loop(lo, hi)` and
# `@plgpu.nd_loop(grid, collective_axes=...)` decorate their body (or are called on it,
# `pl.loop(lo, hi)(body)`). A loop parts threads only when those arguments differ between
# them; an `nd_loop` always may, as it deals its grid out along `collective_axes`.
_LOOP_CALLS = {
    "fori_loop": ((2, "body_fun"), ((0, "lower"), (1, "upper"))),
    "while_loop": ((1, "body_fun"), ((0, "cond_fun"), (2, "init_val"))),
}
_LOOP_DECORATORS = {"loop": False, "nd_loop": True}  # name -> its trip count always varies
# Calls that start a kernel: the walk outwards stops at its body.
_KERNEL_CALLS = {"kernel", "pallas_call", "core_map", "emit_pipeline",
                 "emit_pipeline_warp_specialized"}
# Calls whose result depends on where a thread runs: a branch on them parts threads/blocks.
_PLACE_CALLS = {"axis_index", "program_id", "num_programs"}
_MAX_SOURCE = 2_000_000  # characters; larger files are not parsed


@dataclasses.dataclass(frozen=True)
class _Func:
    node: ast.AST
    parent: _Func | None
    name: str
    first_line: int


class _Module:
    """The functions and calls of one source file, indexed for the walk."""

    def __init__(self, tree: ast.Module, lines: list[str], file: str = ""):
        self.file = file
        self.lines = lines
        self.funcs: dict[tuple[str, int], _Func] = {}
        self.by_node: dict[int, _Func] = {}
        self.calls: list[tuple[ast.Call, _Func | None]] = []
        # answers already computed for this text: (scope, first line) -> branch
        self.branch_cache: dict[tuple[str, int], SourceLocation | None] = {}
        self.branch_version = _traced_version  # (the traced axis names it was computed with)
        self.axes_cache: dict[int, tuple[str, ...]] = {}  # line -> collective_axes_at
        self.operands_cache: dict[int, tuple[str, ...]] = {}  # line -> scoped_operands
        self.wrapped_cache: dict[int, tuple[str, ...]] = {}  # line -> wrapped_calls_at
        self.barrier_cache: dict[int, tuple] = {}  # line -> barrier_calls_around
        # (scope, first line) -> helper_call
        self.helper_cache: dict[tuple[str, int], SourceLocation | None] = {}
        self.place_cache: dict[int | None, set[str]] = {}  # id(function node) -> _place_names
        # id(function node), None for the module -> name -> the value it is bound to once
        # (`_bindings`)
        self.bindings_cache: dict[int | None, dict[str, ast.AST | None]] = {}
        self.tree = tree
        self._index(tree, None)

    def _index(self, node: ast.AST, parent: _Func | None) -> None:
        for child in ast.iter_child_nodes(node):
            scope = parent
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                if isinstance(child, ast.Lambda):
                    name, first = "<lambda>", child.lineno
                else:
                    name = child.name
                    first = min([child.lineno] + [d.lineno for d in child.decorator_list])
                f = _Func(child, parent, name, first)
                self.funcs.setdefault((name, first), f)
                self.by_node[id(child)] = f
                scope = f
            elif isinstance(child, ast.Call):
                self.calls.append((child, parent))
            self._index(child, scope)

    def location(self, node: ast.AST, func: _Func | None, file: str) -> SourceLocation:
        line = node.lineno
        code = self.lines[line - 1].rstrip("\n") if 0 < line <= len(self.lines) else None
        return SourceLocation(file=file, line=line, column=node.col_offset,
                              function=None if func is None else func.name, code=code)


def _callee(func: ast.AST) -> str | None:
    """`pl.when` -> "when", `jax.lax.cond` -> "cond", `cond` -> "cond"."""
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


@functools.lru_cache(maxsize=32)
def _parse(file: str, text: str) -> _Module | None:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return _Module(tree, text.splitlines(), file)


# file -> (the `linecache` lines it was parsed from, its module): a trace asks for the
# same file once per source line; while linecache holds the same list (the same text),
# the module is reused without joining and hashing the whole text again.
_modules: dict[str, tuple[list[str], _Module | None]] = {}


def _module(file: str) -> _Module | None:
    lines = linecache.getlines(file)
    hit = _modules.get(file)
    if hit is not None and hit[0] is lines:
        return hit[1]
    text = "".join(lines)
    mod = None if not text or len(text) > _MAX_SOURCE else _parse(file, text)
    if len(_modules) >= 64:
        _modules.clear()
    _modules[file] = (lines, mod)
    return mod


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _bindings(mod: _Module, func: _Func | None) -> dict[str, ast.AST | None]:
    """Name -> the value it is bound to in `func`'s own code (the module's top level for
    None): `WG = "wg"` -> {"WG": Constant("wg")}; a parameter bound nowhere else -> its
    `ast.arg`; None when it is bound there otherwise or more than once (a second
    assignment, a loop variable, an import)."""
    key = None if func is None else id(func.node)
    hit = mod.bindings_cache.get(key)
    if hit is not None:
        return hit
    out: dict[str, ast.AST | None] = {}
    root = mod.tree if func is None else func.node
    if func is not None:
        out.update((x.arg, x) for x in ast.walk(root.args) if isinstance(x, ast.arg))
    stack = list(ast.iter_child_nodes(root))
    while stack:  # its own statements: nested functions and classes bind in their own scope
        n = stack.pop()
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out[n.name] = None
            continue
        if isinstance(n, (ast.Lambda, ast.arguments)):
            continue
        if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None:
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            if len(targets) == 1 and isinstance(targets[0], ast.Name):
                name = targets[0].id
                out[name] = n.value if name not in out else None
                stack.append(n.value)
                continue
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
            out[n.id] = None
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            out.update(dict.fromkeys(((a.asname or a.name).split(".")[0] for a in n.names),
                                     None))
        elif isinstance(n, (ast.Global, ast.Nonlocal)):
            out.update(dict.fromkeys(n.names, None))
        stack.extend(ast.iter_child_nodes(n))
    mod.bindings_cache[key] = out
    return out


def _strings(mod: _Module, func: _Func | None, node: ast.AST | None,
             depth: int = 0) -> tuple[str, ...]:
    """The axis names `node` gives, in its order: string literals, and names bound once to
    such values in the enclosing functions or at the module's top level (`axis_index(WG)`
    with `WG = "wg"`; `AXES = (WG,)`)."""
    if node is None or depth > 8:
        return ()
    items = node.elts if isinstance(node, (ast.Tuple, ast.List)) else [node]
    out: list[str] = []
    for item in items:
        found: tuple[str, ...] = ()
        if isinstance(item, ast.Constant) and isinstance(item.value, str):
            found = (item.value,)
        elif isinstance(item, ast.Name):
            f = func
            while True:
                bound = _bindings(mod, f)
                if item.id in bound:
                    value = bound[item.id]
                    found = (_argument_strings(mod, f, item.id, depth + 1)
                             if isinstance(value, ast.arg) else
                             _strings(mod, f, value, depth + 1))
                    break
                if f is None:
                    break
                f = f.parent
        out.extend(x for x in found if x not in out)
    return tuple(out)


def _argument_strings(mod: _Module, func: _Func | None, name: str,
                      depth: int) -> tuple[str, ...]:
    """The axis names parameter `name` of `func` gets where the module calls `func` by its
    name (`do_matmul(..., wg_axis="wg")`, `functools.partial(body, wg_axis=WG)`, or the
    parameter's default), if every such call resolves (`_strings`); () otherwise. `name`
    is a parameter `_bindings` found bound nowhere else in `func`."""
    if func is None or isinstance(func.node, ast.Lambda) or depth > 8:
        return ()
    a = func.node.args
    positional = [p.arg for p in (*a.posonlyargs, *a.args)]
    if name not in positional and name not in [p.arg for p in a.kwonlyargs]:
        return ()  # (`*args`, `**kwargs`)
    defaults = dict(zip(positional[len(positional) - len(a.defaults):], a.defaults))
    defaults.update((p.arg, d) for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None)
    index = positional.index(name) if name in positional else None
    method = bool(positional) and positional[0] in ("self", "cls")
    out: list[str] = []
    calls = 0
    for call, scope in mod.calls:
        args, at = call.args, index
        if _callee(call.func) == "partial" and args and _callee(args[0]) == func.name:
            args = args[1:]
        elif _callee(call.func) != func.name:
            continue
        if method and at is not None and isinstance(call.func, ast.Attribute):
            at -= 1  # (`obj.f(x)`: `self` is not among the call's arguments)
        calls += 1
        value = next((k.value for k in call.keywords if k.arg == name), None)
        if value is None and at is not None and 0 <= at < len(args) and not any(
                isinstance(x, ast.Starred) for x in args[:at + 1]):
            value = args[at]
        if value is None:
            value = defaults.get(name)
        names = _strings(mod, scope, value, depth)
        if not names:
            return ()  # a call the source does not resolve: the name is not known
        out.extend(x for x in names if x not in out)
    return tuple(out) if calls else ()


def _calls_place(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and _callee(n.func) in _PLACE_CALLS
               for n in ast.walk(node))


def _place_names(mod: _Module, func: _Func | None) -> set[str]:
    """Names assigned, in `func` and its parents, from `axis_index(...)` /
    `program_id(...)` or from names so assigned (`t = axis_index("t")`, `n = 1 + t`)."""
    key = None if func is None else id(func.node)
    if key not in mod.place_cache:  # (the branches of one walk share their functions)
        mod.place_cache[key] = _assigned_from_place(func)
    return mod.place_cache[key]


def _assignments(func: _Func | None) -> list[tuple[ast.AST, set[str]]]:
    """(value, the names it is assigned to) of every assignment in `func` and its parents."""
    assigns: list[tuple[ast.AST, set[str]]] = []
    f = func
    while f is not None:
        for n in ast.walk(f.node):
            if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and n.value is not None:
                targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                assigns.append((n.value, set().union(*(_names(t) for t in targets))))
        f = f.parent
    return assigns


def _assigned_from_place(func: _Func | None) -> set[str]:
    assigns = _assignments(func)
    out: set[str] = set()
    grew = True
    while grew:  # (until no assignment adds a name: at most one pass per assignment)
        grew = False
        for value, targets in assigns:
            if not targets <= out and (_calls_place(value) or _names(value) & out):
                out |= targets
                grew = True
    return out


def _reads_place(mod: _Module, node: ast.AST | None, func: _Func | None) -> bool:
    """Whether `node` reads a thread or block index (directly or through a name)."""
    return node is not None and (_calls_place(node) or bool(_names(node) & _place_names(mod, func)))


def _is_constant(node: ast.AST) -> bool:
    """A literal, or arithmetic and tuples of literals (`0`, `2 * 4`, `(1, 2)`)."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.UnaryOp):
        return _is_constant(node.operand)
    if isinstance(node, ast.BinOp):
        return _is_constant(node.left) and _is_constant(node.right)
    if isinstance(node, (ast.Tuple, ast.List)):
        return all(_is_constant(e) for e in node.elts)
    return False


@dataclasses.dataclass(frozen=True)
class _Branch:
    where: ast.AST
    func: _Func | None
    condition: ast.AST | None  # for a loop: its trip-count arguments, as a tuple
    kind: str = "branch"  # or "loop"
    varies: bool = False  # a loop whose trip count may differ even with literal arguments


def _loop(call: ast.Call, scope: _Func | None, bounds: list[ast.AST],
          varies: bool = False) -> _Branch:
    return _Branch(call, scope, ast.Tuple(elts=bounds, ctx=ast.Load()), "loop", varies)


def _factory_branch(call: ast.AST, scope: _Func | None) -> _Branch | None:
    """The branch or loop that `call` (`pl.when(p)`, `pl.loop(lo, hi)`,
    `plgpu.nd_loop(grid, ...)`) makes of the function it decorates or is called on;
    None if `call` is none of those."""
    if not isinstance(call, ast.Call):
        return None
    name = _callee(call.func)
    if name == _WHEN:
        return _Branch(call, scope, call.args[0] if call.args else None)
    if name in _LOOP_DECORATORS:
        return _loop(call, scope, list(call.args) + [k.value for k in call.keywords],
                     _LOOP_DECORATORS[name])
    return None


def _argument(call: ast.Call, where: tuple[int, str]) -> ast.AST | None:
    """The argument of `call` at a (position, keyword)."""
    i, name = where
    if i < len(call.args):
        return call.args[i]
    return next((k.value for k in call.keywords if k.arg == name), None)


def _loop_bounds(mod: _Module, call: ast.Call, scope: _Func | None,
                 bounds: tuple[tuple[int, str], ...]) -> list[ast.AST]:
    """The trip-count arguments of a loop call; a `while_loop`'s condition function
    by name stands for its body (what it reads decides the trip count)."""
    out = []
    for where in bounds:
        a = _argument(call, where)
        if a is None:
            continue
        if isinstance(a, ast.Name):
            out.extend(g.node for g in mod.funcs.values() if g.name == a.id and _sees(scope, g))
        out.append(a)
    return out


def _uses(mod: _Module, f: _Func) -> list[tuple[ast.Call, _Func | None, ast.AST]]:
    """Calls that receive `f` as an argument: by name, the lambda itself, a call of the
    function that returns it (`lax.switch(i, [make(1.0), skip])`, `make` ending in
    `return f`), or a name the calling scope bound to an expression naming either
    (`cases = [f if a else g for a in ...]; lax.switch(i, cases)`)."""
    named = not isinstance(f.node, ast.Lambda)
    factory = (f.parent if named and f.parent is not None
               and not isinstance(f.parent.node, ast.Lambda) and _returns(f.parent, f)
               else None)

    def refers(a: ast.AST, scope) -> bool:
        if a is f.node:
            return True
        if isinstance(a, ast.Name) and named and a.id == f.name and _sees(scope, f):
            return True
        return (factory is not None and isinstance(a, ast.Call)
                and isinstance(a.func, ast.Name) and a.func.id == factory.name
                and _sees(scope, factory))

    out = []
    for call, scope in mod.calls:
        args = list(call.args) + [k.value for k in call.keywords]
        flat = []
        for a in args:
            flat.extend(a.elts if isinstance(a, (ast.List, ast.Tuple)) else [a])
        for a in flat:
            if refers(a, scope) or (named and isinstance(a, ast.Name) and any(
                    refers(n, scope) for n in _bound_to(scope, a.id))):
                out.append((call, scope, a))
                break
    return out


def _bound_to(scope: _Func | None, name: str) -> list[ast.AST]:
    """The nodes of the expressions `scope`'s own statements assign to `name`, but the
    names called there (`t = helper(x)` binds what `helper` returns, not `helper`)."""
    if scope is None or isinstance(scope.node, ast.Lambda):
        return []
    out: list[ast.AST] = []
    for st in scope.node.body:
        if (isinstance(st, ast.Assign) and len(st.targets) == 1
                and isinstance(st.targets[0], ast.Name) and st.targets[0].id == name):
            nodes = list(ast.walk(st.value))
            called = {id(n.func) for n in nodes if isinstance(n, ast.Call)}
            out.extend(n for n in nodes if id(n) not in called)
    return out


def _sees(scope: _Func | None, f: _Func) -> bool:
    """True if code in `scope` can name `f` (f is defined in scope or one of its parents)."""
    s = scope
    while True:
        if s is f.parent:
            return True
        if s is None:
            return False
        s = s.parent


def _enclosing_branches(mod: _Module, f: _Func) -> list[_Branch]:
    """Branches around `f`, innermost first, up to the kernel body."""
    out: list[_Branch] = []
    seen: set[int] = set()
    while f is not None and id(f.node) not in seen:
        seen.add(id(f.node))
        node = f.node
        nxt = f.parent
        decorators = getattr(node, "decorator_list", [])
        for d in decorators:
            made = _factory_branch(d, f.parent)
            if made is not None:
                out.append(made)
            elif _launches(d):
                return out
        for call, scope, arg in _uses(mod, f):
            name = _callee(call.func)
            if name in _LOOP_CALLS:
                body, bounds = _LOOP_CALLS[name]
                if _argument(call, body) is arg:
                    out.append(_loop(call, scope, _loop_bounds(mod, call, scope, bounds)))
                nxt = scope
                break
            if name in _BRANCH_CALLS:
                out.append(_Branch(call, scope, call.args[0] if call.args else None))
                nxt = scope
                break
            made = _factory_branch(call.func, scope)  # `pl.when(p)(f)`, `pl.loop(...)(f)`
            if made is not None:
                out.append(made)
                nxt = scope
                break
            if name in _KERNEL_CALLS:
                return out
            nxt = scope
            break
        f = nxt
    return out


def enclosing_branch(file: str, scope: str, scope_first_line: int) -> SourceLocation | None:
    """Where threads part around the traced function `scope` (defined at that line): a
    branch (`kind` "branch") or a loop (`kind` "loop"), or None.

    Of the branches and loops around it, the innermost whose condition (a loop's: its
    trip count) reads a thread or block index (`axis_index`, `program_id`, or a name
    assigned from one) wins; failing that, the innermost branch; failing that, the
    innermost loop whose trip count is not a literal. An `nd_loop` deals its grid out
    along its `collective_axes`, so its trip count may differ even with a literal grid;
    it ranks there, below a branch, as those axes may be the blocks' and not the threads'.
    """
    mod = _module(file)
    if mod is None:
        return None
    key = (scope, scope_first_line)
    if mod.branch_version != _traced_version:  # axis names noted since: compute afresh
        mod.branch_cache.clear()
        mod.branch_version = _traced_version
    if key not in mod.branch_cache:  # (the module is parsed once per text of the file)
        mod.branch_cache[key] = _find_branch(mod, file, key)
    return mod.branch_cache[key]


def _find_branch(mod: _Module, file: str, key: tuple[str, int]) -> SourceLocation | None:
    f = mod.funcs.get(key)
    if f is None:
        return None
    branches = _enclosing_branches(mod, f)
    chosen = (next((b for b in branches if _reads_place(mod, b.condition, b.func)), None)
              or next((b for b in branches if b.kind == "branch"), None)
              or next((b for b in branches if b.varies or not _is_constant(b.condition)),
                      None))
    if chosen is None:
        return None
    if chosen.kind != "branch":
        return dataclasses.replace(mod.location(chosen.where, chosen.func, file), kind="loop")
    return dataclasses.replace(
        mod.location(chosen.where, chosen.func, file), kind=chosen.kind,
        starts=_branch_starts(mod, file, chosen.where, chosen.func),
        axes=_condition_axes(mod, chosen.condition, chosen.func))


def _condition_axes(mod: _Module, cond: ast.AST | None, func: _Func | None) -> tuple[str, ...]:
    """The mesh axes whose index a branch condition reads, directly (`axis_index("t")`)
    or through names assigned from it (`t = axis_index("t")`, `s = i % 2 == t`), named
    by literals or by names bound once to literals (`_strings`)."""
    if cond is None:
        return ()
    named = _axes_of_names(mod, func)
    return tuple(sorted(_axes_called(mod, func, cond).union(
        *(named.get(n, set()) for n in _names(cond)))))


def collective_axes_at(file: str, line: int) -> tuple[str, ...]:
    """The axis names a `collective_axes=` keyword names on `line` of `file`, if any."""
    return _per_line(file, line, "axes_cache", _collective_axes)


def _per_line(file: str, line: int, cache: str, compute) -> tuple[str, ...]:
    """`compute(module, line)` for `file`'s parsed text, once per line and text (kept in
    the module's `cache`); () for a file that cannot be read or parsed."""
    mod = _module(file)
    if mod is None:
        return ()
    answers = getattr(mod, cache)
    if line not in answers:
        answers[line] = compute(mod, line)
    return answers[line]


def _collective_axes(mod: _Module, line: int) -> tuple[str, ...]:
    """The thread axis a collective scope on `line` names (a `plgpu.ClusterBarrier`'s own
    `collective_axes=` are cluster axes: not read)."""
    for call, func in mod.calls:
        if _callee(call.func) == "ClusterBarrier":
            continue
        if call.lineno <= line <= getattr(call, "end_lineno", call.lineno):
            for k in call.keywords:
                if k.arg == "collective_axes":
                    names = _strings(mod, func, k.value)
                    if names:
                        return names
    return ()


def _axes_called(mod: _Module, func: _Func | None, node: ast.AST) -> set[str]:
    """The axis names of the `axis_index("name")` calls in `node` (`func`'s code), named
    by literals or by names bound once to literals (`_strings`), else as JAX traced them
    (`_traced_axes`), else `UNNAMED_AXIS`: an index of an axis no one named."""
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Call) and _callee(n.func) == "axis_index":
            arg = n.args[0] if n.args else next(
                (k.value for k in n.keywords if k.arg == "axis_name"), None)
            out.update(_strings(mod, func, arg) or _traced_axes(mod, n) or (UNNAMED_AXIS,))
    return out


# file -> line -> (the line's text, the axis names JAX's `axis_index` equations there
# named while it traced the kernel): `note_traced_axis`
_traced: dict[str, dict[int, tuple[str, frozenset[str]]]] = {}
# the same for the kernels' thread axes, by the lines of their scopes: `note_thread_axis`
_threads: dict[str, dict[int, tuple[str, frozenset[str]]]] = {}
_traced_version = 0  # bumped with each new axis note: the branches found before are stale
_MAX_TRACED_FILES = 256


def _note(registry: dict, file: str, line: int, name: str) -> bool:
    """Add `name` to what `registry` holds for `line` of `file` as it reads now (what was
    noted under another text of the line is dropped); True if it was not there."""
    lines = linecache.getlines(file)
    code = lines[line - 1].rstrip("\n") if 0 < line <= len(lines) else ""
    per_file = registry.get(file)
    if per_file is None:
        if len(registry) >= _MAX_TRACED_FILES:
            registry.clear()
        per_file = registry[file] = {}
    hit = per_file.get(line)
    names = hit[1] if hit is not None and hit[0] == code else frozenset()
    if name in names:
        return False
    per_file[line] = (code, names | {name})
    return True


def _noted(registry: dict, file: str, first: int, last: int,
           lines: list[str]) -> frozenset[str]:
    """The names `registry` holds for lines `first`..`last` of `file`, each only while it
    reads as noted (`lines`: the file's text now)."""
    per_file = registry.get(file)
    out: frozenset[str] = frozenset()
    if not per_file:
        return out
    for line in range(first, last + 1):
        hit = per_file.get(line)
        if hit is not None and 0 < line <= len(lines) and (
                hit[0] == lines[line - 1].rstrip("\n")):
            out |= hit[1]
    return out


def note_traced_axis(file: str, line: int, axis: str) -> bool:
    """Note that an `axis_index` call on `line` of `file` named `axis` when JAX traced it
    (the interpreter sees the name resolved, whatever expression gave it: a parameter,
    an attribute). Returns True if that was not known."""
    global _traced_version
    if not _note(_traced, file, line, axis):
        return False
    _traced_version += 1
    return True


def note_thread_axis(file: str, line: int, axis: str) -> bool:
    """Note that a scope on `line` of `file` belonged to a kernel whose mesh names its
    thread axis `axis`, seen when JAX traced it; True if that was not known. A kernel
    JAX compiled before a later trace is not traced again: `thread_axis_at` still names
    its thread axis, whatever expression gave it."""
    return _note(_threads, file, line, axis)


def thread_axis_at(file: str, line: int) -> str | None:
    """The thread axis noted (`note_thread_axis`) for the scope on `line` of `file`, while
    that line reads as noted; None if none, or if kernels of several names had it."""
    names = _noted(_threads, file, line, line, linecache.getlines(file))
    return next(iter(names)) if len(names) == 1 else None


def traced_version() -> int:
    """A number that changes whenever `note_traced_axis` learns something new."""
    return _traced_version


def _traced_axes(mod: _Module, call: ast.Call) -> frozenset[str]:
    """The axis names noted (`note_traced_axis`) on the lines of `call`, an `axis_index`
    whose argument the source does not resolve; only while those lines read as noted."""
    return _noted(_traced, mod.file, call.lineno,
                  getattr(call, "end_lineno", None) or call.lineno, mod.lines)


def _axes_of_names(mod: _Module, func: _Func | None) -> dict[str, set[str]]:
    """Name -> the axes whose index it is computed from, for the names assigned in
    `func` and its parents (as `_assigned_from_place`, per axis)."""
    assigns = _assignments(func)
    out: dict[str, set[str]] = {}
    grew = True
    while grew:
        grew = False
        for value, targets in assigns:
            axes = _axes_called(mod, func, value).union(
                *(out.get(n, set()) for n in _names(value)))
            for t in targets:
                if not axes <= out.setdefault(t, set()):
                    out[t] |= axes
                    grew = True
    return out


def wrapped_calls_at(file: str, line: int) -> tuple[str, ...]:
    """The functions a wrapper calls on `line` of `file` with every parameter of its own,
    in order: a function an enclosing function received as a parameter (a decorator's,
    or a kernel factory's, closure calling the body it wraps: `def deco(body): def
    wrapped(x_ref, o_ref): return body(x_ref, o_ref)`). Their names; () if none."""
    return _per_line(file, line, "wrapped_cache", _wrapped_calls)


def helper_call(file: str, scope: str, scope_first_line: int) -> SourceLocation | None:
    """The call of the helper that the traced function `scope` (defined at that line: a
    `pl.when` body, a loop or `run_scoped` body) is written in, when the file calls it
    once: `my_kernel`'s `only_leader_copies(x_ref, o_ref)` for a `pl.when` body inside
    `only_leader_copies`. JAX roots the body's tracebacks at the body, so they do not
    show that call. None when no function around `scope` is called by name (the body is
    the kernel's own), or the first one that is is called from more than one place.
    The walk outwards stops at a kernel's body (one a `plgpu.kernel`, `pallas_call` or
    `core_map` receives or decorates: calling it launches the kernel)."""
    mod = _module(file)
    if mod is None:
        return None
    key = (scope, scope_first_line)
    if key not in mod.helper_cache:
        mod.helper_cache[key] = _helper_call(mod, file, key)
    return mod.helper_cache[key]


def _helper_call(mod: _Module, file: str, key: tuple[str, int]) -> SourceLocation | None:
    f = mod.funcs.get(key)
    g = None if f is None else f.parent
    while g is not None and not isinstance(g.node, ast.Lambda) and not _is_kernel_body(mod, g):
        if _returns(g, f):
            return None  # a factory, not a helper: its caller makes the function, not runs it
        sites = [(call, where) for call, where in mod.calls
                 if isinstance(call.func, ast.Name) and call.func.id == g.name
                 and where is not None and _sees(where, g) and not _inside(where, g)]
        if len(sites) > 1:
            return None
        if sites:
            call, where = sites[0]
            return dataclasses.replace(mod.location(call, where, file),
                                       function=_qualname(where))
        f, g = g, g.parent
    return None


def _returns(g: _Func, f: _Func) -> bool:
    """True if `g`'s own code returns its nested function `f` by name."""
    todo = list(g.node.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(node, ast.Return) and node.value is not None and f.name in _names(node.value):
            return True
        todo.extend(ast.iter_child_nodes(node))
    return False


def _inside(scope: _Func | None, f: _Func) -> bool:
    """True if `scope` is `f` or a function nested in it."""
    while scope is not None:
        if scope is f:
            return True
        scope = scope.parent
    return False


def _is_kernel_body(mod: _Module, f: _Func) -> bool:
    """Whether `f` is a kernel's body: a kernel call decorates or receives it."""
    return (any(map(_launches, getattr(f.node, "decorator_list", [])))
            or any(_launches(call) for call, _, _ in _uses(mod, f)))


def _launches(node: ast.AST) -> bool:
    """Whether `node` is a call of a kernel launcher (`plgpu.kernel(...)`, `pallas_call`,
    `core_map`, ...), directly or through `functools.partial(launcher, ...)`."""
    return isinstance(node, ast.Call) and (_callee(node.func) in _KERNEL_CALLS or (
        _callee(node.func) == "partial" and bool(node.args)
        and _callee(node.args[0]) in _KERNEL_CALLS))


def _params(fn: ast.AST) -> list[str]:
    a = fn.args
    return [p.arg for p in (*a.posonlyargs, *a.args)]


def _wrapped_calls(mod: _Module, line: int) -> tuple[str, ...]:
    out = []
    for call, scope in mod.calls:
        if call.lineno != line or scope is None or not isinstance(call.func, ast.Name):
            continue
        params = _params(scope.node)
        if (not params or call.keywords
                or [getattr(a, "id", None) for a in call.args] != params):
            continue
        outer = scope.parent
        while outer is not None:
            a = outer.node.args
            if call.func.id in {p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)}:
                out.append(call.func.id)
                break
            outer = outer.parent
    return tuple(out)


def scoped_operands(file: str, line: int) -> tuple[str, ...]:
    """The names the `pl.run_scoped` call starting on `line` gives its operands, in the
    order the interpreter allocates them (JAX's own names for them: the scoped function's
    parameters, `bars[0]` for an element of a tuple, keyword operands after the
    positional ones, sorted); () when `line` starts no such call or they cannot be told
    from the source (a `*args` operand, a function not found, two calls on the line).
    A caller checks the count against the requests the line made."""
    return _per_line(file, line, "operands_cache", _scoped_operands)


def _is_scoped_partial(call: ast.Call) -> bool:
    """`functools.partial(pl.run_scoped, ...)` (a scope opened by decorating its body)."""
    return _callee(call.func) == "partial" and bool(call.args) and _callee(
        call.args[0]) == "run_scoped"


def _scoped_operands(mod: _Module, line: int) -> tuple[str, ...]:
    hits = []
    for call, scope in mod.calls:
        if call.lineno != line:
            continue
        name = _callee(call.func)
        if name == "run_scoped" and call.args:  # pl.run_scoped(f, *types, **kw_types)
            hits.append((_function(mod, call.args[0], scope, line), call.args[1:], call))
        elif _is_scoped_partial(call) and len(call.args) == 1:
            # @functools.partial(pl.run_scoped, **kw_types)
            decorated = [f for f in mod.funcs.values()
                         if any(d is call for d in getattr(f.node, "decorator_list", ()))]
            hits.append((decorated[0].node if len(decorated) == 1 else None, [], call))
    if len(hits) != 1 or hits[0][0] is None:
        return ()
    fn, positional, call = hits[0]
    a = fn.args
    params = [p.arg for p in a.posonlyargs + a.args]
    operands: list[tuple[str, ast.AST]] = []
    for i, op in enumerate(positional):
        if isinstance(op, ast.Starred):
            return ()
        if i < len(params):
            operands.append((params[i], op))
        elif a.vararg is not None:
            operands.append((f"{a.vararg.arg}[{i - len(params)}]", op))
        else:
            return ()
    keywords = [k for k in call.keywords if k.arg != "collective_axes"]
    if any(k.arg is None for k in keywords):  # `**types`
        return ()
    operands += sorted(((k.arg, k.value) for k in keywords), key=lambda kv: kv[0])
    names: list[str] = []
    for name, op in operands:
        leaves = _leaves(name, op)
        if leaves is None:
            return ()
        names += leaves
    return tuple(names)


def _branch_starts(mod: _Module, file: str, call: ast.AST,
                   scope: _Func | None) -> tuple[SourceLocation, ...] | None:
    """For a `lax.cond` / `lax.switch` call: where each of its branch functions opens its
    first scope, in the branches' order (the first `pl.run_scoped` call in the function's
    own code, nested functions' bodies aside); None when it is no such call, or one of
    its functions or their scopes cannot be told from the source. What a thread that
    takes a branch asks for first, even when no thread took it before a failure."""
    name = _callee(call.func) if isinstance(call, ast.Call) else None
    if name == "cond":
        fns = call.args[1:3]
    elif name == "switch" and len(call.args) > 1 and isinstance(call.args[1],
                                                                 (ast.List, ast.Tuple)):
        fns = call.args[1].elts
    else:
        return None
    out = []
    for arg in fns:
        fn = _function(mod, arg, scope, call.lineno)
        first = None if fn is None else _first_scope(fn)
        if first is None:
            return None
        func = mod.by_node.get(id(fn))
        out.append(dataclasses.replace(
            mod.location(first, func, file), function=_qualname(func),
            operands=_scoped_operands(mod, first.lineno) or None))
    return tuple(out) or None


def _qualname(f: _Func | None) -> str | None:
    """Python's `__qualname__` of a function nested in functions (`k.<locals>.body`)."""
    names = []
    while f is not None:
        names.append(f.name)
        f = f.parent
    return ".<locals>.".join(reversed(names)) or None


def _first_scope(fn: ast.AST) -> ast.Call | None:
    """The first `pl.run_scoped` call (or `functools.partial(pl.run_scoped, ...)`
    decorator) in `fn`'s own code: in nested functions only their decorators count."""
    found: list[ast.Call] = []
    todo = list(fn.body) if isinstance(fn.body, list) else [fn.body]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Call) and (_callee(node.func) == "run_scoped"
                                           or _is_scoped_partial(node)):
            found.append(node)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            todo.extend(getattr(node, "decorator_list", ()))
            continue
        todo.extend(ast.iter_child_nodes(node))
    return min(found, key=lambda c: (c.lineno, c.col_offset), default=None)


def _function(mod: _Module, node: ast.AST, scope: _Func | None, line: int) -> ast.AST | None:
    """The function a `run_scoped` call is given: a lambda, or the nearest `def` of that
    name the call can see (the last one before the call in its innermost scope)."""
    if isinstance(node, ast.Lambda):
        return node
    if not isinstance(node, ast.Name):
        return None
    seen = [f for f in mod.funcs.values()
            if f.name == node.id and not isinstance(f.node, ast.Lambda) and _sees(scope, f)]
    if not seen:
        return None

    def depth(f: _Func) -> int:
        n, p = 0, f.parent
        while p is not None:
            n, p = n + 1, p.parent
        return n

    deepest = max(depth(f) for f in seen)
    inner = [f for f in seen if depth(f) == deepest]
    before = [f for f in inner if f.node.lineno < line]
    pick = max(before, key=lambda f: f.node.lineno) if before else (
        inner[0] if len(inner) == 1 else None)
    return None if pick is None else pick.node


def _leaves(name: str, node: ast.AST) -> list[str] | None:
    """JAX's names of the leaves of an operand written as `node`: `name` for one type,
    `name[0]`, `name[1]` for a tuple or list of them (nested too), `name['k']` for a dict,
    `name.at[0]`, `name.at[1]` for the slots of a barrier array (`num_barriers=2`); None
    for a dict whose keys are not all written as strings, or an array of unknown size."""
    if isinstance(node, (ast.Tuple, ast.List)):
        parts = [_leaves(f"{name}[{i}]", e) for i, e in enumerate(node.elts)]
    elif isinstance(node, ast.Dict):
        if not all(isinstance(k, ast.Constant) and isinstance(k.value, str) for k in node.keys):
            return None
        items = sorted(zip([k.value for k in node.keys], node.values), key=lambda kv: kv[0])
        parts = [_leaves(f"{name}[{k!r}]", v) for k, v in items]
    elif isinstance(node, ast.Call) and any(k.arg == "num_barriers" for k in node.keywords):
        # `plgpu.Barrier(num_barriers=2)`: an array the interpreter allocates slot by slot
        count = next(k.value for k in node.keywords if k.arg == "num_barriers")
        if not (isinstance(count, ast.Constant) and isinstance(count.value, int)
                and not isinstance(count.value, bool) and 0 < count.value <= 1024):
            return None
        return [name] if count.value == 1 else [f"{name}.at[{i}]" for i in range(count.value)]
    else:
        return [name]
    if any(p is None for p in parts):
        return None
    return [n for p in parts for n in p]


_BARRIER_CALLS = {"barrier_wait": "wait", "barrier_arrive": "arrive"}


def barrier_calls_around(file: str, line: int) -> tuple[tuple[str, str, int], ...]:
    """The barrier waits and arrivals written in the function that holds `line` (its own
    code and the functions it runs in place, decorated ones like a `pl.when` body), in
    line order: ("wait" | "arrive", the barrier as written, its line). Where a thread's
    access stands among its waits and arrivals, read from the source: () when the file
    cannot be read or no function holds the line."""
    return _per_line(file, line, "barrier_cache", _barrier_calls_around)


def _barrier_calls_around(mod: _Module, line: int) -> tuple[tuple[str, str, int], ...]:
    holders = [f for f in mod.funcs.values() if not isinstance(f.node, ast.Lambda)
               and f.node.lineno <= line <= (f.node.end_lineno or f.node.lineno)]
    if not holders:
        return ()
    fn = max(holders, key=lambda f: f.node.lineno).node
    out = []

    def walk(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Lambda) or (
                    isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
                    and not child.decorator_list):
                continue  # (called later, or elsewhere: not in place)
            if isinstance(child, ast.Call) and _callee(child.func) in _BARRIER_CALLS:
                arg = child.args[0] if child.args else next(
                    (k.value for k in child.keywords if k.arg == "barrier"), None)
                if arg is not None:
                    out.append((_BARRIER_CALLS[_callee(child.func)], ast.unparse(arg)[:200],
                                child.lineno))
            walk(child)

    for stmt in fn.body:
        walk(stmt)
    return tuple(sorted(out, key=lambda c: c[2]))
