"""``autograd-lab release``: the student build, with no solutions in it (docs/contracts.md §3).

``build(out_dir)`` writes

* ``out_dir/notebooks/``: the shipped notebooks, outputs cleared, each stamped
  with the release it came from and the exercises it had (``stamp``);
* ``out_dir/autograd_lab/``: the package (which never holds a solution) with
  ``public/<NN>.pt`` added (see ``checking/public.py`` for what those hold), and
  the GPU records notebooks 05 and 06 print without a GPU (``labs/gpu_data/``, package data);
* ``out_dir/README.md`` and ``out_dir/requirements.txt``: how a student sets it up.

The stamp is signed with the instructor's release key (``release_key``), so the
grader can trust "this copy was made before ``03.train`` existed" only when a
release said so: a student who deletes an exercise's cell does not exempt it.

``--self-study`` writes ``out_dir/autograd_lab_solutions/`` beside it instead of
``public/`` (so ``solution()`` works), exactly as the repository.
The grader calls ``build`` once per batch and puts the result on its kernels' path.
"""

import ast
import datetime as dt
import hashlib
import hmac
import inspect
import io
import json
import os
import secrets
import shutil
from dataclasses import fields, replace
from pathlib import Path

import nbformat
import torch

from autograd_lab.checking.observe import flat_tensors
from autograd_lab.checking.public import error_kind
from autograd_lab.checking.forms import form_record
from autograd_lab.checking.records import readable_grad

PACKAGE = Path(__file__).resolve().parents[1]
SOLUTIONS = PACKAGE.parent / "autograd_lab_solutions"
NOTEBOOKS = PACKAGE.parent / "notebooks"
REQUIREMENTS = PACKAGE.parent / "requirements" / "course.txt"
KEY_ENV = "AUTOGRAD_LAB_RELEASE_KEY"   # a file holding the instructor's release key
# What a student's environment needs from requirements/course.txt: no test tools.
_STUDENT_REQUIREMENTS = ("torch", "numpy", "matplotlib", "graphviz", "jupyterlab", "ipywidgets", "ipykernel",
                         "nbformat", "nbclient", "pyyaml")
_DROPPED_FIELDS = {"reference", "inputs", "public_seeds", "hidden_seeds", "misconceptions",
                   "wrong_answers", "solution_code", "setup", "module", "experiment", "method"}
_PLAIN = (str, int, float, bool, type(None))


def build(out_dir, *, self_study=False, notebooks_dir=None):
    """Write a student build into ``out_dir`` (replacing an older one there); return its path."""
    out = Path(out_dir)
    package, solutions = out / "autograd_lab", out / "autograd_lab_solutions"
    for folder in (package, solutions):
        if folder.exists():
            shutil.rmtree(folder)
    ignored = shutil.ignore_patterns("__pycache__", "*.pyc", "public")
    shutil.copytree(PACKAGE, package, ignore=ignored)
    if self_study:
        shutil.copytree(SOLUTIONS, solutions, ignore=ignored)
    else:
        write_public(package / "public")
    release_id = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ-") + secrets.token_hex(4)
    _write_notebooks(Path(notebooks_dir) if notebooks_dir else NOTEBOOKS, out / "notebooks", release_id)
    (out / "requirements.txt").write_text(student_requirements())
    (out / "README.md").write_text(README.format(release=release_id, kind="self-study build (with solutions)"
                                                 if self_study else "student build (no solutions)"))
    return str(out)


def _write_notebooks(source, target, release_id):
    from autograd_lab import checking

    if target.exists():  # no notebook of an older release stays behind
        shutil.rmtree(target)
    target.mkdir(parents=True)
    key = release_key(create=False)   # made by `autograd-lab release`; the grader's own builds need none
    for path in sorted(source.glob("[0-9][0-9]_*.ipynb")):
        notebook = nbformat.read(str(path), as_version=4)
        for cell in notebook.cells:
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = [], None
        number = path.name[:2]
        if key is not None:
            stamp(notebook, number, [e.id for e in checking.all_exercises() if e.id[:2] == number], release_id, key)
        nbformat.write(notebook, str(target / path.name))


