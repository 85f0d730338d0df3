"""The docs promise commands; these tests hold them to it."""

from __future__ import annotations

import re

from tests.conftest import GUIDE, ROOT


def _readme_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    return re.findall(r"^```(?:sh|bash|console)\n(.*?)^```", readme, re.S | re.M)


def test_ci_runs_the_readmes_test_command() -> None:
    # The one block that ends with pytest: the README's "The tests".
    (test_command,) = [b.strip() for b in _readme_commands() if b.strip().endswith("pytest")]
    ci = (ROOT / ".ci" / "run").read_text()
    assert test_command in ci


def test_readme_starts_with_the_local_job() -> None:
    first = _readme_commands()[0]
    assert "tfrun -w 2 -s 1" in first
    assert "examples/mnist/mnist_replica.py" in first


def test_every_tfrun_flag_is_in_the_guide() -> None:
    from tfmesos.cli.parser import build_parser

    readme = "".join((ROOT / page).read_text() for page in GUIDE)
    for option in build_parser().flags:
        if option not in ("-h", "--help"):
            assert f"`{option}" in readme, option


# -- The messages docs/failures.md quotes are the ones tfrun prints ----------------

_QUOTED = re.compile(r"`([^`\n]+)`")
_ELIDED = re.compile(r"\.\.\.|…")
_PLACEHOLDER = re.compile(
    r"(\.\.\.|…"  # text left out
    r"|(?<!\w)b?'[^']*'(?!\w)|\"[^\"]*\""  # a quoted value
    r"|\b\w+\.py\b"  # a script
    r"|\S+://\S*|(?<![\w)])/[\w./%-]*|\$\w+"  # a URL, a path, a variable
    r"|\S*\d\S*)"  # a number, an address, a task (worker:1), a size (4 MiB's 4)
)
"""What a quoted message stands for rather than says: the words between
these are compared."""
_SOFT = re.compile(
    r"[A-Z][A-Z0-9_]*(?:'s)?|\{+\w*\}+|--?[\w-]+"
    r"|host|agent|tfrun|mesos|slurm|local|Mesos|Slurm|clients|train|Resources"
)
"""A word that may be a placeholder (DIR, HOST, N, FILE, {name}; a flag's
name; the docs' host and agent, a backend's or the program's name) or the
message's own (NUL, JAX, TF_CONFIG): compared where it is found, passed over
where it is not."""
_WORD = re.compile(r"\{+\w*\}+|-*[A-Za-z][\w'-]*")
"""A word (a flag such as ``--export`` is one); punctuation is not compared."""
_MIN_PIECE = 12
"""Characters of the shortest run of a message's words that counts as found
in tfmesos's source, unless it is a whole fixed part of a string there: a
shorter one ("the", "is not") is everywhere."""
_FOREIGN = (
    # What tfrun quotes from others, not its own words (and the C library's
    # errors: os.strerror, added below).
    "argument",  # argparse's
    "invalid",
    "[Errno",  # Python's OSError
    "Port out of range",  # urllib's
    "Cannot connect",  # aiohttp's
    "Memory specification can not be satisfied",  # Slurm's
    "is not allowed to run frameworks without --root_submissions set",  # Mesos's
    "Failed to create executor directory",  # Mesos's agent's (the double's words once)
    "Failed to chown directory to",
    "No such user",
    "Container root filesystems not supported",
    "Memory limit exceeded: Requested:",
    "unable to get local issuer certificate",  # OpenSSL's
    "IP address mismatch, certificate is not valid for",
    "sslv3 alert handshake failure",
)


_FIELD = re.compile(r"%[-+ #0-9.]*[sdifgrx]")
"""A %-format's field (a logger's message): like an f-string's, a hole."""


def _words(text: str) -> str:
    """The words of ``text``; a possessive after a field (``{path}'s``) is
    the field's."""
    return " ".join(_WORD.findall(re.sub(r"^'s\b", "", text)))


