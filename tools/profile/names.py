"""Range-set patterns: names joined by `|`, each a name or a shell-style wildcard (`*`, `?`, `[..]`).

'dispatch|combine' names two ranges, 'kv_*' every range starting with kv_. These were regular
expressions once: a pattern such as '(a+)+' against a range named 'aaa...a!' backtracked for
seconds per name, doubling per character, with the server's event loop blocked. Wildcards match in
time linear in the name (fnmatch's translation has no nested quantifiers), and any pattern that
needs regular-expression syntax is refused with its wildcard form.
"""

from __future__ import annotations

import fnmatch
import re
from functools import lru_cache

from ..base import AgentError

REGEX_ONLY = re.compile(r"[()+{}^$\\]|\.\*|\.\+")  # syntax a wildcard has no meaning for


def check(pattern: str, field: str) -> str:
    """The pattern, or an AgentError saying how to write it as names and wildcards."""
    if not pattern or any(not alt for alt in pattern.split("|")):
        raise AgentError(
            f"{field}: {pattern!r} has an empty name; give names joined by |, e.g. "
            "'dispatch|combine'"
        )
    if REGEX_ONLY.search(pattern):
        hint = pattern.replace(".*", "*").replace(".+", "?*")
        raise AgentError(
            f"{field}: {pattern!r} uses regular-expression syntax; range sets are names joined "
            f"by | with shell wildcards (* any run of characters, ? one), e.g. 'dispatch|combine' "
            f"or {hint!r}"
        )
    return pattern


@lru_cache(maxsize=256)
def _alternatives(pattern: str) -> tuple[re.Pattern, ...]:
    return tuple(re.compile(fnmatch.translate(alt)) for alt in pattern.split("|"))


def matches(pattern: str, name: str) -> bool:
    """Whether a range name is in the set: equal to one alternative, or matched by its wildcards."""
    return any(rx.match(name) for rx in _alternatives(pattern))
