"""The reference solution as source code, for ``solution()`` and ``autograd-lab solve``."""

import ast
import inspect
import re
import textwrap


def solution_source(exercise):
    """``exercise.solution_code``, or the reference's own source renamed to ``answer_name``.

    Raises ``ValueError`` with what to do when the source cannot be produced.
    """
    if exercise.solution_code is not None:
        return textwrap.dedent(exercise.solution_code).strip() + "\n"
    reference = exercise.reference
    try:
        source = textwrap.dedent(inspect.getsource(reference))
    except (OSError, TypeError) as error:
        raise ValueError(f"{exercise.id}: cannot read the source of the reference ({error}); "
                         "give the exercise a solution_code.") from None
    name = getattr(reference, "__name__", "")
    if name == "<lambda>" or not name.isidentifier():
        raise ValueError(f"{exercise.id}: the reference is a lambda; define it with def, or give solution_code.")
    renamed = re.sub(rf"^((?:async\s+)?def|class)\s+{re.escape(name)}\b",
                     rf"\1 {exercise.answer_name}", source, count=1, flags=re.MULTILINE)
    _require_definition(exercise, renamed)
    return renamed.strip() + "\n"


def _require_definition(exercise, source):
    tree = ast.parse(source)
    defined = {node.name for node in tree.body
               if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    if exercise.answer_name not in defined:
        raise ValueError(f"{exercise.id}: the solution source does not define {exercise.answer_name}; "
                         "give the exercise a solution_code.")
