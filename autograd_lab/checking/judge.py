"""Turn the records of the student and the reference into a ``Result``.

Each case (one seed) is judged on its own; then the cases are summed up.  A case
whose seed is one of ``exercise.hidden_seeds`` is a hidden check: its inputs and
details never reach the feedback, only how many hidden checks passed and the
misconception tag.
"""

from dataclasses import dataclass

from . import untouched
from .compare import Tolerance, compare_values
from .findings import Finding, error_advice
from .display import Result
from .detectors import NAMED_ERROR, named, named_error
from .forms import GRADED_LATER, unlisted_name
from .methods import broken
from .observe import RECORD_STATUSES
from .records import KIND, decode, describe


@dataclass(frozen=True)
class Case:
    """The verdict on one seed."""

    seed: int
    hidden: bool
    status: str          # "passed", "failed", "not attempted", "error", "timed out", "graded later"
    finding: object = None
    inputs: str = ""     # what the case was called with, for public feedback only

    @property
    def tag(self):
        return {"not attempted": "not_attempted", "error": "error", "timed out": "timeout",
                "graded later": GRADED_LATER}.get(self.status, self.finding.tag if self.finding else None)


def judge(exercise, student_records, reference_records):
    """The ``Result`` of comparing student and reference records, seed by seed."""
    seeds = sorted(student_records, key=lambda seed: (exercise.is_hidden(seed), seed))
    cases = [judge_case(exercise, student_records[seed], _reference(reference_records, seed, exercise))
             for seed in seeds]
    # Hidden cases' warnings could describe their inputs: only public ones are shown.
    warnings = _unique(w for seed in seeds if not exercise.is_hidden(seed)
                       for w in student_records[seed].get("warnings", ()))
    return summarize(exercise, cases, warnings)


def _reference(records, seed, exercise):
    record = records.get(seed)
    if record is None:
        raise KeyError(f"{exercise.id}: no reference record for seed {seed}.")
    if record["status"] != "ok":
        raise RuntimeError(f"The reference solution of {exercise.id} does not work on seed {seed} "
                           f"({record['status']}: {record.get('error')}). Fix it in {exercise.module}.")
    return record


def judge_case(exercise, student, reference):
    """The verdict on one case: passed, or the first difference found."""
    status = student["status"]
    seed, hidden, inputs = student["seed"], exercise.is_hidden(student["seed"]), describe_inputs(reference)
    if status not in RECORD_STATUSES:
        return Case(seed, hidden, "error", Finding("error", f"not a record made by observe (status {status!r})"), inputs)
    if status == "error":
        finding = Finding(status, student.get("error") or "")
        return Case(seed, hidden, status, _safely(named_error, exercise, finding, student, reference) or finding, inputs)
    if status != "ok":
        return Case(seed, hidden, status, Finding(status, student.get("error") or ""), inputs)
    # How the answer ran (its method, its arguments) is judged before what it returned, and a
    # finding about it is never renamed by a value's misconception.
    finding = method_finding(exercise, student) or touched_finding(exercise, student)
    if finding is not None and finding.tag == "laundered_formula" and _filled_callers_grad(exercise, student):
        # The caller's own tensor was the leaf (`x.requires_grad_()`, a `clone()` of an `x` that requires
        # grad): the ledger then sees the raw argument read as a weight, but the cause is the changed
        # argument, not a derivative typed by hand (adversarial round 7, 00-2).
        finding = touched_finding(exercise, student)
    if finding is not None:
        return Case(seed, hidden, "failed", finding, inputs)
    finding = _safely(first_difference, exercise, student, reference)
    if finding is None:
        return Case(seed, hidden, "passed", None, inputs)
    if finding.tag == GRADED_LATER:   # a student build's prediction: right form, key not shipped
        return Case(seed, hidden, "graded later", finding, inputs)
    return Case(seed, hidden, "failed", _safely(named, exercise, finding, student, reference) or finding, inputs)


