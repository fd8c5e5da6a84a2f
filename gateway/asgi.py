"""ASGI entry point for hypercorn workers: settings from the environment."""

from gateway import logs
from gateway.app import create_app
from gateway.settings import Settings

settings = Settings.from_env()
logs.configure(settings.log_level, settings.log_format)  # every hypercorn worker process
app = create_app(settings)
