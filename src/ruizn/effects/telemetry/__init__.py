"""Telemetry: a run's spans sent to an OpenTelemetry collector."""
