"""The upstream dialects: the registry of what each upstream needs (``registry``, ``entry``), the routing table
(``routing``), how each is called (``transport``), and one subpackage per dialect or OpenAI-compatible flavor.

This package is the only place that names an upstream kind or flavor; the shared code asks the entry of a route.
Importing it loads nothing (the registry is imported where it is read)."""
