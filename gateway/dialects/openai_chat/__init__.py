"""The OpenAI chat completions client dialect: request, messages and stream codecs."""
