"""The chaos audit (issue 5): run real workers under faults and check every invariant."""
