"""Operations: metrics, logs, tracing."""
