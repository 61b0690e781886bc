"""``autograd-lab workspace`` and ``autograd-lab reset NN``: the student's own copies.

The shipped ``notebooks/`` are the course's pristine source (docs/contracts.md §2):
JupyterLab rewrites a notebook's metadata as soon as it opens it and autosaves outputs
and answers, so students work on copies in ``work/``, which git ignores.  That keeps
``git pull`` and ``make test`` working whatever a student did.

- A missing copy is created; an existing one is never overwritten.
- ``work/.course-manifest.json`` records the SHA-256 of the shipped notebook each copy
  was made from.  When the shipped notebook changes, the new version is written beside
  the student's, to ``work/updates/``, with a notice.
- ``reset NN`` moves the student's copy to ``work/backups/`` and copies a fresh one.
"""

import hashlib
import json
import shutil
import sys
from datetime import datetime, timezone
from pathlib import Path

MANIFEST = ".course-manifest.json"
UPDATES = "updates"
BACKUPS = "backups"


class WorkspaceError(Exception):
    pass


def course_notebooks(course_dir):
    return sorted(Path(course_dir).glob("[0-9][0-9]_*.ipynb"))


def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def read_manifest(work_dir):
    path = Path(work_dir) / MANIFEST
    return json.loads(path.read_text()) if path.exists() else {}


def write_manifest(work_dir, manifest):
    path = Path(work_dir) / MANIFEST
    path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")


def sync(course_dir, work_dir):
    """Create missing copies and offer changed notebooks in ``updates/``; return the notices."""
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    manifest = read_manifest(work_dir)
    notices = []
    for shipped in course_notebooks(course_dir):
        copy, digest = work_dir / shipped.name, sha256(shipped)
        if not copy.exists():
            shutil.copyfile(shipped, copy)
            manifest[shipped.name] = digest
            notices.append(f"created {copy}")
        elif manifest.get(shipped.name) != digest:
            # Never replace the student's copy: put the new version beside it.
            update = work_dir / UPDATES / shipped.name
            if not update.exists() or sha256(update) != digest:
                update.parent.mkdir(exist_ok=True)
                shutil.copyfile(shipped, update)
            notices.append(f"the course updated {shipped.name}: the new version is in {update}; "
                           f"your copy {copy} is unchanged (`autograd-lab reset {shipped.name[:2]}` "
                           "replaces it, keeping a backup)")
    write_manifest(work_dir, manifest)
    return notices


def find_shipped(course_dir, number):
    matches = [p for p in course_notebooks(course_dir) if p.name.startswith(f"{int(number):02d}_")]
    if not matches:
        raise WorkspaceError(f"no notebook {number} in {course_dir}")
    return matches[0]


def reset(course_dir, work_dir, number, now=None):
    """Back up the student's copy of notebook ``number`` and copy a fresh one; return the backup path."""
    work_dir = Path(work_dir)
    shipped = find_shipped(course_dir, number)
    copy = work_dir / shipped.name
    backup = None
    if copy.exists():
        stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
        backup = work_dir / BACKUPS / f"{shipped.stem}-{stamp}.ipynb"
        backup.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(copy, backup)
    work_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(shipped, copy)
    manifest = read_manifest(work_dir)
    manifest[shipped.name] = sha256(shipped)
    write_manifest(work_dir, manifest)
    stale_update = work_dir / UPDATES / shipped.name
    if stale_update.exists() and sha256(stale_update) == manifest[shipped.name]:
        stale_update.unlink()  # the fresh copy is that update
    return backup


def main(args):
    try:
        if args.command == "reset":
            backup = reset(args.course, args.work, args.notebook)
            print(f"fresh copy of notebook {args.notebook} in {args.work}"
                  + (f"; your previous copy is {backup}" if backup else ""))
        else:
            for notice in sync(args.course, args.work):
                print(notice)
    except WorkspaceError as error:
        print(f"autograd-lab {args.command}: {error}", file=sys.stderr)
        return 1
    return 0
