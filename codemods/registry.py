"""Finds the rules: every ``Rule`` subclass defined in a module of the ``rules`` package."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from functools import lru_cache

from .rule import Rule


class UnknownRuleError(ValueError):
    pass


@lru_cache(maxsize=None)
def all_rules() -> tuple[type[Rule], ...]:
    package = importlib.import_module(f"{__package__}.rules")
    found = []
    for info in pkgutil.iter_modules(package.__path__):
        if info.ispkg:
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        found += [
            cls
            for _, cls in inspect.getmembers(module, inspect.isclass)
            if issubclass(cls, Rule) and cls is not Rule and cls.__module__ == module.__name__
        ]
    return tuple(sorted(found, key=lambda cls: cls.CODE))


def rule_by_code(code: str) -> type[Rule]:
    for rule in all_rules():
        if rule.CODE == code.upper() or rule.NAME == code:
            return rule
    raise UnknownRuleError(code)


def select_rules(select: list[str] | None = None, ignore: list[str] | None = None) -> tuple[type[Rule], ...]:
    """The rules chosen by codes or code prefixes (``GF00`` selects GF001…GF009)."""
    rules = all_rules()
    codes = {rule.CODE for rule in rules}

    def matching(pattern: str) -> set[str]:
        pattern = pattern.strip().upper()
        chosen = {code for code in codes if code.startswith(pattern)}
        if not pattern or not chosen:
            raise UnknownRuleError(pattern)
        return chosen

    chosen = set(codes) if not select else set().union(*(matching(p) for p in select))
    for pattern in ignore or ():
        chosen -= matching(pattern)
    return tuple(rule for rule in rules if rule.CODE in chosen)
