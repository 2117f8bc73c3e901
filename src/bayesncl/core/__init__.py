"""The package's floor: its errors and exit codes, atomic writes, each job's start-up record, YAML files and --set items.
Standard library and PyYAML only; imports nothing of the package above it."""