def student_requirements():
    """The lines of requirements/course.txt a student's environment needs (no test tools)."""
    if not REQUIREMENTS.exists():   # a package copied without its repository: say where the pins live
        return "# The course's pins are in requirements/course.txt of the autograd-lab repository.\n"
    lines = REQUIREMENTS.read_text().splitlines()
    keep = [line for line in lines if line.split("==")[0].strip().lower().replace("-", "_") in _STUDENT_REQUIREMENTS]
    return "\n".join(keep) + "\n"


# --- the release stamp ----------------------------------------------------------------------

def release_key(create=True):
    """The instructor's release key (bytes): ``$AUTOGRAD_LAB_RELEASE_KEY``, else ``~/.config/autograd-lab/release.key``.

    Made (0600) by the first release.  Keep it: the grader checks stamps with it, and the
    Gradescope zip carries it (root-only in the container).  ``None`` when absent and not created.
    """
    path = Path(os.environ.get(KEY_ENV) or Path.home() / ".config" / "autograd-lab" / "release.key")
    if not path.exists():
        if not create:
            return None
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as file:
            file.write(secrets.token_hex(32) + "\n")
    return path.read_text().strip().encode()


def _signature(key, release_id, number, exercise_ids):
    message = json.dumps([release_id, number, sorted(exercise_ids)]).encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def stamp(notebook, number, exercise_ids, release_id, key):
    """Record in ``notebook``'s metadata which release it came from and which exercises that release had."""
    notebook.metadata["autograd_lab"] = {
        "release": release_id, "notebook": number, "exercises": sorted(exercise_ids),
        "signature": _signature(key, release_id, number, exercise_ids)}
    return notebook


def read_stamp(notebook, key):
    """The stamp's ``{"release", "notebook", "exercises"}`` when its signature holds, else ``None``."""
    data = notebook.get("metadata", {}).get("autograd_lab") if notebook is not None else None
    if key is None or not isinstance(data, dict):
        return None
    release_id, number, exercises = data.get("release"), data.get("notebook"), data.get("exercises")
    if not (isinstance(release_id, str) and isinstance(number, str) and isinstance(exercises, list)
            and all(isinstance(e, str) for e in exercises) and isinstance(data.get("signature"), str)):
        return None
    if not hmac.compare_digest(data["signature"], _signature(key, release_id, number, exercises)):
        return None
    return {"release": release_id, "notebook": number, "exercises": exercises}


README = """# autograd-lab: your course files ({kind})

Release `{release}`.

* `notebooks/`: the nine labs. Work in them and hand in the `.ipynb` files your
  instructor asks for, named as they say (for example `01_dynamic_graph.ipynb`).
  Keep each exercise's cell: the grader finds your answer by its name
  (`cube_grad`, `needs_grad`, ...), and a deleted exercise cell still counts.
* `autograd_lab/`: the package the notebooks import. It has no solutions.
* `requirements.txt`: the exact versions the course is tested with.

## Set up (Python 3.11 or newer)

```bash
python3 -m venv .venv
.venv/bin/pip install -r requirements.txt
sudo apt-get install graphviz        # the `dot` program draws the graphs (macOS: brew install graphviz)
PYTHONPATH=$PWD .venv/bin/jupyter lab notebooks/
```

On Colab, upload this folder, then run `!pip install -r requirements.txt` and
`import sys; sys.path.insert(0, "/content/<this folder>")` in the first cell.

`check("01.saved_bytes", saved_bytes)` tells you whether an answer passes the
public checks; hidden checks on other inputs run when your work is graded.
"""


def write_public(folder):
    """One ``NN.pt`` per notebook with the public data of its exercises."""
    from autograd_lab import checking

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    salt = secrets.token_hex(16)   # one per release: hashes cannot be compared across releases
    by_notebook = {}
    for exercise in checking.all_exercises():
        by_notebook.setdefault(exercise.id[:2], []).append(public_spec(exercise, salt))
    for number, specs in sorted(by_notebook.items()):
        torch.save({"exercises": specs}, folder / f"{number}.pt")


