"""Predictions in a student build: salted hashes of the expected entries, and how an answer is compared with them.

A value exercise's key is not shipped: ``hash_record`` turns it into one salted hash
per dict key or list item, and ``compare_hashed`` says which entries of an answer
differ, never what they should be.
"""

import hashlib

from .findings import MESSAGES, Finding
from .records import KIND

HASHED = "hashed"
HIDDEN_TEXT = "(not shown in the student build)"
# Floats are hashed after rounding to this many significant digits: the student build
# compares predictions to 6 digits, where self-study uses assert_close's tolerances.
_DIGITS = 6


def is_hashed(record):
    return isinstance(record, dict) and record.get(KIND) == HASHED


def _canonical(record):
    """A text that is equal for values self-study would call equal (up to rounding)."""
    if isinstance(record, bool) or record is None or isinstance(record, str):
        return f"{type(record).__name__}:{record!r}"
    if isinstance(record, (int, float)):
        return f"number:{float(record) + 0.0:.{_DIGITS}g}"  # + 0.0: -0.0 and 0.0 are equal
    if isinstance(record, dict) and record.get(KIND) == "tensor":
        value = record["value"]
        numbers = ",".join(f"{float(x) + 0.0:.{_DIGITS}g}" for x in value.reshape(-1).tolist())
        return f"tensor:{str(value.dtype)}:{tuple(value.shape)}:{numbers}"
    if isinstance(record, dict) and record.get(KIND) in ("tuple", "list"):
        return "seq:[" + ";".join(_canonical(item) for item in record["items"]) + "]"
    if isinstance(record, dict) and record.get(KIND) == "dict":
        return "dict:{" + ";".join(f"{k!r}={_canonical(v)}" for k, v in sorted(record["items"].items())) + "}"
    if isinstance(record, dict) and KIND in record:
        return f"object:{record.get('type')}:{record.get('repr')}"
    return f"other:{record!r}"


def digest(salt, record):
    return hashlib.sha256(f"{salt}\n{_canonical(record)}".encode()).hexdigest()


def hash_record(record, salt):
    """The hashed form of a value's record: one salted hash per dict key or list item."""
    kind = record.get(KIND) if isinstance(record, dict) else None
    if kind == "dict":
        entries = {key: digest(salt, item) for key, item in record["items"].items()}
        shape = "dict"
    elif kind in ("tuple", "list"):
        entries = {str(i): digest(salt, item) for i, item in enumerate(record["items"])}
        shape = kind
    else:
        entries, shape = {"": digest(salt, record)}, "scalar"
    hashed = {KIND: HASHED, "shape": shape, "salt": salt, "entries": entries, "repr": HIDDEN_TEXT}
    if shape == "scalar":
        hashed.update(_scalar_clues(record, salt))
    return hashed


def _scalar_clues(record, salt):
    """What self-study's built-in detectors need, without the value: a tensor's shape and dtype
    (the prompt fixes them), and the hash of the negated value (``sign_flipped``)."""
    clues = {}
    if isinstance(record, dict) and record.get(KIND) == "tensor":
        value = record["value"]
        clues["tensor"] = {"shape": list(value.shape), "dtype": str(value.dtype)}
        if value.is_floating_point() or value.is_complex():
            clues["negated"] = digest(salt, dict(record, value=-value))
    elif isinstance(record, (int, float)) and not isinstance(record, bool) and record != 0:
        clues["negated"] = digest(salt, -record)
    return clues


def _scalar_finding(student, expected, where):
    tensor = expected.get("tensor")
    if tensor is not None:
        if not (isinstance(student, dict) and student.get(KIND) == "tensor"):
            return Finding("structure", f"{where}: expected a tensor of shape {tuple(tensor['shape'])}.")
        value = student["value"]
        if list(value.shape) != tensor["shape"]:
            return Finding("shape", f"{where}: expected shape {tuple(tensor['shape'])}, got {tuple(value.shape)}.")
        if str(value.dtype) != tensor["dtype"]:
            return Finding("dtype", f"{where}: expected dtype {tensor['dtype']}, got {value.dtype}.")
    mine = hash_record(student, expected["salt"])["entries"]
    if mine == expected["entries"]:
        return None
    if expected.get("negated") and mine.get("") == expected["negated"]:
        return Finding("sign_flipped", MESSAGES["sign_flipped"].format(where=where))
    return Finding("wrong_value", f"{where} is not the expected answer.")


def compare_hashed(student, expected, where):
    """The first difference between a student's record and a hashed one; ``None`` when equal."""
    mine = hash_record(student, expected["salt"]) if student is not None else None
    shape = expected["shape"]
    if mine is None or (shape != "scalar" and mine["shape"] not in (("tuple", "list") if shape != "dict" else ("dict",))):
        return Finding("structure", f"{where}: expected a {shape if shape != 'scalar' else 'single value'}.")
    if shape == "scalar":
        return _scalar_finding(student, expected, where)
    if shape == "dict":
        missing = sorted(set(expected["entries"]) - set(mine["entries"]))
        extra = sorted(set(mine["entries"]) - set(expected["entries"]))
        if missing or extra:
            parts = (["missing " + ", ".join(map(repr, missing))] if missing else []) + (
                ["unexpected " + ", ".join(map(repr, extra))] if extra else [])
            return Finding("structure", f"{where}: keys differ: {'; '.join(parts)}.")
        wrong = [key for key in expected["entries"] if mine["entries"][key] != expected["entries"][key]]
        label = "{}[{!r}]"
    else:
        if len(mine["entries"]) != len(expected["entries"]):
            return Finding("structure", f"{where}: expected a {shape} of length {len(expected['entries'])}, "
                                        f"got length {len(mine['entries'])}.")
        wrong = [key for key in expected["entries"] if mine["entries"][key] != expected["entries"][key]]
        label = "{}[{}]"
    if not wrong:
        return None
    shown = ", ".join(label.format(where, key) for key in wrong)
    return Finding("wrong_value", f"{shown}: not the expected answer ({len(wrong)} of {len(expected['entries'])} wrong).")


