"""Prose cannot drift from the code (docs/contracts.md §6).

Each notebook is executed once (a fresh kernel of this environment, as shipped:
exercises not attempted), and every number in its Markdown must appear in its
outputs (``text/plain`` and stream text), unless ``tests/prose_numbers_allowed.yml``
lists it with a reason (a definition such as 2^16, a citation).

What counts as a number in the Markdown:

* integers and decimals (``3``, ``0.0125``, ``65,504``), percentages (``25%``),
  factors (``6×``, ``6x``), powers (``2^-24``, ``$2^{-24}$``, ``2**-24``, ``2⁻²⁴``),
  scientific notation (``1e-3``);
* not: numbers inside code spans and fenced code (they are identifiers and
  arguments, such as ``float16`` or ``dim=0``: a measured number belongs in prose,
  where this test sees it), digits that are part of a word (``fp16``, ``L2``,
  ``H100``), heading numbers (``## 3. Exercise``), the notebook's own number in its
  title, exercise ids (``03.accumulate``), references to notebooks (``notebook 05``,
  ``05_amp.ipynb``), URLs, link targets and HTML tags.

How a number matches an output: an integer must appear as that number (``6``
matches ``6`` or ``6.0``); a decimal, percentage or factor matches an output
number that rounds to it at the precision written (``2.9`` matches ``2.93``; a
percentage also matches a fraction, ``25%`` matches ``0.25``); a power matches the
same power written in an output or its value to 3 significant digits.  Signs are
ignored.  ``pytest tests/test_prose_numbers.py -k 03`` checks one notebook.
"""

import functools
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest
import yaml

from autograd_lab.course import executed

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
ALLOWED_FILE = Path(__file__).with_name("prose_numbers_allowed.yml")

_SUPERSCRIPTS = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻", "0123456789-")
_POWER = re.compile(r"(?<![\w.^])(\d+)\s*(?:\^|\*\*)\s*\{?\s*\(?\s*([-−]?\s*\d+)\s*\)?\s*\}?")
_NUMBER = re.compile(
    r"(?<![\w.^\\])"
    r"(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?(?:[eE][-+−]?\d+)?|\.\d+)"
    r"(?:(\s?%)|(×|x(?![\w])))?"
    r"(?![\w]|\.\d)")
