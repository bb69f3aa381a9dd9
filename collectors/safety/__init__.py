"""What keeps the server unharmed: breakpoint checks and their guard, the code check, guard processes."""
