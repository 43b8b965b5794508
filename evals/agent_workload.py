"""The synthetic agent workload ``loom bench agents`` runs on Loom and on its peer (one definition for both).

Sessions ask :data:`QUESTIONS` in turn (``(s + t) % len``); tool latencies and user think times are drawn
from a log-normal distribution around a median (sigma 0.5) by :func:`draw_ms`, from one seeded
``random.Random`` per session, in the same order on every system, so every system waits the same.
"""

from __future__ import annotations

import math
import random

QUESTIONS = [
    "How do I run coroutines concurrently?", "How does json.dumps sort keys?", "What does OrderedDict.move_to_end do?",
    "How can I cancel a task?", "How do I read a file line by line?", "What is a deque good for?",
    "How do I parse command line options?", "How does a Counter count items?",
]
SIGMA = 0.5  # of the log-normal latencies


def question(session: int, turn: int) -> str:
    """Session ``session``'s question at ``turn`` (numbered so no two prompts are the same)."""
    return f"{QUESTIONS[(session + turn) % len(QUESTIONS)]} (session {session}, turn {turn})"


def session_rng(seed: int, session: int) -> random.Random:
    """The latency generator of one session."""
    return random.Random(seed * 1000 + session)


def draw_ms(rng: random.Random, median_ms: float) -> float:
    """One latency (ms), log-normal around ``median_ms``; 0 for a median of 0."""
    return median_ms * math.exp(rng.gauss(0.0, SIGMA)) if median_ms > 0 else 0.0
