"""The record path: a probe plan, collectors composed into one window, and
the capture they make (commands -> recorder -> collectors -> probes)."""
