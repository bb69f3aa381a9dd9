"""What the kernel sees of the target: off-CPU waits, I/O system calls, /proc's process figures."""
