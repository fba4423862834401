"""Test support: throwaway servers, processes and helpers shared by tests and benchmarks."""
