import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from autograd_lab.site import main

KERNEL = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}


def write(path, *cells):
    nbformat.write(new_notebook(cells=list(cells), metadata=KERNEL), path)


def test_site_executes_renders_and_reports_failures(tmp_path):
    source = tmp_path / "notebooks"
    source.mkdir()
    write(source / "01_good.ipynb", new_markdown_cell("# 01 · Good <lab>"), new_code_cell("print(6 * 7)"))
    write(source / "02_bad.ipynb", new_markdown_cell("# 02 · Bad"), new_code_cell("1 / 0"))
    out = tmp_path / "site"

    assert main([str(source), "--out", str(out)]) == 1  # one notebook failed

    good = (out / "01_good.html").read_text()
    assert "42" in good  # outputs are in the page
    assert "ZeroDivisionError" in (out / "02_bad.html").read_text()  # the failure is visible, not hidden
    index = (out / "index.html").read_text()
    assert '<a href="01_good.html">01 · Good &lt;lab&gt;</a>' in index  # titles are escaped
    assert "02 · Bad</a> (failed to run)" in index
    assert nbformat.read(source / "01_good.ipynb", as_version=4).cells[1].outputs == []  # sources untouched
