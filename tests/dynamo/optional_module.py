"""Imported by ``unguarded_program.py`` only where ``UNGUARDED`` is unset (an optional
dependency one process has and another does not)."""
