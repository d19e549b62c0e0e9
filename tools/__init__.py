"""tools for developing this repository (not shipped)."""
