"""GPU measurements recorded on real GPUs, shown to students who have none.

Each GPU measurement of the course is a function registered here with
``@measurement("name")``: it takes a CUDA ``device`` and returns a JSON-able
``Table`` (columns, rows, and the robust facts the notebook asserts).  The same
function runs in the notebook when a GPU is present and in
``benchmarks/gpu_record.py``, which writes a dated record of every measurement to
``autograd_lab/labs/gpu_data/<date>-<gpu>.json``.  On a CPU-only machine a notebook
calls ``show("name")``: it prints the newest committed record of that measurement,
labelled with its machine, GPU, torch, CUDA and date, or says (to the student,
without instructions meant for maintainers) that none is committed yet.  GPU
numbers are never typed by hand.

The records are package data beside this module, not repository files: they go
wherever the package goes (the repository, a student or self-study build made by
``autograd-lab release``, a wheel, the kernel of a ``work/`` copy), so a notebook
shows the same record from all of them.
"""

import importlib
import json
import pkgutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

RECORDS_DIR = Path(__file__).resolve().with_name("gpu_data")   # package data: see the docstring
MEASUREMENTS = {}


@dataclass
class Table:
    columns: list
    rows: list                                  # lists of cells, same length as columns
    facts: dict = field(default_factory=dict)   # what the notebook asserts, by name
    note: str = ""                              # how it was measured (repeats, spread)


def measurement(name):
    """Register ``function(device) -> Table`` as the GPU measurement called ``name``."""
    def register(function):
        MEASUREMENTS[name] = function
        return function
    return register


def discover():
    """Import every module of the lab helpers, so that each registers its GPU measurements."""
    from autograd_lab import labs

    for module in pkgutil.iter_modules(labs.__path__, "autograd_lab.labs."):
        if not module.ispkg:
            importlib.import_module(module.name)
    return MEASUREMENTS


def load_records(directory=RECORDS_DIR):
    """Every committed record, oldest first (file names start with the date)."""
    return [json.loads(path.read_text()) for path in sorted(Path(directory).glob("*.json"))]


def latest(name, directory=RECORDS_DIR):
    """The newest record that has measurement ``name``, or ``None``."""
    found = [record for record in load_records(directory) if name in record["measurements"]]
    return found[-1] if found else None


def format_table(table):
    cells = [list(map(str, table["columns"]))] + [[_cell(value) for value in row] for row in table["rows"]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    lines = ["  ".join(text.ljust(width) for text, width in zip(row, widths)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def _cell(value):
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def show(name, directory=RECORDS_DIR):
    """Print the newest committed GPU record of ``name``; return its table (a dict) or ``None``."""
    record = latest(name, directory)
    if record is None:
        print(f"No GPU record of {name!r} is committed yet, so this course has no GPU numbers to show "
              "here.")   # maintainers: benchmarks/gpu_record.py on a GPU writes one
        return None
    table = record["measurements"][name]
    print(f"Recorded on a GPU, not on this machine: {record['gpu']} ({record['machine']}), "
          f"torch {record['torch']}, CUDA {record['cuda']}, {record['date']}.")
    print(format_table(table))
    if table.get("note"):
        print(table["note"])
    return table


def as_record_entry(table):
    return asdict(table) if isinstance(table, Table) else dict(table)
