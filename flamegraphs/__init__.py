"""Flame graph data: folded stacks (`frame;frame;frame count`), the format
FlameGraph's flamegraph.pl and inferno read."""