def _safely(step, exercise, student, *more):
    """A comparison or detector that crashes on an answer of an unforeseen form is never shown as a crash.

    (A student once saw an ``IndexError`` from inside the checker.)  A crashed comparison
    is a ``structure`` finding that says what arrived; a crashed detector names nothing
    (``None``).  A reference-side failure still raises (``_reference``).
    """
    try:
        return step(exercise, student, *more)
    except Exception as error:  # the answer's form is unusual: judge it as unmatched, not as our crash
        if step is not first_difference:
            return None
        got = describe(student.get("output"))
        return Finding("structure", f"the checker could not compare what your function returned ({got}) with "
                                    f"the expected answer ({type(error).__name__} in the comparison): check the "
                                    "type and form the prompt asks for.")


def method_finding(exercise, student):
    """A ``Finding`` naming the method the answer broke, judged before its values.

    The method comes first: a typed formula that happens to be right still misses the skill.
    """
    if not exercise.method:
        return None
    facts = student.get("facts")
    if not isinstance(facts, dict):
        return Finding("method", "the record holds no facts about how the answer ran, so the method "
                                 f"this exercise asks for ({exercise.method[0].name}) cannot be checked.")
    args = tuple(decode(arg) for arg in student.get("inputs", ()))
    try:
        method = broken(exercise.method, facts, args)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError):
        return Finding("method", "the record's facts are incomplete, so the method cannot be checked.")
    return None if method is None else Finding(method.tag, method.feedback(facts, args))


# What to do instead: for a `.grad` set, else for the first change found (``untouched.ASPECTS``).
_UNTOUCHED_ADVICE = {
    "grad": ("`backward()` on a graph built from the caller's tensor fills that tensor's `.grad`: take the gradient "
             "on a leaf of your own (`x.detach().requires_grad_()`) or with `torch.autograd.grad`."),
    "values": "work on a copy (`x.detach().clone()`) or compute out of place.",
    "requires_grad": "work on a copy (`x.detach().clone()`) or compute out of place.",
    "items": ("read the list or dict without changing it: index or slice it (`*first, last = items`, `items[:-1]`); "
              "`pop`, `append`, `del` and assigning an item change the caller's own."),
    "training": "leave the module's train/eval mode as you found it (or put it back before returning).",
    "state": "read the optimizer's param groups and state without changing them; report, do not repair.",
}


_SWAPPED = ("Your function swapped the memory of {} for new memory instead of writing into the memory it had "
            "(`set_`, or assigning `.data`, rebinds a tensor to other memory): the tensor object is the same, but "
            "whatever shares its old memory (a view such as a tied weight, a `state_dict()` or `detach()` taken "
            "before) still holds the old values. Write the new values into the tensor itself, in place.")


def _filled_callers_grad(exercise, student):
    """The answer's backward filled the `.grad` of an argument the exercise does not let it change."""
    touched = student.get("touched") or []
    if exercise.kind != "function" or not isinstance(touched, list):
        return False
    changed = untouched.forbidden([t for t in touched if isinstance(t, dict)], exercise.modifies)
    return any(entry.get("what") == "grad" for entry in changed)


def touched_finding(exercise, student):
    """A ``modified_input`` finding when the answer changed an argument the exercise does not let it change."""
    touched = student.get("touched") or []
    if exercise.kind != "function" or not isinstance(touched, list):
        return None
    changed = untouched.forbidden([t for t in touched if isinstance(t, dict)], exercise.modifies)
    if not changed:
        return None
    what = "grad" if any(entry.get("what") == "grad" for entry in changed) else changed[0].get("what")
    swapped = [entry for entry in changed if entry.get("what") == "storage"]
    if swapped:     # an update the exercise asks for, done by swapping memory rather than writing it
        return Finding("modified_input", _SWAPPED.format(untouched.describe(swapped, exercise.parameter_names(), what=False)))
    advice = _UNTOUCHED_ADVICE.get(what, _UNTOUCHED_ADVICE["values"])
    return Finding("modified_input", f"Your function changed its input {untouched.describe(changed, exercise.parameter_names())} "
                                     f"in place, and the prompt asks you to leave the arguments as they were: {advice}")


