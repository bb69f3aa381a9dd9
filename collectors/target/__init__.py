"""The target binary: symbols, ELF, C++ names, debug info (local and debuginfod), addresses to names."""
