"""The team gateway: gateway keys (``keys``), their admission and limits on every request (``admission``), and the
admin surfaces' guard (``guard``)."""
