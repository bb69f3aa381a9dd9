"""Performance Schema: the collector, its setup and restore, thread mapping, the lease and guard, the connection."""
