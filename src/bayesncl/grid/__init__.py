"""The workflow config expanded into runs (`expand`), and what reads a grid's runs: the pre-flight of their datasets,
the runs trained otherwise (`stale`), the grid's progress (`status`)."""
