"""Copy the latest result tables into docs/benchmarks.md: ``python bench/update_docs.py [NAME ...]``.

Each table sits between ``<!-- bench:NAME -->`` and ``<!-- /bench:NAME -->``
in the page and is replaced by ``bench/results/NAME.md``; the prose around the
tables is left alone and must be re-read against the new figures by hand.
With names, only those tables are replaced (a benchmark run on its own).
"""

from __future__ import annotations

import argparse
import re
import sys

from benchlib import RESULTS, ROOT

DOC = ROOT / "docs" / "benchmarks.md"
BLOCK = re.compile(r"(<!-- bench:([\w]+) -->\n)(.*?)(<!-- /bench:\2 -->)", re.S)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", metavar="NAME", help="only these tables")
    only = set(parser.parse_args().names)
    text = DOC.read_text()
    missing: list[str] = []

    def replace(match: re.Match[str]) -> str:
        name = match.group(2)
        if only and name not in only:
            return match.group(0)
        table = RESULTS / f"{name}.md"
        if not table.exists():
            missing.append(name)
            return match.group(0)
        body = table.read_text().strip().split("\n", 1)[1].strip()  # without its heading
        return f"{match.group(1)}{body}\n{match.group(4)}"

    DOC.write_text(BLOCK.sub(replace, text))
    if missing:
        print(f"no results for: {', '.join(missing)}", file=sys.stderr)
        return 1
    print(f"updated {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
