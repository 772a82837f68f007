"""Where each branch of a `lax.cond` / `lax.switch` opens its first scope, read from the
source with the branch (`SourceLocation.starts`): what a thread that takes a branch asks
for first, even when no thread took it before a failure. Parsed here, never run."""

from __future__ import annotations

import functools

import jax
from jax.experimental import pallas as pl

from pallas_viz import kernel_source

T = None  # (the bodies below are only parsed)


def _line(marker: str) -> int:
    with open(__file__) as f:
        return next(i for i, t in enumerate(f, 1) if t.rstrip().endswith(f"# {marker}"))


def switch_body(i):
    def f0():
        def inner(a):
            pl.run_scoped(lambda b: None, T)  # not f0's own code
        pl.run_scoped(inner, T)  # F0

    def f1():
        x = i + 1
        if x:
            @functools.partial(pl.run_scoped, a=T)  # F1
            def scoped(a):
                pass
        pl.run_scoped(lambda c: None, T)

    jax.lax.switch(i, [f0, f1])


def cond_of_lambdas(p):
    jax.lax.cond(p, lambda: pl.run_scoped(lambda a: None, T),  # L0
                 lambda: pl.run_scoped(lambda b: None, T))


def one_branch_opens_none(p):
    def yes():
        pl.run_scoped(lambda a: None, T)

    def no():
        pass

    jax.lax.cond(p, yes, no)


def _branch_of(name: str):
    first = next(i for i, t in enumerate(open(__file__), 1) if t.strip().startswith(f"def {name}("))
    return kernel_source.enclosing_branch(__file__, name, first)


def test_each_branch_of_a_switch_starts_at_its_own_first_scope():
    b = _branch_of("f0")
    assert b is not None and b.kind == "branch"
    assert [(s.line, s.function) for s in b.starts] == [
        (_line("F0"), "switch_body.<locals>.f0"), (_line("F1"), "switch_body.<locals>.f1")]
    assert b.starts[0].operands == ("a",)


def test_lambda_branches():
    first = _line("L0")
    b = kernel_source.enclosing_branch(__file__, "<lambda>", first)
    assert b is not None and [s.line for s in b.starts] == [first, first + 1]


def test_a_branch_that_opens_no_scope_gives_no_starts():
    b = _branch_of("yes")
    assert b is not None and b.kind == "branch" and b.starts is None
