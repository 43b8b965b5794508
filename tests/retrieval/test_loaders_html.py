"""HTML loader: main content only, chrome stripped (loom.retrieval.loaders.html)."""

from __future__ import annotations

from pathlib import Path

from loom.retrieval.loaders import load_file, load_html
from loom.retrieval.types import Document

DATA = Path(__file__).parent / "data"


def _all(doc: Document) -> str:
    return "\n".join(f"{s.heading}\n{s.text}" for s in doc.sections)


def test_real_sphinx_page_keeps_main_text_and_drops_sidebar_related_bars_and_footer() -> None:
    doc = load_file(DATA / "sqlalchemy-2.0.36_faq_installation.sphinx-classic.html")
    assert doc.title == "Installation — SQLAlchemy 2.0.36 documentation"
    heading = ("Installation > I’m getting an error about greenlet not being installed when I "
               "try to use asyncio")
    assert [(s.heading, s.text) for s in doc.sections] == [(heading, (
        "The greenlet dependency does not install by default for CPU architectures for which "
        "greenlet does not supply a pre-built binary wheel. Notably, this includes Apple M1. To "
        "install including greenlet, add the asyncio setuptools extra to the pip install command:"
        "\n\npip install sqlalchemy[asyncio]\n\nFor more background, see asyncio_install.\n\n"
        "See also\n\nasyncio_install"))]
    text = _all(doc)
    for chrome in ("Navigation", "Table of Contents", "Previous topic", "Next topic", "This Page",
                   "Show Source", "Quick search", "Copyright", "Created using Sphinx", "»", "¶",
                   "Frequently Asked Questions", "next |"):
        assert chrome not in text, chrome


def test_main_element_is_chosen_and_navigation_header_footer_aside_are_dropped() -> None:
    doc = load_html(
        "<html><head><title>Guide</title><style>p{}</style></head><body>"
        "<header><a>Site logo</a><nav><a>Home</a> <a>Blog</a></nav></header>"
        "<div class='wrapper'><aside class='sidebar-left'>Sidebar links</aside>"
        "<main><nav aria-label='breadcrumbs'>Docs / Guide</nav>"
        "<h1>Guide<a class='headerlink' href='#guide'>¶</a></h1>"
        "<div class='toc'>Table of contents: Install, Use</div>"
        "<p>Install it with <code>pip</code>.</p><script>track()</script>"
        "<h2>Use</h2><pre>  run --fast\n  twice</pre>"
        "<table><tr><th>Flag</th><th>Meaning</th></tr><tr><td>--fast</td><td><p>go</p>"
        "<p>quickly</p></td></tr></table>"
        "<aside class='footnote-list'><p>[1] A kept footnote.</p></aside></main></div>"
        "<footer>Copyright 2024</footer></body></html>", "g.html")
    assert [(s.heading, s.text) for s in doc.sections] == [
        ("Guide", "Install it with pip."),
        ("Guide > Use", "run --fast\n  twice\n\nFlag | Meaning\n--fast | go quickly\n\n"
                        "[1] A kept footnote."),
    ]


def test_mkdocs_material_article_is_the_main_content() -> None:
    doc = load_html(
        "<body><div class='md-container'><main class='md-main'><div class='md-main__inner'>"
        "<div class='md-sidebar md-sidebar--primary'><nav>Tutorial pages</nav></div>"
        "<div class='md-sidebar md-sidebar--secondary'>On this page</div>"
        "<div class='md-content'><article class='md-content__inner md-typeset'>"
        "<a class='md-content__button' href='edit'>Edit this page</a>"
        "<h1 id='first-steps'>First Steps</h1><p>Create a file.</p>"
        "<div class='admonition tip'><p class='admonition-title'>Tip</p><p>Use uv.</p></div>"
        "</article></div></div></main><footer class='md-footer'>Made with Material</footer>"
        "</div></body>", "m.html")
    assert [(s.heading, s.text) for s in doc.sections] == [
        ("First Steps", "Create a file.\n\nTip\n\nUse uv.")]


def test_page_without_main_markup_falls_back_to_body() -> None:
    doc = load_html("<html><head><title>T</title></head><body><script>alert(1)</script>"
                    "<p>before</p><h1>Top</h1><p>one <b>bold</b></p>"
                    "<h2>Sub</h2><ul><li>a</li><li>b</li></ul></body></html>", "x.html")
    assert doc.title == "T"
    assert [(s.heading, s.text) for s in doc.sections] == [
        ("", "before"), ("Top", "one bold"), ("Top > Sub", "a\n\nb")]
    assert "alert" not in _all(doc)


def test_real_sphinx_autodoc_page_entries_are_sections_with_object_metadata() -> None:
    doc = load_file(DATA / "sqlalchemy-2.0.36_core_inspection.sphinx-autodoc.html")
    entries = [s for s in doc.sections if s.metadata]
    assert [s.metadata for s in entries] == [
        {"object": "sqlalchemy.inspect", "objtype": "function", "module": "sqlalchemy"}]
    (inspect,) = entries
    assert inspect.heading == "Runtime Inspection API"
    assert inspect.text.startswith(
        "sqlalchemy.inspect(subject: Type[_InspectableTypeProtocol[_IN]], raiseerr: bool = True)"
        " → _IN\nsqlalchemy.inspect(subject: _InspectableProtocol[_IN], raiseerr: bool = True)")
    assert "Produce an inspection object for the given target." in inspect.text
    prose = [s for s in doc.sections if not s.metadata]
    assert prose[0].text.startswith("The inspection module provides the _sa.inspect() function")
    assert prose[-1].heading == "Runtime Inspection API > Available Inspection Targets"
    for chrome in ("Quick search", "Show Source", "Created using Sphinx", "¶", "»"):
        assert chrome not in _all(doc), chrome


def test_sphinx_class_members_are_entries_of_their_own_after_the_class() -> None:
    doc = load_html(
        "<div class='body' role='main'><section><h1>API</h1>"
        "<span class='target' id='module-pkg'></span>"
        "<dl class='py class'><dt class='sig sig-object py' id='pkg.Session'>"
        "<em class='property'>class </em><span class='sig-prename descclassname'>pkg.</span>"
        "<span class='sig-name descname'>Session</span>(<em>bind</em>)"
        "<a class='headerlink' href='#pkg.Session'>¶</a></dt>"
        "<dd><p>Manages persistence.</p>"
        "<dl class='py method'><dt class='sig sig-object py' id='pkg.Session.merge'>"
        "<span class='sig-name descname'>merge</span>(<em>instance</em>) → object</dt>"
        "<dd><p>Copy state.</p></dd></dl></dd></dl>"
        "<p>After the class.</p></section></div>", "api.html")
    assert [(s.heading, s.text, s.metadata) for s in doc.sections] == [
        ("API", "class pkg.Session(bind)\n\nManages persistence.",
         {"object": "pkg.Session", "objtype": "class", "module": "pkg"}),
        ("API", "pkg.Session.merge(instance) → object\n\nCopy state.",
         {"object": "pkg.Session.merge", "objtype": "method", "module": "pkg"}),
        ("API", "After the class.", {}),
    ]
