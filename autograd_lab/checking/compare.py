"""Compare one recorded value with the reference's and name what went wrong.

``compare_values`` walks both records in step and returns the first ``Finding``
(a misconception tag and a message) or ``None`` when they agree.  Metadata is
reported before values (a wrong shape makes every number wrong), and before
saying "wrong value" the usual mistakes are recognised: ``none``, ``all_zeros``,
``doubled``, ``sign_flipped``, ``scaled``.  Each is named only when the answer has
that property on every element (within the tolerance): ``doubled`` means
student = 2 x reference everywhere, not "larger"; ``scaled`` needs at least two
nonzero expected elements, since a single number is always some multiple of another.

Values agree under ``torch.testing.assert_close``'s rule and per-dtype default
tolerances.  The torch functions used here are bound when this module is
imported, so a student who later replaces ``torch.allclose``, ``torch.isclose``
or ``torch.testing.assert_close`` changes nothing.
"""

import math
import re
from dataclasses import dataclass

import torch

from .findings import MESSAGES, Finding
from .forms import compare_form, is_form
from .records import KIND, describe

_isclose = torch.isclose
_all = torch.all
_abs = torch.abs
_where = torch.where
_zeros_like = torch.zeros_like
_argmax = torch.argmax
_unravel = torch.unravel_index
_isnan = torch.isnan
_tensor = torch.tensor

# torch.testing.assert_close's per-dtype defaults (rtol, atol); other dtypes compare exactly.
DEFAULT_TOLERANCES = {
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
    torch.float32: (1.3e-6, 1e-5),
    torch.float64: (1e-7, 1e-7),
    torch.complex64: (1.3e-6, 1e-5),
    torch.complex128: (1e-7, 1e-7),
}
_SUFFIX = re.compile(r"\d+$")
# A failed function exercise's value is never shown: say which entry is wrong and what came, not
# what it should be (docs/authoring-exercises.md, "What a failure message may show").
NOT_EXPECTED = "which is not the expected value"

@dataclass(frozen=True)
class Tolerance:
    rtol: object = None
    atol: object = None

    def for_dtype(self, dtype):
        rtol, atol = DEFAULT_TOLERANCES.get(dtype, (0.0, 0.0))
        return (rtol if self.rtol is None else self.rtol, atol if self.atol is None else self.atol)


def grad_fn_family(name):
    """``MmBackward0`` -> ``MmBackward``: tolerant of PyTorch renumbering its nodes."""
    return None if name is None else _SUFFIX.sub("", name)


def compare_values(student, reference, where, tolerance, *, state=False, grads=False, blind=False):
    """The first difference between two records, or ``None``.

    ``state``: also compare the autograd state of tensors.  ``grads``: also
    compare tensors' ``.grad`` (for arguments changed by side effect).  ``blind``:
    a prediction's comparison, which says which entries are wrong and never what
    they should be (no expected value, no factor or sign that would give it away).
    """
    if is_form(reference):  # a student build's prediction: only its form ships
        return compare_form(student, reference, where)
    if blind:
        return compare_blind(student, reference, where, tolerance)
    if isinstance(reference, dict) and reference.get(KIND) == "tensor":
        return _compare_tensor(student, reference, where, tolerance, state, grads)
    if isinstance(reference, dict) and KIND in reference:
        return _compare_container(student, reference, where, tolerance, state, grads)
    return _compare_plain(student, reference, where)


def _is_kind(record, *kinds):
    return isinstance(record, dict) and record.get(KIND) in kinds


def _is_ndarray(record):
    """A NumPy array returned as it is (adversarial round 10, F12): the prompts ask for tensors and lists."""
    return _is_kind(record, "object") and record.get("type") == "ndarray"


_NUMPY_TO_TENSOR = " A NumPy array is not a tensor: `torch.from_numpy(...)` makes one from it."
_NUMPY_TO_LIST = " `.tolist()` makes a list from a NumPy array."


