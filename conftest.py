"""Notebook cells must not write to stderr.

nbval's lax mode checks only that cells run.  A warning left on stderr is noise
that students learn to ignore, and graders such as nbgrader score such a cell
zero, so the course shows warnings on purpose with ``expect_warning`` instead.
This hook makes any stray stderr output fail the cell that wrote it.
"""

import pytest


def _stderr_text(item):
    outputs = getattr(item, "test_outputs", None) or []
    return "".join(out.get("text", "") for out in outputs
                   if out.get("output_type") == "stream" and out.get("name") == "stderr")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    result = yield
    text = _stderr_text(item)
    if text.strip():
        raise AssertionError(f"this notebook cell wrote to stderr (show warnings with expect_warning):\n{text.strip()[:1000]}")
    return result
