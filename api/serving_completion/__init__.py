"""``/v1/completions`` (OpenAI legacy completions): request reading (``prompts``) and output shaping (``run``)."""
