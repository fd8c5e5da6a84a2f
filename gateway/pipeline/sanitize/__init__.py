"""Sanitize: what cannot be verified is degraded, never forged, and the thinking config kept consistent."""