def _compare_container(student, reference, where, tolerance, state, grads):
    kind = reference[KIND]
    if kind in ("tuple", "list"):
        if not _is_kind(student, "tuple", "list"):     # not the length: it can be part of the answer (08.shard's
            # ceil(n / world), adv-05-08-r9 note 3), as below
            return Finding("structure", f"{where}: expected a {kind}, got {describe(student)}."
                                        + _NUMPY_TO_LIST * _is_ndarray(student))
        if len(student["items"]) != len(reference["items"]):   # the expected length can be the answer (05.amp_step_order)
            return Finding("structure", f"{where}: expected a {kind} of another length (yours has "
                                        f"{len(student['items'])} {'entry' if len(student['items']) == 1 else 'entries'}).")
        pairs = [(f"{where}[{i}]", s, r) for i, (s, r) in enumerate(zip(student["items"], reference["items"]))]
    elif kind in ("dict", "module"):
        field = "items" if kind == "dict" else "parameters"
        if not _is_kind(student, kind):
            return Finding("structure", f"{where}: expected a {describe(reference)}, got {describe(student)}.")
        finding = _compare_keys(student[field], reference[field], where)
        if finding:
            return finding
        label = "[{!r}]" if kind == "dict" else ".{}"
        pairs = [(where + label.format(key), student[field][key], reference[field][key]) for key in reference[field]]
    else:  # an object we can only compare by type and repr
        if not _is_kind(student, "object") or (student["type"], student["repr"]) != (reference["type"], reference["repr"]):
            return Finding("wrong_value", f"{where}: got {describe(student)}, {NOT_EXPECTED}.")
        return None
    for label, s, r in pairs:
        finding = compare_values(s, r, label, tolerance, state=state, grads=grads or kind == "module")
        if finding:
            return finding
    return None


def _compare_keys(student, reference, where):
    missing = [key for key in reference if key not in student]
    extra = [key for key in student if key not in reference]
    if not missing and not extra:
        return None
    parts = []
    if missing:
        parts.append("missing " + ", ".join(repr(k) for k in missing))
    if extra:
        parts.append("unexpected " + ", ".join(repr(k) for k in extra))
    return Finding("structure", f"{where}: keys differ: {'; '.join(parts)}.")


def _compare_plain(student, reference, where):
    """None, bool, int, float, str: exact, except floats within a small tolerance.

    The reference's value is never shown (adversarial round 7: "expected 11, got 10" in
    06.saved_for_segments handed over the count the exercise asks the student to work out).
    """
    if reference is None:
        return None if student is None else Finding("wrong_value", f"{where}: got {describe(student)}, {NOT_EXPECTED}.")
    if isinstance(reference, bool) or isinstance(student, bool):
        same = type(student) is type(reference) and student == reference
        return None if same else Finding("wrong_value", f"{where}: got {_short(student)}, {NOT_EXPECTED}.")
    if isinstance(reference, (int, float)):
        if not isinstance(student, (int, float)):
            return Finding("structure", f"{where}: expected a number, got {describe(student)}.")
        if math.isclose(student, reference, rel_tol=1e-6, abs_tol=1e-8) or (
                math.isnan(student) and math.isnan(reference)):
            return None
        return Finding("wrong_value", f"{where}: got {student!r}, {NOT_EXPECTED}.")
    if student == reference:
        return None
    return Finding("wrong_value", f"{where}: got {_short(student)}, {NOT_EXPECTED}.")


def _short(value):
    if isinstance(value, (bool, int, float, str)) or value is None:
        text = repr(value)
        return text if len(text) <= 60 else text[:57] + "..."
    return describe(value)


def _compare_tensor(student, reference, where, tolerance, state, grads):
    if student is None:
        return Finding("none", MESSAGES["none"].format(where=where.capitalize()))
    if not _is_kind(student, "tensor"):
        return Finding("structure", f"{where}: expected a {describe(reference)}, got {describe(student)}."
                                    + _NUMPY_TO_TENSOR * _is_ndarray(student))
    finding = (_compare_metadata(student, reference, where)
               or compare_tensor_values(student["value"], reference["value"], where, tolerance))
    if finding is None and state:
        finding = _compare_state(student, reference, where)
    if finding is None and grads:
        finding = _compare_grad(student, reference, where, tolerance)
    return finding


def _compare_metadata(student, reference, where):
    s, r = student["value"], reference["value"]
    if s.shape != r.shape:
        return Finding("shape", f"{where}: expected shape {tuple(r.shape)}, got {tuple(s.shape)}.")
    if s.dtype != r.dtype:
        return Finding("dtype", f"{where}: expected dtype {r.dtype}, got {s.dtype}.")
    if student["device"] != reference["device"]:
        return Finding("device", f"{where}: expected device {reference['device']}, got {student['device']}.")
    return None


