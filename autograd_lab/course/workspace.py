"""``autograd-lab workspace`` and ``autograd-lab reset``: the student's own copies in ``work/``.

The shipped ``notebooks/`` are the course's pristine source (docs/contracts.md §2):
JupyterLab rewrites a notebook's metadata as soon as it opens it and autosaves outputs
and answers, so students work on copies in ``work/``, which git ignores.  That keeps
``git pull`` and ``make test`` working whatever a student did.

- A missing copy is created; a copy the student changed is never overwritten.
- ``work/.course-manifest.json`` records, per notebook, the SHA-256 of the shipped
  version the copy was made from and of the copy as written (and of its cells).
- When the shipped notebook changes, a copy the student never touched is refreshed
  (one whose cells are unchanged but that has outputs is first kept in ``backups/``);
  an edited copy stays, and the new version is written to ``updates/`` with a notice,
  in the terminal and in ``work/COURSE-UPDATES.md``.  Deleting the update dismisses it.
- ``reset`` (a number or a file name) moves the copy to ``backups/`` and writes a fresh one.

Every copy written over an existing one carries a mark in its metadata (``MARK``): a
JupyterLab tab still showing the replaced notebook cannot save over the fresh copy
(``course/lab.py`` refuses such a save with a message that says what happened).
"""

import hashlib
import json
import os
import re
import shlex
import shutil
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

MANIFEST = ".course-manifest.json"
UPDATES = "updates"
BACKUPS = "backups"
NOTICE = "COURSE-UPDATES.md"
MARK = "autograd_lab_workspace"   # notebook metadata: {"copy": when this copy replaced another}


class WorkspaceError(Exception):
    pass


def course_notebooks(course_dir):
    return sorted(Path(course_dir).glob("[0-9][0-9]_*.ipynb"))


def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def cells_sha256(path):
    """A hash of the notebook's cells (type and source): what a student edits, not outputs or metadata."""
    try:
        cells = json.loads(Path(path).read_text(encoding="utf-8")).get("cells", [])
        text = [(c.get("cell_type"), "".join(c.get("source", ""))) for c in cells]
    except (ValueError, AttributeError, TypeError):
        return None  # not a readable notebook: treat it as the student's own work
    return hashlib.sha256(json.dumps(text).encode()).hexdigest()


# ---- the manifest -------------------------------------------------------------------

def read_manifest(work_dir):
    """``{"course": path or None, "notebooks": {name: {"shipped", "copy", "cells", "update"}}}``.

    The first format was ``{name: sha of the shipped version}``: its copies were byte
    copies of that version, so ``copy`` is the same hash.
    """
    path = Path(work_dir) / MANIFEST
    data = json.loads(path.read_text()) if path.exists() else {}
    if data.get("format") == 2:
        return data
    return {"format": 2, "course": None,
            "notebooks": {name: {"shipped": sha, "copy": sha} for name, sha in data.items()}}


def write_manifest(work_dir, manifest):
    _write_atomically(Path(work_dir) / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True) + "\n")


def _write_atomically(path, text):
    # JupyterLab may read a file while we write it: it sees the old or the new one, never half.
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


# ---- where things are ---------------------------------------------------------------

def locate(course=None, work=None, search_parents=False):
    """The course's notebooks and the student's workspace, wherever the command runs.

    Run from the course folder or from ``work/`` (a JupyterLab terminal opens there),
    the same command finds the same workspace; the manifest remembers the course.
    """
    here = Path.cwd()
    if work is None:
        folders = [here, *here.parents] if search_parents else [here]
        work = next((found for folder in folders for found in (folder, folder / "work")
                     if (found / MANIFEST).exists()), here / "work")
    work = Path(work)
    if course is None:
        recorded = read_manifest(work).get("course") if (work / MANIFEST).exists() else None
        course = recorded if recorded and Path(recorded).is_dir() else here / "notebooks"
    return Path(course), work


def reset_command(name):
    """The reset command, as a student can paste it anywhere: ``.venv`` is never activated."""
    installed = Path(sys.executable).parent / "autograd-lab"
    program = str(installed) if installed.exists() else "autograd-lab"
    return f"{shlex.quote(program)} reset {name[:2]}"


def shown(path):
    """``path`` relative to the current folder when it is inside it, else absolute."""
    path = Path(path).absolute()
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


# ---- copies -------------------------------------------------------------------------

