"""What a run may be set to: the registry of names (methods, datasets, sections) and their traits, plugins, each key's
rule, and the typed run config."""
