"""What every app uses and nothing of ours: rate limits, the Redis client, SSE streaming."""
