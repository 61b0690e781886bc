"""Turn what came back from a kernel into grades, in the grader's worker process.

The payload is untrusted bytes.  Before ``torch.load`` sees them, the archive's
layout is checked (stored, not compressed; few, small entries; no storage that
declares more elements than the archive holds bytes).  It is then loaded with
``torch.load(weights_only=True)`` (plain containers and tensors only, no code
runs), walked once with a budget (depth, values, tensor elements), checked
against the shape of the reference's records (the same keys, list lengths and
kinds), stripped of every verdict the kernel may not give (``gradcheck``), and
judged by ``judge`` against the reference's records computed here.  Anything
unexpected, of any exception type, becomes an ``error`` grade for that exercise.

Every text in the records is made valid UTF-8 without control codes (a forged
lone surrogate must not crash a report writer), and a hidden case keeps no text
of the student's at all (an answer could put its hidden inputs in an error
message).  The kernel also sends a fingerprint of the inputs it rebuilt; one
that differs from the grader's (``portable.same``) makes the exercise an
``error`` that says the inputs did not arrive intact: no grade is ever given on
inputs other than those meant.
"""

import base64
import binascii
import io
import pickletools
import zipfile

import torch

from autograd_lab import checking
from autograd_lab.checking.records import KIND, MAX_WARNINGS, TooLarge, check_bounded

from . import portable
from .kernel import safe_text

MAX_PAYLOAD_CHARS = 16 << 20
MAX_ENTRIES = 10_000
OBSERVED_STATUSES = ("ok", "not attempted", "error", "timed out")
RECORD_KEYS = {"exercise", "seed", "hidden", "status", "error", "output", "inputs", "warnings",
               "grad_mode_after", "args_after", "input_grads", "grad_error", "facts", "jacobians", "touched"}
# Lists whose length is fixed by the exercise's inputs: a shorter one would compare nothing.
SAME_LENGTH = ("inputs", "args_after", "input_grads")
_INT_OPCODES = {"INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4"}
GRADCHECK_TOLERANCE = {"atol": 1e-5, "rtol": 1e-3}   # torch.autograd.gradcheck's defaults


def grade_from_payload(exercise, payload, seeds, meant=None):
    """The grade dict of ``exercise`` from one base64 ``payload`` holding the records of every seed."""
    return grade_from_payloads(exercise, {"all": payload}, seeds, meant)


def grade_from_payloads(exercise, payloads, seeds, meant=None):
    """The grade of ``exercise`` from the kernel's payloads (``{phase: base64}``) covering ``seeds``.

    ``meant``: ``{seed: portable.fingerprint(inputs)}`` made by the grader; the
    kernel's fingerprints must match them.
    """
    try:
        records, arrived = {}, {}
        for payload in payloads.values():
            got, prints = _decode(payload)
            if set(got) & set(records):
                raise ValueError("a seed came back twice")
            records.update(got)
            arrived.update(prints)
        _check_seeds(records, seeds)
        reference = checking.reference_records(exercise, seeds)
        for seed in seeds:
            _check_shape(records[seed], reference[seed])
            if exercise.is_hidden(seed):
                _keep_no_student_text(records[seed])
            if exercise.gradcheck:
                records[seed]["gradcheck"] = gradcheck_verdict(records[seed].pop("jacobians", None))
    except ValueError as error:
        return error_grade(exercise, f"the records sent back by the kernel were unusable: {safe_text(error)}")
    for seed, fingerprint in sorted((meant or {}).items()):
        where = portable.same(fingerprint, arrived.get(seed))
        if where is not None:
            return error_grade(exercise, f"the inputs of case {'hidden' if exercise.is_hidden(seed) else seed} did "
                                         f"not arrive intact in the sandbox ({where.split('.')[0][:60]} differs); "
                                         "this is a fault of the grader, not of the submission: report it")
    try:
        return clean(checking.judge(exercise, records, reference).to_dict())
    except Exception as error:  # records of a shape the judge did not foresee: this exercise only
        return error_grade(exercise, f"the records sent back by the kernel were malformed "
                                     f"({type(error).__name__})")


def error_grade(exercise, message):
    """A zero grade with status ``error`` and one message saying why."""
    return {"exercise_id": exercise.id, "title": exercise.title, "status": "error", "score": 0.0,
            "max_score": float(exercise.points), "misconception": None, "messages": [message],
            "public_passed": 0, "public_total": len(exercise.public_seeds),
            "hidden_passed": 0, "hidden_total": len(exercise.hidden_seeds)}


def gradcheck_verdict(jacobians):
    """gradcheck's verdict, made here from the analytical and numerical Jacobians the kernel measured."""
    if not isinstance(jacobians, dict) or jacobians.get("error"):
        message = jacobians.get("error") if isinstance(jacobians, dict) else "gradcheck did not run"
        return {"passed": False, "message": str(message)[:300]}
    pairs = list(zip(jacobians.get("analytical", ()), jacobians.get("numerical", ())))
    if not pairs or len(pairs) != len(jacobians.get("analytical", ())):
        return {"passed": False, "message": "gradcheck did not run"}
    for index, (analytical, numerical) in enumerate(pairs):
        if not (isinstance(analytical, torch.Tensor) and isinstance(numerical, torch.Tensor)
                and analytical.shape == numerical.shape):
            return {"passed": False, "message": "gradcheck: the Jacobians do not match in shape"}
        if not torch.allclose(analytical.double(), numerical.double(), **GRADCHECK_TOLERANCE):
            return {"passed": False, "message": f"Jacobian mismatch for output 0 with respect to input {index}"}
    return {"passed": True, "message": ""}