class _Literals:
    """Every string literal of the package, and each fixed part of every
    f-string, as its words; and where in them a run of words may stand."""

    def __init__(self, texts: set[str]) -> None:
        self.whole = {text for text in texts if text}
        self.starts: set[str] = set()
        self.ends: set[str] = set()
        for text in self.whole:
            words = text.split(" ")
            for k in range(1, len(words)):
                self.starts.add(" ".join(words[:k]))
                self.ends.add(" ".join(words[k:]))
        self.within = "\n".join(f" {text} " for text in self.whole)

    def holds(self, piece: str, at_start: bool, at_end: bool) -> bool:
        """Whether one literal holds ``piece`` (at its start, its end, or
        both, where the message's words go on from a field of the format)."""
        if len(piece) < _MIN_PIECE:
            return piece in self.whole
        if piece in self.whole:
            return True
            return False
        if at_start and at_end:
            return False
        if at_start:
            return piece in self.starts
        if at_end:
            return piece in self.ends
        return f" {piece} " in self.within


def _source_literals() -> set[str]:
    import ast

    texts: set[str] = set()
    scripts = [path for path in (ROOT / "scripts").iterdir() if path.is_file()]
    for path in sorted((ROOT / "tfmesos").rglob("*.py")) + sorted(scripts):
        try:
            tree = ast.parse(path.read_text())
        except (SyntaxError, UnicodeDecodeError):
            continue  # a shell script
        # Docstrings and comments say no message: their prose would let
        # any rewording pass.
        prose = {
            id(node.value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in prose
            ):
                # Cut where the docs' quotes are: at fields, and at what the
                # docs write as placeholders (numbers, quoted values).
                for part in _FIELD.split(node.value):
                    texts.update(_words(piece) for piece in _PLACEHOLDER.split(part))
    return texts


def _unfound(message: str, literals: _Literals) -> list[str]:
    """The words of ``message``, between its placeholders, that the package's
    strings do not hold as they stand (:func:`_unfound_in`)."""
    unfound: list[str] = []
    parts = _PLACEHOLDER.split(message)  # text, placeholder, text, ...
    for k in range(0, len(parts), 2):
        # Beside a "...", the text may begin or end anywhere in a literal.
        cut_before = k > 0 and bool(_ELIDED.fullmatch(parts[k - 1]))
        cut_after = k + 1 < len(parts) and bool(_ELIDED.fullmatch(parts[k + 1]))
        unfound += _unfound_in(tuple(_WORD.findall(parts[k])), cut_before, cut_after, literals)
    return unfound


def _unfound_in(
    words: tuple[str, ...], cut_before: bool, cut_after: bool, literals: _Literals
) -> tuple[str, ...]:
    """Of ``words`` (between two placeholders), those the package's strings
    do not hold as they stand: each run of them comes from one literal, and
    two runs meet only where a literal ends and the next begins (a field of
    an f-string or a %-format between them), so that a word reworded, added
    or left out inside a literal is found. A run shorter than ``_MIN_PIECE``
    characters counts only as a whole literal, and only beside a field. Of
    the ways to cut the words into runs, the one that leaves the fewest."""
    import functools

    n = len(words)

    def run_of_one_literal(i: int, j: int, after_field: bool) -> bool | None:
        """Whether words[i:j] is a run of one literal (True where a field
        follows it: a plural made by one), None where it is not."""
        piece = " ".join(words[i:j])
        # A short literal (" is ", "dropped") between two runs of the
        # message's words would let any rewording through.
        beside_field = after_field or j == n or bool(_SOFT.fullmatch(words[j]))
        if (len(piece) >= _MIN_PIECE or beside_field) and literals.holds(piece, i > 0, j < n):
            return False
        if ((i == 0 and cut_before) or (j == n and cut_after)) and (
            f" {piece} " in literals.within
        ):
            return False
        # A plural made by a field: f"{n} restart{'s' if n > 1 else ''}".
        stem = re.sub(r"(?<=[a-z])e?s$", "", piece)
        if stem != piece and literals.holds(stem, i > 0, True):
            return True
        return None

    @functools.cache
    def best(i: int, after_field: bool) -> tuple[str, ...]:
        if i == n:
            return ()
        skipped = () if _SOFT.fullmatch(words[i]) else (words[i],)
        choice = skipped + best(i + 1, True)
        for j in range(n, i, -1):
            if not choice:
                break
            field = run_of_one_literal(i, j, after_field)
            if field is not None and len(rest := best(j, field)) < len(choice):
                choice = rest
        return choice

    return best(0, True)


def _all_literals() -> _Literals:
    import os
    from http import HTTPStatus

    texts = _source_literals() | {_words(text) for text in _FOREIGN}
    texts |= {_words(status.phrase) for status in HTTPStatus}  # a server's answer, quoted
    return _Literals(texts | {_words(os.strerror(n)) for n in range(1, 134)})


def test_every_tfrun_message_quoted_in_failures_md_is_one_tfrun_prints() -> None:
    """Each message docs/failures.md quotes in its "what you see" column (of
    five words or more), less its placeholders (DIR, N, numbers, addresses,
    paths, quoted values, ``...``), must be made of runs of words of the
    package's string literals (:func:`_unfound_in`), so that a message
    reworded in the code and not in the docs fails here (issue 40, item 16).
    Words tfrun quotes from others (the C library's errors, argparse's,
    OpenSSL's, Slurm's, Mesos's) are allowed by name."""
    literals = _all_literals()
    quoted = []
    for row in (ROOT / "docs" / "failures.md").read_text().splitlines():
        cells = row.split(" | ")
        if row.startswith("| ") and len(cells) >= 4:
            # What you see: the messages quoted there of five words or more.
            quoted += [q for q in _QUOTED.findall(cells[1]) if len(_WORD.findall(q)) >= 5]
    assert len(quoted) >= 100, quoted
    stale = {}
    for message in quoted:
        body = message.removeprefix("tfrun: error: ").removeprefix("[tfrun] ")
        unfound = _unfound(body, literals)
        if unfound:
            stale[message] = unfound
    assert stale == {}, "\n".join(f"{m}\n    not in tfmesos: {u}" for m, u in stale.items())


def test_the_check_of_quoted_messages_catches_a_rewording() -> None:
    literals = _all_literals()
    said = {
        # as the code says it: as the docs might say it after a rewording
        "the cluster did not come up within 20s: still waiting for worker:1, worker:2":
            "the cluster did not come up: the cluster was not up after 20s: still waiting "
            "for worker:1, worker:2",
        "--events: FILE's reader took nothing for 5 s: N events not written":
            "--events: FILE's reader read nothing for 5 s: N events not written",
        "--events: cannot write FILE (Broken pipe): the event stream is given up, the job goes on":
            "--events: cannot write FILE (Broken pipe): the event stream is dropped, the job "
            "goes on",
        "environment variable 'X': its value holds a NUL byte (\\0), which no environment "
        "can hold":
            "environment variable 'X': its value has a NUL byte (\\0), which no environment "
            "can hold",
        "task worker:1 on host exited with status 3: stopping every task":
            "task worker:1 on host exited with status 3: stopping all tasks",
    }  # fmt: skip
    for true, reworded in said.items():
        assert _unfound(true, literals) == [], true
        assert _unfound(reworded, literals) != [], reworded


def test_every_test_the_docs_name_exists() -> None:
    """``tests/test_x.py::test_name``, and ``::test_other`` after it in the
    same line, name a test function of that file: a test renamed or moved
    leaves no dangling name behind in the docs."""
    import ast

    defined = {
        path.name: {
            node.name
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        }
        for path in (ROOT / "tests").glob("test_*.py")
    }
    dangling = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for number, line in enumerate(doc.read_text().splitlines(), 1):
            file = None
            for match in re.finditer(r"`(?:tests/(test_\w+\.py))?::(\w+)`", line):
                file = match.group(1) or file
                if file is not None and match.group(2) not in defined.get(file, ()):
                    dangling.append(f"{doc.name}:{number}: tests/{file}::{match.group(2)}")
    assert dangling == [], "\n".join(dangling)


def test_every_link_between_the_docs_leads_somewhere() -> None:
    """A relative link names a file that exists and, after ``#``, one of its
    headings (GitHub's anchors: lower case, punctuation dropped, spaces as
    ``-``): moving a section between pages leaves no link behind."""

    def anchor(heading: str) -> str:
        return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")

    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    anchors = {
        page.resolve(): {anchor(h) for h in re.findall(r"^#+ (.*)$", page.read_text(), re.M)}
        for page in pages
    }
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]*)\)", page.read_text()):
            if not target:  # a link to nowhere: [text]()
                broken.append(f"{page.relative_to(ROOT)}: an empty link ()")
                continue
            if re.match(r"[a-z]+:", target):
                continue
            path, _, name = target.partition("#")
            destination = (page.parent / path).resolve() if path else page.resolve()
            if not destination.exists() or (name and name not in anchors.get(destination, {name})):
                broken.append(f"{page.relative_to(ROOT)}: ({target})")
    assert broken == [], "\n".join(broken)
