"""Exercises of a student build, loaded from data instead of reference code.

A release (``autograd-lab release``, see ``docs/contracts.md`` §3) has no
``autograd_lab_solutions/``.  It has ``autograd_lab/public/<NN>.pt`` instead: one
file per notebook holding, per exercise,

* the public metadata (id, title, answer name, points, hints, compare kinds,
  tolerances, and any other plain field of ``Exercise``);
* the public inputs, pickled per public seed (each check loads a fresh copy,
  because answers may change their arguments);
* the reference's records on the public seeds, computed at release time.  For a
  value exercise (a prediction) the expected value is replaced by its *form*
  (``forms``: the keys, the length, each entry's kind), so the file does not say
  what the answer is, and ``check`` says the prediction is graded when submitted;
* each misconception of a function exercise reduced to data: a ``claims(key,
  value)`` detector keeps its key and value; any other detector is replaced by the
  records of the bank's wrong answer with that tag on the public seeds (a
  *fingerprint*): an answer whose records match it is named with that
  misconception.  A prediction's misconceptions do not ship (they would name
  entries of its key);
* each method as its factory and plain arguments (``methods.rebuild``), so the
  tape records in a grading kernel exactly what the grader judges.

What the student build cannot do that self-study can, and why, is in
``docs/instructors.md`` ("What `check()` can diagnose in a release").
"""

import io
import os
import re

import torch

from .compare import Tolerance, compare_values
from .detectors import claims
from .observe import flat_tensors
from .records import decode, encode
from .registry import Exercise, Misconception

PUBLIC_DIR = os.path.join(os.path.dirname(os.path.dirname(__file__)), "public")
NOT_IN_BUILD = ("`check` cannot run this exercise in the student build: its inputs are made by code "
                "(autograd graphs, a DDP hook) that the release leaves out with the solutions. Your answer "
                "is checked when the assignment is graded; test it on the notebook's own examples meanwhile.")


# --- misconceptions as data ------------------------------------------------------------

def fingerprint_detector(exercise_kind, compare, tolerance, prints):
    """A detector that matches an answer whose records equal one of the wrong answer's ``prints``."""
    tolerance = Tolerance(*tolerance)

    def detect(student, reference, args, *, student_run):
        if student_run.error is not None:     # a case where the answer raised: prints of the same error
            return any(fp.get("error") == error_kind(student_run.error) for fp in prints)
        return any("error" not in fp and _same_case(reference, fp, tolerance) and
                   _same_run(student_run, fp, compare, tolerance) for fp in prints)
    detect.__qualname__ = "fingerprint"
    return detect


def error_kind(error):
    """An error's text without where it was raised and without its numbers: what a bank answer's and a
    student's error share (``p in params`` raises about sizes that depend on the order of the list)."""
    return re.sub(r"\d+", "#", error.split(" (in `")[0])


def _same_case(reference, fingerprint, tolerance):
    """The print was made on a case with the same expected output (a print of an older release: any case)."""
    if "expected" not in fingerprint:
        return True
    expected = None if fingerprint["expected"] is None else encode(decode(fingerprint["expected"]))
    return compare_values(encode(reference), expected, "x", tolerance) is None


def _same_run(run, fingerprint, compare, tolerance):
    """Both sides go through decode then encode, so a module (decoded as a dict of parameters) compares alike."""
    def plain(record, grads=False):
        return None if record is None else encode(decode(record, grads=grads))

    pairs = [(encode(run.output), plain(fingerprint["output"]), False)]
    if "args" in compare and fingerprint.get("args_after") is not None:
        pairs += [(encode(a), plain(b, grads=True), True) for a, b in zip(run.args_after or (), fingerprint["args_after"])]
    if "grad" in compare and fingerprint.get("input_grads") is not None:
        if run.input_grads is None:
            return False
        pairs += [(None if a is None else encode(a), plain(b), False)
                  for a, b in zip(run.input_grads, fingerprint["input_grads"])]
    return all(compare_values(s, r, "x", tolerance, grads=g) is None for s, r, g in pairs)


# --- loading -------------------------------------------------------------------------

def available():
    """True when this package is a student build (it has ``public/`` data)."""
    return os.path.isdir(PUBLIC_DIR)


