"""An answer is grounded when every code name and number it asserts (beyond the question's) occurs in the
passages, and it says more than the question: ``loom.orchestrator.grounding`` on answers the default model
gave to the ``qa`` suite (the agent's use of it: tests/orchestrator/test_answer_check.py)."""

from __future__ import annotations

from loom.orchestrator.grounding import (check, defined_in_examples, example_imports, example_strings, names_claim,
                                         offered_examples)

JSON_DOCS = ("json.dumps(obj, *, skipkeys=False, ensure_ascii=True, check_circular=True, allow_nan=True, "
             "cls=None, indent=None, separators=None, default=None, sort_keys=False, **kw)\n"
             "If sort_keys is true (default: False), then the output of dictionaries will be sorted by key.")


def test_a_name_the_passages_hold_is_supported_and_one_they_do_not_is_not():
    q = "Which keyword argument of json.dumps makes the output of dictionaries sorted by key?"
    right = check("The keyword argument `sort_keys` of `json.dumps` sorts the output by key.", q, [JSON_DOCS])
    assert right.grounded and right.claims == ("sort_keys",)
    q = "Which keyword argument of json.dumps sets the maximum nesting depth of the output?"
    made_up = check("The keyword argument `maxdepth` of `json.dumps` sets the maximum nesting depth.", q, [JSON_DOCS])
    assert not made_up.grounded and made_up.unsupported == ("maxdepth",)


def test_a_number_counts_only_as_a_whole_number():
    q = "What is the default expiry time of the entries of FileSystemBytecodeCache?"
    passages = ["FileSystemBytecodeCache(directory=None, pattern='__jinja2_%s.cache') ... 36001 bytes"]
    g = check("The default expiry time is 3600 seconds.", q, passages)
    assert g.unsupported == ("3600",)
    assert check("It holds 36001 bytes.", "How many bytes?", passages).grounded


def test_a_number_with_its_unit_written_on_is_a_claim_found_with_or_without_a_space():
    q = "What chunk size does shutil.rmtree use by default when deleting large files?"
    made_up = check("shutil.rmtree uses a chunk size of 1MB by default.", q, ["shutil.rmtree(path): delete 10 files"])
    assert made_up.unsupported == ("1MB",)
    assert check("It uses 1MB.", q, ["a buffer of 1 MB is used"]).grounded
    assert check("It waits 30s, then 2.5ms.", q, ["timeout=30 s, then 2.5MS"]).grounded
    assert check("It waits 30s.", q, ["timeout=300 s"]).unsupported == ("30s",)


def test_a_question_about_a_quantity_needs_an_answer_that_gives_one():
    q = "How many worker threads does heapq.merge use by default?"
    vague = check("heapq.merge uses a default number of worker threads, set by the CPU.", q,
                  ["heapq.merge(*iterables)"])
    assert vague.no_quantity and not vague.grounded
    assert check("It uses 4 worker threads.", q, ["merges 4 inputs"]).grounded
    assert check("It can be used once.", "How many times can nargs=-1 be used?", ["nargs=-1"]).grounded
    assert check("There is no limit: the cycle is unlimited.", "How many strings can loop.cycle take?", []).grounded
    assert check("The default port is none: it has no server.", "What is the default port of the server?", []).grounded
    # "Which argument limits how many ...?" asks for a name, not a quantity
    assert not check("The `memo` argument.", "Which argument of copy.deepcopy limits how many levels deep it goes?",
                     ["copy.deepcopy(x, memo=None)"]).no_quantity


def test_a_dotted_name_is_found_by_its_last_parts_when_they_are_distinctive():
    passages = ["Context.help_option_names: the names of the help options."]
    q = "Which setting names the help options?"
    assert check("It is `click.Context.help_option_names`.", q, passages).grounded
    assert check("It is `help_option_names`.", q, passages).grounded
    # "case" alone is an English word of the passages, not the extension's name
    made_up = check("The extension `jinja2.ext.case` adds it.", "Which extension adds a switch/case statement?",
                    ["Use a case-insensitive comparison. jinja2.ext.do adds the do statement."])
    assert made_up.unsupported == ("jinja2.ext.case",)


