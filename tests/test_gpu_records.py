"""GPU numbers reach students only from records measured on a real GPU."""

import json
import re
from pathlib import Path

import nbformat
import pytest

from autograd_lab.labs import gpu_records

ROOT = Path(__file__).resolve().parents[1]
_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?")


def _write_record(directory, date, value):
    record = {"date": date, "machine": "box: x86_64, 16 CPU cores", "gpu": "NVIDIA H100 80GB HBM3",
              "torch": "2.11.0+cu130", "cuda": "13.0",
              "measurements": {"demo": {"columns": ["mode", "ms"], "rows": [["bf16", value]],
                                        "facts": {}, "note": "median of 10"}}}
    (directory / f"{date}-nvidia-h100.json").write_text(json.dumps(record))


def test_show_says_when_no_record_is_committed(tmp_path, capsys):
    assert gpu_records.show("demo", tmp_path) is None
    assert "No GPU record of 'demo' is committed yet" in capsys.readouterr().out


def test_show_prints_the_newest_record_labelled_with_its_machine(tmp_path, capsys):
    _write_record(tmp_path, "2026-01-02", 3.6)
    _write_record(tmp_path, "2026-03-04", 3.5)
    table = gpu_records.show("demo", tmp_path)
    out = capsys.readouterr().out
    assert table["rows"] == [["bf16", 3.5]]
    assert "Recorded on a GPU, not on this machine: NVIDIA H100 80GB HBM3" in out
    assert "torch 2.11.0+cu130, CUDA 13.0, 2026-03-04" in out and "median of 10" in out


def test_every_registered_measurement_is_runnable_by_the_record_script():
    measurements = gpu_records.discover()
    for name, function in measurements.items():
        assert callable(function), name


def test_committed_records_are_well_formed():
    records = gpu_records.load_records()
    assert records, f"no GPU record in {gpu_records.RECORDS_DIR}: notebooks 05 and 06 would have none to show"
    for record in records:
        assert {"date", "machine", "gpu", "torch", "cuda", "measurements"} <= set(record)
        for table in record["measurements"].values():
            assert all(len(row) == len(table["columns"]) for row in table["rows"])


def _gpu_prose(notebook):
    """Markdown cells under a heading that mentions the GPU, up to the next heading of that level."""
    cells, inside, level = [], False, 0
    for cell in nbformat.read(notebook, as_version=4).cells:
        if cell.cell_type != "markdown":
            continue
        heading = re.match(r"(#+)\s", cell.source)
        if heading:
            if inside and len(heading.group(1)) <= level:
                inside = False
            if "GPU" in cell.source.splitlines()[0]:
                inside, level = True, len(heading.group(1))
        if inside:
            cells.append(cell.source)
    return cells


def _recorded_numbers():
    text = json.dumps(gpu_records.load_records())
    return set(_NUMBER.findall(text))


@pytest.mark.parametrize("notebook", sorted((ROOT / "notebooks").glob("*.ipynb")), ids=lambda p: p.name[:2])
def test_numbers_in_gpu_prose_come_from_a_committed_record_or_an_asserted_threshold(notebook):
    code = " ".join(c.source for c in nbformat.read(notebook, as_version=4).cells if c.cell_type == "code")
    allowed = _recorded_numbers() | set(_NUMBER.findall(code))
    for source in _gpu_prose(notebook):
        prose = re.sub(r"`[^`]*`", "", source)   # code spans name APIs, not measurements
        prose = re.sub(r"<!--.*?-->", "", prose, flags=re.S)   # claim markers name cells (cell-033), not numbers
        strays = sorted(set(_NUMBER.findall(prose)) - allowed)
        assert not strays, f"{notebook.name}: GPU prose quotes {strays}, found in no committed GPU record"


@pytest.mark.parametrize("notebook", sorted((ROOT / "notebooks").glob("*.ipynb")), ids=lambda path: path.name[:2])
def test_gpu_cells_find_measurements_through_discover(notebook):
    # MEASUREMENTS only holds what the notebook happened to import: 06's empty_cache cell raised
    # KeyError on an H100 (its module, cuda_cache, is imported by nothing else). discover() imports them all.
    assert "gpu_records.MEASUREMENTS[" not in notebook.read_text()