def first_difference(exercise, student, reference):
    """Compare what ``exercise.compare`` asks for, in a fixed order; the first ``Finding``."""
    tolerance = Tolerance(exercise.rtol, exercise.atol)
    where = exercise.answer_name if exercise.kind == "value" else "the returned value"
    steps = [lambda: compare_values(student["output"], reference["output"], where, tolerance,
                                    state="state" in exercise.compare, blind=exercise.kind == "value")]
    if exercise.choices:    # a name outside the prompt's list, told before the form or the key is looked at
        steps.insert(0, lambda: unlisted_name(student["output"], exercise.choices, where))
    if "state" in exercise.compare or "grad_mode" in exercise.compare:
        steps.append(lambda: _compare_grad_mode(student, reference))
    if "args" in exercise.compare:
        steps.append(lambda: _compare_args(student, reference, tolerance))
    if "grad" in exercise.compare:
        steps.append(lambda: _compare_input_grads(student, reference, tolerance))
    if exercise.gradcheck:
        steps.append(lambda: _gradcheck_finding(student))
    for step in steps:
        finding = step()
        if finding:
            return finding
    return None


def _compare_grad_mode(student, reference):
    expected, actual = reference["grad_mode_after"], student["grad_mode_after"]
    if expected == actual:
        return None
    advice = (" Your function switched it off and left it off: use `with torch.no_grad():` rather than "
              "`torch.set_grad_enabled(False)`, so grad mode comes back by itself." if not actual else "")
    return Finding("state", f"grad mode after your function: expected {'on' if expected else 'off'}, "
                            f"got {'on' if actual else 'off'}.{advice}")


def _compare_args(student, reference, tolerance):
    for number, (s, r) in enumerate(zip(student["args_after"], reference["args_after"]), start=1):
        finding = compare_values(s, r, f"argument {number}", tolerance, grads=True)
        if finding:
            return finding
    return None


def _compare_input_grads(student, reference, tolerance):
    if reference.get("grad_error"):
        raise RuntimeError(f"the reference's output cannot be backpropagated: {reference['grad_error']}")
    if student.get("grad_error"):
        return Finding("none", f"The returned value is not connected to the inputs ({student['grad_error']}). "
                               "Usual causes: the path from the inputs was detached (`.detach()`, `.item()`, "
                               "`torch.tensor(...)`), or it was computed under `torch.no_grad()`.")
    for number, (s, r) in enumerate(zip(student["input_grads"], reference["input_grads"]), start=1):
        finding = compare_values(s, r, f"the gradient of input {number}", tolerance)
        if finding:
            return finding
    return None


def _gradcheck_finding(student):
    result = student.get("gradcheck") or {"passed": False, "message": "gradcheck did not run"}
    if result["passed"]:
        return None
    return Finding("gradcheck", "torch.autograd.gradcheck (float64, central differences) disagrees "
                                f"with your backward: {result['message']}")


# --- summing up ----------------------------------------------------------------

def summarize(exercise, cases, warnings=()):
    public = [case for case in cases if not case.hidden]
    hidden = [case for case in cases if case.hidden]
    passed = sum(case.status == "passed" for case in cases)
    status = _overall_status(cases)
    score = 0 if status == "not attempted" or not cases else exercise.points * passed / len(cases)
    failing = [case for case in public + hidden if case.status != "passed"]
    failing = [case for case in failing if case.status == status] or failing  # the tag matches the status
    if status == "not attempted":
        messages = _not_attempted_messages(exercise)
    elif status == "graded later":
        messages = [_unique(case.finding.message for case in cases if case.status == status)[0]]
    else:
        messages = _failure_messages(public, hidden) + [_counts_line(exercise, public, hidden)]
    messages += [f"Your code warned: {text}" for text in warnings[:3]]
    return Result(
        exercise_id=exercise.id, title=exercise.title, status=status,
        score=round(score, 2), max_score=exercise.points,
        misconception=failing[0].tag if failing and status not in ("not attempted", "graded later") else (
            "not_attempted" if status == "not attempted" else None),
        messages=messages,
        public_passed=sum(case.status == "passed" for case in public), public_total=len(public),
        hidden_passed=sum(case.status == "passed" for case in hidden), hidden_total=len(hidden),
    )


