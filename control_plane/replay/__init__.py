"""Trace replay: drives the scheduling core with pre-warm policies in virtual time."""
