"""The stages one request goes through: identify the conversation, repair the history, sanitize what cannot be
verified."""
