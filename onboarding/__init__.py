"""Supplier onboarding: fenced multi-step runs with heartbeats and receipts."""
