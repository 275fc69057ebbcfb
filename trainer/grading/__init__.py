"""Graders: arithmetic (units, tolerance, error carried forward) and rubric (issue 5), and
the registry that says which one grades a question (registry.py)."""
