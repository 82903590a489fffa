"""The benchmark pipeline without pytest: the compile cache, a benchmark to its record, training to a
target."""