def _stamp(now):
    return (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")


def _copy(shipped, copy, mark=None):
    """Write the shipped notebook to ``copy``; with ``mark`` (a dict), record it in the copy's metadata."""
    if mark is None:
        shutil.copyfile(shipped, copy)
    else:
        notebook = json.loads(Path(shipped).read_text(encoding="utf-8"))
        notebook.setdefault("metadata", {})[MARK] = mark
        _write_atomically(copy, json.dumps(notebook, indent=1, ensure_ascii=False) + "\n")
    return {"shipped": sha256(shipped), "copy": sha256(copy), "cells": cells_sha256(copy)}


def _mark(why, stamp, backup):
    """What the fresh copy remembers: when and why it replaced the student's, and where that one went."""
    when = datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").strftime("%Y-%m-%d %H:%M:%S UTC")
    return {"copy": when, "why": why, "previous": f"{BACKUPS}/{backup.name}" if backup else None}


def _back_up(copy, work_dir, stamp):
    backup = Path(work_dir) / BACKUPS / f"{copy.stem}-{stamp}.ipynb"
    backup.parent.mkdir(parents=True, exist_ok=True)
    n = 1
    while backup.exists():  # two resets in one second
        n += 1
        backup = backup.with_name(f"{copy.stem}-{stamp}-{n}.ipynb")
    shutil.move(copy, backup)
    return backup


def untouched(copy, entry):
    """``"same"`` (byte for byte as written), ``"same cells"`` (only outputs or metadata differ) or ``None``."""
    if sha256(copy) == entry.get("copy"):
        return "same"
    if entry.get("cells") and cells_sha256(copy) == entry["cells"]:
        return "same cells"
    return None


@dataclass
class Event:
    """What ``sync`` did to one notebook: ``created``, ``refreshed`` or ``update``."""

    kind: str
    name: str
    path: Path               # the student's copy, or the update offered beside it
    backup: Path = None
    new: bool = False        # an update announced for the first time

    def message(self):
        if self.kind == "created":
            return f"created {shown(self.path)}"
        if self.kind == "refreshed":
            kept = (f"; you had only run it: your copy with its outputs is {shown(self.backup)}"
                    if self.backup else " (you had not changed it)")
            return f"refreshed {shown(self.path)} with the course's new version{kept}"
        return update_notice(self.name, self.path)


def update_notice(name, update):
    return (f"Course update: {name} changed after your copy was made. Your copy is yours and stays as it is.\n"
            f"  the new version:  {shown(update)}\n"
            f"  to start over with it (your copy goes to backups/):  {reset_command(name)}\n"
            f"  to keep yours and stop this reminder:  delete {shown(update)}")


def sync(course_dir, work_dir):
    """Create missing copies, refresh untouched ones, offer the rest in ``updates/``; return the events."""
    course_dir, work_dir = Path(course_dir), Path(work_dir)
    if not course_notebooks(course_dir):
        raise WorkspaceError(f"no course notebooks (NN_*.ipynb) in {shown(course_dir)}: run this from the "
                             "course folder, or pass --course")
    work_dir.mkdir(parents=True, exist_ok=True)
    manifest = read_manifest(work_dir)
    manifest["course"] = str(course_dir.resolve())
    entries, events = manifest["notebooks"], []
    for shipped in course_notebooks(course_dir):
        name, digest, copy = shipped.name, sha256(shipped), work_dir / shipped.name
        entry = entries.get(name) or {"shipped": None, "copy": None}
        if not copy.exists():
            entries[name] = _copy(shipped, copy)
            events.append(Event("created", name, copy))
        elif entry["shipped"] == digest:
            continue
        elif sha256(copy) == digest:  # already the new version (a lost manifest, a copy by hand)
            entries[name] = {"shipped": digest, "copy": digest, "cells": cells_sha256(copy)}
        elif state := untouched(copy, entry):
            stamp = _stamp(None)
            backup = _back_up(copy, work_dir, stamp) if state == "same cells" else None
            # The copy may be open in JupyterLab: the mark keeps that tab from saving over it.
            entries[name] = _copy(shipped, copy, mark=_mark("a course update", stamp, backup))
            events.append(Event("refreshed", name, copy, backup=backup))
        else:
            update = work_dir / UPDATES / name
            new = entry.get("update") != digest
            if new:
                update.parent.mkdir(exist_ok=True)
                shutil.copyfile(shipped, update)
                entry["update"] = digest
                entries[name] = entry
            if update.exists():  # a deleted update is a dismissed one
                events.append(Event("update", name, update, new=new))
    write_manifest(work_dir, manifest)
    write_notice(work_dir, [e for e in events if e.kind == "update"])
    return events


def write_notice(work_dir, updates):
    """``work/COURSE-UPDATES.md``: the waiting updates, where JupyterLab shows them; no file when none wait."""
    path = Path(work_dir) / NOTICE
    if not updates:
        path.unlink(missing_ok=True)
        return None
    sections = [
        f"## {e.name}\n\n"
        f"- The new version is [{UPDATES}/{e.name}]({UPDATES}/{e.name}): open it beside your copy to compare.\n"
        f"- To start over with it, run this in a terminal (File > New > Terminal):\n\n"
        f"  ```\n  {reset_command(e.name)}\n  ```\n\n"
        f"  Your copy moves to `{BACKUPS}/` first. If the notebook is open here, close its tab before you "
        "reset; a tab left open cannot save over the fresh copy, and says so.\n"
        f"- To keep your copy and stop this reminder, delete `{UPDATES}/{e.name}`.\n"
        for e in updates]
    text = ("# Course updates\n\n"
            "The course changed these notebooks after your copies were made. You have edited your "
            "copies, so they stay exactly as they are.\n\n" + "\n".join(sections) +
            "\n---\n`make lab` rewrites this file, and removes it once no update is waiting.\n")
    _write_atomically(path, text)
    return path


def pending_updates(work_dir):
    """The updates waiting in ``work_dir`` (for the notice at the end of JupyterLab's start)."""
    manifest = read_manifest(work_dir)
    return [Path(work_dir) / UPDATES / name for name, entry in sorted(manifest["notebooks"].items())
            if entry.get("update") and (Path(work_dir) / UPDATES / name).exists()]


# ---- reset --------------------------------------------------------------------------

def find_shipped(course_dir, which):
    """The shipped notebook named by a number (``1``, ``01``) or a file name (``01_dynamic_graph.ipynb``)."""
    stem = Path(str(which)).name.removesuffix(".ipynb")
    match = re.fullmatch(r"(\d{1,2})(_.*)?", stem)
    shipped = course_notebooks(course_dir)
    candidates = [p for p in shipped if match and p.name.startswith(f"{int(match.group(1)):02d}_")]
    if match and match.group(2):
        candidates = [p for p in candidates if p.stem == stem]
    if not candidates:
        names = ", ".join(p.stem for p in shipped) or "none"
        raise WorkspaceError(f"no notebook {which} in {shown(course_dir)} (it has: {names}); "
                             "give a number such as 01 or a file name such as 01_dynamic_graph.ipynb")
    return candidates[0]


def reset(course_dir, work_dir, which, now=None):
    """Back up the student's copy of notebook ``which`` and write a fresh one; return the backup path."""
    work_dir = Path(work_dir)
    shipped = find_shipped(course_dir, which)
    copy, stamp = work_dir / shipped.name, _stamp(now)
    backup = _back_up(copy, work_dir, stamp) if copy.exists() else None
    work_dir.mkdir(parents=True, exist_ok=True)
    manifest = read_manifest(work_dir)
    manifest["notebooks"][shipped.name] = _copy(shipped, copy, mark=_mark("autograd-lab reset", stamp, backup))
    write_manifest(work_dir, manifest)
    taken = work_dir / UPDATES / shipped.name
    if taken.exists() and sha256(taken) == sha256(shipped):
        taken.unlink()  # the fresh copy is that update
    write_notice(work_dir, [Event("update", p.name, p) for p in pending_updates(work_dir)])
    return backup


def main(args):
    try:
        if args.command == "reset":
            course, work = locate(args.course, args.work, search_parents=True)
            if not (work / MANIFEST).exists() and args.work is None:
                raise WorkspaceError(f"no workspace in {shown(work)}: run this from the course folder "
                                     "or from its work/ folder (or pass --work)")
            for which in args.notebook:
                backup = reset(course, work, which)
                fresh = work / find_shipped(course, which).name
                print(f"fresh copy: {shown(fresh)}" + (f"; your previous copy is {shown(backup)}" if backup else ""))
        else:
            course, work = locate(args.course, args.work)
            for event in sync(course, work):
                print(event.message())
    except WorkspaceError as error:
        print(f"autograd-lab {args.command}: {error}", file=sys.stderr)
        return 1
    return 0
