"""The files an LMS imports as they are: ``lms.csv``, ``canvas.csv``, ``moodle.csv``, and who is off the roster.

Every export has one row per **roster** student (everyone graded when the
assignment has no roster) and the same maximum for every row: the assignment's
points, never a student's own (an exempted exercise rescales that student's
score instead).  Students who submitted but are not on the roster go to
``off_roster.csv`` and the summary, never into an import.

* ``lms.csv``: ``id, email, name, score, max_score`` (Moodle's gradebook import:
  map "Email address" to ``email``, or any LMS with a column mapping step);
* ``canvas.csv``: Canvas's gradebook import layout: ``Student, ID, SIS User ID,
  SIS Login ID, Section`` and one column for the assignment, ``Name (id)`` when
  ``canvas: {assignment_id: ...}`` is set, then a ``Points Possible`` row;
* ``moodle.csv``: Moodle's CSV grade import: ``Email address, Full name`` and a
  column named after the assignment (Moodle maps columns when importing).

Files are UTF-8; a character that cannot be written is written as a backslash escape.
"""

import csv


def write_all(out, assignment, table):
    """Write the exports of ``table`` (rows of ``gradebook.rows``) into ``out``; return the off-roster rows."""
    on_roster = [row for row in table if row["on_roster"]] if assignment.roster else list(table)
    off_roster = [row for row in table if not row["on_roster"]] if assignment.roster else []
    maximum = _number(max_score(table))
    write_csv(out / "lms.csv", ["id", "email", "name", "score", "max_score"],
              [[r["id"], r["email"], r["name"], _number(r["score"]), maximum] for r in on_roster])
    write_csv(out / "canvas.csv", *_canvas(assignment, on_roster, maximum))
    column = assignment.name
    write_csv(out / "moodle.csv", ["Email address", "Full name", column],
              [[r["email"], r["name"] or r["id"], _number(r["score"])] for r in on_roster])
    write_csv(out / "off_roster.csv", ["id", "score", "max_score", "files"],
              [[r["id"], _number(r["score"]), maximum, " | ".join(r["files"])] for r in off_roster])
    return off_roster


def max_score(table):
    maxima = {row["max_score"] for row in table}
    if len(maxima) > 1:  # a bug of ours if it ever happens: an LMS would read 15/16 as 15/17
        raise AssertionError(f"rows have different maxima: {sorted(maxima)}")
    return maxima.pop() if maxima else 0


def _canvas(assignment, rows, maximum):
    title = f"{assignment.name} ({assignment.canvas_assignment_id})" if assignment.canvas_assignment_id \
        else assignment.name
    header = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", title]
    body = [["Points Possible", "", "", "", "", maximum]]
    for row in rows:
        student = row["student"]
        login = student.sis_login_id or ("" if student.canvas_id or student.sis_user_id else row["id"])
        body.append([row["name"] or row["id"], student.canvas_id, student.sis_user_id, login, student.section,
                     _number(row["score"])])
    return header, body


def _number(value):
    return f"{value:g}"


def write_csv(path, header, body):
    with open(path, "w", newline="", encoding="utf-8", errors="backslashreplace") as file:
        writer = csv.writer(file)
        writer.writerow(header)
        writer.writerows(body)
