"""Turning a checked op into files: template context, rendering, and safe writing (`write`)."""
