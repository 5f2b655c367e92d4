"""The rules by code, and selections of them.

A rule is found by its code in ``RULE_MODULES``, read from the names of the ``rules`` package's
modules (``gf001_duplicate_backward``: ``rule.rule_id``) without importing them. A selection is
checked and stands in the cache's keys by its codes alone, and its rules are imported when a file
is first checked with them: a run that the cache answers imports neither the rules nor LibCST.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Iterable, Sequence, overload

from .rule import RULES_PACKAGE, Rule, rule_id

# Each rule's name by its code, in code order (the package's folder is listed, not imported: it
# is of the LibCST layer).
RULE_MODULES = dict(sorted(rule_id(module.name) for module in pkgutil.iter_modules([str(Path(__file__).with_name("rules"))])))


class UnknownRuleError(ValueError):
    pass


class RuleSelection(Sequence[type[Rule]]):
    """Rules chosen by code, in code order; their modules are imported on first use."""

    def __init__(self, codes: Iterable[str]) -> None:
        self.codes = tuple(sorted(set(codes)))

    @cached_property
    def _rules(self) -> tuple[type[Rule], ...]:
        return tuple(_rule_class(code) for code in self.codes)

    @overload
    def __getitem__(self, index: int) -> type[Rule]: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[type[Rule], ...]: ...

    def __getitem__(self, index: int | slice) -> type[Rule] | tuple[type[Rule], ...]:
        return self._rules[index]

    def __len__(self) -> int:
        return len(self.codes)

    def __repr__(self) -> str:
        return f"RuleSelection({', '.join(self.codes)})"


def rule_codes(rules: Sequence[type[Rule]]) -> tuple[str, ...]:
    """The codes of ``rules``, sorted, without importing a selection's rules."""
    return rules.codes if isinstance(rules, RuleSelection) else tuple(sorted(rule.CODE for rule in rules))


@lru_cache(maxsize=None)
def _rule_class(code: str) -> type[Rule]:
    module = importlib.import_module(f"{RULES_PACKAGE}.{code.lower()}_{RULE_MODULES[code]}")
    (rule,) = (
        cls
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if issubclass(cls, Rule) and cls is not Rule and cls.__module__ == module.__name__
    )
    return rule


def all_rules() -> RuleSelection:
    return RuleSelection(RULE_MODULES)


def rule_by_code(code: str) -> type[Rule]:
    """The rule with this code (any case) or name."""
    for known, name in RULE_MODULES.items():
        if code.upper() == known or code == name:
            return _rule_class(known)
    raise UnknownRuleError(code)


def rule_anchor(code: str) -> str:
    """The anchor GitHub gives a rule's heading in docs/rules.md (``GF001`` → ``gf001-duplicate_backward``)."""
    return f"{code.lower()}-{RULE_MODULES[code]}"


def codes_matching(patterns: Iterable[str]) -> set[str]:
    """The codes that rule codes, code prefixes (``GF00`` is GF001…GF009) or rule names
    (``duplicate_backward``) choose, in any case; ``UnknownRuleError`` for one that chooses none."""
    chosen: set[str] = set()
    for raw in patterns:
        pattern = raw.strip()
        found = {code for code, name in RULE_MODULES.items() if code.startswith(pattern.upper()) or name == pattern.lower()}
        if not pattern or not found:
            raise UnknownRuleError(pattern)
        chosen |= found
    return chosen


def select_rules(select: Iterable[str] | None = None, ignore: Iterable[str] | None = None) -> RuleSelection:
    """The rules ``select`` chooses (every rule when it is empty), less those ``ignore`` chooses
    (``codes_matching``). A string is one pattern, or several separated by commas."""
    select, ignore = patterns(select), patterns(ignore)
    chosen = codes_matching(select) if select else set(RULE_MODULES)
    return RuleSelection(chosen - codes_matching(ignore))


def patterns(given: Iterable[str] | None) -> list[str]:
    """Rule patterns given as a list, or as one string separated by commas."""
    if isinstance(given, str):
        return [pattern for pattern in given.split(",") if pattern.strip()]
    return list(given or ())
