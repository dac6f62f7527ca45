"""The package version, in its own module so the CLI can read it without importing torch."""

__version__ = "0.1.0"
