"""Transport: the upstream client, retries, error classification, and stream translation and relay."""
