"""The course as a student sees it: JupyterLab in Chromium, notebooks run through the UI.

Opens 00 and 01 from the workspace, runs all cells with Run > Run All Cells and checks
what a student would look at: no error output, graphs drawn as SVG, ``check()``
feedback rendered as HTML, the ``trace_backward`` slider working.  Then it edits and
saves a notebook through the UI, and finally asserts that the shipped ``notebooks/``
did not change.  Screenshots in light and dark theme go to build/browser-artifacts/.
"""

import hashlib
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

RUN_ALL_S = int(__import__("os").environ.get("RUN_ALL_S", 240))  # each notebook runs in well under a minute; this is a safety net
NOTEBOOKS = ["00_start_here.ipynb", "01_dynamic_graph.ipynb"]


def wait_until(condition, timeout_s, what):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def open_notebook(context, lab, name):
    base, token, _ = lab
    page = context.new_page()
    page.goto(f"{base}/lab/tree/{name}?token={token}")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
    wait_until(lambda: kernel_idle(page) and "Idle" in page.locator(".jp-StatusBar-Widget").all_inner_texts().__str__(),
               120, f"the kernel of {name} to start")
    time.sleep(2)  # let the session settle: a Run All sent while it reconnects can stop after one cell
    return page


def kernel_idle(page):
    return page.locator('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook-ExecutionIndicator[data-status="idle"]').count() > 0


def menu(page, top, item):
    page.locator(".lm-MenuBar-itemLabel", has_text=top).first.click()
    page.locator(".lm-Menu-item:visible .lm-Menu-itemLabel").get_by_text(item, exact=True).first.click()


def run_all(page, name):
    menu(page, "Run", "Run All Cells")
    code_cells = page.locator(".jp-CodeCell")

    def finished():
        prompts = page.locator(".jp-CodeCell .jp-InputPrompt").all_inner_texts()
        return (kernel_idle(page) and prompts and all("*" not in p for p in prompts)
                and all(p.strip() not in ("", "[ ]:") for p in prompts))
    try:
        wait_until(finished, RUN_ALL_S, f"all {code_cells.count()} cells of {name} to run")
    except AssertionError:
        page.screenshot(path=ROOT / "build" / "browser-artifacts" / f"timeout-{name}.png")
        prompts = page.locator(".jp-CodeCell .jp-InputPrompt").all_inner_texts()
        raise AssertionError(f"{name} did not finish in {RUN_ALL_S} s; prompts: {prompts}; "
                             f"kernel idle: {kernel_idle(page)}; errors: {error_outputs(page)[:2]}") from None


def error_outputs(page):
    return page.locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]').all_inner_texts()


def set_theme(page, theme):
    menu(page, "Settings", "Theme")
    page.locator(".lm-Menu-item:visible .lm-Menu-itemLabel").get_by_text(theme, exact=True).first.click()
    light = "false" if "Dark" in theme else "true"
    page.wait_for_selector(f'body[data-jp-theme-light="{light}"]', state="attached", timeout=30_000)
    time.sleep(1)  # the theme's CSS finishes loading


def screenshots(page, name, artifacts):
    for theme in ("JupyterLab Light", "JupyterLab Dark"):
        set_theme(page, theme)
        page.screenshot(path=artifacts / f"{name.removesuffix('.ipynb')}-{theme.split()[-1].lower()}.png")
    set_theme(page, "JupyterLab Light")


@pytest.fixture(scope="module")
def ran(browser_context, lab, artifacts):
    """Every notebook opened and run once; yields {name: page}."""
    pages = {}
    for name in NOTEBOOKS:
        page = open_notebook(browser_context, lab, name)
        run_all(page, name)
        screenshots(page, name, artifacts)
        pages[name] = page
    yield pages
    for page in pages.values():
        page.close()


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_no_cell_shows_an_error(ran, name):
    assert error_outputs(ran[name]) == []


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_graphs_are_inline_svg(ran, name):
    svgs = ran[name].locator(".jp-RenderedSVG img, .jp-RenderedSVG svg, .jp-RenderedHTMLCommon svg")
    assert svgs.count() > 0


def test_check_feedback_renders_as_html_not_text(ran):
    page = ran["01_dynamic_graph.ipynb"]
    boxes = page.locator(".jp-OutputArea-output .autograd-lab-box")
    assert boxes.count() >= 4  # one per check() cell
    assert boxes.first.locator("strong").count() == 1
    texts = " ".join(page.locator(".jp-OutputArea-output").all_inner_texts())
    assert "autograd-lab-box" not in texts and "<div" not in texts  # no markup shown as text


def test_check_feedback_markdown_is_rendered(ran):
    page = ran["01_dynamic_graph.ipynb"]
    feedback = " ".join(page.locator(".jp-OutputArea-output .autograd-lab-box").all_inner_texts())
    assert "`" not in feedback


def test_trace_backward_slider_changes_the_picture(ran):
    page = ran["01_dynamic_graph.ipynb"]
    slider = page.locator(".jupyter-widgets.widget-slider, .widget-hslider").first
    assert slider.count() == 1, "the trace_backward slider is missing (is ipywidgets installed?)"
    screen = page.locator(".jupyter-widgets.widget-output, .widget-output").first
    before = screen.inner_html()
    readout = slider.locator(".widget-readout")
    start = readout.inner_text()
    slider.locator(".noUi-handle").first.focus()
    page.keyboard.press("ArrowRight")
    wait_until(lambda: readout.inner_text() != start, 20, "the slider to move")
    wait_until(lambda: screen.inner_html() != before and screen.locator("img, svg").count() > 0, 30,
               "the picture to change")


def test_edit_and_save_through_the_ui_changes_only_the_workspace(ran, lab):
    _, _, work = lab
    page = ran["00_start_here.ipynb"]
    page.locator(".jp-Cell").last.click()
    page.keyboard.press("Escape")
    page.keyboard.press("b")  # new cell below, in command mode
    page.keyboard.press("Enter")
    page.keyboard.type("edited_in_the_browser = 42")
    page.keyboard.press("Control+s")
    saved = work / "00_start_here.ipynb"
    wait_until(lambda: "edited_in_the_browser" in saved.read_text(), 30, "the notebook to be saved")


def shipped_state():
    status = subprocess.run(["git", "status", "--porcelain", "notebooks/"], cwd=ROOT, capture_output=True,
                            text=True, timeout=30, check=True).stdout
    hashes = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((ROOT / "notebooks").iterdir())}
    return status, hashes


@pytest.fixture(scope="session", autouse=True)
def shipped_before():
    return shipped_state()


def test_the_shipped_notebooks_are_untouched(ran, shipped_before):
    # Runs last in this module: after every notebook was opened, run, edited and saved.
    status, hashes = shipped_state()
    changed = sorted(name for name in hashes.keys() | shipped_before[1].keys()
                     if hashes.get(name) != shipped_before[1].get(name))
    assert changed == [], f"shipped notebooks changed during the browser visit: {changed}"
    if shipped_before[0] == "":  # a clean checkout (CI) must stay clean
        assert status == ""


def test_kernels_start_without_the_transport_warning(ran, artifacts):
    # make lab's kernels use IPC sockets, so ipykernel has no plain-TCP warning to print.
    log = (artifacts / "jupyterlab.log").read_text()
    assert "Kernel started" in log
    assert "without encryption" not in log
