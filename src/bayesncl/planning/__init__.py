"""Before a grid runs: its GPU-hours and submissions (`estimate`) and the seeds each claim needs (`plan`)."""
