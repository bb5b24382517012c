"""Studies: variants x seeds as cached DVC stages, and their reports (docs/studies.md)."""
