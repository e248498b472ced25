"""Fakes that speak real protocols over real sockets (no mocks of our own code)."""
