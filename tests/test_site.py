import re

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from autograd_lab.course.site import main

KERNEL = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}


def write(path, *cells):
    nbformat.write(new_notebook(cells=list(cells), metadata=KERNEL), path)


def test_site_executes_renders_navigates_and_reports_failures(tmp_path):
    source = tmp_path / "notebooks"
    source.mkdir()
    write(source / "01_good.ipynb", new_markdown_cell("# 01 · Good `<lab>`\n\nWhat it *teaches*."),
          new_markdown_cell("Euler: $e^{i\\pi} + 1 = 0$"), new_code_cell("print(6 * 7)"))
    write(source / "02_bad.ipynb", new_markdown_cell("# 02 · Bad"), new_code_cell("1 / 0"))
    write(source / "03_last.ipynb", new_markdown_cell("# 03 · Last"),
          new_code_cell("import ipywidgets\ndisplay('before'); display(ipywidgets.IntSlider(value=3)); display('after')"))
    out = tmp_path / "site"

    assert main([str(source), "--out", str(out)]) == 1  # one notebook failed

    good = (out / "01_good.html").read_text()
    assert "42" in good  # outputs are in the page
    assert "ZeroDivisionError" in (out / "02_bad.html").read_text()  # the failure is visible, not hidden
    # A static page shows what a saved notebook shows: no live widget (its text would be
    # "IntSlider(value=3)"), and no word about installing ipywidgets; the other outputs stay.
    last = (out / "03_last.html").read_text()
    assert "IntSlider(value=3" not in last and "widget-view" not in last and "install ipywidgets" not in last
    assert "<pre>'before'</pre>" in last and "<pre>'after'</pre>" in last
    index = (out / "index.html").read_text()
    assert '<a href="01_good.html">01 · Good <code>&lt;lab&gt;</code></a>' in index  # code, escaped, no backticks
    assert "<em>teaches</em>" in index  # what the lab teaches, from its opening paragraph
    assert "(failed to run)" in index
    # Navigation: home everywhere, previous/next where they exist.
    middle = (out / "02_bad.html").read_text()
    assert 'href="index.html"' in middle and 'href="01_good.html"' in middle and 'href="03_last.html"' in middle
    assert "<title>01 · Good &lt;lab&gt;</title>" in good  # no raw backticks in the title
    # Offline: MathJax is bundled and nothing is loaded from another host.
    assert 'src="mathjax/MathJax.js' in good and (out / "mathjax" / "MathJax.js").exists()
    # MathJax's stand-in font has no about:blank source: a file:// page may not fetch it (console error).
    assert "\"font-family\": \"MathJax_Blank\", src: \"local('MathJax_Blank')\"" in good
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", good)
    assert "measured when this site was built" in good
    assert nbformat.read(source / "01_good.ipynb", as_version=4).cells[2].outputs == []  # sources untouched


def test_each_notebook_runs_once_and_a_cell_on_stderr_fails_it(tmp_path):
    """make test-notebooks: errors and stray stderr fail; the site renders the copies without running them."""
    from autograd_lab.course import executed

    source = tmp_path / "notebooks"
    source.mkdir()
    write(source / "01_clean.ipynb", new_markdown_cell("# 01 · Clean"), new_code_cell("print(6 * 7)"))
    write(source / "02_noisy.ipynb", new_code_cell("import warnings\nwarnings.warn('left on stderr')"))
    write(source / "03_raises.ipynb", new_code_cell("1 / 0"))
    copies = tmp_path / "executed"

    assert executed.main([str(source), "--out", str(copies), "--jobs", "2"]) == 1
    clean, error = executed.read(copies, "01_clean.ipynb")
    assert error is None and clean.cells[1].outputs[0]["text"] == "42\n"
    assert "wrote to stderr" in executed.read(copies, "02_noisy.ipynb")[1]
    assert "ZeroDivisionError" in executed.read(copies, "03_raises.ipynb")[1]

    (source / "01_clean.ipynb").write_text("not a notebook: the site must read the copy, not run this")
    out = tmp_path / "site"
    assert main([str(source), "--out", str(out), "--executed", str(copies)]) == 1
    assert "42" in (out / "01_clean.html").read_text()
    assert "(failed to run)" in (out / "index.html").read_text()
