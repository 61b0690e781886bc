"""Predictions in a student build: the form of the answer ships, never the key.

A prediction's key space is small (four booleans, six names in some order, a factor
among a handful): any key that ships, hashed or not, and any local check that says
"right" or "wrong", can be searched offline in seconds (a salted hash per entry was
cracked in 31 s; a per-entry verdict is an oracle that needs at most a few tries per
entry).  So a release carries only what the prompt already fixes, the *form*: a dict's
keys, a list's length, each entry's kind (a bool, a number, a name, a tensor's shape
and dtype).  ``check`` in a release says whether a prediction has that form, and that
it is graded when submitted; the grader, which has the key, says which entries are
wrong (``compare``'s blind comparison), never what they should be.
"""

from .findings import Finding
from .records import KIND

FORM = "form"
GRADED_LATER = "graded_later"
HIDDEN_TEXT = "(not part of the student build)"


def is_form(record):
    return isinstance(record, dict) and record.get(KIND) == FORM


def form_record(record):
    """The form of a prediction's record: its container and the kind of each entry, no value."""
    kind = record.get(KIND) if isinstance(record, dict) else None
    if kind == "dict":
        entries = {key: _kind(item) for key, item in record["items"].items()}
        shape = "dict"
    elif kind in ("tuple", "list"):
        entries = {str(i): _kind(item) for i, item in enumerate(record["items"])}
        shape = "list"
    else:
        entries, shape = {"": _kind(record)}, "scalar"
    return {KIND: FORM, "shape": shape, "entries": entries, "repr": HIDDEN_TEXT}


def _kind(record):
    if isinstance(record, bool):
        return "bool"
    if isinstance(record, (int, float)):
        return "number"
    if isinstance(record, str):
        return "text"
    if record is None:
        return "None"
    if isinstance(record, dict) and record.get(KIND) == "tensor":
        value = record["value"]
        return f"tensor{tuple(value.shape)}:{str(value.dtype).replace('torch.', '')}"
    if isinstance(record, dict) and record.get(KIND) == "object":
        return f"{record.get('type', 'other')} object"       # a Fraction, a numpy scalar: named by its type
    if isinstance(record, dict) and KIND in record:
        return str(record[KIND])
    return type(record).__name__


_SHOWN = {"bool": "True or False", "number": "a number", "text": "a string", "None": "None"}
# A ratio measured with tensors, or kept exact as a Fraction, is the right number in another type.
_NUMBER_ADVICE = " Give a plain `int` or `float`: `float(...)` turns a 0-d tensor or a fraction into one."
_TENSOR_ADVICE = " `torch.tensor(...)` makes one from a list."


def _described(kind):
    if kind.startswith("tensor("):
        shape, _, dtype = kind[len("tensor"):].partition(":")
        return f"a {dtype} tensor of shape {shape}"
    return _SHOWN.get(kind, f"a {kind}")


def unlisted_name(student, choices, where):
    """A ``structure`` finding for a text entry that is not one of ``choices`` (the prompt's public list), else None.

    Said in ``check()`` and by the grader alike: a name with a case or space slip is not a
    wrong diagnosis, and the list is the prompt's, so naming it gives no key away.
    """
    if not choices:
        return None
    kind = student.get(KIND) if isinstance(student, dict) else None
    items = (student["items"].items() if kind == "dict" else enumerate(student["items"]) if kind in ("tuple", "list")
             else [(None, student)])
    for key, item in items:
        if isinstance(item, str) and item not in choices:
            label = where if key is None else f"{where}[{key!r}]"
            return Finding("structure", f"{label}: expected a name the prompt lists ({', '.join(choices)}), got "
                                        f"{item!r}: write the name exactly as the table does.")
    return None


def compare_form(student, form, where):
    """A ``structure`` finding when the prediction's form differs, else the ``graded_later`` finding."""
    if student is None:
        return Finding("structure", f"{where}: expected a prediction, got None.")
    mine = form_record(student)
    shape = form["shape"]
    if mine["shape"] != shape:
        if shape == "scalar":   # a tensor asked for and a list given (round 7, 02.pick_gradient): name the tensor
            return Finding("structure", f"{where}: expected {_described(form['entries'][''])}, got a "
                                        f"{mine['shape']}." + _TENSOR_ADVICE * form["entries"][""].startswith("tensor("))
        wanted = {"dict": "a dict", "list": "a list"}[shape]
        return Finding("structure", f"{where}: expected {wanted}.")
    expected, got = form["entries"], mine["entries"]
    if shape == "dict" and set(expected) != set(got):
        missing, extra = sorted(set(expected) - set(got)), sorted(set(got) - set(expected))
        parts = (["missing " + ", ".join(map(repr, missing))] if missing else []) + (
            ["unexpected " + ", ".join(map(repr, extra))] if extra else [])
        return Finding("structure", f"{where}: keys differ: {'; '.join(parts)}.")
    if shape == "list" and len(expected) != len(got):
        return Finding("structure", f"{where}: expected a list of length {len(expected)}, got length {len(got)}.")
    for key, kind in expected.items():
        if got[key] != kind and not (kind == "number" and got[key] == "number"):
            label = where if shape == "scalar" else (f"{where}[{key!r}]" if shape == "dict" else f"{where}[{key}]")
            return Finding("structure", f"{label}: expected {_described(kind)}, got {_described(got[key])}."
                                        + _NUMBER_ADVICE * (kind == "number"))
    return Finding(GRADED_LATER, "Your prediction has the expected form. It is graded when you submit: this "
                                 "build does not hold the key, so it cannot tell you whether it is right.")
