"""Whether a documentation answer rests on the passages it was given: the checkable claims it makes.

A small model asked about something the documents do not hold ("Which keyword argument of
json.dumps sets the maximum nesting depth?") answers anyway, in the documents' own voice:
"The keyword argument `maxdepth` ...".  Asking the model whether its answer is in the passages
does not help: measured on the ``qa`` suite, Qwen2.5-Coder-0.5B-Instruct said "No" to every
"do the documents answer this?" and was at chance on "is your answer stated in them?".  What does
tell is lexical, in the spirit of RAG groundedness checks (RAGAS' faithfulness, NeMo
Guardrails' fact-checking rail), without a model call:

* **Unsupported claims.**  The exact things a documentation answer asserts can be checked
  against the text: code names (backticked spans, calls such as ``product(A, A)``, dotted
  names, snake_case and camelCase identifiers, a capitalized run before lower case such as ``SQLAlchemy`` or
  ``HTTPException`` but not a plural such as ``URLs``, ``f()``), quoted literals and numbers (with a unit
  written on, ``1MB`` or ``30s``, the number and its unit, together or a space apart).  A claim
  the question does not already name must occur in the passages the model was shown (a number
  as a whole number; a dotted name whole, or by its last two or more parts, or by a distinctive
  last part such as ``help_option_names``).  Fenced code blocks are not read for claims: an
  example's own function names, strings and numbers are the example's, not the documents', and a
  sentence that names them speaks of the example; so does one quoting the example's strings
  ("the logger named 'my_logger'") or its code word for word (`` `getLogger('my_logger')` ``), so long as
  the functions, keyword names, dotted names and numbers of that code are the documents'.  A literal
  the answer offers as an example, a string, URL or path right after "like", "such as", "e.g." or "for
  example" ("a URL like `/posts?id=123`"), is the example's too (:func:`offered_examples`).
  ``maxdepth``, ``3600``, ``jinja2.ext.case`` occur in none of the passages retrieved for their
  questions; a right answer's ``sort_keys`` does.  A number the question states in another unit is the
  question's (:func:`question_number`: ``3600`` for "after an hour", :mod:`loom.orchestrator.quantities`).
  What an example imports is read, though: a package outside the standard library that neither the
  passages nor the question name (``from flask_graphql import GraphQLSchema``, asked how Flask makes a
  GraphQL schema over Flask's docs) is a claim (:func:`example_imports`).  A call in a sentence is
  supported when it is made of what the passages and the question hold (:func:`call_supported`:
  `` `abort(403)` `` over passages showing ``abort(401)``, asked about a 403 error), not only when the
  passages write it word for word; so is a keyword with its value (`` `max_age=3600` ``) and an item
  of a documented name (`` `request.args['id']` ``).  A symbol standing alone as a word is a claim too
  ("The special file name is -."), checked as a whole token; "variable(s)" is a plural, not a call.
* **No number for a question about a quantity.**  "How many worker threads does heapq.merge use by
  default?" answered "a default number of worker threads, determined by the system's CPU" names no
  claim to check, yet does not answer.  A question that asks for a quantity (:func:`asks_quantity`:
  "How many / how much / how long ...", "What is the default / maximum port, timeout, size, number
  ...", "In which year ..."; not "Which argument limits how many ...?", which asks for a name) is
  answered only by an answer that gives one: a number, a number word such as "once", or no limit
  ("None", "unlimited").
* **A restated question.**  An answer that says nothing the question did not ("The argument of
  click.option sets a regular expression that the value must match.") names no claim and adds
  no word but function words: it is not an answer.  An initialism of the question's words adds
  nothing either ("The itsdangerous class signs JSON Web Tokens (JWT) with RS256.").
* **A yes that only restates.**  "Does Werkzeug include an ORM for talking to databases?" answered
  "Yes, Werkzeug does include an ORM for talking to databases." names no claim, yet asserts the
  question's premise.  A yes whose other words are all the question's (:func:`affirms`) stands only
  when one passage holds every content word of the question (less :data:`FILLER`, compared by their
  Snowball stems: "loading" is held by "loads"); the words that passage lacks (the one lacking
  fewest) are its unsupported claims (``ORM``, ``databases``: the sections shown never speak of
  them).  Words gathered from several passages state nothing together: in a chat, "Does marshmallow
  validate data when dumping?" found "dumping" in the previous turn's section on dump-only fields
  and "validate" in this turn's, and its "Yes" stood, though marshmallow validates on load only.
  A "no" is not checked: denying what the documents never mention is the honest answer.

:func:`check` returns all three; an answer with any is *ungrounded*.  An agent with
``no_match_answer`` set (a documentation-QA agent) replaces an ungrounded answer to a question
its retrieval showed passages for with that text (``loom.orchestrator.answer_check``).

Measured with ``loom eval run --suite qa`` (Qwen2.5-Coder-0.5B-Instruct, int8) and the records'
answers checked against the passages each question retrieved: see docs/evaluations.md.  The
check never looks at the question's gold answer; an answer in other words than the passages'
(``1 hour`` for ``3600``) counts as unsupported, which costs a right answer only when the
model paraphrases a number or a name.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from loom.orchestrator.quantities import states_number
from loom.retrieval.terms import stem

_CLAIM = re.compile(
    r"`(?P<code>[^`\n]{1,80})`"
    r"|(?<!\w)'(?P<quoted>[^'\n]{1,40})'(?!\w)|\"(?P<dquoted>[^\"\n]{1,40})\""
    r"|(?P<call>\b[A-Za-z_][\w.]*\((?!(?:s|es)\))[^()\n]{1,40}\))"
    r"|(?P<name>\b[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+(?:\(\))?|\b[A-Za-z_]\w*\(\))"
    r"|(?P<ident>\b[A-Za-z]\w*_\w+\b|\b[a-z]+[A-Z]\w*\b|\b[A-Z][a-z]+[A-Z]\w*\b|\b[A-Z]{2,}[a-z]{2,}\w*\b)"
    r"|(?P<number>(?<![\w.])\d+(?:\.\d+)?(?:[A-Za-z]{1,3}(?!\w))?(?!\w|\.\d))"
    r"|(?<!\S)(?P<symbol>[-+*/%|&^~<>=!@#$:]{1,3})(?=[.,;:!?)]*(?:\s|$))")
# A number with its unit written on (``1MB``, ``30s``, ``64KiB``): the unit may stand apart in the passages.
_UNIT = re.compile(r"(?P<value>\d+(?:\.\d+)?)(?P<unit>[A-Za-z]+)")
# A fenced code block: its opening fence (3+ backticks or tildes, a language tag), and its closing one or the end.
_FENCE = re.compile(r"^[ \t]*(?P<fence>`{3,}|~{3,})[^\n]*\n.*?(?:^[ \t]*(?P=fence)[ \t]*$|\Z)", re.S | re.M)
# What an example defines: ``def f(a, b=1)`` / ``class C(B)`` (the name, then the parameters' names), and the
# targets of ``x = ...``, ``for x, y in``, ``with ... as x``, ``except E as x``.
_DEFINES = re.compile(r"\b(?:async\s+)?(?P<kind>def|class)\s+(?P<name>[A-Za-z_]\w*)\s*(?:\((?P<params>[^)]*)\))?")
_PARAM = re.compile(r"(?:^|,)\s*\**([A-Za-z_]\w*)")
_TARGET = re.compile(r"^[ \t]*([A-Za-z_]\w*)[ \t]*(?::[^=\n]*)?=(?!=)|\bfor\s+([A-Za-z_]\w*)|\bas\s+([A-Za-z_]\w*)",
                     re.M)
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_']+")
# The number of an ordered list's item (``1. `` or ``2) `` at the start of a line), not a claim.
_LIST_NUMBER = re.compile(r"^(?P<indent>[ \t>]*)\d{1,3}[.)][ \t]+", re.M)
# In code: a called name (``f`` of ``f(x)``), a keyword argument's name, a dotted name, a number.
_CALLEE = re.compile(r"\b([A-Za-z_][\w.]*)\s*\(")
_KEYWORD = re.compile(r"\b([A-Za-z_]\w*)\s*=(?!=)")
_DOTTED = re.compile(r"\b[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
_WHOLE_CALL = re.compile(r"[A-Za-z_][\w.]*\(.*\)", re.S)  # a claim that is one call: ``abort(403)``
# A claim that is one keyword and its value (``max_age=3600``), or one item of a name (``request.args['id']``).
_WHOLE_KEYWORD = re.compile(r"[A-Za-z_]\w*\s*=(?!=)\s*\S.*", re.S)
_WHOLE_ITEM = re.compile(r"[A-Za-z_][\w.]*\[.*\]", re.S)
# What introduces an example ("a URL like", "such as", "e.g."), right before a literal the answer offers.
_EXAMPLE_CUE = re.compile(r"\b(?:like|such as|e\.g\.,?|for (?:example|instance),?)\s+(?:(?:a|an|the)\s+)?$", re.I)
_URL_OR_PATH = re.compile(r"(?:[A-Za-z][\w+.-]*://|/)\S*")
_ARG_NAME = re.compile(r"\b[A-Za-z_]\w*\b")
_STRUCTURE = re.compile(r"[(\[{='\"]")  # code that is more than a name: a call, a literal, an assignment
_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])")
# An example's import: ``import a.b`` / ``from a.b import c`` (not a relative one), at the start of a line.
_IMPORT = re.compile(r"^[ \t]*(?:from[ \t]+(?P<src>[A-Za-z_][\w.]*)[ \t]+import\b|import[ \t]+(?P<mods>[\w., \t]+))",
                     re.M)
_STDLIB = frozenset(sys.stdlib_module_names)
# A one-line string literal of an example: '...' or "..." (an f-string's or a bytes literal's body too).
_STRING = re.compile(r"(['\"])((?:(?!\1)[^\\\n]|\\.){1,80})\1")
_DISTINCTIVE = re.compile(r"_|[a-z][A-Z]|\d")

#: Words an answer may add to its question's without saying anything (function words, the
#: vocabulary of API questions: "argument", "default", "function", "value", ..., and words that point at
#: the prompt's documents: "The itsdangerous class in the given document signs JSON Web Tokens with RS256."
#: answers "Which itsdangerous class signs JSON Web Tokens with RS256?" with nothing).
FILLER = frozenset("""
a an the of to in on for and or is are be been by with from as at into than then that this these those it its
what which how does do did can could should would will may might when where whose who whom why if
i me my you your we our they their there here has have had was were also just only so such very any
itself themselves yourself myself ourselves
default value values set sets use used uses using return returns returned function functions argument arguments
parameter parameters method methods class classes option options module modules python keyword keywords
attribute attributes called call calls named name names make makes given give gives
document documents documentation docs provided above retrieved passage passages excerpt excerpts
""".split())


@dataclass(frozen=True)
class Grounding:
    """What :func:`check` found in an answer.

    Attributes:
        claims: the answer's checkable claims (code names, quoted literals, numbers) that its question does not name.
        unsupported: those of ``claims`` that occur in none of the passages.
        restates_question: the answer names no claim and adds no word but :data:`FILLER` to its question's.
        no_quantity: the question asks for a quantity (:func:`asks_quantity`) and the answer gives none.
    """

    claims: tuple[str, ...]
    unsupported: tuple[str, ...]
    restates_question: bool
    no_quantity: bool = False

    @property
    def grounded(self) -> bool:
        """No unsupported claim, more than the question restated, and a quantity when one is asked for."""
        return not self.unsupported and not self.restates_question and not self.no_quantity


_QUANTITY_QUESTION = re.compile(
    r"^(?!\s*(?:which|what)\b).*\bhow (?:many|much|long|often)\b|^\s*(?:in )?(?:which|what) year\b"
    r"|^\s*what is the (?:\w+ )?(?:default|maximum|minimum|max|min)(?: \w+)? (?:number|count|port|timeout|size"
    r"|length|depth|limit|precision)\b", re.I)
_QUANTITY = re.compile(
    r"\d|\b(?:zero|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|dozen|hundred|thousand|million"
    r"|once|twice|none|no limit|no maximum|unlimited|unbounded|infinite|infinitely|any number|arbitrary)\b", re.I)


def asks_quantity(question: str) -> bool:
    """Whether ``question`` asks for a quantity ("How many ...?", "Into how many parts ...?", "What is the
    default port ...?", "In which year ...?"), which only an answer giving a number (or "none",
    "unlimited") answers.  "Which argument limits how many ...?" asks for a name, not a quantity."""
    return _QUANTITY_QUESTION.search(question) is not None


def gives_quantity(answer: str) -> bool:
    """Whether ``answer`` states a quantity: a digit, a number word ("six", "once"), or no limit."""
    return _QUANTITY.search(answer) is not None


def _occurs(text: str, s: str, number: bool = False, ignore_case: bool = False) -> bool:
    """``s`` in ``text`` as a whole token (a number not inside a longer number either)."""
    left, right = (r"(?<![\w.])", r"(?!\w|\.\d)") if number else (r"(?<!\w)", r"(?!\w)")
    return re.search(left + re.escape(s) + right, text, re.I if ignore_case else 0) is not None


def names_claim(question: str, claim: str) -> bool:
    """Whether ``question`` holds ``claim`` (``()`` dropped) as a whole token, in any case."""
    core = claim.removesuffix("()").strip()
    return bool(core) and _occurs(question, core, ignore_case=True)


def prose(answer: str) -> str:
    """``answer`` without its fenced code blocks (```` ``` ```` or ``~~~``, one cut off by ``max_tokens``
    included).  An example's own names and values (``def hello():``, ``'Peter'``, ``exit_code == 0``)
    are not claims about the documents: checked, they refused good answers to "Show me how to add a
    --verbose flag to a command." over Click's docs.  What the answer states in its sentences is checked.
    Neither are the numbers of an ordered list (``1. **Install structlog**``): they count the steps."""
    return _LIST_NUMBER.sub(r"\g<indent>", _FENCE.sub("\n", answer))


def defined_in_examples(answer: str) -> list[str]:
    """The names the fenced code blocks of ``answer`` define: functions and classes, their parameters,
    assigned names and loop, ``with`` and ``except`` targets (``def print_lines(input):`` defines
    ``print_lines`` and ``input``).  A name an example only uses (``command.cancel()``, ``from click import
    confirm_option``) is not defined by it: the documents must hold it."""
    out: list[str] = []
    for block in _FENCE.finditer(answer):
        code = block.group(0)
        for m in _DEFINES.finditer(code):
            params = _PARAM.findall(m.group("params") or "") if m.group("kind") == "def" else []
            out.extend([m.group("name"), *params])
        out.extend(n for m in _TARGET.finditer(code) for n in m.groups() if n)
    return list(dict.fromkeys(out))


def example_strings(answer: str) -> list[str]:
    """The string literals the fenced code blocks of ``answer`` write (``getLogger('my_logger')`` writes
    ``my_logger``; ``log.info("user logged in")``, ``user logged in``), up to 80 characters each.  They are the
    example's own values, as its names are (:func:`defined_in_examples`): a sentence quoting them ("replace
    'my_logger' with your logger's name") speaks of the example.  Over structlog's docs, such sentences
    refused right how-to answers ("use the `structlog.getLogger` function ... the logger named
    'my_logger'").  Numbers in an example are not counted: an answer to "What is the default timeout?"
    that writes ``timeout=30`` in its example still needs the passages to hold 30."""
    out: list[str] = []
    for block in _FENCE.finditer(answer):
        body = block.group(0).split("\n", 1)[1] if "\n" in block.group(0) else ""  # not the fence's language tag
        out.extend(m.group(2) for m in _STRING.finditer(body) if m.group(2).strip())
    return list(dict.fromkeys(out))


def example_imports(answer: str) -> list[str]:
    """The packages the fenced code blocks of ``answer`` import that are not the standard library's
    (``sys.stdlib_module_names``; ``__future__`` included): the top-level name of each ``import a.b`` or
    ``from a.b import c`` (``flask_graphql`` of ``from flask_graphql import GraphQLSchema``), in order, each once.

    An example's other names are its own (:func:`prose`), but an import names a distribution to install:
    one the documents never mention is an answer from elsewhere.  Over Flask's docs, Qwen2.5-Coder-0.5B
    answered "How do I make Flask generate a GraphQL schema from my models?" with a ``Flask-GraphQL``
    library and ``from flask_graphql import ...``, no claim of its prose being checkable (``Flask`` and
    ``GraphQL`` are the question's words).  The names imported are not checked: a package re-exports
    (``from packaging import version`` is right where the docs write ``packaging.version``)."""
    out: list[str] = []
    for block in _FENCE.finditer(answer):
        for m in _IMPORT.finditer(block.group(0)):
            mods = ([m.group("src")] if m.group("src")
                    else [p.split()[0] for p in m.group("mods").split(",") if p.split()])
            out.extend(top for top in (mod.split(".")[0] for mod in mods)
                       if top and top not in _STDLIB and top != "__future__")
    return list(dict.fromkeys(out))


def _names_package(text: str, package: str) -> bool:
    """Whether ``text`` names ``package`` as a whole token, case and ``-`` / ``_`` aside (``Flask-SQLAlchemy``
    names ``flask_sqlalchemy``; ``flask-3.1.0`` names ``flask``)."""
    return _occurs(text, package, ignore_case=True) or _occurs(text.replace("-", "_"), package, ignore_case=True)


def quotes_example(claim: str, answer: str, text: str) -> bool:
    """Whether ``claim`` is code that a fenced example of ``answer`` writes word for word, made only of
    names ``text`` supports and the example's own values (a call, a literal, an assignment; not a name
    alone): a sentence quoting its example
    (`` `structlog.getLogger('my_logger')` ``, `` `['release_date', 'title']` ``) speaks of the example.  The
    functions it calls, its keyword names, its dotted names and its numbers must still be the documents'
    (``json.dumps(obj, maxdepth=3)`` is unsupported for ``maxdepth``); its strings and its plain positional
    names (``obj``, ``data``) are the example's."""
    span = claim.strip()
    if not _STRUCTURE.search(span) or not any(span in block.group(0) for block in _FENCE.finditer(answer)):
        return False  # a name alone (`cancel`, `Command.cancel`) names an API, even one the example uses
    return _code_supported(span, text)  # the example writes the span, so its strings are the example's


def _code_supported(code: str, text: str, question: str = "", arg_names: bool = False) -> bool:
    """Whether the functions ``code`` calls, its keyword names and dotted names (with ``arg_names``, its
    code-like names too: ``_``, an inner capital or a digit) are supported by ``text``, and its numbers by
    ``text`` or ``question``; its strings and plain words are its own values."""
    bare = _STRING.sub(" ", code)
    names = [*_CALLEE.findall(bare), *_KEYWORD.findall(bare), *_DOTTED.findall(bare)]
    if arg_names:
        names += [w for w in _ARG_NAME.findall(bare) if _DISTINCTIVE.search(w) and not w[0].isdigit()]
    return (all(supported(n, "name", text) for n in names)
            and all(supported(n, "number", text) or question_number(question, n) for n in _NUMBER.findall(bare)))


def call_supported(claim: str, text: str, question: str) -> bool:
    """Whether ``claim`` is a call (`` `abort(403)` ``, `` `Range(min=1, max=10)` ``), or a keyword and its value
    (`` `max_age=3600` ``), made only of what ``text``
    and ``question`` hold: its function, keyword names, dotted names and code-like argument names
    (``_``, an inner capital or a digit) supported by ``text``, its numbers by ``text`` or ``question``;
    its strings and plain argument words (``obj``, ``False``) are the sentence's own values.  Asked "How do I
    abort a request with a 403 error?" over Flask's quickstart (``abort(401)``), `` `abort(403)` `` is the
    documents' function with the question's number, not a claim neither holds; asked how a token stops
    being accepted after an hour, `` `max_age=3600` `` is the documents' keyword with the question's hour;
    `` `request.args['id']` `` is an item of the documents' ``request.args``."""
    span = claim.strip()
    whole = any(p.fullmatch(span) is not None for p in (_WHOLE_CALL, _WHOLE_KEYWORD, _WHOLE_ITEM))
    return whole and _code_supported(span, text, question, arg_names=True)


def claims(answer: str, question: str) -> list[tuple[str, str]]:
    """``(claim, kind)`` of each code name, number or lone symbol in the :func:`prose` of ``answer`` that
    ``question`` does not name, in order; kind ``code`` / ``quoted`` / ``dquoted`` / ``call`` / ``name`` /
    ``ident`` / ``number`` / ``symbol``.  The question names a number, a symbol or a code-like name (one with
    a dot, ``_``, an inner capital or a digit) when it holds it as a whole token; a plain word (``cancel()``,
    `` `markdown` ``) is always a claim, even when the question uses the word."""
    out = []
    for claim, kind, offered in _prose_claims(answer):
        core = claim.removesuffix("()").strip()
        if not core or offered:
            continue
        code_like = kind in ("number", "symbol") or "." in core or _DISTINCTIVE.search(core) is not None
        if not (code_like and _occurs(question, core, kind == "number", ignore_case=True)
                or question_number(question, core)):
            out.append((claim, kind))
    return out


def offered_examples(answer: str) -> list[str]:
    """The literals the :func:`prose` of ``answer`` offers as examples (``/posts?id=123`` in "a URL like
    `/posts?id=123`"): not claims, and the names they hold (``id``) are the example's, as those an example
    block defines are."""
    return [claim for claim, _, offered in _prose_claims(answer) if offered]


def _prose_claims(answer: str) -> Iterator[tuple[str, str, bool]]:
    """``(claim, kind, offered)`` of each :data:`_CLAIM` match in the :func:`prose` of ``answer``, in order;
    ``offered``: a literal the answer offers as an example, a quoted string, a URL or a path right after
    "like", "such as", "e.g." or "for example" ("a URL like `/posts?id=123`"), the example's own value as an
    example block's strings are."""
    text = prose(answer)
    for m in _CLAIM.finditer(text):
        kind = m.lastgroup or "code"
        claim = m.group(kind).strip()
        literal = kind in ("quoted", "dquoted") or (kind == "code" and _URL_OR_PATH.fullmatch(claim) is not None)
        yield claim, kind, literal and _EXAMPLE_CUE.search(text, max(0, m.start() - 40), m.start()) is not None


def question_number(question: str, claim: str) -> bool:
    """Whether ``claim`` is a number (its unit written on or not: ``3600``, ``3600s``) that ``question``
    holds as a whole number or states as a quantity in another unit (:func:`loom.orchestrator.quantities.
    stated_numbers`: ``3600`` for "after an hour")."""
    core = claim.strip()
    unit = _UNIT.fullmatch(core)
    value = unit["value"] if unit is not None else core
    if _NUMBER.fullmatch(value) is None:
        return False
    return _occurs(question, value, number=True) or states_number(question, value)


def supported(claim: str, kind: str, passages: str) -> bool:
    """Whether ``claim`` occurs in ``passages`` as a whole token (``()`` dropped; case counts but for a
    dotted name, which a sentence may capitalize), or, for a dotted name, by its last two or more parts or
    by a last part that is distinctive (has ``_``, an inner capital or a digit) or a class name
    (capitalized)."""
    core = claim.removesuffix("()").strip()
    if not core:
        return True
    if kind == "number":
        unit = _UNIT.fullmatch(core)
        if unit is None:
            return _occurs(passages, core, number=True)
        pattern = rf"(?<![\w.]){re.escape(unit['value'])}\s?{re.escape(unit['unit'])}(?!\w)"
        return re.search(pattern, passages, re.I) is not None
    if _occurs(passages, core, ignore_case="." in core):
        return True
    parts = core.split(".")
    for i in range(1, len(parts)):
        tail = ".".join(parts[i:])
        distinctive = len(parts) - i >= 2 or _DISTINCTIVE.search(tail) is not None or tail[:1].isupper()
        if distinctive and _occurs(passages, tail):
            return True
    return False


def _asked(question: str) -> set[str]:
    """The question's words, lower-cased, with the initialisms of its runs of capitalized words ("JSON Web
    Tokens": ``jwt``; "Web Server Gateway Interface": ``wsgi``, ``sgi`` ...)."""
    words = _WORD.findall(question)
    asked = {w.lower() for w in words}
    run: list[str] = []
    for w in [*words, ""]:
        if w[:1].isupper():
            run.append(w[0].lower())
            continue
        asked |= {"".join(run[i:j]) for i in range(len(run)) for j in range(i + 2, len(run) + 1)}
        run = []
    return asked


def restates(answer: str, question: str, found: list[tuple[str, str]] | None = None,
             form: Callable[[str], str] = str.lower) -> bool:
    """The answer names no claim (``found``: its :func:`claims`, computed when not given) and its words,
    less :data:`FILLER`, are all the question's (or initialisms of its capitalized words), compared as
    ``form`` gives them (lower-cased; :func:`affirms` compares stems)."""
    if found if found is not None else claims(answer, question):
        return False
    asked = {form(w) for w in _asked(question)}
    return all(form(w) in asked for w in {w.lower() for w in _WORD.findall(answer)} - FILLER)


_YES = re.compile(r"\W*(?:yes|yeah|yep|indeed|correct)\b", re.I)
_POSSESSIVE = re.compile(r"'s?$")


def affirms(answer: str, question: str, found: list[tuple[str, str]] | None = None) -> bool:
    """The answer says yes ("Yes", "Indeed", ...) and otherwise only restates ``question`` (:func:`restates`),
    a word also in another form of the question's ("Yes, it validates ..." to "Does it validate ...?",
    compared by Snowball stems)."""
    match = _YES.match(answer)
    return match is not None and restates(answer[match.end():], question, found, form=stem)


def unstated_words(question: str, passages: str) -> list[str]:
    """The content words of ``question`` (less :data:`FILLER`) that ``passages`` do not hold, compared by
    their Snowball English stems ("loading" is held by "loads"; a possessive ``'s`` dropped), in the
    question's order and spelling."""
    held = {stem(_POSSESSIVE.sub("", w)) for w in _WORD.findall(passages)}
    out: list[str] = []
    for w in _WORD.findall(question):
        bare = _POSSESSIVE.sub("", w)
        if bare.lower() not in FILLER and stem(bare) not in held and bare not in out:
            out.append(bare)
    return out


def _unstated_premise(question: str, passages: Sequence[str]) -> list[str]:
    """The question's content words that the passage holding most of them lacks (:func:`unstated_words`):
    a yes rests on one passage, not on words gathered from several."""
    return min((unstated_words(question, p) for p in passages), key=len, default=unstated_words(question, ""))


def check(answer: str, question: str, passages: Iterable[str]) -> Grounding:
    """The claims of ``answer`` to ``question``, which of them ``passages`` (the texts the model was
    shown, a passage each: a yes must rest on one of them; and the names the answer's own examples define,
    the strings they write and the literals it offers as examples: its sentences may speak of them) do not
    support, whether the answer only restates the question, and whether it leaves a quantity the question
    asks for unstated."""
    passages = list(passages)
    shown = "\n".join(passages)
    text = "\n".join([shown, " ".join(defined_in_examples(answer)), *example_strings(answer),
                      *offered_examples(answer)])
    found = list(dict.fromkeys(claims(answer, question)))  # each claim once, in order
    imports = [p for p in example_imports(answer) if not _names_package(question, p)]
    premise = _unstated_premise(question, passages) if affirms(answer, question, found) else []
    return Grounding(claims=tuple([*(c for c, _ in found), *imports]),
                     unsupported=tuple([*(c for c, k in found
                                          if not supported(c, k, text) and not quotes_example(c, answer, text)
                                          and not (k in ("code", "call") and call_supported(c, text, question))),
                                        *(p for p in imports if not _names_package(shown, p)), *premise]),
                     restates_question=restates(answer, question, found),
                     no_quantity=asks_quantity(question) and not gives_quantity(answer))
