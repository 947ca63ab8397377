"""The package version, in a module of its own so that what records it (cache/versions.py) need not import the
package facade. pyproject.toml carries the same number."""

__version__ = "0.1.0"
