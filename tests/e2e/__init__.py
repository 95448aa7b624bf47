"""End-to-end tests with real boot clients (see docs/testing.md)."""
