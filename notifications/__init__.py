"""Push notifications delivered in fenced batches through an HTTP provider."""
