"""`make bench`: speed figures measured side by side in one run (ratios are what count)."""
