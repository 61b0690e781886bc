"""Every page of the built course site (``make site``) in Chromium, with the network cut.

Each page must load from its own files only, with no broken image, no broken link, no
error in the console, every formula typeset by the bundled MathJax, and no word about
installing something to see it.  Pages are screenshotted in build/browser-artifacts/site/.
"""

import os
import re
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

ROOT = Path(__file__).resolve().parents[2]
SITE = Path(os.environ.get("AUTOGRAD_LAB_SITE", ROOT / "build" / "site"))
PAGES = sorted(SITE.glob("*.html"))
MATH_S = 60  # MathJax typesets a long page in seconds; a safety net
TYPESET = {}  # page: number of formulas MathJax typeset


@pytest.fixture(scope="module")
def offline_page(browser_context):
    page = browser_context.new_page()
    outside = []

    def block(route):
        outside.append(route.request.url)
        route.abort()
    page.route(re.compile(r"^(?!file:|data:|about:blank).*"), block)
    failed = []
    # about:blank is where the test parks between pages; a font MathJax asks for from
    # about:blank is refused with a console error, which `console` catches.
    page.on("requestfailed", lambda request: None if request.url.startswith("about:") else failed.append(request.url))
    page.on("console", lambda message: failed.append(f"console {message.type}: {message.text[:200]}")
            if message.type == "error" else None)
    page.on("pageerror", lambda error: failed.append(f"page error: {error}"))
    yield page, outside, failed
    page.close()


def test_the_site_is_built(missing):
    if not (SITE / "index.html").exists():
        missing(f"no site in {SITE}: run `make site` first (make test-browser does)")
    assert len(PAGES) >= 2


def local_target(page_path, href):
    parsed = urlparse(href)
    if parsed.scheme in ("http", "https", "mailto"):
        return None
    return (page_path.parent / unquote(parsed.path)).resolve() if parsed.path else page_path


@pytest.mark.parametrize("path", PAGES, ids=[p.name for p in PAGES])
def test_page_loads_offline_with_nothing_broken(offline_page, path, artifacts):
    page, outside, failed = offline_page
    # Leave the previous page first: its late requests (MathJax fetches fonts lazily) are
    # aborted by the navigation and would otherwise be counted against this page.
    page.goto("about:blank")
    outside.clear()
    failed.clear()
    page.goto(path.as_uri(), wait_until="load")

    broken_images = page.evaluate(
        "[...document.images].filter(i => !i.complete || i.naturalWidth === 0).map(i => i.src.slice(0, 80))")
    assert broken_images == []

    hrefs = page.evaluate("[...document.querySelectorAll('a[href]')].map(a => a.getAttribute('href'))")
    for href in hrefs:
        target = local_target(path, href)
        if target is not None:
            assert target.exists(), f"{path.name} links to {href}, which does not exist"
            fragment = urlparse(href).fragment
            if fragment and target == path:
                # As browsers do: the fragment as written, then percent-decoded.
                ids = {fragment, unquote(fragment)}
                assert page.evaluate("ids => ids.some(id => document.getElementById(id))", list(ids)), \
                    f"{href} has no anchor"

    if path.name != "index.html":
        nav = page.locator("nav.site")
        assert nav.count() == 2 and nav.first.locator('a[href="index.html"]').count() == 1
        wait_for_math(page, path)

    # Exercises as a student first meets them: the prompt and "not attempted", never a solution.
    for headline in page.locator(".autograd-lab-box > strong").all_inner_texts():
        assert "not attempted" in headline or headline.startswith("Hint "), f"{path.name}: {headline}"

    # A static page cannot run the trace's slider: it shows the saved picture, and asks for nothing.
    assert "install ipywidgets" not in page.inner_text("body")

    assert failed == [] and outside == [], f"requests that failed or left the site, console errors: {failed + outside}"
    site_artifacts = artifacts / "site"
    site_artifacts.mkdir(exist_ok=True)
    page.screenshot(path=site_artifacts / f"{path.stem}.png")


def wait_for_math(page, path):
    """The bundled MathJax typesets every formula, and none is left as raw TeX."""
    page.wait_for_function("window.MathJax && MathJax.Hub", timeout=30_000)
    # A callback queued now runs after the initial typeset; wait for it, boundedly.
    page.evaluate("window.__typeset = false; MathJax.Hub.Queue(() => { window.__typeset = true; })")
    page.wait_for_function("window.__typeset === true", timeout=MATH_S * 1000)
    assert page.locator(".MathJax_Error, merror, .mjx-merror").count() == 0, f"MathJax errors in {path.name}"
    formulas = page.locator('script[type^="math/tex"]').count()
    TYPESET[path.name] = formulas
    assert page.locator('[id^="MathJax-Element-"][id$="-Frame"]').count() == formulas, f"untypeset formulas in {path.name}"
    prose = " ".join(page.locator(".jp-MarkdownOutput").all_inner_texts())
    raw = re.findall(r"\$[^$\n]*\\[a-zA-Z]+[^$\n]*\$", prose)
    assert raw == [], f"{path.name} shows untypeset TeX: {raw[:3]}"


def test_the_math_check_saw_formulas(missing):
    # Runs after the pages: the checks above are not vacuous, the course has math and it was typeset.
    if not PAGES:
        missing(f"no site in {SITE}: run `make site` first (make test-browser does)")
    assert sum(TYPESET.values()) > 0, TYPESET