def test_an_answer_that_restates_the_question_is_not_grounded():
    q = "Which argument of click.option sets a regular expression that the value must match?"
    g = check("The argument of click.option sets a regular expression that the value must match.", q, ["click.option"])
    assert g.restates_question and not g.grounded
    q = "Which built-in Jinja filter converts Markdown text to HTML?"
    assert not check("The built-in Jinja filter that converts Markdown text to HTML is `markdown`.", q, []).grounded
    assert check("The filter is called striptags; it removes tags.", q, ["striptags"]).grounded


def test_an_answer_that_points_at_the_documents_only_restates_the_question():
    # Qwen2.5-Coder-0.5B over itsdangerous's docs, which describe no JWT class
    q = "Which itsdangerous class signs JSON Web Tokens with RS256?"
    g = check("The itsdangerous class in the given document signs JSON Web Tokens with RS256.", q, ["Serializer"])
    assert g.restates_question and not g.grounded
    assert not check("The provided documentation says it signs tokens with RS256.", q, []).restates_question


def test_an_initialism_of_the_questions_capitalized_words_adds_nothing():
    # the default model's answer through `loom serve` over itsdangerous's docs (the how-to set)
    q = "Which itsdangerous class signs JSON Web Tokens with RS256?"
    assert check("The itsdangerous class signs JSON Web Tokens (JWT) with RS256.", q, ["Serializer"]).restates_question
    assert not check("The itsdangerous class signs JSON Web Tokens with JWS.", q, ["JWS"]).restates_question


def test_a_yes_that_restates_the_question_needs_the_questions_words_in_the_passages():
    # Qwen2.5-Coder-0.5B over Werkzeug's docs, shown "API Levels", which never speaks of an ORM
    orm = "Does Werkzeug include an ORM for talking to databases?"
    levels = ["Werkzeug is intended to be a utility rather than a framework. Because of that the user-friendly "
              "API is separated from the lower-level API."]
    g = check("Yes, Werkzeug does include an ORM for talking to databases.", orm, levels)
    assert not g.grounded and g.unsupported == ("include", "ORM", "talking", "databases")
    # a passage holding the question's words, by their stems ("loading" / "loads", "validate" / "validates")
    q = "Can marshmallow validate data when loading it?"
    passage = ["Schema.load validates the data it loads and raises a ValidationError."]
    assert check("Yes, marshmallow can validate data when loading it.", q, passage).unsupported == ("marshmallow",)
    assert check("Yes, marshmallow can validate data when loading it.", q, ["marshmallow: " + passage[0]]).grounded
    # a no, and a yes that says more than the question, are checked as any answer is
    assert check("No, Werkzeug does not include an ORM for talking to databases.", orm, levels).grounded
    assert check("Yes: `werkzeug.orm.Session` talks to databases.", orm, levels).unsupported == ("werkzeug.orm.Session",)


def test_a_yes_rests_on_one_passage_not_on_words_gathered_from_several():
    # `loom chat` over marshmallow's docs: "dumping" came from the previous turn's section, "validate" from this one's
    q = "Does marshmallow validate data when dumping?"
    dump_only = "marshmallow: dump_only fields are used when dumping data and ignored when loading it."
    validate = "marshmallow.validate: validators check a field's value."
    answer = "Yes, marshmallow validates data when dumping."
    assert check(answer, q, [dump_only + "\n" + validate]).grounded  # one passage holding every word
    g = check(answer, q, [dump_only, validate])
    assert not g.grounded and g.unsupported == ("validate",)  # what the passage holding most of them lacks
    assert check("No, marshmallow does not validate data when dumping.", q, [dump_only, validate]).grounded


def test_claims_the_question_names_need_no_support():
    q = "What does json.dumps return?"
    assert check("json.dumps returns a str.", q, ["Serialize obj to a JSON formatted str."]).grounded


def test_a_claim_made_twice_is_listed_once():
    g = check("Use `my_list` and then `my_list` again, with 3 and 3.", "How?", ["nothing"])
    assert g.unsupported == ("my_list", "3")


CLICK_DOCS = ("Basic Concepts - Creating a Command: Click is based on declaring commands through decorators. "
              "`@click.command()` turns a function into a command; `@click.option('-v', '--verbose', count=True)` "
              "counts how often the flag is given. `click.echo` prints.")


