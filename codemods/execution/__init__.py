"""Running user code: the runner (the only place that executes it), fixture verification and diagnosis."""