def public_spec(exercise, salt):
    """Everything ``check`` needs about ``exercise``, as plain data with no reference in it."""
    from autograd_lab import checking

    meta = {f.name: getattr(exercise, f.name) for f in fields(exercise)
            if f.name not in _DROPPED_FIELDS and _is_plain(getattr(exercise, f.name))}
    meta["public_seeds"] = tuple(exercise.public_seeds)
    meta["hidden_count"] = len(exercise.hidden_seeds)
    records = checking.reference_records(exercise, exercise.public_seeds)
    if exercise.kind == "value":
        records = {seed: dict(record, output=form_record(record["output"])) for seed, record in records.items()}
    return {
        "meta": meta,
        "records": {int(seed): record for seed, record in records.items()},
        "inputs": _public_inputs(exercise) if exercise.kind == "function" else None,
        "misconceptions": [] if exercise.kind == "value" else [  # a prediction's would give its key away
            _misconception_data(exercise, m, salt, records) for m in exercise.misconceptions],
        "methods": [method_data(exercise.id, m) for m in getattr(exercise, "method", ())],
    }


def method_data(exercise_id, method):
    """A ``Method`` as data: its factory in ``checking/methods.py`` and arguments, or its one-line lambda.

    ``holds`` is a predicate on recorded facts (backward passes, silent writes), not
    on the reference, so its text reveals nothing; a lambda that reads any global or
    closure is refused, since text alone could not bring those back.
    """
    from autograd_lab.checking import methods

    if getattr(method, "origin", None):      # a ready-made factory says how it was made
        return {"factory": method.origin[0], "kwargs": dict(method.origin[1])}
    holds = method.holds
    fields_ = {"name": method.name, "message": method.message, "tag": method.tag, "sizes": method.sizes}
    factory = holds.__qualname__.split(".<locals>.")[0]
    if ".<locals>." in holds.__qualname__ and hasattr(methods, factory):
        kwargs = dict(zip(holds.__code__.co_freevars, (c.cell_contents for c in holds.__closure__ or ())))
        try:
            rebuilt = getattr(methods, factory)(**kwargs)
        except TypeError:
            rebuilt = None
        if rebuilt is not None and all(getattr(rebuilt, k) == v for k, v in fields_.items()):
            return {"factory": factory, "kwargs": kwargs}
    text = _lambda_text(holds)
    if text is None or holds.__code__.co_names or holds.__code__.co_freevars:
        raise ValueError(f"{exercise_id}: the release cannot carry the method {method.name!r}: write its "
                         "predicate as a one-line lambda on `facts` only, or use a factory of checking/methods.py.")
    return {"lambda": text, **fields_, "watch": list(method.watch), "grad_phase": method.grad_phase}


def _lambda_text(function):
    """The source text of a lambda (the longest piece of its lines that parses as one)."""
    try:
        source = inspect.getsource(function)
    except (OSError, TypeError):
        return None
    start = source.find("lambda")
    for end in range(len(source), start, -1):
        try:
            tree = ast.parse(source[start:end].strip(), mode="eval")
        except SyntaxError:
            continue
        if isinstance(tree.body, ast.Lambda):
            return source[start:end].strip()
    return None


def _is_plain(value):
    if isinstance(value, (tuple, list)):
        return all(_is_plain(item) for item in value)
    return isinstance(value, _PLAIN)


def _public_inputs(exercise):
    """Per public seed, the pickled arguments; ``None`` when they need code the release leaves out."""
    blobs = {}
    for seed in exercise.public_seeds:
        buffer = io.BytesIO()
        try:
            args = exercise.inputs(seed, False)
            # torch.save drops .grad: carry the gradients beside the arguments (04.sgd_step).
            torch.save({"args": args, "grads": [readable_grad(t) for t in flat_tensors(args)]}, buffer)
        except Exception:  # objects made by local functions (a DDP comm hook): not data
            return None
        data = buffer.getvalue()
        if b"autograd_lab_solutions" in data:  # a class defined next to the reference
            return None
        blobs[int(seed)] = torch.frombuffer(bytearray(data), dtype=torch.uint8).clone()
    return blobs if _round_trips(exercise, blobs) else None