def test_an_examples_own_names_and_values_in_a_code_block_are_not_claims():
    # Qwen2.5-Coder-0.5B's answer over Click's docs, refused before code blocks were left out of the claims
    answer = ("To add a --verbose flag, use `@click.option`:\n\n```python\nfrom click import command, option\n\n"
              "@command()\n@click.option('-v', '--verbose', count=True)\ndef log(verbose):\n"
              "    click.echo(f\"Verbosity: {verbose}\")\n    return 3\n```\n\nIn this code, the `log` function "
              "accepts the `--verbose` flag.")
    g = check(answer, "Show me how to add a --verbose flag to a command.", [CLICK_DOCS])
    assert g.grounded, g
    assert "@command()" not in g.claims and "3" not in g.claims  # inside the example
    assert "log" in g.claims  # named in a sentence, supported because the example defines it


def test_a_name_an_example_only_uses_still_needs_the_passages():
    # the model's invented API: the example calls it, so a sentence naming it is not about the example's own names
    answer = ("Use the `cancel` method of the `Command` class:\n\n```python\ncommand = Command('name')\n"
              "command.cancel()\n```")
    g = check(answer, "How do I cancel a running command?", [CLICK_DOCS])
    assert g.unsupported == ("cancel",)  # `Command` is a word of the passages


def test_a_call_of_the_documents_function_with_the_questions_number_is_supported():
    # Qwen2.5-Coder-0.5B over Flask's quickstart, which shows abort(401): refused for `abort(403)` before
    docs = ["to abort a request early with an error code, use the abort() function:\n\n    abort(401)"]
    q = "How do I abort a request with a 403 error?"
    assert check("Call `abort(403)` in the view.", q, docs).grounded
    assert check("Call `abort(404)` in the view.", q, docs).unsupported == ("abort(404)",)  # neither holds 404
    assert check("Call `abort(403, reason='no')`.", q, docs).unsupported == ("abort(403, reason='no')",)
    assert check("Call `deny(403)`.", q, docs).unsupported == ("deny(403)",)


def test_a_number_that_is_the_questions_quantity_in_another_unit_is_the_questions():
    # Qwen2.5-Coder-0.5B over itsdangerous' docs: refused before for a 3600 no passage holds
    docs = ["loads(s, max_age=None): max_age: Ensure the signature is not older than this time in seconds."]
    q = "How do I make a signed token stop being accepted after an hour?"
    assert check("Set the `max_age` parameter to 3600 seconds.", q, docs).grounded
    assert check("Pass `max_age=3600` to `loads`.", q, docs).grounded
    assert check("Pass `max_age=60*60` to `loads`.", q, docs).grounded  # 60 minutes: the hour in minutes
    assert check("Set `max_age` to 7200 seconds.", q, docs).unsupported == ("7200",)  # two hours: not asked
    assert check("Pass `max_ages=3600`.", q, docs).unsupported == ("max_ages=3600",)  # a keyword docs lack
    no_quantity = "What is the default timeout in seconds of pathlib.Path.read_text?"
    assert check("The default timeout is 3600 seconds.", no_quantity, docs).unsupported == ("3600",)


def test_a_literal_offered_as_an_example_is_the_examples_and_an_item_of_a_documented_name_is_supported():
    # Qwen2.5-Coder-0.5B over Flask's docs: right, and refused before for the URL it offered as an example
    answer = ("Use the `request.args` dictionary. For example, if you have a URL like `/posts?id=123`, "
              "you can access the query string parameter `id` using `request.args['id']`.")
    q = "How do I get a query string parameter from the URL in a view?"
    assert check(answer, q, ['searchword = request.args.get("key", "")']).grounded
    assert check(answer, q, ['client.get("/posts")']).unsupported == ("request.args", "request.args['id']")
    assert offered_examples(answer) == ["/posts?id=123"]
    asserted = "The default static URL path is `/static`."  # a path the answer asserts, not one it offers
    assert check(asserted, "What is the static URL path by default?", ["static_url_path"]).unsupported == ("/static",)
    assert check("Read `request.form['id']`.", q, ["request.args"]).unsupported == ("request.form['id']",)


def test_a_code_block_cut_off_by_max_tokens_is_still_a_code_block():
    answer = "Here is how:\n\n```python\ndef hello(name):\n    click.echo(f'Hello {name}!', err=42)"
    assert check(answer, "How do I greet?", [CLICK_DOCS]).claims == ()


