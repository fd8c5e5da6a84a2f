"""ASGI entry point for hypercorn workers: settings from the environment."""

from gateway.app.factory import create_app
from gateway.app.settings import Settings
from gateway.ops import telemetry

settings = Settings.from_env()
telemetry.configure(settings.log_level, settings.log_format)  # every hypercorn worker process
app = create_app(settings)
