"""Markdown loader: the MkDocs dialect, markdown-it-py + mdit-py-plugins (loaders.markdown)."""

from __future__ import annotations

from pathlib import Path

from loom.retrieval.loaders import load_file, load_markdown
from loom.retrieval.types import Document

DATA = Path(__file__).parent / "data"
MARKERS = ("///", "!!!", "???", "===", "{*", "*}", "{!", "!}", "{%", "{{", "{ #", "--8<--")


def _text(doc: Document) -> str:
    return "\n\n".join(s.text for s in doc.sections)


def _no_markers(doc: Document) -> None:
    for s in doc.sections:
        for marker in MARKERS:
            assert marker not in s.text and marker not in s.heading, (marker, s.heading, s.text)


def test_real_fastapi_page_blocks_keep_title_and_body_without_markers() -> None:
    doc = load_file(DATA / "fastapi-c3f316b_tutorial_metadata.md")
    _no_markers(doc)
    assert doc.title == "Metadata and Docs URLs"
    assert [s.heading for s in doc.sections][:4] == [
        "Metadata and Docs URLs", "Metadata and Docs URLs > Metadata for API",
        "Metadata and Docs URLs > License identifier", "Metadata and Docs URLs > Metadata for tags"]
    by_heading = {s.heading: s.text for s in doc.sections}
    assert ("You can set them as follows:\n\nTip\n\nYou can write Markdown in the description "
            "field and it will be rendered in the output.\n\nWith this configuration"
            ) in by_heading["Metadata and Docs URLs > Metadata for API"]
    assert by_heading["Metadata and Docs URLs > Metadata for tags > Use your tags"] == (
        "Use the tags parameter with your path operations (and APIRouters) to assign them to "
        "different tags:\n\nNote\n\nRead more about tags in Path Operation Configuration.")


def test_real_fastapi_table_is_rows_of_cells() -> None:
    text = _text(load_file(DATA / "fastapi-c3f316b_tutorial_metadata.md"))
    assert ("Parameter | Type | Description\ntitle | str | The title of the API.\n"
            "summary | str | A short summary of the API. Available since OpenAPI 3.1.0, "
            "FastAPI 0.99.0.\n") in text
    # an HTML table inside a cell is that cell's text, words kept apart
    assert ("contact | dict | The contact information for the exposed API. It can contain several "
            "fields. contact fields Parameter Type Description name str The identifying name") in text


def test_real_fastapi_admonitions_and_content_tabs_keep_titles_and_bodies() -> None:
    doc = load_file(DATA / "fastapi-0.110.2_tutorial_request-forms-and-files.md")
    _no_markers(doc)
    assert [(s.heading, s.text) for s in doc.sections][:2] == [
        ("Request Forms and Files",
         "You can define files and form fields at the same time using File and Form.\n\n"
         "Info\n\nTo receive uploaded files and/or form data, first install python-multipart.\n\n"
         "E.g. pip install python-multipart."),
        # the tabs that only held a snippet include are gone; the one with a tip stays
        ("Request Forms and Files > Import File and Form",
         "Python 3.8+ non-Annotated\n\nTip\n\nPrefer to use the Annotated version if possible."),
    ]
    assert "Warning\n\nYou can declare multiple File and Form parameters" in _text(doc)


def test_real_fastapi_code_fences_lose_only_their_include_lines() -> None:
    text = _text(load_file(DATA / "fastapi-0.110.2_tutorial_request-forms-and-files.md"))
    assert "tutorial001" not in text and "docs_src" not in text and "hl_lines" not in text
    doc = load_markdown("# Code\n\n```python\n{!> ../docs_src/app.py!}\nx = {'a': 1}  # {% raw %}\n"
                        "\n    indented()\n```\n", "c.md")
    assert doc.sections[0].text == "x = {'a': 1}  # {% raw %}\n\n    indented()"


def test_real_front_matter_is_not_text_and_jinja_macros_are_dropped() -> None:
    doc = load_file(DATA / "fastapi-c3f316b_external-links.md")
    _no_markers(doc)
    assert doc.title == "External Links"
    assert doc.metadata == {"format": "md"}  # include_yaml is a mapping, not a simple field
    text = _text(doc)
    assert "include_yaml" not in text and "topic_repos" not in text
    assert "Note\n\nBefore, this page used to list links to external articles." in text


def test_front_matter_title_and_simple_fields_become_title_and_metadata() -> None:
    doc = load_markdown("---\ntitle: Deploying\ndescription: How to ship it\ndate: 2024-05-01\n"
                        "tags: [deploy, docker]\nhide:\n  - navigation\nextra: {nested: 1}\n---\n\n"
                        "# Deployment\n\nShip it.\n", "d.md")
    assert doc.title == "Deploying"
    assert doc.metadata == {"description": "How to ship it", "date": "2024-05-01",
                            "tags": ["deploy", "docker"]}
    assert [(s.heading, s.text) for s in doc.sections] == [("Deployment", "Ship it.")]


def test_admonition_forms_and_nested_blocks_keep_titles_and_bodies() -> None:
    doc = load_markdown(
        '# Page { #page }\n\n!!! warning "Mind the `gap`"\n    Body **one**.\n\n'
        "??? tip\n    Collapsed body.\n\n???+ note \"\"\n    Untitled body.\n\n"
        "/// details | Using `pip` instead\n\nRun pip.\n\n///\n\n"
        "//// tab | Python 3.10+\n\n/// note\n\nInner note.\n\n///\n\n"
        "{* ../../docs_src/app.py hl[3] *}\n\n////\n\n"
        "See the [guide](guide.md){.internal-link target=_blank}.\n\n"
        '--8<-- "snippets/footer.md"\n', "a.md")
    assert [(s.heading, s.text) for s in doc.sections] == [(
        "Page",
        "Mind the gap\n\nBody one.\n\nTip\n\nCollapsed body.\n\nUntitled body.\n\n"
        "Using pip instead\n\nRun pip.\n\nPython 3.10+\n\nNote\n\nInner note.\n\n"
        "See the guide.")]


def test_real_click_page_shows_myst_roles_as_sphinx_does_not_their_braces() -> None:
    # Click's docs are MyST: {func}`prompt` renders as prompt(), {ref}`optional-value` as its label's text
    doc = load_file(DATA / "click-8.5.1_prompts.md")
    text = _text(doc)
    assert "{func}" not in text and "{ref}" not in text
    assert "prompt()" in text and "confirm()" in text and "optional-value" in text


def test_myst_roles_take_sphinx_s_text_and_braces_elsewhere_stay() -> None:
    doc = load_markdown("# T\n\nUse {func}`click.echo`, {class}`~click.Choice`, {ref}`the page <options>` and "
                        "{py:meth}`Context.invoke`; `{name}` and f\"{x}\" stay.\n", "t.md")
    assert _text(doc) == ("Use click.echo(), Choice, the page and Context.invoke(); {name} and f\"{x}\" stay.")
