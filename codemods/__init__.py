"""The rules, the analysis they share, and the engine that runs them over files."""
