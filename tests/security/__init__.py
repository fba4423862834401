"""Security regression tests: credentials act only as what they were issued to."""
