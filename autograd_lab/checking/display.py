"""What ``check``, ``hint`` and ``solution`` return: small objects that display themselves.

Every repr is built only from the exercise and the comparison, never from time,
randomness or object addresses, so nbval can compare notebook outputs run to
run.  Feedback text is Markdown (contracts §5): the HTML reprs render it with
mistune (which nbconvert, a dependency, brings), escaping any raw HTML, so
`code` and *emphasis* show as such in the notebook; the plain repr keeps the text.
"""

import html
from dataclasses import asdict, dataclass, field

STATUSES = ("passed", "failed", "not attempted", "error", "timed out", "graded later")
_COLORS = {"passed": "#1a7f37", "failed": "#cf222e", "not attempted": "#6e7781",
           "error": "#bc4c00", "timed out": "#bc4c00", "graded later": "#0969da"}


def format_points(value):
    """``1`` rather than ``1.0``; at most two decimals."""
    value = round(float(value), 2)
    return str(int(value)) if value == int(value) else f"{value:g}"


def inline_code_html(text):
    """``text`` escaped for HTML, with each pair of backticks made a ``<code>`` element.

    An unpaired backtick stays a literal backtick.
    """
    pieces = text.split("`")
    if len(pieces) % 2 == 0:  # an odd number of backticks: the last one has no partner
        pieces[-2:] = [pieces[-2] + "`" + pieces[-1]]
    return "".join(f"<code>{html.escape(piece)}</code>" if index % 2 else html.escape(piece)
                   for index, piece in enumerate(pieces))


def markdown_html(text):
    """One line of feedback Markdown as HTML, raw HTML escaped; backticks only if mistune is missing."""
    if _MARKDOWN is None:
        return inline_code_html(text)
    rendered = _MARKDOWN(text).strip()
    if rendered.startswith("<p>") and rendered.endswith("</p>") and rendered.count("<p>") == 1:
        rendered = rendered[3:-4]          # one paragraph: inline in its list item
    return rendered


def _markdown():
    try:
        import mistune
    except ImportError:
        return None
    return mistune.create_markdown(escape=True)


_MARKDOWN = _markdown()


def _box(status, title, lines, monospace_body=False):
    color = _COLORS.get(status, "#6e7781")
    body = (f"<pre style=\"margin:4px 0 0 0\">{html.escape(chr(10).join(lines))}</pre>" if monospace_body
            else "".join(f"<li>{markdown_html(line)}</li>" for line in lines))
    wrapper = body if monospace_body or not lines else f"<ul style=\"margin:4px 0 0 0\">{body}</ul>"
    return (f"<div class=\"autograd-lab-box\" style=\"border-left:4px solid {color};"
            f"padding:4px 10px;margin:4px 0\"><strong>{html.escape(title)}</strong>{wrapper}</div>")


@dataclass(frozen=True)
class Result:
    """The outcome of checking one exercise; see ``docs/authoring-exercises.md``."""

    exercise_id: str
    title: str
    status: str
    score: float
    max_score: float
    misconception: object = None
    messages: list = field(default_factory=list)
    public_passed: int = 0
    public_total: int = 0
    hidden_passed: int = 0
    hidden_total: int = 0

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")

    @property
    def passed(self):
        return self.status == "passed"

    def to_dict(self):
        """A JSON-able dict with the same content on every run."""
        data = asdict(self)
        data["messages"] = list(self.messages)
        return data

    def headline(self):
        unit = "point" if self.max_score == 1 else "points"
        return (f"{self.exercise_id} · {self.title}: {self.status} "
                f"({format_points(self.score)}/{format_points(self.max_score)} {unit})")

    def __repr__(self):
        return "\n".join([self.headline()] + [f"  {line}" for line in self.messages])

    __str__ = __repr__

    def _repr_pretty_(self, printer, cycle):
        printer.text(repr(self))

    def _repr_html_(self):
        return _box(self.status, self.headline(), self.messages)


@dataclass(frozen=True)
class Hint:
    """One rung of an exercise's hint ladder."""

    exercise_id: str
    number: int
    total: int
    text: str
    reason: str = ""     # why no hint is given (graded mode)

    def __repr__(self):
        if self.reason:
            return f"{self.exercise_id}: no hint: {self.reason}"
        if self.total == 0:
            return f"{self.exercise_id}: this exercise has no hints."
        last = " (the last one)" if self.number == self.total else ""
        return f"Hint {self.number} of {self.total}{last} for {self.exercise_id}: {self.text}"

    __str__ = __repr__

    def _repr_pretty_(self, printer, cycle):
        printer.text(repr(self))

    def _repr_html_(self):
        head, _, text = repr(self).partition(": ")
        return _box("not attempted", head, [text] if text else [])


@dataclass(frozen=True)
class Solution:
    """The reference solution, or the reason it is withheld (``available`` is False)."""

    exercise_id: str
    available: bool
    source: str = ""
    reason: str = ""

    def __repr__(self):
        if not self.available:
            return f"{self.exercise_id}: {self.reason}"
        return f"Solution to {self.exercise_id}:\n\n{self.source}"

    __str__ = __repr__

    def _repr_pretty_(self, printer, cycle):
        printer.text(repr(self))

    def _repr_html_(self):
        if not self.available:
            return _box("not attempted", f"{self.exercise_id}: {self.reason}", [])
        return _box("passed", f"Solution to {self.exercise_id}", self.source.splitlines(), monospace_body=True)
