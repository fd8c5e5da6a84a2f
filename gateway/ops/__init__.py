"""Operations: metrics, and the request's log line and trace (``telemetry``)."""
