"""Tag rules in assembly: priorities and time-to-live.

Contract: ``TagRules(rules, units)`` with ``rules`` as ``(pattern, priority,
ttl_turns)`` (``fnmatch`` patterns over tag names, the account's memory
settings) and the conversation's memory units.

- ``priority(tags)``: the highest priority among the rules matching any of
  ``tags``; 0 when none does. Assembly puts higher priorities first: in the
  stable block (topics and tag summaries, before the share cuts them) and in
  the recall (before the greedy fill by score).
- ``aged(tags, now)``: True when one of ``tags`` matches a rule with
  ``ttl_turns`` > 0 and the last turn carrying that tag is more than
  ``ttl_turns`` turns before position ``now``. A tag no turn carries is not
  aged. Aged units are left out of the recall and the stable block.

With no rules every priority is 0 and nothing ages: assembly is unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from fnmatch import fnmatchcase

from memory_app.engine.types import MemoryUnit


class TagRules:
    """The account's tag rules, evaluated against one conversation's memory."""

    def __init__(self, rules: Sequence[tuple[str, int, int]], units: Iterable[MemoryUnit]):
        self.rules = [(pattern.lower(), priority, ttl) for pattern, priority, ttl in rules]
        self.last_use: dict[str, int] = {}
        if any(ttl > 0 for _, _, ttl in self.rules):
            for unit in units:
                if unit.kind == "turn":
                    for tag in unit.tags:
                        if unit.start_position > self.last_use.get(tag, -1):
                            self.last_use[tag] = unit.start_position

    def __bool__(self) -> bool:
        return bool(self.rules)

    def _matching(self, tag: str) -> list[tuple[str, int, int]]:
        return [rule for rule in self.rules if fnmatchcase(tag.lower(), rule[0])]

    def priority(self, tags: Iterable[str]) -> int:
        found = [rule[1] for tag in tags for rule in self._matching(tag)]
        return max(found, default=0)

    def aged(self, tags: Iterable[str], now: int) -> bool:
        for tag in tags:
            last = self.last_use.get(tag)
            if last is None:
                continue
            for _, _, ttl in self._matching(tag):
                if ttl > 0 and now - last > ttl:
                    return True
        return False
