"""The rules, the analysis they share, and the pipeline that runs them over files (``run``)."""
