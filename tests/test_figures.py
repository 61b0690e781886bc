"""Matplotlib figures read on JupyterLab's light and dark themes (issue 26): labs/figures.py."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from matplotlib import colors  # noqa: E402

from autograd_lab.labs import figures  # noqa: E402

WHITE, JUPYTERLAB_DARK = "#ffffff", "#111111"


def contrast(a, b):
    def luminance(colour):
        linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in colors.to_rgb(colour)]
        return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]
    high, low = sorted((luminance(a), luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


@pytest.mark.parametrize("colour", [figures.GREY, *figures.COLOURS])
def test_every_colour_reads_on_both_backgrounds(colour):
    assert contrast(colour, WHITE) >= 3 and contrast(colour, JUPYTERLAB_DARK) >= 3


def test_a_figure_is_transparent_with_grey_text():
    with matplotlib.rc_context():
        figures.readable_in_both_themes()
        fig, ax = plt.subplots()
        ax.plot([0, 1], [1, 0], label="line")
        ax.set_title("title")
        legend = ax.legend()
        assert colors.to_rgba(fig.get_facecolor())[3] == 0 and colors.to_rgba(ax.get_facecolor())[3] == 0
        assert {colors.to_hex(label.get_color()) for label in ax.get_xticklabels()} == {figures.GREY.lower()}
        assert colors.to_hex(ax.title.get_color()) == figures.GREY.lower()
        assert colors.to_rgba(legend.get_frame().get_facecolor())[3] == 0
        assert colors.to_hex(ax.get_lines()[0].get_color()) == colors.to_hex(figures.COLOURS[0])
        plt.close(fig)


def test_outside_a_kernel_it_only_sets_the_style():
    # No IPython shell here: the inline backend's format is left alone, nothing raises.
    with matplotlib.rc_context():
        figures.readable_in_both_themes()
