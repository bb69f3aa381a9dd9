"""The uprobe latency collector: its BPF session, the per-cycle counts, the probes' calibrated cost, the target's progress counter."""