FLASK_DOCS = ('<document source="/docs/flask-3.1.0/docs/patterns/sqlalchemy.rst - SQLAlchemy in Flask">\n'
              "Flask-SQLAlchemy handles the session for you.\n\n    from flask import Flask\n</document>")


def test_an_example_importing_a_package_the_documents_never_name_is_not_grounded():
    # Qwen2.5-Coder-0.5B over Flask's docs: its prose names only the question's words, its example the package
    answer = ("To generate a GraphQL schema from your Flask models, you can use the Flask-GraphQL library.\n\n"
              "```python\nfrom flask import Flask\nfrom flask_graphql import GraphQLSchema, ObjectType\n```")
    g = check(answer, "How do I make Flask generate a GraphQL schema from my models?", [FLASK_DOCS])
    assert g.unsupported == ("flask_graphql",) and not g.grounded
    used = "Use the extension:\n\n```python\nfrom flask_sqlalchemy import SQLAlchemy\nimport os, json\n```"
    assert check(used, "How do I use a database?", [FLASK_DOCS]).grounded  # Flask-SQLAlchemy; stdlib modules
    asked = "```python\nimport redis\n```"
    assert check("Like this:\n" + asked, "How do I cache in Redis from Flask?", [FLASK_DOCS]).grounded


def test_an_examples_imports_are_the_top_level_packages_outside_the_standard_library():
    answer = ("```python\nfrom flask_graphql.views import GraphQLView\nimport numpy as np, attr.validators\n"
              "from . import models\nfrom __future__ import annotations\nimport os.path\n```\n"
              "and in a sentence: import pandas")
    assert example_imports(answer) == ["flask_graphql", "numpy", "attr"]


def test_what_an_example_defines():
    answer = ("```python\n@click.argument('input', type=click.File('r'))\ndef print_lines(input, *rest, n: int = 1, "
              "**kw):\n    for line in input:\n        out = line\n    with open(p) as fh:\n        pass\n"
              "class Cli(Base):\n    pass\nfrom click import confirm_option\nconfirm_option()\n```\n~~~\ntotal = 0\n~~~")
    assert defined_in_examples(answer) == ["print_lines", "input", "rest", "n", "kw", "Cli", "line", "out", "fh",
                                           "total"]
    assert defined_in_examples("no example, `x = 1` inline") == []


def test_a_sentence_quoting_its_examples_strings_speaks_of_the_example():
    # Qwen2.5-Coder-0.5B's answer over structlog's docs (stdlib.md's get_logger section shown), refused for 'my_logger'
    passages = ["structlog.getLogger(*args, **initial_values) -> BoundLogger: Return a logger; "
                "alias of structlog.get_logger for those who prefer CamelCase."]
    answer = ("To get a logger in structlog, you can use the `structlog.getLogger` function.\n\n```python\n"
              "import structlog\n\nlogger = structlog.getLogger('my_logger')\nlogger.info(\"This is a log entry\")\n"
              "```\n\nIn this example, `structlog.getLogger('my_logger')` retrieves the logger named 'my_logger'. "
              "It then logs \"This is a log entry\".")
    assert example_strings(answer) == ["my_logger", "This is a log entry"]
    g = check(answer, "How do I get a logger in structlog?", passages)
    assert g.grounded, g
    assert "my_logger" in g.claims  # still a claim, supported by the example that writes it