def _round_trips(exercise, blobs):
    """True when the reference, called on the reloaded inputs, records what it records on the originals.

    ``torch.save`` keeps a tensor's data but not the graph behind it, so an input
    made of graphs (01.count_nodes) reloads as something else: such inputs need
    code, and the release leaves them out.
    """
    from autograd_lab.checking import observe
    from autograd_lab.checking.judge import judge_case
    from autograd_lab.checking.public import _inputs_from

    reloaded = replace(exercise, inputs=_inputs_from(blobs, exercise.id))
    for seed in exercise.public_seeds:
        try:
            record = observe(reloaded, exercise.reference, seed, timeout=30)
        except Exception:
            return False
        original = observe(exercise, exercise.reference, seed, timeout=30)
        if judge_case(exercise, record, original).status != "passed":
            return False
    return True


def _misconception_data(exercise, misconception, salt, records=None):
    """A ``claims`` detector as its key and value; any other as the bank answer's records."""
    detect = misconception.detect
    if getattr(detect, "__qualname__", "").startswith("claims."):
        names = detect.__code__.co_freevars
        cells = dict(zip(names, (c.cell_contents for c in detect.__closure__)))
        return {"tag": misconception.tag, "message": misconception.message, "form": "claims",
                "key": cells["key"], "value": cells["value"]}
    return {"tag": misconception.tag, "message": misconception.message, "form": "fingerprint",
            "prints": _fingerprints(exercise, misconception, salt, records)}


def _fingerprints(exercise, misconception, salt, references=None):
    from autograd_lab.checking import observe

    prints = []
    for wrong in exercise.wrong_answers:
        if wrong.expect not in (misconception.tag, "error"):
            continue
        for seed in exercise.public_seeds:
            record = observe(exercise, wrong.answer, seed, timeout=30)
            if record["status"] == "error" and references is not None and \
                    _names_error(exercise, misconception, record, references[seed]):
                error = {"error": error_kind(record["error"])}     # self-study names this error's cause
                prints += [error] if error not in prints else []
            if record["status"] != "ok" or wrong.expect != misconception.tag:
                continue
            if references is not None and not _names(exercise, misconception, record, references[seed]):
                continue    # on this case the bank answer's record shows another cause (or none): no print
            if exercise.kind == "value":
                prints.append({"output": form_record(record["output"])})
            else:
                # ``expected``: the reference's output on the same case, so the print names this mistake on a
                # case like the one it was made on, not an output that is right (or another mistake) elsewhere.
                prints.append({key: record.get(key) for key in ("output", "args_after", "input_grads")} |
                              ({} if references is None else {"expected": references[seed]["output"]}))
    return prints


def _names(exercise, misconception, record, reference):
    """Whether self-study's detector names ``misconception`` for ``record`` (a failed case)."""
    from autograd_lab.checking.detectors import named
    from autograd_lab.checking.findings import Finding

    alone = replace(exercise, misconceptions=(misconception,))
    return named(alone, Finding("wrong_value", ""), record, reference).tag == misconception.tag


def _names_error(exercise, misconception, record, reference):
    from autograd_lab.checking.detectors import named_error
    from autograd_lab.checking.findings import Finding

    alone = replace(exercise, misconceptions=(misconception,))
    return named_error(alone, Finding("error", ""), record, reference).message != ""


def main(args):
    """Entry point of ``autograd-lab release``."""
    release_key()   # the first release makes the instructor's key, which signs the notebooks' stamps
    path = build(args.out, self_study=args.self_study)
    kind = "self-study build (with solutions)" if args.self_study else "student build (no solutions)"
    key = os.environ.get(KEY_ENV) or Path.home() / ".config" / "autograd-lab" / "release.key"
    print(f"Wrote a {kind} to {path}: notebooks/, autograd_lab/, README.md (how to set it up) and "
          f"requirements.txt (put {path} on sys.path or PYTHONPATH). The notebooks are stamped with a signature "
          f"made with {key}: keep that file, the grader needs it to trust a stamp.")
    return 0
