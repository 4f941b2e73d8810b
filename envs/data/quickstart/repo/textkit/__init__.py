"""textkit: small, dependency-free text utilities."""

from textkit.case import camel_case, kebab_case, snake_case
from textkit.duration import format_duration, parse_duration
from textkit.ranges import format_ranges, parse_ranges
from textkit.slug import slugify
from textkit.wrap import fill, truncate, wrap

__version__ = "0.3.1"

__all__ = [
    "camel_case",
    "fill",
    "format_duration",
    "format_ranges",
    "kebab_case",
    "parse_duration",
    "parse_ranges",
    "slugify",
    "snake_case",
    "truncate",
    "wrap",
]
