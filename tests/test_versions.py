"""The one place that knows how torch releases differ (autograd_lab/versions.py)."""

import re
import tomllib
from pathlib import Path

import pytest
import torch

from autograd_lab import versions

ROOT = Path(__file__).resolve().parents[1]


def test_parse_ignores_local_labels_and_pre_releases():
    assert versions.parse("2.13.0+cpu") == (2, 13, 0)
    assert versions.parse("2.16.0a0+git1234") == (2, 16, 0)
    assert versions.parse("2.5") == (2, 5, 0)
    with pytest.raises(ValueError):
        versions.parse("nightly")


def test_the_supported_range_is_the_one_in_pyproject_and_the_one_ci_tests():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    torch_requirement = next(dep for dep in project["dependencies"] if dep.startswith("torch"))
    assert torch_requirement == "torch" + ",".join(versions.SUPPORTED)
    for tested in (versions.OLDEST, versions.NEWEST, versions.PINNED):
        assert versions.in_supported_range(tested)
    assert not versions.in_supported_range("2.4.1") and not versions.in_supported_range("2.16.0")
    # CI runs the pinned torch; the oldest and the newest are the README's matrix command.
    readme = (ROOT / "README.md").read_text()
    assert f'make test-matrix VERSIONS="{versions.OLDEST} {versions.NEWEST}"' in readme


def test_the_pinned_reference_is_the_course_pin():
    pins = (ROOT / "requirements" / "course.txt").read_text()
    assert f"torch=={versions.PINNED}\n" in pins


def test_the_installed_torch_is_inside_the_range():
    assert versions.in_supported_range(torch.__version__)


def test_variants_are_oldest_first_and_each_names_its_first_release():
    for behaviour in versions.BEHAVIOURS.values():
        starts = [versions.parse(v.since) for v in behaviour.variants]
        assert starts == sorted(starts) and len(set(starts)) == len(starts), behaviour.name
        assert len(behaviour.variants) >= 2, f"{behaviour.name}: one variant is not a difference"


def test_variant_boundaries(monkeypatch):
    saved = versions.behaviour("checkpoint_saved_tensors")
    assert saved.variant_for("2.11.0").value == 2
    assert saved.variant_for("2.12.0").value == 1
    assert saved.variant_for("2.15.0").value == 1
    message = versions.behaviour("unused_input_message")
    assert message.variant_for("2.12.1").value.startswith("One of the differentiated Tensors")
    assert message.variant_for("2.13.0").value.startswith("The differentiated Tensor at index")


def test_explain_names_the_installed_release_and_the_others(monkeypatch):
    monkeypatch.setattr(versions, "installed", lambda: "2.11.0")
    text = versions.behaviour("checkpoint_saved_tensors").explain()
    assert text.startswith("Your torch 2.11.0 saves an empty placeholder")
    assert "From torch 2.12.0, it saves only the segment input." in text
    monkeypatch.setattr(versions, "installed", lambda: "2.13.0")
    text = versions.behaviour("checkpoint_saved_tensors").explain()
    assert text.startswith("Your torch 2.13.0 saves only the segment input.")
    assert "Before torch 2.12.0, it saves an empty placeholder" in text


def test_error_starts_lists_every_variant_for_expect_error():
    assert len(versions.error_starts("unused_input_message")) == 2


def test_requires_prints_one_line_when_the_feature_is_missing(monkeypatch, capsys):
    monkeypatch.setattr(versions, "installed", lambda: "2.12.1")
    assert not versions.requires("ddp_forward_sync_buffers", "forward_sync_buffers")
    assert capsys.readouterr().out == "Skipped: forward_sync_buffers needs torch >= 2.13.0; you have 2.12.1.\n"
    monkeypatch.setattr(versions, "installed", lambda: "2.13.0")
    assert versions.requires("ddp_forward_sync_buffers")


def test_nothing_outside_versions_py_compares_torch_versions():
    """Version-dependent behaviour lives in one place."""
    pattern = re.compile(r"torch\.__version__\s*[<>=]|TorchVersion|torch_version\b")
    offenders = [str(path.relative_to(ROOT)) for path in (ROOT / "autograd_lab").rglob("*.py")
                 if path.name != "versions.py" and pattern.search(path.read_text())]
    assert offenders == []


def test_quiet_untaught_warnings_hides_the_spurious_profiler_cycle_warning_and_nothing_beside_it():
    # torch 2.10-2.12 warn on every first profile() (seen on 2.11.0); the pinned torch cannot raise it, so
    # the warning is replayed as torch.profiler.profiler issues it.
    import warnings

    text = ("Warning: Profiler clears events at the end of each cycle.Only events from the current cycle "
            "will be reported.To keep events across cycles, set acc_events=True.")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        versions.quiet_untaught_warnings()
        warnings.warn_explicit(text, UserWarning, "profiler.py", 224, module="torch.profiler.profiler")
        warnings.warn_explicit(text, UserWarning, "lab.py", 1, module="autograd_lab.labs.recompute")
    assert [str(w.message) for w in caught] == [text]      # only torch's own, from the profiler, is hidden


def test_quiet_untaught_warnings_hides_the_once_per_process_sync_debug_warning_and_nothing_beside_it():
    # set_sync_debug_mode warns once per process (a C++ warn-once, seen on 2.11.0 on an H100); a CPU torch
    # cannot raise it, so it is replayed as torch.cuda issues it.
    import warnings

    text = "Synchronization debug mode is a prototype feature and does not yet detect all synchronizing operations"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        versions.quiet_untaught_warnings()
        warnings.warn_explicit(text, UserWarning, "__init__.py", 1333, module="torch.cuda")
        warnings.warn_explicit(text, UserWarning, "__init__.py", 1, module="torch.cuda.amp")
        warnings.warn_explicit(text, UserWarning, "lab.py", 1, module="autograd_lab.labs.amp_timing")
    assert [w.filename for w in caught] == ["__init__.py", "lab.py"]      # only torch.cuda's own is hidden