_OUTPUT_NUMBER = re.compile(r"(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_OUTPUT_POWER = re.compile(r"(\d+)\s*(?:\^|\*\*)\s*\{?\(?\s*(-?\d+)")


@dataclass(frozen=True)
class ProseNumber:
    text: str        # the allow-list key: "2", "0.0125", "25" (for 25%), "2^-24"
    kind: str        # "integer", "decimal", "percent", "factor", "power"
    value: float
    decimals: int
    context: str     # the sentence around it, for the failure message


# --- the numbers in the Markdown ---------------------------------------------------

def clean_markdown(source, notebook_number, first_heading):
    """The Markdown with everything that is not a claim removed (see the module docstring)."""
    text = re.sub(r"```.*?```", " ", source, flags=re.S)
    text = re.sub(r"`[^`]*`", " ", text)
    text = re.sub(r"<[^>]+>", " ", text)
    text = re.sub(r"\]\([^)]*\)", "] ", text)
    text = re.sub(r"https?://\S+", " ", text)
    text = re.sub(r"\b\d\d_\w+(\.ipynb)?", " ", text)
    text = re.sub(r"\b\d\d\.[a-z_][a-z0-9_]*", " ", text)
    text = re.sub(r"(?i)\b(notebooks?|labs?)\s+\d\d\b((\s*(,|and|or|–|-|to)\s*)\d\d\b)*", " ", text)
    lines = []
    for line in text.splitlines():
        heading = re.match(r"^\s*#+\s*", line)
        if heading:
            rest = re.sub(r"^(\d+(\.\d+)*\.?)\s", "", line[heading.end():])  # section numbering
            if first_heading:
                rest = re.sub(rf"(?<!\d)0?{int(notebook_number)}(?!\d)", " ", rest, count=1)
                first_heading = False
            line = rest
        lines.append(line)
    text = re.sub("[⁰¹²³⁴⁵⁶⁷⁸⁹⁻]+", lambda m: "^" + m.group().translate(_SUPERSCRIPTS), "\n".join(lines))
    return text.replace("−", "-"), first_heading


def prose_numbers(notebook, notebook_number):
    """Every ``ProseNumber`` in the notebook's Markdown cells, in order."""
    found, first_heading = [], True
    for cell in notebook.cells:
        if cell.cell_type != "markdown":
            continue
        text, first_heading = clean_markdown(cell.source, notebook_number, first_heading)
        found += _numbers_in(text)
    return found


def _numbers_in(text):
    numbers = []
    for match in _POWER.finditer(text):
        base, exponent = int(match.group(1)), int(match.group(2).replace(" ", ""))
        numbers.append(ProseNumber(f"{base}^{exponent}", "power", float(base) ** exponent, 0, _context(text, match)))
    text = _POWER.sub(" ", text)
    for match in _NUMBER.finditer(text):
        written = match.group(1).replace(",", "")
        kind = "percent" if match.group(2) else "factor" if match.group(3) else (
            "decimal" if re.search(r"[.eE]", written) else "integer")
        decimals = len(written.split(".")[1]) if "." in written and "e" not in written.lower() else 0
        numbers.append(ProseNumber(written, kind, float(written.replace("−", "-")), decimals, _context(text, match)))
    return numbers


def _context(text, match):
    start, end = max(0, match.start() - 50), min(len(text), match.end() + 50)
    return " ".join(text[start:end].split())


# --- the numbers in the outputs ------------------------------------------------------

def output_text(notebook):
    """All ``text/plain`` and stream output of an executed notebook, as one string."""
    return "\n".join(cell_output_text(cell) for cell in notebook.cells)


def cell_output_text(cell):
    parts = []
    for output in cell.get("outputs", ()):
        if output.get("output_type") == "stream":
            parts.append(output.get("text", ""))
        elif "data" in output:
            parts.append(output["data"].get("text/plain", ""))
    return "\n".join(parts)


class Outputs:
    def __init__(self, text):
        self.text = text
        self.values = [float(v) for v in _OUTPUT_NUMBER.findall(text)]
        self.powers = {(int(b), int(e)) for b, e in _OUTPUT_POWER.findall(text)}

    def show(self, number):
        if number.kind == "power":
            base, exponent = number.text.split("^")
            return (int(base), int(exponent)) in self.powers or any(
                math.isclose(v, number.value, rel_tol=5e-3) for v in self.values)
        if number.kind == "integer":
            return any(v == number.value for v in self.values)
        candidates = self.values + ([v * 100 for v in self.values] if number.kind == "percent" else [])
        if "e" in number.text.lower():
            return any(math.isclose(v, number.value, rel_tol=5e-3) for v in candidates)
        return any(math.isclose(round(v, number.decimals), number.value, abs_tol=1e-12) for v in candidates)


def unexplained(notebook, executed, notebook_number, allowed):
    """The prose numbers of ``notebook`` that neither its outputs nor the allow-list explain."""
    outputs = Outputs(output_text(executed))
    return [n for n in prose_numbers(notebook, notebook_number)
            if n.text not in allowed and not outputs.show(n)]


# --- running the notebooks ------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def execute(path):
    """The notebook at ``path`` run top to bottom in a fresh kernel of this environment (once per process).

    Under ``make test`` the copy that ``make test-notebooks`` ran is read instead
    (``AUTOGRAD_LAB_EXECUTED``; make runs it again whenever a notebook or the package changed).
    """
    copies = os.environ.get("AUTOGRAD_LAB_EXECUTED")
    if copies and Path(path).resolve().parent == ROOT / "notebooks":   # only the course's own labs ran there
        notebook, error = executed.read(copies, Path(path).name)
        assert error is None, f"{Path(path).name} did not run clean in {copies}: {error}"
        return notebook
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # the kernel inherits it
    notebook, error = executed.execute(path)
    assert error is None, error
    return notebook


def allow_list():
    """``{notebook: {number: reason}}`` from ``prose_numbers_allowed.yml``."""
    entries = yaml.safe_load(ALLOWED_FILE.read_text()) or []
    allowed = {}
    for entry in entries:
        assert set(entry) == {"notebook", "number", "reason"} and str(entry["reason"]).strip(), (
            f"{ALLOWED_FILE.name}: each entry is {{notebook, number, reason}} with a reason; got {entry}")
        allowed.setdefault(str(entry["notebook"]), {})[str(entry["number"])] = entry["reason"]
    return allowed


def _failure(number, missing):
    lines = [f"notebook {number}: {len(missing)} number(s) in the Markdown appear in no output. Make a "
             "cell print each measured number, correct the prose, or (for a definition or citation "
             f"only) add it to tests/{ALLOWED_FILE.name} with a reason:"]
    lines += [f"  {n.text} ({n.kind}): ...{n.context}..." for n in missing]
    return "\n".join(lines)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.name[:2])
def test_every_number_in_the_prose_is_in_the_outputs(path):
    number = path.name[:2]
    missing = unexplained(nbformat.read(str(path), as_version=4), execute(path), number,
                          allow_list().get(number, {}))
    assert not missing, _failure(number, missing)


def test_every_allow_list_entry_is_still_in_its_notebook():
    stale = []
    for number, entries in allow_list().items():
        paths = [p for p in NOTEBOOKS if p.name.startswith(number)]
        written = {n.text for p in paths for n in prose_numbers(nbformat.read(str(p), as_version=4), number)}
        stale += [f"{number}: {text}" for text in entries if text not in written]
    assert not stale, f"remove these entries from {ALLOWED_FILE.name}, their numbers are gone: {stale}"


# --- predictions are questions: no key is shown above its prompt ---------------------------

def key_numbers(value):
    """The numbers of a prediction's key that could only be there by giving it away.

    Booleans, strings and small whole numbers (below 10) are too common to tell; the
    auditors check those by reading (docs/claims.md)."""
    if isinstance(value, dict):
        return [n for item in value.values() for n in key_numbers(item)]
    if isinstance(value, (list, tuple)):
        return [n for item in value for n in key_numbers(item)]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return []
    if float(value).is_integer():
        return [str(int(value))] if abs(value) >= 10 else []
    return [f"{value:.3g}"]


def shown_above(executed, exercise_id, answer_name):
    """Markdown and outputs of every cell above the first cell that answers ``exercise_id``."""
    texts = []
    for cell in executed.cells:
        if cell.cell_type == "code" and (f'"{exercise_id}"' in cell.source or f"{answer_name} =" in cell.source):
            return " ".join(texts)
        texts.append(cell.source if cell.cell_type == "markdown" else cell_output_text(cell))
    return None


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.name[:2])
def test_no_prediction_key_is_shown_above_its_prompt(path):
    from autograd_lab import checking

    executed = execute(path)
    shown = []
    for exercise in checking.all_exercises():
        if exercise.kind != "value" or not exercise.id.startswith(path.name[:2]):
            continue
        above = shown_above(executed, exercise.id, exercise.answer_name)
        assert above is not None, f"{exercise.id}: no cell of {path.name} answers it"
        numbers = re.findall(r"(?<![\w.])\d+(?:\.\d+)?(?:e-?\d+)?", above.replace(",", ""))
        for number in key_numbers(exercise.reference()):
            if number in numbers or any(_same_value(number, n) for n in numbers):
                shown.append(f"{exercise.id}: its key holds {number}, shown above its prompt")
    assert not shown, "\n".join(shown)


def _same_value(key, text):
    try:
        return math.isclose(float(key), float(text), rel_tol=5e-3) and "." in key
    except ValueError:
        return False


# --- the test catches what it is for ------------------------------------------------------

def _synthetic(tmp_path, prose):
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_markdown_cell("# 42 · A synthetic lab\n\n## 1. Setup"),
        nbformat.v4.new_code_cell("loss_ratio = 2 * 3\nprint(f'ratio: {loss_ratio}; flushed: {0.2531:.1%}')"),
        nbformat.v4.new_code_cell("2 ** -24"),
        nbformat.v4.new_markdown_cell(prose),
    ]
    path = tmp_path / "42_synthetic.ipynb"
    nbformat.write(notebook, str(path))
    return path


