"""Fakes standing in for the outside world in tests (upstream LLM providers)."""
