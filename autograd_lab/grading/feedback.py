"""What a student gets back: the problems met, a renamed answer spotted, one offline HTML page.

``problems(report)`` lists every cell that did not run cleanly (raised, timed out,
killed the kernel, skipped) besides the batch's own events, so nothing the
grader saw is hidden from the student.  ``renamed_answers`` turns "not attempted"
into "no `train` defined; found `train_fixed`: did you rename it?" when the
notebook defines a close name.  ``write_html`` writes a self-contained page:
inline CSS, no script, no link, so it reads the same offline.
"""

import difflib
import html
import os

from .execute import code_cells, defined_names

_CELL_PROBLEMS = {"error": "raised an error", "timed out": "ran past its time limit and was interrupted",
                  "dead": "killed the kernel", "unresponsive": "ignored the interrupt after its time limit"}


def problems(report):
    """The batch's events plus one line per cell that did not finish cleanly."""
    lines = list(report.get("problems", ()))
    for cell in report.get("cells", ()):
        status = cell.get("status", "ok")
        if status == "ok":
            continue
        what = _CELL_PROBLEMS.get(status, status)
        error = f": {cell['error']}" if cell.get("error") else ""
        lines.append(f"cell {cell.get('cell')} {what}{error}")
    return lines


def names_defined(notebook):
    names = set()
    for _, source in code_cells(notebook) if notebook is not None else ():
        try:
            names |= defined_names(source)
        except SyntaxError:
            continue
    return names


def renamed_answers(grades, exercises_by_id, notebook):
    """Add "did you rename it?" to each not-attempted grade whose answer name is missing but close."""
    defined = names_defined(notebook)
    for grade in grades:
        exercise = exercises_by_id.get(grade["exercise_id"])
        if exercise is None or grade["status"] != "not attempted" or exercise.answer_name in defined:
            continue
        close = _close_names(exercise.answer_name, defined)
        if close and not any(m.startswith(f"no `{exercise.answer_name}` defined") for m in grade["messages"]):
            found = ", ".join(f"`{name}`" for name in close)
            grade["messages"] = [f"no `{exercise.answer_name}` defined; found {found}: did you rename it? "
                                 f"The grader calls `{exercise.answer_name}`."] + list(grade["messages"])
    return grades


def _close_names(name, defined):
    starts = sorted(other for other in defined if other != name and (other.startswith(name) or name.startswith(other))
                    and len(other) > 2)
    similar = difflib.get_close_matches(name, sorted(defined - {name}), n=3, cutoff=0.75)
    return list(dict.fromkeys(starts + similar))[:3]


# --- the page ----------------------------------------------------------------------------

_STYLE = """body{font-family:system-ui,sans-serif;max-width:52rem;margin:2rem auto;padding:0 1rem;color:#1f2328}
table{border-collapse:collapse;width:100%}td,th{border:1px solid #d0d7de;padding:.3rem .5rem;text-align:left;vertical-align:top}
.passed{color:#1a7f37}.failed,.error,.timed{color:#cf222e}.not{color:#6e7781}code{background:#f6f8fa;padding:0 .2rem}
.problems{background:#fff8c5;padding:.5rem 1rem;border-left:4px solid #bf8700}"""


def _inline(text):
    """Escape, then show `backticks` as code (feedback text is Markdown: docs/contracts.md §5)."""
    parts = html.escape(str(text)).split("`")
    return "".join(f"<code>{part}</code>" if i % 2 else part for i, part in enumerate(parts))


def render_html(title, rows, problem_lines, summary):
    """``rows``: (notebook, grade dict) pairs.  A whole page as a string."""
    body = [f"<h1>{html.escape(title)}</h1>", f"<p>{_inline(summary)}</p>"]
    if problem_lines:
        items = "".join(f"<li>{_inline(line)}</li>" for line in problem_lines)
        body.append(f"<div class='problems'><strong>Problems met while running your notebooks</strong><ul>{items}</ul></div>")
    body.append("<table><tr><th>notebook</th><th>exercise</th><th>result</th><th>points</th><th>feedback</th></tr>")
    for notebook, grade in rows:
        status = grade["status"]
        messages = "".join(f"<li>{_inline(m)}</li>" for m in grade.get("messages", ()))
        body.append(f"<tr><td>{html.escape(notebook)}</td><td>{html.escape(grade['exercise_id'])} "
                    f"{html.escape(grade.get('title', ''))}</td><td class='{status.split()[0]}'>{html.escape(status)}</td>"
                    f"<td>{grade['score']:g} / {grade['max_score']:g}</td><td><ul>{messages}</ul></td></tr>")
    body.append("</table>")
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{_STYLE}</style></head><body>{''.join(body)}</body></html>\n")


def write_html(path, title, rows, problem_lines, summary):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8", errors="backslashreplace") as file:
        file.write(render_html(title, rows, problem_lines, summary))
    return path