def load_all(register):
    """Register every exercise found in ``public/*.pt`` with ``register``."""
    if not available():
        raise RuntimeError("This autograd_lab has neither solutions/ nor public/, so it knows no exercise. "
                           "Use the repository, or a build made by `autograd-lab release --out DIR`.")
    for name in sorted(os.listdir(PUBLIC_DIR)):
        if name.endswith(".pt"):
            data = torch.load(os.path.join(PUBLIC_DIR, name), weights_only=True)
            for spec in data["exercises"]:
                register(build_exercise(spec))


def build_exercise(spec):
    """An ``Exercise`` from its public data: no reference, only records and inputs."""
    meta = dict(spec["meta"])
    kind, exercise_id = meta["kind"], meta["id"]
    hidden_count = meta.pop("hidden_count")
    # Placeholders: the count of hidden checks is public ("run when graded"), their seeds are not.
    meta["hidden_seeds"] = tuple(-n for n in range(1, hidden_count + 1))
    meta["public_seeds"] = tuple(meta["public_seeds"])
    tolerance = (meta.get("rtol"), meta.get("atol"))
    misconceptions = []
    for item in spec["misconceptions"]:
        if item["form"] == "claims":
            detect = claims(item["key"], item["value"])
        else:
            detect = fingerprint_detector(kind, tuple(meta["compare"]), tolerance, item["prints"])
        misconceptions.append(Misconception(item["tag"], item["message"], detect))
    if spec.get("methods"):
        meta["method"] = tuple(method_from(item) for item in spec["methods"])
    inputs = _inputs_from(spec.get("inputs"), exercise_id) if kind == "function" else None
    if kind == "value":
        meta["solution_code"] = f"{meta['answer_name']} = ...  # solutions are not part of this build"
    exercise = Exercise(reference=_no_reference(exercise_id), inputs=inputs,
                        misconceptions=tuple(misconceptions), **meta)
    object.__setattr__(exercise, "public_records", {int(k): v for k, v in spec["records"].items()})
    if kind == "function" and spec.get("inputs") is None:
        object.__setattr__(exercise, "checked_only_when_graded", NOT_IN_BUILD)
    return exercise


def with_inputs(exercise, inputs_by_seed, hidden_seeds=()):
    """``exercise`` calling answers on the grader's inputs: for a grading kernel that imports a release.

    The release has no hidden inputs, so the grader makes every input in its own
    process and sends them (``{seed: args}``); ``observe(with_inputs(...), answer, seed)``
    then records the answer on exactly those.  No reference is involved.
    """
    from dataclasses import replace

    seeds = tuple(int(seed) for seed in inputs_by_seed)
    hidden = tuple(int(seed) for seed in hidden_seeds)
    return replace(exercise, inputs=lambda seed, is_hidden: inputs_by_seed[seed],
                   public_seeds=tuple(s for s in seeds if s not in hidden), hidden_seeds=hidden)


def method_from(item):
    """A ``Method`` back from ``release.method_data``."""
    from . import methods

    if "factory" in item:
        return methods.rebuild((item["factory"], item["kwargs"]))
    holds = eval(item["lambda"], {"__builtins__": {}})  # our own release's text: a lambda on facts only
    return methods.Method(name=item["name"], holds=holds, message=item["message"], tag=item["tag"],
                          sizes=item["sizes"], watch=tuple(item.get("watch", ())),
                          grad_phase=item.get("grad_phase", False))


def _no_reference(exercise_id):
    def reference(*args, **kwargs):
        raise RuntimeError(f"{exercise_id}: the reference solution is not part of this student build.")
    return reference


def _inputs_from(pickled, exercise_id):
    def inputs(seed, hidden):
        if hidden or pickled is None or int(seed) not in pickled:
            raise RuntimeError(f"{exercise_id}: the inputs of case {seed} are not part of this student build; "
                               "this exercise is checked when it is graded.")
        # Our own file, written by the release: trusted, and it holds modules and optimizers.
        blob = pickled[int(seed)]
        saved = torch.load(io.BytesIO(bytes(blob.tolist())), weights_only=False)
        for tensor, grad in zip(flat_tensors(saved["args"]), saved["grads"]):
            if grad is not None:
                tensor.grad = grad
        return saved["args"]
    return inputs
