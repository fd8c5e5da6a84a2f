"""Identify: the tenant, the conversation (header, tool ids, fingerprints) and where each replayed message sits."""