def test_a_planted_wrong_number_fails_and_measured_ones_pass(tmp_path):
    prose = ("Summing over 6 entries gives a ratio of 6×; 25.3% of the values flush, "
             "about 25%; the smallest is $2^{-24}$, or 5.96e-08. Inside `float16` nothing counts.")
    path = _synthetic(tmp_path, prose)
    executed = execute(path)
    assert unexplained(nbformat.read(str(path), as_version=4), executed, "42", {}) == []
    planted = _synthetic(tmp_path, prose + " The ratio is 3.")  # the planted wrong number
    missing = unexplained(nbformat.read(str(planted), as_version=4), executed, "42", {})
    assert [(n.text, n.kind) for n in missing] == [("3", "integer")], _failure("42", missing)
    assert "The ratio is 3." in missing[0].context
    assert "notebook 42: 1 number(s)" in _failure("42", missing)
    # an allow-list entry (for a definition or citation) explains it
    assert unexplained(nbformat.read(str(planted), as_version=4), executed, "42", {"3": "a definition"}) == []


def test_the_extraction_ignores_what_is_not_a_claim():
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_markdown_cell(
        "# 03 · Accumulation\n\n## 2. Exercise 03.accumulate\n\nSee notebook 05 and `x ** 3`, "
        "[the docs](https://pytorch.org/docs/2.5/x.html), float16 and fp16, an H100.\n\n"
        "```python\ny = x * 7\n```\nIt is 7 times 0.5 %, 3x, 2⁻²⁴ and 65,504.")]
    texts = [(n.text, n.kind) for n in prose_numbers(notebook, "03")]
    assert sorted(texts) == sorted([("2^-24", "power"), ("7", "integer"), ("0.5", "percent"), ("3", "factor"),
                                    ("65504", "integer")])