def _compare_state(student, reference, where):
    checks = (
        ("requires_grad", student["requires_grad"], reference["requires_grad"]),
        ("is_leaf", student["is_leaf"], reference["is_leaf"]),
        ("grad_fn", grad_fn_family(student["grad_fn"]), grad_fn_family(reference["grad_fn"])),
        (".grad", _set_or_none(student["grad"]), _set_or_none(reference["grad"])),
        ("_version", student["version"], reference["version"]),
    )
    for name, actual, expected in checks:
        if actual != expected:
            return Finding("state", f"{where}: expected {name} {expected}, got {actual}.")
    return None


def _set_or_none(grad):
    return "None" if grad is None else "set"


def _compare_grad(student, reference, where, tolerance):
    label = f"the .grad of {where}"
    if reference["grad"] is None:
        if student["grad"] is None:
            return None
        return Finding("state", f"{label}: expected None, got a tensor.")
    if student["grad"] is None:
        return Finding("none", MESSAGES["none"].format(where=label[:1].upper() + label[1:]))
    s, r = student["grad"], reference["grad"]
    if s.shape != r.shape or s.dtype != r.dtype:
        return Finding("shape", f"{label}: expected shape {tuple(r.shape)} and dtype {r.dtype}, "
                                f"got {tuple(s.shape)} and {s.dtype}.")
    return compare_tensor_values(s, r, label, tolerance)


def compare_tensor_values(s, r, where, tolerance):
    """Values of two tensors of equal metadata; on a mismatch, name the misconception."""
    rtol, atol = tolerance.for_dtype(r.dtype)
    if _close(s, r, rtol, atol):
        return None
    return _name_mismatch(s, r, where, rtol, atol) or _worst_error(s, r, where, rtol, atol)


def _close(s, r, rtol, atol):
    """``torch.testing.assert_close``'s rule, |s - r| <= atol + rtol |r| with NaN equal to NaN,
    computed with functions bound at import (assert_close itself looks up torch.isclose late)."""
    if not (s.is_floating_point() or s.is_complex()):
        return bool(_all(s == r))
    same = (s == r) | (_isnan(s) & _isnan(r))   # == also covers equal infinities
    within = _abs(s - r) <= atol + rtol * _abs(r)
    return bool(_all(same | within))


def _name_mismatch(s, r, where, rtol, atol):
    if not (s.is_floating_point() or s.is_complex()) or r.numel() == 0 or not bool((r != 0).any()):
        return None
    label = where[:1].upper() + where[1:]
    if not bool((s != 0).any()):
        return Finding("all_zeros", MESSAGES["all_zeros"].format(where=label))
    for factor, tag in ((2.0, "doubled"), (-1.0, "sign_flipped")):
        if _close(s, r * factor, rtol, atol):
            return Finding(tag, MESSAGES[tag].format(where=label))
    if int((r != 0).sum()) < 2:  # one number is always some multiple of another: that says nothing
        return None
    factor = _best_factor(s, r)
    if factor is not None and _close(s, r * factor, max(rtol, 1e-5), atol):
        return Finding("scaled", MESSAGES["scaled"].format(where=label, factor=factor))
    return None


def _best_factor(s, r):
    """The least-squares k in s = k r, unless it is 0, 1, -1 or 2 (named elsewhere) or within 1% of 1.

    A k that prints as "1 times" (04.sgd_step's decay after the step: 1 - lr * wd) is no sum-vs-mean
    factor; such an answer gets the plain comparison, and its exercise's own diagnosis.
    """
    if s.is_complex() or r.is_complex():
        return None
    s64, r64 = s.to(torch.float64), r.to(torch.float64)
    factor = float((s64 * r64).sum() / (r64 * r64).sum())
    if (not math.isfinite(factor) or any(math.isclose(factor, k, abs_tol=1e-6) for k in (0, -1, 2))
            or math.isclose(factor, 1, rel_tol=1e-2)):
        return None
    return factor


