"""The Responses API: a ``/v1/responses`` request → a chat completion on the engine → Responses shapes."""
