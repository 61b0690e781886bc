"""A trace and a graph survive a save and a reopen (issue 24), in a real JupyterLab and Chromium.

A notebook with a ``trace_backward`` cell and a ``draw`` cell is run through the UI; while
the kernel runs, the trace is a slider (ipywidgets) and its plain picture is hidden.  The
notebook is saved, its kernel shut down and the page closed; reopened in a new page (a new
kernel, no widget models), the trace's picture and the graph are still there, and
JupyterLab's "Error displaying widget: model not found" line is not shown.  The lab and
the browser are the first-hour owner's fixtures (conftest.py), as are the menu and wait helpers
(test_lab.py); the notebook opens in a workspace of its own, so it runs beside test_lab.py.
"""

import json
import time

import nbformat

from test_lab import RUN_ALL_S, kernel_idle, menu, wait_until

NAME = "trace_reopen.ipynb"
CELLS = [
    "import torch\nfrom autograd_lab import draw, trace_backward\n"
    "w = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)\n"
    "loss = (w * torch.tensor([0.5, 0.5, 0.5])).sum() + (w * w).sum()",
    "trace_backward(loss, params={'w': w})",
    "draw((w * 3).sum())",
]


def write_notebook(work):
    notebook = nbformat.v4.new_notebook()
    notebook.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in CELLS]
    nbformat.write(notebook, work / NAME)


def saved_outputs(work):
    cells = json.loads((work / NAME).read_text())["cells"]
    return [cell.get("outputs", []) for cell in cells]


ACTIVE = ".jp-NotebookPanel:not(.lm-mod-hidden)"


def open_alone(context, lab, name):
    """The notebook in a workspace of its own (``?reset``): no tab another test left open is
    restored beside it, so every locator below sees this notebook only."""
    base, token, _ = lab
    page = context.new_page()
    page.goto(f"{base}/lab/workspaces/trace-reopen/tree/{name}?token={token}&reset")
    page.wait_for_selector(f"{ACTIVE} .jp-Cell", timeout=90_000)
    wait_until(lambda: kernel_idle(page), 120, f"the kernel of {name} to start")
    time.sleep(2)  # as test_lab.open_notebook: a Run All sent while the session settles can stop early
    return page


def run_all(page):
    menu(page, "Run", "Run All Cells")
    prompts = page.locator(f"{ACTIVE} .jp-CodeCell .jp-InputPrompt")
    wait_until(lambda: kernel_idle(page) and all(p.strip() not in ("", "[ ]:") and "*" not in p
                                                   for p in prompts.all_inner_texts()),
               RUN_ALL_S, f"the {len(CELLS)} cells of {NAME} to run")


def visible(locator):
    return [i for i in range(locator.count()) if locator.nth(i).is_visible()]


def test_a_trace_and_a_graph_survive_save_and_reopen(browser_context, lab, artifacts):
    _, _, work = lab
    write_notebook(work)
    page = open_alone(browser_context, lab, NAME)
    run_all(page)
    trace_cell = page.locator(f"{ACTIVE} .jp-CodeCell").nth(1)
    # Live: the slider shows one step at a time; the plain picture beside it is hidden.
    wait_until(lambda: trace_cell.locator(".widget-slider, .jupyter-widgets.widget-slider").count() == 1, 30,
               "the trace's slider")
    static = trace_cell.locator(".autograd-lab-trace-static")
    assert static.count() == 1 and not static.is_visible()
    page.screenshot(path=artifacts / "trace-reopen-live.png")

    page.locator(f"{ACTIVE} .jp-Cell").first.click()
    page.keyboard.press("Escape")
    page.keyboard.press("Control+s")
    wait_until(lambda: "autograd-lab-trace-static" in (work / NAME).read_text(), 30, "the notebook to be saved")
    outputs = saved_outputs(work)
    trace_pictures = [o["data"]["image/svg+xml"] for o in outputs[1] if "image/svg+xml" in o.get("data", {})]
    assert len(trace_pictures) == 1 and "#1 " in "".join(trace_pictures[0])   # every step, numbered
    assert any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in outputs[1])
    assert all("\n" not in "".join(o["data"].get("text/plain", "")) for o in outputs[2])   # not the tree

    menu(page, "Kernel", "Shut Down Kernel")
    time.sleep(2)
    page.close()

    reopened = open_alone(browser_context, lab, NAME)   # a new page and a new kernel: no widget models
    trace_cell = reopened.locator(f"{ACTIVE} .jp-CodeCell").nth(1)
    wait_until(lambda: visible(trace_cell.locator(".jp-OutputArea-output img, .jp-OutputArea-output svg")), 30,
               "the trace's picture after the reopen")
    assert trace_cell.locator(".autograd-lab-trace-static").is_visible()
    assert not visible(reopened.get_by_text("Error displaying widget"))
    graph_cell = reopened.locator(f"{ACTIVE} .jp-CodeCell").nth(2)
    assert visible(graph_cell.locator(".jp-OutputArea-output img, .jp-OutputArea-output svg"))
    reopened.screenshot(path=artifacts / "trace-reopen-after.png")
    reopened.close()
