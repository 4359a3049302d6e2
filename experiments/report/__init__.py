"""Reports of sweeps: the HTML report, plots, summaries, comparisons and rank correlations."""
