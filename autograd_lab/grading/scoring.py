"""Turn what came back from a kernel into grades, in the grader's own process.

The payload is untrusted bytes: it is loaded with ``torch.load(weights_only=True)``
(plain containers and tensors only, no code runs), its shape is checked, and it
is judged by ``judge`` against the reference's records computed here.  Anything
unexpected becomes an ``error`` grade for that exercise, never a crash.
"""

import base64
import binascii
import io
import threading

import torch

from autograd_lab import exercises

MAX_PAYLOAD_CHARS = 32 << 20
OBSERVED_STATUSES = ("ok", "not attempted", "error", "timed out")
# observe() and judge() fork torch's global RNG and grad mode: one exercise at a time.
_lock = threading.Lock()


def grade_from_payload(exercise, payload, seeds):
    """The grade dict of ``exercise`` from the base64 records ``payload`` sent by the kernel."""
    try:
        records = _decode(payload, seeds)
    except ValueError as error:
        return error_grade(exercise, f"the records sent back by the kernel were unusable: {error}")
    with _lock:
        reference = exercises.reference_records(exercise, seeds)
        try:
            result = exercises.judge(exercise, records, reference)
        except (KeyError, TypeError, AttributeError, IndexError, ValueError, RuntimeError) as error:
            return error_grade(exercise, f"the records sent back by the kernel were malformed "
                                         f"({type(error).__name__})")
    return result.to_dict()


def error_grade(exercise, message):
    """A zero grade with status ``error`` and one message saying why."""
    return {"exercise_id": exercise.id, "title": exercise.title, "status": "error", "score": 0.0,
            "max_score": float(exercise.points), "misconception": None, "messages": [message],
            "public_passed": 0, "public_total": len(exercise.public_seeds),
            "hidden_passed": 0, "hidden_total": len(exercise.hidden_seeds)}


def _decode(payload, seeds):
    if not isinstance(payload, str) or len(payload) > MAX_PAYLOAD_CHARS:
        raise ValueError("missing or larger than the limit")
    try:
        raw = base64.b64decode(payload, validate=True)
        records = torch.load(io.BytesIO(raw), weights_only=True)
    except (binascii.Error, ValueError, RuntimeError, EOFError) as error:
        raise ValueError(f"not a weights-only torch archive ({type(error).__name__})") from None
    except Exception as error:  # weights_only refuses anything that is not plain data
        raise ValueError(f"refused to load ({type(error).__name__})") from None
    if not isinstance(records, dict) or sorted(records) != sorted(seeds):
        raise ValueError("not one record per requested seed")
    for seed, record in records.items():
        if not isinstance(record, dict) or record.get("seed") != seed:
            raise ValueError("a record does not belong to its seed")
        if record.get("status") not in OBSERVED_STATUSES:
            # Only observe() writes a status; "passed" is a verdict the kernel may not claim.
            raise ValueError(f"a record has the status {str(record.get('status'))[:40]!r}")
    return records
