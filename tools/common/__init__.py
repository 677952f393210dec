"""What several tools share: tolerances and error metrics, seeds, device peaks, provenance, statistics, diffs."""
