"""Chat completions: request → prompt tokens + ``SamplingParams`` → engine → OpenAI shapes."""
