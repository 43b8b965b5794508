"""The numbers a question states as a quantity with a unit, in every unit of the quantity's dimension.

"How do I make a signed token stop being accepted after an hour?" is answered right by "set ``max_age``
to 3600 seconds": ``3600`` is the question's hour in seconds, a number the answer may write though no
passage holds it, as it may write a number the question holds (:mod:`loom.orchestrator.grounding`).
:func:`stated_numbers` gives those numbers: each quantity of the question (a number, a number word up
to twelve, or "a"/"an", then a unit of time or of size: "an hour", "30 minutes", "two days", "1 MB",
"512 KiB") converted into every unit of its dimension, kept where the result is a whole number or has
at most three decimals (an hour: ``1`` hour, ``60`` minutes, ``3600`` seconds, ``3600000``
milliseconds).  A decimal size prefix (KB, MB, GB) is read both ways, as powers of 1,000 and of 1,024,
since documentation writes either.

A number the question does not state this way is still a claim the passages must hold: asked "What is
the default timeout in seconds of pathlib.Path.read_text?" (none exists), "3600" is not the question's.
"""

from __future__ import annotations

import re
from decimal import Decimal
from functools import lru_cache

#: Seconds per unit of time, by every spelling a question uses (one factor each; a tuple as :data:`BYTES`).
SECONDS: dict[str, tuple[Decimal, ...]] = {
    **dict.fromkeys(("millisecond", "milliseconds", "ms"), (Decimal("0.001"),)),
    **dict.fromkeys(("second", "seconds", "sec", "secs", "s"), (Decimal(1),)),
    **dict.fromkeys(("minute", "minutes", "min", "mins"), (Decimal(60),)),
    **dict.fromkeys(("hour", "hours", "hr", "hrs", "h"), (Decimal(3600),)),
    **dict.fromkeys(("day", "days"), (Decimal(86400),)),
    **dict.fromkeys(("week", "weeks"), (Decimal(604800),)),
}
#: Bytes per unit of size; a decimal prefix (``KB``) maps to both its readings.
BYTES: dict[str, tuple[Decimal, ...]] = {
    **dict.fromkeys(("byte", "bytes", "b"), (Decimal(1),)),
    **dict.fromkeys(("kb", "kilobyte", "kilobytes"), (Decimal(1000), Decimal(1024))),
    **dict.fromkeys(("kib", "kibibyte", "kibibytes"), (Decimal(1024),)),
    **dict.fromkeys(("mb", "megabyte", "megabytes"), (Decimal(1000) ** 2, Decimal(1024) ** 2)),
    **dict.fromkeys(("mib", "mebibyte", "mebibytes"), (Decimal(1024) ** 2,)),
    **dict.fromkeys(("gb", "gigabyte", "gigabytes"), (Decimal(1000) ** 3, Decimal(1024) ** 3)),
    **dict.fromkeys(("gib", "gibibyte", "gibibytes"), (Decimal(1024) ** 3,)),
}
_WORDS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
          "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12}
_UNITS = "|".join(sorted(map(re.escape, {*SECONDS, *BYTES}), key=len, reverse=True))
_QUANTITY = re.compile(rf"(?<![\w.])(?P<amount>\d+(?:\.\d+)?|{'|'.join(_WORDS)})[ -]?(?P<unit>{_UNITS})(?!\w)",
                       re.I)
_PLACES = Decimal("0.001")


def _written(value: Decimal) -> str | None:
    """``value`` as a number is written (``3600``, ``0.5``), or ``None`` past three decimals."""
    if value != value.quantize(_PLACES):
        return None
    return format(value.normalize(), "f")


def _in_every_unit(amount: Decimal, per_unit: tuple[Decimal, ...], table: dict[str, tuple[Decimal, ...]]) -> set[str]:
    """``amount`` units of ``per_unit`` base units each (every reading of the unit), written in every unit of
    ``table``."""
    factors = {f for fs in table.values() for f in fs}
    return {w for base in per_unit for f in factors if (w := _written(amount * base / f)) is not None}


@lru_cache(maxsize=256)
def stated_numbers(question: str) -> frozenset[str]:
    """The numbers (as written: ``3600``, ``0.5``) that ``question``'s quantities of time and size come to
    in every unit of their dimension (module docstring); empty when it states none."""
    out: set[str] = set()
    for m in _QUANTITY.finditer(question):
        word = m["amount"].lower()
        unit = m["unit"].lower()
        if word in _WORDS and len(unit) <= 2:  # "a s", "an h": a letter, not a unit
            continue
        amount = Decimal(_WORDS[word]) if word in _WORDS else Decimal(m["amount"])
        table = SECONDS if unit in SECONDS else BYTES
        out |= _in_every_unit(amount, table[unit], table)
    return frozenset(out)


def states_number(question: str, number: str) -> bool:
    """Whether ``number`` (digits, a decimal point allowed) is one of ``question``'s :func:`stated_numbers`."""
    try:
        value = Decimal(number)
    except ArithmeticError:
        return False
    written = _written(value)
    return written is not None and written in stated_numbers(question)
