"""Tools over a store, run from the command line: bundles, pruning, reports, the doctor,
the demo, the statistics record."""
