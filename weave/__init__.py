"""Weave: Django apps that run background jobs safely when two workers reach for the same job."""
