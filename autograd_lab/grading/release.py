"""``autograd-lab release``: the student build, with no solutions in it (docs/contracts.md §3).

``build(out_dir)`` writes

* ``out_dir/notebooks/``: the shipped notebooks, outputs cleared;
* ``out_dir/autograd_lab/``: the package (which never holds a solution) with
  ``public/<NN>.pt`` added (see ``checking/public.py`` for what those hold).

``--self-study`` writes ``out_dir/autograd_lab_solutions/`` beside it instead of
``public/`` (so ``solution()`` works), exactly as the repository.
The grader calls ``build`` once per batch and puts the result on its kernels' path.
"""

import ast
import inspect
import io
import secrets
import shutil
from dataclasses import fields, replace
from pathlib import Path

import nbformat
import torch

from autograd_lab.checking.observe import flat_tensors
from autograd_lab.checking.hashed import hash_record
from autograd_lab.checking.records import readable_grad

PACKAGE = Path(__file__).resolve().parents[1]
SOLUTIONS = PACKAGE.parent / "autograd_lab_solutions"
NOTEBOOKS = PACKAGE.parent / "notebooks"
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
    _write_notebooks(Path(notebooks_dir) if notebooks_dir else NOTEBOOKS, out / "notebooks")
    return str(out)


def _write_notebooks(source, target):
    if target.exists():  # no notebook of an older release stays behind
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for path in sorted(source.glob("[0-9][0-9]_*.ipynb")):
        notebook = nbformat.read(str(path), as_version=4)
        for cell in notebook.cells:
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = [], None
        nbformat.write(notebook, str(target / path.name))


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
        records = {seed: dict(record, output=hash_record(record["output"], salt)) for seed, record in records.items()}
    return {
        "meta": meta,
        "records": {int(seed): record for seed, record in records.items()},
        "inputs": _public_inputs(exercise) if exercise.kind == "function" else None,
        "misconceptions": [_misconception_data(exercise, m, salt) for m in exercise.misconceptions],
        "methods": [method_data(exercise.id, m) for m in getattr(exercise, "method", ())],
    }


def method_data(exercise_id, method):
    """A ``Method`` as data: its factory in ``checking/methods.py`` and arguments, or its one-line lambda.

    ``holds`` is a predicate on recorded facts (backward passes, silent writes), not
    on the reference, so its text reveals nothing; a lambda that reads any global or
    closure is refused, since text alone could not bring those back.
    """
    from autograd_lab.checking import methods

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
    return {"lambda": text, **fields_}


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


def _misconception_data(exercise, misconception, salt):
    """A ``claims`` detector as its key and value; any other as the bank answer's records."""
    detect = misconception.detect
    if getattr(detect, "__qualname__", "").startswith("claims."):
        names = detect.__code__.co_freevars
        cells = dict(zip(names, (c.cell_contents for c in detect.__closure__)))
        return {"tag": misconception.tag, "message": misconception.message, "form": "claims",
                "key": cells["key"], "value": cells["value"]}
    return {"tag": misconception.tag, "message": misconception.message, "form": "fingerprint",
            "prints": _fingerprints(exercise, misconception.tag, salt)}


def _fingerprints(exercise, tag, salt):
    from autograd_lab.checking import observe

    prints = []
    for wrong in exercise.wrong_answers:
        if wrong.expect != tag:
            continue
        for seed in exercise.public_seeds:
            record = observe(exercise, wrong.answer, seed, timeout=30)
            if record["status"] != "ok":
                continue
            if exercise.kind == "value":
                prints.append({"output": hash_record(record["output"], salt)})
            else:
                prints.append({key: record.get(key) for key in ("output", "args_after", "input_grads")})
    return prints


def main(args):
    """Entry point of ``autograd-lab release``."""
    path = build(args.out, self_study=args.self_study)
    kind = "self-study build (with solutions)" if args.self_study else "student build (no solutions)"
    print(f"Wrote a {kind} to {path}: notebooks/ and autograd_lab/ (put {path} on sys.path or PYTHONPATH).")
    return 0
