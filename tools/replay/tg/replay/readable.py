"""Diffs of kernel sources that show what changed, not how the values were renumbered.

A renderer names values in order (`v0, v1, ...`, `r0` for loops, `acc0`...): one line added near the top of a
kernel renumbers every later value, and a plain line diff then shows nearly the whole kernel. Here each defined
name is replaced, for comparing, by a name made from what defines it (its line, with the names it uses replaced
the same way): value numbering. Two lines that compute the same thing from the same inputs compare equal whatever
their numbers, and a changed line still differs (and so do the lines that use its value, since their values
changed too). The diff is computed on those canonical lines and printed with the original text.
"""

from __future__ import annotations

import difflib
import hashlib
import re

NAME = re.compile(r"\b([A-Za-z_]+\d+)\b")  # a numbered name: v12, r0, acc1, alu3
DEFINITION = re.compile(r"(?:^|[\s(%])([A-Za-z_]+\d+)\s*=[^=]")  # the first `name = ...` on a line


def canonical_lines(lines: list[str]) -> list[str]:
    """Each line with every numbered name it defines or uses replaced by a name derived from its definition."""
    names: dict[str, str] = {}
    canonical = []
    for line in lines:
        defined = DEFINITION.search(line)
        if defined is not None:
            own = defined.group(1)

            def renamed(match: re.Match[str], own: str = own) -> str:
                return "@" if match.group(1) == own else names.get(match.group(1), match.group(1))

            body = NAME.sub(renamed, line)
            names[own] = own.rstrip("0123456789") + "#" + hashlib.sha1(body.encode()).hexdigest()[:10]
        canonical.append(NAME.sub(lambda m: names.get(m.group(1), m.group(1)), line))
    return canonical


def readable_diff(theirs: str, ours: str, their_label: str, our_label: str, context: int = 3) -> list[str]:
    """A unified diff of two sources, hunks chosen on canonical lines (renumbering is not a change), lines
    printed as written. Empty when the sources differ only in value numbering."""
    a, b = theirs.splitlines(), ours.splitlines()
    matcher = difflib.SequenceMatcher(None, canonical_lines(a), canonical_lines(b), autojunk=False)
    groups = list(matcher.get_grouped_opcodes(context))
    if not groups:
        return []
    out = [f"--- {their_label}", f"+++ {our_label}"]
    for group in groups:
        first, last = group[0], group[-1]
        out.append(f"@@ -{first[1] + 1},{last[2] - first[1]} +{first[3] + 1},{last[4] - first[3]} @@")
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                out += [" " + line for line in b[j1:j2]]
                continue
            out += ["-" + line for line in a[i1:i2]]
            out += ["+" + line for line in b[j1:j2]]
    return out
