"""The continuation: what a conversation's previous request found, carried to its next (replay memo, splice, records in
flight)."""
