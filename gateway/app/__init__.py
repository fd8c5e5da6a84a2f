"""The application: settings, the app factory and its dependencies, the server and the command line."""
