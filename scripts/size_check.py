#!/usr/bin/env python3
"""Fails when a source file or a function outgrows the size guide (docs/architecture.md).

- No file in src/ is over 500 lines.
- No function in src/, tests/ or benches/ is over 80 lines (from its `fn` line to its closing
  brace), unless a comment in the lines just above it says why, starting with `Long:`
  (`/// Long: one table of every route, read top to bottom.`).
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_FILE = 500
MAX_FN = 80
FN = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?fn\s+(\w+)")
sys.path.insert(0, str(Path(__file__).resolve().parent))
# Strings, chars and comments, so that braces inside them are not counted.
from module_cycles import LITERAL  # noqa: E402

def functions(text: str):
    """Yields (name, first line, line count) of every fn with a body."""
    code = LITERAL.sub(lambda m: " " + "\n" * m.group(0).count("\n"), text)
    lines = code.split("\n")
    for i, line in enumerate(lines):
        m = FN.match(line)
        if not m:
            continue
        depth, started = 0, False
        for j in range(i, len(lines)):
            for ch in lines[j]:
                if ch == "{":
                    depth += 1
                    started = True
                elif ch == "}":
                    depth -= 1
                elif ch == ";" and not started and depth == 0:
                    break  # a declaration without a body
            else:
                if started and depth == 0:
                    yield m.group(1), i, j - i + 1
                    break
                continue
            break


def explained(raw_lines, i):
    """True when the comment block just above line i has a `Long:` line."""
    j = i - 1
    while j >= 0 and re.match(r"^\s*(///|//|#\[)", raw_lines[j]):
        if re.match(r"^\s*//[/!]?\s*Long:", raw_lines[j]):
            return True
        j -= 1
    return False


def main():
    problems = []
    for path in sorted((ROOT / "src").rglob("*.rs")):
        n = path.read_text().count("\n")
        if n > MAX_FILE:
            problems.append(f"{path.relative_to(ROOT)}: {n} lines (at most {MAX_FILE})")
    for folder in ("src", "tests", "benches"):
        for path in sorted((ROOT / folder).rglob("*.rs")):
            text = path.read_text()
            raw = text.split("\n")
            for name, i, count in functions(text):
                if count > MAX_FN and not explained(raw, i):
                    problems.append(
                        f"{path.relative_to(ROOT)}:{i + 1}: fn {name} has {count} lines "
                        f"(at most {MAX_FN}, or a `Long:` comment above it saying why)"
                    )
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} over the size guide (docs/architecture.md)")
        return 1
    print("every file and function within the size guide")
    return 0


if __name__ == "__main__":
    sys.exit(main())
