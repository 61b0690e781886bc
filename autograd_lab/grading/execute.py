"""Run one submission's cells in sandboxed kernels and collect its answers' records.

``execute_submission`` runs the code cells top to bottom with ``allow_errors``
semantics: an exception, or a cell that hits its timeout and is interrupted,
does not stop the rest.  A cell that kills the kernel (``os._exit``, a crash,
the memory limit) or ignores the interrupt is skipped, and the notebook is run
again from the top in a fresh kernel without it, so the student keeps the
credit for everything else.  At most ``max_kernels`` kernels are started.

Answers are found by name, never by position, in the kernel's namespace: after
each cell, the kernel keeps a snapshot of every answer name whose object changed
(``harvest.snapshot``), exactly what a top-to-bottom run would have then, and
after the last cell the grader asks for the records of every exercise
(``harvest.emit``), one request per exercise and phase: first every exercise on
its public cases, then every exercise on its hidden cases.  So no text the
kernel sends while the hidden inputs are inside it can reach the student's
feedback (hidden cases are reported as counts and tags only), and an answer
cannot stash one exercise's hidden inputs and show them in another's public
feedback.  Inputs travel inside the request (``write_inputs``), never as files.
"""

import ast
from dataclasses import dataclass, field

from .harvest import MIME
from .kernel import FATAL

_HARVEST_MODULE = "__import__('autograd_lab.grading.harvest', fromlist=['emit'])"
_SNAPSHOT_TIMEOUT = 30
MAX_TOTAL_OUTPUT = 500_000   # characters of printed output kept per submission, all cells together
_HARVEST_STARTUP = 60   # seconds for the kernel to import the checker before the first seed
_PRELOAD = "import torch, autograd_lab.checking as _e; _e.all_exercises(); del _e"


PHASES = ("public", "hidden")


@dataclass
class Execution:
    cells: list = field(default_factory=list)      # one dict per code cell, in notebook order
    records: dict = field(default_factory=dict)    # exercise id -> {phase: base64 payload}
    failures: dict = field(default_factory=dict)   # exercise id -> why no records came back
    events: list = field(default_factory=list)     # what the sandbox had to do, for the report
    kernels: int = 0


def defined_names(source):
    """Names a cell binds at top level: ``def``, ``class``, assignments and imports.

    Only for feedback ("did you rename it?"); the graded value comes from the namespace.
    """
    if source.lstrip().startswith("%%"):
        return set()  # a cell magic: not Python
    # Line magics and shell escapes are not Python either; blank them out, keep the rest.
    python = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())
    try:
        tree = ast.parse(python)
    except (SyntaxError, ValueError):
        return set()
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return names


def code_cells(notebook):
    """``(index, source)`` of every non-empty code cell."""
    return [(index, cell.source) for index, cell in enumerate(notebook.cells)
            if cell.cell_type == "code" and cell.source.strip()]


def execute_submission(cells, plan, open_kernel, cell_timeout, check_timeout, max_kernels=4,
                       write_inputs=None):
    """Run the code ``cells`` (``code_cells(notebook)``) and return an ``Execution``.

    ``plan``: dicts with ``id``, ``answer_name``, ``public_seeds`` and ``hidden_seeds`` per exercise.
    ``open_kernel()``: a context manager yielding a fresh ``SandboxedKernel``.
    ``write_inputs(exercise_id, seeds)``: the exercise's inputs for those cases as
    text for the request (``None`` for a value exercise, or no ``write_inputs``:
    the kernel makes them itself).
    """
    execution = Execution()
    answer_names = {item["answer_name"] for item in plan}
    skipped = {}
    while execution.kernels < max_kernels:
        execution.kernels += 1
        with open_kernel() as kernel:
            _preload(kernel)
            fatal = _run_cells(kernel, cells, skipped, answer_names, cell_timeout, execution)
            if fatal is None and _harvest(kernel, plan, check_timeout, execution, write_inputs):
                return execution
        if fatal is not None:
            index, status = fatal
            skipped[index] = status
            why = next((c.get("error") for c in execution.cells if c["cell"] == index), "")
            execution.events.append(_fatal_event(index, status, why))
    for item in plan:
        if item["id"] not in execution.records:
            execution.failures.setdefault(
                item["id"], f"the notebook stopped the kernel {max_kernels} times; grading gave up")
    return execution


