"""Matplotlib figures that read on JupyterLab's light and dark themes, set up once per lab.

The labs that plot call ``figures.readable_in_both_themes()`` in their setup cell, where
they import matplotlib.  Two things make a figure a white box in the dark theme, and
this changes both:

- matplotlib's default figure is opaque white.  Here the figure and axes are transparent,
  and what is drawn on the page (text, ticks, spines, legend frame) is a mid grey that
  reads on white and on JupyterLab's dark background (#111111); the colour cycle keeps
  to colours with a contrast of at least 3 against both.
- a transparent PNG is given a background by JupyterLab: matplotlib_inline labels it
  ``needs_background: light`` (or ``dark``) from its tick colours, and JupyterLab paints
  a white (or black) box behind it.  SVG output gets no box, and stays sharp at any zoom.
"""

import matplotlib
from cycler import cycler

# The grey of the graph pictures' edges and labels (autograd_lab/viz/dot.py): 3.4:1 against
# white, 5.6:1 against JupyterLab's dark #111111.
GREY = "#8C8C8C"
# tab10's blue, green, red, purple, brown and grey pass on both backgrounds; its orange,
# pink, olive and cyan do not on white, so darker versions of them stand in.
COLOURS = ["tab:blue", "#E8710A", "tab:green", "tab:red", "tab:purple", "tab:brown",
           "#CC79A7", "tab:gray", "#C08A00", "#1696A8"]

STYLE = {
    "figure.facecolor": "none", "axes.facecolor": "none", "savefig.facecolor": "none",
    "savefig.edgecolor": "none",
    "text.color": GREY, "axes.labelcolor": GREY, "axes.edgecolor": GREY,
    "xtick.color": GREY, "ytick.color": GREY, "grid.color": GREY, "grid.alpha": 0.35,
    "legend.facecolor": "none", "legend.edgecolor": GREY, "legend.framealpha": None,
    "axes.prop_cycle": cycler(color=COLOURS),
}


def readable_in_both_themes():
    """Apply ``STYLE`` and, inside a Jupyter kernel, show figures as SVG."""
    matplotlib.rcParams.update(STYLE)
    try:
        from IPython import get_ipython
        from matplotlib_inline.backend_inline import set_matplotlib_formats
    except ImportError:
        return
    if get_ipython() is not None:
        set_matplotlib_formats("svg")