def _decode(payload):
    """``(records by seed, fingerprints by seed)`` from one payload, loaded as plain data only."""
    if not isinstance(payload, str) or len(payload) > MAX_PAYLOAD_CHARS:
        raise ValueError("missing or larger than the limit")
    try:
        raw = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("not base64") from None
    _check_archive(raw)
    try:
        loaded = torch.load(io.BytesIO(raw), weights_only=True)
    except Exception as error:  # weights_only refuses anything that is not plain data
        raise ValueError(f"refused to load ({type(error).__name__})") from None
    try:
        check_bounded(loaded)
    except TooLarge as error:
        raise ValueError(f"too large ({error})") from None
    loaded = clean(loaded)
    if isinstance(loaded, dict) and set(loaded) == {"records", "fingerprints"}:
        records, prints = loaded["records"], loaded["fingerprints"]
    else:
        records, prints = loaded, {}
    if not isinstance(records, dict) or not isinstance(prints, dict):
        raise ValueError("not records by seed")
    return records, prints


def _check_seeds(records, seeds):
    if sorted(records, key=repr) != sorted(seeds, key=repr):
        raise ValueError("not one record per requested seed")
    for seed, record in records.items():
        if not isinstance(record, dict) or type(record.get("seed")) is not int or record["seed"] != seed:
            raise ValueError("a record does not belong to its seed")
        if record.get("status") not in OBSERVED_STATUSES:
            # Only observe() writes a status; "passed" is a verdict the kernel may not claim.
            raise ValueError(f"a record has the status {str(record.get('status'))[:40]!r}")


def clean(value):
    """Every text inside ``value`` (keys too) as valid UTF-8 without control codes; containers copied."""
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, dict):
        return {clean(k): clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clean(v) for v in value]
    if isinstance(value, tuple):
        return tuple(clean(v) for v in value)
    return value


def _keep_no_student_text(record):
    """A hidden case keeps the exception's type, never its message, its warnings or stderr."""
    for key in ("error", "grad_error"):
        if isinstance(record.get(key), str):
            record[key] = record[key].split(":", 1)[0][:80]
    record["warnings"] = []


def _check_archive(raw):
    """A torch.save zip whose entries are stored, few, and no larger in their claims than in bytes."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(raw))
        entries = archive.infolist()
    except (zipfile.BadZipFile, ValueError, OSError):
        raise ValueError("not a torch archive") from None
    if len(entries) > MAX_ENTRIES:
        raise ValueError("too many entries")
    if any(e.compress_type != zipfile.ZIP_STORED or e.file_size > MAX_PAYLOAD_CHARS for e in entries):
        raise ValueError("a compressed or oversized entry")
    total = sum(e.file_size for e in entries)
    pickles = [e for e in entries if e.filename.endswith("data.pkl")]
    if len(pickles) != 1:
        raise ValueError("not one data.pkl")
    if _declared_elements(archive.read(pickles[0])) > total:
        raise ValueError("a storage declares more elements than the archive holds bytes")


def _declared_elements(pickle_bytes):
    """The element counts of the storages a torch pickle declares, summed, without unpickling it.

    A storage is a persistent id ``('storage', type, key, location, numel)``: the
    last integer pushed before each ``BINPERSID``.
    """
    declared, last_int = 0, 0
    try:
        for opcode, argument, _ in pickletools.genops(pickle_bytes):
            if opcode.name in _INT_OPCODES:   # not BINPUT and friends, whose argument is a memo slot
                last_int = int(argument)
            elif opcode.name == "BINPERSID":
                declared += max(last_int, 0)
                last_int = 0
    except Exception:
        raise ValueError("an unreadable pickle") from None
    return declared


def _check_shape(student, reference):
    """The student's record has the reference's layout: known keys, same list lengths, same kinds."""
    unknown = set(student) - RECORD_KEYS - set(reference)
    if unknown:
        raise ValueError(f"unexpected fields {sorted(map(str, unknown))[:5]}")
    warnings = student.get("warnings", [])
    if not isinstance(warnings, list) or len(warnings) > MAX_WARNINGS or not all(isinstance(w, str) for w in warnings):
        raise ValueError("the warnings are not a short list of texts")
    for key in ("error", "grad_error"):
        if student.get(key) is not None and not isinstance(student[key], str):
            raise ValueError(f"{key} is not text")
    if not isinstance(student.get("grad_mode_after", True), bool) or not isinstance(student.get("hidden"), bool):
        raise ValueError("a flag is not true or false")
    for key in SAME_LENGTH:
        if key not in reference or (key != "inputs" and student["status"] != "ok"):
            continue
        expected, got = reference[key], student.get(key)
        if expected is None:
            continue
        if not isinstance(got, list) or len(got) != len(expected):
            raise ValueError(f"{key} does not have one entry per argument")
        for mine, theirs in zip(got, expected) if key == "inputs" else ():
            if _kind(mine) != _kind(theirs):
                raise ValueError(f"{key} holds a {_kind(mine)} where a {_kind(theirs)} belongs")


def _kind(value):
    if isinstance(value, dict):
        return str(value.get(KIND, "dict"))
    return "nothing" if value is None else type(value).__name__