def test_an_examples_numbers_and_names_it_only_uses_still_need_the_passages():
    # an invented default stays unsupported though the example writes it; a string only in the prose does too
    answer = ("The default timeout is `30` seconds:\n\n```python\nclient = Client(timeout=30, name='x')\n```\n"
              "Its name is 'primary'.")
    g = check(answer, "What is the default timeout of Client?", ["Client(timeout=None): no timeout by default."])
    assert g.unsupported == ("30", "primary")
    # a call the example makes word for word: its function and keyword names must still be the documents'
    docs = ["json.dumps(obj, *, skipkeys=False, sort_keys=False, indent=None): Serialize obj to a JSON str."]
    q = "How do I limit the nesting depth of json.dumps?"
    invented = "Use `json.dumps(obj, maxdepth=3)`:\n\n```python\njson.dumps(obj, maxdepth=3)\n```"
    assert check(invented, q, docs).unsupported == ("json.dumps(obj, maxdepth=3)",)
    right = "Use `json.dumps(data, sort_keys=True)`:\n\n```python\njson.dumps(data, sort_keys=True)\n```"
    assert check(right, "How do I sort the keys?", docs).grounded
    # a call in a sentence, no example: the documents' function and keyword with a value of its own is grounded,
    # an invented keyword is not
    assert check("Use `json.dumps(data, sort_keys=True)`.", "How do I sort the keys?", docs).grounded
    assert check("Use `json.dumps(obj, maxdepth=3)`.", q, docs).unsupported == ("json.dumps(obj, maxdepth=3)",)
    only = ("Pass `only`:\n\n```python\nalbum.dump(obj, only=['release_date', 'title'])\n```\n"
            "Here `['release_date', 'title']`.")
    assert check(only, "How do I serialize some fields?", ["Schema.dump(obj, *, many=None); Schema(only=...)"]).grounded
    assert example_strings("no example, `f('x')` inline") == []
    # escapes kept, empty strings left out
    assert example_strings("```python\nprint('it\\'s', \"\")\n```") == ["it\\'s"]


def test_an_ordered_lists_numbers_count_steps_and_are_not_claims():
    # Qwen2.5-Coder-0.5B's how-to answer over structlog's docs, refused for '1' and '3' (its steps' numbers)
    docs = ["structlog.dev.ConsoleRenderer: render the event dict as colorful, human-readable lines."]
    answer = ("Here's how:\n\n1. **Install structlog**: `pip install structlog`.\n2) Configure it:\n"
              "   ```python\n   structlog.configure(processors=[structlog.dev.ConsoleRenderer()])\n   ```\n"
              "3. Log: the `ConsoleRenderer` prints colors.")
    g = check(answer, "How do I print colorful log output?", docs)
    assert not any(c.isdigit() for c in g.claims), g
    assert check("It retries 3 times.", "How often does it retry?", docs).unsupported == ("3",)  # a number in a sentence


def test_a_symbol_standing_alone_is_a_value_the_passages_must_hold():
    # Qwen2.5-Coder-0.5B's right answer over Click's docs, refused as a restated question before
    q = "Which special file name makes click.File read from stdin or write to stdout?"
    answer = "The special file name that makes click.File read from stdin or write to stdout is -."
    assert check(answer, q, ["The special value - means stdin or stdout, depending on the mode."]).grounded
    assert check(answer, q, ["Files are opened lazily; a non-existing path is an error."]).unsupported == ("-",)
    assert check("It is the file name -", q, ["dash-separated names"]).unsupported == ("-",)  # not inside a word


def test_a_plural_written_with_s_in_brackets_is_a_word_not_a_call():
    # "variable(s)" is how the question wrote the plural: an answer repeating it restates the question
    q = "Which keyword of click.argument names the environment variable(s) the argument may be read from?"
    g = check("The keyword of click.argument names the environment variable(s) the argument may be read from.", q,
              ["click.argument(..., envvar=None): the environment variable(s) to read the value from"])
    assert g.claims == () and g.restates_question


def test_a_symbol_the_question_holds_needs_no_support():
    q = "Which attribute holds the binary operator symbols, such as **, that should be intercepted?"
    assert check("The `intercepted_binops` attribute holds symbols such as **.", q, ["intercepted_binops"]).grounded


def test_a_claim_is_a_word_of_the_question_in_any_case_and_only_as_a_whole_token():
    question = "How do I cancel a task on the Event Loop?"
    assert names_claim(question, "loop") and names_claim(question, "cancel()")
    assert not names_claim(question, "loops") and not names_claim(question, "asyncio.loop")
    assert not names_claim(question, "()")


def test_a_name_with_a_capitalized_run_is_a_claim_and_a_plural_acronym_is_not():
    # `loom chat` over Werkzeug's docs, shown the Headers entry: the invented ORM was let through for want of a claim
    q = "Does Werkzeug include an ORM for talking to databases?"
    answer = "Yes, Werkzeug does include an ORM for talking to databases. The ORM is called SQLAlchemy."
    assert check(answer, q, ["werkzeug.datastructures.Headers: an object that stores some headers."]).unsupported == (
        "SQLAlchemy",)
    assert check("It raises an HTTPException for URLs and IDs it cannot route.", "What does it raise?",
                 ["werkzeug.exceptions.HTTPException"]).grounded
