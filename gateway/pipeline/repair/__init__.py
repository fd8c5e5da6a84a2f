"""Repair: replayed assistant turns back to their recorded form, and the rules that keep a history valid."""
