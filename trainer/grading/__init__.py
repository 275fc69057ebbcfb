"""Graders: arithmetic (units, tolerance, error carried forward) and rubric (issue 5)."""