def _worst_error(s, r, where, rtol, atol):
    """``wrong_value``: how many elements differ, where the largest difference is, and its size as a band.

    The reference's value is never shown, nor an exact error that, with the student's own value,
    would give it back: the relative error is said as a band (below 1%, 1% to 10%, ...).
    """
    s64, r64 = s.to(torch.float64), r.to(torch.float64)
    diff = _abs(s64 - r64)
    diff = _where(_isnan(diff), _zeros_like(diff) + math.inf, diff)
    worst = int(_argmax(diff.reshape(-1))) if diff.numel() else 0
    index = tuple(int(i) for i in _unravel(_tensor(worst), tuple(r.shape))) if r.dim() else ()
    rel = float((diff / _abs(r64).clamp_min(1e-12)).reshape(-1)[worst]) if diff.numel() else 0.0
    mismatched = int((~_isclose(s64, r64, rtol=rtol, atol=atol, equal_nan=True)).sum())
    return Finding("wrong_value", (
        f"{where}: {mismatched} of {r.numel()} elements differ from the expected values; the largest difference "
        f"is at index {index} (your value there: {float(s64.reshape(-1)[worst]):.4g}), {_band(rel)}."))


def _band(rel):
    """A relative error in words, coarse enough not to give the expected value back."""
    if not math.isfinite(rel):
        return "where one of the two is not finite"
    for limit, words in ((1e-2, "off by less than 1%"), (1e-1, "off by 1% to 10%"), (1.0, "off by 10% to 100%")):
        if rel < limit:
            return words
    return "off by more than the expected value's own size"


# --- predictions: how many entries are wrong, never which or what they should be ----------------

def _entry_kind(value):
    """An entry's kind as a prediction's form sees it: bool, number, string, or a record's kind."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, dict) and KIND in value:
        return value[KIND]
    return type(value).__name__


def compare_blind(student, reference, where, tolerance):
    """``structure`` for a container of another form, else ``wrong_value`` naming the wrong entries only."""
    if _is_kind(reference, "dict", "tuple", "list") and _is_kind(student, "dict", "tuple", "list"):
        if reference[KIND] == "dict":
            if student[KIND] != "dict":
                return Finding("structure", f"{where}: expected a dict.")
            finding = _compare_keys(student["items"], reference["items"], where)
            if finding:
                return finding
            pairs = [(f"{where}[{key!r}]", student["items"][key], item) for key, item in reference["items"].items()]
        else:
            if student[KIND] == "dict":
                return Finding("structure", f"{where}: expected a {reference[KIND]}.")
            if len(student["items"]) != len(reference["items"]):
                return Finding("structure", f"{where}: expected a {reference[KIND]} of length "
                                            f"{len(reference['items'])}, got length {len(student['items'])}.")
            pairs = [(f"{where}[{i}]", s, r) for i, (s, r) in enumerate(zip(student["items"], reference["items"]))]
        wrong = [label for label, s, r in pairs if compare_values(s, r, label, tolerance) is not None]
        if not wrong:
            return None
        # Which entries are wrong is not said: for a dict of booleans or a choice among a few
        # options, naming them hands over the key in one resubmission. A count is given only
        # when every entry has the kind of its key's entry (ints for bools would all count).
        if any(_entry_kind(s) != _entry_kind(r) for _, s, r in pairs):
            return Finding("wrong_value", f"{where}: not the expected answer; some entries are not of the kind "
                                          "the prompt asks for, so they were not compared.")
        return Finding("wrong_value", f"{where}: not the expected answer ({len(wrong)} of {len(pairs)} entries "
                                      "wrong; which ones is not said).")
    if _is_kind(reference, "dict", "tuple", "list"):
        return Finding("structure", f"{where}: expected a {reference[KIND]}.")
    if _is_kind(reference, "tensor"):
        if not _is_kind(student, "tensor"):   # the prompt fixes the shape and dtype; the same words as a release's
            value = reference["value"]
            return Finding("structure", f"{where}: expected a {str(value.dtype).replace('torch.', '')} tensor of "
                                        f"shape {tuple(value.shape)}, got {describe(student)}."
                                        + " `torch.tensor(...)` makes one from a list." * _is_kind(student, "list", "tuple"))
        finding = _compare_metadata(student, reference, where)
        if finding:
            return finding
    elif isinstance(reference, (int, float)) and not isinstance(reference, bool) and not (
            isinstance(student, (int, float)) and not isinstance(student, bool)):
        return Finding("structure", f"{where}: expected a number, got {describe(student)}.")
    if compare_values(student, reference, where, tolerance) is None:
        return None
    return Finding("wrong_value", f"{where} is not the expected answer.")
