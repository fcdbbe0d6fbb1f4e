"""The one place that reads private JAX state (no public API says it)."""
