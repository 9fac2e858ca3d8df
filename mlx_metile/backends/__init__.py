"""Backends: building artifacts into what a device runs (CUDA binaries, emulator objects) and
launching them (the CUDA launch plans; the C++ primitive for the CPU, emulator and Metal)."""
