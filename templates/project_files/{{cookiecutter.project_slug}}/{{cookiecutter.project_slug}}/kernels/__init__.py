"""Kernels of the operators, one file per op and device. These files are yours: opgen creates each once."""