def _preload(kernel):
    """Import torch and the checker before the first cell, so no cell's timeout pays for it."""
    run = kernel.run(_PRELOAD, _HARVEST_STARTUP, store_history=False)
    if run.status != "ok":
        raise RuntimeError(f"the sandboxed kernel could not import torch and autograd_lab ({run.status}: "
                           f"{run.error}); run `autograd-lab doctor`, or raise --memory-mb")


def _fatal_event(index, status, why=""):
    what = "killed the kernel" if status == "dead" else "ignored the interrupt after its timeout"
    because = f" ({why})" if why else ""
    return f"cell {index} {what}{because}; it was skipped and the notebook re-run in a fresh kernel"


def _run_cells(kernel, cells, skipped, answer_names, timeout, execution):
    """Run every cell not skipped; the ``(index, status)`` of a fatal one, else None."""
    execution.cells = []
    names = sorted(answer_names)
    for index, source in cells:
        if index in skipped:
            execution.cells.append({"cell": index, "status": f"skipped ({skipped[index]})"})
            continue
        run = kernel.run(source, timeout)
        # Per cell the kernel keeps output_limit characters; per submission, MAX_TOTAL_OUTPUT.
        room = max(MAX_TOTAL_OUTPUT - sum(len(c.get("output", "")) for c in execution.cells), 0)
        execution.cells.append({"cell": index, "status": run.status, "error": run.error,
                                "output": run.text[:room], "output_truncated": run.truncated or len(run.text) > room})
        if run.status in FATAL:
            return index, run.status
        if run.status == "timed out":   # the grader killed what the cell left running: collect them
            reaped = kernel.run(f"{_HARVEST_MODULE}.reap()", _SNAPSHOT_TIMEOUT, store_history=False)
            if reaped.status in FATAL:
                return index, reaped.status
        # After every cell, as a top-to-bottom run would see it: answers made inside an
        # ``if``, a ``try`` or ``exec`` count, and a cell that timed out keeps what came before.
        snap = kernel.run(f"{_HARVEST_MODULE}.snapshot({names!r})", _SNAPSHOT_TIMEOUT, store_history=False)
        if snap.status in FATAL:
            return index, snap.status
    return None


def _harvest(kernel, plan, check_timeout, execution, write_inputs=None):
    """Ask for each exercise's records, public cases first; False when an answer took the kernel down."""
    for phase in PHASES:
        for item in plan:
            seeds = list(item[f"{phase}_seeds"])
            done = execution.records.get(item["id"], {})
            if not seeds or phase in done or item["id"] in execution.failures:
                continue
            try:
                inputs = write_inputs(item["id"], seeds) if write_inputs else None
            except Exception as error:  # an input the grader cannot rebuild in the kernel: its fault, said so
                execution.failures[item["id"]] = (f"its inputs cannot be rebuilt in the sandbox ({type(error).__name__}: "
                                                  f"{str(error)[:200]}); this is a fault of the grader, not of the "
                                                  "submission: report it")
                continue
            code = (f"{_HARVEST_MODULE}.emit({item['id']!r}, {seeds!r}, {check_timeout!r}, {inputs!r}, "
                    f"{list(item['hidden_seeds'])!r})")
            budget = _HARVEST_STARTUP + check_timeout * len(seeds) * (3 if item.get("gradcheck") else 1)
            run = kernel.run(code, budget, store_history=False)
            if run.status in FATAL:
                execution.failures[item["id"]] = ("calling the answer killed the kernel" if run.status == "dead"
                                                  else "calling the answer hung the kernel")
                if run.error:
                    execution.failures[item["id"]] += f" ({run.error})"
                return False
            payload = run.displays.get(MIME)
            if payload is None:
                execution.failures[item["id"]] = f"the kernel returned no records ({run.error or run.status})"
            else:
                execution.records.setdefault(item["id"], {})[phase] = payload
    return True