def _overall_status(cases):
    statuses = {case.status for case in cases}
    if not cases or statuses == {"not attempted"}:
        return "not attempted"
    for status in ("timed out", "error", "failed", "not attempted"):
        if status in statuses:
            return "failed" if status == "not attempted" else status
    return "graded later" if "graded later" in statuses else "passed"


def _not_attempted_messages(exercise):
    if exercise.kind == "value":
        return [f"Not attempted yet: replace the ... in `{exercise.answer_name} = ...` with your answer, "
                "then run this cell again."]
    return [f"Not attempted yet: replace `raise NotImplementedError` in `{exercise.answer_name}` "
            "with your code, then run this cell again."]


def _failure_messages(public, hidden):
    messages, tags_shown = [], set()
    for number, case in enumerate(public, start=1):
        if case.status == "passed" or case.tag in tags_shown:
            continue
        tags_shown.add(case.tag)
        on = f" (on {case.inputs})" if case.inputs else ""
        prefix = f"Check {number} of {len(public)}{on}: " if len(public) > 1 else ""
        messages.append(prefix + _case_message(case))
    failed_hidden = [case for case in hidden if case.status != "passed"]
    if failed_hidden:
        tags = ", ".join(sorted({case.tag for case in failed_hidden}))
        messages.append(f"{len(failed_hidden)} of {len(hidden)} hidden checks failed ({tags}). Hidden checks "
                        "use other seeds and shapes; their inputs are not shown.")
    return messages


def _case_message(case):
    if case.status == "timed out":
        return ("your code used up this case's time limit and was stopped. The limit counts the CPU time your "
                "code itself used, so a busy machine does not use it up; an answer like the one asked for needs a "
                "small part of it. Look for a loop that does not end, or work repeated far more often than the "
                "prompt asks.")
    if case.status == "error":
        advice = "" if case.finding.tag == NAMED_ERROR else error_advice(case.finding.message)
        return f"your code raised {case.finding.message}" + (f".{advice}" if advice else "")
    if case.status == "not attempted":
        return "your code still raises NotImplementedError on this case."
    return case.finding.message


def _counts_line(exercise, public, hidden):
    passed = sum(case.status == "passed" for case in public)
    noun = "check" if len(public) == 1 else "checks"
    line = (f"{len(public)} public {noun} passed" if passed == len(public)
            else f"{passed} of {len(public)} public {noun} passed")
    if hidden:
        hidden_passed = sum(case.status == "passed" for case in hidden)
        return f"{line}; {hidden_passed} of {len(hidden)} hidden checks passed."
    if exercise.hidden_seeds:
        # A public case's inputs are fixed, so an answer keyed on them (a table of the three public answers) passes
        # every one of them: say that the grade also counts cases on inputs the student has not seen.
        return f"{line}; hidden checks run when graded, on other inputs, and count in the grade."
    return f"{line}."


def _unique(items):
    seen = []
    for item in items:
        if item not in seen:
            seen.append(item)
    return seen


def describe_inputs(record):
    """What a public case was called with: ``float64 tensors of shapes (6, 4), (4,)``."""
    inputs = record.get("inputs", ())
    tensors = [arg["value"] for arg in inputs if isinstance(arg, dict) and arg.get(KIND) == "tensor"]
    if not inputs or len(tensors) != len(inputs):
        text = ", ".join(describe(arg) for arg in inputs)
        return text if len(text) <= 120 else text[:117] + "..."
    dtypes = {str(t.dtype).replace("torch.", "") for t in tensors}
    kind = f"{dtypes.pop()} " if len(dtypes) == 1 else ""
    shapes = ", ".join(str(tuple(t.shape)) for t in tensors)
    if len(tensors) == 1:
        return f"a {kind}tensor of shape {shapes}"
    return f"{kind}tensors of shapes {shapes}"
